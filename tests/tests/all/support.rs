//! Helpers shared by this binary's tests: a runtime whose compiled-component
//! cache is shared by every test (each guest is compiled once per machine, not
//! once per test), plugin loading with config, realistic items, local
//! stores, and the shared API server.
//!
//! What the host crate's tests need too, and that needs none of iar's
//! types, is in the `iar-tests` library instead (`iar_tests::fixtures`,
//! `iar_tests::wait_for`, `iar_tests::store_files`).

use iar::catalog::Catalog;
use iar::store::BackupStore;
use iar::{BackupRef, Item, Limits, Phase, Plugin, PluginSettings, Runtime, RuntimeConfig};
use iar_apiserver::{ApiServer, User};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use iar_tests::artifacts;

/// The compile cache every test shares, in `target/tmp`.
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("iar-component-cache")
}

/// A runtime with the cache shared across tests in `target/tmp`.
pub fn runtime() -> Runtime {
    runtime_with_cache(&cache_dir())
}

/// A runtime whose compile cache is `dir`.
pub fn runtime_with_cache(dir: &Path) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.to_path_buf()),
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

pub fn settings(config: &[(&str, &str)], limits: Limits) -> PluginSettings {
    PluginSettings {
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        limits,
        // Tests of other rules change items freely (a labeller labels a
        // namespace's ServiceAccount too); the item-change rules have
        // tests of their own (cli_mutate, iar-core, iar-plugin).
        mutate_grants: every_change(),
        ..PluginSettings::default()
    }
}

pub fn load(runtime: &Runtime, path: &str, config: &[(&str, &str)]) -> Plugin {
    load_with(runtime, path, config, Limits::default())
}

pub fn load_with(runtime: &Runtime, path: &str, config: &[(&str, &str)], limits: Limits) -> Plugin {
    Plugin::from_file(runtime, path.as_ref(), settings(config, limits))
        .unwrap_or_else(|e| panic!("loading {path}: {e}"))
}

/// `value` as an item of the built-in catalog.
pub fn item(value: serde_json::Value) -> Item {
    Item::from_value(value, Catalog::builtin()).expect("a valid item")
}

/// A Pod of about 2.5 KB in namespace `shop`, mounting PVC `data-<name>`.
pub fn pod(name: &str) -> Item {
    item(iar_tests::fixtures::pod("shop", name))
}

pub fn pvc(name: &str, bound: bool) -> Item {
    item(iar_tests::fixtures::pvc("shop", name, bound))
}

pub fn backup(phase: Phase) -> BackupRef {
    BackupRef {
        object: None,
        name: "nightly".into(),
        namespace: "velero".into(),
        uid: "11111111-2222-3333-4444-555555555555".into(),
        spec: json!({"includedNamespaces": ["shop"]}),
        phase,
    }
}

pub fn never_seen(_: &str) -> bool {
    false
}

/// The well-behaved plugin runs on the same runtime after a hostile one:
/// the host is still fine.
pub fn host_still_works(runtime: &Runtime) {
    let labels = load(runtime, artifacts::LABELS, &[("labels", "checked=yes")]);
    let mut instance = labels.instance(std::sync::Arc::new(iar::NoCluster));
    let out = instance
        .execute(&pod("web-next"), &backup(Phase::Backup), &never_seen)
        .expect("the well-behaved plugin still runs");
    let item = out.item.expect("labels changes the item").into_value();
    assert_eq!(item["metadata"]["labels"]["checked"], "yes");
    assert_eq!(item["metadata"]["name"], "web-next");
}

/// The three example plugins, labels configured with `backed-up-by=iar`.
pub fn example_plugins() -> Vec<Plugin> {
    let runtime = runtime();
    vec![
        load(
            &runtime,
            artifacts::LABELS,
            &[("labels", "backed-up-by=iar")],
        ),
        load(&runtime, artifacts::POD_VOLUMES, &[]),
        pvc_snapshot(&runtime),
    ]
}

/// The write grant `pvc-snapshot` needs to create its VolumeSnapshots.
pub const SNAPSHOT_GRANT: &str = "volumesnapshots.snapshot.storage.k8s.io";

/// `pvc-snapshot` with its write grant.
pub fn pvc_snapshot(runtime: &Runtime) -> Plugin {
    let settings = PluginSettings {
        write_grants: iar::cluster::writes::WriteGrants::only(&[SNAPSHOT_GRANT]).unwrap(),
        mutate_grants: iar::cluster::mutate::MutateGrants::only(&["persistentvolumeclaims"])
            .unwrap(),
        ..PluginSettings::default()
    };
    Plugin::from_file(runtime, artifacts::PVC_SNAPSHOT.as_ref(), settings)
        .unwrap_or_else(|e| panic!("loading pvc-snapshot: {e}"))
}

/// A store on a fresh local directory (kept alive by the returned guard).
pub fn store() -> (tempfile::TempDir, BackupStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    (dir, store)
}

/// The local store in `dir` (another handle on one a test already has).
pub fn open_store(dir: &Path) -> BackupStore {
    BackupStore::open(dir.to_str().unwrap()).unwrap()
}

/// Waits (polling, no fixed sleep) until the backup's lease is free:
/// released, expired or never taken.
pub async fn wait_for_lease_expiry(store: &BackupStore, name: &str) {
    iar_tests::wait_for(
        &format!("the lease of {name} to expire"),
        Duration::from_secs(30),
        || async {
            let lease = store.current_lease(name).await.unwrap();
            let free = lease.as_ref().is_none_or(|l| {
                l.released
                    || humantime::parse_rfc3339(&l.expires).unwrap() <= std::time::SystemTime::now()
            });
            if free {
                Ok(())
            } else {
                Err(format!("{lease:?}"))
            }
        },
    )
    .await
}

/// The shared API server (one per test binary), or `None` (the harness
/// has said loudly why) to skip.
pub async fn server() -> Option<&'static ApiServer> {
    iar_apiserver::shared().await
}

pub async fn client(server: &ApiServer, user: User) -> kube::Client {
    server
        .client(user)
        .await
        .unwrap_or_else(|e| panic!("client for {user:?}: {e}"))
}

/// Every item change granted, what decides rights included (but a pod's
/// security fields, which no example plugin changes).
pub fn every_change() -> iar::cluster::mutate::MutateGrants {
    let mut all = vec!["*"];
    all.extend(iar::cluster::mutate::RIGHTS_RESOURCES);
    iar::cluster::mutate::MutateGrants::only(&all).unwrap()
}
