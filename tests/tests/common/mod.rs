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

/// A Pod of about 2.5 KB, shaped like what a Deployment leaves in a cluster.
pub fn pod(name: &str) -> Item {
    let value = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "uid": "6f1c7a9e-5b43-4f0e-9d59-1a2b3c4d5e6f",
            "resourceVersion": "184467",
            "creationTimestamp": "2026-11-01T10:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d9f8c6b5", "tier": "frontend"},
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": "2026-11-01T09:59:00Z",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9102"
            },
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f8c6b5",
                "uid": "0b1e2d3c-4f5a-6b7c-8d9e-0f1a2b3c4d5e", "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "serviceAccountName": "web",
            "nodeName": "worker-2",
            "containers": [{
                "name": "web",
                "image": "registry.example.com/shop/web:1.42.0",
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                "env": [
                    {"name": "DATABASE_HOST", "value": "db.shop.svc.cluster.local"},
                    {"name": "CACHE_TTL", "value": "300"},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                ],
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
                "volumeMounts": [
                    {"name": "data", "mountPath": "/var/lib/web"},
                    {"name": "config", "mountPath": "/etc/web", "readOnly": true}
                ]
            }],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": format!("data-{name}")}},
                {"name": "config", "configMap": {"name": "web-config"}}
            ],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running",
            "podIP": "10.244.2.17",
            "hostIP": "192.168.1.12",
            "startTime": "2026-11-01T10:00:02Z",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T10:00:09Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-11-01T10:00:09Z"}
            ],
            "containerStatuses": [{
                "name": "web", "ready": true, "restartCount": 0,
                "image": "registry.example.com/shop/web:1.42.0",
                "imageID": "registry.example.com/shop/web@sha256:3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a3f4e",
                "state": {"running": {"startedAt": "2026-11-01T10:00:05Z"}}
            }]
        }
    });
    Item::from_value(value, Catalog::builtin()).expect("a valid pod")
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
    let item = out.item.expect("labels changes the item");
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
