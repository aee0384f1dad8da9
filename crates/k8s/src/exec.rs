//! Backup hooks in the pod's own container, through the API server's
//! `pods/exec` subresource (a websocket the API server proxies to the
//! node's kubelet), with the checks Velero's pod command executor makes
//! first: the pod exists and is Running, and the hook's container is one
//! of its containers. The hook's timeout covers the whole exec; its exit
//! status comes from the exec's status channel.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, AttachParams};

use crate::reach::{never_started, until, until_reached};

use iar_backup::backup::hooks::{
    DEFAULT_TIMEOUT, ExecHook, HookOutput, HookPhase, HookRun, HookRunner, HookSource, HookStatus,
    HookTarget, ResolvedHook, Tail,
};
use iar_core::item::ItemRef;
use iar_plugin::sandbox::one_line;
use iar_restore::hooks::post::PodExec;
use iar_restore::hooks::{ExecHook as RestoreHook, FROM_ANNOTATION};

/// Runs each hook with `pods/exec` in the hook's container.
pub struct PodExecRunner {
    client: kube::Client,
}

impl PodExecRunner {
    pub fn new(client: kube::Client) -> Self {
        PodExecRunner { client }
    }
}

/// A hook that could not start: no exit code, the reason as its stderr.
fn not_started(reason: String) -> HookRun {
    HookStatus::Failed {
        exit_code: None,
        stderr_tail: reason,
    }
    .into()
}

/// Why `pod` cannot run a hook in `container`, if it cannot (Velero's
/// `ensureContainerExists` and its Running check, in that order).
pub fn refusal(pod: &Pod, container: &str) -> Option<String> {
    let spec = pod.spec.as_ref();
    let known = spec.is_some_and(|s| s.containers.iter().any(|c| c.name == container));
    if !known {
        let names: Vec<&str> = spec
            .map(|s| s.containers.iter().map(|c| c.name.as_str()).collect())
            .unwrap_or_default();
        return Some(format!(
            "no such container: {container:?} (the pod has {names:?})"
        ));
    }
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Unknown");
    (phase != "Running").then(|| format!("pod is not running (phase {phase})"))
}

/// How an exec ended, from its status-channel message: `Success`, or a
/// `Failure` whose `NonZeroExitCode` cause carries the exit code.
pub fn exit_status(status: Option<&Status>, output: &HookOutput) -> HookStatus {
    let Some(status) = status else {
        return HookStatus::Failed {
            exit_code: None,
            stderr_tail: iar_backup::backup::hooks::NO_EXIT_STATUS.into(),
        };
    };
    if status.status.as_deref() == Some("Success") {
        return HookStatus::Succeeded;
    }
    let exit_code = status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.reason.as_deref() == Some("ExitCode"))
        .and_then(|c| c.message.as_deref())
        .and_then(|m| m.parse::<i32>().ok());
    let stderr_tail = if output.stderr.is_empty() || exit_code.is_none() {
        // No exit code: the exec itself failed; say how.
        let message = status.message.clone().unwrap_or_default();
        if output.stderr.is_empty() {
            message
        } else {
            format!("{message}: {}", output.stderr)
        }
    } else {
        output.stderr.clone()
    };
    HookStatus::Failed {
        exit_code,
        stderr_tail,
    }
}

#[async_trait::async_trait]
impl HookRunner for PodExecRunner {
    async fn run(&self, target: &HookTarget, hook: &ResolvedHook) -> HookRun {
        let h = &hook.hook;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &target.pod.namespace);
        let params = AttachParams::default()
            .container(h.container.clone())
            .stdin(false)
            .stdout(true)
            .stderr(true);
        // The pod's read is tried again while the API server cannot be
        // reached, and the exec's start while it provably started nothing
        // (no connection, or no stream), within the hook's timeout: an
        // unfreeze owed is not given up to a dropped connection, and a
        // start whose answer was lost is never sent twice.
        let exec = async {
            let pod = until_reached(Duration::MAX, || pods.get_opt(&target.pod.name))
                .await
                .map_err(|e| format!("reading the pod: {e}"))?
                .ok_or_else(|| "pod not found".to_string())?;
            if let Some(reason) = refusal(&pod, &h.container) {
                return Err(reason);
            }
            let mut process = until(Duration::MAX, never_started, || {
                pods.exec(&target.pod.name, h.command.clone(), &params)
            })
            .await
            .map_err(|e| format!("{}{e}", iar_backup::backup::hooks::START_UNANSWERED))?;
            let stdout = process.stdout().map(Tail::of);
            let stderr = process.stderr().map(Tail::of);
            let status = process.take_status();
            let (stdout, stderr, status) = tokio::join!(
                async {
                    match stdout {
                        Some(s) => s.await,
                        None => Tail::default(),
                    }
                },
                async {
                    match stderr {
                        Some(s) => s.await,
                        None => Tail::default(),
                    }
                },
                async {
                    match status {
                        Some(s) => s.await,
                        None => None,
                    }
                }
            );
            let _ = process.join().await;
            Ok::<_, String>((
                HookOutput {
                    stdout: stdout.text(),
                    stderr: stderr.text(),
                },
                status,
            ))
        };
        // Dropping the exec on timeout closes the websocket: the API server
        // and the kubelet end the command (Velero does the same).
        match tokio::time::timeout(timeout_of(h.timeout), exec).await {
            Err(_) => HookStatus::TimedOut.into(),
            Ok(Err(reason)) => not_started(reason),
            Ok(Ok((output, status))) => HookRun {
                status: exit_status(status.as_ref(), &output),
                output,
            },
        }
    }
}

