//! Volume backups: a pod volume's file-system backup as a tracked piece of
//! work (progress in bytes, a terminal phase), done by a [`VolumeBackupper`].
//!
//! The embedded [`LocalDirBackupper`] reads a volume's files from a local
//! directory (`--volume-data DIR`: `DIR/<namespace>/<pvc>` for a PVC volume,
//! `DIR/<namespace>/.pods/<pod>/<volume>` for any other; a PVC name cannot
//! start with a dot, so the two never collide) and writes them into the
//! store content-addressed and gzip'd, in chunks of [`CHUNK`] bytes:
//!
//! - `backups/<b>/volumes/data/<sha256 of the chunk>`: one object per
//!   distinct chunk, so identical content is stored once within a backup;
//! - `backups/<b>/volumes/manifests/<ns>/<pod>/<volume>.json.gz`: per volume,
//!   every entry's path, kind, mode, size, sha256 and chunk list;
//! - `backups/<b>/<b>-volumebackups.json.gz`: the records, beside the item
//!   operations.
//!
//! The data pool is per backup rather than shared across backups (kopia's
//! way): deleting a backup stays deleting its prefix, with no reference
//! counting or garbage collection to get wrong. Cross-backup dedup needs
//! that GC and is left for later.

use flate2::Compression;
use iar_core::item::ItemRef;
use iar_core::store::BackupStore;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use tokio::sync::watch;

/// Chunk size: bounds the memory one volume backup holds at once.
pub const CHUNK: usize = 4 << 20;

/// Where a pod volume's data lives under a `--volume-data` root.
///
/// Every name joined to the root is checked first by the rule Kubernetes
/// gives it (namespace and volume: DNS-1123 label; pod and claim: DNS-1123
/// subdomain), so a name from a pod manifest (`claimName: ../../..`) can
/// never point outside the root; one that breaks its rule is refused with
/// an error naming the name and the rule (`invalid-identifier`), which the
/// volume backup's error prefixes with the pod and the volume.
pub fn volume_dir(
    root: &Path,
    namespace: &str,
    pod: &str,
    volume: &str,
    pvc: Option<&str>,
) -> Result<PathBuf, String> {
    volume_root(root, namespace, pod, volume, pvc).map(|r| r.path())
}

/// [`volume_dir`] as a root opened beneath `root`: no component below it
/// may be a symlink (see [`handles`]).
pub fn volume_root(
    root: &Path,
    namespace: &str,
    pod: &str,
    volume: &str,
    pvc: Option<&str>,
) -> Result<VolumeRoot, String> {
    use iar_core::names::{dns_label, dns_subdomain};
    let checks = [
        (
            "namespace",
            namespace,
            dns_label(namespace),
            "DNS-1123 label",
        ),
        ("pod name", pod, dns_subdomain(pod), "DNS-1123 subdomain"),
        ("volume name", volume, dns_label(volume), "DNS-1123 label"),
    ];
    let claim = pvc.map(|c| ("claimName", c, dns_subdomain(c), "DNS-1123 subdomain"));
    for (what, value, verdict, rule) in checks.into_iter().chain(claim) {
        if let Err(why) = verdict {
            return Err(format!(
                "{what} {value:?} is not a {rule} ({why}); nothing is read for it (rule: invalid-identifier)"
            ));
        }
    }
    Ok(match pvc {
        Some(pvc) => VolumeRoot::new(root, &[namespace, pvc]),
        None => VolumeRoot::new(root, &[namespace, ".pods", pod, volume]),
    })
}

pub fn volume_backups_key(backup: &str) -> String {
    iar_core::store::BackupFile::VolumeBackups.key(backup)
}

pub fn data_key(backup: &str, sha: &str) -> String {
    format!("backups/{backup}/volumes/data/{sha}")
}

pub fn manifest_key(backup: &str, namespace: &str, pod: &str, volume: &str) -> String {
    format!("backups/{backup}/volumes/manifests/{namespace}/{pod}/{volume}.json.gz")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum VolumePhase {
    New,
    InProgress,
    Completed,
    Failed,
    Canceled,
}

impl VolumePhase {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            VolumePhase::Completed | VolumePhase::Failed | VolumePhase::Canceled
        )
    }
}

