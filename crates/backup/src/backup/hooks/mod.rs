//! Backup hooks, as Velero defines them: pod annotations
//! (`pre.hook.backup.velero.io/{container,command,on-error,timeout}` and the
//! `post.` forms) and the backup spec's `hooks.resources[]`. An annotation
//! hook replaces the spec hooks for that pod and phase, as in Velero.
//!
//! Hooks run through a [`HookRunner`]: [`LocalProcessRunner`] runs each as a
//! local process (`--exec-hooks-locally`), [`SkippingRunner`] records them
//! as skipped with a warning. What an outcome means for the block is a pure
//! function ([`verdict`]), and so is whether post hooks may run
//! ([`post_hooks_allowed`]).
//!
//! The pod's volume data reaches a local hook through its environment
//! (see [`runner`]).

use crate::backup::volumes::volume_dir;
use iar_core::item::{Item, ItemRef};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;

pub mod runner;
pub mod spec;

pub use runner::*;
pub use spec::*;

/// How one hook run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "status"
)]
pub enum HookStatus {
    Succeeded,
    Failed {
        exit_code: Option<i32>,
        stderr_tail: String,
    },
    TimedOut,
    /// Not run: no runner executes hooks here.
    Skipped {
        reason: String,
    },
}

/// One hook run, for results and logs.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HookRecord {
    pub pod: ItemRef,
    #[serde(flatten)]
    pub hook: ResolvedHook,
    #[serde(flatten)]
    pub status: HookStatus,
    /// What the hook printed, for the log.
    #[serde(skip_serializing_if = "HookOutput::is_empty")]
    pub output: HookOutput,
    #[serde(with = "crate::backup::volumes::rfc3339")]
    pub started: Option<SystemTime>,
    #[serde(with = "crate::backup::volumes::rfc3339")]
    pub ended: Option<SystemTime>,
}

/// The record as one line of the backup's log and results: what the hook
/// printed, its container and its command are the pod's (or the spec's),
/// so control characters are escaped as a plugin's log lines are
/// ([`iar_plugin::sandbox::one_line`]): no forged log line, no terminal escape.
impl std::fmt::Display for HookRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut line = String::new();
        self.write_unescaped(&mut line)?;
        f.write_str(&iar_plugin::sandbox::one_line(line))
    }
}

impl HookRecord {
    fn write_unescaped(&self, f: &mut impl std::fmt::Write) -> std::fmt::Result {
        let h = &self.hook;
        write!(
            f,
            "{:?} {} of pod {}/{} (container {}, {:?}): ",
            h.phase, h.source, self.pod.namespace, self.pod.name, h.hook.container, h.hook.command
        )?;
        match &self.status {
            HookStatus::Succeeded => write!(f, "succeeded"),
            HookStatus::Failed {
                exit_code,
                stderr_tail,
            } => {
                match exit_code {
                    Some(c) => write!(f, "failed with exit code {c}")?,
                    None => write!(f, "failed")?,
                }
                if !stderr_tail.is_empty() {
                    write!(f, ": {}", stderr_tail.trim_end())?;
                }
                Ok(())
            }
            HookStatus::TimedOut => write!(
                f,
                "timed out after {}",
                humantime::format_duration(h.hook.timeout)
            ),
            HookStatus::Skipped { reason } => write!(f, "skipped: {reason}"),
        }
    }
}

/// What a hook's outcome means for its block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// `onError: Continue`, or skipped: a warning in the results.
    Warning(String),
    /// `onError: Fail`: the block's items fail, the backup is PartiallyFailed.
    BlockFailed(String),
}

/// Pure: `Fail` fails the block, `Continue` warns, a skipped hook warns.
pub fn verdict(record: &HookRecord) -> Verdict {
    match (&record.status, record.hook.hook.on_error) {
        (HookStatus::Succeeded, _) => Verdict::Ok,
        (HookStatus::Skipped { .. }, _) => Verdict::Warning(record.to_string()),
        (_, OnError::Continue) => Verdict::Warning(record.to_string()),
        (_, OnError::Fail) => Verdict::BlockFailed(record.to_string()),
    }
}

