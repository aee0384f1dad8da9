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
use tokio::sync::Mutex;

use super::volume_backup::{NODE_LABEL, VolumeBackup, VolumeBackupStatus, node_label};
use iar_backup::backup::volumes::{
    VolumeBackup as Record, VolumeLimits, VolumePermits, VolumePhase, VolumeRequest, VolumeRoot,
    back_up_dir, handles,
};
use iar_core::item::ItemRef;
use iar_core::store::BackupStore;

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
    /// Of those, at most this many from one namespace (default: half).
    pub per_namespace: Option<usize>,
    /// The longest one volume backup may take (`--fs-backup-timeout`).
    pub fs_backup_timeout: Duration,
    /// The namespace repositories' password (`--repository-password-file`).
    pub repository: Option<iar_repository::Password>,
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

/// The kubelet's directory of CSI volumes: only there is a volume's data
/// in its `mount` subdirectory. Decided by this name, never by what the
/// volume holds (a pod can write an entry named `mount` into its own
/// emptyDir).
const CSI_PLUGIN_DIR: &str = "kubernetes.io~csi";

/// The volume's root under the kubelet root, or why there is none.
/// `uid` and `dir` come from the request, so both are checked to be plain
/// names before they touch a path; every directory from the kubelet root
/// down is opened without following symlinks (a symlink as the volume's
/// directory, or as a CSI volume's `mount`, is refused with rule
/// `volume-root-symlink`).
pub fn kubelet_volume_dir(root: &Path, uid: &str, dir: &str) -> Result<VolumeRoot, String> {
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
    let volumes = VolumeRoot::new(root, &["pods", uid, "volumes"]);
    let shown = volumes.path();
    let fd = volumes
        .open()
        .map_err(|e| format!("the pod's volumes directory: {e}"))?;
    let plugins = handles::names(&fd)
        .map_err(|e| format!("the pod's volumes directory {}: {e}", shown.display()))?;
    let mut found = Vec::new();
    for plugin in plugins {
        let Some(plugin) = plugin.to_str().map(str::to_string) else {
            continue;
        };
        let Ok(plugin_fd) = handles::open_dir(&fd, plugin.as_ref()) else {
            continue;
        };
        if let Ok(st) = handles::stat_nofollow(&plugin_fd, dir.as_ref()) {
            found.push((plugin, handles::file_type(&st)));
        }
    }
    match found.as_slice() {
        [] => Err(format!(
            "no directory {dir:?} under {}/*/ (is the volume mounted on this node?)",
            shown.display()
        )),
        [(plugin, kind)] => {
            if *kind != rustix::fs::FileType::Directory {
                return Err(format!(
                    "{}/{plugin}/{dir} is not a directory: not followed (rule: volume-root-symlink)",
                    shown.display()
                ));
            }
            let mut below = vec!["pods", uid, "volumes", plugin.as_str(), dir];
            // CSI volumes: the kubelet mounts the filesystem at `mount`.
            if plugin == CSI_PLUGIN_DIR {
                below.push("mount");
            }
            let volume = VolumeRoot::new(root, &below);
            // Opened now so a symlink is refused before any permit is
            // taken; the backup opens it again, beneath the same rules.
            volume.open()?;
            Ok(volume)
        }
        many => Err(format!(
            "{dir:?} is under more than one volume plugin: {:?}",
            many.iter().map(|(p, _)| p).collect::<Vec<_>>()
        )),
    }
}

/// The fence on an agent's writes: the request's Backup must exist, be the
/// one the request was made for (its uid) and still be running. A
/// finished, deleted or re-created backup receives nothing (rule
/// `backup-fence`). Returns the Backup, whose spec says what it covers
/// ([`check_scope`]).
pub async fn check_backup(
    client: &kube::Client,
    namespace: &str,
    spec: &super::volume_backup::VolumeBackupSpec,
) -> Result<super::crd::Backup, String> {
    let fence = |why: String| format!("{why}; nothing is written for it (rule: backup-fence)");
    let backups = Api::<super::crd::Backup>::namespaced(client.clone(), namespace);
    let backup = crate::reach::get_opt(&backups, &spec.backup_name)
        .await
        .map_err(|e| format!("reading backup {}: {e}", spec.backup_name))?
        .ok_or_else(|| fence(format!("backup {} does not exist", spec.backup_name)))?;
    let uid = backup.metadata.uid.as_deref().unwrap_or_default();
    if uid != spec.backup_uid {
        return Err(fence(format!(
            "backup {} has uid {uid}, the request was made for uid {:?}",
            spec.backup_name, spec.backup_uid
        )));
    }
    let phase = backup.status.as_ref().map(|s| s.phase).unwrap_or_default();
    if !phase.is_running() {
        return Err(fence(format!("backup {} is {phase:?}", spec.backup_name)));
    }
    Ok(backup)
}

