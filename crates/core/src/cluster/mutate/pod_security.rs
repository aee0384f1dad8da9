//! A pod's security-relevant fields, in a Pod and in the pod templates of
//! workloads: what makes a pod privileged, puts it in the host's
//! namespaces or file system, or gives it another identity or node.

pub use crate::item::SecurityFields;
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
    let spec = |v| at.iter().try_fold(v, |v: &Value, k| v.get(k));
    first_differing(at, &fields(spec(before)), &fields(spec(after)))
}

/// The first key whose value differs between two readings of a pod spec
/// at path `at`, as a path from the item's root. Every key of either side,
/// in order: an added field is a change too.
fn first_differing<V: PartialEq>(
    at: &[&str],
    before: &BTreeMap<String, V>,
    after: &BTreeMap<String, V>,
) -> Option<String> {
    let prefix: String = at.iter().map(|k| format!(".{k}")).collect();
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .find(|k| before.get(*k) != after.get(*k))
        .map(|k| format!("{prefix}{k}"))
}

/// The security fields of a pod spec, by path below it. Containers and
/// volumes are keyed by name, so reordering or adding a plain one is not
/// read as a security change.
fn fields(spec: Option<&Value>) -> BTreeMap<String, &Value> {
    let mut out = BTreeMap::new();
    let Some(Value::Object(spec)) = spec else {
        // A spec that is not an object (or is gone) is compared whole.
        return out;
    };
    for f in POD_FIELDS {
        if let Some(v) = spec.get(*f) {
            out.insert(format!(".{f}"), v);
        }
    }
    for list in CONTAINER_LISTS {
        for (name, c) in named(spec, list) {
            if let Some(v) = c.get("securityContext") {
                out.insert(format!(".{list}[name={name}].securityContext"), v);
            }
        }
    }
    for (name, v) in named(spec, "volumes") {
        if let Some(h) = v.get("hostPath") {
            out.insert(format!(".volumes[name={name}].hostPath"), h);
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

/// The security fields of `resource`'s pod spec read from an item's JSON
/// text, building only them (serde skips the rest without allocating): the
/// cost a granted change pays. `None` when `resource` holds no pod;
/// `Some(None)` when the text does not have the plain shape read here (a
/// spec or list of another type, a duplicate key, a non-string name): the
/// caller then compares parsed values, which decide every such case
/// exactly.
pub fn read_text(resource: &str, text: &str) -> Option<Option<SecurityFields>> {
    let (_, at) = POD_SPECS.iter().find(|(r, _)| *r == resource)?;
    Some(typed::fields(at.len(), text))
}

/// [`first_change`] between two readings of [`read_text`].
pub fn first_change_read(
    resource: &str,
    before: &SecurityFields,
    after: &SecurityFields,
) -> Option<String> {
    let (_, at) = POD_SPECS.iter().find(|(r, _)| *r == resource)?;
    first_differing(at, before, after)
}

/// [`first_change`] from the two items' JSON text ([`read_text`]); `None`
/// when either text's shape is left to the values.
#[cfg(test)]
fn first_change_text(resource: &str, before: &str, after: &str) -> Option<Option<String>> {
    let (b, a) = (read_text(resource, before)??, read_text(resource, after)??);
    Some(first_change_read(resource, &b, &a))
}

/// The security fields as serde structs, each mapping to [`fields`]' keys.
mod typed {
    use super::{CONTAINER_LISTS, POD_FIELDS};
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;
    use std::collections::BTreeMap;

    /// A field present in the text, `null` included (`Option<Value>` alone
    /// would read `null` as absent, where [`super::fields`] keeps it).
    fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
        Value::deserialize(d).map(Some)
    }

    #[derive(Deserialize)]
    struct Spec<T> {
        spec: Option<T>,
    }

    #[derive(Deserialize)]
    struct Template<T> {
        template: Option<T>,
    }

    #[derive(Deserialize)]
    struct JobTemplate<T> {
        #[serde(rename = "jobTemplate")]
        job_template: Option<T>,
    }

    #[derive(Deserialize)]
    struct Entry {
        #[serde(default, deserialize_with = "present")]
        name: Option<Value>,
        #[serde(default, rename = "securityContext", deserialize_with = "present")]
        security_context: Option<Value>,
        #[serde(default, rename = "hostPath", deserialize_with = "present")]
        host_path: Option<Value>,
    }

    /// Mirrors [`POD_FIELDS`] and [`CONTAINER_LISTS`]; the test below holds
    /// them equal.
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct PodSpec {
        #[serde(default, deserialize_with = "present")]
        security_context: Option<Value>,
        #[serde(default, deserialize_with = "present")]
        host_network: Option<Value>,
        #[serde(default, rename = "hostPID", deserialize_with = "present")]
        host_pid: Option<Value>,
        #[serde(default, rename = "hostIPC", deserialize_with = "present")]
        host_ipc: Option<Value>,
        #[serde(default, deserialize_with = "present")]
        host_users: Option<Value>,
        #[serde(default, deserialize_with = "present")]
        service_account_name: Option<Value>,
        #[serde(default, deserialize_with = "present")]
        service_account: Option<Value>,
        #[serde(default, deserialize_with = "present")]
        automount_service_account_token: Option<Value>,
        #[serde(default, deserialize_with = "present")]
        node_name: Option<Value>,
        containers: Option<Vec<Entry>>,
        init_containers: Option<Vec<Entry>>,
        ephemeral_containers: Option<Vec<Entry>>,
        volumes: Option<Vec<Entry>>,
    }

    impl PodSpec {
        fn into_fields(self) -> BTreeMap<String, Value> {
            let scalars = [
                self.security_context,
                self.host_network,
                self.host_pid,
                self.host_ipc,
                self.host_users,
                self.service_account_name,
                self.service_account,
                self.automount_service_account_token,
                self.node_name,
            ];
            let mut out = BTreeMap::new();
            for (f, v) in POD_FIELDS.iter().zip(scalars) {
                if let Some(v) = v {
                    out.insert(format!(".{f}"), v);
                }
            }
            let lists = [
                self.containers,
                self.init_containers,
                self.ephemeral_containers,
            ];
            for (list, entries) in CONTAINER_LISTS.iter().zip(lists) {
                for (name, e) in named(entries) {
                    if let Some(v) = e.security_context {
                        out.insert(format!(".{list}[name={name}].securityContext"), v);
                    }
                }
            }
            for (name, e) in named(self.volumes) {
                if let Some(h) = e.host_path {
                    out.insert(format!(".volumes[name={name}].hostPath"), h);
                }
            }
            out
        }
    }

    fn named(entries: Option<Vec<Entry>>) -> impl Iterator<Item = (String, Entry)> {
        entries.into_iter().flatten().enumerate().map(|(i, e)| {
            let name = match &e.name {
                Some(Value::String(s)) => s.clone(),
                _ => i.to_string(),
            };
            (name, e)
        })
    }

    /// The security fields of the pod spec `depth` keys down (1: a Pod,
    /// 3: a template, 5: a CronJob's), or `None` when the text's shape is
    /// not the plain one.
    pub(super) fn fields(depth: usize, text: &str) -> Option<BTreeMap<String, Value>> {
        let spec = match depth {
            1 => serde_json::from_str::<Spec<PodSpec>>(text).ok()?.spec,
            3 => serde_json::from_str::<Spec<Template<Spec<PodSpec>>>>(text)
                .ok()?
                .spec
                .and_then(|s| s.template)
                .and_then(|t| t.spec),
            5 => serde_json::from_str::<Spec<JobTemplate<Spec<Template<Spec<PodSpec>>>>>>(text)
                .ok()?
                .spec
                .and_then(|s| s.job_template)
                .and_then(|j| j.spec)
                .and_then(|s| s.template)
                .and_then(|t| t.spec),
            _ => return None,
        };
        Some(spec.map(PodSpec::into_fields).unwrap_or_default())
    }
}

#[cfg(test)]
mod text_tests {
    use super::*;
    use serde_json::json;

    /// Each field the value reader compares, set in turn, is seen by the
    /// typed reader at the same path.
    #[test]
    fn the_typed_reader_reads_every_field_the_value_reader_does() {
        let before = json!({"spec": {}});
        for f in POD_FIELDS {
            let after = json!({"spec": {*f: true}});
            let text = first_change_text("pods", &before.to_string(), &after.to_string());
            assert_eq!(text, Some(Some(format!(".spec.{f}"))), "{f}");
        }
        for list in CONTAINER_LISTS {
            let after = json!({"spec": {*list: [{"name": "a", "securityContext": {}}]}});
            let text = first_change_text("pods", &before.to_string(), &after.to_string());
            assert_eq!(
                text,
                Some(Some(format!(".spec.{list}[name=a].securityContext"))),
                "{list}"
            );
        }
    }

    /// Every shape either agrees with the parsed values or is left to them.
    #[test]
    fn reading_the_text_agrees_with_reading_the_values() {
        let pod = json!({"kind": "Pod", "metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [{"name": "app", "image": "x"}],
                     "volumes": [{"name": "data", "emptyDir": {}}]}});
        let variants = [
            json!({"kind": "Pod", "spec": {"containers": [{"name": "app", "image": "y"}]}}),
            json!({"kind": "Pod", "metadata": {}, "spec": {"hostPID": true,
                "containers": [{"name": "app", "image": "x"}]}}),
            json!({"kind": "Pod", "spec": {"hostPID": null, "containers": [{"name": "app"}]}}),
            json!({"kind": "Pod", "spec": {"containers": [{"name": "app",
                "securityContext": {"privileged": true}}]}}),
            json!({"kind": "Pod", "spec": {"containers": [{"image": "x",
                "securityContext": {}}, {"name": 3}]}}),
            json!({"kind": "Pod", "spec": {"volumes": [{"name": "data", "hostPath": {"path": "/"}}]}}),
            json!({"kind": "Pod", "spec": {"volumes": "none"}}),
            json!({"kind": "Pod", "spec": null}),
            json!({"kind": "Pod", "spec": 7}),
            json!({"kind": "Pod"}),
        ];
        for after in &variants {
            let exact = first_change("pods", &pod, after);
            let text = first_change_text("pods", &pod.to_string(), &after.to_string());
            if let Some(text) = text {
                assert_eq!(text, exact, "{after}");
            }
        }
        // A duplicate key is left to the values (which keep the last).
        let dup = r#"{"spec": {"hostPID": false, "hostPID": true}}"#;
        assert_eq!(first_change_text("pods", &pod.to_string(), dup), None);
        // Templates and CronJobs, at their depth.
        let deploy = |sa: &str| json!({"spec": {"template": {"spec": {"serviceAccountName": sa}}}});
        assert_eq!(
            first_change_text(
                "deployments.apps",
                &deploy("a").to_string(),
                &deploy("b").to_string()
            ),
            Some(Some(".spec.template.spec.serviceAccountName".into()))
        );
        let cron = |n: bool| json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"hostNetwork": n}}}}}});
        assert_eq!(
            first_change_text(
                "cronjobs.batch",
                &cron(false).to_string(),
                &cron(true).to_string()
            ),
            Some(first_change("cronjobs.batch", &cron(false), &cron(true)))
        );
        assert_eq!(first_change_text("configmaps", "{}", "{}"), None);
    }
}
