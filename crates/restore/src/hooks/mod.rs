//! Velero's restore hooks (v1.18.3, `internal/hook`): init containers put
//! before a restored pod's own, and exec hooks run in its containers once
//! they are up ([`post`]). A pod's annotations
//! (`init.hook.restore.velero.io/*`, `post.hook.restore.velero.io/*`)
//! replace the spec's hooks of that kind for that pod; otherwise every
//! `hooks.resources[]` entry whose namespaces (the pod's namespace after
//! the restore's mapping) and label selector take the pod applies, in
//! order.
//!
//! The spec is checked before anything is restored: a hook iar would
//! misread is refused by name, where Velero fails each pod it applies to.
//! Annotations come from the backup's pods, so a bad value there is a
//! warning naming the pod and the annotation, and Velero's default is
//! used, as Velero does (it only logs).

pub mod post;

pub use iar_core::command::OnError;
use iar_core::command::{command_list, parse_command, parse_on_error};
use iar_core::duration::parse_non_negative;
use iar_core::item::{Item, ItemRef};
use iar_core::select::BackupFilter;
use iar_core::select::spec_keys::refuse_unknown;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// The init container a pod volume restore puts first (Velero's
/// `restorehelper.WaitInitContainer`): hooks' init containers go after it.
pub const RESTORE_WAIT: &str = "restore-wait";

/// What Velero names a hook defined by annotations.
pub const FROM_ANNOTATION: &str = "<from-annotation>";

const INIT: &str = "init.hook.restore.velero.io/";
const POST: &str = "post.hook.restore.velero.io/";

/// One exec hook for one pod.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecHook {
    /// Its `hooks.resources[]` entry's name, or [`FROM_ANNOTATION`].
    pub name: String,
    /// Resolved: the pod's first container when none is named.
    pub container: String,
    pub command: Vec<String>,
    pub on_error: OnError,
    /// Zero: Velero's default exec timeout (30 s).
    pub exec_timeout: Duration,
    /// How long after the pod was created the hook may still start; zero:
    /// no bound of its own.
    pub wait_timeout: Duration,
    /// Run once the container is ready rather than running.
    pub wait_for_ready: bool,
}

/// One `hooks.resources[]` entry.
#[derive(Clone, Debug)]
struct ResourceHooks {
    /// Its namespaces and label selector (Velero applies restore hooks to
    /// pods only, whatever resources the entry names).
    filter: BackupFilter,
    init: Vec<Value>,
    exec: Vec<ExecHook>,
}

/// A Restore spec's `hooks`.
#[derive(Clone, Debug, Default)]
pub struct RestoreHooks {
    resources: Vec<ResourceHooks>,
}

const HOOKS_KEYS: &[&str] = &["resources"];
const RESOURCE_KEYS: &[&str] = &[
    "name",
    "includedNamespaces",
    "excludedNamespaces",
    "includedResources",
    "excludedResources",
    "labelSelector",
    "postHooks",
];
const POST_HOOK_KEYS: &[&str] = &["exec", "init"];
const EXEC_KEYS: &[&str] = &[
    "container",
    "command",
    "onError",
    "execTimeout",
    "waitTimeout",
    "waitForReady",
];
const INIT_KEYS: &[&str] = &["initContainers", "timeout"];

fn keys(v: &Value, known: &[&str], at: &str) -> Result<(), String> {
    refuse_unknown(
        v,
        known,
        &format!("Velero's restore spec at {at}"),
        "a hook iar misread would run where it was not meant to",
    )
}

fn object<'a>(v: &'a Value, at: &str) -> Result<&'a serde_json::Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{at}: want an object, got {v}"))
}

fn duration(v: Option<&Value>, at: &str) -> Result<Duration, String> {
    match v {
        None | Some(Value::Null) => Ok(Duration::ZERO),
        Some(Value::String(s)) => parse_non_negative(s).map_err(|e| format!("{at}: {e}")),
        Some(other) => Err(format!(
            "{at}: want a duration such as \"30s\", got {other}"
        )),
    }
}

fn exec_hook(exec: &Value, name: &str, at: &str) -> Result<ExecHook, String> {
    let map = object(exec, at)?;
    keys(exec, EXEC_KEYS, at)?;
    let command = command_list(map.get("command")).map_err(|e| format!("{at}.command: {e}"))?;
    // No mode is Velero's Continue for restore hooks.
    let on_error = match map.get("onError") {
        None | Some(Value::Null) => OnError::Continue,
        Some(Value::String(v)) => parse_on_error(v).map_err(|e| format!("{at}.onError: {e}"))?,
        Some(v) => return Err(format!("{at}.onError: {v} is not Continue or Fail")),
    };
    let wait_for_ready = match map.get("waitForReady") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(format!("{at}.waitForReady: {v} is not a boolean")),
    };
    let container = match map.get("container") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => return Err(format!("{at}.container: {v} is not a string")),
    };
    Ok(ExecHook {
        name: name.to_string(),
        container,
        command,
        on_error,
        exec_timeout: duration(map.get("execTimeout"), &format!("{at}.execTimeout"))?,
        wait_timeout: duration(map.get("waitTimeout"), &format!("{at}.waitTimeout"))?,
        wait_for_ready,
    })
}

