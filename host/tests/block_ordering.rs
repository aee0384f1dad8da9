//! The building blocks of issue 7 composed the way the backup pass will
//! compose them: blocks → (on a bounded worker) pre hooks, per-volume
//! decisions, volume backups started → (holding no worker) wait for this
//! block's volumes → post hooks. Real processes, real files, real store.
//!
//! `run_block` below is the sketch of the second-wave integration; the
//! item actions are left out (no plugins here), everything else is real.

use iar::backup::blocks::{ItemBlock, form_blocks};
use iar::backup::hooks::{
    BackupHooks, HookPhase, HookRecord, HookStatus, HookTarget, LocalProcessRunner, Verdict,
    post_hooks_allowed, run_hooks, verdict,
};
use iar::backup::volume_policy::{Claim, VolumeAction, decide_pod_volumes};
use iar::backup::volumes::{
    LocalDirBackupper, VolumeBackup, VolumeBackupper, VolumePhase, VolumeRequest, restore_volume,
};
use iar::resources::Catalog;
use iar::store::BackupStore;
use iar::{Item, NoCluster};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Semaphore;

const BACKUP: &str = "ordered";

struct Env {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    data: PathBuf,
    store: BackupStore,
}

fn env() -> Env {
    let data = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    Env {
        data: data.path().to_path_buf(),
        store: BackupStore::open(store_dir.path().to_str().unwrap()).unwrap(),
        _dirs: (data, store_dir),
    }
}

/// Incompressible bytes, so a volume's size is its cost.
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A pod mounting `pvc` as volume `data`, opted in by annotation (the
/// backup's default is off), with pre and post hooks that record when they
/// started (nanoseconds since the epoch, from `date` itself) and write
/// markers into the volume.
fn pod_with_hooks(name: &str, pvc: &str) -> Vec<Item> {
    let catalog = Catalog::builtin();
    let pre = "date +%s%N > \"$IAR_VOLUME_DATA/$IAR_POD_NAME.pre\"; \
               echo quiesced > \"$IAR_VOLUME_DIR_DATA/pre-marker\"";
    let post = "date +%s%N > \"$IAR_VOLUME_DATA/$IAR_POD_NAME.post\"; \
                echo resumed > \"$IAR_VOLUME_DIR_DATA/post-marker\"";
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "annotations": {
            "backup.velero.io/backup-volumes": "data",
            "pre.hook.backup.velero.io/command": serde_json::to_string(&["sh", "-c", pre]).unwrap(),
            "post.hook.backup.velero.io/command": serde_json::to_string(&["sh", "-c", post]).unwrap(),
        }},
        "spec": {"containers": [{"name": "app"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": pvc}},
                        {"name": "cfg", "configMap": {"name": "c"}}]}});
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": pvc, "namespace": "shop"}, "spec": {}});
    vec![
        Item::from_value(pod, catalog).unwrap(),
        Item::from_value(claim, catalog).unwrap(),
    ]
}

fn write_volume(data: &Path, pvc: &str, bytes: usize) {
    let dir = data.join("shop").join(pvc);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("table"),
        noise(pvc.len() as u64 + bytes as u64, bytes),
    )
    .unwrap();
}