/// The Backup must cover the pod: its namespace, resource and label
/// filters, decided by the same [`BackupFilter`] the controller lists
/// pods with. A request under a running Backup of another namespace
/// would otherwise read any pod's volume (rule `backup-scope`).
///
/// [`BackupFilter`]: iar_core::select::BackupFilter
pub fn check_scope(
    backup: &super::crd::Backup,
    pod: &k8s_openapi::api::core::v1::Pod,
) -> Result<(), String> {
    let name = backup.metadata.name.as_deref().unwrap_or_default();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let refused = |why: String| {
        format!(
            "backup {name} does not cover pod {namespace}/{pod_name}: {why} (rule: backup-scope)"
        )
    };
    let filter = iar_core::select::BackupFilter::from_spec(&backup.spec.to_value())
        .map_err(|e| refused(format!("its spec is not one the controller runs: {e}")))?;
    let item = iar_core::item::Item::with_id(
        ItemRef::new("", "pods", namespace.to_string(), pod_name.to_string()),
        serde_json::to_value(pod).map_err(|e| refused(e.to_string()))?,
    );
    if !filter.matches(&item) {
        return Err(refused(
            "its includedNamespaces/excludedNamespaces, resources or label selector leave the pod out"
                .into(),
        ));
    }
    Ok(())
}

/// The volume's type must be one the controller's volume policy could ask
/// a file-system backup of: the same [`unsupported_for_fs_backup`] the
/// policy decides with, on the pod volume (or the bound PV's source for a
/// claim). Secret, configMap, projected (service-account tokens),
/// downwardAPI and hostPath volumes are refused (rule `volume-type`).
///
/// [`unsupported_for_fs_backup`]: iar_backup::backup::volume_policy::unsupported_for_fs_backup
pub fn check_volume_type(
    pod: &str,
    volume: &serde_json::Value,
    pv: Option<&serde_json::Value>,
) -> Result<(), String> {
    use iar_backup::backup::volume_policy::{Claim, unsupported_for_fs_backup, volume_facts};
    let claim = Claim {
        pvc: None,
        pv: pv.cloned(),
    };
    let facts = volume_facts(volume, &claim);
    match unsupported_for_fs_backup(&facts) {
        None => Ok(()),
        Some(why) => Err(format!(
            "volume {:?} of pod {pod} is not one a backup asks for: {why} (rule: volume-type)",
            facts.name
        )),
    }
}

/// The live pod a request (backup or restore) names, refused with rule
/// `request-mismatch` unless it exists with the request's uid and runs on
/// this agent's node, the node the request names too.
pub async fn request_pod(
    client: &kube::Client,
    node: &str,
    request_node: &str,
    pod_ref: &super::volume_backup::PodReference,
) -> Result<k8s_openapi::api::core::v1::Pod, String> {
    use k8s_openapi::api::core::v1::Pod;
    let mismatch = |why: String| format!("{why} (rule: request-mismatch)");
    let pod = crate::reach::get_opt(
        &Api::<Pod>::namespaced(client.clone(), &pod_ref.namespace),
        &pod_ref.name,
    )
    .await
    .map_err(|e| format!("reading pod {}/{}: {e}", pod_ref.namespace, pod_ref.name))?
    .ok_or_else(|| {
        mismatch(format!(
            "pod {}/{} does not exist",
            pod_ref.namespace, pod_ref.name
        ))
    })?;
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    if uid != pod_ref.uid {
        return Err(mismatch(format!(
            "pod {}/{} has uid {uid}, the request names {}",
            pod_ref.namespace, pod_ref.name, pod_ref.uid
        )));
    }
    let on = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default();
    if on != node || request_node != node {
        return Err(mismatch(format!(
            "pod {}/{} runs on node {on:?}, this agent serves {node:?}",
            pod_ref.namespace, pod_ref.name
        )));
    }
    Ok(pod)
}

