//! The 10,000-item cluster of the backup benchmarks (`benches/backup.rs`)
//! and of `examples/backup_ratio.rs`, which includes this file by `#[path]`
//! so that both back up the same items with the same plugins.

#![allow(dead_code)] // each includer uses its part

use iar::phases::{BackupRequest, PhaseMachine, Settings};
use iar::store::BackupStore;
use iar::{BackupRef, ManifestCluster, Phase, Plugin, PluginSettings, Runtime, RuntimeConfig};
use iar_tests::snapshots::SnapshotController;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub const BACKUP: &str = "bench";
/// The backup the backup benchmarks run: pvc-snapshot names its snapshots
/// `<claim>-<backup>`, and those of `BACKUP` are already in the cluster
/// (for the polling benchmarks), where a create would be refused.
pub const RUN: &str = "bench-run";
/// The write grant pvc-snapshot needs to create its VolumeSnapshots.
pub const SNAPSHOT_GRANT: &str = "volumesnapshots.snapshot.storage.k8s.io";
pub const NAMESPACES: usize = 10;
/// Pods, PVCs, PVs and ConfigMaps each.
pub const PER_KIND: usize = 2_500;
pub const ITEMS: usize = 4 * PER_KIND;
pub const OPERATIONS: usize = 10_000;
pub const SNAPSHOT_GROUP: &str = "snapshot.storage.k8s.io";

pub fn namespace(i: usize, per_kind: usize) -> String {
    format!("team-{:02}", i * NAMESPACES / per_kind)
}

/// The shared Pod fixture, as web-<i> mounting PVC data-web-<i>.
pub fn pod(ns: &str, i: usize) -> Value {
    iar_tests::fixtures::pod(ns, &format!("web-{i}"))
}

pub fn pv_name(ns: &str, i: usize) -> String {
    format!("pvc-{ns}-data-web-{i}")
}

pub fn pvc(ns: &str, i: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": format!("data-web-{i}"),
            "namespace": ns,
            "uid": format!("7a2b3c4d-5e6f-4a7b-8c9d-{i:012}"),
            "labels": {"app": "web"},
            "annotations": {
                "pv.kubernetes.io/bind-completed": "yes",
                "volume.kubernetes.io/storage-provisioner": "ebs.csi.aws.com"
            },
            "finalizers": ["kubernetes.io/pvc-protection"]
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "10Gi"}},
            "storageClassName": "gp3",
            "volumeMode": "Filesystem",
            "volumeName": pv_name(ns, i)
        },
        "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "10Gi"}}
    })
}

pub fn pv(ns: &str, i: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": pv_name(ns, i),
            "annotations": {"pv.kubernetes.io/provisioned-by": "ebs.csi.aws.com"},
            "finalizers": ["kubernetes.io/pv-protection"]
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": "10Gi"},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": format!("data-web-{i}"), "namespace": ns},
            "csi": {"driver": "ebs.csi.aws.com", "fsType": "ext4", "volumeHandle": format!("vol-{i:017x}")},
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": "gp3",
            "volumeMode": "Filesystem"
        },
        "status": {"phase": "Bound"}
    })
}

pub fn configmap(ns: &str, i: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": format!("web-config-{i}"), "namespace": ns, "labels": {"app": "web"}},
        "data": {
            "web.conf": format!("listen 8080\nworkers 4\ndatabase db.{ns}.svc.cluster.local:5432\ncache-ttl 300\n"),
            "LOG_LEVEL": "info",
            "FEATURE_FLAGS": "checkout-v2,async-receipts"
        }
    })
}

/// The ready VolumeSnapshot the pvc-snapshot plugin waits for: the snapshot
/// of PVC `ns/pvc` for backup `BACKUP`.
pub fn snapshot(ns: &str, pvc: &str) -> Value {
    json!({
        "apiVersion": format!("{SNAPSHOT_GROUP}/v1"),
        "kind": "VolumeSnapshot",
        "metadata": {"name": format!("{pvc}-{BACKUP}"), "namespace": ns, "creationTimestamp": "2026-11-30T01:00:00Z"},
        "spec": {"source": {"persistentVolumeClaimName": pvc}, "volumeSnapshotClassName": "csi-snapclass"},
        "status": {"creationTime": "2026-11-30T01:00:04Z", "readyToUse": true, "restoreSize": "10Gi"}
    })
}

/// Writes `docs` as JSON `List`s, one file per namespace (`<dir>/<ns>/<file>`,
/// or `<dir>/<file>` for cluster-scoped objects).
pub fn write_lists(dir: &Path, file: &str, docs: Vec<(String, Value)>) {
    let mut by_ns: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
    for (ns, doc) in docs {
        by_ns.entry(ns).or_default().push(doc);
    }
    for (ns, items) in by_ns {
        let sub = if ns.is_empty() {
            dir.to_path_buf()
        } else {
            dir.join(&ns)
        };
        std::fs::create_dir_all(&sub).unwrap();
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        std::fs::write(sub.join(file), serde_json::to_vec(&list).unwrap()).unwrap();
    }
}

