//! Restore item actions (contract 1.3.0, Velero's RestoreItemAction v2)
//! through the boundary: a plugin exporting a backup and a restore action
//! (labels), a restore-only plugin, and every rule a hostile restore action
//! tries to pass.

use crate::support::{artifacts, item, load, load_with, runtime};
use iar::Limits;
use iar::plugin::{Call, Interface, RestoreRef};
use serde_json::json;
use std::time::Duration;

fn restore() -> RestoreRef {
    RestoreRef {
        object: None,
        name: "from-nightly".into(),
        namespace: "velero".into(),
        uid: "99999999-2222-3333-4444-555555555555".into(),
        spec: json!({"backupName": "nightly", "namespaceMapping": {"shop": "shop-copy"}}),
    }
}

fn config_map(name: &str, annotations: serde_json::Value) -> iar::Item {
    item(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "shop-copy", "annotations": annotations},
        "data": {"k": "v"}}))
}

/// labels exports both halves at 1.3.0: its backup action still labels,
/// its restore action annotates a restored item with the backup it came
/// from, and leaves what it was given from the backup untouched.
#[test]
fn labels_restore_action_records_the_backup_an_item_came_from() {
    let rt = runtime();
    let labels = load(&rt, artifacts::LABELS, &[("labels", "team=payments")]);
    assert_eq!(labels.version(), "1.3.0");
    assert_eq!(
        labels.interfaces(),
        [Interface::ItemAction, Interface::RestoreItemAction]
    );
    assert!(labels.restore_applies_to().is_some());
    let cm = config_map("settings", json!({}));
    assert!(labels.restore_applies(&cm));
    let mut instance = labels.instance(std::sync::Arc::new(iar::NoCluster));
    let out = instance
        .restore_execute(&cm, &cm, &restore(), &|_| false)
        .unwrap();
    let restored = out.item.expect("changed");
    assert_eq!(
        restored.value()["metadata"]["annotations"]["iar.dev/restored-from"],
        "nightly"
    );
    assert!(!out.skip_restore && out.operation_id.is_none());
    // Turned off by config: the item goes as it came.
    let off = load(&rt, artifacts::LABELS, &[("restored-from", "-")]);
    let out = off
        .instance(std::sync::Arc::new(iar::NoCluster))
        .restore_execute(&cm, &cm, &restore(), &|_| false)
        .unwrap();
    assert!(out.item.is_none());
}

/// Every rule of the restore boundary, each broken by the restore-only
/// guest, each refused naming the plugin, the item and the rule; and the
/// plugin keeps serving afterwards.
#[test]
fn a_hostile_restore_action_is_refused_by_rule() {
    let rt = runtime();
    let limits = Limits {
        max_related_items: 4,
        deadline: Duration::from_millis(300),
        ..Limits::default()
    };
    let plugin = load_with(&rt, artifacts::RESTORE_HOSTILE, &[("count", "5")], limits);
    assert_eq!(plugin.interfaces(), [Interface::RestoreItemAction]);
    let mut instance = plugin.instance(std::sync::Arc::new(iar::NoCluster));
    for (mode, rule) in [
        ("rename", "item-identity-unchanged"),
        ("move", "item-identity-unchanged"),
        ("not-object", "item-is-json-object"),
        ("empty-operation", "operation-id-non-empty"),
        ("many", "output-size"),
        ("bad-additional", "invalid-identifier"),
        ("trap", "no-trap"),
        ("loop", "cpu-deadline"),
    ] {
        let cm = config_map(mode, json!({"restore-hostile": mode}));
        let e = instance
            .restore_execute(&cm, &cm, &restore(), &|_| false)
            .unwrap_err();
        assert_eq!(e.violation.rule(), rule, "{mode}: {e}");
        assert_eq!(e.call, Call::RestoreExecute);
        let text = e.to_string();
        assert!(
            text.contains("\"iar_guest_restore_hostile\"")
                && text.contains(&format!("configmaps shop-copy/{mode}"))
                && text.contains(rule),
            "{mode}: the error names plugin, item and rule: {text}"
        );
    }
    // Still serving: an honest item is labelled.
    let cm = config_map("fine", json!({}));
    let out = instance
        .restore_execute(&cm, &cm, &restore(), &|_| false)
        .unwrap();
    assert_eq!(
        out.item.unwrap().value()["metadata"]["labels"]["restored"],
        "yes"
    );
}

