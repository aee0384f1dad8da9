//! `iar node-agent`: serves the [`VolumeBackup`] requests of its own node.
//! It finds the volume's files where the kubelet mounts them,
//! `<kubelet-root>/pods/<pod-uid>/volumes/<plugin>/<volume-dir>/` (a CSI
//! volume's files are in its `mount` subdirectory), backs them up with the
//! chunked, digest-addressed format of every iar volume backup into the
//! store, and reports progress in the request's status as it goes.
//!
//! A request it finds InProgress when it starts was interrupted by its own
//! restart: it is failed with that reason, never left InProgress (Velero's
//! node agent does the same with its PodVolumeBackups).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Mutex, Semaphore};

use super::volume_backup::{NODE_LABEL, VolumeBackup, VolumeBackupStatus, node_label};
use crate::backup::volumes::{VolumeBackup as Record, VolumePhase, VolumeRequest, back_up_dir};
use crate::item::ItemRef;
use crate::store::BackupStore;

/// How often an agent reports while a volume backup runs, even when no
/// byte moved: the controller reads silence as a dead agent.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// At most one status write per request this often (besides the last).
const REPORT_EVERY: Duration = Duration::from_secs(1);

pub struct AgentOptions {
    /// Where the requests are (the controller's namespace).
    pub namespace: String,
    /// This node's name, as in the pods' `spec.nodeName`.
    pub node: String,
    /// The kubelet's root directory (`/var/lib/kubelet`), mounted
    /// read-only.
    pub kubelet_root: PathBuf,
    pub store: BackupStore,
    /// Volumes read at once.
    pub concurrency: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("listing this node's volume backups: {0}")]
    List(#[source] kube::Error),
    #[error("watching this node's volume backups ended")]
    WatchEnded,
}

fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// The volume's directory under the kubelet root, or why there is none.
/// `uid` and `dir` come from the request, so both are checked to be plain
/// names before they touch a path.
pub fn kubelet_volume_dir(root: &Path, uid: &str, dir: &str) -> Result<PathBuf, String> {
    let plain = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    if !plain(uid) {
        return Err(format!(
            "invalid-identifier: pod uid {uid:?} is not a plain name"
        ));
    }
    if !plain(dir) {
        return Err(format!(
            "invalid-identifier: volume directory {dir:?} is not a plain name"
        ));
    }
    let volumes = root.join("pods").join(uid).join("volumes");
    let plugins = std::fs::read_dir(&volumes)
        .map_err(|e| format!("the pod's volumes directory {}: {e}", volumes.display()))?;
    let mut found = Vec::new();
    for plugin in plugins.flatten() {
        let candidate = plugin.path().join(dir);
        if candidate.is_dir() {
            found.push(candidate);
        }
    }
    match found.as_slice() {
        [] => Err(format!(
            "no directory {dir:?} under {}/*/ (is the volume mounted on this node?)",
            volumes.display()
        )),
        [one] => {
            // CSI volumes: the kubelet mounts the filesystem at `mount`.
            let mount = one.join("mount");
            Ok(if mount.is_dir() { mount } else { one.clone() })
        }
        many => Err(format!(
            "{dir:?} is under more than one volume plugin: {many:?}"
        )),
    }
}