/// The 10,000 items and their ready VolumeSnapshots.
pub fn write_cluster(dir: &Path) {
    let each = |f: &dyn Fn(&str, usize) -> Value, scoped: bool| -> Vec<(String, Value)> {
        (0..PER_KIND)
            .map(|i| {
                let ns = namespace(i, PER_KIND);
                let doc = f(&ns, i);
                (if scoped { ns } else { String::new() }, doc)
            })
            .collect()
    };
    write_lists(dir, "pods.json", each(&pod, true));
    write_lists(dir, "persistentvolumeclaims.json", each(&pvc, true));
    write_lists(dir, "persistentvolumes.json", each(&pv, false));
    write_lists(dir, "configmaps.json", each(&configmap, true));
    let snapshots = |ns: &str, i: usize| snapshot(ns, &format!("data-web-{i}"));
    write_lists(dir, "volumesnapshots.json", each(&snapshots, true));
    // The class pvc-snapshot creates its snapshots in (it checks that it
    // exists); left out of the backups, as the snapshots are.
    let class = json!({
        "apiVersion": format!("{SNAPSHOT_GROUP}/v1"),
        "kind": "VolumeSnapshotClass",
        "metadata": {"name": "csi-snapclass", "labels": {"velero.io/csi-volumesnapshot-class": "true"}},
        "driver": "ebs.csi.aws.com",
        "deletionPolicy": "Retain"
    });
    write_lists(
        dir,
        "volumesnapshotclasses.json",
        vec![(String::new(), class)],
    );
}

pub fn load(runtime: &Runtime, path: &str, config: &[(&str, &str)]) -> Plugin {
    let settings = PluginSettings {
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        // The benched plugins label what they handle: an item change.
        mutate_grants: iar::cluster::mutate::MutateGrants::only(&["*"]).unwrap(),
        ..PluginSettings::default()
    };
    Plugin::from_file(runtime, path.as_ref(), settings)
        .unwrap_or_else(|e| panic!("loading {path}: {e}"))
}

pub fn wasm_runtime() -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

pub fn backup_ref() -> BackupRef {
    BackupRef {
        object: None,
        name: BACKUP.into(),
        namespace: "velero".into(),
        uid: "11111111-2222-3333-4444-555555555555".into(),
        spec: json!({}),
        phase: Phase::Backup,
    }
}

/// A fresh store, and the snapshot controller played for it while it lives.
pub struct FreshStore {
    dir: tempfile::TempDir,
    _snapshots: SnapshotController,
}

impl FreshStore {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A fresh controller (fresh operations map and manifest cache) on a fresh
/// store; the store's directory goes when the returned guard is dropped.
/// Objects plugins create go to the store's `cluster-overlay/`, as with
/// `iar backup`, where a thread plays the CSI snapshot controller
/// (`iar_tests::snapshots`).
pub fn fresh_controller(
    plugins: &[Plugin],
    cluster: &Path,
    workers: usize,
    volume_data: Option<&Path>,
) -> (FreshStore, PhaseMachine) {
    let dir = tempfile::tempdir().unwrap();
    let store = BackupStore::open(dir.path().to_str().unwrap()).unwrap();
    let settings = Settings {
        sync_period: Duration::from_millis(10),
        workers,
        volume_data: volume_data.map(Path::to_path_buf),
        ..Settings::default()
    };
    let overlay = dir.path().join("cluster-overlay");
    // Every snapshot pvc-snapshot creates for `RUN` is made ready.
    let snapshots = SnapshotController::start(&overlay);
    for i in 0..PER_KIND {
        snapshots.set(
            &format!("data-web-{i}-{RUN}"),
            json!({"creationTime": "2026-11-30T01:00:04Z", "readyToUse": true, "restoreSize": "10Gi"}),
        );
    }
    let cluster = Arc::new(ManifestCluster::new(vec![cluster.to_path_buf()]).with_overlay(overlay));
    (
        FreshStore {
            dir,
            _snapshots: snapshots,
        },
        PhaseMachine::new(plugins.to_vec(), store, cluster, settings),
    )
}

/// labels, pod-volumes and pvc-snapshot, as the backup benchmarks run them
/// (pvc-snapshot with its write grant and its class named).
pub fn three_plugins(runtime: &Runtime) -> Vec<Plugin> {
    let pvc_snapshot = PluginSettings {
        config: [("snapshot-class".to_string(), "csi-snapclass".to_string())].into(),
        write_grants: iar::cluster::writes::WriteGrants::only(&[SNAPSHOT_GRANT]).unwrap(),
        mutate_grants: iar::cluster::mutate::MutateGrants::only(&["persistentvolumeclaims"])
            .unwrap(),
        ..PluginSettings::default()
    };
    vec![
        load(
            runtime,
            iar_tests::artifacts::LABELS,
            &[("labels", "backed-up-by=iar")],
        ),
        load(runtime, iar_tests::artifacts::POD_VOLUMES, &[]),
        Plugin::from_file(
            runtime,
            iar_tests::artifacts::PVC_SNAPSHOT.as_ref(),
            pvc_snapshot,
        )
        .unwrap_or_else(|e| panic!("loading pvc-snapshot: {e}")),
    ]
}

/// The backup of everything in `cluster` except the VolumeSnapshots (which
/// finalize reads as post-operation items).
pub fn request(cluster: &Path) -> BackupRequest {
    BackupRequest {
        labels: Default::default(),
        name: RUN.into(),
        namespace: "velero".into(),
        spec: json!({"excludedResources": [
            format!("volumesnapshots.{SNAPSHOT_GROUP}"),
            format!("volumesnapshotclasses.{SNAPSHOT_GROUP}"),
        ]}),
        sources: vec![cluster.to_path_buf()],
        annotations: Default::default(),
    }
}
