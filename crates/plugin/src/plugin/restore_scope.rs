//! Which additional items a restore action may name: what the restore
//! itself would restore. Velero checks an additional item against the
//! restore's resource and namespace filters only, and admits a
//! cluster-scoped one unless `includeClusterResources` is false, so an
//! action on one labelled namespace's items could bring in a
//! ClusterRoleBinding. Here the restore's spec decides, as it decides for
//! the items the restore lists itself:
//!
//! - a namespaced item is in the acting item's own namespace, or in one the
//!   restore includes (backed-up names, as Velero's additional items are;
//!   Velero maps them afterwards);
//! - its resource passes the restore's resource filters, unless the
//!   returned item carries Velero's
//!   `restore.velero.io/must-include-additional-items: "true"`;
//! - a cluster-scoped item comes in only when `includeClusterResources` is
//!   true, or unset and the restore takes every namespace (Velero's rule
//!   for the cluster-scoped items it lists), but for the storage behind a
//!   claim or snapshot (PersistentVolumes, VolumeSnapshotContents);
//! - the label selector is not applied: the boundary sees an additional
//!   item's identity, not its labels (docs/security.md says so).

use crate::plugin::error::Violation;
use iar_core::catalog::Catalog;
use iar_core::item::ItemRef;
use iar_core::select::{CompiledSelector, ResourceSelector};
use serde_json::Value;

/// Velero's annotation by which a restore action's returned item lifts the
/// resource filters for its additional items.
pub const MUST_INCLUDE_ANNOTATION: &str = "restore.velero.io/must-include-additional-items";

/// Cluster-scoped resources that come with a namespaced claim or snapshot.
const STORAGE_BEHIND_CLAIMS: &[&str] = &[
    "persistentvolumes",
    "volumesnapshotcontents.snapshot.storage.k8s.io",
];

