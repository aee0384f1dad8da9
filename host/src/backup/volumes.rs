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

use crate::item::ItemRef;
use crate::store::BackupStore;
use flate2::Compression;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::{Semaphore, mpsc, watch};

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
    use crate::names::{dns_label, dns_subdomain};
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
        Some(pvc) => root.join(namespace).join(pvc),
        None => root.join(namespace).join(".pods").join(pod).join(volume),
    })
}

pub fn volume_backups_key(backup: &str) -> String {
    crate::store::BackupFile::VolumeBackups.key(backup)
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
}

impl VolumeBackup {
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
    pub pod: ItemRef,
    pub volume: String,
    pub pvc: Option<String>,
}

impl VolumeRequest {
    /// Its record as it starts: New, nothing read.
    pub fn record(&self) -> VolumeBackup {
        VolumeBackup {
            backup: self.backup.clone(),
            pod_namespace: self.pod.namespace.clone(),
            pod_name: self.pod.name.clone(),
            volume: self.volume.clone(),
            pvc: self.pvc.clone(),
            phase: VolumePhase::New,
            bytes_done: 0,
            bytes_total: 0,
            created: Some(SystemTime::now()),
            started: None,
            completed: None,
            error: None,
            manifest_key: None,
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
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), Compression::fast());
    enc.write_all(bytes).expect("writing to memory");
    enc.finish().expect("writing to memory")
}

fn gunzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut out)?;
    Ok(out)
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
    let json = gunzip(&bytes).map_err(|e| format!("{key} is corrupt: not gzip: {e}"))?;
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EntryKind {
    Dir,
    File,
    Symlink,
}

/// One entry of a volume.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestEntry {
    /// Relative, `/`-separated.
    pub path: String,
    pub kind: EntryKind,
    pub mode: u32,
    pub size: u64,
    /// sha256 of the whole file.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// sha256 of each chunk, in order: keys under `volumes/data/`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
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
}

/// Lists a directory tree, sorted, without following symlinks. Blocking.
fn walk(root: &Path) -> std::io::Result<Vec<(PathBuf, ManifestEntry)>> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(root.join(&rel))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        names.sort();
        let mut subdirs = Vec::new();
        for name in names {
            let rel = rel.join(&name);
            let full = root.join(&rel);
            let meta = std::fs::symlink_metadata(&full)?;
            let ft = meta.file_type();
            let (kind, target) = if ft.is_dir() {
                subdirs.push(rel.clone());
                (EntryKind::Dir, None)
            } else if ft.is_file() {
                (EntryKind::File, None)
            } else if ft.is_symlink() {
                let t = std::fs::read_link(&full)?;
                (EntryKind::Symlink, Some(t.to_string_lossy().into_owned()))
            } else {
                // Sockets, fifos, devices: nothing to read.
                continue;
            };
            out.push((
                full,
                ManifestEntry {
                    path: rel
                        .to_string_lossy()
                        .replace(std::path::MAIN_SEPARATOR, "/"),
                    kind,
                    mode: meta.permissions().mode() & 0o7777,
                    size: if kind == EntryKind::File {
                        meta.len()
                    } else {
                        0
                    },
                    digest: String::new(),
                    chunks: Vec::new(),
                    target,
                },
            ));
        }
        // Depth first, in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(out)
}

/// Reads volumes from `--volume-data` into the store, at most
/// `concurrency` at once.
pub struct LocalDirBackupper {
    root: PathBuf,
    store: BackupStore,
    permits: Arc<Semaphore>,
}

impl LocalDirBackupper {
    pub fn new(root: PathBuf, store: BackupStore, concurrency: usize) -> Self {
        LocalDirBackupper {
            root,
            store,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
        }
    }
}

/// A chunk read on a blocking thread: its sha256 and gzip'd bytes, or the
/// end of a file with the file's digest.
enum Chunk {
    Data { sha: String, gz: Vec<u8>, len: u64 },
    End { digest: String },
}

