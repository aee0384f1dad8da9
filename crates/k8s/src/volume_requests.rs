//! The controller's side of pod volume backups: each volume a block
//! decided to back up becomes a [`VolumeBackup`] request for the node
//! agent on the pod's node, and its handle follows the request's status.
//! Waiting holds no worker: one task per request watches it.
//!
//! An agent that says nothing for `silence` (a New request nobody took, an
//! InProgress one whose reports stopped) fails the request with that
//! reason, written into the request too, so that no volume backup is
//! InProgress for ever.

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::watch;

use super::crd::Backup;
use super::volume_backup::{
    BACKUP_LABEL, NODE_LABEL, PodReference, VolumeBackup, VolumeBackupSpec, VolumeBackupStatus,
    node_label, request_name,
};
use iar_backup::backup::volumes::{
    VolumeBackup as Record, VolumeBackupper, VolumeHandle, VolumePhase, VolumeRequest,
};

/// Creates requests in `namespace` and follows them.
pub struct RequestBackupper {
    client: kube::Client,
    namespace: String,
    /// The store URL requests name (the agents must have the same).
    store: String,
    /// How long an agent may say nothing before its request fails.
    pub silence: Duration,
}

impl RequestBackupper {
    fn requests_api(&self) -> Api<VolumeBackup> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Backup `backup`'s requests that have not ended, by name; listed
    /// again while the API server is unreached, for up to `patience`
    /// (zero: once).
    async fn unfinished_requests(
        &self,
        backup: &str,
        patience: Duration,
    ) -> Result<Vec<(String, VolumeBackup)>, String> {
        let api = self.requests_api();
        let params = kube::api::ListParams::default().labels(&format!("{BACKUP_LABEL}={backup}"));
        let requests = crate::reach::until_reached(patience, || api.list(&params))
            .await
            .map_err(|e| format!("listing the volume backup requests of {backup}: {e}"))?;
        Ok(requests
            .items
            .into_iter()
            .filter(|r| {
                !r.status
                    .as_ref()
                    .and_then(|s| s.phase)
                    .is_some_and(VolumePhase::is_terminal)
            })
            .map(|r| (r.metadata.name.clone().unwrap_or_default(), r))
            .collect())
    }

    pub fn new(client: kube::Client, namespace: &str, store: &str, silence: Duration) -> Self {
        RequestBackupper {
            client,
            namespace: namespace.to_string(),
            store: store.to_string(),
            silence,
        }
    }

    /// The request for `volume`, from the live pod (its uid and node) and
    /// its claim (the bound PV names the volume's directory).
    async fn request(&self, volume: &VolumeRequest) -> Result<VolumeBackup, String> {
        let ns = &volume.pod.namespace;
        let pod = crate::reach::get_opt(
            &Api::<Pod>::namespaced(self.client.clone(), ns),
            &volume.pod.name,
        )
        .await
        .map_err(|e| format!("reading the pod: {e}"))?
        .ok_or("the pod is gone")?;
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .ok_or("the pod is not scheduled to a node")?;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let volume_dir = match &volume.pvc {
            None => volume.volume.clone(),
            Some(claim) => crate::reach::get_opt(
                &Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), ns),
                claim,
            )
            .await
            .map_err(|e| format!("reading pvc {claim}: {e}"))?
            .and_then(|c| c.spec.and_then(|s| s.volume_name))
            .ok_or_else(|| format!("pvc {claim} is not bound to a volume"))?,
        };
        // The Backup owns its requests: Kubernetes deletes them with it,
        // and its uid names them (see `request_name`).
        let backups = Api::<Backup>::namespaced(self.client.clone(), &self.namespace);
        let owner = crate::reach::get_opt(&backups, &volume.backup)
            .await
            .map_err(|e| format!("reading backup {}: {e}", volume.backup))?
            .ok_or_else(|| {
                format!(
                    "backup {} has no Backup resource in {}: no request is made for it (rule: request-owner)",
                    volume.backup, self.namespace
                )
            })?;
        let backup_uid = owner.metadata.uid.clone().unwrap_or_default();
        let pod_ref = PodReference {
            namespace: ns.clone(),
            name: volume.pod.name.clone(),
            uid,
        };
        let name = request_name(&volume.backup, &backup_uid, &pod_ref, &volume.volume);
        Ok(VolumeBackup {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(self.namespace.clone()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "iar.dev/v1".into(),
                    kind: "Backup".into(),
                    name: volume.backup.clone(),
                    uid: backup_uid.clone(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]),
                labels: Some(
                    [
                        (BACKUP_LABEL.to_string(), volume.backup.clone()),
                        (NODE_LABEL.to_string(), node_label(&node)),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: VolumeBackupSpec {
                backup_name: volume.backup.clone(),
                backup_uid,
                backup_storage_location: self.store.clone(),
                node,
                pod: pod_ref,
                volume: volume.volume.clone(),
                pvc: volume.pvc.clone(),
                volume_dir,
                cancel: false,
            },
            status: None,
        })
    }
}

