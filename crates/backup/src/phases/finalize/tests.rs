//! The finalize phase alone: a backup found finalizing, its operations
//! done, its post-operation items read again from a manifest cluster.

use super::super::Step;
use super::super::contents::ContentsSink;
use super::super::errors::{Invalid, PhaseError};
use super::super::test_support::Parts;
use crate::backup::object::{BackupPhase, rfc3339};
use bytes::Bytes;
use iar_core::ManifestCluster;
use iar_core::item::ItemRef;
use iar_core::operations::{Operation, OperationPhase, OperationSpec};
use iar_core::store::{BackupFile, tarball};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

fn snapshot_id(name: &str) -> ItemRef {
    ItemRef::new("", "configmaps", "shop", name)
}

/// A cluster holding the ConfigMap `shop/snap` (what an operation named
/// as its post-operation item), and a finalizing backup whose tarball
/// holds only the format version.
async fn finalizing(items: &std::path::Path, post: ItemRef) -> Parts {
    let snap = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "snap", "namespace": "shop"}, "data": {"ready": "true"}});
    std::fs::write(items.join("snap.json"), snap.to_string()).unwrap();
    let parts = Parts::with(
        Arc::new(ManifestCluster::new(vec![items.to_path_buf()])),
        Vec::new(),
    );
    parts.put_object("b", BackupPhase::Finalizing).await;
    let contents = ContentsSink::new().unwrap().finish(false).unwrap();
    parts
        .store
        .put("b", BackupFile::Contents, Bytes::from(contents))
        .await
        .unwrap();
    let spec = OperationSpec {
        backup_name: "b".into(),
        backup_uid: "uid-1".into(),
        backup_item_action: "p".into(),
        resource_identifier: ItemRef::new("", "persistentvolumeclaims", "shop", "data"),
        operation_id: "op-1".into(),
        post_operation_items: vec![post],
    };
    let mut op = Operation::new(spec, parts.now());
    op.status.phase = OperationPhase::Completed;
    parts.operations.insert_loaded("b", vec![op]).await;
    parts
}

/// The post-operation item read from the cluster is added to the tarball
/// and the resource list, and the backup ends Completed at the clock's
/// time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_operation_items_are_written_and_the_backup_completes() {
    let items = tempfile::tempdir().unwrap();
    let parts = finalizing(items.path(), snapshot_id("snap")).await;
    parts.clock.advance(Duration::from_secs(90));
    let mut run = parts.load("b").await;

    let step = parts.finalize().step(&mut run).await.unwrap();
    let Step::Done(object) = step else {
        panic!("finalize ends the backup: {step:?}")
    };
    assert_eq!(object.status.phase, BackupPhase::Completed);
    assert_eq!(
        object.status.completion_timestamp,
        Some(rfc3339(parts.now()))
    );
    assert_eq!(parts.stored("b").await.status.phase, BackupPhase::Completed);
    let contents = parts
        .store
        .get("b", BackupFile::Contents)
        .await
        .unwrap()
        .unwrap();
    let entries = tarball::read(&contents).unwrap();
    let path = tarball::item_path(&snapshot_id("snap")).unwrap();
    let (_, body) = entries
        .iter()
        .find(|(p, _)| *p == path)
        .expect("the post-operation item is in the tarball");
    let body: serde_json::Value = serde_json::from_slice(body).unwrap();
    assert_eq!(body["data"]["ready"], "true");
    let listed: BTreeMap<String, Vec<String>> = parts
        .store
        .get_json("b", BackupFile::ResourceList)
        .await
        .unwrap()
        .unwrap_or_default();
    assert_eq!(listed["v1/ConfigMap"], ["shop/snap"]);
}

/// A post-operation item gone from the cluster is a warning: the backup
/// still completes, its tarball as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_operation_item_gone_is_a_warning() {
    let items = tempfile::tempdir().unwrap();
    let parts = finalizing(items.path(), snapshot_id("gone")).await;
    let before = parts.store.get("b", BackupFile::Contents).await.unwrap();
    let mut run = parts.load("b").await;
    parts.finalize().step(&mut run).await.unwrap();
    assert_eq!(parts.stored("b").await.status.phase, BackupPhase::Completed);
    let results = parts.results("b").await;
    let warnings: Vec<&String> = results.warnings.all().collect();
    assert_eq!(
        warnings,
        ["post-operation item configmaps shop/gone was not found when finalizing"]
    );
    assert_eq!(
        parts.store.get("b", BackupFile::Contents).await.unwrap(),
        before
    );
}

/// A backup whose tarball is missing cannot be finalized: a typed error
/// (the dispatcher then fails the backup with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_tarball_is_an_error() {
    let items = tempfile::tempdir().unwrap();
    let parts = finalizing(items.path(), snapshot_id("snap")).await;
    parts
        .store
        .delete_key(&BackupFile::Contents.key("b"))
        .await
        .unwrap();
    let mut run = parts.load("b").await;
    let err = parts.finalize().step(&mut run).await.unwrap_err();
    assert!(
        matches!(
            &err,
            PhaseError::Invalid {
                source: Invalid::ContentsMissing,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "backup \"b\": its contents tarball is missing"
    );
}