/// Restored pods' exec hooks ([`PodExec`]) through the same `pods/exec`
/// as backup hooks. The restore calls it on a thread of its own, never a
/// runtime thread, so it waits for the exec on the runtime's `handle`.
pub struct RestoreHookExec {
    runner: PodExecRunner,
    handle: tokio::runtime::Handle,
}

impl RestoreHookExec {
    pub fn new(client: kube::Client, handle: tokio::runtime::Handle) -> Self {
        RestoreHookExec {
            runner: PodExecRunner::new(client),
            handle,
        }
    }
}

impl PodExec for RestoreHookExec {
    fn exec(&self, namespace: &str, pod: &str, hook: &RestoreHook) -> Result<(), String> {
        let target = HookTarget {
            pod: ItemRef::new("", "pods", namespace, pod),
            volume_dirs: Default::default(),
        };
        let source = if hook.name == FROM_ANNOTATION {
            HookSource::Annotation
        } else {
            HookSource::Spec(hook.name.clone())
        };
        let resolved = ResolvedHook {
            source,
            phase: HookPhase::Post,
            hook: ExecHook {
                container: hook.container.clone(),
                command: hook.command.clone(),
                on_error: hook.on_error,
                timeout: hook.exec_timeout,
            },
        };
        let run = self.handle.block_on(self.runner.run(&target, &resolved));
        match run.status {
            HookStatus::Succeeded => Ok(()),
            HookStatus::Failed {
                exit_code: Some(code),
                stderr_tail,
            } => Err(format!(
                "command terminated with exit code {code}: {}",
                one_line(stderr_tail.trim_end().to_string())
            )),
            HookStatus::Failed { stderr_tail, .. } => {
                Err(one_line(stderr_tail.trim_end().to_string()))
            }
            HookStatus::TimedOut => Err(format!(
                "timed out after {}",
                humantime::format_duration(timeout_of(hook.exec_timeout))
            )),
            HookStatus::Skipped { reason } => Err(reason),
        }
    }
}

/// A hook whose timeout is `0s`: Velero waits for it without end; iar
/// gives it the default (30 s), because an exec nobody bounds holds the
/// block's post hooks and volume backups for ever.
fn timeout_of(timeout: Duration) -> Duration {
    if timeout.is_zero() {
        DEFAULT_TIMEOUT
    } else {
        timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};
    use serde_json::json;

    fn pod(phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "app"}, {"name": "sidecar"}]},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn a_hook_needs_a_running_pod_and_one_of_its_containers() {
        assert_eq!(refusal(&pod("Running"), "sidecar"), None);
        let missing = refusal(&pod("Running"), "db").unwrap();
        assert!(missing.contains("no such container: \"db\""), "{missing}");
        assert!(missing.contains("sidecar"), "{missing}");
        let pending = refusal(&pod("Pending"), "app").unwrap();
        assert_eq!(pending, "pod is not running (phase Pending)");
        // The container is checked first, as Velero does.
        assert!(
            refusal(&pod("Pending"), "db")
                .unwrap()
                .contains("no such container")
        );
    }

    fn failure(code: Option<&str>, message: &str) -> Status {
        Status {
            status: Some("Failure".into()),
            message: Some(message.into()),
            reason: Some("NonZeroExitCode".into()),
            details: Some(StatusDetails {
                causes: code.map(|c| {
                    vec![StatusCause {
                        reason: Some("ExitCode".into()),
                        message: Some(c.into()),
                        ..StatusCause::default()
                    }]
                }),
                ..StatusDetails::default()
            }),
            ..Status::default()
        }
    }

    #[test]
    fn the_exit_code_comes_from_the_status_channel() {
        let quiet = HookOutput::default();
        let ok = Status {
            status: Some("Success".into()),
            ..Status::default()
        };
        assert_eq!(exit_status(Some(&ok), &quiet), HookStatus::Succeeded);
        let said = HookOutput {
            stdout: String::new(),
            stderr: "disk full\n".into(),
        };
        assert_eq!(
            exit_status(
                Some(&failure(
                    Some("3"),
                    "command terminated with non-zero exit code"
                )),
                &said
            ),
            HookStatus::Failed {
                exit_code: Some(3),
                stderr_tail: "disk full\n".into()
            }
        );
        // No exit code: the exec failed, and its message says why.
        assert_eq!(
            exit_status(Some(&failure(None, "container not found")), &quiet),
            HookStatus::Failed {
                exit_code: None,
                stderr_tail: "container not found".into()
            }
        );
        let HookStatus::Failed {
            exit_code: None, ..
        } = exit_status(None, &quiet)
        else {
            panic!("no status is not success");
        };
    }
}