fn strings(spec: &Value, field: &str) -> Vec<String> {
    spec.get(field)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Checks `ids` against the restore's `spec`; `own_namespace` is the acting
/// item's namespace in the backup, `must_include` whether its returned item
/// carries [`MUST_INCLUDE_ANNOTATION`] `"true"`.
pub fn check(
    spec: &Value,
    own_namespace: &str,
    must_include: bool,
    ids: &[ItemRef],
) -> Result<(), Violation> {
    if ids.is_empty() {
        return Ok(());
    }
    let selector = ResourceSelector {
        included_namespaces: strings(spec, "includedNamespaces"),
        excluded_namespaces: strings(spec, "excludedNamespaces"),
        included_resources: strings(spec, "includedResources"),
        excluded_resources: strings(spec, "excludedResources"),
        label_selector: String::new(),
    };
    // A spec Velero accepted but iar cannot read (a bad glob) admits no
    // additional item at all rather than every one.
    let compiled = CompiledSelector::compile(&selector, Catalog::builtin());
    let cluster = spec.get("includeClusterResources").and_then(Value::as_bool);
    for id in ids {
        let outside = |why: String| Violation::AdditionalItemOutsideRestore {
            item: id.to_string(),
            why,
        };
        let compiled = compiled.as_ref().map_err(|e| {
            outside(format!(
                "cannot be checked against the restore's filters: {e}"
            ))
        })?;
        let gr = id.group_resource().to_string();
        if !must_include && !compiled.includes_resource(&id.group, &id.resource) {
            return Err(outside("the restore's resource filters exclude".into()));
        }
        if id.namespace.is_empty() {
            let admitted = match cluster {
                Some(included) => included,
                None => {
                    compiled.includes_cluster_scope()
                        || STORAGE_BEHIND_CLAIMS.contains(&gr.as_str())
                }
            };
            if !admitted {
                return Err(outside(
                    "is cluster-scoped and the restore does not include cluster resources".into(),
                ));
            }
        } else if id.namespace != own_namespace && !compiled.includes_namespace(&id.namespace) {
            return Err(outside(format!(
                "is in namespace {:?}, which the restore does not include",
                id.namespace
            )));
        }
    }
    Ok(())
}

/// Whether a returned item's JSON carries [`MUST_INCLUDE_ANNOTATION`]
/// `"true"` (Velero's test is that exact value).
pub fn must_include(item: &Value) -> bool {
    item.pointer("/metadata/annotations")
        .and_then(|a| a.get(MUST_INCLUDE_ANNOTATION))
        .and_then(Value::as_str)
        == Some("true")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn id(group: &str, resource: &str, ns: &str) -> ItemRef {
        ItemRef::new(group, resource, ns, "x")
    }

    fn rule(r: Result<(), Violation>) -> Option<&'static str> {
        r.err().map(|v| v.rule())
    }

    #[test]
    fn a_namespace_restore_takes_no_cluster_role_binding() {
        let spec = json!({"includedNamespaces": ["shop"]});
        let crb = id("rbac.authorization.k8s.io", "clusterrolebindings", "");
        assert_eq!(
            rule(check(&spec, "shop", false, std::slice::from_ref(&crb))),
            Some("additional-item-outside-restore")
        );
        // Velero's annotation lifts resource filters, not the cluster scope.
        assert!(check(&spec, "shop", true, std::slice::from_ref(&crb)).is_err());
        // Explicitly included cluster resources come in; the storage
        // behind a claim comes in unless explicitly excluded.
        let with = json!({"includedNamespaces": ["shop"], "includeClusterResources": true});
        assert!(check(&with, "shop", false, std::slice::from_ref(&crb)).is_ok());
        let pv = id("", "persistentvolumes", "");
        assert!(check(&spec, "shop", false, std::slice::from_ref(&pv)).is_ok());
        let without = json!({"includeClusterResources": false});
        assert!(check(&without, "shop", false, &[pv]).is_err());
        // A whole-cluster restore with the default takes cluster resources.
        assert!(check(&json!({}), "shop", false, &[crb]).is_ok());
    }

    #[test]
    fn namespaced_items_stay_in_the_item_s_namespace_or_the_restore_s() {
        let spec =
            json!({"includedNamespaces": ["shop", "cache"], "excludedNamespaces": ["kube-system"]});
        let in_own = id("", "serviceaccounts", "shop");
        let in_other_included = id("", "configmaps", "cache");
        let outside = id("", "secrets", "payments");
        assert!(check(&spec, "shop", false, &[in_own, in_other_included]).is_ok());
        let e = check(&spec, "shop", false, &[outside]).unwrap_err();
        assert!(e.to_string().contains("\"payments\""), "{e}");
        // Globs, as Velero's filters take them.
        let globbed = json!({"includedNamespaces": ["sh*"]});
        assert!(check(&globbed, "shop", false, &[id("", "secrets", "shop-2")]).is_ok());
        assert!(check(&globbed, "shop", false, &[id("", "secrets", "kube-system")]).is_err());
    }

    #[test]
    fn resource_filters_hold_unless_the_item_says_must_include() {
        let spec = json!({"includedResources": ["persistentvolumeclaims"]});
        let snap = id("snapshot.storage.k8s.io", "volumesnapshots", "shop");
        assert!(check(&spec, "shop", false, std::slice::from_ref(&snap)).is_err());
        assert!(check(&spec, "shop", true, &[snap]).is_ok());
        let excluded = json!({"excludedResources": ["secrets"]});
        assert!(check(&excluded, "shop", false, &[id("", "secrets", "shop")]).is_err());
        let item = json!({"metadata": {"annotations": {MUST_INCLUDE_ANNOTATION: "true"}}});
        assert!(must_include(&item));
        let wrong = json!({"metadata": {"annotations": {MUST_INCLUDE_ANNOTATION: "True"}}});
        assert!(!must_include(&wrong));
    }

    #[test]
    fn a_spec_iar_cannot_read_admits_no_additional_item() {
        let spec = json!({"includedNamespaces": ["[unclosed"]});
        let e = check(&spec, "shop", false, &[id("", "configmaps", "shop")]).unwrap_err();
        assert_eq!(e.rule(), "additional-item-outside-restore");
    }
}
