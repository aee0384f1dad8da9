//! The first pass alone: a request over a directory of manifests, no
//! plugins, a local store and a stopped clock.

use super::super::errors::{ExpiryError, Invalid, PhaseError};
use super::super::test_support::{Parts, request};
use super::{new_uid, validate};
use crate::backup::expiry::DEFAULT_TTL;
use crate::backup::object::{BackupPhase, rfc3339};
use iar_core::ManifestCluster;
use iar_core::item::ItemRef;
use iar_core::operations::OperationsMap;
use iar_core::store::{BackupFile, tarball};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Two ConfigMaps in namespace `shop`.
fn write_items(dir: &Path) {
    let cm = |name: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "shop"}, "data": {"k": name}})
    };
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List",
        "items": [cm("a"), cm("b")]});
    std::fs::write(dir.join("items.json"), list.to_string()).unwrap();
}

fn parts_over(dir: &Path) -> Parts {
    Parts::with(
        Arc::new(ManifestCluster::new(vec![dir.to_path_buf()])),
        Vec::new(),
    )
}

/// A new backup is created with the clock's time on it (created, started,
/// expiring after the default ttl), its items go into the tarball and the
/// resource list, its (empty) operations are stored, and with no
/// operation started it ends the pass finalizing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_backup_is_stamped_by_the_clock_and_its_items_written() {
    let items = tempfile::tempdir().unwrap();
    write_items(items.path());
    let parts = parts_over(items.path());
    let req = request("b", vec![items.path().to_path_buf()]);
    let filter = validate(&parts.store, &req, parts.settings.default_backup_ttl).unwrap();

    let object = parts
        .first_pass()
        .create_and_run(req, filter)
        .await
        .unwrap();
    assert_eq!(object.status.phase, BackupPhase::Finalizing);
    let now = rfc3339(parts.now());
    assert_eq!(object.metadata.creation_timestamp.as_ref(), Some(&now));
    assert_eq!(object.status.start_timestamp.as_ref(), Some(&now));
    assert_eq!(
        object.status.expiration,
        Some(rfc3339(parts.now() + DEFAULT_TTL))
    );
    assert_eq!(object.metadata.uid, new_uid("b", parts.now()));
    assert_eq!(object.spec["itemOperationTimeout"], "4h0m0s");
    assert_eq!(
        (
            object.status.progress.items_backed_up,
            object.status.progress.total_items
        ),
        (2, 2)
    );
    let stored = parts.stored("b").await;
    assert_eq!(stored.status.phase, BackupPhase::Finalizing);

    let contents = parts
        .store
        .get("b", BackupFile::Contents)
        .await
        .unwrap()
        .unwrap();
    let paths: Vec<String> = tarball::read(&contents)
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    for name in ["a", "b"] {
        let id = ItemRef::new("", "configmaps", "shop", name);
        assert!(
            paths.contains(&tarball::item_path(&id).unwrap()),
            "{name}: {paths:?}"
        );
    }
    let listed: BTreeMap<String, Vec<String>> = parts
        .store
        .get_json("b", BackupFile::ResourceList)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        listed,
        BTreeMap::from([(
            "v1/ConfigMap".to_string(),
            vec!["shop/a".into(), "shop/b".into()]
        )])
    );
    let operations = OperationsMap::new();
    assert_eq!(operations.load("b", &parts.store).await.unwrap(), 0);
    let log = parts.journal.lines("b");
    assert!(
        log.iter()
            .any(|l| l.ends_with("2 items selected by the spec")),
        "{log:#?}"
    );
    assert!(
        log.iter().all(|l| l.starts_with(&now)),
        "every line stamped by the clock: {log:#?}"
    );
}

/// A second backup of a name already in the store is refused, and the
/// first is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_already_taken_is_refused() {
    let items = tempfile::tempdir().unwrap();
    write_items(items.path());
    let parts = parts_over(items.path());
    let req = request("b", vec![items.path().to_path_buf()]);
    let ttl = parts.settings.default_backup_ttl;
    let first = parts
        .first_pass()
        .create_and_run(req.clone(), validate(&parts.store, &req, ttl).unwrap())
        .await
        .unwrap();
    parts.clock.advance(Duration::from_secs(60));
    let err = parts
        .first_pass()
        .create_and_run(req.clone(), validate(&parts.store, &req, ttl).unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, PhaseError::Exists { name, .. } if name == "b"),
        "{err:?}"
    );
    let stored = parts.stored("b").await;
    assert_eq!(stored.metadata.uid, first.metadata.uid);
    assert_eq!(stored.status.phase, BackupPhase::Finalizing);
}

/// A spec whose ttl or filters do not parse is refused before anything
/// is written, with the cause kept as the error's source.
#[tokio::test]
async fn a_spec_that_does_not_parse_is_refused_with_its_cause() {
    let parts = Parts::new();
    let mut req = request("b", Vec::new());
    req.spec = serde_json::json!({"ttl": "forever"});
    let err = validate(&parts.store, &req, DEFAULT_TTL).unwrap_err();
    assert!(
        matches!(
            &err,
            PhaseError::Invalid {
                source: Invalid::Expiry(ExpiryError::Ttl(_)),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(std::error::Error::source(&err).is_some());
    assert!(err.to_string().starts_with("backup \"b\": "), "{err}");

    req.spec = serde_json::json!({"orLabelSelectors": [{"matchLabels": {"a": "b"}}]});
    let err = validate(&parts.store, &req, DEFAULT_TTL).unwrap_err();
    assert!(
        matches!(
            &err,
            PhaseError::Invalid {
                source: Invalid::Spec(_),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(parts.store.list_backups().await.unwrap().is_empty());
}

/// A uid is fixed by the name and the time: the same inputs give the same
/// uid, a nanosecond later another.
#[test]
fn a_uid_is_made_from_the_name_and_the_time() {
    let t = super::super::test_support::t0();
    let uid = new_uid("b", t);
    assert_eq!(uid, new_uid("b", t));
    assert_ne!(uid, new_uid("b", t + Duration::from_nanos(1)));
    assert_ne!(uid, new_uid("c", t));
    let parts: Vec<usize> = uid.split('-').map(str::len).collect();
    assert_eq!(parts, [8, 4, 4, 4, 12]);
}
