//! The `volumebackups.iar.dev` resource: one pod volume's file-system
//! backup, asked of the node agent on the pod's node (Velero's
//! PodVolumeBackup, with its field names where they exist). The
//! controller creates it and reads its status; `iar node-agent` on that
//! node does the work and writes the status.

use iar_backup::backup::volumes::{SkippedEntry, VolumePhase};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The label naming a request's node (see [`node_label`]); an agent
/// watches only its own node's requests.
pub const NODE_LABEL: &str = "iar.dev/node";
/// The label naming the backup a request belongs to.
pub const BACKUP_LABEL: &str = "iar.dev/backup";

/// What to back up.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "iar.dev",
    version = "v1",
    kind = "VolumeBackup",
    namespaced,
    status = "VolumeBackupStatus",
    shortname = "iarvb",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.node"}"#,
    printcolumn = r#"{"name":"Bytes","type":"integer","jsonPath":".status.progress.bytesDone"}"#,
    printcolumn = r#"{"name":"Total","type":"integer","jsonPath":".status.progress.totalBytes"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VolumeBackupSpec {
    /// The iar Backup this volume belongs to.
    pub backup_name: String,
    /// That Backup's uid: a Backup re-created under the same name is
    /// another backup, with other requests.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub backup_uid: String,
    /// The store the data goes to (the controller's `--store`); an agent
    /// with another store refuses the request.
    pub backup_storage_location: String,
    /// The node whose agent does the work (the pod's `spec.nodeName`).
    pub node: String,
    pub pod: PodReference,
    /// The volume's name in the pod's spec.
    pub volume: String,
    /// The claim, for a PVC volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<String>,
    /// The volume's directory name under the kubelet's
    /// `pods/<uid>/volumes/<plugin>/`: the bound PV's name for a PVC, the
    /// volume's name otherwise.
    pub volume_dir: String,
    /// Set by the controller to stop the backup (a canceled or deleted
    /// Backup); the agent ends it Canceled.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodReference {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// What the agent reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeBackupStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<VolumePhase>,
    #[serde(default)]
    pub progress: VolumeBackupProgress,
    /// Where the volume's manifest is in the store, once Completed.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "snapshotID"
    )]
    pub snapshot_id: Option<String>,
    /// Why it failed or was canceled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What the backup left out, each with its rule (the first
    /// [`SKIPPED_SHOWN`](iar_backup::backup::volumes::SKIPPED_SHOWN);
    /// all of them are listed in the store): warnings of the Backup.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedEntry>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_total: u64,
    /// The directory the agent read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<String>,
    /// Written with every report, and at least every few seconds while in
    /// progress: the agent is alive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeBackupProgress {
    #[serde(default)]
    pub total_bytes: u64,
    #[serde(default)]
    pub bytes_done: u64,
    /// Entries walked, read or not: an incremental backup compares
    /// unchanged files for minutes without reading a byte, and the
    /// controller must see that as work.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub files_done: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A node's name as a label value: itself when it is one (63 characters
/// or fewer of `[A-Za-z0-9._-]`, alphanumeric at both ends), otherwise a
/// digest of it (node names may be 253 characters long).
pub fn node_label(node: &str) -> String {
    iar_core::names::label_value(node)
}

/// The request's name: the backup's (as far as it fits, to be read), then
/// a digest of the backup's full name and uid and of the pod's namespace,
/// name and uid and the volume. Asking again (a retried block, a resumed
/// backup) finds the same request; two backups whose names share a long
/// prefix, a backup re-created under an old name, or a pod re-created
/// under its old name never do.
pub fn request_name(backup: &str, backup_uid: &str, pod: &PodReference, volume: &str) -> String {
    let digest = hex::encode(Sha256::digest(
        format!(
            "{backup}\n{backup_uid}\n{}\n{}\n{}\n{volume}",
            pod.namespace, pod.name, pod.uid
        )
        .as_bytes(),
    ));
    let prefix: String = backup.chars().take(63 - 25).collect();
    format!("{}-{}", prefix.trim_end_matches(['-', '.']), &digest[..24])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, uid: &str) -> PodReference {
        PodReference {
            namespace: ns.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn a_request_is_named_once_per_pod_volume() {
        let db0 = pod("shop", "db-0", "u0");
        let a = request_name("nightly", "b-uid", &db0, "data");
        assert_eq!(a, request_name("nightly", "b-uid", &db0, "data"));
        assert_ne!(a, request_name("nightly", "b-uid", &db0, "logs"));
        assert_ne!(
            a,
            request_name("nightly", "b-uid", &pod("shop", "db-1", "u1"), "data")
        );
        assert!(a.starts_with("nightly-") && a.len() <= 63, "{a}");
        let long = request_name(&"b".repeat(200), "u", &pod("ns", "p", "u"), "v");
        assert!(long.len() <= 63, "{long}");
    }

    /// Two backups whose names share their first 60 characters, a backup
    /// re-created under its old name (a new uid), and a pod re-created
    /// under its old name each get a request of their own: none reuses
    /// another's finished request and reports Completed for nothing read.
    #[test]
    fn backups_sharing_a_long_prefix_or_a_name_never_share_a_request() {
        let p = pod("shop", "db-0", "u0");
        let stem = "n".repeat(60);
        let (one, two) = (format!("{stem}-monday"), format!("{stem}-tuesday"));
        assert_ne!(
            request_name(&one, "uid-1", &p, "data"),
            request_name(&two, "uid-2", &p, "data")
        );
        assert_ne!(
            request_name("nightly", "uid-1", &p, "data"),
            request_name("nightly", "uid-2", &p, "data")
        );
        assert_ne!(
            request_name("nightly", "uid-1", &p, "data"),
            request_name("nightly", "uid-1", &pod("shop", "db-0", "u9"), "data")
        );
    }

    #[test]
    fn a_long_or_odd_node_name_becomes_a_valid_label() {
        assert_eq!(node_label("kwok-a"), "kwok-a");
        let long = node_label(&format!("{}.example.com", "n".repeat(70)));
        assert!(long.starts_with("sha256-") && long.len() <= 63, "{long}");
        assert!(node_label("-odd").starts_with("sha256-"));
    }
}