/// An init container as a hook gives it: Velero's `ValidateContainer`
/// (a name, an image and a command) before the API server sees it.
fn init_container(c: &Value, at: &str) -> Result<Value, String> {
    let map = object(c, at)?;
    for key in ["name", "image"] {
        if map
            .get(key)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(format!(
                "{at}.{key}: required (rule: restore-hook-init-container)"
            ));
        }
    }
    if map
        .get("command")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        return Err(format!(
            "{at}.command: required, a non-empty list (rule: restore-hook-init-container)"
        ));
    }
    Ok(c.clone())
}

impl RestoreHooks {
    /// From a Restore spec's `hooks` (absent or null: none).
    pub fn from_spec(hooks: Option<&Value>) -> Result<RestoreHooks, String> {
        let Some(hooks) = hooks.filter(|v| !v.is_null()) else {
            return Ok(RestoreHooks::default());
        };
        let at = "restore spec: hooks";
        object(hooks, at)?;
        keys(hooks, HOOKS_KEYS, at)?;
        let list = match hooks.get("resources") {
            None | Some(Value::Null) => return Ok(RestoreHooks::default()),
            Some(Value::Array(list)) => list,
            Some(v) => return Err(format!("{at}.resources: want a list, got {v}")),
        };
        let mut resources = Vec::new();
        for (i, r) in list.iter().enumerate() {
            let at = format!("{at}.resources[{i}]");
            let map = object(r, &at)?;
            keys(r, RESOURCE_KEYS, &at)?;
            let name = map
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| format!("{at}.name: required"))?
                .to_string();
            let at = format!("{at} ({name})");
            let mut selects = serde_json::Map::new();
            for key in ["includedNamespaces", "excludedNamespaces", "labelSelector"] {
                if let Some(v) = map.get(key) {
                    selects.insert(key.into(), v.clone());
                }
            }
            let filter = BackupFilter::from_spec(&Value::Object(selects))
                .map_err(|e| format!("{at}: {}", e.replace("backup spec: ", "")))?;
            let (mut init, mut exec) = (Vec::new(), Vec::new());
            let posts = match map.get("postHooks") {
                None | Some(Value::Null) => &Vec::new(),
                Some(Value::Array(list)) => list,
                Some(v) => return Err(format!("{at}.postHooks: want a list, got {v}")),
            };
            for (j, hook) in posts.iter().enumerate() {
                let at = format!("{at}.postHooks[{j}]");
                object(hook, &at)?;
                keys(hook, POST_HOOK_KEYS, &at)?;
                match (hook.get("exec"), hook.get("init")) {
                    (Some(e), None) => exec.push(exec_hook(e, &name, &format!("{at}.exec"))?),
                    (None, Some(i)) => {
                        let at = format!("{at}.init");
                        object(i, &at)?;
                        keys(i, INIT_KEYS, &at)?;
                        duration(i.get("timeout"), &format!("{at}.timeout"))?;
                        let containers = i
                            .get("initContainers")
                            .and_then(Value::as_array)
                            .ok_or_else(|| format!("{at}.initContainers: want a list"))?;
                        for (k, c) in containers.iter().enumerate() {
                            init.push(init_container(c, &format!("{at}.initContainers[{k}]"))?);
                        }
                    }
                    _ => return Err(format!("{at}: want exactly one of exec and init")),
                }
            }
            resources.push(ResourceHooks { filter, init, exec });
        }
        Ok(RestoreHooks { resources })
    }

    /// The entries that take `pod`, as restored in `target_ns`.
    fn for_pod(&self, pod: &Value, target_ns: &str) -> impl Iterator<Item = &ResourceHooks> {
        let name = pod
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut placed = pod.clone();
        if let Some(meta) = placed.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("namespace".into(), json!(target_ns));
        }
        let item = Item::with_id(ItemRef::new("", "pods", target_ns, name), placed);
        self.resources
            .iter()
            .filter(move |r| r.filter.matches(&item))
    }

    /// Puts the pod's restore init containers before its own (after a
    /// pod volume restore's [`RESTORE_WAIT`], which stays first): its
    /// annotations' one, or else every matching spec entry's. `seed`
    /// names an annotation's container when the pod names none
    /// (Velero draws a random name; iar's is the same on every run of
    /// one restore). Returns warnings.
    pub fn add_init_containers(&self, pod: &mut Value, target_ns: &str, seed: &str) -> Vec<String> {
        let mut warnings = Vec::new();
        let mut added = Vec::new();
        match annotation_init(pod, seed, &mut warnings) {
            Some(container) => added.push(container),
            None => {
                for r in self.for_pod(pod, target_ns) {
                    added.extend(r.init.iter().cloned());
                }
            }
        }
        if added.is_empty() {
            return warnings;
        }
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
            return warnings;
        };
        let mut own = match spec.remove("initContainers") {
            Some(Value::Array(list)) => list,
            _ => Vec::new(),
        };
        let mut all = Vec::new();
        if own
            .first()
            .and_then(|c| c.get("name"))
            .and_then(Value::as_str)
            == Some(RESTORE_WAIT)
        {
            all.push(own.remove(0));
        }
        all.extend(added);
        all.extend(own);
        spec.insert("initContainers".into(), Value::Array(all));
        warnings
    }

    /// The exec hooks of a restored pod (as created, in its namespace):
    /// its annotations' one, or else every matching spec entry's, each
    /// with its container resolved. Returns them and warnings.
    pub fn exec_hooks(&self, pod: &Value) -> (Vec<ExecHook>, Vec<String>) {
        let mut warnings = Vec::new();
        let first = pod
            .pointer("/spec/containers/0/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if first.is_empty() {
            return (Vec::new(), warnings);
        }
        let resolve = |mut h: ExecHook| {
            if h.container.is_empty() {
                h.container = first.clone();
            }
            h
        };
        if let Some(hook) = annotation_exec(pod, &mut warnings) {
            return (vec![resolve(hook)], warnings);
        }
        let ns = pod
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let hooks = self
            .for_pod(pod, ns)
            .flat_map(|r| r.exec.iter().cloned())
            .map(resolve)
            .collect();
        (hooks, warnings)
    }
}

