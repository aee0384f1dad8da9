//! A pod's security-relevant fields, in a Pod and in the pod templates of
//! workloads: what makes a pod privileged, puts it in the host's
//! namespaces or file system, or gives it another identity or node.

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Where each resource holds its pod spec.
const POD_SPECS: &[(&str, &[&str])] = &[
    ("pods", &["spec"]),
    ("deployments.apps", &["spec", "template", "spec"]),
    ("statefulsets.apps", &["spec", "template", "spec"]),
    ("daemonsets.apps", &["spec", "template", "spec"]),
    ("replicasets.apps", &["spec", "template", "spec"]),
    ("replicationcontrollers", &["spec", "template", "spec"]),
    ("jobs.batch", &["spec", "template", "spec"]),
    (
        "cronjobs.batch",
        &["spec", "jobTemplate", "spec", "template", "spec"],
    ),
];

/// Pod spec fields that decide rights, each compared whole.
const POD_FIELDS: &[&str] = &[
    "securityContext",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "hostUsers",
    "serviceAccountName",
    "serviceAccount",
    "automountServiceAccountToken",
    "nodeName",
];

const CONTAINER_LISTS: &[&str] = &["containers", "initContainers", "ephemeralContainers"];

/// Whether `resource` (`resource.group`) holds a pod spec.
pub fn holds_pod(resource: &str) -> bool {
    POD_SPECS.iter().any(|(r, _)| *r == resource)
}

/// The first security field of `resource`'s pod spec that differs between
/// `before` and `after`, as a path from the item's root; `None` when none
/// does or `resource` holds no pod.
pub fn first_change(resource: &str, before: &Value, after: &Value) -> Option<String> {
    let (_, at) = POD_SPECS.iter().find(|(r, _)| *r == resource)?;
    let spec = |v: &Value| at.iter().try_fold(v, |v, k| v.get(k)).cloned();
    let prefix: String = at.iter().map(|k| format!(".{k}")).collect();
    let (b, a) = (fields(spec(before)), fields(spec(after)));
    // Every key of either side, in order: an added field is a change too.
    let keys: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    keys.into_iter()
        .find(|k| b.get(*k) != a.get(*k))
        .map(|k| format!("{prefix}{k}"))
}

/// The security fields of a pod spec, by path below it. Containers and
/// volumes are keyed by name, so reordering or adding a plain one is not
/// read as a security change.
fn fields(spec: Option<Value>) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let Some(Value::Object(spec)) = spec else {
        // A spec that is not an object (or is gone) is compared whole.
        return out;
    };
    for f in POD_FIELDS {
        if let Some(v) = spec.get(*f) {
            out.insert(format!(".{f}"), v.clone());
        }
    }
    for list in CONTAINER_LISTS {
        for (name, c) in named(&spec, list) {
            if let Some(v) = c.get("securityContext") {
                out.insert(format!(".{list}[name={name}].securityContext"), v.clone());
            }
        }
    }
    for (name, v) in named(&spec, "volumes") {
        if let Some(h) = v.get("hostPath") {
            out.insert(format!(".volumes[name={name}].hostPath"), h.clone());
        }
    }
    out
}

/// A list's entries by their `name` (the index when unnamed).
fn named<'a>(spec: &'a Map<String, Value>, list: &str) -> Vec<(String, &'a Value)> {
    let Some(Value::Array(items)) = spec.get(list) else {
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let name = v
                .get("name")
                .and_then(Value::as_str)
                .map_or_else(|| i.to_string(), str::to_string);
            (name, v)
        })
        .collect()
}