/// One pod volume's backup, as persisted and as shown by `describe`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeBackup {
    pub backup: String,
    pub pod_namespace: String,
    pub pod_name: String,
    pub volume: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<String>,
    pub phase: VolumePhase,
    pub bytes_done: u64,
    pub bytes_total: u64,
    #[serde(default, with = "rfc3339", skip_serializing_if = "Option::is_none")]
    pub created: Option<SystemTime>,
    #[serde(default, with = "rfc3339", skip_serializing_if = "Option::is_none")]
    pub started: Option<SystemTime>,
    #[serde(default, with = "rfc3339", skip_serializing_if = "Option::is_none")]
    pub completed: Option<SystemTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The manifest, once Completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_key: Option<String>,
    /// Entries walked so far, read or not: an incremental backup of an
    /// unchanged volume reads no byte for minutes while it compares
    /// every file with its parent, and that is work, not silence.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub files_done: u64,
    /// What the backup left out, each with its rule: the first
    /// [`SKIPPED_SHOWN`]; all of them are at [`skipped_key`]. Each is a
    /// warning of the backup and is printed by every restore of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedEntry>,
    /// How many entries were left out in all.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_total: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Left-out entries a record carries (and a request's status, and the
/// backup's warnings name one by one): enough to act on, bounded
/// whatever a volume holds (a million FIFOs stay one store object).
pub const SKIPPED_SHOWN: usize = 20;

impl VolumeBackup {
    /// Records `skipped` (all of what the volume backup left out): the
    /// first [`SKIPPED_SHOWN`] and the count.
    pub fn set_skipped(&mut self, skipped: &[SkippedEntry]) {
        self.skipped = skipped.iter().take(SKIPPED_SHOWN).cloned().collect();
        self.skipped_total = skipped.len() as u64;
    }

    /// One line per entry left out (`"path": reason (rule)`), and one
    /// for those the record does not list.
    pub fn skipped_lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .skipped
            .iter()
            .map(|s| format!("{:?}: {}", s.path, s.reason))
            .collect();
        let more = self.skipped_total.saturating_sub(self.skipped.len() as u64);
        if more > 0 {
            out.push(format!(
                "{more} more entries, listed at {}",
                skipped_key(
                    &self.backup,
                    &self.pod_namespace,
                    &self.pod_name,
                    &self.volume
                )
            ));
        }
        out
    }

    /// [`VolumeBackup::skipped_lines`] as the backup's warnings.
    pub fn skipped_warnings(&self) -> Vec<String> {
        self.skipped_lines()
            .into_iter()
            .map(|l| format!("volume backup {}: left out {l}", self.describe()))
            .collect()
    }

    /// Names the pod, the volume and the claim, for messages.
    pub fn describe(&self) -> String {
        let pvc = self
            .pvc
            .as_deref()
            .map(|p| format!(" (pvc {p})"))
            .unwrap_or_default();
        format!(
            "volume {}{pvc} of pod {}/{}",
            self.volume, self.pod_namespace, self.pod_name
        )
    }

    /// Why it did not complete, without the volume's description that the
    /// agent, the controller or the backupper may have put before it (each
    /// names the volume where the error arose): said once by whoever shows
    /// it.
    pub fn reason(&self) -> &str {
        let Some(mut error) = self.error.as_deref() else {
            return "no reason given";
        };
        let prefix = format!("{}: ", self.describe());
        while let Some(rest) = error.strip_prefix(&prefix) {
            error = rest;
        }
        error
    }
}