/// The record a request's status stands for.
fn record_of(mut record: Record, status: Option<&VolumeBackupStatus>) -> Record {
    let Some(status) = status else { return record };
    let parse = |t: &Option<String>| {
        t.as_deref()
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
    };
    record.phase = status.phase.unwrap_or(VolumePhase::New);
    record.bytes_done = status.progress.bytes_done;
    record.files_done = status.progress.files_done;
    record.skipped = status.skipped.clone();
    record.skipped_total = status.skipped_total;
    record.bytes_total = status.progress.total_bytes;
    record.started = parse(&status.start_timestamp).or(record.started);
    record.completed = parse(&status.completion_timestamp).or(record.completed);
    record.manifest_key = status.snapshot_id.clone();
    record.error = status
        .message
        .as_ref()
        .map(|m| format!("{}: {m}", record.describe()));
    record
}

#[async_trait::async_trait]
impl VolumeBackupper for RequestBackupper {
    /// `spec.cancel` on each of the backup's requests that has not ended:
    /// their agents stop them, wherever the controller that made them is.
    async fn cancel_backup(&self, backup: &str) -> Result<(), String> {
        let api = self.requests_api();
        for (name, request) in self.unfinished_requests(backup, Duration::ZERO).await? {
            if request.spec.cancel {
                continue;
            }
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"cancel": true}})),
            )
            .await
            .map_err(|e| format!("canceling volume backup request {name}: {e}"))?;
        }
        Ok(())
    }

    /// Each unfinished request of the backup failed by the controller
    /// ([`fail_request`]): its agent's fence reads that and writes
    /// nothing more for it (an end the agent wrote first stands).
    async fn end_backup(&self, backup: &str) -> Result<(), String> {
        let api = self.requests_api();
        for (name, _) in self
            .unfinished_requests(backup, crate::reach::READ_PATIENCE)
            .await?
        {
            fail_request(
                &api,
                &name,
                "its backup ended before this volume backup did, and its pod's unfreeze runs now; nothing more is written for it",
            )
            .await;
        }
        Ok(())
    }

    async fn start(&self, volume: VolumeRequest) -> VolumeHandle {
        let (progress, rx) = watch::channel(volume.record());
        let (cancel, cancel_rx) = watch::channel(false);
        let request = match self.request(&volume).await {
            Ok(r) => r,
            Err(why) => {
                end_failed(&progress, why);
                return VolumeHandle::new(rx, cancel);
            }
        };
        let api = self.requests_api();
        let name = request.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &request).await {
            Ok(_) => {}
            // Asked before (a retried block): follow that request, if it
            // is the one this controller would write. Anyone who can
            // create requests in this namespace can plant one under the
            // predictable name; its spec is not adopted.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let found = match api.get_opt(&name).await {
                    Ok(Some(found)) => adoptable(&found, &request),
                    Ok(None) => Err(format!(
                        "volume backup request {name} of backup {} existed and is gone; not retried now",
                        volume.backup
                    )),
                    Err(e) => Err(format!("reading volume backup request {name}: {e}")),
                };
                if let Err(why) = found {
                    tracing::warn!(request = %name, backup = %volume.backup, "{why}");
                    end_failed(&progress, why);
                    return VolumeHandle::new(rx, cancel);
                }
            }
            Err(e) => {
                end_failed(
                    &progress,
                    format!("creating volume backup request {name}: {e}"),
                );
                return VolumeHandle::new(rx, cancel);
            }
        }
        let node = request.spec.node.clone();
        tokio::spawn(follow(api, name, node, progress, cancel_rx, self.silence));
        VolumeHandle::new(rx, cancel)
    }
}

