//! The node agent's half of a pod volume restore: each
//! [`VolumeRestore`] of its node has its volume's snapshot written into
//! the restored pod's volume, where the kubelet mounts it, through the
//! same no-follow writer `iar volume restore` uses; then the file the
//! pod's `restore-wait` init container waits for.
//!
//! What a request may make it write is checked first, each refusal naming
//! its rule: the Restore is running and is the one named (`restore-fence`);
//! the pod is that Restore's, on this node, waiting for this restore's data
//! in that volume (`request-mismatch`); the volume is one a backup reads
//! (`volume-type`) and its directory no symlink (`volume-root-symlink`);
//! the data is the backup's record of the pod the Restore maps here
//! (`restore-scope`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};

use super::node_agent::{AgentOptions, check_volume_type, kubelet_volume_dir, request_pod};
use super::volume_backup::{NODE_LABEL, node_label};
use super::volume_restore::{VolumeRestore, VolumeRestoreSpec, VolumeRestoreStatus};
use iar_backup::backup::volumes::{
    RestoreOptions, VolumeBackup as Record, VolumePhase, VolumeRoot,
};
use iar_core::store::BackupFile;
use iar_restore::hooks::RESTORE_WAIT;
use iar_restore::pod_volumes::{WAIT_MOUNT_ROOT, done_file};

fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Serves this node's volume restores until the watch ends for good.
pub async fn run(client: kube::Client, options: Arc<AgentOptions>) {
    let api: Api<VolumeRestore> = Api::namespaced(client.clone(), &options.namespace);
    let selector = format!("{NODE_LABEL}={}", node_label(&options.node));
    fail_interrupted(&api, &selector, &options.node).await;
    let running: Arc<std::sync::Mutex<std::collections::HashSet<String>>> = Default::default();
    let mut events = std::pin::pin!(
        watcher::watcher(
            api.clone(),
            watcher::Config::default().labels(&selector).timeout(15)
        )
        .default_backoff()
        .applied_objects()
    );
    tracing::info!(node = %options.node, "serving volume restores of this node");
    while let Some(event) = events.next().await {
        let request = match event {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("watching volume restores: {e}");
                continue;
            }
        };
        let name = request.metadata.name.clone().unwrap_or_default();
        let new = request.status.as_ref().and_then(|s| s.phase).is_none();
        if !new
            || request.spec.node != options.node
            || !running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.clone())
        {
            continue;
        }
        let (client, api, options, running) = (
            client.clone(),
            api.clone(),
            options.clone(),
            running.clone(),
        );
        tokio::spawn(async move {
            serve(&client, &api, &options, &name, &request.spec).await;
            running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&name);
        });
    }
}

/// Fails every restore of this node still InProgress: this agent's last
/// run was writing it and is gone (the pod's volume holds part of the
/// data, and its wait goes on until the Restore ends).
async fn fail_interrupted(api: &Api<VolumeRestore>, selector: &str, node: &str) {
    let Ok(list) = api.list(&ListParams::default().labels(selector)).await else {
        return;
    };
    for request in list.items {
        if request.status.as_ref().and_then(|s| s.phase) != Some(VolumePhase::InProgress) {
            continue;
        }
        let name = request.metadata.name.clone().unwrap_or_default();
        let status = VolumeRestoreStatus {
            phase: Some(VolumePhase::Failed),
            message: Some(format!(
                "the node agent on {node} restarted while this volume restore ran; it is not resumed"
            )),
            completion_timestamp: Some(now()),
            ..request.status.clone().unwrap_or_default()
        };
        report(api, &name, &status).await;
    }
}

