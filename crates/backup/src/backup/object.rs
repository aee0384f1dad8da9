//! The persisted shape of a backup, as Velero writes it: the Backup object
//! (`velero-backup.json`) and the results file (`<name>-results.gz`).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::SystemTime;

/// Velero's backup phases.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum BackupPhase {
    #[default]
    New,
    InProgress,
    WaitingForPluginOperations,
    WaitingForPluginOperationsPartiallyFailed,
    Finalizing,
    FinalizingPartiallyFailed,
    Completed,
    PartiallyFailed,
    Failed,
    /// Expired and being removed from the store (Velero's phase of that
    /// name): written before any of its files goes, so that a sweep that
    /// finds it finishes the deletion. Nothing drives such a backup.
    Deleting,
}

impl BackupPhase {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            BackupPhase::Completed | BackupPhase::PartiallyFailed | BackupPhase::Failed
        )
    }

    /// New through finalizing: a process drives it, or did until it died
    /// (a step takes it on). Neither terminal nor `Deleting`.
    pub fn is_running(self) -> bool {
        !(self.is_terminal() || self == BackupPhase::Deleting)
    }

    /// The waiting phase for a backup that has (or has not) had errors.
    pub fn waiting(partially_failed: bool) -> Self {
        if partially_failed {
            BackupPhase::WaitingForPluginOperationsPartiallyFailed
        } else {
            BackupPhase::WaitingForPluginOperations
        }
    }

    pub fn finalizing(partially_failed: bool) -> Self {
        if partially_failed {
            BackupPhase::FinalizingPartiallyFailed
        } else {
            BackupPhase::Finalizing
        }
    }
}

impl std::fmt::Display for BackupPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// RFC 3339, as Kubernetes writes times.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    pub total_items: u64,
    pub items_backed_up: u64,
}

/// Also the `status` of the `backups.iar.dev` resource: the same fields
/// Velero's Backup status has, with the same names.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct BackupStatus {
    pub version: u32,
    pub format_version: String,
    pub phase: BackupPhase,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<String>,
    /// RFC 3339: creation + `spec.ttl` (Velero's field); garbage
    /// collection deletes the backup once it has passed and the backup
    /// has ended. Absent on backups stored before iar had expiry: those
    /// never expire.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration: Option<String>,
    pub errors: u64,
    pub warnings: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub failure_reason: String,
    pub progress: Progress,
    pub backup_item_operations_attempted: u64,
    pub backup_item_operations_completed: u64,
    pub backup_item_operations_failed: u64,
    /// Velero's `status.hookStatus`: the hooks run and how many of them
    /// failed. Absent when the backup ran no hook.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook_status: Option<HookStatusCounts>,
    /// iar's pod volume backups as they go (Velero reports them only as
    /// PodVolumeBackup objects): how many, how they ended, bytes done of
    /// bytes in all. Absent when the backup backs up no volume.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_backups: Option<VolumeBackupCounts>,
}

/// The volume backups of a backup, counted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct VolumeBackupCounts {
    pub attempted: u64,
    pub completed: u64,
    pub failed: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
}

/// How many backup hooks ran, and failed (a non-zero exit, a timeout or an
/// error starting them). Hooks recorded as skipped did not run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct HookStatusCounts {
    pub hooks_attempted: u64,
    pub hooks_failed: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// RFC 3339, when the backup was created (the CREATED column of
    /// `velero backup get`). Absent on backups stored before iar wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `velero-backup.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupObject {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: Value,
    pub status: BackupStatus,
}

/// Where iar records the manifest paths that act as the cluster, so that
/// `iar resume` can read post-operation items again.
pub const SOURCES_ANNOTATION: &str = "iar.dev/item-sources";

/// Whether an annotation of a Backup is iar's own bookkeeping
/// (`iar.dev/...`), never the user's: a plugin reading the whole Backup
/// does not see them, and a user's on the resource are not recorded
/// (`iar resume` acts on the recorded ones).
pub fn is_iar_annotation(key: &str) -> bool {
    key.starts_with("iar.dev/")
}

/// Where `iar backup` records its `--config` settings, so that `iar resume`
/// finalizes with the same plugin settings.
pub const CONFIG_ANNOTATION: &str = "iar.dev/plugin-config";

/// Recorded on the persisted backup: the uid of the resource it was made
/// for, so a later resource of the same name is not mistaken for it.
pub const RESOURCE_UID_ANNOTATION: &str = "iar.dev/resource-uid";

impl BackupObject {
    /// The uid the backup's work outside the store is tagged with (its
    /// volume requests, its repository snapshots): its Backup resource's
    /// in a cluster, else its own.
    pub fn work_uid(&self) -> &str {
        self.metadata
            .annotations
            .get(RESOURCE_UID_ANNOTATION)
            .map_or(&self.metadata.uid, |uid| uid)
    }

    pub fn new(name: &str, namespace: &str, uid: &str, spec: Value) -> Self {
        BackupObject::new_at(name, namespace, uid, spec, std::time::SystemTime::now())
    }

    /// As [`BackupObject::new`], created at `created` (the phase machine's
    /// clock).
    pub fn new_at(
        name: &str,
        namespace: &str,
        uid: &str,
        spec: Value,
        created: std::time::SystemTime,
    ) -> Self {
        BackupObject {
            api_version: "velero.io/v1".into(),
            kind: "Backup".into(),
            metadata: ObjectMeta {
                name: name.into(),
                namespace: namespace.into(),
                uid: uid.into(),
                creation_timestamp: Some(rfc3339(created)),
                labels: BTreeMap::new(),
                annotations: BTreeMap::new(),
            },
            spec,
            status: BackupStatus {
                version: 1,
                format_version: "1.1.0".into(),
                ..BackupStatus::default()
            },
        }
    }
}

pub use iar_core::results::{ResultSet, Results};
