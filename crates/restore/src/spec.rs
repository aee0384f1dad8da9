//! A Restore's spec: Velero's `RestoreSpec` (v1.18.3,
//! `pkg/apis/velero/v1/restore_types.go`) field for field where iar
//! supports it; every other field of it is refused by name, and a key it
//! does not have at all is refused with the key it most likely meant.

use crate::hooks::RestoreHooks;
use iar_core::duration::parse_non_negative;
use iar_core::select::backup_filter::{BackupFilter, type_name};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// Every key of Velero's `RestoreSpec`.
pub const RESTORE_SPEC_KEYS: &[&str] = &[
    "backupName",
    "scheduleName",
    "includedNamespaces",
    "excludedNamespaces",
    "includedResources",
    "excludedResources",
    "namespaceMapping",
    "labelSelector",
    "orLabelSelectors",
    "restorePVs",
    "restoreStatus",
    "preserveNodePorts",
    "includeClusterResources",
    "hooks",
    "existingResourcePolicy",
    "itemOperationTimeout",
    "resourceModifier",
    "uploaderConfig",
];

/// Fields of Velero's spec iar does not implement: ignoring one would
/// restore something other than what was asked.
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "scheduleName",
        "name the backup (backupName); iar picks no schedule's latest",
    ),
    ("orLabelSelectors", "use one labelSelector"),
    ("restoreStatus", "statuses are not restored"),
    ("resourceModifier", "resource modifiers are not applied"),
    ("uploaderConfig", "it configures Velero's uploader"),
];

/// What to do with an object that already exists in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExistingPolicy {
    /// Leave it; a warning when it differs from the backed-up one.
    None,
    /// Replace it with the backed-up one.
    Update,
}

/// Velero's default `itemOperationTimeout` for restores.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

/// A checked restore spec.
#[derive(Clone, Debug)]
pub struct RestoreSpec {
    pub backup_name: String,
    /// Namespaces, resources and labels (the same semantics as a backup's).
    pub filter: BackupFilter,
    pub namespace_mapping: BTreeMap<String, String>,
    /// `None`: cluster-scoped objects are restored when every namespace is.
    pub include_cluster_resources: Option<bool>,
    pub existing: ExistingPolicy,
    pub preserve_node_ports: bool,
    /// `restorePVs`: `Some(false)` restores no CSI snapshot (Velero's CSI
    /// actions skip them); iar has no other volume snapshotter.
    pub restore_pvs: Option<bool>,
    pub operation_timeout: Duration,
    /// `hooks`: init containers and exec hooks for restored pods.
    pub hooks: RestoreHooks,
    /// The spec as given, what restore actions are handed.
    pub raw: Value,
}

impl RestoreSpec {
    pub fn from_value(spec: &Value) -> Result<RestoreSpec, String> {
        if !spec.is_object() {
            return Err(format!(
                "restore spec is {}, not an object",
                type_name(spec)
            ));
        }
        iar_core::select::spec_keys::refuse_unknown(
            spec,
            RESTORE_SPEC_KEYS,
            "Velero's Restore spec",
            "a filter iar ignored would widen the restore",
        )?;
        for (key, why) in UNSUPPORTED {
            if spec.get(*key).is_some_and(|v| !v.is_null()) {
                return Err(format!(
                    "restore spec: {key} is not supported by iar ({why})"
                ));
            }
        }
        let backup_name = match spec.get("backupName") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err("restore spec: backupName is required".into()),
        };
        let mut filters = serde_json::Map::new();
        for key in [
            "includedNamespaces",
            "excludedNamespaces",
            "includedResources",
            "excludedResources",
            "labelSelector",
        ] {
            if let Some(v) = spec.get(key) {
                filters.insert(key.into(), v.clone());
            }
        }
        let filter = BackupFilter::from_spec(&Value::Object(filters))
            .map_err(|e| format!("restore spec: {}", e.replace("backup spec: ", "")))?;
        let namespace_mapping = mapping(spec.get("namespaceMapping"))?;
        let include_cluster_resources = optional_bool(spec, "includeClusterResources")?;
        let existing = match spec.get("existingResourcePolicy") {
            None | Some(Value::Null) => ExistingPolicy::None,
            Some(Value::String(s)) if s.is_empty() || s == "none" => ExistingPolicy::None,
            Some(Value::String(s)) if s == "update" => ExistingPolicy::Update,
            Some(v) => {
                return Err(format!(
                    "restore spec: existingResourcePolicy is {v}; Velero's are \"none\" and \"update\""
                ));
            }
        };
        let preserve_node_ports = optional_bool(spec, "preserveNodePorts")?.unwrap_or(false);
        let restore_pvs = optional_bool(spec, "restorePVs")?;
        let operation_timeout = match spec.get("itemOperationTimeout") {
            None | Some(Value::Null) => DEFAULT_OPERATION_TIMEOUT,
            Some(Value::String(s)) => parse_non_negative(s)
                .map_err(|e| format!("restore spec: itemOperationTimeout: {e}"))?,
            Some(v) => {
                return Err(format!(
                    "restore spec: itemOperationTimeout is {}, not a duration string",
                    type_name(v)
                ));
            }
        };
        let hooks = RestoreHooks::from_spec(spec.get("hooks"))?;
        Ok(RestoreSpec {
            hooks,
            backup_name,
            filter,
            namespace_mapping,
            include_cluster_resources,
            existing,
            preserve_node_ports,
            restore_pvs,
            operation_timeout,
            raw: spec.clone(),
        })
    }

    /// Where an object of `namespace` is restored.
    pub fn target_namespace<'a>(&'a self, namespace: &'a str) -> &'a str {
        self.namespace_mapping
            .get(namespace)
            .map_or(namespace, String::as_str)
    }

    /// Whether a cluster-scoped object is restored, as Velero decides
    /// (`getOrderedResourceCollection`): not when the spec says false;
    /// when it says true; otherwise only when every namespace is.
    pub fn takes_cluster_scoped(&self) -> bool {
        match self.include_cluster_resources {
            Some(take) => take,
            None => self.all_namespaces(),
        }
    }

    fn all_namespaces(&self) -> bool {
        let excluded = self
            .raw
            .get("excludedNamespaces")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        let included = self
            .raw
            .get("includedNamespaces")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty() && !a.iter().any(|v| v == "*"));
        !excluded && !included
    }
}

