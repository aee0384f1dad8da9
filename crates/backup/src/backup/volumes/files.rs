//! A volume's files read into the store: [`LocalDirBackupper`] for
//! `--volume-data`, [`back_up_dir`] for any volume root, the node
//! agent's included. The walk itself ([`walk`](super::walk)) runs on a
//! blocking thread; this side uploads its chunks and builds the manifest.

use super::repository_backup::{Done, put_skipped};
use super::walk::{self, Event, Seam, WalkStop};
use super::{
    EntryKind, Manifest, VolumeBackup, VolumeBackupper, VolumeHandle, VolumePermits, VolumePhase,
    VolumeRequest, VolumeRoot, data_key, manifest_key, put_json_gz, volume_root,
};
use iar_core::store::BackupStore;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Bounds on one volume backup.
#[derive(Clone)]
pub struct VolumeLimits {
    /// The whole backup of one volume (Velero's `--fs-backup-timeout`,
    /// 4 h by default): past it the volume fails and its permit is free.
    pub timeout: Duration,
    /// Test seam: runs between a file's listing and its open.
    pub seam: Option<Seam>,
    /// Asked before the manifest is written (the node agent's fence: the
    /// backup must still exist and run); an error fails the volume and
    /// nothing more is written for it.
    pub fence: Option<Fence>,
    /// Stamps the record: created, started, completed.
    pub clock: Arc<dyn iar_core::clock::Clock>,
    /// The namespace repositories' password: with it, volume data goes
    /// into restic's format under `restic/<namespace>/`
    /// ([`super::repository_backup`]); without it, into the per-backup
    /// chunk format.
    pub repository: Option<iar_repository::Password>,
}

/// A check before a volume backup's last write; see [`VolumeLimits::fence`].
pub type Fence = Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>
        + Send
        + Sync,
>;

impl Default for VolumeLimits {
    fn default() -> Self {
        VolumeLimits {
            timeout: Duration::from_secs(4 * 3600),
            seam: None,
            fence: None,
            clock: iar_core::clock::RealClock::shared(),
            repository: None,
        }
    }
}

/// Reads volumes from `--volume-data` into the store, at most
/// `concurrency` at once. One backupper serves one backup, so its
/// namespaces are not tenants competing for it: no per-namespace share
/// (the node agent, serving every backup of its node, has one).
pub struct LocalDirBackupper {
    root: PathBuf,
    store: BackupStore,
    permits: Arc<VolumePermits>,
    limits: VolumeLimits,
}

impl LocalDirBackupper {
    pub fn new(root: PathBuf, store: BackupStore, concurrency: usize) -> Self {
        LocalDirBackupper {
            root,
            store,
            permits: VolumePermits::new(concurrency, Some(concurrency)),
            limits: VolumeLimits::default(),
        }
    }

    pub fn with_limits(mut self, limits: VolumeLimits) -> Self {
        self.limits = limits;
        self
    }

    pub fn with_permits(mut self, permits: Arc<VolumePermits>) -> Self {
        self.permits = permits;
        self
    }
}

pub(super) enum Stop {
    Canceled,
    Failed(String),
}