/// One request, from New to its end.
async fn serve(
    client: &kube::Client,
    api: &Api<VolumeRestore>,
    options: &AgentOptions,
    name: &str,
    spec: &VolumeRestoreSpec,
) {
    let mut status = VolumeRestoreStatus {
        phase: Some(VolumePhase::InProgress),
        start_timestamp: Some(now()),
        ..Default::default()
    };
    report(api, name, &status).await;
    let ended = match checked(client, options, spec).await {
        Err(why) => Err(why),
        Ok((record, dest)) => {
            status.path = Some(dest.path().display().to_string());
            write(options, spec, &record, &dest).await
        }
    };
    match ended {
        Ok((files, bytes, warnings)) => {
            status.phase = Some(VolumePhase::Completed);
            (status.files, status.bytes_done, status.warnings) = (files, bytes, warnings);
            tracing::info!(request = %name, files, bytes, "volume restored");
        }
        Err(why) => {
            tracing::warn!(request = %name, "volume restore failed: {why}");
            status.phase = Some(VolumePhase::Failed);
            status.message = Some(why);
        }
    }
    status.completion_timestamp = Some(now());
    report(api, name, &status).await;
}

/// Every check, before anything is read or written: the record to
/// restore and the volume's root.
async fn checked(
    client: &kube::Client,
    options: &AgentOptions,
    spec: &VolumeRestoreSpec,
) -> Result<(Record, VolumeRoot), String> {
    if spec.backup_storage_location != options.store.url() {
        return Err(format!(
            "the request's store {} is not this agent's {} (rule: request-mismatch)",
            spec.backup_storage_location,
            options.store.url()
        ));
    }
    let mapped = check_restore(client, &options.namespace, spec).await?;
    let pod = mounted(client, &options.node, spec).await?;
    if mapped != spec.pod.namespace {
        return Err(format!(
            "restore {} maps namespace {} to {mapped}, not to the pod's {} (rule: restore-scope)",
            spec.restore_name, spec.source_namespace, spec.pod.namespace
        ));
    }
    let dir = volume_dir(client, &pod, spec).await?;
    let dest = kubelet_volume_dir(&options.kubelet_root, &spec.pod.uid, &dir)?;
    let records: Vec<Record> = options
        .store
        .get_json(&spec.backup_name, BackupFile::VolumeBackups)
        .await
        .map_err(|e| format!("reading backup {}'s volume backups: {e}", spec.backup_name))?
        .unwrap_or_default();
    let record = records
        .into_iter()
        .find(|r| {
            r.pod_namespace == spec.source_namespace
                && r.pod_name == spec.source_pod
                && r.volume == spec.volume
        })
        .ok_or_else(|| {
            format!(
                "backup {} has no volume backup of {}/{}/{} (rule: restore-scope)",
                spec.backup_name, spec.source_namespace, spec.source_pod, spec.volume
            )
        })?;
    Ok((record, dest))
}

/// The Restore must exist with the request's uid, be running, and restore
/// the request's backup; returns the namespace it maps the source
/// namespace to.
async fn check_restore(
    client: &kube::Client,
    namespace: &str,
    spec: &VolumeRestoreSpec,
) -> Result<String, String> {
    let fence = |why: String| format!("{why}; nothing is written for it (rule: restore-fence)");
    let restores = Api::<super::crd::Restore>::namespaced(client.clone(), namespace);
    let restore = crate::reach::get_opt(&restores, &spec.restore_name)
        .await
        .map_err(|e| format!("reading restore {}: {e}", spec.restore_name))?
        .ok_or_else(|| fence(format!("restore {} does not exist", spec.restore_name)))?;
    let uid = restore.metadata.uid.as_deref().unwrap_or_default();
    if uid != spec.restore_uid {
        return Err(fence(format!(
            "restore {} has uid {uid}, the request was made for uid {:?}",
            spec.restore_name, spec.restore_uid
        )));
    }
    let phase = restore
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    if phase != "InProgress" {
        return Err(fence(format!("restore {} is {phase:?}", spec.restore_name)));
    }
    let parsed = iar_restore::spec::RestoreSpec::from_value(&serde_json::Value::Object(
        restore.spec.fields.clone(),
    ))
    .map_err(|e| fence(format!("restore {}: {e}", spec.restore_name)))?;
    if parsed.backup_name != spec.backup_name {
        return Err(format!(
            "restore {} restores backup {}, the request names {} (rule: restore-scope)",
            spec.restore_name, parsed.backup_name, spec.backup_name
        ));
    }
    Ok(parsed.target_namespace(&spec.source_namespace).to_string())
}