/// Checks a request against the live Pod before anything is read: a pod
/// of this node whose uid, namespace and name agree with the request and
/// that has the named volume, backed by the named claim and, for a claim,
/// the bound volume the request names as its directory. A request that
/// disagrees (forged, stale, or a pod re-created under the same name) is
/// refused with rule `request-mismatch`; a volume of a type no backup
/// reads, with rule `volume-type` ([`check_volume_type`]). Returns the
/// pod, for [`check_scope`].
pub async fn check_request(
    client: &kube::Client,
    node: &str,
    spec: &super::volume_backup::VolumeBackupSpec,
) -> Result<k8s_openapi::api::core::v1::Pod, String> {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let mismatch = |why: String| format!("{why} (rule: request-mismatch)");
    let pod_ref = &spec.pod;
    let pod = request_pod(client, node, &spec.node, pod_ref).await?;
    let pod_spec = pod.spec.clone().unwrap_or_default();
    let volume = pod_spec
        .volumes
        .unwrap_or_default()
        .into_iter()
        .find(|v| v.name == spec.volume)
        .ok_or_else(|| {
            mismatch(format!(
                "pod {}/{} has no volume {:?}",
                pod_ref.namespace, pod_ref.name, spec.volume
            ))
        })?;
    let volume_value = serde_json::to_value(&volume).map_err(|e| e.to_string())?;
    let claim = volume.persistent_volume_claim.map(|c| c.claim_name);
    if claim != spec.pvc {
        return Err(mismatch(format!(
            "volume {:?} of pod {}/{} is backed by claim {claim:?}, the request names {:?}",
            spec.volume, pod_ref.namespace, pod_ref.name, spec.pvc
        )));
    }
    let shown = format!("{}/{}", pod_ref.namespace, pod_ref.name);
    let expected_dir = match &claim {
        None => {
            check_volume_type(&shown, &volume_value, None)?;
            spec.volume.clone()
        }
        Some(claim) => {
            let pv_name = crate::reach::get_opt(
                &Api::<PersistentVolumeClaim>::namespaced(client.clone(), &pod_ref.namespace),
                claim,
            )
            .await
            .map_err(|e| format!("reading pvc {claim}: {e}"))?
            .and_then(|c| c.spec.and_then(|s| s.volume_name))
            .ok_or_else(|| mismatch(format!("pvc {claim} is not bound to a volume")))?;
            // The PV's source is the volume's type for a claim (a hostPath
            // PV is the node's files), as the controller's policy sees it.
            let pvs = Api::<PersistentVolume>::all(client.clone());
            let pv = crate::reach::get_opt(&pvs, &pv_name)
                .await
                .map_err(|e| format!("reading pv {pv_name}: {e}"))?
                .ok_or_else(|| mismatch(format!("pv {pv_name} of pvc {claim} does not exist")))?;
            let pv = serde_json::to_value(&pv).map_err(|e| e.to_string())?;
            check_volume_type(&shown, &volume_value, Some(&pv))?;
            pv_name
        }
    };
    if expected_dir != spec.volume_dir {
        return Err(mismatch(format!(
            "volume {:?} of pod {}/{} lives in directory {expected_dir:?}, the request names {:?}",
            spec.volume, pod_ref.namespace, pod_ref.name, spec.volume_dir
        )));
    }
    Ok(pod)
}

/// Runs the agent until its watch fails for good.
/// How long the agent waits for the next bytes of any answer from the API
/// server ([`crate::client_reading_within`]): a request lost on a
/// connection a network fault left half-open (no reset ever comes) fails
/// then and is tried again, instead of holding the volume it serves, and
/// the permit it holds, for kube's default of 295 s. client-go's HTTP/2
/// health checks find such a connection dead in about as long.
pub const READ_PATIENCE: Duration = Duration::from_secs(20);

/// The agent's watch of its requests ends (and is resumed) this often,
/// under [`READ_PATIENCE`]: a watch sent on a half-open connection is
/// then found out too.
const WATCH_SECONDS: u32 = 15;

