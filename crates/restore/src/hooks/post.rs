//! A restored pod's exec hooks, as Velero's `DefaultWaitExecHookHandler`
//! runs them: each container's hooks, in order, once the container is
//! running (ready, when one of its hooks waits for ready); none once the
//! pod has ended or is gone; a hook whose own wait timeout has passed is
//! not started; after a failed hook whose mode is Fail, the pod's other
//! hooks are not run. Every hook not run is a failure of the restore,
//! named with why.
//!
//! Where iar differs: the wait is bounded even when no hook bounds it
//! ([`HOOK_WAIT`], Velero's resource timeout, which bounds its finalizer's
//! wait for the same hooks), and one pod's failed hook does not cancel
//! the other pods' hooks (Velero cancels every pod's still waiting).

use super::{ExecHook, OnError};
use iar_core::cluster::ClusterReader;
use iar_core::item::ItemRef;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The longest a pod's hooks wait for its containers (Velero's default
/// resource timeout, for which its finalizer waits for them).
pub const HOOK_WAIT: Duration = Duration::from_secs(600);

/// Between two reads of the pod.
const POLL: Duration = Duration::from_secs(1);

/// Runs a command in a container of a pod (`pods/exec`). Called on a
/// blocking thread; it must bound itself by the hook's exec timeout.
pub trait PodExec: Send + Sync {
    /// `Err`: why the command did not succeed (its exit code and the
    /// tail of its stderr, a timeout, or why it could not start).
    fn exec(&self, namespace: &str, pod: &str, hook: &ExecHook) -> Result<(), String>;
}

/// One restored pod's exec hooks.
#[derive(Clone, Debug)]
pub struct PodHooks {
    pub namespace: String,
    pub pod: String,
    pub hooks: Vec<ExecHook>,
}

/// What one pod's hooks did.
#[derive(Debug, Default)]
pub struct Report {
    /// Velero's `hooksAttempted`: every hook that applied to the pod.
    pub attempted: usize,
    /// Velero's `hooksFailed`: failed, or never run.
    pub failed: usize,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    pub log: Vec<String>,
}

struct Pending {
    hook: ExecHook,
    ran: bool,
}

/// Whether `container` of `pod` may run its hooks now.
fn up(pod: &Value, container: &str, ready: bool) -> bool {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|s| s.get("name").and_then(Value::as_str) == Some(container))
        .is_some_and(|s| {
            if ready {
                s.get("ready").and_then(Value::as_bool) == Some(true)
            } else {
                s.pointer("/state/running").is_some()
            }
        })
}

/// Waits for the pod's containers and runs their hooks, until every hook
/// ran, the pod ended or went, a Fail hook failed, the wait ran out or
/// `stop` was set.
pub fn run(
    pod: PodHooks,
    cluster: Arc<dyn ClusterReader>,
    exec: Arc<dyn PodExec>,
    stop: Option<Arc<AtomicBool>>,
) -> Report {
    let start = Instant::now();
    let mut report = Report::default();
    let path = format!("{}/{}", pod.namespace, pod.pod);
    let id = ItemRef::new("", "pods", pod.namespace.as_str(), pod.pod.as_str());
    // Velero's maxHookWait: a hook with no wait timeout waits as long as
    // there is (here, HOOK_WAIT); otherwise the longest.
    let wait = pod
        .hooks
        .iter()
        .map(|h| h.wait_timeout)
        .try_fold(Duration::ZERO, |longest, w| {
            (!w.is_zero()).then(|| longest.max(w))
        })
        .unwrap_or(HOOK_WAIT)
        .min(HOOK_WAIT);
    let mut by_container: BTreeMap<String, Vec<Pending>> = BTreeMap::new();
    for hook in pod.hooks {
        report.attempted += 1;
        by_container
            .entry(hook.container.clone())
            .or_default()
            .push(Pending { hook, ran: false });
    }
    let mut known = false;
    let ended: String = loop {
        if stop.as_ref().is_some_and(|s| s.load(Ordering::Acquire)) {
            break "the restore was stopped".into();
        }
        match cluster.get(&id) {
            Ok(None) => break format!("pod {path} deleted before all hooks were executed"),
            Err(e) => report.log.push(format!("pod {path}: reading it: {e}")),
            Ok(Some(live)) => {
                if !known {
                    known = true;
                    // Hooks for a container the pod lacks would wait for
                    // ever: Velero drops them with a warning.
                    let names: Vec<&str> = live
                        .pointer("/spec/containers")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c.get("name").and_then(Value::as_str))
                        .collect();
                    by_container.retain(|container, hooks| {
                        let has = names.contains(&container.as_str());
                        if !has {
                            report.attempted -= hooks.len();
                            report.warnings.push(format!(
                                "pod {path} does not have container {container}: discarding post-restore exec hooks"
                            ));
                        }
                        has
                    });
                }
                let phase = live.pointer("/status/phase").and_then(Value::as_str);
                if let Some(p @ ("Succeeded" | "Failed")) = phase {
                    break format!("pod entered phase {p} before some post-restore exec hooks ran");
                }
                if let Some(why) = run_ready(
                    &live,
                    &path,
                    &pod.namespace,
                    &pod.pod,
                    start,
                    &mut by_container,
                    exec.as_ref(),
                    &mut report,
                ) {
                    break why;
                }
                if by_container.is_empty() {
                    return report;
                }
            }
        }
        if start.elapsed() >= wait {
            break format!(
                "its containers were not up within {}",
                humantime::format_duration(wait)
            );
        }
        std::thread::sleep(POLL);
    };
    for (container, hooks) in by_container {
        for p in hooks.into_iter().filter(|p| !p.ran) {
            report.failed += 1;
            report.errors.push(format!(
                "hook {} in container {container} in pod {path} not executed: {ended}",
                p.hook.name
            ));
        }
    }
    report
}

/// Runs the hooks of every container of `live` that is up, removing each
/// container whose hooks all ran. `Some(why)`: stop waiting (a failed
/// hook whose mode is Fail).
#[allow(clippy::too_many_arguments)]
fn run_ready(
    live: &Value,
    path: &str,
    namespace: &str,
    pod: &str,
    start: Instant,
    by_container: &mut BTreeMap<String, Vec<Pending>>,
    exec: &dyn PodExec,
    report: &mut Report,
) -> Option<String> {
    let containers: Vec<String> = by_container.keys().cloned().collect();
    for container in containers {
        let hooks = by_container.get_mut(&container).expect("listed");
        let ready = hooks.iter().any(|p| p.hook.wait_for_ready);
        if !up(live, &container, ready) {
            continue;
        }
        for p in hooks.iter_mut() {
            p.ran = true;
            let h = &p.hook;
            let failure = if !h.wait_timeout.is_zero() && start.elapsed() > h.wait_timeout {
                Some(format!(
                    "hook {} in container {container} expired before executing",
                    h.name
                ))
            } else {
                match exec.exec(namespace, pod, h) {
                    Ok(()) => {
                        report.log.push(format!(
                            "pod {path}: post-restore hook {} in container {container} ran",
                            h.name
                        ));
                        None
                    }
                    Err(e) => Some(format!(
                        "hook {} in container {container} failed to execute, err: {e}",
                        h.name
                    )),
                }
            };
            if let Some(failure) = failure {
                report.failed += 1;
                report.errors.push(format!("pod {path}: {failure}"));
                if h.on_error == OnError::Fail {
                    return Some(format!(
                        "hook {} in container {container}, whose onError is Fail, failed",
                        h.name
                    ));
                }
            }
        }
        by_container.remove(&container);
    }
    None
}

#[cfg(test)]
mod tests;
