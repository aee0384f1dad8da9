//! The `backups.iar.dev` resource: a Velero Backup's spec and status, with
//! Velero's field names, so that a Velero user reads it without a guide and
//! the spec reaches plugins exactly as Velero would hand it to them.

use iar_backup::backup::object::BackupStatus;
use k8s_openapi::api::core::v1::TypedLocalObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// Velero's `metadata`: in a Schedule's template, the labels its
    /// backups get (instead of the Schedule's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<SpecMetadata>,
}

/// Velero's `BackupSpec.metadata`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpecMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<std::collections::BTreeMap<String, String>>,
}

/// A Velero Schedule (`schedules.iar.dev`): a Backup made from `template`
/// each time `schedule` comes round, named and labelled as Velero names
/// and labels them.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "iar.dev",
    version = "v1",
    kind = "Schedule",
    namespaced,
    status = "ScheduleStatus",
    shortname = "iars",
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule"}"#,
    printcolumn = r#"{"name":"LastBackup","type":"date","jsonPath":".status.lastBackup"}"#,
    printcolumn = r#"{"name":"Paused","type":"boolean","jsonPath":".spec.paused"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSpec {
    /// The Backup spec of every backup it makes.
    pub template: BackupSpec,
    /// A cron expression (five fields, `@daily`, `@every 6h`), UTC.
    pub schedule: String,
    /// Its backups are owned by the Schedule: deleting it deletes their
    /// resources (their data stays in the store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_owner_references_in_backup: Option<bool>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Skip the run due now (after a pause, or at creation): counted
    /// from now instead. Set back to false once applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_immediately: Option<bool>,
}

/// What the controller says of a Schedule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleStatus {
    /// `Enabled`, or `FailedValidation` (see `validationErrors`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_skipped: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_errors: Option<Vec<String>>,
}

/// A Velero Restore (`restores.iar.dev`): a backup's objects back into
/// this cluster, restored by the controller's leader. The spec is
/// Velero's `RestoreSpec` as written: the API server keeps every key
/// (the schema preserves unknown fields), and the controller checks them
/// as `iar restore --spec` does, a key iar does not know or does not
/// support refused by name in `status.validationErrors` (phase
/// `FailedValidation`), never ignored into a wider restore.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "iar.dev",
    version = "v1",
    kind = "Restore",
    namespaced,
    status = "RestoreStatus",
    shortname = "iarr",
    printcolumn = r#"{"name":"Backup","type":"string","jsonPath":".spec.backupName"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Restored","type":"integer","jsonPath":".status.progress.itemsRestored"}"#,
    printcolumn = r#"{"name":"Errors","type":"integer","jsonPath":".status.errors"}"#,
    printcolumn = r#"{"name":"Warnings","type":"integer","jsonPath":".status.warnings"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct RestoreResourceSpec {
    /// Velero's RestoreSpec fields, as written.
    #[serde(flatten)]
    pub fields: serde_json::Map<String, serde_json::Value>,
}

/// What the controller says of a Restore: Velero's `RestoreStatus` fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatus {
    /// `New`, `FailedValidation`, `InProgress`, `Completed`,
    /// `PartiallyFailed` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_errors: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<u32>,
    /// Why a Failed restore could not run at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<RestoreProgress>,
    /// Restored pods' exec hooks: how many applied, how many failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_status: Option<RestoreHookStatus>,
    /// Pod volumes filled from their file-system backups (iar's own; Velero
    /// lists its PodVolumeRestores apart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_volume_restores: Option<PodVolumeRestoreCounts>,
}

/// How many restored pods' volumes were filled, and how many were not.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodVolumeRestoreCounts {
    #[serde(default)]
    pub completed: u32,
    #[serde(default)]
    pub failed: u32,
}

/// Velero's `HookStatus` of a restore.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreHookStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks_attempted: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks_failed: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreProgress {
    #[serde(default)]
    pub total_items: u32,
    #[serde(default)]
    pub items_restored: u32,
}

/// A Velero DownloadRequest (`downloadrequests.iar.dev`): a signed URL
/// for one of a backup's or restore's files ([`super::downloads`]).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "iar.dev",
    version = "v1",
    kind = "DownloadRequest",
    namespaced,
    status = "DownloadRequestStatus"
)]
pub struct DownloadRequestSpec {
    pub target: DownloadTarget,
}

/// Velero's `DownloadTarget`: `kind` is `BackupLog`, `BackupContents`,
/// `BackupResults`, `BackupItemOperations`, `BackupResourceList`,
/// `RestoreLog` or `RestoreResults`; `name` the backup's or restore's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DownloadTarget {
    pub kind: String,
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DownloadRequestStatus {
    /// `New`, `Processed`, or (iar's own) `Failed` with a `reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(
        default,
        rename = "downloadURL",
        skip_serializing_if = "Option::is_none"
    )]
    pub download_url: Option<String>,
    /// When the URL stops reading, and the request is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
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
pub fn definition() -> CustomResourceDefinition {
    formatted::<Backup>()
}