fn optional_bool(spec: &Value, key: &str) -> Result<Option<bool>, String> {
    match spec.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(format!(
            "restore spec: {key} is {}, not a boolean",
            type_name(v)
        )),
    }
}

/// `namespaceMapping`: namespace names to namespace names, each a valid
/// namespace name (an object placed in `../x` is never written).
fn mapping(v: Option<&Value>) -> Result<BTreeMap<String, String>, String> {
    let map = match v {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m,
        Some(v) => {
            return Err(format!(
                "restore spec: namespaceMapping is {}, not a map",
                type_name(v)
            ));
        }
    };
    let mut out = BTreeMap::new();
    for (from, to) in map {
        let Some(to) = to.as_str() else {
            return Err(format!(
                "restore spec: namespaceMapping[{from:?}] is {}, not a namespace name",
                type_name(to)
            ));
        };
        for name in [from.as_str(), to] {
            iar_core::names::dns_label(name).map_err(|e| {
                format!("restore spec: namespaceMapping: {name:?} is not a namespace name: {e} (rule kubernetes-name)")
            })?;
        }
        out.insert(from.clone(), to.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_misspelt_key_is_refused_naming_the_one_meant() {
        let e = RestoreSpec::from_value(&json!({"backupName": "b", "namespaceMappings": {}}))
            .unwrap_err();
        assert!(e.contains("did you mean namespaceMapping?"), "{e}");
    }

    #[test]
    fn fields_iar_does_not_implement_are_refused_by_name() {
        for key in ["scheduleName", "restoreStatus", "orLabelSelectors"] {
            let e =
                RestoreSpec::from_value(&json!({"backupName": "b", key: {"x": 1}})).unwrap_err();
            assert!(e.contains(key) && e.contains("not supported"), "{e}");
        }
        // Null is Velero's "not set".
        RestoreSpec::from_value(&json!({"backupName": "b", "restoreStatus": null})).unwrap();
    }

    #[test]
    fn a_mapping_to_a_path_is_refused() {
        let e =
            RestoreSpec::from_value(&json!({"backupName": "b", "namespaceMapping": {"a": "../x"}}))
                .unwrap_err();
        assert!(e.contains("kubernetes-name"), "{e}");
        let e = RestoreSpec::from_value(
            &json!({"backupName": "b", "existingResourcePolicy": "replace"}),
        )
        .unwrap_err();
        assert!(e.contains("\"none\" and \"update\""), "{e}");
    }

    #[test]
    fn cluster_scoped_objects_follow_velero() {
        let spec = |v: Value| RestoreSpec::from_value(&v).unwrap().takes_cluster_scoped();
        assert!(spec(json!({"backupName": "b"})));
        assert!(!spec(
            json!({"backupName": "b", "includedNamespaces": ["a"]})
        ));
        assert!(spec(
            json!({"backupName": "b", "includedNamespaces": ["a"], "includeClusterResources": true})
        ));
        assert!(!spec(
            json!({"backupName": "b", "includeClusterResources": false})
        ));
        assert!(spec(
            json!({"backupName": "b", "includedNamespaces": ["*"]})
        ));
    }
}
