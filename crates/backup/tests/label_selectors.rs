//! A Backup's structured `labelSelector`, end to end through the phase
//! machine: hostile selectors are refused before anything is written, each
//! naming the field and the rule it breaks, and the same machine goes on
//! to run a well-formed backup that takes exactly what its selector
//! selects.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use iar_backup::backup::object::BackupPhase;
use iar_backup::phases::{BackupRequest, PhaseError, PhaseMachine, Settings};
use iar_core::ManifestCluster;
use iar_core::store::{BackupFile, BackupStore, tarball};
use serde_json::{Value, json};

fn write_config_maps(dir: &Path) {
    let cm = |name: &str, labels: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "shop", "labels": labels}})
    };
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        cm("web-prod", json!({"app": "web", "env": "prod"})),
        cm("web-dev", json!({"app": "web", "env": "dev"})),
        cm("web-frozen", json!({"app": "web", "env": "prod", "frozen": ""})),
        cm("api-prod", json!({"app": "api", "env": "prod"})),
        cm("unlabelled", json!({})),
    ]});
    std::fs::write(dir.join("items.json"), list.to_string()).unwrap();
}

fn request(name: &str, items: &Path, label_selector: Value) -> BackupRequest {
    BackupRequest {
        labels: Default::default(),
        name: name.into(),
        namespace: "velero".into(),
        spec: json!({"includedNamespaces": ["shop"], "includedResources": ["configmaps"],
            "labelSelector": label_selector}),
        sources: vec![items.to_path_buf()],
        annotations: Default::default(),
    }
}

/// The ConfigMaps a stored backup holds, by name.
async fn config_maps(store: &BackupStore, name: &str) -> BTreeSet<String> {
    let tar_gz = store
        .get(name, BackupFile::Contents)
        .await
        .unwrap()
        .expect("the backup's contents");
    tarball::read(&tar_gz)
        .unwrap()
        .into_iter()
        .filter_map(|(path, _)| {
            let file = path
                .strip_prefix("resources/configmaps/")?
                .rsplit('/')
                .next()?;
            file.strip_suffix(".json").map(String::from)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_label_selectors_are_refused_and_the_machine_goes_on() {
    let items = tempfile::tempdir().unwrap();
    write_config_maps(items.path());
    let store_dir = tempfile::tempdir().unwrap();
    let store = BackupStore::open(store_dir.path().to_str().unwrap()).unwrap();
    let machine = PhaseMachine::new(
        Vec::new(),
        store.clone(),
        Arc::new(ManifestCluster::new(vec![items.path().to_path_buf()])),
        Settings {
            sync_period: Duration::from_millis(50),
            ..Settings::default()
        },
    );

    let hostile = [
        (
            json!({"matchExpressions": [{"key": "app", "operator": "Like", "values": ["web"]}]}),
            "labelSelector.matchExpressions[0].operator: \"Like\" is not a label selector operator (In, NotIn, Exists, DoesNotExist)",
        ),
        (
            json!({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["web"]}]}),
            "labelSelector.matchExpressions[0].values: must be empty when the operator is Exists",
        ),
        (
            json!({"matchExpressions": [{"key": "", "operator": "Exists"}]}),
            "labelSelector.matchExpressions[0].key: label key \"\" is not valid: name part must be non-empty",
        ),
        (
            json!({"matchLabels": {"app": "w".repeat(64)}}),
            "labelSelector.matchLabels.app: label value \"www",
        ),
        (
            json!({"matchLabels": {"app": "web,env!=prod"}}),
            "labelSelector.matchLabels.app: label value \"web,env!=prod\" is not valid",
        ),
        (json!("app=web"), "labelSelector is a string, not an object"),
    ];
    for (i, (selector, want)) in hostile.into_iter().enumerate() {
        let name = format!("hostile-{i}");
        let err = machine
            .run_backup(request(&name, items.path(), selector.clone()))
            .await
            .expect_err("a hostile selector is refused");
        assert!(
            matches!(err, PhaseError::Invalid { .. }),
            "{selector}: {err:?}"
        );
        let err = err.to_string();
        assert!(err.contains(want), "{selector}: {err}");
        if want.starts_with("labelSelector.matchLabels.app: label value \"www") {
            assert!(err.ends_with("must be no more than 63 characters"), "{err}");
        }
        let stored: Option<Value> = store.get_json(&name, BackupFile::Metadata).await.unwrap();
        assert!(
            stored.is_none(),
            "{name}: nothing is written for a refused backup"
        );
    }

    // The same machine still serves: a well-formed selector takes exactly
    // its items, NotIn and DoesNotExist included.
    let selector = json!({
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "env", "operator": "NotIn", "values": ["dev"]},
            {"key": "frozen", "operator": "DoesNotExist"}
        ]
    });
    let object = machine
        .run_backup(request("selected", items.path(), selector))
        .await
        .expect("a well-formed selector runs");
    assert_eq!(object.status.phase, BackupPhase::Completed);
    assert_eq!(
        config_maps(&store, "selected").await,
        BTreeSet::from(["web-prod".to_string()])
    );

    // And In over several values.
    let selector = json!({"matchExpressions": [
        {"key": "app", "operator": "In", "values": ["web", "api"]},
        {"key": "env", "operator": "In", "values": ["prod"]}
    ]});
    let object = machine
        .run_backup(request("several", items.path(), selector))
        .await
        .expect("a well-formed selector runs");
    assert_eq!(object.status.phase, BackupPhase::Completed);
    assert_eq!(
        config_maps(&store, "several").await,
        ["api-prod", "web-frozen", "web-prod"]
            .map(String::from)
            .into_iter()
            .collect::<BTreeSet<_>>()
    );
}