/// `K`'s CRD with Kubernetes' integer formats ([`kubernetes_formats`]).
fn formatted<K: kube::CustomResourceExt>() -> CustomResourceDefinition {
    let mut crd = serde_json::to_value(K::crd()).expect("a CRD serializes");
    kubernetes_formats(&mut crd);
    serde_json::from_value(crd).expect("only formats changed")
}

/// schemars names Rust's unsigned integers `uint64` and `uint32`, formats
/// Kubernetes does not know (`kubectl apply` warns about each); the API
/// server's own are `int64` and `int32`. The schema's `minimum: 0` keeps
/// them unsigned.
fn kubernetes_formats(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            if let Some(format) = map.get_mut("format") {
                match format.as_str() {
                    Some("uint64") => *format = "int64".into(),
                    Some("uint32" | "uint16" | "uint8") => *format = "int32".into(),
                    _ => {}
                }
            }
            map.values_mut().for_each(kubernetes_formats);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(kubernetes_formats),
        _ => {}
    }
}

/// The CRD as YAML, ready for `kubectl apply -f -`.
pub fn definition_yaml() -> String {
    iar_core::yaml::to_string(&definition()).expect("a CRD serializes")
}

/// The node agents' `volumebackups.iar.dev` CRD, formats as [`definition`]'s.
pub fn volume_backup_definition() -> CustomResourceDefinition {
    formatted::<super::volume_backup::VolumeBackup>()
}

/// The `volumerestores.iar.dev` CRD, formats as [`definition`]'s.
pub fn volume_restore_definition() -> CustomResourceDefinition {
    formatted::<super::volume_restore::VolumeRestore>()
}

/// The `schedules.iar.dev` CRD, formats as [`definition`]'s.
pub fn schedule_definition() -> CustomResourceDefinition {
    formatted::<Schedule>()
}

/// The `restores.iar.dev` CRD, formats as [`definition`]'s, its spec
/// kept as written (unknown keys preserved for the controller to refuse
/// by name rather than pruned by the API server).
pub fn restore_definition() -> CustomResourceDefinition {
    let mut crd = serde_json::to_value(formatted::<Restore>()).expect("a CRD serializes");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = serde_json::json!({
        "description": "Velero's RestoreSpec, as written; checked by the controller.",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    });
    serde_json::from_value(crd).expect("only the spec's schema changed")
}

/// The `downloadrequests.iar.dev` CRD, formats as [`definition`]'s.
pub fn download_request_definition() -> CustomResourceDefinition {
    formatted::<DownloadRequest>()
}

/// iar's CRDs, as `iar crd` prints them (deploy/crd.yaml).
pub fn definitions_yaml() -> String {
    let yaml =
        |crd: CustomResourceDefinition| iar_core::yaml::to_string(&crd).expect("a CRD serializes");
    format!(
        "{}---\n{}---\n{}---\n{}---\n{}---\n{}",
        definition_yaml(),
        yaml(volume_backup_definition()),
        yaml(volume_restore_definition()),
        yaml(schedule_definition()),
        yaml(restore_definition()),
        yaml(download_request_definition())
    )
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
        let filter = iar_core::select::BackupFilter::from_spec(&value).unwrap();
        let pod = |ns: &str, app: &str| {
            iar_core::Item::from_value(
                serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p", "namespace": ns, "labels": {"app": app}}}),
                iar_core::catalog::Catalog::builtin(),
            )
            .unwrap()
        };
        assert!(filter.matches(&pod("shop", "web")));
        assert!(!filter.matches(&pod("shop", "db")));
        assert!(!filter.matches(&pod("other", "web")));
        assert_eq!(
            iar_backup::backup::spec::operation_timeout(&value).unwrap(),
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

    /// Every format in the CRD's schema is one the API server knows:
    /// `kubectl apply` warned `unrecognized format "uint64"` before.
    #[test]
    fn the_schema_uses_only_formats_kubernetes_knows() {
        fn formats(value: &serde_json::Value, found: &mut Vec<String>) {
            match value {
                serde_json::Value::Object(map) => {
                    if let Some(f) = map.get("format").and_then(|f| f.as_str()) {
                        found.push(f.to_string());
                    }
                    map.values().for_each(|v| formats(v, found));
                }
                serde_json::Value::Array(items) => items.iter().for_each(|v| formats(v, found)),
                _ => {}
            }
        }
        let mut found = Vec::new();
        formats(&serde_json::to_value(definition()).unwrap(), &mut found);
        assert!(found.iter().any(|f| f == "int64"), "{found:?}");
        // apiextensions-apiserver's list (pkg/apiserver/validation/formats.go).
        let known = [
            "bsonobjectid",
            "uri",
            "email",
            "hostname",
            "ipv4",
            "ipv6",
            "cidr",
            "mac",
            "uuid",
            "uuid3",
            "uuid4",
            "uuid5",
            "isbn",
            "isbn10",
            "isbn13",
            "creditcard",
            "ssn",
            "hexcolor",
            "rgbcolor",
            "byte",
            "password",
            "date",
            "duration",
            "datetime",
            "date-time",
            "int32",
            "int64",
            "float",
            "double",
        ];
        for f in &found {
            assert!(known.contains(&f.as_str()), "unknown format {f:?}");
        }
    }
}