fn stamp(data: &Path, file: &str) -> SystemTime {
    let ns: u64 = std::fs::read_to_string(data.join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .trim()
        .parse()
        .unwrap();
    UNIX_EPOCH + Duration::from_nanos(ns)
}

#[derive(Debug, Default)]
struct BlockReport {
    hooks: Vec<HookRecord>,
    volumes: Vec<VolumeBackup>,
    failed: Vec<String>,
}

/// One block: pre hooks, volume decisions and starts while holding a
/// worker permit; then the wait for this block's volumes and the post
/// hooks, holding none.
async fn run_block(
    block: ItemBlock,
    workers: Arc<Semaphore>,
    backupper: Arc<dyn VolumeBackupper>,
    data: PathBuf,
) -> BlockReport {
    let hooks = BackupHooks::default();
    let runner = LocalProcessRunner {
        volume_data: data.clone(),
    };
    let mut report = BlockReport::default();
    let worker = workers.acquire_owned().await.unwrap();
    let mut pods = Vec::new();
    for pod in block.pods() {
        let target = HookTarget::for_pod(pod, Some(&data));
        let pre = run_hooks(
            &runner,
            &target,
            &hooks.for_pod(pod, HookPhase::Pre).unwrap(),
        )
        .await;
        let blocked = pre
            .iter()
            .any(|r| matches!(verdict(r), Verdict::BlockFailed(_)));
        report
            .failed
            .extend(pre.iter().filter_map(|r| match verdict(r) {
                Verdict::BlockFailed(m) => Some(m),
                _ => None,
            }));
        let claim = |name: &str| Claim {
            pvc: block
                .items
                .iter()
                .find(|i| i.id.resource == "persistentvolumeclaims" && i.id.name == name)
                .map(|i| i.value().clone()),
            pv: None,
        };
        let mut handles = Vec::new();
        if !blocked {
            // (The item actions for every item of the block run here.)
            let decisions = decide_pod_volumes(pod, &claim, None, false);
            for d in decisions {
                if d.action == VolumeAction::FsBackup {
                    handles.push(
                        backupper
                            .start(VolumeRequest {
                                backup: BACKUP.into(),
                                pod: pod.id.clone(),
                                volume: d.volume,
                                pvc: d.pvc,
                            })
                            .await,
                    );
                }
            }
        }
        report.hooks.extend(pre.iter().cloned());
        pods.push((pod.clone(), target, pre, handles));
    }
    // The worker is free for other blocks while this one waits.
    drop(worker);
    for (pod, target, pre, handles) in pods {
        for h in &handles {
            report.volumes.push(h.finished().await);
        }
        if post_hooks_allowed(&pre) {
            let post = hooks.for_pod(&pod, HookPhase::Post).unwrap();
            report
                .hooks
                .extend(run_hooks(&runner, &target, &post).await);
        }
    }
    report
}

async fn run_all(
    items: Vec<Item>,
    workers: usize,
    backupper: Arc<dyn VolumeBackupper>,
    data: &Path,
) -> Vec<BlockReport> {
    let blocks = form_blocks(items, &NoCluster, &[]);
    assert!(blocks.warnings.is_empty() && blocks.errors.is_empty());
    let workers = Arc::new(Semaphore::new(workers));
    let tasks: Vec<_> = blocks
        .blocks
        .into_iter()
        .map(|b| {
            tokio::spawn(run_block(
                b,
                workers.clone(),
                backupper.clone(),
                data.to_path_buf(),
            ))
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// The backup holds what the pre hook wrote and not what the post hook
/// wrote, and the post hook's process started after the block's volume
/// backup ended (its own clock reading); the configMap volume is not
/// backed up and only the opted-in volume is waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_hook_marker_is_in_the_backup_and_post_hook_waits() {
    let e = env();
    write_volume(&e.data, "db-data", 2 << 20);
    let backupper = Arc::new(LocalDirBackupper::new(e.data.clone(), e.store.clone(), 4));
    let reports = run_all(pod_with_hooks("db-0", "db-data"), 2, backupper, &e.data).await;
    assert_eq!(reports.len(), 1);
    let r = &reports[0];
    assert_eq!(r.hooks.len(), 2, "{:?}", r.hooks);
    assert!(r.hooks.iter().all(|h| h.status == HookStatus::Succeeded));
    assert_eq!(r.volumes.len(), 1);
    let v = &r.volumes[0];
    assert_eq!(v.phase, VolumePhase::Completed, "{:?}", v.error);
    assert!(stamp(&e.data, "db-0.post") >= v.completed.unwrap());
    assert!(stamp(&e.data, "db-0.pre") <= v.started.unwrap());

    let out = tempfile::tempdir().unwrap();
    restore_volume(
        &e.store,
        BACKUP,
        v.manifest_key.as_ref().unwrap(),
        out.path(),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(out.path().join("pre-marker")).unwrap(),
        "quiesced\n"
    );
    assert!(!out.path().join("post-marker").exists());
    assert!(e.data.join("shop/db-data/post-marker").exists());
}

/// Two blocks, two workers: a slow volume in block A does not delay block
/// B's post hook, which starts before A's volume backup ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_volume_does_not_delay_another_blocks_post_hook() {
    let e = env();
    write_volume(&e.data, "slow", 48 << 20);
    write_volume(&e.data, "fast", 64 << 10);
    let mut items = pod_with_hooks("a", "slow");
    items.extend(pod_with_hooks("b", "fast"));
    let backupper = Arc::new(LocalDirBackupper::new(e.data.clone(), e.store.clone(), 4));
    let reports = run_all(items, 2, backupper, &e.data).await;
    let slow = reports
        .iter()
        .flat_map(|r| &r.volumes)
        .find(|v| v.pod_name == "a")
        .unwrap();
    assert_eq!(slow.phase, VolumePhase::Completed);
    let b_post = stamp(&e.data, "b.post");
    assert!(
        b_post < slow.completed.unwrap(),
        "block B's post hook waited for block A's volume"
    );
    assert!(stamp(&e.data, "a.post") >= slow.completed.unwrap());
}

/// Ten blocks on two workers, each waiting on its own volume: the waits
/// hold no worker, so all ten volume backups are in progress at once (the
/// last one starts before the first one ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_waiting_blocks_on_two_workers_overlap_their_volume_backups() {
    let e = env();
    let mut items = Vec::new();
    for i in 0..10 {
        let pvc = format!("vol-{i}");
        write_volume(&e.data, &pvc, 6 << 20);
        items.extend(pod_with_hooks(&format!("p{i}"), &pvc));
    }
    let backupper = Arc::new(LocalDirBackupper::new(e.data.clone(), e.store.clone(), 10));
    let reports = run_all(items, 2, backupper, &e.data).await;
    let volumes: Vec<&VolumeBackup> = reports.iter().flat_map(|r| &r.volumes).collect();
    assert_eq!(volumes.len(), 10);
    assert!(volumes.iter().all(|v| v.phase == VolumePhase::Completed));
    let last_start = volumes.iter().map(|v| v.started.unwrap()).max().unwrap();
    let first_end = volumes.iter().map(|v| v.completed.unwrap()).min().unwrap();
    assert!(
        last_start < first_end,
        "volume backups did not all overlap: last start {last_start:?}, first end {first_end:?}"
    );
    // Each post hook ran after its own volume ended.
    for v in volumes {
        assert!(stamp(&e.data, &format!("{}.post", v.pod_name)) >= v.completed.unwrap());
    }
}

/// A pod whose pre hook fails with onError Fail: its block fails, its
/// volumes are not backed up and it gets no post hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pre_hook_means_no_volumes_and_no_post_hook() {
    let e = env();
    write_volume(&e.data, "db-data", 1024);
    let mut items = pod_with_hooks("db-0", "db-data");
    let mut pod = items[0].value().clone();
    let annotations = pod["metadata"]["annotations"].as_object_mut().unwrap();
    annotations.insert(
        "pre.hook.backup.velero.io/command".into(),
        Value::String("[\"sh\", \"-c\", \"echo frozen disk >&2; exit 7\"]".into()),
    );
    items[0].set_value(pod);
    let backupper = Arc::new(LocalDirBackupper::new(e.data.clone(), e.store.clone(), 4));
    let reports = run_all(items, 2, backupper, &e.data).await;
    let r = &reports[0];
    assert_eq!(r.failed.len(), 1);
    assert!(
        r.failed[0].contains("exit code 7") && r.failed[0].contains("frozen disk"),
        "{}",
        r.failed[0]
    );
    assert!(r.volumes.is_empty());
    assert_eq!(r.hooks.len(), 1);
    assert!(!e.data.join("db-0.post").exists());
}
