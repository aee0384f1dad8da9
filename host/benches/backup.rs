//! Whole backups and progress syncs at scale. Run with
//! `cargo bench -p iar --bench backup`; compare the functions of a group in
//! the same run (the machines are shared and noisy).
//!
//! `backup-10k-items`: one `PhaseMachine::run_backup` of 10,000 items (2,500
//! Pods of ~2.5 KB each mounting a PVC, 2,500 bound PVCs, 2,500 PVs, 2,500
//! ConfigMaps over 10 namespaces, as JSON `List`s in a directory that is
//! both the items and the cluster, as `iar backup --items DIR` has it),
//! store on a local directory. `no-plugins` is the same backup with no
//! plugins at all (read, filter, tarball, persist); `three-plugins` runs the
//! labels, pod-volumes and pvc-snapshot examples. Every PVC's VolumeSnapshot
//! is already `readyToUse` in the directory (kept out of the backup by the
//! spec's `excludedResources`), so the 2,500 operations complete on the first
//! poll and no sync period is ever slept; finalize then appends the 2,500
//! VolumeSnapshots to the tarball.
//!
//! `progress-sync-10k-ops`: one backup with 10,000 in-flight operations.
//! `update+sync` is what the controller does once per period after polling:
//! touch every operation under the backup's lock and persist the list.
//! `poll-pvc-snapshot` is the polling itself: 10,000 `progress` calls through
//! the pvc-snapshot plugin on one reused instance (as the controller's poller
//! does), each reading its VolumeSnapshot through `cluster-get` from a
//! directory of manifests; `poll-pvc-snapshot/2-threads` splits the same
//! period over two threads as the controller's poller does on two workers.

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use iar::backup::object::BackupPhase;
use iar::operations::{Operation, OperationPhase, OperationSpec, OperationsMap};
use iar::phases::BackupRequest;
use iar::store::{BackupFile, BackupStore};
use iar::{ItemRef, ManifestCluster};
use serde_json::json;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::runtime::Runtime as Tokio;

mod common;
use common::*;

fn backup_10k_items(c: &mut Criterion, rt: &Tokio) {
    let runtime = wasm_runtime();
    let plugins = three_plugins(&runtime);
    let cluster = tempfile::tempdir().unwrap();
    write_cluster(cluster.path());
    let request = request(cluster.path());
    let pod_bytes = serde_json::to_vec(&pod(&namespace(0, PER_KIND), 0))
        .unwrap()
        .len();
    eprintln!("backup-10k-items: {ITEMS} items, Pods of {pod_bytes} B, {NAMESPACES} namespaces");

    let mut group = c.benchmark_group("backup-10k-items");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(30))
        .throughput(Throughput::Elements(ITEMS as u64));
    // Item-block workers: the scaling docs/performance.md reports. The ratio of
    // three plugins to none at equal workers is measured interleaved by
    // `examples/backup_ratio.rs`; these rows are the absolute figures.
    for (name, plugins, operations, workers) in [
        ("no-plugins/1-worker", &[][..], 0, 1),
        ("three-plugins/1-worker", &plugins[..], PER_KIND as u64, 1),
        ("no-plugins/2-workers", &[][..], 0, 2),
        ("three-plugins/2-workers", &plugins[..], PER_KIND as u64, 2),
    ] {
        let mut reported = false;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (store_dir, controller) =
                        fresh_controller(plugins, cluster.path(), workers, None);
                    let start = Instant::now();
                    let object = rt
                        .block_on(controller.run_backup(request.clone()))
                        .unwrap();
                    // Freeing what the backup parsed (its manifest cache)
                    // is part of its cost.
                    let puts = controller.store.puts();
                    drop(controller);
                    total += start.elapsed();
                    let status = &object.status;
                    assert_eq!(status.phase, BackupPhase::Completed, "{status:?}");
                    assert_eq!(status.progress.items_backed_up, ITEMS as u64);
                    assert_eq!(status.backup_item_operations_completed, operations);
                    if !reported {
                        reported = true;
                        let tarball = std::fs::metadata(
                            store_dir.path().join(BackupFile::Contents.key(RUN)),
                        )
                        .unwrap()
                        .len();
                        eprintln!(
                            "backup-10k-items/{name}: {} store writes per backup, {operations} operations, tarball {:.1} MB",
                            puts,
                            tarball as f64 / 1e6
                        );
                    }
                }
                total
            })
        });
    }
    group.finish();
}