pub async fn run(client: kube::Client, options: AgentOptions) -> Result<(), AgentError> {
    iar_core::tls::install_crypto();
    let api: Api<VolumeBackup> = Api::namespaced(client.clone(), &options.namespace);
    let selector = format!("{NODE_LABEL}={}", node_label(&options.node));
    fail_interrupted(&api, &selector, &options.node).await?;
    let permits = VolumePermits::new(options.concurrency, options.per_namespace);
    let running: Arc<Mutex<HashMap<String, tokio::sync::watch::Sender<bool>>>> = Default::default();
    let options = Arc::new(options);
    // Restores into this node's pods, beside the backups.
    tokio::spawn(super::restore_agent::run(client.clone(), options.clone()));
    let mut events = std::pin::pin!(
        watcher::watcher(
            api.clone(),
            watcher::Config::default()
                .labels(&selector)
                .timeout(WATCH_SECONDS)
        )
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
            // Canceled, or failed by the controller (silent, or its backup
            // given up): stopped, and fenced (`request_fence`).
            if request.spec.cancel || ended_by_another(&request) {
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
        let (client, api, options, permits, running) = (
            client.clone(),
            api.clone(),
            options.clone(),
            permits.clone(),
            running.clone(),
        );
        tokio::spawn(async move {
            serve(&client, &api, &options, permits, request, cancel_rx).await;
            running.lock().await.remove(&name);
        });
    }
    Err(AgentError::WatchEnded)
}

/// Whether the request ended while this agent still serves it: only the
/// controller ends a request this agent runs (it failed it as silent, or
/// as unwatchable), and what the agent then writes no record names.
fn ended_by_another(request: &VolumeBackup) -> bool {
    request
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(|p| p.is_terminal())
}

/// The request itself, read again: it must not have been canceled, nor
/// ended by the controller (rule `backup-fence`). Checked with the Backup
/// before the snapshot is written: a controller that failed the request
/// may already have run the pod's post hooks, so a snapshot written after
/// them would be recorded Completed with its unfreeze before its end.
async fn request_fence(api: &Api<VolumeBackup>, name: &str) -> Result<(), String> {
    let fence = |why: String| format!("{why}; nothing is written for it (rule: backup-fence)");
    let request = crate::reach::get_opt(api, name)
        .await
        .map_err(|e| format!("reading request {name}: {e}"))?
        .ok_or_else(|| fence(format!("request {name} is gone")))?;
    if request.spec.cancel {
        return Err(fence(format!("request {name} was canceled")));
    }
    if ended_by_another(&request) {
        let message = request.status.and_then(|s| s.message).unwrap_or_default();
        return Err(fence(format!(
            "request {name} was ended by the controller ({message})"
        )));
    }
    Ok(())
}

/// The backup as its store records it, read again: it must still be
/// running there (rule `backup-fence`). The Backup resource's status
/// follows the store's and may lag it (a status write lost to a
/// partition or a restarted controller): a backup that ended in the store
/// and was deleted, its snapshots forgotten, still showed InProgress on
/// its resource, and the snapshot written then outlived it (the fault
/// campaign's seed 1215). Read after the snapshot is written: a deletion
/// that starts later forgets it, one that started earlier marked the
/// stored backup Deleting first.
async fn store_fence(
    store: &BackupStore,
    spec: &super::volume_backup::VolumeBackupSpec,
) -> Result<(), String> {
    use iar_backup::backup::object::BackupObject;
    use iar_core::store::BackupFile;
    let fence = |why: String| format!("{why}; nothing is written for it (rule: backup-fence)");
    let name = &spec.backup_name;
    let stored: BackupObject = store
        .get_json(name, BackupFile::Metadata)
        .await
        .map_err(|e| format!("reading backup {name} in the store: {e}"))?
        .ok_or_else(|| fence(format!("backup {name} is not in the store")))?;
    if let Some(uid) = stored
        .metadata
        .annotations
        .get(super::resource::RESOURCE_UID_ANNOTATION)
        && *uid != spec.backup_uid
    {
        return Err(fence(format!(
            "the stored backup {name} was made for uid {uid}, the request for uid {:?}",
            spec.backup_uid
        )));
    }
    let phase = stored.status.phase;
    if !phase.is_running() {
        return Err(fence(format!("backup {name} is {phase:?} in the store")));
    }
    Ok(())
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
    let params = ListParams::default().labels(selector);
    let list = crate::reach::at_start("listing this node's volume backups", || api.list(&params))
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
        if let Err(e) = patch_unless_ended(api, &name, &status).await {
            tracing::warn!(request = %name, "failing an interrupted volume backup: {e}");
        }
    }
    Ok(())
}