/// RFC 3339 timestamps, as the other persisted files write them.
pub mod rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::SystemTime;

    pub fn serialize<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&humantime::format_rfc3339_nanos(*t).to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SystemTime>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|s| humantime::parse_rfc3339_weak(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// What to back up: one volume of one pod.
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeRequest {
    pub backup: String,
    /// The Backup's uid when it has one (a cluster's; a manifest's has
    /// none): a repository snapshot carries it as a tag.
    pub backup_uid: String,
    pub pod: ItemRef,
    pub volume: String,
    pub pvc: Option<String>,
}

impl VolumeRequest {
    /// Its record as it starts: New, nothing read.
    pub fn record(&self) -> VolumeBackup {
        self.record_at(SystemTime::now())
    }

    /// [`VolumeRequest::record`], created at `created`.
    pub fn record_at(&self, created: SystemTime) -> VolumeBackup {
        VolumeBackup {
            backup: self.backup.clone(),
            pod_namespace: self.pod.namespace.clone(),
            pod_name: self.pod.name.clone(),
            volume: self.volume.clone(),
            pvc: self.pvc.clone(),
            phase: VolumePhase::New,
            bytes_done: 0,
            bytes_total: 0,
            created: Some(created),
            started: None,
            completed: None,
            error: None,
            manifest_key: None,
            files_done: 0,
            skipped: Vec::new(),
            skipped_total: 0,
        }
    }
}

/// A started volume backup: its progress as it changes, and cancel.
/// Waiting on it ([`VolumeHandle::finished`]) holds no thread.
pub struct VolumeHandle {
    progress: watch::Receiver<VolumeBackup>,
    cancel: watch::Sender<bool>,
}

impl VolumeHandle {
    /// A handle over a backup that runs elsewhere: `progress` carries its
    /// state, `cancel` asks it to stop.
    pub fn new(progress: watch::Receiver<VolumeBackup>, cancel: watch::Sender<bool>) -> Self {
        VolumeHandle { progress, cancel }
    }

    /// The latest state.
    pub fn progress(&self) -> VolumeBackup {
        self.progress.borrow().clone()
    }

    /// A receiver that sees every change, for whoever persists progress.
    pub fn watch(&self) -> watch::Receiver<VolumeBackup> {
        self.progress.clone()
    }

    /// Asks the backup to stop; it ends Canceled unless it already ended.
    pub fn cancel(&self) {
        self.cancel.send_replace(true);
    }

    /// Waits until the backup is Completed, Failed or Canceled.
    pub async fn finished(&self) -> VolumeBackup {
        let mut rx = self.progress.clone();
        let ended = rx
            .wait_for(|v| v.phase.is_terminal())
            .await
            .map(|v| v.clone());
        match ended {
            Ok(v) => v,
            // The worker is gone without a terminal state (it panicked).
            Err(_) => {
                let mut v = rx.borrow().clone();
                v.phase = VolumePhase::Failed;
                v.error = Some(format!("{}: the volume backupper stopped", v.describe()));
                v
            }
        }
    }
}

/// Backs up pod volumes. `start` returns at once; the work runs on the
/// runtime (and on blocking threads for file reads) and reports through the
/// handle.
#[async_trait::async_trait]
pub trait VolumeBackupper: Send + Sync {
    async fn start(&self, request: VolumeRequest) -> VolumeHandle;

    /// Asks every unfinished volume backup of `backup` to stop, including
    /// ones another process started (the backup is canceled: its Backup
    /// resource was deleted). Work held by this process alone ends with it.
    async fn cancel_backup(&self, backup: &str) -> Result<(), String> {
        let _ = backup;
        Ok(())
    }

    /// Ends every unfinished volume backup of `backup`, including ones a
    /// process that stopped started and recorded nowhere, before the
    /// unfreezes it owes run: a volume read after its pod's unfreeze is
    /// not the frozen volume, and none of it may then be kept. Work held
    /// by this process alone ends with it.
    async fn end_backup(&self, backup: &str) -> Result<(), String> {
        self.cancel_backup(backup).await
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), Compression::fast());
    enc.write_all(bytes).expect("writing to memory");
    enc.finish().expect("writing to memory")
}

/// A data chunk: never more than [`CHUNK`] bytes once inflated.
fn gunzip_chunk(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    iar_core::store::gz::gunzip_at_most(bytes, CHUNK as u64)
}

async fn put_json_gz<T: Serialize + ?Sized>(
    store: &BackupStore,
    key: &str,
    v: &T,
) -> Result<(), String> {
    let json = serde_json::to_vec(v).map_err(|e| format!("{key}: cannot encode: {e}"))?;
    store
        .put_key(key, gzip(&json).into())
        .await
        .map_err(|e| e.to_string())
}