/// The pod must be the request's (uid), on this node, and wait for this
/// restore's data in the volume: its first init container is
/// `restore-wait`, naming the restore's uid and mounting the volume. No
/// other pod's volume is written.
async fn check_pod(
    client: &kube::Client,
    node: &str,
    spec: &VolumeRestoreSpec,
) -> Result<Pod, String> {
    let mismatch = |why: String| format!("{why} (rule: request-mismatch)");
    let p = &spec.pod;
    let pod = request_pod(client, node, &spec.node, p).await?;
    let pod_spec = pod.spec.clone().unwrap_or_default();
    let waits = pod_spec
        .init_containers
        .as_deref()
        .and_then(<[_]>::first)
        .filter(|c| c.name == RESTORE_WAIT)
        .is_some_and(|c| {
            let command = c.command.clone().unwrap_or_default();
            let mount = format!("{WAIT_MOUNT_ROOT}/{}", spec.volume);
            command.get(2) == Some(&spec.restore_uid)
                && command.contains(&mount)
                && c.volume_mounts
                    .iter()
                    .flatten()
                    .any(|m| m.name == spec.volume && m.mount_path == mount)
        });
    if !waits {
        return Err(mismatch(format!(
            "pod {}/{} does not wait for restore {}'s data in volume {:?} (its first init container is not {RESTORE_WAIT} naming that restore and volume)",
            p.namespace, p.name, spec.restore_name, spec.volume
        )));
    }
    Ok(pod)
}

/// How long the agent waits for a scheduled pod's volumes to be set up.
const MOUNT_WAIT: Duration = Duration::from_secs(600);