/// Pure: whether a pod's post hooks run after its pre hooks. As in Velero
/// v1.18, only a pre hook whose failure fails the block (`onError: Fail`)
/// stops them: one that failed or timed out with `onError: Continue` is a
/// warning, and the pod keeps its post hooks (Velero's
/// `item_hook_handler.go` returns no error for Continue, so
/// `handleItemBlockPreHooks` keeps the pod among those whose post hooks
/// run). A freeze that overran its timeout may still have frozen: the
/// unfreeze must run. Skipped pre hooks mean hooks are not run here, so
/// neither are post hooks.
/// What an exec runner says of a hook whose command may have run though
/// its end is not known: the stream ended with no exit status, or its
/// start's answer was lost ([`outcome_unknown`] reads them).
pub const NO_EXIT_STATUS: &str = "the exec ended without an exit status";
pub const START_UNANSWERED: &str = "starting the exec: ";

/// Whether hooks that failed may still have done what they do (a pre
/// hook, frozen the pod) without saying so: one timed out, or its runner
/// lost its end ([`NO_EXIT_STATUS`], [`START_UNANSWERED`]). A hook that
/// answered with its exit status, or was refused before its start, did
/// nothing it did not say.
pub fn outcome_unknown(records: &[HookRecord]) -> bool {
    records.iter().any(|r| match &r.status {
        HookStatus::TimedOut => true,
        HookStatus::Failed {
            exit_code: None,
            stderr_tail,
        } => stderr_tail == NO_EXIT_STATUS || stderr_tail.starts_with(START_UNANSWERED),
        _ => false,
    })
}

pub fn post_hooks_allowed(pre: &[HookRecord]) -> bool {
    pre.iter().all(|r| match r.status {
        HookStatus::Succeeded => true,
        HookStatus::Skipped { .. } => false,
        HookStatus::Failed { .. } | HookStatus::TimedOut => {
            r.hook.hook.on_error == OnError::Continue
        }
    })
}

/// The pod a hook runs for, and where its volumes' data is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HookTarget {
    pub pod: ItemRef,
    /// Volume name → its data directory, for the volumes that have one.
    pub volume_dirs: BTreeMap<String, PathBuf>,
}

impl HookTarget {
    /// `pod`'s volumes under a `--volume-data` root (see [`volume_dir`]).
    /// A volume whose names break Kubernetes' rules gets no directory: the
    /// hook does not see it (its volume backup, if any, fails saying why).
    pub fn for_pod(pod: &Item, volume_data: Option<&std::path::Path>) -> HookTarget {
        let mut volume_dirs = BTreeMap::new();
        if let Some(root) = volume_data {
            for v in pod
                .value()
                .pointer("/spec/volumes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(name) = v.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let pvc = v
                    .pointer("/persistentVolumeClaim/claimName")
                    .and_then(Value::as_str);
                if let Ok(dir) = volume_dir(root, &pod.id.namespace, &pod.id.name, name, pvc) {
                    volume_dirs.insert(name.to_string(), dir);
                }
            }
        }
        HookTarget {
            pod: pod.id.clone(),
            volume_dirs,
        }
    }
}

/// Runs `hooks` (one pod, one phase) in order. Stops at the first hook whose
/// failure fails the block (`onError: Fail`), as Velero does; the rest are
/// not run.
pub async fn run_hooks(
    runner: &dyn HookRunner,
    target: &HookTarget,
    hooks: &[ResolvedHook],
    clock: &dyn iar_core::clock::Clock,
) -> Vec<HookRecord> {
    let mut records = Vec::new();
    for hook in hooks {
        let started = clock.system_now();
        let HookRun { status, output } = runner.run(target, hook).await;
        let record = HookRecord {
            pod: target.pod.clone(),
            hook: hook.clone(),
            status,
            output,
            started: Some(started),
            ended: Some(clock.system_now()),
        };
        let stop = matches!(verdict(&record), Verdict::BlockFailed(_));
        records.push(record);
        if stop {
            break;
        }
    }
    records
}

#[cfg(test)]
mod tests;
