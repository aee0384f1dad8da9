//! Many backups with many operations on one controller: progress is polled
//! and persisted while VolumeSnapshots appear and become ready, and
//! "describes" read the map and the store in parallel. What is persisted is
//! only ever a state the map has had, never goes backwards, and at the end is
//! exactly what the map holds.

use crate::support::*;
use iar::ManifestCluster;
use iar::backup::object::{BackupObject, BackupPhase};
use iar::operations::{Operation, OperationPhase};
use iar::phases::{BackupRequest, PhaseMachine, Settings};
use iar::store::{BackupFile, BackupStore};
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const BACKUPS: usize = 6;
const PVCS: usize = 40;

fn backup_name(b: usize) -> String {
    format!("b{b}")
}

fn pvc_name(b: usize, i: usize) -> String {
    format!("data-b{b}-{i:02}")
}

/// Writes a file the way a controller replaces an object: a reader sees the
/// old version or the new one. The staging name is not a manifest.
fn write_atomic(dir: &Path, file: &str, text: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(file)).unwrap();
}

/// One backup's items: PVCS bound PersistentVolumeClaims and their volumes.
fn write_items(dir: &Path, b: usize) {
    let mut docs = Vec::new();
    for i in 0..PVCS {
        let pvc = pvc_name(b, i);
        docs.push(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": pvc, "namespace": "shop"},
            "spec": {"volumeName": format!("pv-{pvc}"), "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound"}
        }));
        docs.push(json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": format!("pv-{pvc}")},
            "spec": {"capacity": {"storage": "1Gi"}, "csi": {"driver": "hostpath.csi.k8s.io", "volumeHandle": pvc}}
        }));
    }
    if b == 0 {
        // The class pvc-snapshot chooses for the volumes' driver.
        docs.push(json!({
            "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
            "metadata": {"name": "csi-snapclass", "labels": {"velero.io/csi-volumesnapshot-class": "true"}},
            "driver": "hostpath.csi.k8s.io"
        }));
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
    write_atomic(dir, "items.json", &list.to_string());
}

/// Plays the snapshot controller on the VolumeSnapshot pvc-snapshot
/// created in the overlay: its status, written the way a controller
/// replaces an object.
fn write_snapshot(overlay: &Path, b: usize, i: usize, ready: bool) {
    let mut status = json!({"readyToUse": ready});
    if ready {
        status["creationTime"] = json!("2026-11-30T01:00:04Z");
    }
    let dir = overlay.join("volumesnapshots.snapshot.storage.k8s.io/shop");
    let file = format!("{}-{}.yaml", pvc_name(b, i), backup_name(b));
    let mut doc: serde_json::Value =
        iar::yaml::from_str(&std::fs::read_to_string(dir.join(&file)).unwrap()).unwrap();
    doc["status"] = status;
    write_atomic(&dir, &file, &iar::yaml::to_string(&doc).unwrap());
}

fn rank(phase: OperationPhase) -> u8 {
    match phase {
        OperationPhase::New => 0,
        OperationPhase::InProgress => 1,
        OperationPhase::Completed | OperationPhase::Failed | OperationPhase::Canceled => 2,
    }
}

/// What one describe loop has seen of one backup, per operation id.
#[derive(Default)]
struct Seen {
    persisted: HashMap<String, OperationPhase>,
    memory: HashMap<String, OperationPhase>,
    last: Option<Vec<Operation>>,
    /// How many different persisted versions this loop read.
    versions: u64,
    /// Reads of a persisted list with some operations done and some not.
    mixed: u64,
    /// The map's list once every operation in it was terminal: nothing
    /// changes it after that, so it is what the last sync wrote.
    final_memory: Option<Vec<Operation>>,
}

/// Records `ops` as seen from `source`; panics when an operation went back.
fn observe(
    seen: &mut HashMap<String, OperationPhase>,
    ops: &[Operation],
    backup: &str,
    source: &str,
) {
    for op in ops {
        let id = &op.spec.operation_id;
        let now = op.status.phase;
        if let Some(&before) = seen.get(id) {
            if before.is_terminal() {
                assert_eq!(
                    now, before,
                    "{backup}: {source} operation {id} left terminal phase {before:?} for {now:?}"
                );
            } else {
                assert!(
                    rank(now) >= rank(before),
                    "{backup}: {source} operation {id} went back from {before:?} to {now:?}"
                );
            }
        }
        seen.insert(id.clone(), now);
    }
}

