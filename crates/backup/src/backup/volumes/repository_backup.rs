//! A volume backed up into its namespace's restic repository
//! (`iar-repository`), from the handle-based walk
//! ([`repository_source`](super::repository_source)).
//!
//! The record's `manifestKey` (and a request's `status.snapshotId`) is the
//! snapshot's own key in the store, `restic/<namespace>/snapshots/<id>`:
//! it names the repository and the snapshot, and a restore tells it from
//! a chunk-format manifest (`backups/...`) by its prefix.

use super::files::{Fence, Stop};
use super::repository_source::{HandleSource, Shared};
use super::walk::Seam;
use super::{SkippedEntry, VolumeBackup, VolumeRequest, put_json_gz};
use iar_core::store::BackupStore;
use iar_repository::{Password, VolumeRepository, VolumeTags, Written};
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::watch;

/// The store key of snapshot `id` of `namespace`'s repository.
pub fn snapshot_key(namespace: &str, id: &str) -> String {
    format!("{}/snapshots/{id}", iar_repository::prefix(namespace))
}

/// `(namespace, snapshot id)` of a [`snapshot_key`]; `None` for any other
/// key (a chunk-format manifest).
pub fn parse_snapshot_key(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix("restic/")?;
    let (namespace, id) = rest.split_once("/snapshots/")?;
    let hex = id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && !namespace.is_empty() && !namespace.contains('/')).then_some((namespace, id))
}

/// Where a volume's skipped entries are listed (only when there are some).
pub fn skipped_key(backup: &str, namespace: &str, pod: &str, volume: &str) -> String {
    format!("backups/{backup}/volumes/skipped/{namespace}/{pod}/{volume}.json.gz")
}

/// Sets the walk's stop flag when the work is dropped (canceled, timed
/// out): the blocking side then lists nothing more and deletes the
/// partial snapshot rustic saves at its end.
struct StopOnDrop(Shared);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Relaxed);
    }
}

pub(super) async fn back_up(
    root: OwnedFd,
    store: BackupStore,
    request: VolumeRequest,
    password: Password,
    seam: Option<Seam>,
    fence: Option<Fence>,
    progress: &watch::Sender<VolumeBackup>,
) -> Result<String, Stop> {
    let shared = Shared::default();
    let _stop = StopOnDrop(shared.clone());
    let tags = VolumeTags {
        backup: request.backup.clone(),
        backup_uid: request.backup_uid.clone(),
        namespace: request.pod.namespace.clone(),
        pod: request.pod.name.clone(),
        volume: request.volume.clone(),
        pvc: request.pvc.clone(),
    };
    let runtime = tokio::runtime::Handle::current();
    let forget_with = password.clone();
    let (work_store, work_shared, namespace) =
        (store.clone(), shared.clone(), tags.namespace.clone());
    let mut work = tokio::task::spawn_blocking(move || -> Result<Written, String> {
        let repo = VolumeRepository::open_or_init(&work_store, &namespace, &password, &runtime)
            .map_err(|e| e.to_string())?;
        let source = HandleSource::new(root, seam, work_shared.clone());
        // A partial snapshot must not stand for the volume.
        let stopped = || work_shared.stop.load(Ordering::Relaxed);
        repo.back_up(&source, &tags, stopped)
            .map_err(|e| e.to_string())
    });
    // The walk runs on its own threads; its count is sent from here.
    let written = loop {
        tokio::select! {
            r = &mut work => break r,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {
                let done = shared.bytes_read.load(Ordering::Relaxed);
                progress.send_modify(|v| v.bytes_done = done);
            }
        }
    };
    let written = written
        .map_err(|e| Stop::Failed(format!("backing up into the repository: {e}")))?
        .map_err(Stop::Failed)?;
    progress.send_modify(|v| {
        v.bytes_done = written.bytes_processed;
        v.bytes_total = written.bytes_processed;
    });
    let skipped: Vec<SkippedEntry> = std::mem::take(&mut *shared.skipped.lock().unwrap());
    let key = snapshot_key(&request.pod.namespace, &written.snapshot);
    let unwritten = async {
        if let Some(fence) = fence {
            fence().await?;
        }
        if !skipped.is_empty() {
            let at = skipped_key(
                &request.backup,
                &request.pod.namespace,
                &request.pod.name,
                &request.volume,
            );
            put_json_gz(&store, &at, &skipped).await?;
        }
        Ok::<_, String>(())
    }
    .await;
    if let Err(e) = unwritten {
        // The backup is gone or its store refused: its snapshot goes too
        // (its data is the next prune's).
        let (namespace, id) = (request.pod.namespace.clone(), written.snapshot.clone());
        let runtime = tokio::runtime::Handle::current();
        let _ = tokio::task::spawn_blocking(move || {
            VolumeRepository::open(&store, &namespace, &forget_with, &runtime)
                .and_then(|repo| repo.forget_snapshot(&id))
        })
        .await;
        return Err(Stop::Failed(e));
    }
    tracing::info!(
        snapshot = %key,
        parent = written.parent.as_deref().unwrap_or("none"),
        bytes_added = written.bytes_added,
        files_new = written.files_new,
        files_changed = written.files_changed,
        files_unmodified = written.files_unmodified,
        "volume {} of pod {}/{} backed up",
        request.volume,
        request.pod.namespace,
        request.pod.name
    );
    Ok(key)
}