/// Whether a request found under the name of `wanted` is the one the
/// controller writes: the same spec (a cancel asked since aside), and
/// owned by the same Backup. Anything else was written by someone else
/// and is refused, named, with rule `request-mismatch`.
fn adoptable(found: &VolumeBackup, wanted: &VolumeBackup) -> Result<(), String> {
    let name = wanted.metadata.name.as_deref().unwrap_or_default();
    let backup = &wanted.spec.backup_name;
    let refused = |what: &str| {
        Err(format!(
            "volume backup request {name} of backup {backup} already exists with another {what} than this controller writes; not adopted (rule: request-mismatch)"
        ))
    };
    let spec = VolumeBackupSpec {
        cancel: wanted.spec.cancel,
        ..found.spec.clone()
    };
    if spec != wanted.spec {
        return refused("spec");
    }
    let owner = |r: &VolumeBackup| {
        r.metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| o.controller == Some(true))
            .map(|o| (o.kind.clone(), o.name.clone(), o.uid.clone()))
            .collect::<Vec<_>>()
    };
    if owner(found) != owner(wanted) {
        return refused("owner");
    }
    Ok(())
}

/// Follows request `name` until it ends, passing its status on. A watch
/// of that one object (a field selector on its name), so a status change
/// reaches the block at once and waiting costs no requests.
async fn follow(
    api: Api<VolumeBackup>,
    name: String,
    node: String,
    progress: watch::Sender<Record>,
    mut cancel: watch::Receiver<bool>,
    silence: Duration,
) {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher::watcher(api.clone(), config));
    let mut last_word = Instant::now();
    let mut last_seen: Option<VolumeBackupStatus> = None;
    let mut cancel_sent = false;
    let mut last_error: Option<String> = None;
    loop {
        if *cancel.borrow() && !cancel_sent {
            let asked = api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"cancel": true}})),
                )
                .await;
            cancel_sent = asked.is_ok();
        }
        let deadline = tokio::time::Instant::from_std(last_word + silence);
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(Event::Apply(request) | Event::InitApply(request))) => {
                    let status = request.status;
                    last_error = None;
                    // Alive means work moved: a new phase or bytes read.
                    // A report that only renews its timestamp (an agent
                    // stuck on a read that never ends) is not a word.
                    if moved(last_seen.as_ref(), status.as_ref()) {
                        last_word = Instant::now();
                    }
                    last_seen = status.clone();
                    let record = record_of(progress.borrow().clone(), status.as_ref());
                    let ended = record.phase.is_terminal();
                    progress.send_replace(record);
                    if ended {
                        return;
                    }
                }
                Some(Ok(Event::Delete(_))) => {
                    fail_with(&progress, None, &name, "the request was deleted".into()).await;
                    return;
                }
                Some(Ok(Event::Init | Event::InitDone)) => {}
                // The watcher retries after a pause. An error that lasts
                // (a refused watch, an API server away) is not waited out
                // for ever: past the silence it fails the request, named.
                Some(Err(e)) => {
                    tracing::warn!(request = %name, "watching volume backup request: {e}");
                    last_error = Some(e.to_string());
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                None => {
                    fail_with(&progress, None, &name, "watching the request ended".into()).await;
                    return;
                }
            },
            _ = tokio::time::sleep_until(deadline) => {
                let phase = last_seen.as_ref().and_then(|s| s.phase);
                let why = match (phase, last_error) {
                    (_, Some(e)) => format!(
                        "the request could not be watched for {}: {e}",
                        humantime::format_duration(silence)
                    ),
                    (phase, None) => match phase {
                    Some(VolumePhase::InProgress) => format!(
                        "the node agent on {node} reported nothing for {} (did it stop?)",
                        humantime::format_duration(silence)
                    ),
                    _ => format!(
                        "no node agent on {node} took the request within {} (is iar node-agent running there?)",
                        humantime::format_duration(silence)
                    ),
                    },
                };
                fail_with(&progress, Some(&api), &name, why).await;
                return;
            }
            Ok(()) = cancel.changed() => {}
        }
    }
}

