//! The scalar fields of a Velero Backup `spec` that iar honours: the
//! operation timeout and the ttl, as Go durations ([`iar_core::duration`]:
//! Go's `time.ParseDuration`, neither of them negative).

use iar_core::duration::parse_non_negative;
use iar_core::select::backup_filter::type_name;
use serde_json::Value;
use std::time::Duration;

/// A duration as Go's `time.Duration.String` writes it, and so as Velero
/// stores `spec.ttl`: "720h0m0s", "1m30s", "1.5s", "250ms", "0s".
pub use iar_core::duration::format_std as format_go_duration;

/// Every key of Velero's `BackupSpec` (v1.18.3,
/// `pkg/apis/velero/v1/backup_types.go`): what a Backup spec may hold.
/// Whether iar honours each is decided elsewhere (the filters it does not
/// implement are refused by name there).
pub const BACKUP_SPEC_KEYS: &[&str] = &[
    "metadata",
    "includedNamespaces",
    "excludedNamespaces",
    "includedResources",
    "excludedResources",
    "includedClusterScopedResources",
    "excludedClusterScopedResources",
    "includedNamespaceScopedResources",
    "excludedNamespaceScopedResources",
    "labelSelector",
    "orLabelSelectors",
    "snapshotVolumes",
    "ttl",
    "volumeGroupSnapshotLabelKey",
    "includeClusterResources",
    "hooks",
    "storageLocation",
    "volumeSnapshotLocations",
    "defaultVolumesToRestic",
    "defaultVolumesToFsBackup",
    "orderedResources",
    "csiSnapshotTimeout",
    "itemOperationTimeout",
    "resourcePolicy",
    "snapshotMoveData",
    "datamover",
    "uploaderConfig",
];

/// Refuses a key Velero's BackupSpec does not have, naming it and the key
/// it most likely meant: a misspelt filter (`includeNamespaces`) is not a
/// filter, and ignoring it would back up everything.
pub fn known_keys(spec: &Value) -> Result<(), String> {
    iar_core::select::spec_keys::refuse_unknown(
        spec,
        BACKUP_SPEC_KEYS,
        "Velero's Backup spec",
        "a filter iar ignored would widen the backup",
    )
}

/// The spec's `itemOperationTimeout`, if set.
pub fn operation_timeout(spec: &Value) -> Result<Option<Duration>, String> {
    match spec.get("itemOperationTimeout") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_non_negative(s)
            .map(Some)
            .map_err(|e| format!("itemOperationTimeout: {e}")),
        Some(v) => Err(format!(
            "itemOperationTimeout is {}, not a duration string",
            type_name(v)
        )),
    }
}

/// The spec's `ttl`, if set: how long the backup is kept. Zero is "not
/// set" (Velero applies its default to both).
pub fn ttl(spec: &Value) -> Result<Option<Duration>, String> {
    match spec.get("ttl") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_non_negative(s)
            .map(|d| Some(d).filter(|d| !d.is_zero()))
            .map_err(|e| format!("ttl: {e}")),
        Some(v) => Err(format!("ttl is {}, not a duration string", type_name(v))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_misspelt_key_is_refused_naming_the_key_it_meant() {
        let e = known_keys(&json!({"includeNamespaces": ["shop"]})).unwrap_err();
        assert!(e.contains("\"includeNamespaces\""), "{e}");
        assert!(e.contains("did you mean includedNamespaces?"), "{e}");
        let e = known_keys(&json!({"colour": "blue"})).unwrap_err();
        assert!(!e.contains("did you mean"), "{e}");
        let every: serde_json::Map<String, Value> = BACKUP_SPEC_KEYS
            .iter()
            .map(|k| (k.to_string(), Value::Null))
            .collect();
        assert_eq!(known_keys(&Value::Object(every)), Ok(()));
    }

    #[test]
    fn ttl_zero_is_unset_and_a_bad_ttl_names_the_field() {
        assert_eq!(ttl(&json!({})), Ok(None));
        assert_eq!(ttl(&json!({"ttl": "0s"})), Ok(None));
        assert_eq!(
            ttl(&json!({"ttl": "24h0m0s"})),
            Ok(Some(Duration::from_secs(86_400)))
        );
        for bad in [json!({"ttl": 5}), json!({"ttl": "a day"})] {
            assert!(ttl(&bad).unwrap_err().starts_with("ttl"), "{bad}");
        }
    }

    /// Go's syntax, all of it: "0" alone and a sign read as Velero reads
    /// them; a negative ttl or timeout is refused, naming field and rule.
    #[test]
    fn go_syntax_and_no_negative_durations() {
        assert_eq!(ttl(&json!({"ttl": "0"})), Ok(None));
        assert_eq!(
            ttl(&json!({"ttl": "+1.5h"})),
            Ok(Some(Duration::from_secs(5400)))
        );
        assert_eq!(
            operation_timeout(&json!({"itemOperationTimeout": "90μs"})),
            Ok(Some(Duration::from_micros(90)))
        );
        assert_eq!(
            ttl(&json!({"ttl": "-1h"})),
            Err(
                r#"ttl: "-1h" is negative (-1h0m0s): it must be zero or more (rule: non-negative-duration)"#
                    .into()
            )
        );
        let err = operation_timeout(&json!({"itemOperationTimeout": "-5m"})).unwrap_err();
        assert!(
            err.starts_with("itemOperationTimeout: \"-5m\" is negative")
                && err.contains("rule: non-negative-duration"),
            "{err}"
        );
    }

    /// A timeout of the wrong type is an error naming the field.
    #[test]
    fn a_wrongly_typed_operation_timeout_names_the_field() {
        assert!(
            operation_timeout(&json!({"itemOperationTimeout": 60}))
                .unwrap_err()
                .contains("itemOperationTimeout")
        );
    }
}