/// 10,000 in-flight operations of one backup, as the pvc-snapshot plugin
/// starts them: PVC `data-web-<i>` in its namespace, VolumeSnapshot
/// `data-web-<i>-bench` as the post-operation item.
fn in_flight(now: SystemTime) -> Vec<Operation> {
    (0..OPERATIONS)
        .map(|i| {
            let ns = namespace(i, OPERATIONS);
            let pvc = format!("data-web-{i}");
            let spec = OperationSpec {
                backup_name: BACKUP.into(),
                backup_uid: backup_ref().uid,
                backup_item_action: "iar_plugin_pvc_snapshot".into(),
                resource_identifier: ItemRef::new(
                    "",
                    "persistentvolumeclaims",
                    ns.clone(),
                    pvc.clone(),
                ),
                operation_id: format!("{ns}/{pvc}-{BACKUP}"),
                post_operation_items: vec![ItemRef::new(
                    SNAPSHOT_GROUP,
                    "volumesnapshots",
                    ns,
                    format!("{pvc}-{BACKUP}"),
                )],
            };
            let mut op = Operation::new(spec, now);
            op.status.phase = OperationPhase::InProgress;
            op.status.n_total = 1;
            op.status.operation_units = "snapshots".into();
            op.status.description = "snapshot in progress".into();
            op.status.started = Some(now);
            op.status.updated = Some(now);
            op
        })
        .collect()
}

