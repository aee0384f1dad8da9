//! A volume backed up into its namespace's restic repository
//! (`iar-repository`), from the handle-based walk
//! ([`repository_source`](super::repository_source)).
//!
//! The record's `manifestKey` (and a request's `status.snapshotId`) is the
//! snapshot's own key in the store, `restic/<namespace>/snapshots/<id>`:
//! it names the repository and the snapshot, and a restore tells it from
//! a chunk-format manifest (`backups/...`) by its prefix.

use super::files::{Fence, Stop};
use super::repository_source::{HandleSource, Shared, Shrunk};
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

/// How many times a volume is read when a file shrinks while it is read
/// (a log rotated by copytruncate, a journal truncated): the snapshot is
/// taken again, and only the last try's is kept with the file padded.
pub const SHRINK_TRIES: usize = 3;

pub(super) async fn back_up(
    root: OwnedFd,
    store: BackupStore,
    request: VolumeRequest,
    password: Password,
    seam: Option<Seam>,
    fence: Option<Fence>,
    progress: &watch::Sender<VolumeBackup>,
) -> Result<Done, Stop> {
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
        let mut tries = 0;
        loop {
            tries += 1;
            let repo = VolumeRepository::open_or_init(&work_store, &namespace, &password, &runtime)
                .map_err(|e| e.to_string())?;
            let root = root
                .try_clone()
                .map_err(|e| format!("the volume's root: {e}"))?;
            let source = HandleSource::new(root, seam.clone(), work_shared.clone());
            // A partial snapshot must not stand for the volume.
            let stopped = || work_shared.stop.load(Ordering::Relaxed);
            let written = repo.back_up(&source, &tags, stopped);
            if let Some(fatal) = work_shared.fatal.lock().unwrap().clone() {
                return Err(fatal);
            }
            let written = written.map_err(|e| e.to_string())?;
            let shrunk = work_shared.shrunk.lock().unwrap().len();
            if shrunk == 0 || tries >= SHRINK_TRIES {
                return Ok(written);
            }
            // Taken again with the files at their new sizes; this one's
            // data is the next prune's. Its skipped entries are listed
            // again by the next walk.
            tracing::info!(
                snapshot = %written.snapshot,
                "{shrunk} files shrank while read: taking the volume's snapshot again"
            );
            VolumeRepository::open(&work_store, &namespace, &password, &runtime)
                .and_then(|repo| repo.forget_snapshot(&written.snapshot))
                .map_err(|e| e.to_string())?;
            work_shared.shrunk.lock().unwrap().clear();
            work_shared.skipped.lock().unwrap().clear();
        }
    });
    // The walk runs on its own threads; its counts are sent from here.
    let written = loop {
        tokio::select! {
            r = &mut work => break r,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {
                let done = shared.bytes_read.load(Ordering::Relaxed);
                let files = shared.files_done.load(Ordering::Relaxed);
                progress.send_modify(|v| {
                    v.bytes_done = done;
                    v.files_done = files;
                });
            }
        }
    };
    let written = written
        .map_err(|e| Stop::Failed(format!("backing up into the repository: {e}")))?
        .map_err(Stop::Failed)?;
    let files = shared.files_done.load(Ordering::Relaxed);
    progress.send_modify(|v| {
        v.bytes_done = written.bytes_processed;
        v.bytes_total = written.bytes_processed;
        v.files_done = files;
    });
    let mut skipped: Vec<SkippedEntry> = std::mem::take(&mut *shared.skipped.lock().unwrap());
    for Shrunk { path, listed, read } in shared.shrunk.lock().unwrap().drain(..) {
        let (path, path_hex) = super::named(&path);
        skipped.push(SkippedEntry {
            path,
            path_hex,
            reason: format!(
                "shrank from {listed} to {read} bytes while it was read, on each of {SHRINK_TRIES} tries; stored at {listed} bytes, the last {} of them zeros (rule: file-changed)",
                listed - read
            ),
        });
    }
    let key = snapshot_key(&request.pod.namespace, &written.snapshot);
    let unwritten = async {
        if let Some(fence) = fence {
            fence().await?;
        }
        put_skipped(&store, &request, &skipped).await
    }
    .await;
    if let Err(e) = unwritten {
        // The backup is gone or its store refused: its snapshot goes too
        // (its data is the next prune's).
        let (namespace, id) = (request.pod.namespace.clone(), written.snapshot.clone());
        let runtime = tokio::runtime::Handle::current();
        let forgot = tokio::task::spawn_blocking(move || {
            VolumeRepository::open(&store, &namespace, &forget_with, &runtime)
                .and_then(|repo| repo.forget_snapshot(&id))
        })
        .await;
        let e = match forgot {
            Ok(Ok(())) => e,
            Ok(Err(f)) => format!("{e}; and its snapshot {key} could not be forgotten: {f}"),
            Err(f) => format!("{e}; and its snapshot {key} could not be forgotten: {f}"),
        };
        return Err(Stop::Failed(e));
    }
    tracing::info!(
        snapshot = %key,
        parent = written.parent.as_deref().unwrap_or("none"),
        bytes_added = written.bytes_added,
        files_new = written.files_new,
        files_changed = written.files_changed,
        files_unmodified = written.files_unmodified,
        left_out = skipped.len(),
        "volume {} of pod {}/{} backed up",
        request.volume,
        request.pod.namespace,
        request.pod.name
    );
    Ok(Done { key, skipped })
}

/// A volume backup's result: where its data is, and what it left out.
pub(super) struct Done {
    pub key: String,
    pub skipped: Vec<SkippedEntry>,
}

/// Lists what a volume backup left out at [`skipped_key`] (only when it
/// left something out), for every restore of it to print.
pub(super) async fn put_skipped(
    store: &BackupStore,
    request: &VolumeRequest,
    skipped: &[SkippedEntry],
) -> Result<(), String> {
    if skipped.is_empty() {
        return Ok(());
    }
    let at = skipped_key(
        &request.backup,
        &request.pod.namespace,
        &request.pod.name,
        &request.volume,
    );
    put_json_gz(store, &at, skipped).await
}