/// Whether `now` reports work that `before` did not: another phase, or
/// more bytes read or counted.
fn moved(before: Option<&VolumeBackupStatus>, now: Option<&VolumeBackupStatus>) -> bool {
    let key = |s: Option<&VolumeBackupStatus>| s.map(|s| (s.phase, s.progress.clone()));
    key(before) != key(now)
}

/// Ends the handle Failed with `why`, and the request too when there is
/// one: its status must not stay New or InProgress.
async fn fail_with(
    progress: &watch::Sender<Record>,
    api: Option<&Api<VolumeBackup>>,
    name: &str,
    why: String,
) {
    if let Some(api) = api
        && let Some(ended) = fail_request(api, name, &why).await
    {
        // The agent ended it first: its word stands.
        let record = record_of(progress.borrow().clone(), Some(&ended));
        progress.send_replace(record);
        return;
    }
    end_failed(progress, why);
}

/// How long the controller keeps trying to fail a request in the API
/// before it ends the volume Failed all the same.
const FAIL_FOR: Duration = Duration::from_secs(300);

/// Fails the request in the API, so that its agent stops and writes no
/// snapshot ([`crate::node_agent`]'s fence reads the request), before the
/// volume is taken as ended (the pod's post hooks wait for that). Tried
/// again while the API server is away; tied to the request's
/// resourceVersion, so an agent's end that comes first is not
/// overwritten: it is returned, and stands.
pub async fn fail_request(
    api: &Api<VolumeBackup>,
    name: &str,
    why: &str,
) -> Option<VolumeBackupStatus> {
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(500);
    loop {
        let attempt = async {
            let Some(current) = crate::reach::get_opt(api, name).await? else {
                return Ok(None);
            };
            if let Some(status) = current.status.as_ref()
                && status.phase.is_some_and(|p| p.is_terminal())
            {
                return Ok(Some(status.clone()));
            }
            let stamp = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
            let patch = json!({
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "status": {
                    "phase": VolumePhase::Failed,
                    "message": why,
                    "completionTimestamp": stamp,
                    "lastUpdate": stamp,
                },
            });
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map(|_| None)
        };
        match attempt.await {
            Ok(ended) => return ended,
            Err(kube::Error::Api(e)) if e.code == 409 && started.elapsed() < FAIL_FOR => continue,
            Err(e) if crate::reach::unreached(&e) && started.elapsed() + pause < FAIL_FOR => {
                tracing::warn!(request = %name, "failing volume backup request (retrying in {pause:?}): {e}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(10));
            }
            Err(e) => {
                tracing::warn!(request = %name, "failing volume backup request: {e}");
                return None;
            }
        }
    }
}

/// Ends the handle Failed with `why`, after the volume's description.
fn end_failed(progress: &watch::Sender<Record>, why: String) {
    progress.send_modify(|v| {
        v.phase = VolumePhase::Failed;
        v.completed = Some(SystemTime::now());
        v.error = Some(format!("{}: {why}", v.describe()));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(phase: VolumePhase, done: u64, stamp: &str) -> VolumeBackupStatus {
        walked(phase, done, 0, stamp)
    }

    fn walked(phase: VolumePhase, done: u64, files: u64, stamp: &str) -> VolumeBackupStatus {
        VolumeBackupStatus {
            phase: Some(phase),
            progress: super::super::volume_backup::VolumeBackupProgress {
                total_bytes: 100,
                bytes_done: done,
                files_done: files,
            },
            last_update: Some(stamp.into()),
            ..VolumeBackupStatus::default()
        }
    }

    fn request(volume: &str, uid: &str) -> VolumeBackup {
        VolumeBackup {
            metadata: ObjectMeta {
                name: Some("nightly-web-data".into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "iar.dev/v1".into(),
                    kind: "Backup".into(),
                    name: "nightly".into(),
                    uid: uid.into(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]),
                ..ObjectMeta::default()
            },
            spec: VolumeBackupSpec {
                backup_name: "nightly".into(),
                backup_uid: uid.into(),
                backup_storage_location: "s3://b".into(),
                node: "n1".into(),
                pod: PodReference {
                    namespace: "shop".into(),
                    name: "web".into(),
                    uid: "pod-uid".into(),
                },
                volume: volume.into(),
                pvc: None,
                volume_dir: volume.into(),
                cancel: false,
            },
            status: None,
        }
    }

    /// A request planted under the name the controller would use, asking
    /// for another volume (or owned by no Backup) is not adopted; the
    /// controller's own request, canceled or not, is.
    #[test]
    fn a_planted_request_of_the_same_name_is_not_adopted() {
        let wanted = request("data", "u1");
        adoptable(&wanted, &wanted).unwrap();
        let mut canceled = wanted.clone();
        canceled.spec.cancel = true;
        adoptable(&canceled, &wanted).unwrap();
        let other_volume = request("creds", "u1");
        let refused = adoptable(&other_volume, &wanted).unwrap_err();
        assert!(refused.contains("rule: request-mismatch"), "{refused}");
        assert!(refused.contains("nightly-web-data"), "{refused}");
        assert!(refused.contains("backup nightly"), "{refused}");
        let mut other_store = wanted.clone();
        other_store.spec.backup_storage_location = "s3://attacker".into();
        adoptable(&other_store, &wanted).unwrap_err();
        let mut unowned = wanted.clone();
        unowned.metadata.owner_references = None;
        let refused = adoptable(&unowned, &wanted).unwrap_err();
        assert!(refused.contains("another owner"), "{refused}");
    }

    /// An agent that renews its timestamp while no byte moves is silent.
    #[test]
    fn only_moved_bytes_or_a_new_phase_count_as_alive() {
        let a = status(VolumePhase::InProgress, 10, "t1");
        assert!(!moved(
            Some(&a),
            Some(&status(VolumePhase::InProgress, 10, "t2"))
        ));
        assert!(moved(
            Some(&a),
            Some(&status(VolumePhase::InProgress, 11, "t2"))
        ));
        assert!(moved(
            Some(&a),
            Some(&status(VolumePhase::Completed, 10, "t2"))
        ));
        assert!(moved(None, Some(&a)));
    }

    /// An incremental backup of an unchanged volume reads no byte while
    /// it compares file after file with the parent snapshot: files
    /// walked are work, so the controller does not fail it as silent.
    #[test]
    fn files_walked_without_bytes_count_as_alive() {
        let a = walked(VolumePhase::InProgress, 10, 5_000, "t1");
        assert!(moved(
            Some(&a),
            Some(&walked(VolumePhase::InProgress, 10, 9_000, "t2"))
        ));
        assert!(!moved(
            Some(&a),
            Some(&walked(VolumePhase::InProgress, 10, 5_000, "t2"))
        ));
    }
}