async fn get_json_gz<T: serde::de::DeserializeOwned>(
    store: &BackupStore,
    key: &str,
) -> Result<Option<T>, String> {
    let Some(bytes) = store.get_key(key).await.map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let json = iar_core::store::gz::gunzip_at_most(&bytes, iar_core::store::gz::JSON_MAX)
        .map_err(|e| format!("{key} is corrupt: not gzip: {e}"))?;
    serde_json::from_slice(&json)
        .map(Some)
        .map_err(|e| format!("{key} is corrupt: bad JSON: {e}"))
}

/// Persists a backup's volume backup records (one atomic PUT).
pub async fn put_volume_backups(
    store: &BackupStore,
    backup: &str,
    records: &[VolumeBackup],
) -> Result<(), String> {
    put_json_gz(store, &volume_backups_key(backup), records).await
}

/// The records persisted for `backup`; `None` if there are none.
pub async fn get_volume_backups(
    store: &BackupStore,
    backup: &str,
) -> Result<Option<Vec<VolumeBackup>>, String> {
    get_json_gz(store, &volume_backups_key(backup)).await
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EntryKind {
    #[default]
    Dir,
    File,
    Symlink,
}

/// One entry of a volume.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestEntry {
    /// Relative, `/`-separated; the lossy UTF-8 form when `pathHex` is set.
    pub path: String,
    /// The path's bytes, hex, when they are not UTF-8: names are kept
    /// losslessly, so `l\xfe` and `l\xff` stay two entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    pub kind: EntryKind,
    pub mode: u32,
    pub size: u64,
    /// sha256 of the file's data (of its data extents, for a sparse file).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// sha256 of each chunk, in order: keys under `volumes/data/`. A chunk
    /// never spans two extents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The symlink target's bytes, hex, when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_hex: Option<String>,
    /// The owner, as read (restored only with `--preserve-owner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// A sparse file's data regions (`SEEK_DATA`/`SEEK_HOLE`); the rest of
    /// its `size` is holes. Empty: the whole file is data.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extents: Vec<Extent>,
}

/// A region of a sparse file that holds data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    pub offset: u64,
    pub len: u64,
}

/// Bytes that may not be UTF-8 as a manifest keeps them: the UTF-8 text,
/// or its lossy form and the exact bytes in hex.
pub fn named(bytes: &[u8]) -> (String, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_string(), None),
        Err(_) => (
            String::from_utf8_lossy(bytes).into_owned(),
            Some(hex::encode(bytes)),
        ),
    }
}

fn exact(text: &str, hex_form: Option<&str>, what: &str) -> Result<Vec<u8>, String> {
    match hex_form {
        None => Ok(text.as_bytes().to_vec()),
        Some(h) => hex::decode(h).map_err(|e| format!("{what} {text:?}: bad hex: {e}")),
    }
}

impl ManifestEntry {
    /// The path's exact bytes.
    pub fn path_bytes(&self) -> Result<Vec<u8>, String> {
        exact(&self.path, self.path_hex.as_deref(), "path")
    }

    /// A symlink's exact target.
    pub fn target_bytes(&self) -> Result<Vec<u8>, String> {
        exact(
            self.target.as_deref().unwrap_or(""),
            self.target_hex.as_deref(),
            "symlink target",
        )
    }
}

/// An entry that was listed and not read: a FIFO, socket or device, or a
/// file that changed kind between listing and opening.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkippedEntry {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    pub reason: String,
}

/// A volume's contents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub backup: String,
    pub pod_namespace: String,
    pub pod_name: String,
    pub volume: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<String>,
    pub entries: Vec<ManifestEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedEntry>,
}

mod files;
pub mod handles;
mod permits;
mod repository_backup;
mod repository_source;
mod restore;
mod walk;
mod xattrs;
pub use files::{Fence, LocalDirBackupper, VolumeLimits, back_up_dir};
pub use handles::VolumeRoot;
pub use permits::VolumePermits;
pub use repository_backup::{SHRINK_TRIES, parse_snapshot_key, skipped_key, snapshot_key};
pub use restore::{RestoreOptions, plan_restore, restore_volume};

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod left_out_tests;
#[cfg(test)]
mod repository_tests;
#[cfg(test)]
mod test_setup;
#[cfg(test)]
mod tests;
