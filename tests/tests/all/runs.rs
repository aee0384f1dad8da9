//! Contract 1.4.0's `runs`: a plugin asks for the whole Backup or Restore
//! its call belongs to. What it gets is what the producer holds (the bytes
//! Velero's server sent, iar's Backup resource), or, without one, the
//! least Velero's type needs from the call's own fields; a restore's call
//! gets no Backup and a backup's call no Restore; each ask is a host call,
//! counted against the limit.

use crate::support::{artifacts, backup, item, load, load_with, never_seen, pod, runtime};
use iar::plugin::{RestoreRef, Violation};
use iar::{Limits, NoCluster, Phase};
use serde_json::{Value, json};
use std::sync::Arc;

fn annotation(item: &iar::Item, key: &str) -> String {
    item.value()["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("no annotation {key} on {}", item.value()))
        .to_string()
}

#[test]
fn a_backup_call_reads_the_whole_backup_its_producer_gave() {
    let rt = runtime();
    let plugin = load(&rt, artifacts::HOSTILE, &[("behavior", "run-object")]);
    let mut instance = plugin.instance(Arc::new(NoCluster));
    // As Velero's server sends it: labels, annotations, status.
    let whole = r#"{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"nightly","namespace":"velero","uid":"u-1","labels":{"velero.io/schedule-name":"daily"},"annotations":{"team":"payments"}},"spec":{"ttl":"720h0m0s"},"status":{"phase":"InProgress","startTimestamp":"2026-12-07T10:00:00Z"}}"#;
    let mut given = backup(Phase::Backup);
    given.object = Some(Arc::from(whole));
    let out = instance
        .execute(&pod("web-0"), &given, &never_seen)
        .expect("runs.backup is answered");
    let item = out.item.expect("annotated");
    // Byte for byte: the host passes the producer's text, never re-encodes it.
    assert_eq!(annotation(&item, "hostile.iar.test/run"), whole);
    assert_eq!(annotation(&item, "hostile.iar.test/run-restore"), "none");
}

#[test]
fn without_a_whole_backup_the_host_builds_one_from_the_call() {
    let rt = runtime();
    let plugin = load(&rt, artifacts::HOSTILE, &[("behavior", "run-object")]);
    let mut instance = plugin.instance(Arc::new(NoCluster));
    for (phase, velero_phase) in [
        (Phase::Backup, "InProgress"),
        (Phase::Finalize, "Finalizing"),
    ] {
        let b = backup(phase);
        let out = instance.execute(&pod("web-0"), &b, &never_seen).unwrap();
        let seen: Value =
            serde_json::from_str(&annotation(&out.item.unwrap(), "hostile.iar.test/run")).unwrap();
        assert_eq!(
            seen,
            json!({"apiVersion": "velero.io/v1", "kind": "Backup",
                "metadata": {"name": b.name, "namespace": b.namespace, "uid": b.uid},
                "spec": b.spec, "status": {"phase": velero_phase}})
        );
    }
}

#[test]
fn asking_for_the_backup_is_a_host_call_within_the_limit() {
    let rt = runtime();
    let limits = Limits {
        max_host_calls: 20,
        ..Limits::default()
    };
    // 20 asks for the backup and the one for the restore: 21.
    let plugin = load_with(
        &rt,
        artifacts::HOSTILE,
        &[("behavior", "run-object"), ("run-gets", "20")],
        limits,
    );
    let err = plugin
        .instance(Arc::new(NoCluster))
        .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
        .unwrap_err();
    assert_eq!(err.violation, Violation::HostCalls { limit: 20 });
    assert!(err.to_string().contains("(rule: host-call-limit)"), "{err}");
}

#[test]
fn a_restore_call_reads_the_whole_restore_and_no_backup() {
    let rt = runtime();
    let plugin = load(&rt, artifacts::RESTORE_HOSTILE, &[("mode", "run-object")]);
    let cm = item(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "shop"}, "data": {"k": "v"}}));
    let whole = r#"{"apiVersion":"velero.io/v1","kind":"Restore","metadata":{"name":"from-nightly","namespace":"velero","uid":"r-1","labels":{"team":"payments"}},"spec":{"backupName":"nightly"},"status":{"phase":"InProgress","startTimestamp":"2026-12-07T11:00:00Z"}}"#;
    let mut restore = RestoreRef {
        object: Some(Arc::from(whole)),
        name: "from-nightly".into(),
        namespace: "velero".into(),
        uid: "r-1".into(),
        spec: json!({"backupName": "nightly"}),
    };
    let mut instance = plugin.instance(Arc::new(NoCluster));
    let out = instance
        .restore_execute(&cm, &cm, &restore, &|_| false)
        .unwrap();
    let restored = out.item.expect("annotated");
    let seen: Value = serde_json::from_str(&annotation(&restored, "run/restore")).unwrap();
    assert_eq!(seen, serde_json::from_str::<Value>(whole).unwrap());
    assert_eq!(annotation(&restored, "run/backup"), "none");
    // Without one: built from the call, InProgress.
    restore.object = None;
    let out = instance
        .restore_execute(&cm, &cm, &restore, &|_| false)
        .unwrap();
    let seen: Value = serde_json::from_str(&annotation(&out.item.unwrap(), "run/restore")).unwrap();
    assert_eq!(seen["metadata"]["uid"], "r-1");
    assert_eq!(seen["spec"], json!({"backupName": "nightly"}));
    assert_eq!(seen["status"]["phase"], "InProgress");
}

/// A plugin that never asks imports nothing of 1.4.0 (the SDK's bindings
/// are linked only where called): it loads on a host without `runs`.
#[test]
fn a_plugin_that_never_asks_imports_no_runs() {
    let rt = runtime();
    let labels = load(&rt, artifacts::LABELS, &[]);
    assert!(
        !labels.shape().imports.iter().any(|i| i.contains("/runs@")),
        "{:?}",
        labels.shape().imports
    );
    let hostile = load(&rt, artifacts::HOSTILE, &[]);
    assert!(
        hostile
            .shape()
            .imports
            .iter()
            .any(|i| i == "iar:plugin/runs@1.4.0"),
        "{:?}",
        hostile.shape().imports
    );
}
