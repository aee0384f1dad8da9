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
//! A local hook finds the pod's volume data through its environment:
//! `IAR_VOLUME_DIR_<VOLUME>` for each volume of the pod that has a data
//! directory (the name upper-cased, every character other than `A-Z0-9`
//! turned into `_`), plus `IAR_VOLUME_DATA` (the root), `IAR_POD_NAMESPACE`,
//! `IAR_POD_NAME`, `IAR_CONTAINER`, `IAR_HOOK_PHASE`. Its working
//! directory is the root. Environment variables rather than a working
//! directory per volume because a pod has several volumes and one hook may
//! touch any of them, as a command exec'd in the container would.

use crate::backup::spec::parse_go_duration;
use crate::backup::volumes::volume_dir;
use crate::item::{Item, ItemRef};
use crate::select::BackupFilter;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// Velero's default hook timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of a failed hook's stderr is kept.
pub const STDERR_TAIL: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum HookPhase {
    Pre,
    Post,
}

impl HookPhase {
    fn prefix(self) -> &'static str {
        match self {
            HookPhase::Pre => "pre",
            HookPhase::Post => "post",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum OnError {
    Fail,
    Continue,
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

/// A command as Velero reads it: a JSON array of strings, or one string
/// that is the whole command (not split on spaces).
pub fn parse_command(s: &str) -> Result<Vec<String>, String> {
    let t = s.trim();
    let command = if t.starts_with('[') {
        serde_json::from_str::<Vec<String>>(t)
            .map_err(|e| format!("not a JSON string array: {e}"))?
    } else {
        vec![s.to_string()]
    };
    if command.is_empty() || command[0].is_empty() {
        return Err("empty command".into());
    }
    Ok(command)
}

fn parse_on_error(s: &str) -> Result<OnError, String> {
    match s {
        "Fail" => Ok(OnError::Fail),
        "Continue" => Ok(OnError::Continue),
        other => Err(format!("{other:?} is not Fail or Continue")),
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
    let at = |key: &str| format!("pod {}: annotation {key}", pod.id);
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
        (Some(s), key) => parse_go_duration(&s).map_err(|e| herr(at(&key), e))?,
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
        let command = match exec.get("command") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(String::from))
                .collect::<Option<Vec<_>>>()
                .filter(|c| c.first().is_some_and(|c| !c.is_empty()))
                .ok_or_else(|| herr(format!("{at}.command"), "want a non-empty list of strings"))?,
            _ => {
                return Err(herr(
                    format!("{at}.command"),
                    "want a non-empty list of strings",
                ));
            }
        };
        let on_error = match s("onError") {
            Some(v) => parse_on_error(v).map_err(|e| herr(format!("{at}.onError"), e))?,
            None => OnError::Fail,
        };
        let timeout = match s("timeout") {
            Some(v) => parse_go_duration(v).map_err(|e| herr(format!("{at}.timeout"), e))?,
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
    #[serde(with = "crate::backup::volumes::rfc3339")]
    pub started: Option<SystemTime>,
    #[serde(with = "crate::backup::volumes::rfc3339")]
    pub ended: Option<SystemTime>,
}

impl std::fmt::Display for HookRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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

/// Pure: post hooks run for a pod only when every pre hook that ran for it
/// succeeded. A failed pre hook, even with `onError: Continue`, means the
/// application may not be quiesced, so there is nothing for a post hook to
/// undo (Velero's hook tracker); skipped pre hooks mean hooks are not run.
pub fn post_hooks_allowed(pre: &[HookRecord]) -> bool {
    pre.iter().all(|r| r.status == HookStatus::Succeeded)
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

/// Runs one exec hook for a pod. Implementations must not block the async
/// runtime, and must enforce the hook's timeout.
#[async_trait::async_trait]
pub trait HookRunner: Send + Sync {
    async fn run(&self, target: &HookTarget, hook: &ResolvedHook) -> HookStatus;
}

/// Records every hook as skipped: hooks were not asked to run here.
pub struct SkippingRunner;

#[async_trait::async_trait]
impl HookRunner for SkippingRunner {
    async fn run(&self, _target: &HookTarget, _hook: &ResolvedHook) -> HookStatus {
        HookStatus::Skipped {
            reason: "hooks run only with --exec-hooks-locally (or in a cluster)".into(),
        }
    }
}

/// A hook's `PATH` when iar's own environment has none.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The variables a hook gets besides its `IAR_*` ones; every other variable
/// of iar's environment is withheld.
pub const HOOK_ENV: [&str; 2] = ["PATH", "LANG"];

/// Runs each hook's command as a local process (argv as given, no shell),
/// in its own process group so that a timeout kills everything it started.
/// Its environment is cleared first (see the module's documentation).
pub struct LocalProcessRunner {
    /// `--volume-data`: the working directory, `IAR_VOLUME_DATA`.
    pub volume_data: PathBuf,
}

/// `IAR_VOLUME_DIR_` + the volume name with every character other than
/// `A-Z0-9` as `_`, upper-cased.
pub fn volume_env_name(volume: &str) -> String {
    let mut s = String::from("IAR_VOLUME_DIR_");
    s.extend(volume.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    s
}

fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_TAIL);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

#[async_trait::async_trait]
impl HookRunner for LocalProcessRunner {
    async fn run(&self, target: &HookTarget, hook: &ResolvedHook) -> HookStatus {
        use tokio::io::AsyncReadExt;
        let h = &hook.hook;
        let mut cmd = tokio::process::Command::new(&h.command[0]);
        let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
        cmd.args(&h.command[1..])
            .env_clear()
            .env("PATH", path)
            .env("LANG", "C.UTF-8")
            .current_dir(&self.volume_data)
            .env("IAR_VOLUME_DATA", &self.volume_data)
            .env("IAR_POD_NAMESPACE", &target.pod.namespace)
            .env("IAR_POD_NAME", &target.pod.name)
            .env("IAR_CONTAINER", &h.container)
            .env("IAR_HOOK_PHASE", hook.phase.prefix())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        for (volume, dir) in &target.volume_dirs {
            cmd.env(volume_env_name(volume), dir);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return HookStatus::Failed {
                    exit_code: None,
                    stderr_tail: format!("cannot start {:?}: {e}", h.command[0]),
                };
            }
        };
        let pid = child.id();
        let mut stderr = child.stderr.take().expect("stderr is piped");
        // Read stderr while waiting, so a chatty hook cannot fill the pipe
        // and stall; keep only the tail.
        let reader = tokio::spawn(async move {
            let mut kept = Vec::new();
            let mut buf = [0u8; 8192];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > 2 * STDERR_TAIL {
                    kept.drain(..kept.len() - STDERR_TAIL);
                }
            }
            kept
        });
        match tokio::time::timeout(h.timeout, child.wait()).await {
            Ok(Ok(status)) => {
                // The hook's own children may still hold stderr open: end
                // the group so the reader finishes.
                kill_group(pid);
                let stderr = reader.await.unwrap_or_default();
                if status.success() {
                    HookStatus::Succeeded
                } else {
                    HookStatus::Failed {
                        exit_code: status.code(),
                        stderr_tail: tail(&stderr),
                    }
                }
            }
            Ok(Err(e)) => {
                kill_group(pid);
                reader.abort();
                HookStatus::Failed {
                    exit_code: None,
                    stderr_tail: format!("waiting for the hook: {e}"),
                }
            }
            Err(_) => {
                kill_group(pid);
                let _ = child.kill().await;
                reader.abort();
                HookStatus::TimedOut
            }
        }
    }
}

/// SIGKILL to the process group the hook leads (it was started with
/// `process_group(0)`, so its group id is its pid). The group is ours alone.
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: kill(2) with a negative pid signals that process group; it
        // touches no memory of ours.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
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
) -> Vec<HookRecord> {
    let mut records = Vec::new();
    for hook in hooks {
        let started = SystemTime::now();
        let status = runner.run(target, hook).await;
        let record = HookRecord {
            pod: target.pod.clone(),
            hook: hook.clone(),
            status,
            started: Some(started),
            ended: Some(SystemTime::now()),
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
mod tests {
    use super::*;
    use crate::resources::Catalog;
    use serde_json::json;
    use std::time::Instant;

    fn pod(ns: &str, name: &str, labels: Value, annotations: Value) -> Item {
        Item::from_value(
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations},
                "spec": {"containers": [{"name": "app"}, {"name": "sidecar"}],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "db-data"}},
                                {"name": "scratch-1", "emptyDir": {}}]}}),
            Catalog::builtin(),
        )
        .unwrap()
    }

    fn hook(command: &[&str], on_error: OnError, timeout: Duration) -> ResolvedHook {
        ResolvedHook {
            source: HookSource::Spec("test".into()),
            phase: HookPhase::Pre,
            hook: ExecHook {
                container: "app".into(),
                command: command.iter().map(|s| s.to_string()).collect(),
                on_error,
                timeout,
            },
        }
    }

    /// Annotation hooks: a JSON array or a plain string command, on-error,
    /// a Go duration timeout, the first container by default, Velero's
    /// defaults (Fail, 30 s); a bad value names the annotation.
    #[test]
    fn annotation_hooks_parse() {
        let p = pod(
            "ns",
            "db",
            json!({}),
            json!({
                "pre.hook.backup.velero.io/command": "[\"/bin/sh\", \"-c\", \"sync\"]",
                "pre.hook.backup.velero.io/on-error": "Continue",
                "pre.hook.backup.velero.io/timeout": "1m30s",
                "pre.hook.backup.velero.io/container": "sidecar",
                "post.hook.backup.velero.io/command": "/unfreeze --all",
            }),
        );
        assert_eq!(
            annotation_hook(&p, HookPhase::Pre).unwrap(),
            Some(ExecHook {
                container: "sidecar".into(),
                command: vec!["/bin/sh".into(), "-c".into(), "sync".into()],
                on_error: OnError::Continue,
                timeout: Duration::from_secs(90),
            })
        );
        assert_eq!(
            annotation_hook(&p, HookPhase::Post).unwrap(),
            Some(ExecHook {
                container: "app".into(),
                command: vec!["/unfreeze --all".into()],
                on_error: OnError::Fail,
                timeout: DEFAULT_TIMEOUT,
            })
        );
        let none = pod(
            "ns",
            "db",
            json!({}),
            json!({"pre.hook.backup.velero.io/container": "app"}),
        );
        assert_eq!(annotation_hook(&none, HookPhase::Pre).unwrap(), None);
        for (key, value) in [
            ("pre.hook.backup.velero.io/on-error", "Abort"),
            ("pre.hook.backup.velero.io/timeout", "soon"),
            ("pre.hook.backup.velero.io/command", "[\"unterminated\""),
        ] {
            let mut a = json!({"pre.hook.backup.velero.io/command": "true"});
            a[key] = json!(value);
            let e = annotation_hook(&pod("ns", "db", json!({}), a), HookPhase::Pre).unwrap_err();
            assert_eq!(e.at, format!("pod pods ns/db: annotation {key}"), "{e}");
        }
    }

    fn spec() -> Value {
        json!({"hooks": {"resources": [
            {"name": "freeze-db", "includedNamespaces": ["prod"], "labelSelector": {"matchLabels": {"app": "db"}},
             "pre": [{"exec": {"command": ["fsfreeze", "--freeze"], "onError": "Continue", "timeout": "10s"}},
                     {"exec": {"container": "sidecar", "command": ["flush"]}}],
             "post": [{"exec": {"command": ["fsfreeze", "--unfreeze"]}}]},
            {"name": "everywhere-but-kube-system", "excludedNamespaces": ["kube-system"],
             "pre": [{"exec": {"command": ["echo", "hi"]}}]}
        ]}})
    }

    /// Spec hooks apply by namespace and label selector, in definition
    /// order, with the first container by default; a pod's annotation hook
    /// replaces them for that phase only.
    #[test]
    fn spec_hooks_resolve_per_pod_and_phase() {
        let hooks = BackupHooks::from_spec(&spec()).unwrap();
        let cmds = |p: &Item, phase| -> Vec<(String, String, String)> {
            hooks
                .for_pod(p, phase)
                .unwrap()
                .into_iter()
                .map(|h| {
                    (
                        h.source.to_string(),
                        h.hook.container,
                        h.hook.command.join(" "),
                    )
                })
                .collect()
        };
        let db = pod("prod", "db-0", json!({"app": "db"}), json!({}));
        assert_eq!(
            cmds(&db, HookPhase::Pre),
            vec![
                (
                    "hook \"freeze-db\"".into(),
                    "app".into(),
                    "fsfreeze --freeze".into()
                ),
                (
                    "hook \"freeze-db\"".into(),
                    "sidecar".into(),
                    "flush".into()
                ),
                (
                    "hook \"everywhere-but-kube-system\"".into(),
                    "app".into(),
                    "echo hi".into()
                ),
            ]
        );
        assert_eq!(cmds(&db, HookPhase::Post).len(), 1);
        let web = pod("prod", "web", json!({"app": "web"}), json!({}));
        assert_eq!(cmds(&web, HookPhase::Pre).len(), 1);
        assert_eq!(cmds(&web, HookPhase::Post).len(), 0);
        let system = pod("kube-system", "dns", json!({"app": "db"}), json!({}));
        assert!(cmds(&system, HookPhase::Pre).is_empty());
        let annotated = pod(
            "prod",
            "db-1",
            json!({"app": "db"}),
            json!({"pre.hook.backup.velero.io/command": "[\"own\"]"}),
        );
        assert_eq!(
            cmds(&annotated, HookPhase::Pre),
            vec![("annotation hook".into(), "app".into(), "own".into())]
        );
        // Only the pre phase is annotated: post still comes from the spec.
        assert_eq!(
            cmds(&annotated, HookPhase::Post)[0].2,
            "fsfreeze --unfreeze"
        );
        let first = &hooks.for_pod(&db, HookPhase::Pre).unwrap()[0].hook;
        assert_eq!(
            (first.on_error, first.timeout),
            (OnError::Continue, Duration::from_secs(10))
        );
    }

    /// A bad spec hook names the resource hook and the field.
    #[test]
    fn bad_spec_hooks_name_the_field() {
        let cases = [
            (
                json!({"name": "h", "pre": [{"exec": {"command": []}}]}),
                "spec.hooks.resources[0] (h).pre[0].exec.command",
            ),
            (
                json!({"name": "h", "post": [{"exec": {"command": ["x"], "onError": "Retry"}}]}),
                "spec.hooks.resources[0] (h).post[0].exec.onError",
            ),
            (
                json!({"name": "h", "pre": [{"exec": {"command": ["x"], "timeout": "1 minute"}}]}),
                "spec.hooks.resources[0] (h).pre[0].exec.timeout",
            ),
            (
                json!({"name": "h", "pre": [{"http": {}}]}),
                "spec.hooks.resources[0] (h).pre[0].exec",
            ),
            (json!({"pre": []}), "spec.hooks.resources[0].name"),
        ];
        for (r, at) in cases {
            let e = BackupHooks::from_spec(&json!({"hooks": {"resources": [r]}})).unwrap_err();
            assert_eq!(e.at, at, "{e}");
        }
    }

    fn target(dir: &std::path::Path) -> HookTarget {
        HookTarget::for_pod(&pod("prod", "db-0", json!({}), json!({})), Some(dir))
    }

    /// A local hook runs as a real process with the pod's volume
    /// directories in its environment: it writes a marker into one.
    #[tokio::test]
    async fn local_hook_finds_its_volume_directories() {
        let dir = tempfile::tempdir().unwrap();
        let t = target(dir.path());
        assert_eq!(t.volume_dirs["data"], dir.path().join("prod/db-data"));
        assert_eq!(
            t.volume_dirs["scratch-1"],
            dir.path().join("prod/.pods/db-0/scratch-1")
        );
        std::fs::create_dir_all(&t.volume_dirs["data"]).unwrap();
        let runner = LocalProcessRunner {
            volume_data: dir.path().into(),
        };
        let h = hook(
            &[
                "sh",
                "-c",
                "echo \"$IAR_POD_NAMESPACE/$IAR_POD_NAME $IAR_HOOK_PHASE $IAR_CONTAINER\" > \"$IAR_VOLUME_DIR_DATA/marker\"; test -n \"$IAR_VOLUME_DIR_SCRATCH_1\"",
            ],
            OnError::Fail,
            Duration::from_secs(10),
        );
        assert_eq!(runner.run(&t, &h).await, HookStatus::Succeeded);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("prod/db-data/marker")).unwrap(),
            "prod/db-0 pre app\n"
        );
    }

    /// A hook's environment is cleared: it sees `PATH`, `LANG` and its
    /// `IAR_*` variables, and none of iar's own (this test process's
    /// `CARGO_*` variables, which cargo sets for it, stand for the store's
    /// credentials). Before, the hook inherited everything.
    #[tokio::test]
    async fn local_hook_sees_only_its_own_environment() {
        let dir = tempfile::tempdir().unwrap();
        // What the shell itself sets (its working directory, its level).
        let shell = ["PWD", "SHLVL", "_", "OLDPWD"];
        let inherited: Vec<String> = std::env::vars()
            .map(|(k, _)| k)
            .filter(|k| {
                !HOOK_ENV.contains(&k.as_str())
                    && !k.starts_with("IAR_")
                    && !shell.contains(&k.as_str())
            })
            .collect();
        assert!(
            inherited.iter().any(|k| k.starts_with("CARGO_")),
            "cargo sets CARGO_* for tests: {inherited:?}"
        );
        let runner = LocalProcessRunner {
            volume_data: dir.path().into(),
        };
        let h = hook(
            &["sh", "-c", "env > \"$IAR_VOLUME_DATA/env\""],
            OnError::Fail,
            Duration::from_secs(10),
        );
        assert_eq!(
            runner.run(&target(dir.path()), &h).await,
            HookStatus::Succeeded
        );
        let env = std::fs::read_to_string(dir.path().join("env")).unwrap();
        let names: Vec<&str> = env
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, _)| k)
            .collect();
        for name in &names {
            assert!(
                HOOK_ENV.contains(name) || name.starts_with("IAR_") || shell.contains(name),
                "{name} reached the hook: {env}"
            );
        }
        for name in &inherited {
            assert!(!names.contains(&name.as_str()), "{name} leaked: {env}");
        }
        assert!(env.contains("LANG=C.UTF-8"), "{env}");
        assert!(env.lines().any(|l| l.starts_with("PATH=/")), "{env}");
        assert!(env.contains("IAR_POD_NAME=db-0"), "{env}");
    }

    /// A failing hook reports its exit code and the tail of its stderr; a
    /// command that cannot start fails naming it.
    #[tokio::test]
    async fn local_hook_failure_keeps_exit_code_and_stderr_tail() {
        let dir = tempfile::tempdir().unwrap();
        let runner = LocalProcessRunner {
            volume_data: dir.path().into(),
        };
        let h = hook(
            &[
                "sh",
                "-c",
                "for i in $(seq 1 2000); do echo line-$i >&2; done; exit 3",
            ],
            OnError::Fail,
            Duration::from_secs(10),
        );
        let HookStatus::Failed {
            exit_code,
            stderr_tail,
        } = runner.run(&target(dir.path()), &h).await
        else {
            panic!("not failed");
        };
        assert_eq!(exit_code, Some(3));
        assert!(stderr_tail.len() <= STDERR_TAIL);
        assert!(stderr_tail.ends_with("line-2000\n"), "{stderr_tail}");
        let missing = hook(&["/no/such/hook"], OnError::Fail, Duration::from_secs(1));
        let HookStatus::Failed {
            exit_code: None,
            stderr_tail,
        } = runner.run(&target(dir.path()), &missing).await
        else {
            panic!("started a missing command");
        };
        assert!(stderr_tail.contains("/no/such/hook"), "{stderr_tail}");
    }

    /// A hook that outlives its timeout is reported TimedOut at the timeout,
    /// and everything it started is killed: a child that would write a
    /// marker later never does.
    #[tokio::test]
    async fn local_hook_timeout_kills_the_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let runner = LocalProcessRunner {
            volume_data: dir.path().into(),
        };
        let h = hook(
            &["sh", "-c", "(sleep 1; touch late) & sleep 30"],
            OnError::Fail,
            Duration::from_millis(200),
        );
        let start = Instant::now();
        assert_eq!(
            runner.run(&target(dir.path()), &h).await,
            HookStatus::TimedOut
        );
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_secs(5),
            "{took:?}"
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            !dir.path().join("late").exists(),
            "a hook's child outlived its timeout"
        );
    }

    fn record(status: HookStatus, on_error: OnError) -> HookRecord {
        HookRecord {
            pod: ItemRef {
                resource: "pods".into(),
                namespace: "ns".into(),
                name: "p".into(),
                ..ItemRef::default()
            },
            hook: hook(&["x"], on_error, Duration::from_secs(1)),
            status,
            started: None,
            ended: None,
        }
    }

    /// onError as a pure function: Fail fails the block, Continue warns,
    /// skipped warns, success is fine; messages name the pod and the hook.
    #[test]
    fn verdicts() {
        let failed = HookStatus::Failed {
            exit_code: Some(1),
            stderr_tail: "no space".into(),
        };
        assert_eq!(
            verdict(&record(HookStatus::Succeeded, OnError::Fail)),
            Verdict::Ok
        );
        let Verdict::BlockFailed(m) = verdict(&record(failed.clone(), OnError::Fail)) else {
            panic!()
        };
        assert!(
            m.contains("ns/p")
                && m.contains("exit code 1")
                && m.contains("no space")
                && m.contains("hook \"test\""),
            "{m}"
        );
        assert!(matches!(
            verdict(&record(failed, OnError::Continue)),
            Verdict::Warning(_)
        ));
        let Verdict::Warning(m) = verdict(&record(HookStatus::TimedOut, OnError::Continue)) else {
            panic!()
        };
        assert!(m.contains("timed out after 1s"), "{m}");
        assert!(matches!(
            verdict(&record(HookStatus::TimedOut, OnError::Fail)),
            Verdict::BlockFailed(_)
        ));
        assert!(matches!(
            verdict(&record(
                HookStatus::Skipped { reason: "r".into() },
                OnError::Fail
            )),
            Verdict::Warning(_)
        ));
    }

    /// A pod whose pre hook failed (with either onError) or was skipped gets
    /// no post hook; one whose pre hooks all succeeded (or had none) does.
    #[test]
    fn post_hooks_need_every_pre_hook_to_succeed() {
        let ok = record(HookStatus::Succeeded, OnError::Fail);
        let failed = record(
            HookStatus::Failed {
                exit_code: Some(1),
                stderr_tail: String::new(),
            },
            OnError::Continue,
        );
        assert!(post_hooks_allowed(&[]));
        assert!(post_hooks_allowed(std::slice::from_ref(&ok)));
        assert!(!post_hooks_allowed(&[ok.clone(), failed]));
        assert!(!post_hooks_allowed(&[record(
            HookStatus::TimedOut,
            OnError::Continue
        )]));
        assert!(!post_hooks_allowed(&[record(
            HookStatus::Skipped { reason: "r".into() },
            OnError::Fail
        )]));
    }

    /// Hooks of one phase run in order with real processes; a Continue
    /// failure does not stop the next hook, a Fail failure does.
    #[tokio::test]
    async fn run_hooks_stops_at_the_first_failing_fail_hook() {
        let dir = tempfile::tempdir().unwrap();
        let runner = LocalProcessRunner {
            volume_data: dir.path().into(),
        };
        let hooks = vec![
            hook(
                &["sh", "-c", "echo 1 >> order; exit 1"],
                OnError::Continue,
                Duration::from_secs(10),
            ),
            hook(
                &["sh", "-c", "echo 2 >> order; exit 1"],
                OnError::Fail,
                Duration::from_secs(10),
            ),
            hook(
                &["sh", "-c", "echo 3 >> order"],
                OnError::Fail,
                Duration::from_secs(10),
            ),
        ];
        let records = run_hooks(&runner, &target(dir.path()), &hooks).await;
        assert_eq!(records.len(), 2);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("order")).unwrap(),
            "1\n2\n"
        );
        assert!(records.iter().all(|r| r.started <= r.ended));
        // Without --exec-hooks-locally nothing runs: every hook is skipped.
        let skipped = run_hooks(&SkippingRunner, &target(dir.path()), &hooks).await;
        assert_eq!(skipped.len(), 3);
        assert!(
            skipped
                .iter()
                .all(|r| matches!(r.status, HookStatus::Skipped { .. }))
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("order")).unwrap(),
            "1\n2\n"
        );
        // Records serialize for results and logs.
        let json = serde_json::to_value(&records[1]).unwrap();
        assert_eq!(json["status"], "failed");
        assert_eq!(json["exitCode"], 1);
        assert_eq!(json["phase"], "pre");
        assert_eq!(json["hook"]["onError"], "Fail");
    }

    #[test]
    fn volume_env_names() {
        assert_eq!(volume_env_name("data"), "IAR_VOLUME_DIR_DATA");
        assert_eq!(volume_env_name("scratch-1.x"), "IAR_VOLUME_DIR_SCRATCH_1_X");
    }
}