/// Reads `path` chunk by chunk on a blocking thread; stops when the
/// receiver is dropped (cancel).
fn read_chunks(path: PathBuf) -> mpsc::Receiver<Result<Chunk, String>> {
    let (tx, rx) = mpsc::channel(2);
    tokio::task::spawn_blocking(move || {
        let send = |c| tx.blocking_send(c).is_ok();
        let mut file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                send(Err(format!("{}: {e}", path.display())));
                return;
            }
        };
        let mut whole = Sha256::new();
        let mut buf = vec![0u8; CHUNK];
        loop {
            // Fill the buffer: a short read is not the end of the file.
            let mut n = 0;
            while n < CHUNK {
                match file.read(&mut buf[n..]) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        send(Err(format!("{}: {e}", path.display())));
                        return;
                    }
                }
            }
            if n == 0 {
                break;
            }
            whole.update(&buf[..n]);
            let sha = hex::encode(Sha256::digest(&buf[..n]));
            if !send(Ok(Chunk::Data {
                sha,
                gz: gzip(&buf[..n]),
                len: n as u64,
            })) {
                return;
            }
            if n < CHUNK {
                break;
            }
        }
        send(Ok(Chunk::End {
            digest: hex::encode(whole.finalize()),
        }));
    });
    rx
}

enum Stop {
    Canceled,
    Failed(String),
}

/// The work of one volume backup of directory `dir`, reporting through
/// `progress`.
async fn back_up(
    dir: Result<PathBuf, String>,
    store: BackupStore,
    request: VolumeRequest,
    progress: &watch::Sender<VolumeBackup>,
    cancel: &watch::Receiver<bool>,
) -> Result<String, Stop> {
    let canceled = || *cancel.borrow();
    let dir = dir.map_err(Stop::Failed)?;
    let listing = {
        let shown = dir.display().to_string();
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || {
            if !dir.is_dir() {
                return Err(format!(
                    "volume data directory {} does not exist",
                    dir.display()
                ));
            }
            walk(&dir).map_err(|e| format!("listing {}: {e}", dir.display()))
        })
        .await
        .map_err(|e| Stop::Failed(format!("listing {shown}: {e}")))?
        .map_err(Stop::Failed)?
    };
    let total = listing.iter().map(|(_, e)| e.size).sum();
    progress.send_modify(|v| v.bytes_total = total);
    let mut entries = Vec::with_capacity(listing.len());
    for (full, mut entry) in listing {
        if canceled() {
            return Err(Stop::Canceled);
        }
        if entry.kind == EntryKind::File {
            let mut chunks = read_chunks(full);
            let mut read = 0u64;
            while let Some(chunk) = chunks.recv().await {
                if canceled() {
                    return Err(Stop::Canceled);
                }
                match chunk.map_err(Stop::Failed)? {
                    Chunk::Data { sha, gz, len } => {
                        let key = data_key(&request.backup, &sha);
                        // Content-addressed: a chunk already stored is not
                        // written again.
                        let failed = |e: crate::store::StoreError| Stop::Failed(e.to_string());
                        if !store.exists_key(&key).await.map_err(failed)? {
                            store.put_key(&key, gz.into()).await.map_err(failed)?;
                        }
                        entry.chunks.push(sha);
                        read += len;
                        progress.send_modify(|v| v.bytes_done += len);
                    }
                    Chunk::End { digest } => entry.digest = digest,
                }
            }
            if entry.digest.is_empty() {
                return Err(Stop::Failed(format!("{}: read ended early", entry.path)));
            }
            // The file changed size while it was read: what was stored is
            // what was read, and the total follows it.
            if read != entry.size {
                let (was, now) = (entry.size, read);
                entry.size = read;
                progress.send_modify(|v| v.bytes_total = v.bytes_total - was + now);
            }
        }
        entries.push(entry);
    }
    let manifest = Manifest {
        backup: request.backup.clone(),
        pod_namespace: request.pod.namespace.clone(),
        pod_name: request.pod.name.clone(),
        volume: request.volume.clone(),
        pvc: request.pvc.clone(),
        entries,
    };
    let key = manifest_key(
        &request.backup,
        &request.pod.namespace,
        &request.pod.name,
        &request.volume,
    );
    put_json_gz(&store, &key, &manifest)
        .await
        .map_err(Stop::Failed)?;
    Ok(key)
}

/// Resolves when cancel is asked for; never when the handle is merely
/// dropped (the backup then runs to its end).
async fn canceled(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await
    }
}

