//! The `backups.iar.dev` resource: a Velero Backup's spec and status, with
//! Velero's field names, so that a Velero user reads it without a guide and
//! the spec reaches plugins exactly as Velero would hand it to them.

use crate::backup::object::BackupStatus;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What to back up. Every field is optional; an empty spec backs up every
/// listable object in the cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "iar.dev",
    version = "v1",
    kind = "Backup",
    namespaced,
    status = "BackupStatus",
    shortname = "iarb",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Items","type":"integer","jsonPath":".status.progress.itemsBackedUp"}"#,
    printcolumn = r#"{"name":"Errors","type":"integer","jsonPath":".status.errors"}"#,
    printcolumn = r#"{"name":"Warnings","type":"integer","jsonPath":".status.warnings"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_namespaces: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_namespaces: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_resources: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_resources: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// How long an asynchronous plugin operation may run, as a Go duration
    /// ("4h", "30m"); the controller's `--operation-timeout` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_operation_timeout: Option<String>,
    /// How long the backup is kept, as a Go duration ("720h0m0s"); unset
    /// or zero, the controller's `--default-backup-ttl`. Once it has
    /// passed (`status.expiration`) and the backup has ended, the backup
    /// and this resource are deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_volumes_to_fs_backup: Option<bool>,
    /// Velero's backup hooks (`resources[]` with pre/post exec hooks), kept
    /// as written: the hooks module validates them with named errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_fields")]
    pub hooks: Option<serde_json::Value>,
    /// A ConfigMap in the Backup's namespace holding a volume policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_policy: Option<TypedLocalObjectReference>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TypedLocalObjectReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    pub kind: String,
    pub name: String,
}

fn preserve_unknown_fields(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

impl BackupSpec {
    /// The spec as the phase machine and plugins see it: Velero's JSON.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a spec serializes")
    }
}

/// The CustomResourceDefinition, as `iar crd` prints it.
pub fn definition()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    use kube::CustomResourceExt;
    Backup::crd()
}

/// The CRD as YAML, ready for `kubectl apply -f -`.
pub fn definition_yaml() -> String {
    serde_yaml::to_string(&definition()).expect("a CRD serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_reaches_the_filter_with_velero_field_names() {
        let spec: BackupSpec = serde_json::from_value(serde_json::json!({
            "includedNamespaces": ["shop"],
            "excludedResources": ["secrets"],
            "labelSelector": {"matchLabels": {"app": "web"}},
            "itemOperationTimeout": "30m",
        }))
        .unwrap();
        let value = spec.to_value();
        let filter = crate::select::BackupFilter::from_spec(&value).unwrap();
        let pod = |ns: &str, app: &str| {
            crate::Item::from_value(
                serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p", "namespace": ns, "labels": {"app": app}}}),
                crate::resources::Catalog::builtin(),
            )
            .unwrap()
        };
        assert!(filter.matches(&pod("shop", "web")));
        assert!(!filter.matches(&pod("shop", "db")));
        assert!(!filter.matches(&pod("other", "web")));
        assert_eq!(
            crate::backup::spec::operation_timeout(&value).unwrap(),
            Some(std::time::Duration::from_secs(1800))
        );
        // Absent fields are absent, not null: the filter treats them as "all".
        assert!(value.get("includedResources").is_none());
    }

    #[test]
    fn the_crd_has_a_status_subresource_and_keeps_hooks_as_written() {
        let crd = serde_json::to_value(definition()).unwrap();
        assert_eq!(crd["metadata"]["name"], "backups.iar.dev");
        let version = &crd["spec"]["versions"][0];
        assert!(version["subresources"]["status"].is_object());
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        assert_eq!(spec["hooks"]["x-kubernetes-preserve-unknown-fields"], true);
        let status = &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
        for field in [
            "phase",
            "progress",
            "errors",
            "warnings",
            "startTimestamp",
            "backupItemOperationsAttempted",
        ] {
            assert!(status.get(field).is_some(), "status.{field} missing");
        }
    }
}