fn annotation<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

fn pod_path(pod: &Value) -> String {
    let s = |p: &str| pod.pointer(p).and_then(Value::as_str).unwrap_or_default();
    format!("{}/{}", s("/metadata/namespace"), s("/metadata/name"))
}

/// The init container the pod's annotations define (an image makes one).
fn annotation_init(pod: &Value, seed: &str, warnings: &mut Vec<String>) -> Option<Value> {
    let image = annotation(pod, &format!("{INIT}container-image")).filter(|s| !s.is_empty())?;
    let name = match annotation(pod, &format!("{INIT}container-name")) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => {
            let digest = Sha256::digest(format!("{seed}/{}", pod_path(pod)));
            format!("velero-restore-init-{}", &hex::encode(digest)[..8])
        }
    };
    let mut container = json!({"name": name, "image": image, "resources": {}});
    match annotation(pod, &format!("{INIT}command")) {
        None | Some("") => {}
        Some(command) => match parse_command(command) {
            Ok(c) => container["command"] = json!(c),
            // Velero keeps a text it cannot parse as the whole command.
            Err(e) => {
                warnings.push(format!(
                    "pod {}: annotation {INIT}command: {e}; the text is the command, as Velero reads it",
                    pod_path(pod)
                ));
                container["command"] = json!([command]);
            }
        },
    }
    Some(container)
}

/// The exec hook the pod's annotations define (a command makes one).
/// Values Velero cannot read are its defaults, with a warning each.
fn annotation_exec(pod: &Value, warnings: &mut Vec<String>) -> Option<ExecHook> {
    let command = annotation(pod, &format!("{POST}command")).filter(|s| !s.is_empty())?;
    let mut warn = |key: &str, value: &str, why: String| {
        warnings.push(format!(
            "pod {}: annotation {POST}{key} {value:?}: {why}; Velero's default is used",
            pod_path(pod)
        ));
    };
    let command = parse_command(command).unwrap_or_else(|_| vec![command.to_string()]);
    let on_error = match annotation(pod, &format!("{POST}on-error")) {
        Some("Fail") => OnError::Fail,
        None | Some("") | Some("Continue") => OnError::Continue,
        Some(other) => {
            warn("on-error", other, "not Continue or Fail".into());
            OnError::Continue
        }
    };
    let mut timeout = |key: &str| match annotation(pod, &format!("{POST}{key}")) {
        None | Some("") => Duration::ZERO,
        Some(s) => parse_non_negative(s).unwrap_or_else(|e| {
            warn(key, s, e.to_string());
            Duration::ZERO
        }),
    };
    let exec_timeout = timeout("exec-timeout");
    let wait_timeout = timeout("wait-timeout");
    let wait_for_ready = match annotation(pod, &format!("{POST}wait-for-ready")) {
        None | Some("") => false,
        // Go's strconv.ParseBool.
        Some("1" | "t" | "T" | "TRUE" | "true" | "True") => true,
        Some("0" | "f" | "F" | "FALSE" | "false" | "False") => false,
        Some(other) => {
            warn("wait-for-ready", other, "not a boolean".into());
            false
        }
    };
    Some(ExecHook {
        name: FROM_ANNOTATION.into(),
        container: annotation(pod, &format!("{POST}container"))
            .unwrap_or_default()
            .to_string(),
        command,
        on_error,
        exec_timeout,
        wait_timeout,
        wait_for_ready,
    })
}

#[cfg(test)]
mod tests;