#[async_trait::async_trait]
impl VolumeBackupper for LocalDirBackupper {
    async fn start(&self, request: VolumeRequest) -> VolumeHandle {
        let dir = volume_dir(
            &self.root,
            &request.pod.namespace,
            &request.pod.name,
            &request.volume,
            request.pvc.as_deref(),
        );
        back_up_dir(dir, self.store.clone(), self.permits.clone(), request)
    }
}

/// Starts backing up directory `dir` (or failing with its error) as
/// `request`'s volume, once one of `permits` is free; returns at once.
/// Every backupper that reads files goes through here: the local
/// `--volume-data` one and the node agent's.
pub fn back_up_dir(
    dir: Result<PathBuf, String>,
    store: BackupStore,
    permits: Arc<Semaphore>,
    request: VolumeRequest,
) -> VolumeHandle {
    let (progress, rx) = watch::channel(request.record());
    let (cancel, mut cancel_rx) = watch::channel(false);
    tokio::spawn(async move {
        // New until a permit is free: the concurrency bounds the volumes
        // read at once, whatever the number of waiting blocks.
        let permit = tokio::select! {
            p = permits.acquire_owned() => p.ok(),
            _ = canceled(&mut cancel_rx) => None,
        };
        let result = match permit {
            None => Err(Stop::Canceled),
            Some(_permit) => {
                progress.send_modify(|v| {
                    v.phase = VolumePhase::InProgress;
                    v.started = Some(SystemTime::now());
                });
                back_up(dir, store, request, &progress, &cancel_rx).await
            }
        };
        progress.send_modify(|v| {
            v.completed = Some(SystemTime::now());
            match result {
                Ok(key) => {
                    v.phase = VolumePhase::Completed;
                    v.manifest_key = Some(key);
                }
                Err(Stop::Canceled) => {
                    v.phase = VolumePhase::Canceled;
                    v.error = Some(format!("{}: canceled", v.describe()));
                }
                Err(Stop::Failed(e)) => {
                    v.phase = VolumePhase::Failed;
                    v.error = Some(format!("{}: {e}", v.describe()));
                }
            }
        });
    });
    VolumeHandle {
        progress: rx,
        cancel,
    }
}

/// Writes a volume back from its manifest into `dest` (which must exist),
/// checking every chunk's digest. The inverse of [`LocalDirBackupper`].
pub async fn restore_volume(
    store: &BackupStore,
    backup: &str,
    manifest_key: &str,
    dest: &Path,
) -> Result<Manifest, String> {
    use std::os::unix::fs::PermissionsExt;
    let manifest: Manifest = get_json_gz(store, manifest_key)
        .await?
        .ok_or_else(|| format!("{manifest_key}: missing"))?;
    for e in &manifest.entries {
        if e.path.split('/').any(|p| p == ".." || p.is_empty()) {
            return Err(format!("{manifest_key}: unsafe path {:?}", e.path));
        }
        let mut content = Vec::new();
        if e.kind == EntryKind::File {
            content.reserve(e.size as usize);
            for sha in &e.chunks {
                let key = data_key(backup, sha);
                let gz = store
                    .get_key(&key)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("{key}: missing"))?;
                let chunk = gunzip(&gz).map_err(|err| format!("{key} is corrupt: {err}"))?;
                if hex::encode(Sha256::digest(&chunk)) != *sha {
                    return Err(format!("{key} is corrupt: digest mismatch"));
                }
                content.extend_from_slice(&chunk);
            }
            if hex::encode(Sha256::digest(&content)) != e.digest {
                return Err(format!("{}: digest mismatch", e.path));
            }
        }
        let (path, e) = (dest.join(&e.path), e.clone());
        // File system writes on a blocking thread, off the runtime.
        tokio::task::spawn_blocking(move || {
            let err = |err: std::io::Error| format!("{}: {err}", path.display());
            match e.kind {
                EntryKind::Dir => std::fs::create_dir_all(&path).map_err(err)?,
                EntryKind::Symlink => {
                    let target = e.target.as_deref().unwrap_or("");
                    return std::os::unix::fs::symlink(target, &path).map_err(err);
                }
                EntryKind::File => std::fs::write(&path, &content).map_err(err)?,
            }
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(e.mode)).map_err(err)
        })
        .await
        .map_err(|err| format!("{manifest_key}: {err}"))??;
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests;