/// An operation's life in a restore: started, unique per restore (the same
/// id again is refused), its progress read; a skip; a wait for an
/// additional item with its timeout, and the readiness the plugin answers.
#[test]
fn restore_operations_skips_and_waits_cross_the_boundary() {
    let rt = runtime();
    let plugin = load(&rt, artifacts::RESTORE_HOSTILE, &[("ready", "false")]);
    let mut instance = plugin.instance(std::sync::Arc::new(iar::NoCluster));
    let seen = std::sync::Mutex::new(Vec::<String>::new());
    let claim = |id: &str| {
        let mut seen = seen.lock().unwrap();
        let again = seen.iter().any(|s| s == id);
        seen.push(id.to_string());
        again
    };
    let cm = config_map("db", json!({"restore-hostile": "operation"}));
    let out = instance
        .restore_execute(&cm, &cm, &restore(), &claim)
        .unwrap();
    assert_eq!(out.operation_id.as_deref(), Some("op-db"));
    let again = instance
        .restore_execute(&cm, &cm, &restore(), &claim)
        .unwrap_err();
    assert_eq!(again.violation.rule(), "operation-id-unique", "{again}");
    let progress = instance
        .restore_progress("op-db", &cm.id, &restore())
        .unwrap();
    assert!(progress.completed && progress.error.is_none());
    let unknown = instance
        .restore_progress("nope", &cm.id, &restore())
        .unwrap_err();
    assert_eq!(unknown.call, Call::RestoreProgress);
    assert!(
        unknown.to_string().contains("unknown operation"),
        "{unknown}"
    );

    let skip = config_map("gone", json!({"restore-hostile": "skip"}));
    let out = instance
        .restore_execute(&skip, &skip, &restore(), &|_| false)
        .unwrap();
    assert!(out.skip_restore && out.item.is_none());

    let wait = config_map("app", json!({"restore-hostile": "wait"}));
    let out = instance
        .restore_execute(&wait, &wait, &restore(), &|_| false)
        .unwrap();
    assert!(out.wait_for_additional_items);
    assert_eq!(
        out.additional_items_ready_timeout,
        Some(Duration::from_secs(10))
    );
    assert_eq!(out.additional_items[0].name, "dep");
    let ready = instance
        .additional_items_ready(&out.additional_items, &restore())
        .unwrap();
    assert!(!ready, "the plugin said not yet");
}

/// A restore-only plugin is no backup action, and a backup-only plugin no
/// restore action: each call to the half a plugin lacks is refused by rule
/// plugin-world; neither applies to any item of the other kind. A Secret is
/// not handed to a restore action without the `secrets` grant.
#[test]
fn each_half_is_called_only_where_it_is_exported() {
    let rt = runtime();
    let restore_only = load(&rt, artifacts::RESTORE_HOSTILE, &[]);
    let cm = config_map("a", json!({}));
    assert!(!restore_only.applies(&cm));
    let e = restore_only
        .instance(std::sync::Arc::new(iar::NoCluster))
        .execute(&cm, &crate::support::backup(iar::Phase::Backup), &|_| false)
        .unwrap_err();
    assert_eq!(e.violation.rule(), "plugin-world", "{e}");

    let backup_only = load(&rt, artifacts::POD_VOLUMES, &[]);
    assert!(backup_only.restore_applies_to().is_none());
    assert!(!backup_only.restore_applies(&cm));
    let e = backup_only
        .instance(std::sync::Arc::new(iar::NoCluster))
        .restore_execute(&cm, &cm, &restore(), &|_| false)
        .unwrap_err();
    assert_eq!(e.violation.rule(), "plugin-world", "{e}");

    let labels = load(&rt, artifacts::LABELS, &[]);
    let secret = item(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "token", "namespace": "shop-copy"}, "data": {}}));
    assert!(
        !labels.restore_applies(&secret),
        "no secrets grant, no Secret"
    );
}
