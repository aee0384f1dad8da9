//! The controller's half of a pod volume restore
//! ([`iar_restore::pod_volumes::PodVolumeRestorer`]): once a restored pod
//! is scheduled, one [`VolumeRestore`] per volume for the node agent of
//! its node, then a wait for each to end. The pod's `restore-wait` init
//! container holds its own containers back meanwhile.

use super::volume_backup::{NODE_LABEL, PodReference, node_label};
use super::volume_restore::{RESTORE_LABEL, VolumeRestore, VolumeRestoreSpec, request_name};
use iar_backup::backup::volumes::VolumePhase;
use iar_restore::pod_volumes::{PodVolumeJob, PodVolumeReport, PodVolumeRestorer};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Creates and waits for VolumeRestores in the controller's namespace.
pub struct RequestRestorer {
    pub client: kube::Client,
    /// Where the requests go (the controller's namespace).
    pub namespace: String,
    /// The store's URL, which the agent checks is its own.
    pub store_url: String,
    /// How long a restored pod may stay unscheduled.
    pub schedule_wait: Duration,
    /// How long one volume's restore may take (Velero's
    /// `--pod-volume-operation-timeout`, 4 h).
    pub timeout: Duration,
    pub runtime: tokio::runtime::Handle,
}

/// How often the pod and the requests are read while waiting.
const POLL: Duration = Duration::from_secs(1);

impl PodVolumeRestorer for RequestRestorer {
    fn restore(
        &self,
        restore_uid: &str,
        job: PodVolumeJob,
        stop: Option<Arc<AtomicBool>>,
    ) -> PodVolumeReport {
        self.runtime
            .block_on(self.restore_pod(restore_uid, job, stop))
    }
}

impl RequestRestorer {
    async fn restore_pod(
        &self,
        restore_uid: &str,
        job: PodVolumeJob,
        stop: Option<Arc<AtomicBool>>,
    ) -> PodVolumeReport {
        let mut report = PodVolumeReport::default();
        let shown = format!("{}/{}", job.namespace, job.pod);
        let stopped = || stop.as_ref().is_some_and(|s| s.load(Ordering::Acquire));
        let fail_all = |report: &mut PodVolumeReport, why: &str| {
            report.failed += job.volumes.len();
            report.errors.push(format!(
                "pod {shown}: the data of its volumes {:?} was not restored: {why}",
                job.volumes
            ));
        };
        let (pod, node) = match self.scheduled(&job, &stopped).await {
            Ok(found) => found,
            Err(why) => {
                fail_all(&mut report, &why);
                return report;
            }
        };
        let restore_name = job.restore_name.clone();
        let requests = Api::<VolumeRestore>::namespaced(self.client.clone(), &self.namespace);
        let mut names = Vec::new();
        for volume in &job.volumes {
            let name = request_name(&restore_name, restore_uid, &pod.uid, volume);
            let mut request = VolumeRestore::new(
                &name,
                VolumeRestoreSpec {
                    restore_name: restore_name.clone(),
                    restore_uid: restore_uid.to_string(),
                    backup_name: job.backup.clone(),
                    backup_storage_location: self.store_url.clone(),
                    node: node.clone(),
                    pod: pod.clone(),
                    volume: volume.clone(),
                    source_namespace: job.source_namespace.clone(),
                    source_pod: job.source_pod.clone(),
                },
            );
            // Goes with its Restore (Kubernetes' garbage collector), as
            // Velero's PodVolumeRestores do.
            request.metadata.owner_references = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "iar.dev/v1".into(),
                    kind: "Restore".into(),
                    name: restore_name.clone(),
                    uid: restore_uid.to_string(),
                    controller: Some(true),
                    block_owner_deletion: None,
                },
            ]);
            request.metadata.labels = Some(
                [
                    (NODE_LABEL.to_string(), node_label(&node)),
                    (
                        RESTORE_LABEL.to_string(),
                        iar_core::names::label_value(&restore_name),
                    ),
                ]
                .into(),
            );
            match requests.create(&PostParams::default(), &request).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => {
                    report.failed += 1;
                    report.errors.push(format!(
                        "pod {shown} volume {volume}: asking node {node}'s agent to restore it: {e}"
                    ));
                    continue;
                }
            }
            report.log.push(format!(
                "pod {shown} volume {volume}: restore asked of node {node}'s agent ({name})"
            ));
            names.push((volume.clone(), name));
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        for (volume, name) in names {
            loop {
                let ended = match requests.get_opt(&name).await {
                    Ok(Some(r)) => r
                        .status
                        .filter(|s| s.phase.is_some_and(|p| p.is_terminal())),
                    Ok(None) => {
                        report.failed += 1;
                        report.errors.push(format!(
                            "pod {shown} volume {volume}: its request {name} was deleted before it ended"
                        ));
                        break;
                    }
                    Err(_) => None,
                };
                if let Some(status) = ended {
                    report.warnings.extend(
                        status
                            .warnings
                            .iter()
                            .map(|w| format!("pod {shown} volume {volume}: {w}")),
                    );
                    if status.phase == Some(VolumePhase::Completed) {
                        report.completed += 1;
                        report.log.push(format!(
                            "pod {shown} volume {volume}: restored, {} files, {} bytes",
                            status.files, status.bytes_done
                        ));
                    } else {
                        report.failed += 1;
                        report.errors.push(format!(
                            "pod {shown} volume {volume}: {:?}: {}",
                            status.phase.unwrap_or(VolumePhase::Failed),
                            status.message.unwrap_or_default()
                        ));
                    }
                    break;
                }
                if stopped() || tokio::time::Instant::now() >= deadline {
                    report.failed += 1;
                    report.errors.push(format!(
                        "pod {shown} volume {volume}: not restored within {} (or the restore was stopped); its request {name} is left as it is",
                        humantime::format_duration(self.timeout)
                    ));
                    break;
                }
                tokio::time::sleep(POLL).await;
            }
        }
        report
    }

    /// The restored pod once scheduled: its reference and its node.
    async fn scheduled(
        &self,
        job: &PodVolumeJob,
        stopped: &dyn Fn() -> bool,
    ) -> Result<(PodReference, String), String> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), &job.namespace);
        let deadline = tokio::time::Instant::now() + self.schedule_wait;
        loop {
            match pods.get_opt(&job.pod).await {
                Ok(Some(pod)) => {
                    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
                    if let (Some(node), Some(uid)) = (node, pod.metadata.uid.clone()) {
                        let reference = PodReference {
                            namespace: job.namespace.clone(),
                            name: job.pod.clone(),
                            uid,
                        };
                        return Ok((reference, node));
                    }
                }
                Ok(None) => return Err("the pod is gone".into()),
                Err(_) => {}
            }
            if stopped() {
                return Err("the restore was stopped".into());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "the pod was not scheduled to a node within {}",
                    humantime::format_duration(self.schedule_wait)
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
