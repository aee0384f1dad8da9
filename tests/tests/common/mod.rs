//! Helpers shared by the integration tests: a runtime whose compiled-component
//! cache is shared by every test (each guest is compiled once per machine, not
//! once per test), plugin loading with config, and a realistic item.

#![allow(dead_code)]

use iar::resources::Catalog;
use iar::{BackupRef, Item, Limits, Phase, Plugin, PluginSettings, Runtime, RuntimeConfig};
use serde_json::json;
use std::path::PathBuf;

pub use iar_tests::artifacts;

/// A runtime with the cache shared across tests in `target/tmp`.
pub fn runtime() -> Runtime {
    let cache_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("iar-component-cache");
    Runtime::new(RuntimeConfig {
        cache_dir: Some(cache_dir),
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

/// A Pod of about 2.5 KB in namespace `shop`, mounting PVC `data-<name>`.
pub fn pod(name: &str) -> Item {
    Item::from_value(iar_tests::fixtures::pod("shop", name), Catalog::builtin())
        .expect("a valid pod")
}

pub fn pvc(name: &str, bound: bool) -> Item {
    let value = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"volumeName": if bound { format!("pv-{name}") } else { String::new() }, "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": if bound { "Bound" } else { "Pending" }}
    });
    Item::from_value(value, Catalog::builtin()).expect("a valid pvc")
}

pub fn backup(phase: Phase) -> BackupRef {
    BackupRef {
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
        load(&runtime, artifacts::PVC_SNAPSHOT, &[]),
    ]
}
