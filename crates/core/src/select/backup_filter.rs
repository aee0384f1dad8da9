//! Which items a backup takes: the namespace, resource and label filters
//! of a Velero Backup `spec`, compiled once.

use super::applies_to::{CompiledSelector, ResourceSelector, SelectorError};
use super::label_object;
use crate::catalog::Catalog;
use serde_json::Value;

/// Which items a backup takes, compiled from its spec. The include/exclude
/// semantics are the same as a plugin's applies-to (Velero uses one
/// implementation for both).
#[derive(Clone, Debug)]
pub struct BackupFilter {
    selector: CompiledSelector,
    /// As selector syntax, for a server-side list.
    label_selector: String,
}

/// A list of strings, or absent/null for none. Anything else is an error
/// naming the field: an entry dropped for its type would widen the backup
/// (`includedNamespaces: [1]` must not mean every namespace).
fn strings(spec: &Value, key: &str) -> Result<Vec<String>, String> {
    match spec.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(String::from)
                    .ok_or_else(|| format!("{key}[{i}] is {}, not a string", type_name(v)))
            })
            .collect(),
        Some(v) => Err(format!("{key} is {}, not a list of strings", type_name(v))),
    }
}

pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

impl BackupFilter {
    /// From a Backup `spec` (or an empty one: everything).
    pub fn from_spec(spec: &Value) -> Result<Self, String> {
        if !(spec.is_object() || spec.is_null()) {
            return Err(format!("backup spec is {}, not an object", type_name(spec)));
        }
        // Filters iar does not implement would be silently ignored, and the
        // backup would be wider than asked: refuse them.
        for unsupported in [
            "orLabelSelectors",
            "includedClusterScopedResources",
            "excludedClusterScopedResources",
            "includedNamespaceScopedResources",
            "excludedNamespaceScopedResources",
        ] {
            if spec.get(unsupported).is_some_and(|v| !v.is_null()) {
                return Err(format!(
                    "backup spec: {unsupported} is not supported by iar"
                ));
            }
        }
        let labels = label_object::parse(spec.get("labelSelector"))?;
        // kube's text for the server's list; the checked keys and values
        // hold none of the selector syntax's characters, so it reads back
        // as the object does.
        let label_selector = labels.to_string();
        let sel = ResourceSelector {
            included_namespaces: strings(spec, "includedNamespaces")?,
            excluded_namespaces: strings(spec, "excludedNamespaces")?,
            included_resources: strings(spec, "includedResources")?,
            excluded_resources: strings(spec, "excludedResources")?,
            // Set from the structured selector below, never parsed from text.
            label_selector: String::new(),
        };
        let selector = CompiledSelector::compile(&sel, Catalog::builtin())
            .map_err(|e: SelectorError| format!("backup spec: {e}"))?
            .with_labels(labels.into());
        Ok(BackupFilter {
            selector,
            label_selector,
        })
    }

    /// The label selector in selector syntax ("" for none).
    pub fn label_selector(&self) -> &str {
        &self.label_selector
    }

    /// The compiled selector, for listers that narrow what they ask for.
    pub fn selector(&self) -> &CompiledSelector {
        &self.selector
    }

    /// Whether a listed item belongs to the backup: the selector, and not
    /// labelled [`EXCLUDE_LABEL`]`=true`.
    pub fn matches(&self, item: &crate::Item) -> bool {
        self.selector.matches(
            &item.id.group,
            &item.id.resource,
            &item.id.namespace,
            || item.labels(),
        ) && !excluded_by_label(item)
    }

    /// Why an additional item a plugin named stays out of the backup, or
    /// `None` when it goes in. Decided as Velero's item backupper decides
    /// (`pkg/backup/item_backupper.go`): the namespace and resource
    /// includes/excludes and the exclude label; not the label selector,
    /// which chose what was listed, not what plugins may name; and a
    /// cluster-scoped item (a PVC's PersistentVolume) is not held to the
    /// namespace filter.
    pub fn excludes_additional(&self, item: &crate::Item) -> Option<String> {
        let id = &item.id;
        if !self.selector.includes_resource(&id.group, &id.resource) {
            return Some(format!(
                "its resource {} is not included by the backup's includedResources/excludedResources",
                id.group_resource()
            ));
        }
        if !id.namespace.is_empty() && !self.selector.includes_namespace(&id.namespace) {
            return Some(format!(
                "its namespace {} is not included by the backup's includedNamespaces/excludedNamespaces",
                id.namespace
            ));
        }
        if excluded_by_label(item) {
            return Some(format!("it is labelled {EXCLUDE_LABEL}=true"));
        }
        None
    }
}

impl BackupFilter {
    /// The namespaces whose Namespace object the backup takes besides what
    /// it listed, as Velero's item collector tracks them (velero PR #182):
    /// the namespaces the filter names exactly and those of the namespaced
    /// items `selected` holds, when the namespaces resource is included at
    /// all; those already selected as Namespace objects left out. Without
    /// its object a restore recreates a namespace bare, its labels and
    /// annotations lost.
    pub fn namespace_objects_wanted(&self, selected: &[crate::Item]) -> Vec<String> {
        if !self.selector.includes_resource("", "namespaces") {
            return Vec::new();
        }
        let mut wanted: std::collections::BTreeSet<String> = selected
            .iter()
            .map(|i| &i.id.namespace)
            .filter(|ns| !ns.is_empty() && self.selector.includes_namespace(ns))
            .cloned()
            .collect();
        wanted.extend(self.selector.exact_namespaces().unwrap_or_default());
        for item in selected {
            if item.id.group.is_empty() && item.id.resource == "namespaces" {
                wanted.remove(&item.id.name);
            }
        }
        wanted.into_iter().collect()
    }

