//! A Velero Backup `spec` as a user writes it (`iar backup --spec`):
//! `iar::select::BackupFilter::from_spec` and `operation_timeout`.
//!
//! Properties: a spec that is accepted never selects more than it says. When
//! `includedNamespaces` (or `includedResources`) is a non-empty array with no
//! `*` and no glob, an item outside it is not taken; an entry that is not a
//! string must be an error, never silently dropped (dropping every entry
//! would widen the list to "everything"). And an accepted label selector
//! object keeps an item whose labels it does not match out.

#![no_main]

use iar::Item;
use iar::backup::spec::operation_timeout;
use iar::catalog::Catalog;
use iar::select::BackupFilter;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

/// A namespace and resource no fuzzed spec names by accident.
const UNLISTED_NS: &str = "fuzz-unlisted-namespace";

fn unlisted_item() -> Item {
    let value = json!({
        "apiVersion": "fuzz.example.com/v1",
        "kind": "FuzzUnlisted",
        "metadata": {"name": "x", "namespace": UNLISTED_NS, "labels": {"fuzz-unlisted-label": "x"}},
    });
    Item::from_value(value, Catalog::builtin()).expect("a valid item")
}

/// Whether a spec list names entries exactly: a non-empty array whose every
/// entry is a string without glob characters (or not a string at all).
fn names_exactly(spec: &Value, key: &str, item_field: &str) -> bool {
    let Some(list) = spec.get(key).and_then(Value::as_array) else {
        return false;
    };
    !list.is_empty()
        && list.iter().all(|v| match v.as_str() {
            Some(s) => {
                let s = s.trim();
                !s.contains(['*', '?', '[']) && !s.eq_ignore_ascii_case(item_field)
            }
            None => true,
        })
}

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let _ = operation_timeout(&spec);
    let Ok(filter) = BackupFilter::from_spec(&spec) else {
        return;
    };
    let item = unlisted_item();
    let group_resource = format!("{}.{}", item.id.resource, item.id.group);
    let taken = filter.matches(&item);
    assert!(
        !(taken && names_exactly(&spec, "includedNamespaces", UNLISTED_NS)),
        "includedNamespaces {} takes an item in {UNLISTED_NS}",
        spec["includedNamespaces"]
    );
    assert!(
        !(taken && names_exactly(&spec, "includedResources", &group_resource)),
        "includedResources {} takes {group_resource}",
        spec["includedResources"]
    );
    // Only the unlisted label key: any matchLabels entry on another key or
    // an `In` on any key must keep the item out.
    if let Some(sel) = spec.get("labelSelector").filter(|v| v.is_object()) {
        let other_key = sel
            .get("matchLabels")
            .and_then(Value::as_object)
            .is_some_and(|m| m.keys().any(|k| k != "fuzz-unlisted-label"));
        assert!(
            !(taken && other_key),
            "labelSelector {sel} takes an item without its labels"
        );
    }
});