/// One "describe": the persisted operations first, then the map. The map
/// only moves forward and the store only ever holds a state the map had, so
/// the map read second is never behind the store read first.
async fn describe_once(c: &PhaseMachine, name: &str, seen: &mut Seen) {
    let persisted: Option<Vec<Operation>> = c
        .store
        .get_json(name, BackupFile::ItemOperations)
        .await
        .unwrap_or_else(|e| panic!("{name}: reading persisted operations: {e}"));
    // The backup object is read too, as describe does; it must always parse.
    let _: Option<BackupObject> = c
        .store
        .get_json(name, BackupFile::Metadata)
        .await
        .unwrap_or_else(|e| panic!("{name}: reading velero-backup.json: {e}"));
    let memory = c.operations.get(name).await;
    if memory.is_none() && persisted.is_some() {
        // The controller forgets a backup once it has ended: then, and
        // only then, the map has no entry for one the store has.
        let object: BackupObject = c
            .store
            .get_json(name, BackupFile::Metadata)
            .await
            .unwrap()
            .expect("velero-backup.json");
        assert!(
            object.status.phase.is_terminal(),
            "{name}: persisted operations but none in the map, in phase {}",
            object.status.phase
        );
        return;
    }
    if let Some(persisted) = &persisted {
        observe(&mut seen.persisted, persisted, name, "persisted");
        let done = persisted
            .iter()
            .filter(|o| o.status.phase.is_terminal())
            .count();
        if done > 0 && done < persisted.len() {
            seen.mixed += 1;
        }
        if seen.last.as_ref() != Some(persisted) {
            seen.versions += 1;
            seen.last = Some(persisted.clone());
        }
        let memory = memory
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: persisted operations but none in the map"));
        assert!(
            memory.len() >= persisted.len(),
            "{name}: the store has {} operations, the map only {}",
            persisted.len(),
            memory.len()
        );
        for p in persisted {
            let m = memory.iter().find(|m| m.spec == p.spec).unwrap_or_else(|| {
                panic!(
                    "{name}: persisted operation {} is not in the map",
                    p.spec.operation_id
                )
            });
            assert!(
                rank(m.status.phase) >= rank(p.status.phase),
                "{name}: the store is ahead of the map for {}: {:?} persisted, {:?} in memory",
                p.spec.operation_id,
                p.status.phase,
                m.status.phase
            );
        }
    }
    if let Some(memory) = &memory {
        observe(&mut seen.memory, memory, name, "in-memory");
        if memory.len() == PVCS && memory.iter().all(|o| o.status.phase.is_terminal()) {
            seen.final_memory = Some(memory.clone());
        }
    }
}