    /// Whether a Namespace object named by [`Self::namespace_objects_wanted`]
    /// goes in: only the exclude label keeps it out.
    pub fn keeps_namespace_object(&self, namespace: &crate::Item) -> bool {
        !excluded_by_label(namespace)
    }
}

/// The label that keeps any object out of a backup, as in Velero.
pub const EXCLUDE_LABEL: &str = "velero.io/exclude-from-backup";

fn excluded_by_label(item: &crate::Item) -> bool {
    item.labels().get(EXCLUDE_LABEL).map(String::as_str) == Some("true")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_objects_become_selector_syntax() {
        let v = json!({"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "legacy", "operator": "DoesNotExist"}
        ]});
        assert_eq!(
            label_object::parse(Some(&v)).unwrap().to_string(),
            "app=web,tier in (a,b),!legacy"
        );
        assert!(
            label_object::parse(Some(
                &json!({"matchExpressions": [{"key": "x", "operator": "Near"}]})
            ))
            .is_err()
        );
    }

    /// Entries of the wrong type are an error naming the field, never a
    /// wider backup. Before, `strings` and `label_selector` dropped what was
    /// not a string, so `includedNamespaces: [1]` selected every namespace.
    #[test]
    fn wrong_types_are_errors_naming_the_field() {
        for (spec, field) in [
            (json!({"includedNamespaces": [1]}), "includedNamespaces[0]"),
            (json!({"includedNamespaces": "prod"}), "includedNamespaces"),
            (
                json!({"excludedNamespaces": [null]}),
                "excludedNamespaces[0]",
            ),
            (
                json!({"includedResources": {"pods": true}}),
                "includedResources",
            ),
            (
                json!({"excludedResources": ["pods", 2]}),
                "excludedResources[1]",
            ),
            (json!({"labelSelector": 5}), "labelSelector"),
            (json!({"labelSelector": "app=web"}), "labelSelector"),
            (
                json!({"labelSelector": {"matchLabels": {"app": 1}}}),
                "labelSelector.matchLabels.app",
            ),
            (
                json!({"labelSelector": {"matchLabels": ["app"]}}),
                "labelSelector.matchLabels",
            ),
            (
                json!({"labelSelector": {"matchExpressions": {}}}),
                "labelSelector.matchExpressions",
            ),
            (
                json!({"labelSelector": {"matchExpressions": [7]}}),
                "labelSelector.matchExpressions[0]",
            ),
            (
                json!({"labelSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]}}),
                "labelSelector.matchExpressions[0].values[0]",
            ),
            (
                json!({"labelSelector": {"matchExpressions": [{"key": 3, "operator": "Exists"}]}}),
                "labelSelector.matchExpressions[0].key",
            ),
            (
                json!({"labelSelector": {"matchLabel": {"app": "web"}}}),
                "labelSelector.matchLabel",
            ),
            (
                json!({"orLabelSelectors": [{"matchLabels": {"a": "b"}}]}),
                "orLabelSelectors",
            ),
            (json!([]), "backup spec"),
        ] {
            let err = BackupFilter::from_spec(&spec).unwrap_err();
            assert!(err.contains(field), "{spec}: {err}");
        }
        // What is well typed still works, nulls included.
        for spec in [
            json!({}),
            json!(null),
            json!({"includedNamespaces": null, "labelSelector": null}),
            json!({"includedNamespaces": ["a"], "labelSelector": {"matchLabels": {"app": "web"}}}),
        ] {
            BackupFilter::from_spec(&spec).unwrap();
        }
    }

    /// Velero's namespace tracking: the namespaces named exactly and those
    /// of selected items, not one the filter excludes, none when the
    /// namespaces resource is excluded, none already selected.
    #[test]
    fn namespace_objects_follow_the_namespaces_the_backup_covers() {
        let item = |v: Value| crate::Item::from_value(v, Catalog::builtin()).unwrap();
        let cm = |ns: &str| {
            item(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": ns}}),
            )
        };
        let wanted = |spec: Value, items: &[crate::Item]| {
            BackupFilter::from_spec(&spec)
                .unwrap()
                .namespace_objects_wanted(items)
        };
        assert_eq!(
            wanted(
                json!({"includedNamespaces": ["shop", "empty"]}),
                &[cm("shop")]
            ),
            ["empty", "shop"]
        );
        assert_eq!(
            wanted(
                json!({"excludedNamespaces": ["kube-system"]}),
                &[cm("a"), cm("kube-system")]
            ),
            ["a"]
        );
        assert_eq!(
            wanted(
                json!({"includedNamespaces": ["shop"], "excludedResources": ["namespaces"]}),
                &[cm("shop")]
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            wanted(
                json!({"includedNamespaces": ["shop"], "includedResources": ["configmaps"]}),
                &[cm("shop")]
            ),
            Vec::<String>::new(),
            "a resource filter that leaves namespaces out"
        );
        let ns =
            item(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}));
        assert_eq!(wanted(json!({}), &[cm("shop"), ns]), Vec::<String>::new());
    }
}