/// The pod ([`check_pod`]) once its volumes are set up: its `restore-wait`
/// init container has started (Velero's agent waits for the same).
/// Before, the kubelet may not have made the volume's directory, or not
/// yet mounted the volume over it: data written then would land on the
/// node's disk under the mount and be hidden by it (the real node showed
/// the directory missing a second after the pod was bound).
async fn mounted(
    client: &kube::Client,
    node: &str,
    spec: &VolumeRestoreSpec,
) -> Result<Pod, String> {
    let deadline = tokio::time::Instant::now() + MOUNT_WAIT;
    loop {
        let pod = check_pod(client, node, spec).await?;
        let started = pod
            .status
            .as_ref()
            .and_then(|s| s.init_container_statuses.as_ref())
            .and_then(|all| all.iter().find(|c| c.name == RESTORE_WAIT))
            .and_then(|c| c.state.as_ref())
            .is_some_and(|s| s.running.is_some() || s.terminated.is_some());
        if started {
            return Ok(pod);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "pod {}/{}: its {RESTORE_WAIT} init container did not start within {}: its volumes are not set up",
                spec.pod.namespace,
                spec.pod.name,
                humantime::format_duration(MOUNT_WAIT)
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The volume's directory name under the kubelet's
/// `pods/<uid>/volumes/<plugin>/`: the bound PV's for a claim, the
/// volume's own otherwise; a volume no backup reads is refused.
async fn volume_dir(
    client: &kube::Client,
    pod: &Pod,
    spec: &VolumeRestoreSpec,
) -> Result<String, String> {
    let shown = format!("{}/{}", spec.pod.namespace, spec.pod.name);
    let volume = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .and_then(|vs| vs.iter().find(|v| v.name == spec.volume))
        .ok_or_else(|| {
            format!(
                "pod {shown} has no volume {:?} (rule: request-mismatch)",
                spec.volume
            )
        })?;
    let value = serde_json::to_value(volume).map_err(|e| e.to_string())?;
    let Some(claim) = &volume.persistent_volume_claim else {
        check_volume_type(&shown, &value, None)?;
        return Ok(spec.volume.clone());
    };
    let pv_name = crate::reach::get_opt(
        &Api::<PersistentVolumeClaim>::namespaced(client.clone(), &spec.pod.namespace),
        &claim.claim_name,
    )
    .await
    .map_err(|e| format!("reading pvc {}: {e}", claim.claim_name))?
    .and_then(|c| c.spec.and_then(|s| s.volume_name))
    .ok_or_else(|| format!("pvc {} is not bound to a volume yet", claim.claim_name))?;
    let pv = crate::reach::get_opt(&Api::<PersistentVolume>::all(client.clone()), &pv_name)
        .await
        .map_err(|e| format!("reading pv {pv_name}: {e}"))?
        .ok_or_else(|| format!("pv {pv_name} of pvc {} does not exist", claim.claim_name))?;
    let pv = serde_json::to_value(&pv).map_err(|e| e.to_string())?;
    check_volume_type(&shown, &value, Some(&pv))?;
    Ok(pv_name)
}

/// Writes `record`'s data into `dest`, then the done file: files,
/// bytes, and the warnings of the Restore (what did not come back, what
/// the backup left out). Files that could not be restored fail it, after
/// the rest were written.
async fn write(
    options: &AgentOptions,
    spec: &VolumeRestoreSpec,
    record: &Record,
    dest: &VolumeRoot,
) -> Result<(u64, u64, Vec<String>), String> {
    let restore = RestoreOptions {
        // As root, as Velero's agent: owners and modes come back.
        preserve_owner: rustix::process::geteuid().is_root(),
        repository_password: options.repository.clone(),
    };
    let restored = restore
        .restore_record(&options.store, record, &dest.path())
        .await?;
    let mut warnings: Vec<String> = restored
        .skipped
        .iter()
        .map(|s| format!("left out by the backup: {:?}: {}", s.path, s.reason))
        .collect();
    warnings.extend(restored.warnings.iter().cloned());
    if let Some(e) = restored.error() {
        return Err(e);
    }
    let (root, uid) = (dest.clone(), spec.restore_uid.clone());
    tokio::task::spawn_blocking(move || write_done_file(&root, &uid))
        .await
        .map_err(|e| e.to_string())??;
    Ok((restored.files, restored.bytes, warnings))
}

/// `.velero/<uid>` under the volume, neither followed if a symlink (the
/// restored data, or the pod, may have planted one) nor written anywhere
/// else (rule `volume-root-symlink`).
fn write_done_file(root: &VolumeRoot, uid: &str) -> Result<(), String> {
    use rustix::fs::{Mode, OFlags};
    let (dir, file) = done_file(uid)
        .split_once('/')
        .map(|(d, f)| (d.to_string(), f.to_string()))
        .expect("a directory and a file");
    let fd = root.open()?;
    match rustix::fs::mkdirat(&fd, dir.as_str(), Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(format!("creating {dir} in the volume: {e}")),
    }
    let dir_fd = iar_backup::backup::volumes::handles::open_dir(&fd, dir.as_ref()).map_err(|e| {
        format!("{dir} in the volume is not a directory: not followed (rule: volume-root-symlink): {e:?}")
    })?;
    rustix::fs::openat(
        &dir_fd,
        file.as_str(),
        OFlags::CREATE | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::TRUNC,
        Mode::from_raw_mode(0o644),
    )
    .map_err(|e| format!("writing {dir}/{file} in the volume (rule: volume-root-symlink): {e}"))?;
    Ok(())
}

/// Writes the request's status, tried again for a while when the API
/// server refuses or is away; a request that is gone has nobody to tell.
async fn report(api: &Api<VolumeRestore>, name: &str, status: &VolumeRestoreStatus) {
    let patch = serde_json::json!({ "status": status });
    for pause in [0, 1, 2, 4, 8, 16, 30, 60, 60, 60] {
        tokio::time::sleep(Duration::from_secs(pause)).await;
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 404 => return,
            Err(e) => tracing::warn!(request = %name, "reporting the volume restore: {e}"),
        }
    }
}