fn progress_sync_10k_ops(c: &mut Criterion, rt: &Tokio) {
    let mut group = c.benchmark_group("progress-sync-10k-ops");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Elements(OPERATIONS as u64));

    // update + sync: what the controller does after each period's polling.
    let store_dir = tempfile::tempdir().unwrap();
    let store = BackupStore::open(store_dir.path().to_str().unwrap()).unwrap();
    let map = OperationsMap::new();
    let start = SystemTime::now();
    rt.block_on(async {
        map.insert_loaded(BACKUP, in_flight(start)).await;
        // A sync with nothing changed writes nothing.
        assert!(!map.sync(BACKUP, &store).await.unwrap());
    });
    assert_eq!(store.puts(), 0);
    let mut tick: i64 = 0;
    {
        let mut sync = || {
            tick += 1;
            let now = start + Duration::from_millis(tick as u64);
            rt.block_on(async {
                map.update(BACKUP, |ops| {
                    for op in ops.iter_mut() {
                        // A poll's answer: the counter moved, so did `updated`.
                        op.status.n_completed = tick % 2;
                        op.status.updated = Some(now);
                    }
                    true
                })
                .await;
                map.sync(BACKUP, &store).await.unwrap()
            })
        };
        let before = store.puts();
        assert!(sync());
        let persisted = std::fs::metadata(
            store_dir
                .path()
                .join(BackupFile::ItemOperations.key(BACKUP)),
        )
        .unwrap()
        .len();
        eprintln!(
            "progress-sync-10k-ops: writes per sync: {} ({} operations, itemoperations.json.gz {:.2} MB)",
            store.puts() - before,
            OPERATIONS,
            persisted as f64 / 1e6
        );
        group.bench_function("update+sync", |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    assert!(black_box(sync()));
                }
                start.elapsed()
            })
        });
    }
    let polled = rt.block_on(map.get(BACKUP)).unwrap();
    assert!(polled.iter().all(|o| o.status.updated > Some(start)));

    // The polling of one period: 10,000 progress calls, each reading its
    // VolumeSnapshot through cluster-get.
    let runtime = wasm_runtime();
    let plugin = load(&runtime, iar_tests::artifacts::PVC_SNAPSHOT, &[]);
    let cluster_dir = tempfile::tempdir().unwrap();
    let docs = (0..OPERATIONS)
        .map(|i| {
            let ns = namespace(i, OPERATIONS);
            let doc = snapshot(&ns, &format!("data-web-{i}"));
            (ns, doc)
        })
        .collect();
    write_lists(cluster_dir.path(), "volumesnapshots.json", docs);
    let cluster_paths: Vec<PathBuf> = vec![cluster_dir.path().to_path_buf()];
    let mut instance = plugin.instance(Arc::new(ManifestCluster::new(cluster_paths)));
    let backup = backup_ref();
    let ops = in_flight(start);
    let mut poll = || {
        let mut completed = 0;
        for op in &ops {
            let p = instance
                .progress(&op.spec.operation_id, &op.spec.resource_identifier, &backup)
                .unwrap();
            completed += usize::from(p.completed);
        }
        completed
    };
    // The first poll parses the manifests; later periods find them cached.
    let first = Instant::now();
    assert_eq!(poll(), OPERATIONS, "every snapshot is ready");
    eprintln!(
        "progress-sync-10k-ops: first poll (manifests parsed): {:.2?}",
        first.elapsed()
    );
    group.bench_function("poll-pvc-snapshot", |b| {
        b.iter(|| assert_eq!(black_box(poll()), OPERATIONS))
    });
    // The same period split as the controller's poller splits it on two
    // workers: contiguous halves, each thread with its own instance (and
    // the shared manifest cluster, warm).
    let cluster = Arc::new(ManifestCluster::new(vec![cluster_dir.path().to_path_buf()]));
    let mut instances: Vec<_> = (0..2).map(|_| plugin.instance(cluster.clone())).collect();
    let mut poll_parallel = || {
        std::thread::scope(|scope| {
            let handles: Vec<_> = instances
                .iter_mut()
                .zip(ops.chunks(ops.len().div_ceil(2)))
                .map(|(instance, share)| {
                    let backup = &backup;
                    scope.spawn(move || {
                        share
                            .iter()
                            .filter(|op| {
                                instance
                                    .progress(
                                        &op.spec.operation_id,
                                        &op.spec.resource_identifier,
                                        backup,
                                    )
                                    .unwrap()
                                    .completed
                            })
                            .count()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .sum::<usize>()
        })
    };
    assert_eq!(poll_parallel(), OPERATIONS, "every snapshot is ready");
    group.bench_function("poll-pvc-snapshot/2-threads", |b| {
        b.iter(|| assert_eq!(black_box(poll_parallel()), OPERATIONS))
    });
    group.finish();
}

const VOLUME_FILES: usize = 8;
const VOLUME_FILE_BYTES: usize = 8 << 20;

/// Log-like text: compresses about as real application data does.
fn volume_file(seed: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(VOLUME_FILE_BYTES);
    let words =
        iar_tests::fixtures::xorshift((seed as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for (line, x) in (1u64..).zip(words) {
        if out.len() >= VOLUME_FILE_BYTES {
            break;
        }
        out.extend_from_slice(
            format!(
                "{line} GET /api/items/{} 200 {}us session={x:016x}\n",
                x % 9973,
                x % 100_000
            )
            .as_bytes(),
        );
    }
    out.truncate(VOLUME_FILE_BYTES);
    out
}

/// One pod's 64 MB volume through `--volume-data` (read, chunked, hashed,
/// compressed, written to the store), next to `tar | gzip` of the same
/// directory in the same run: the volume throughput in docs/performance.md.
fn backup_volume(c: &mut Criterion, rt: &Tokio) {
    let cluster = tempfile::tempdir().unwrap();
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": "shop",
                     "annotations": {"backup.velero.io/backup-volumes": "data"}},
        "spec": {"containers": [{"name": "db", "image": "db"}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]}});
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-db-0", "namespace": "shop"}, "spec": {}});
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [pod, pvc]});
    std::fs::write(cluster.path().join("db.json"), list.to_string()).unwrap();
    let data = tempfile::tempdir().unwrap();
    let volume = data.path().join("shop/data-db-0");
    std::fs::create_dir_all(&volume).unwrap();
    for i in 0..VOLUME_FILES {
        std::fs::write(volume.join(format!("log-{i}")), volume_file(i)).unwrap();
    }
    let bytes = (VOLUME_FILES * VOLUME_FILE_BYTES) as u64;
    let request = BackupRequest {
        labels: Default::default(),
        name: BACKUP.into(),
        namespace: "velero".into(),
        spec: json!({}),
        sources: vec![cluster.path().to_path_buf()],
        annotations: Default::default(),
    };
    let mut group = c.benchmark_group("backup-volume-64mb");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Bytes(bytes));
    group.bench_function("iar-volume-data", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (_store, controller) =
                    fresh_controller(&[], cluster.path(), 2, Some(data.path()));
                let start = Instant::now();
                let object = rt.block_on(controller.run_backup(request.clone())).unwrap();
                total += start.elapsed();
                assert_eq!(object.status.phase, BackupPhase::Completed);
            }
            total
        })
    });
    group.bench_function("tar-gzip", |b| {
        b.iter(|| {
            let status = std::process::Command::new("sh")
                .arg("-c")
                .arg("tar -cf - -C \"$0\" . | gzip -c > /dev/null")
                .arg(&volume)
                .status()
                .unwrap();
            assert!(status.success());
        })
    });
    group.finish();
}

fn bench(c: &mut Criterion) {
    let rt = Tokio::new().unwrap();
    backup_10k_items(c, &rt);
    backup_volume(c, &rt);
    progress_sync_10k_ops(c, &rt);
}

criterion_group!(benches, bench);
criterion_main!(benches);
