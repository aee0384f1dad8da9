//! A volume's files: read into the store ([`LocalDirBackupper`] for
//! `--volume-data`, [`back_up_dir`] for any directory, the node agent's
//! included) and written back ([`restore_volume`]), chunk by chunk.

use super::{
    CHUNK, EntryKind, Manifest, ManifestEntry, VolumeBackup, VolumeBackupper, VolumeHandle,
    VolumePhase, VolumeRequest, data_key, get_json_gz, gunzip, gzip, manifest_key, put_json_gz,
    volume_dir,
};
use crate::store::BackupStore;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::{Semaphore, mpsc, watch};

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
