//! Backup hooks as a Backup declares them: pod annotations
//! (`pre.hook.backup.velero.io/{container,command,on-error,timeout}` and the
//! `post.` forms) and the spec's `hooks.resources[]`, parsed and resolved
//! for one pod and phase. An annotation hook replaces the spec hooks for
//! that pod and phase, as in Velero.

pub use iar_core::command::{OnError, parse_command};
use iar_core::command::{command_list, parse_on_error};
use iar_core::duration::parse_non_negative;
use iar_core::item::Item;
use iar_core::select::BackupFilter;
use serde::Serialize;
use serde_json::Value;
use std::time::Duration;

/// Velero's default hook timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// `--max-hook-timeout`'s default: the longest any hook runs, whatever its
/// annotation or spec asks. Generous for a dump or a flush (Velero's
/// default is 30 s), yet bounded: a pre hook holds a worker, and every
/// hook holds its block's volume backups or post hooks, for as long as it
/// may run.
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The rule a clamped timeout's warning names.
pub const TIMEOUT_CAP_RULE: &str = "hook-timeout-cap";

/// Clamps each hook's timeout to `cap` and says so: the timeout comes from
/// a pod's annotations or a Backup's spec, neither of them the operator's,
/// so an unbounded one would let them hold a worker for ever. Clamped, not
/// refused: the hook still runs (a freeze still gets its unfreeze), only
/// for less long than it asked. Returns one warning per clamped hook.
pub fn cap_timeouts(
    pod: &iar_core::item::ItemRef,
    hooks: &mut [ResolvedHook],
    cap: Duration,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for h in hooks.iter_mut().filter(|h| h.hook.timeout > cap) {
        warnings.push(iar_plugin::sandbox::one_line(format!(
            "{} {} of pod {}/{}: timeout {} is over --max-hook-timeout {}; it runs with {} (rule: {TIMEOUT_CAP_RULE})",
            h.phase.prefix(),
            h.source,
            pod.namespace,
            pod.name,
            humantime::format_duration(h.hook.timeout),
            humantime::format_duration(cap),
            humantime::format_duration(cap),
        )));
        h.hook.timeout = cap;
    }
    warnings
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum HookPhase {
    Pre,
    Post,
}

impl HookPhase {
    pub fn prefix(self) -> &'static str {
        match self {
            HookPhase::Pre => "pre",
            HookPhase::Post => "post",
        }
    }
}

/// One exec hook. An empty `container` means the pod's first container.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecHook {
    pub container: String,
    pub command: Vec<String>,
    pub on_error: OnError,
    #[serde(with = "secs")]
    pub timeout: Duration,
}

mod secs {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }
}

/// Where a hook was defined.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum HookSource {
    Annotation,
    /// `hooks.resources[]` entry, by its name.
    Spec(String),
}

impl std::fmt::Display for HookSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HookSource::Annotation => write!(f, "annotation hook"),
            HookSource::Spec(name) => write!(f, "hook {name:?}"),
        }
    }
}

/// A hook that applies to one pod in one phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedHook {
    pub source: HookSource,
    pub phase: HookPhase,
    pub hook: ExecHook,
}

/// A hook definition that does not parse; names where it came from.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{at}: {reason}")]
pub struct HookError {
    pub at: String,
    pub reason: String,
}

fn herr(at: impl Into<String>, reason: impl Into<String>) -> HookError {
    HookError {
        at: at.into(),
        reason: reason.into(),
    }
}