/// Runs the agent until its watch fails for good.
pub async fn run(client: kube::Client, options: AgentOptions) -> Result<(), AgentError> {
    crate::tls::install_crypto();
    let api: Api<VolumeBackup> = Api::namespaced(client, &options.namespace);
    let selector = format!("{NODE_LABEL}={}", node_label(&options.node));
    fail_interrupted(&api, &selector, &options.node).await?;
    let permits = Arc::new(Semaphore::new(options.concurrency.max(1)));
    let running: Arc<Mutex<HashMap<String, tokio::sync::watch::Sender<bool>>>> = Default::default();
    let options = Arc::new(options);
    let mut events = std::pin::pin!(
        watcher::watcher(api.clone(), watcher::Config::default().labels(&selector))
            .default_backoff()
            .applied_objects()
    );
    tracing::info!(node = %options.node, "serving volume backups of this node");
    while let Some(event) = events.next().await {
        let request = match event {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("watching volume backups: {e}");
                continue;
            }
        };
        let name = request.metadata.name.clone().unwrap_or_default();
        let mut running_now = running.lock().await;
        if let Some(cancel) = running_now.get(&name) {
            if request.spec.cancel {
                cancel.send_replace(true);
            }
            continue;
        }
        if !is_new(&request) || request.spec.node != options.node {
            continue;
        }
        let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(request.spec.cancel);
        running_now.insert(name.clone(), cancel_tx);
        drop(running_now);
        let (api, options, permits, running) = (
            api.clone(),
            options.clone(),
            permits.clone(),
            running.clone(),
        );
        tokio::spawn(async move {
            serve(&api, &options, permits, request, cancel_rx).await;
            running.lock().await.remove(&name);
        });
    }
    Err(AgentError::WatchEnded)
}

/// Whether nobody has started `request` yet.
fn is_new(request: &VolumeBackup) -> bool {
    matches!(
        request.status.as_ref().and_then(|s| s.phase),
        None | Some(VolumePhase::New)
    )
}

/// Fails every request of this node still InProgress: this agent's last
/// run was doing it and is gone.
async fn fail_interrupted(
    api: &Api<VolumeBackup>,
    selector: &str,
    node: &str,
) -> Result<(), AgentError> {
    let list = api
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(AgentError::List)?;
    for request in list.items {
        let in_progress =
            request.status.as_ref().and_then(|s| s.phase) == Some(VolumePhase::InProgress);
        if !in_progress || request.spec.node != node {
            continue;
        }
        let name = request.metadata.name.clone().unwrap_or_default();
        let mut status = request.status.clone().unwrap_or_default();
        status.phase = Some(VolumePhase::Failed);
        status.message = Some(format!(
            "the node agent on {node} restarted while this volume backup ran; it is not resumed"
        ));
        status.completion_timestamp = Some(now());
        status.last_update = Some(now());
        tracing::warn!(request = %name, "failing an interrupted volume backup");
        if let Err(e) = patch(api, &name, &status).await {
            tracing::warn!(request = %name, "failing an interrupted volume backup: {e}");
        }
    }
    Ok(())
}

async fn patch(
    api: &Api<VolumeBackup>,
    name: &str,
    status: &VolumeBackupStatus,
) -> Result<(), kube::Error> {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await
    .map(|_| ())
}

fn status_of(record: &Record, path: Option<&Path>) -> VolumeBackupStatus {
    let stamp = |t: Option<SystemTime>| t.map(|t| humantime::format_rfc3339_millis(t).to_string());
    VolumeBackupStatus {
        phase: Some(record.phase),
        progress: super::volume_backup::VolumeBackupProgress {
            total_bytes: record.bytes_total,
            bytes_done: record.bytes_done,
        },
        snapshot_id: record.manifest_key.clone(),
        message: record.error.clone(),
        path: path.map(|p| p.display().to_string()),
        start_timestamp: stamp(record.started),
        completion_timestamp: stamp(record.completed),
        last_update: Some(now()),
    }
}

