//! The `volumerestores.iar.dev` resource: one restored pod's volume to
//! fill from its file-system backup, asked of the node agent on the pod's
//! node (Velero's PodVolumeRestore). The controller creates it once the
//! restored pod is scheduled, and reads its status; `iar node-agent` on
//! that node writes the data into the pod's volume, then the file the
//! pod's `restore-wait` init container waits for.

use super::volume_backup::PodReference;
use iar_backup::backup::volumes::VolumePhase;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The label naming the restore a request belongs to.
pub const RESTORE_LABEL: &str = "iar.dev/restore";

/// What to restore, and where.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "iar.dev",
    version = "v1",
    kind = "VolumeRestore",
    namespaced,
    status = "VolumeRestoreStatus",
    shortname = "iarvr",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.node"}"#,
    printcolumn = r#"{"name":"Bytes","type":"integer","jsonPath":".status.bytesDone"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VolumeRestoreSpec {
    /// The iar Restore this volume belongs to, and its uid: the agent
    /// writes only for a running Restore of that uid (rule
    /// `restore-fence`), and the done file it writes last is named by it.
    pub restore_name: String,
    pub restore_uid: String,
    /// The backup whose volume backup holds the data.
    pub backup_name: String,
    /// The store the data is in (the controller's `--store`); an agent
    /// with another store refuses the request.
    pub backup_storage_location: String,
    /// The node whose agent does the work (the pod's `spec.nodeName`).
    pub node: String,
    /// The restored pod, which must wait for this restore's data (its
    /// first init container, `restore-wait`, naming the restore's uid).
    pub pod: PodReference,
    /// The volume's name in the pod's spec.
    pub volume: String,
    /// The backed-up pod the data is of: its namespace (whose repository
    /// holds the data) and name.
    pub source_namespace: String,
    pub source_pod: String,
}

/// What the agent reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeRestoreStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<VolumePhase>,
    #[serde(default)]
    pub files: u64,
    #[serde(default)]
    pub bytes_done: u64,
    /// Why it failed; or what did not come back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Files that could not be restored, and what the backup left out:
    /// warnings of the Restore.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The directory the agent wrote into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<String>,
}

/// The request's name: the restore's (as far as it fits), then a digest
/// of the restore's uid, the pod's uid and the volume: asking again finds
/// the same request, and no two pods or restores share one.
pub fn request_name(restore: &str, restore_uid: &str, pod_uid: &str, volume: &str) -> String {
    let digest = hex::encode(Sha256::digest(
        format!("{restore}\n{restore_uid}\n{pod_uid}\n{volume}").as_bytes(),
    ));
    let prefix: String = restore.chars().take(63 - 25).collect();
    format!("{}-{}", prefix.trim_end_matches(['-', '.']), &digest[..24])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_named_once_per_restore_pod_and_volume() {
        let a = request_name("r", "u", "p", "data");
        assert_eq!(a, request_name("r", "u", "p", "data"));
        assert_ne!(a, request_name("r", "u", "p", "logs"));
        assert_ne!(a, request_name("r", "u", "q", "data"));
        assert_ne!(a, request_name("r", "v", "p", "data"));
        assert!(request_name(&"r".repeat(200), "u", "p", "v").len() <= 63);
    }
}