fn first_container(pod: &Item) -> String {
    pod.value()
        .pointer("/spec/containers/0/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// The hook a pod's annotations define for `phase`, if any (the command
/// annotation is what makes one).
pub fn annotation_hook(pod: &Item, phase: HookPhase) -> Result<Option<ExecHook>, HookError> {
    let annotations = pod.value().pointer("/metadata/annotations");
    let get = |suffix: &str| {
        let key = format!("{}.hook.backup.velero.io/{suffix}", phase.prefix());
        (
            annotations
                .and_then(|a| a.get(&key))
                .and_then(Value::as_str)
                .map(String::from),
            key,
        )
    };
    let at = |key: &str| format!("pod {}: annotation {key}", pod.id.path());
    let (Some(command), key) = get("command") else {
        return Ok(None);
    };
    let command = parse_command(&command).map_err(|e| herr(at(&key), e))?;
    let container = match get("container") {
        (Some(c), _) if !c.is_empty() => c,
        _ => first_container(pod),
    };
    let on_error = match get("on-error") {
        (Some(s), key) => parse_on_error(&s).map_err(|e| herr(at(&key), e))?,
        (None, _) => OnError::Fail,
    };
    let timeout = match get("timeout") {
        (Some(s), key) => parse_non_negative(&s).map_err(|e| herr(at(&key), e.to_string()))?,
        (None, _) => DEFAULT_TIMEOUT,
    };
    Ok(Some(ExecHook {
        container,
        command,
        on_error,
        timeout,
    }))
}

/// One `hooks.resources[]` entry.
#[derive(Clone, Debug)]
pub struct ResourceHook {
    pub name: String,
    filter: BackupFilter,
    pub pre: Vec<ExecHook>,
    pub post: Vec<ExecHook>,
}

/// The backup spec's hooks.
#[derive(Clone, Debug, Default)]
pub struct BackupHooks {
    pub resources: Vec<ResourceHook>,
}

fn exec_hooks(list: Option<&Value>, at: &str) -> Result<Vec<ExecHook>, HookError> {
    let mut out = Vec::new();
    let Some(list) = list.filter(|v| !v.is_null()) else {
        return Ok(out);
    };
    let list = list.as_array().ok_or_else(|| herr(at, "not a list"))?;
    for (i, h) in list.iter().enumerate() {
        let at = format!("{at}[{i}].exec");
        let Some(exec) = h.get("exec") else {
            return Err(herr(at, "missing (only exec hooks exist)"));
        };
        let s = |k: &str| exec.get(k).and_then(Value::as_str);
        let command =
            command_list(exec.get("command")).map_err(|e| herr(format!("{at}.command"), e))?;
        let on_error = match s("onError") {
            Some(v) => parse_on_error(v).map_err(|e| herr(format!("{at}.onError"), e))?,
            None => OnError::Fail,
        };
        let timeout = match s("timeout") {
            Some(v) => {
                parse_non_negative(v).map_err(|e| herr(format!("{at}.timeout"), e.to_string()))?
            }
            None => DEFAULT_TIMEOUT,
        };
        out.push(ExecHook {
            container: s("container").unwrap_or("").to_string(),
            command,
            on_error,
            timeout,
        });
    }
    Ok(out)
}

impl BackupHooks {
    /// From a Backup `spec` (its `hooks.resources`).
    pub fn from_spec(spec: &Value) -> Result<Self, HookError> {
        let mut resources = Vec::new();
        let list = spec
            .pointer("/hooks/resources")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (i, r) in list.iter().enumerate() {
            let at = format!("spec.hooks.resources[{i}]");
            let name = r
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| herr(format!("{at}.name"), "missing"))?
                .to_string();
            let at = format!("spec.hooks.resources[{i}] ({name})");
            // Same keys and semantics as the backup's own filters.
            let filter = BackupFilter::from_spec(r).map_err(|e| herr(&at, e))?;
            resources.push(ResourceHook {
                pre: exec_hooks(r.get("pre"), &format!("{at}.pre"))?,
                post: exec_hooks(r.get("post"), &format!("{at}.post"))?,
                name,
                filter,
            });
        }
        Ok(BackupHooks { resources })
    }

    /// The hooks for `pod` in `phase`, in order: its annotation hook if it
    /// has one (then no spec hook), else every matching spec hook.
    pub fn for_pod(&self, pod: &Item, phase: HookPhase) -> Result<Vec<ResolvedHook>, HookError> {
        if let Some(hook) = annotation_hook(pod, phase)? {
            return Ok(vec![ResolvedHook {
                source: HookSource::Annotation,
                phase,
                hook,
            }]);
        }
        let mut out = Vec::new();
        for r in self.resources.iter().filter(|r| r.filter.matches(pod)) {
            let list = match phase {
                HookPhase::Pre => &r.pre,
                HookPhase::Post => &r.post,
            };
            for h in list {
                let mut hook = h.clone();
                if hook.container.is_empty() {
                    hook.container = first_container(pod);
                }
                out.push(ResolvedHook {
                    source: HookSource::Spec(r.name.clone()),
                    phase,
                    hook,
                });
            }
        }
        Ok(out)
    }
}