/// One request, from New to its end.
async fn serve(
    api: &Api<VolumeBackup>,
    options: &AgentOptions,
    permits: Arc<Semaphore>,
    request: VolumeBackup,
    mut cancel: tokio::sync::watch::Receiver<bool>,
) {
    let name = request.metadata.name.clone().unwrap_or_default();
    // The watch may deliver an old state of a request this agent already
    // finished (its loop lags behind the task that served it): only a
    // request still New now is served, or it would be backed up twice.
    let request = match api.get_opt(&name).await {
        Ok(Some(fresh)) => fresh,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(request = %name, "reading the request before serving it: {e}");
            request
        }
    };
    if !is_new(&request) {
        return;
    }
    let spec = &request.spec;
    let dir = if spec.backup_storage_location != options.store.url() {
        Err(format!(
            "this node agent writes to {}, the request names {}",
            options.store.url(),
            spec.backup_storage_location
        ))
    } else {
        kubelet_volume_dir(&options.kubelet_root, &spec.pod.uid, &spec.volume_dir)
    };
    let path = dir.as_ref().ok().cloned();
    let volume = VolumeRequest {
        backup: spec.backup_name.clone(),
        pod: ItemRef::new(
            "",
            "pods",
            spec.pod.namespace.clone(),
            spec.pod.name.clone(),
        ),
        volume: spec.volume.clone(),
        pvc: spec.pvc.clone(),
    };
    let handle = back_up_dir(dir, options.store.clone(), permits, volume);
    let mut progress = handle.watch();
    let mut last_report: Option<tokio::time::Instant> = None;
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    loop {
        let record = progress.borrow_and_update().clone();
        let terminal = record.phase.is_terminal();
        let due = last_report.is_none_or(|t| t.elapsed() >= REPORT_EVERY);
        if terminal || due {
            let status = status_of(&record, path.as_deref());
            match patch(api, &name, &status).await {
                Ok(()) => last_report = Some(tokio::time::Instant::now()),
                Err(e) => tracing::warn!(request = %name, "reporting progress: {e}"),
            }
        }
        if terminal {
            tracing::info!(request = %name, phase = ?record.phase, bytes = record.bytes_done, "volume backup ended");
            return;
        }
        tokio::select! {
            changed = progress.changed() => {
                if changed.is_err() {
                    // The worker is gone; `finished` says how it ended.
                    let end = handle.finished().await;
                    let _ = patch(api, &name, &status_of(&end, path.as_deref())).await;
                    return;
                }
                if !due {
                    // Coalesce: the next report waits its turn.
                    tokio::time::sleep(REPORT_EVERY.saturating_sub(
                        last_report.map_or(Duration::ZERO, |t| t.elapsed()),
                    ))
                    .await;
                }
            }
            _ = heartbeat.tick() => last_report = None,
            Ok(()) = cancel.changed() => {
                if *cancel.borrow() {
                    handle.cancel();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_volume_is_found_where_the_kubelet_mounts_it() {
        let root = tempfile::tempdir().unwrap();
        let pod = root.path().join("pods/0b7e-uid/volumes");
        std::fs::create_dir_all(pod.join("kubernetes.io~csi/pv-data/mount")).unwrap();
        std::fs::create_dir_all(pod.join("kubernetes.io~empty-dir/scratch")).unwrap();
        assert_eq!(
            kubelet_volume_dir(root.path(), "0b7e-uid", "pv-data").unwrap(),
            pod.join("kubernetes.io~csi/pv-data/mount")
        );
        assert_eq!(
            kubelet_volume_dir(root.path(), "0b7e-uid", "scratch").unwrap(),
            pod.join("kubernetes.io~empty-dir/scratch")
        );
        let missing = kubelet_volume_dir(root.path(), "0b7e-uid", "other").unwrap_err();
        assert!(
            missing.contains("is the volume mounted on this node"),
            "{missing}"
        );
    }

    /// A hostile request cannot point the agent elsewhere on the node.
    #[test]
    fn a_request_cannot_name_a_path() {
        let root = tempfile::tempdir().unwrap();
        for (uid, dir) in [
            ("..", "x"),
            ("../../etc", "x"),
            ("uid", ".."),
            ("uid", "a/../../b"),
            ("", "x"),
            ("uid", "/etc"),
        ] {
            let refused = kubelet_volume_dir(root.path(), uid, dir).unwrap_err();
            assert!(
                refused.starts_with("invalid-identifier:"),
                "{uid} {dir}: {refused}"
            );
        }
    }
}