/// The persisted operations file exactly as stored, decompressed.
async fn raw_operations(store: &BackupStore, name: &str) -> Vec<u8> {
    let gz = store
        .get(name, BackupFile::ItemOperations)
        .await
        .unwrap()
        .expect("itemoperations");
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw).unwrap();
    raw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_backups_with_many_operations_persist_exactly_what_is_in_memory() {
    let started = Instant::now();
    let dirs: Vec<tempfile::TempDir> = (0..BACKUPS).map(|_| tempfile::tempdir().unwrap()).collect();
    for (b, dir) in dirs.iter().enumerate() {
        write_items(dir.path(), b);
    }
    let (_store_dir, store) = store();
    let overlay = tempfile::tempdir().unwrap();
    let cluster = ManifestCluster::new(dirs.iter().map(|d| d.path().to_path_buf()).collect())
        .with_overlay(overlay.path().to_path_buf());
    let settings = Settings {
        sync_period: Duration::from_millis(20),
        ..Settings::default()
    };
    let c = Arc::new(PhaseMachine::new(
        example_plugins(),
        store.clone(),
        Arc::new(cluster),
        settings,
    ));

    let backups: Vec<_> = (0..BACKUPS)
        .map(|b| {
            let c = c.clone();
            let req = BackupRequest {
                labels: Default::default(),
                name: backup_name(b),
                namespace: "velero".into(),
                spec: json!({}),
                sources: vec![dirs[b].path().to_path_buf()],
                annotations: Default::default(),
            };
            tokio::spawn(async move { c.run_backup(req).await })
        })
        .collect();

    // The snapshot controller: once a backup's operations are all recorded,
    // its snapshots appear (not ready) one by one and become ready ten
    // steps behind, in an order that differs per backup.
    let snapshotters: Vec<_> = (0..BACKUPS)
        .map(|b| {
            let c = c.clone();
            let dir = overlay.path().to_path_buf();
            tokio::spawn(async move {
                let name = backup_name(b);
                iar_tests::wait_for(
                    &format!("{name}: its {PVCS} operations recorded"),
                    Duration::from_secs(15),
                    || async {
                        match c.operations.get(&name).await.map_or(0, |o| o.len()) {
                            n if n >= PVCS => Ok(()),
                            n => Err(format!("{n} recorded")),
                        }
                    },
                )
                .await;
                let order: Vec<usize> = (0..PVCS).map(|k| (k * 7 + b * 5) % PVCS).collect();
                const LAG: usize = 10;
                for step in 0..PVCS + LAG {
                    if step < PVCS {
                        write_snapshot(&dir, b, order[step], false);
                    }
                    if step >= LAG {
                        write_snapshot(&dir, b, order[step - LAG], true);
                    }
                    tokio::time::sleep(Duration::from_millis(15 + (b as u64 * 3))).await;
                }
            })
        })
        .collect();

    // Describes: two loops per backup, reading the store and the map.
    let done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let (mut versions, mut mixed) = (0, 0);
    let mut final_memory: HashMap<String, Vec<Operation>> = HashMap::new();
    let describers: Vec<_> = (0..BACKUPS * 2)
        .map(|k| {
            let (c, done, reads) = (c.clone(), done.clone(), reads.clone());
            tokio::spawn(async move {
                let name = backup_name(k % BACKUPS);
                let mut seen = Seen::default();
                while !done.load(Ordering::Acquire) {
                    describe_once(&c, &name, &mut seen).await;
                    reads.fetch_add(1, Ordering::Relaxed);
                    tokio::task::yield_now().await;
                }
                // One last look after the backup ended.
                describe_once(&c, &name, &mut seen).await;
                seen
            })
        })
        .collect();

    let mut objects = Vec::new();
    for (b, task) in backups.into_iter().enumerate() {
        let object = tokio::time::timeout(Duration::from_secs(40), task)
            .await
            .unwrap_or_else(|_| panic!("{} did not end in 40 s", backup_name(b)))
            .expect("the backup task does not panic")
            .unwrap_or_else(|e| panic!("{}: {e}", backup_name(b)));
        objects.push(object);
    }
    for s in snapshotters {
        s.await.expect("the snapshot controller does not panic");
    }
    done.store(true, Ordering::Release);
    for (k, d) in describers.into_iter().enumerate() {
        let seen = d.await.expect("no describe saw an operation go back");
        if let Some(memory) = seen.final_memory {
            final_memory.insert(backup_name(k % BACKUPS), memory);
        }
        assert_eq!(seen.memory.len(), PVCS);
        assert_eq!(seen.persisted.len(), PVCS);
        versions += seen.versions;
        mixed += seen.mixed;
    }

    assert!(
        mixed > 0,
        "no describe ever read a backup mid-flight: the test did not overlap polling and reads"
    );

    for (b, object) in objects.iter().enumerate() {
        let name = backup_name(b);
        assert_eq!(object.status.phase, BackupPhase::Completed, "{name}");
        assert_eq!(object.status.errors, 0, "{name}");
        assert_eq!(
            object.status.backup_item_operations_completed, PVCS as u64,
            "{name}"
        );
        let persisted_object: BackupObject = store
            .get_json(&name, BackupFile::Metadata)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&persisted_object, object, "{name}");

        assert_eq!(
            c.operations.get(&name).await,
            None,
            "{name}: forgotten once ended"
        );
        let memory = final_memory
            .get(&name)
            .unwrap_or_else(|| panic!("{name}: no describe saw its final map"));
        // The file as stored, byte for byte, is the map's final list as
        // `sync` serializes it (compact JSON). Parsing both sides first would
        // hide a difference in what was written (a field dropped by a
        // `skip_serializing_if`, a time rounded) that a round trip restores.
        let raw = raw_operations(&store, &name).await;
        assert_eq!(
            String::from_utf8_lossy(&raw),
            String::from_utf8_lossy(&serde_json::to_vec(memory).unwrap()),
            "{name}: the store differs from the map"
        );
        let persisted: Vec<Operation> = serde_json::from_slice(&raw).unwrap();
        assert_eq!(&persisted, memory, "{name}");
        assert_eq!(persisted.len(), PVCS, "{name}");
        let mut ids: Vec<&str> = persisted
            .iter()
            .map(|o| o.spec.operation_id.as_str())
            .collect();
        ids.sort();
        let expected: Vec<String> = (0..PVCS)
            .map(|i| format!("shop/{}-{name}", pvc_name(b, i)))
            .collect();
        assert_eq!(ids, expected, "{name}");
        for op in &persisted {
            assert_eq!(op.status.phase, OperationPhase::Completed, "{name}: {op:?}");
            assert_eq!(op.status.n_completed, 1, "{name}: {op:?}");
            assert!(op.status.started.is_some(), "{name}: {op:?}");
        }
    }
    eprintln!(
        "{BACKUPS} backups x {PVCS} operations: {} describe reads ({versions} persisted versions seen, {mixed} mid-flight), {} store writes, {:.1?}",
        reads.load(Ordering::Relaxed),
        store.puts(),
        started.elapsed()
    );
}
