//! Item blocks in the backup pass, with the real example plugins: every item
//! is backed up exactly once however many workers and blocks there are and
//! however many times plugins' additional items name it.

use crate::support::*;
use iar::backup::pass;
use iar::catalog::Catalog;
use iar::{ClusterReader, ItemRef, ManifestCluster, Phase, Plugin};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// `groups` groups of four pods. Each pod mounts its own PVC and its
/// group's shared PVC; every PVC is bound to a PV. Only the pods and every
/// other own PVC are "selected"; the rest is in the cluster only, so it
/// reaches the backup through block formation (built-in relations) and, a
/// second time, through the pod-volumes plugin's additional items.
fn write_cluster(dir: &Path, groups: usize) -> usize {
    let mut docs = Vec::new();
    let pvc = |name: String, docs: &mut Vec<serde_json::Value>| {
        docs.push(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"volumeName": format!("pv-{name}")},
            "status": {"phase": "Bound"}
        }));
        docs.push(json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": format!("pv-{name}")},
            "spec": {"claimRef": {"namespace": "shop", "name": name}}
        }));
    };
    for g in 0..groups {
        pvc(format!("shared-{g}"), &mut docs);
        for p in 0..4 {
            let name = format!("web-{g}-{p}");
            pvc(format!("data-{name}"), &mut docs);
            docs.push(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "shop"},
                "spec": {
                    "containers": [{"name": "web", "image": "nginx"}],
                    "volumes": [
                        {"name": "data", "persistentVolumeClaim": {"claimName": format!("data-{name}")}},
                        {"name": "shared", "persistentVolumeClaim": {"claimName": format!("shared-{g}")}}
                    ]
                }
            }));
        }
    }
    let count = docs.len();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
    std::fs::write(dir.join("items.json"), list.to_string()).unwrap();
    count
}

struct Setup {
    _dir: tempfile::TempDir,
    cluster: Arc<dyn ClusterReader>,
    selected: Vec<iar::Item>,
    total: usize,
    plugins: Vec<Plugin>,
}

fn setup(groups: usize) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let total = write_cluster(dir.path(), groups);
    let all = iar::manifests::read_items(&[dir.path().to_path_buf()], Catalog::builtin()).unwrap();
    assert_eq!(all.len(), total);
    // Pods, and the own PVCs of even-numbered pods: the rest comes in
    // through blocks and additional items.
    let mut selected: Vec<iar::Item> = all
        .into_iter()
        .filter(|i| {
            i.id.resource == "pods"
                || (i.id.resource == "persistentvolumeclaims"
                    && i.id.name.starts_with("data-")
                    && i.id.name.ends_with(['0', '2']))
        })
        .collect();
    // The same pod selected twice (two sources naming it) is still one item.
    selected.push(selected[0].clone());
    Setup {
        cluster: Arc::new(ManifestCluster::new(vec![dir.path().to_path_buf()])),
        _dir: dir,
        selected,
        total,
        plugins: example_plugins(),
    }
}

/// One pass with `workers` threads; panics unless every item of the cluster
/// has exactly one outcome, stored, and the blocks are one per pod group.
fn pass_once(s: &Setup, workers: usize, groups: usize) {
    let out = pass::run(
        &s.plugins,
        s.selected.clone(),
        &backup(Phase::Backup),
        &s.cluster,
        workers,
        true,
        &[],
        None,
        None,
        None,
        None,
    );
    let mut counts: BTreeMap<ItemRef, usize> = BTreeMap::new();
    for o in &out.outcomes {
        *counts.entry(o.id.clone()).or_default() += 1;
        assert!(o.errors.is_empty(), "{}: {:?}", o.id, o.errors);
        assert!(o.stored.is_some(), "{} not stored", o.id);
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "backed up more than once: {twice:?}");
    assert_eq!(
        counts.len(),
        s.total,
        "lost items: {} of {} backed up",
        counts.len(),
        s.total
    );
    assert_eq!(out.blocks, groups, "one block per pod group");
    assert!(out.warnings.is_empty() && out.errors.is_empty(), "{out:?}");
    // A group's pods, PVCs and PVs share one block.
    let mut block_of: BTreeMap<String, usize> = BTreeMap::new();
    for o in &out.outcomes {
        let group = o.id.name.split('-').find_map(|p| p.parse::<usize>().ok());
        let group = group.expect("every name carries its group");
        let seen = *block_of.entry(group.to_string()).or_insert(o.block);
        assert_eq!(seen, o.block, "{} is outside its group's block", o.id);
    }
}

/// Many workers, many blocks, with the pod-volumes plugin naming every PVC
/// and PV as additional items (already in blocks) and half the PVCs
/// selected twice over (directly and through their pod's block): no item is
/// lost or backed up twice, over 20 rounds with 16 workers. Before blocks
/// and the claim set, nothing grouped a pod with its volumes (`block`
/// did not exist).
#[test]
fn every_item_once_with_many_workers_and_blocks() {
    let groups = 24;
    let s = setup(groups);
    for round in 0..20 {
        pass_once(&s, [16, 3, 1, 8][round % 4], groups);
    }
}

/// The long variant: 200 rounds with 32 workers over 100 groups (1,300
/// items). `cargo test -- --ignored every_item_once_long`.
#[test]
#[ignore]
fn every_item_once_long() {
    let groups = 100;
    let s = setup(groups);
    for _ in 0..200 {
        pass_once(&s, 32, groups);
    }
}
