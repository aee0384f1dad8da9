//! Velero's plugin framework over iar (`go-sdk/velero/framework`): a
//! plugin written against Velero's own interfaces and types reads the
//! whole Backup or Restore it is called with (contract 1.4.0's `runs`) as
//! Velero's typed fields: labels, annotations, `status.phase`,
//! `status.startTimestamp`, the spec. The guest
//! (`internal/testguests/whole-objects`) annotates each item with what it
//! read; `iar run` hands it the object file as the producer's object.
//!
//! `go-sdk/velero/framework/build-testguests.sh` builds it (Go >= 1.26;
//! Velero v1.18.3 and apimachinery through the Go module proxy; a minute
//! or two the first time, then cached).

use crate::support::iar;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn whole_objects() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .expect("CARGO_TARGET_TMPDIR is target/tmp")
            .join("go-sdk-framework");
        crate::support::run_build_script(
            "go-sdk/velero/framework/build-testguests.sh",
            &out,
            "Go >= 1.26 on PATH and the Go module proxy",
        )
        .into_iter()
        .find(|p| p.ends_with("framework-whole-objects.wasm"))
        .expect("build-testguests.sh built framework-whole-objects.wasm")
    })
}

/// Runs the guest on `item` with `extra` arguments: what it read (the
/// `iar.test/seen` annotation of the item it returned).
fn run(dir: &Path, item: &Value, extra: &[&str]) -> Value {
    let item_file = dir.join("item.json");
    std::fs::write(&item_file, item.to_string()).unwrap();
    let mut args = vec![
        "run",
        "--plugin",
        whole_objects().to_str().unwrap(),
        "--item",
        item_file.to_str().unwrap(),
        "--allow-mutate",
        "*",
    ];
    args.extend(extra);
    let out = iar(&args);
    assert!(
        out.status.success(),
        "iar run {extra:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "iar run printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let item = &printed["finalItem"];
    let seen = item["metadata"]["annotations"]["iar.test/seen"]
        .as_str()
        .unwrap_or_else(|| panic!("the guest did not annotate: {item}"));
    serde_json::from_str(seen).unwrap()
}

#[test]
fn a_velero_backup_action_reads_the_whole_backup() {
    let dir = tempfile::tempdir().unwrap();
    let backup = dir.path().join("backup.yaml");
    std::fs::write(
        &backup,
        "apiVersion: velero.io/v1\nkind: Backup\nmetadata:\n  name: nightly\n  namespace: velero\n  uid: 7e57b4c3-0000-4000-8000-000000000001\n  labels: {velero.io/schedule-name: daily, team: payments}\n  annotations: {velero.io/source-cluster-k8s-gitversion: v1.36.3}\nspec:\n  ttl: 720h0m0s\n  includedNamespaces: [shop]\nstatus:\n  phase: InProgress\n  startTimestamp: \"2026-12-07T10:00:00Z\"\n",
    )
    .unwrap();
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "shop"},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}});
    let seen = run(dir.path(), &pod, &["--backup", backup.to_str().unwrap()]);
    assert_eq!(
        seen,
        json!({"name": "nightly", "uid": "7e57b4c3-0000-4000-8000-000000000001",
            "labels": {"velero.io/schedule-name": "daily", "team": "payments"},
            "annotations": {"velero.io/source-cluster-k8s-gitversion": "v1.36.3"},
            "phase": "InProgress", "startTimestamp": "2026-12-07T10:00:00Z",
            "spec": {"ttl": "720h0m0s", "includedNamespaces": ["shop"]}})
    );
    // Without a file, what the host builds from the call: the phase of the
    // pass, no labels, no start time.
    let seen = run(dir.path(), &pod, &["--phase", "finalize"]);
    assert_eq!(seen["phase"], "Finalizing");
    assert_eq!(seen["labels"], Value::Null);
    assert_eq!(seen["startTimestamp"], "");
}

#[test]
fn a_velero_restore_action_reads_the_whole_restore() {
    let dir = tempfile::tempdir().unwrap();
    let restore = dir.path().join("restore.yaml");
    std::fs::write(
        &restore,
        "apiVersion: velero.io/v1\nkind: Restore\nmetadata:\n  name: again\n  namespace: velero\n  uid: 7e57b4c3-0000-4000-8000-000000000002\n  labels: {team: payments}\nspec:\n  backupName: nightly\n  namespaceMapping: {shop: shop-copy}\nstatus:\n  phase: InProgress\n  startTimestamp: \"2026-12-07T11:00:00Z\"\n",
    )
    .unwrap();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "shop"}, "data": {"k": "v"}});
    let seen = run(
        dir.path(),
        &cm,
        &["--restore", "--restore-object", restore.to_str().unwrap()],
    );
    assert_eq!(
        seen,
        json!({"name": "again", "uid": "7e57b4c3-0000-4000-8000-000000000002",
            "labels": {"team": "payments"}, "annotations": null,
            "phase": "InProgress", "startTimestamp": "2026-12-07T11:00:00Z",
            "spec": {"backupName": "nightly", "namespaceMapping": {"shop": "shop-copy"}}})
    );
}
