//! The ordering of a block's hooks and volume backups, through the
//! production code, `iar::backup::block_work::BlockWork`, driven the way
//! the backup pass (`iar::backup::pass::run`) drives it: blocks →
//! (on a bounded worker) pre hooks, per-volume decisions, volume backups
//! started → (holding no worker) wait for this block's volumes → post
//! hooks. Real processes, real files, real store.
//!
//! The item actions are left out (no plugins here): each block's items go
//! from `BlockWork::pre` to `BlockWork::start_volumes` unchanged, as they
//! do in the pass when no plugin changes them. The same properties through
//! a whole `PhaseMachine::run_backup` are in `block_hooks`.

use crate::support::{item, post_after_every_pre, stamp, store, write_volume};
use iar::backup::block_work::{BlockReport, BlockWork};
use iar::backup::blocks::form_blocks;
use iar::backup::hooks::{BackupHooks, HookStatus, LocalProcessRunner};
use iar::backup::volumes::{LocalDirBackupper, VolumeBackup, VolumePhase, restore_volume};
use iar::store::BackupStore;
use iar::{Item, NoCluster};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const BACKUP: &str = "ordered";

struct Env {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    data: PathBuf,
    store: BackupStore,
}

fn env() -> Env {
    let data = tempfile::tempdir().unwrap();
    let (store_dir, store) = store();
    Env {
        data: data.path().to_path_buf(),
        store,
        _dirs: (data, store_dir),
    }
}

/// A pod mounting `pvc` as volume `data`, opted in by annotation (the
/// backup's default is off), with pre and post hooks that record when they
/// started (nanoseconds since the epoch, from `date` itself) and write
/// markers into the volume.
fn pod_with_hooks(name: &str, pvc: &str) -> Vec<Item> {
    pod_with_post_hook(name, pvc, POST)
}

const POST: &str = "date +%s%N > \"$IAR_VOLUME_DATA/$IAR_POD_NAME.post\"; \
                    echo resumed > \"$IAR_VOLUME_DIR_DATA/post-marker\"";

/// [`pod_with_hooks`] with `post` as its post hook's script.
fn pod_with_post_hook(name: &str, pvc: &str, post: &str) -> Vec<Item> {
    let pre = "date +%s%N > \"$IAR_VOLUME_DATA/$IAR_POD_NAME.pre\"; \
               echo quiesced > \"$IAR_VOLUME_DIR_DATA/pre-marker\"";
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
    vec![item(pod), item(claim)]
}

/// What the blocks did: `BlockWork`'s report once every block ended, and
/// each block's `onError: Fail` outcomes of its pre hooks
/// (`BlockPre::failed`), in the order `form_blocks` gave the blocks.
struct Run {
    report: BlockReport,
    failed: Vec<Vec<String>>,
}

/// Forms the blocks of `items` and runs them as the pass does: `workers`
/// threads take blocks off one queue; on its worker, a block runs its pre
/// hooks (`BlockWork::pre`) and starts its volume backups
/// (`BlockWork::start_volumes`, which returns at once and leaves the wait
/// for the volumes and the post hooks to the runtime), and the worker goes
/// on to the next block. Then `BlockWork::finish` waits for every block.
/// Volume backups read `data` into `store`, `volume_concurrency` at once.
async fn run_all(
    items: Vec<Item>,
    workers: usize,
    volume_concurrency: usize,
    data: &Path,
    store: &BackupStore,
) -> Run {
    let blocks = form_blocks(items, &NoCluster, &[]);
    assert!(blocks.warnings.is_empty() && blocks.errors.is_empty());
    let backupper = LocalDirBackupper::new(data.to_path_buf(), store.clone(), volume_concurrency);
    // No hook ledger (`with_ledger`): what it records is the controller's
    // business (a restart reads it), not the ordering's.
    let work = Arc::new(BlockWork::new(
        BACKUP.into(),
        BackupHooks::default(),
        Arc::new(LocalProcessRunner {
            volume_data: data.to_path_buf(),
        }),
        Some(Arc::new(backupper)),
        Some(data.to_path_buf()),
        None,
        false,
        tokio::runtime::Handle::current(),
    ));
    let queue: Mutex<VecDeque<_>> = Mutex::new(blocks.blocks.into_iter().enumerate().collect());
    // `pre` and `start_volumes` block on the runtime: called, as in the
    // pass, on threads that are not the runtime's.
    let failed = tokio::task::spawn_blocking({
        let work = work.clone();
        move || {
            let failed = Mutex::new(Vec::new());
            std::thread::scope(|scope| {
                for _ in 0..workers {
                    scope.spawn(|| {
                        loop {
                            let Some((index, block)) = queue.lock().unwrap().pop_front() else {
                                return;
                            };
                            let pre = work.pre(&block.items);
                            failed.lock().unwrap().push((index, pre.failed.clone()));
                            work.start_volumes(pre, &block.items);
                        }
                    });
                }
            });
            let mut failed = failed.into_inner().unwrap();
            failed.sort();
            failed.into_iter().map(|(_, f)| f).collect()
        }
    })
    .await
    .unwrap();
    Run {
        report: work.finish().await,
        failed,
    }
}

/// The backup holds what the pre hook wrote and not what the post hook
/// wrote, and the post hook's process started after the block's volume
/// backup ended (its own clock reading); the configMap volume is not
/// backed up and only the opted-in volume is waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_hook_marker_is_in_the_backup_and_post_hook_waits() {
    let e = env();
    write_volume(&e.data, "db-data", 2 << 20);
    let run = run_all(pod_with_hooks("db-0", "db-data"), 2, 4, &e.data, &e.store).await;
    assert_eq!(run.failed, [Vec::<String>::new()], "one block, not failed");
    let r = &run.report;
    assert_eq!(r.hooks.len(), 2, "{:?}", r.hooks);
    assert!(r.hooks.iter().all(|h| h.status == HookStatus::Succeeded));
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
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
        &Default::default(),
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
    let run = run_all(items, 2, 4, &e.data, &e.store).await;
    assert_eq!(run.failed.len(), 2, "two blocks");
    let slow = run
        .report
        .volumes
        .iter()
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
/// hold no worker, so all ten pre hooks run while the first blocks wait
/// (their post hooks' gate, [`post_after_every_pre`], opens only then; a
/// test of start and end times said the same but depended on the
/// machine's speed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_waiting_blocks_on_two_workers_hold_no_worker() {
    let e = env();
    let mut items = Vec::new();
    let post = post_after_every_pre(10, POST);
    for i in 0..10 {
        let pvc = format!("vol-{i}");
        write_volume(&e.data, &pvc, 6 << 20);
        items.extend(pod_with_post_hook(&format!("p{i}"), &pvc, &post));
    }
    let run = run_all(items, 2, 10, &e.data, &e.store).await;
    assert_eq!(run.failed.len(), 10, "ten blocks");
    let volumes: Vec<&VolumeBackup> = run.report.volumes.iter().collect();
    assert_eq!(volumes.len(), 10);
    assert!(volumes.iter().all(|v| v.phase == VolumePhase::Completed));
    // Every post hook passed its gate, after its own volume ended.
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
    let run = run_all(items, 2, 4, &e.data, &e.store).await;
    let [failed] = &run.failed[..] else {
        panic!("one block: {:?}", run.failed)
    };
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0].contains("exit code 7") && failed[0].contains("frozen disk"),
        "{}",
        failed[0]
    );
    let r = &run.report;
    assert!(r.volumes.is_empty());
    assert_eq!(r.hooks.len(), 1);
    assert!(!e.data.join("db-0.post").exists());
}