/// The work of one volume backup of `root`, reporting through `progress`.
async fn back_up(
    root: Result<VolumeRoot, String>,
    store: BackupStore,
    request: VolumeRequest,
    limits: &VolumeLimits,
    progress: &watch::Sender<VolumeBackup>,
    cancel: &watch::Receiver<bool>,
) -> Result<Done, Stop> {
    let (seam, fence) = (limits.seam.clone(), limits.fence.clone());
    let canceled = || *cancel.borrow();
    let root = root.map_err(Stop::Failed)?;
    let shown = root.path().display().to_string();
    let (fd, total) = tokio::task::spawn_blocking(move || {
        let fd = root.open()?;
        let total =
            walk::estimate(&fd).map_err(|e| format!("listing {}: {e}", root.path().display()))?;
        Ok::<_, String>((fd, total))
    })
    .await
    .map_err(|e| Stop::Failed(format!("listing {shown}: {e}")))?
    .map_err(Stop::Failed)?;
    progress.send_modify(|v| v.bytes_total = total);
    if let Some(password) = &limits.repository {
        return super::repository_backup::back_up(
            fd,
            store,
            request,
            password.clone(),
            seam,
            fence,
            progress,
        )
        .await;
    }
    // Two chunks in flight: the walk reads ahead of the uploads by at
    // most that, and stops at its next send once this side is gone.
    let (tx, mut rx) = mpsc::channel(2);
    let walker = tokio::task::spawn_blocking(move || {
        let mut send = |e: Event| tx.blocking_send(e).is_ok();
        walk::walk(&fd, seam.as_ref(), &mut send)
    });
    let mut manifest = Manifest {
        backup: request.backup.clone(),
        pod_namespace: request.pod.namespace.clone(),
        pod_name: request.pod.name.clone(),
        volume: request.volume.clone(),
        pvc: request.pvc.clone(),
        entries: Vec::new(),
        skipped: Vec::new(),
    };
    let mut file = None;
    let failed = |e: iar_core::store::StoreError| Stop::Failed(e.to_string());
    while let Some(event) = rx.recv().await {
        if canceled() {
            return Err(Stop::Canceled);
        }
        if matches!(
            event,
            Event::Entry(_) | Event::Skipped(_) | Event::FileEnd { .. }
        ) {
            // Walked: work even when no byte moves.
            progress.send_modify(|v| v.files_done += 1);
        }
        match event {
            Event::Entry(e) => manifest.entries.push(e),
            Event::Skipped(s) => manifest.skipped.push(s),
            Event::FileStart(e) => file = Some(e),
            Event::Data { sha, gz, len } => {
                let key = data_key(&request.backup, &sha);
                // Content-addressed: a chunk already stored is not
                // written again.
                if !store.exists_key(&key).await.map_err(failed)? {
                    store.put_key(&key, gz.into()).await.map_err(failed)?;
                }
                if let Some(f) = file.as_mut() {
                    f.chunks.push(sha);
                }
                progress.send_modify(|v| v.bytes_done += len);
            }
            Event::FileEnd {
                digest,
                size,
                extents,
            } => {
                let Some(mut f) = file.take() else { continue };
                // A file that changed size while read: what was stored
                // is what was read.
                (f.digest, f.size, f.extents) = (digest, size, extents);
                debug_assert_eq!(f.kind, EntryKind::File);
                manifest.entries.push(f);
            }
        }
    }
    match walker.await {
        Ok(Ok(())) => {}
        Ok(Err(WalkStop::Failed(e))) => return Err(Stop::Failed(e)),
        Ok(Err(WalkStop::Dropped)) => return Err(Stop::Canceled),
        Err(e) => return Err(Stop::Failed(format!("reading {shown}: {e}"))),
    }
    // The estimate was taken before the read; the total is what was read.
    progress.send_modify(|v| v.bytes_total = v.bytes_done);
    if let Some(fence) = fence {
        fence().await.map_err(Stop::Failed)?;
    }
    let key = manifest_key(
        &request.backup,
        &request.pod.namespace,
        &request.pod.name,
        &request.volume,
    );
    put_skipped(&store, &request, &manifest.skipped)
        .await
        .map_err(Stop::Failed)?;
    put_json_gz(&store, &key, &manifest)
        .await
        .map_err(Stop::Failed)?;
    Ok(Done {
        key,
        skipped: manifest.skipped,
    })
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
        let root = volume_root(
            &self.root,
            &request.pod.namespace,
            &request.pod.name,
            &request.volume,
            request.pvc.as_deref(),
        );
        back_up_dir(
            root,
            self.store.clone(),
            self.permits.clone(),
            self.limits.clone(),
            request,
        )
    }
}

/// Starts backing up volume `root` (or failing with its error) as
/// `request`'s volume, once a permit of its namespace is free; returns at
/// once. Every backupper that reads files goes through here: the local
/// `--volume-data` one and the node agent's.
pub fn back_up_dir(
    root: Result<VolumeRoot, String>,
    store: BackupStore,
    permits: Arc<VolumePermits>,
    limits: VolumeLimits,
    request: VolumeRequest,
) -> VolumeHandle {
    let (progress, rx) = watch::channel(request.record_at(limits.clock.system_now()));
    let (cancel, mut cancel_rx) = watch::channel(false);
    tokio::spawn(async move {
        // New until a permit is free: the concurrency bounds the volumes
        // read at once, whatever the number of waiting blocks.
        let permit = tokio::select! {
            p = permits.acquire(&request.pod.namespace) => Some(p),
            _ = canceled(&mut cancel_rx) => None,
        };
        let result = match permit {
            None => Err(Stop::Canceled),
            Some(_permit) => {
                progress.send_modify(|v| {
                    v.phase = VolumePhase::InProgress;
                    v.started = Some(limits.clock.system_now());
                });
                let work_cancel = cancel_rx.clone();
                let work = back_up(root, store, request, &limits, &progress, &work_cancel);
                tokio::select! {
                    r = work => r,
                    // Dropping the work drops the walk's receiver: the
                    // blocking read stops at its next chunk.
                    _ = canceled(&mut cancel_rx) => Err(Stop::Canceled),
                    _ = tokio::time::sleep(limits.timeout) => Err(Stop::Failed(format!(
                        "did not finish within {} (rule: fs-backup-timeout)",
                        humantime::format_duration(limits.timeout)
                    ))),
                }
            }
        };
        progress.send_modify(|v| {
            v.completed = Some(limits.clock.system_now());
            match result {
                Ok(done) => {
                    v.phase = VolumePhase::Completed;
                    v.manifest_key = Some(done.key);
                    v.set_skipped(&done.skipped);
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