/// How long an agent keeps trying to report a volume backup's end: past
/// the controller's silence (2 min by default) it has failed the request
/// itself, and a snapshot written meanwhile is named by no record.
const REPORT_END_FOR: Duration = Duration::from_secs(300);

/// Reports a volume backup's end, retried with backoff while the API
/// server refuses or is away (a snapshot no status names is data the
/// backup does not know it has): a lost last patch used to leave the
/// request InProgress until the controller failed it as silent.
pub async fn report_end(api: &Api<VolumeBackup>, name: &str, status: &VolumeBackupStatus) {
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(250);
    loop {
        match patch_unless_ended(api, name, status).await {
            Ok(_) => return,
            // The request is gone (its backup deleted): nobody to tell.
            Err(kube::Error::Api(e)) if e.code == 404 => return,
            Err(e) if started.elapsed() + pause > REPORT_END_FOR => {
                tracing::error!(request = %name, phase = ?status.phase, "reporting the volume backup's end failed for {}: {e}", humantime::format_duration(REPORT_END_FOR));
                return;
            }
            Err(e) => {
                tracing::warn!(request = %name, "reporting the volume backup's end (retrying in {}): {e}", humantime::format_duration(pause));
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// Patches the request's status unless it has ended meanwhile (the
/// controller's Failed stands: it may have run the pod's post hooks on
/// it); false when it had. The read and the patch are tied by the
/// request's resourceVersion, so a change between them is a conflict, and
/// read again. Every status the agent writes goes through here.
async fn patch_unless_ended(
    api: &Api<VolumeBackup>,
    name: &str,
    status: &VolumeBackupStatus,
) -> Result<bool, kube::Error> {
    loop {
        let Some(current) = api.get_opt(name).await? else {
            return Ok(false);
        };
        if ended_by_another(&current) {
            tracing::warn!(request = %name, phase = ?status.phase, "not reporting: the request was ended first (by the controller)");
            return Ok(false);
        }
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": current.metadata.resource_version},
            "status": status,
        });
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            other => return other.map(|_| true),
        }
    }
}

fn status_of(record: &Record, path: Option<&Path>) -> VolumeBackupStatus {
    let stamp = |t: Option<SystemTime>| t.map(|t| humantime::format_rfc3339_millis(t).to_string());
    VolumeBackupStatus {
        phase: Some(record.phase),
        progress: super::volume_backup::VolumeBackupProgress {
            total_bytes: record.bytes_total,
            bytes_done: record.bytes_done,
            files_done: record.files_done,
        },
        skipped: record.skipped.clone(),
        skipped_total: record.skipped_total,
        snapshot_id: record.manifest_key.clone(),
        message: record.error.clone(),
        path: path.map(|p| p.display().to_string()),
        start_timestamp: stamp(record.started),
        completion_timestamp: stamp(record.completed),
        last_update: Some(now()),
    }
}

/// Every check before anything is read: the pod and its volume
/// ([`check_request`]), the Backup ([`check_backup`]) and that it covers
/// the pod ([`check_scope`]).
async fn check_all(
    client: &kube::Client,
    options: &AgentOptions,
    spec: &super::volume_backup::VolumeBackupSpec,
) -> Result<(), String> {
    let pod = check_request(client, &options.node, spec).await?;
    let backup = check_backup(client, &options.namespace, spec).await?;
    check_scope(&backup, &pod)
}

/// One request, from New to its end.
async fn serve(
    client: &kube::Client,
    api: &Api<VolumeBackup>,
    options: &AgentOptions,
    permits: Arc<VolumePermits>,
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
    } else if let Err(refused) = check_all(client, options, spec).await {
        let refused = format!("volume backup request {name}: {refused}");
        tracing::warn!(request = %name, "refusing a volume backup request: {refused}");
        Err(refused)
    } else {
        kubelet_volume_dir(&options.kubelet_root, &spec.pod.uid, &spec.volume_dir)
    };
    let path = dir.as_ref().ok().map(VolumeRoot::path);
    let volume = VolumeRequest {
        backup: spec.backup_name.clone(),
        backup_uid: spec.backup_uid.clone(),
        pod: ItemRef::new(
            "",
            "pods",
            spec.pod.namespace.clone(),
            spec.pod.name.clone(),
        ),
        volume: spec.volume.clone(),
        pvc: spec.pvc.clone(),
    };
    // The fence again before the manifest is written: a backup that ended
    // or was deleted (or re-created) while its volume was read gets no
    // manifest.
    let fence: iar_backup::backup::volumes::Fence = {
        let (client, namespace, spec) = (client.clone(), options.namespace.clone(), spec.clone());
        let (api, name, store) = (api.clone(), name.clone(), options.store.clone());
        Arc::new(move || {
            let (client, namespace, spec) = (client.clone(), namespace.clone(), spec.clone());
            let (api, name, store) = (api.clone(), name.clone(), store.clone());
            Box::pin(async move {
                request_fence(&api, &name).await?;
                check_backup(&client, &namespace, &spec).await?;
                store_fence(&store, &spec).await
            })
        })
    };
    let limits = VolumeLimits {
        timeout: options.fs_backup_timeout,
        fence: Some(fence),
        repository: options.repository.clone(),
        ..VolumeLimits::default()
    };
    let handle = back_up_dir(dir, options.store.clone(), permits, limits, volume);
    let mut progress = handle.watch();
    let mut last_report: Option<tokio::time::Instant> = None;
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    loop {
        let record = progress.borrow_and_update().clone();
        let terminal = record.phase.is_terminal();
        let due = last_report.is_none_or(|t| t.elapsed() >= REPORT_EVERY);
        if terminal {
            report_end(api, &name, &status_of(&record, path.as_deref())).await;
        } else if due {
            let status = status_of(&record, path.as_deref());
            // Not over an end the controller wrote: an InProgress over its
            // Failed made the request look alive again, and the agent's
            // later end then stood (campaign seed 901).
            match patch_unless_ended(api, &name, &status).await {
                Ok(true) => last_report = Some(tokio::time::Instant::now()),
                Ok(false) => handle.cancel(),
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
                    report_end(api, &name, &status_of(&end, path.as_deref())).await;
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
            kubelet_volume_dir(root.path(), "0b7e-uid", "pv-data")
                .unwrap()
                .path(),
            pod.join("kubernetes.io~csi/pv-data/mount")
        );
        assert_eq!(
            kubelet_volume_dir(root.path(), "0b7e-uid", "scratch")
                .unwrap()
                .path(),
            pod.join("kubernetes.io~empty-dir/scratch")
        );
        let missing = kubelet_volume_dir(root.path(), "0b7e-uid", "other").unwrap_err();
        assert!(
            missing.contains("is the volume mounted on this node"),
            "{missing}"
        );
    }

    /// A pod that plants `mount -> ../../../..` in its emptyDir gets its
    /// own emptyDir backed up, link and all: `mount` means CSI only in the
    /// CSI plugin's directory. A symlink as a CSI volume's `mount`, or as
    /// the volume's directory itself, is refused, never followed.
    #[test]
    fn a_planted_mount_or_root_symlink_is_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let pods = root.path().join("pods");
        let secret = pods.join("victim/volumes/kubernetes.io~secret/token");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("token"), "s3cr3t").unwrap();
        let mine = pods.join("attacker/volumes");
        let scratch = mine.join("kubernetes.io~empty-dir/scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        std::os::unix::fs::symlink("../../../..", scratch.join("mount")).unwrap();
        assert_eq!(
            kubelet_volume_dir(root.path(), "attacker", "scratch")
                .unwrap()
                .path(),
            scratch
        );
        // A CSI volume whose `mount` is a symlink (the pod cannot plant
        // one there, but a confused driver could): refused.
        let csi = mine.join("kubernetes.io~csi/pv-1");
        std::fs::create_dir_all(&csi).unwrap();
        std::os::unix::fs::symlink("../../../../victim", csi.join("mount")).unwrap();
        let refused = kubelet_volume_dir(root.path(), "attacker", "pv-1").unwrap_err();
        assert!(refused.contains("rule: volume-root-symlink"), "{refused}");
        // The volume's directory itself a symlink: refused.
        std::os::unix::fs::symlink(&secret, mine.join("kubernetes.io~empty-dir/linked")).unwrap();
        let refused = kubelet_volume_dir(root.path(), "attacker", "linked").unwrap_err();
        assert!(refused.contains("rule: volume-root-symlink"), "{refused}");
        // The pod's own directory a symlink (e.g. to another pod's).
        std::os::unix::fs::symlink(pods.join("victim"), pods.join("swapped")).unwrap();
        let refused = kubelet_volume_dir(root.path(), "swapped", "token").unwrap_err();
        assert!(refused.contains("rule: volume-root-symlink"), "{refused}");
    }

    /// A request naming a volume no backup asks for (another tenant's
    /// Secret, its projected service-account token, a configMap, the
    /// downward API, a hostPath, a claim bound to a hostPath PV) is
    /// refused by the same function the controller's policy decides with.
    #[test]
    fn a_volume_no_backup_asks_for_is_refused() {
        use serde_json::json;
        for volume in [
            json!({"name": "creds", "secret": {"secretName": "db"}}),
            json!({"name": "kube-api-access-x1", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}),
            json!({"name": "conf", "configMap": {"name": "c"}}),
            json!({"name": "info", "downwardAPI": {"items": []}}),
            json!({"name": "root", "hostPath": {"path": "/"}}),
        ] {
            let refused = check_volume_type("shop/web", &volume, None).unwrap_err();
            assert!(refused.contains("rule: volume-type"), "{refused}");
            assert!(refused.contains("shop/web"), "{refused}");
        }
        let claim = json!({"name": "data", "persistentVolumeClaim": {"claimName": "data"}});
        let host_pv =
            json!({"spec": {"hostPath": {"path": "/etc"}, "capacity": {"storage": "1Gi"}}});
        let refused = check_volume_type("shop/web", &claim, Some(&host_pv)).unwrap_err();
        assert!(refused.contains("rule: volume-type"), "{refused}");
        let csi_pv = json!({"spec": {"csi": {"driver": "d", "volumeHandle": "h"}}});
        check_volume_type("shop/web", &claim, Some(&csi_pv)).unwrap();
        check_volume_type(
            "shop/web",
            &json!({"name": "scratch", "emptyDir": {}}),
            None,
        )
        .unwrap();
    }

    fn backup(spec: serde_json::Value) -> crate::crd::Backup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "iar.dev/v1", "kind": "Backup",
            "metadata": {"name": "nightly", "namespace": "iar-system", "uid": "u"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn pod(namespace: &str, labels: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": namespace, "labels": labels},
        }))
        .unwrap()
    }

    /// A running Backup of one namespace is no licence to read another's
    /// pods: the controller's own filter decides (rule `backup-scope`).
    #[test]
    fn the_backup_must_cover_the_pod() {
        use serde_json::json;
        let other = backup(json!({"includedNamespaces": ["shop"]}));
        let refused = check_scope(&other, &pod("bank", json!({}))).unwrap_err();
        assert!(refused.contains("rule: backup-scope"), "{refused}");
        assert!(refused.contains("nightly"), "{refused}");
        assert!(refused.contains("bank/web"), "{refused}");
        check_scope(&other, &pod("shop", json!({}))).unwrap();
        let excluded = backup(json!({"excludedNamespaces": ["bank"]}));
        check_scope(&excluded, &pod("bank", json!({}))).unwrap_err();
        let labelled = backup(json!({"labelSelector": {"matchLabels": {"app": "db"}}}));
        check_scope(&labelled, &pod("shop", json!({"app": "web"}))).unwrap_err();
        check_scope(&labelled, &pod("shop", json!({"app": "db"}))).unwrap();
        let no_pods = backup(json!({"includedResources": ["configmaps"]}));
        check_scope(&no_pods, &pod("shop", json!({}))).unwrap_err();
        check_scope(&backup(json!({})), &pod("bank", json!({}))).unwrap();
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
