use super::*;
use crate::store::faulty::FaultyStore;
use serde_json::json;
use std::time::{Duration, UNIX_EPOCH};
use tokio::time::timeout;

fn item(resource: &str, ns: &str, name: &str) -> ItemRef {
    ItemRef::new("", resource, ns, name)
}

fn op(backup: &str, i: usize) -> Operation {
    let spec = OperationSpec {
        backup_name: backup.into(),
        backup_uid: format!("uid-{backup}"),
        backup_item_action: "example.io/snapshot".into(),
        resource_identifier: item("persistentvolumeclaims", "ns", &format!("pvc-{i}")),
        operation_id: format!("op-{i}"),
        post_operation_items: vec![item("volumesnapshots", "ns", &format!("snap-{i}"))],
    };
    // Sub-second part on purpose: the round trip must keep it.
    Operation::new(
        spec,
        UNIX_EPOCH + Duration::new(1_700_000_000 + i as u64, 250),
    )
}

fn local_store(dir: &tempfile::TempDir) -> BackupStore {
    BackupStore::open(dir.path().to_str().unwrap()).unwrap()
}

fn faulty_store(dir: &tempfile::TempDir) -> (Arc<FaultyStore>, BackupStore) {
    let local = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let faulty = Arc::new(FaultyStore::new(Arc::new(local)));
    let url = format!("file://{}", dir.path().display());
    let store = BackupStore::from_object_store(faulty.clone(), &url);
    (faulty, store)
}

async fn persisted(store: &BackupStore, backup: &str) -> Option<Vec<Operation>> {
    store
        .get_json(backup, BackupFile::ItemOperations)
        .await
        .unwrap()
}

fn complete(ops: &mut [Operation]) -> bool {
    let s = &mut ops[0].status;
    s.phase = OperationPhase::Completed;
    s.n_completed = s.n_total;
    s.updated = Some(SystemTime::now());
    true
}

#[test]
fn json_matches_velero_field_names() {
    let mut op = op("b1", 1);
    op.status = OperationStatus {
        phase: OperationPhase::Failed,
        error: "boom".into(),
        n_completed: 5,
        n_total: 10,
        operation_units: "bytes".into(),
        description: "uploading".into(),
        created: Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
        started: Some(UNIX_EPOCH + Duration::new(1_700_000_001, 500_000_000)),
        updated: None,
    };
    let expected = json!({
        "spec": {
            "backupName": "b1",
            "backupUID": "uid-b1",
            "backupItemAction": "example.io/snapshot",
            "resourceIdentifier": {"group": "", "resource": "persistentvolumeclaims", "namespace": "ns", "name": "pvc-1"},
            "operationID": "op-1",
            "postOperationItems": [{"group": "", "resource": "volumesnapshots", "namespace": "ns", "name": "snap-1"}],
        },
        "status": {
            "phase": "Failed",
            "error": "boom",
            "nCompleted": 5,
            "nTotal": 10,
            "operationUnits": "bytes",
            "description": "uploading",
            "created": "2023-11-14T22:13:20Z",
            "started": "2023-11-14T22:13:21.500000000Z",
        },
    });
    assert_eq!(serde_json::to_value(&op).unwrap(), expected);

    // A new operation: phase and created only, like Velero's omitempty.
    let new = Operation::new(
        op.spec.clone(),
        UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    );
    assert_eq!(
        serde_json::to_value(&new.status).unwrap(),
        json!({"phase": "New", "created": "2023-11-14T22:13:20Z"})
    );
    for (phase, s, terminal) in [
        (OperationPhase::New, "New", false),
        (OperationPhase::InProgress, "InProgress", false),
        (OperationPhase::Completed, "Completed", true),
        (OperationPhase::Failed, "Failed", true),
        (OperationPhase::Canceled, "Canceled", true),
    ] {
        assert_eq!(serde_json::to_value(phase).unwrap(), json!(s));
        assert_eq!(phase.is_terminal(), terminal);
    }
}

#[test]
fn reads_what_velero_writes() {
    // Velero's malformed Go tags make it write these names, and null items.
    let velero = json!({
        "spec": {
            "backupName": "b1", "backupUID": "u", "backupItemAction": "velero.io/csi-pvc-backupper",
            "ResourceIdentifier": {"Group": "", "Resource": "persistentvolumeclaims", "Namespace": "ns", "Name": "data"},
            "OperationID": "ns/data-snap",
            "PostOperationItems": null,
        },
        "status": {"phase": "InProgress", "created": "2023-05-01T10:00:00Z", "started": "2023-05-01T10:00:01Z"},
    });
    let op: Operation = serde_json::from_value(velero).unwrap();
    assert_eq!(
        op.spec.resource_identifier,
        item("persistentvolumeclaims", "ns", "data")
    );
    assert_eq!(op.spec.operation_id, "ns/data-snap");
    assert!(op.spec.post_operation_items.is_empty());
    assert_eq!(op.status.phase, OperationPhase::InProgress);
    assert_eq!(op.status.n_total, 0);
    assert_eq!(
        op.status.started,
        Some(UNIX_EPOCH + Duration::from_secs(1_682_935_201))
    );
}

#[tokio::test]
async fn get_is_a_deep_copy_and_changes_mark_dirty() {
    let map = OperationsMap::new();
    assert_eq!(map.get("b").await, None);
    assert!(!map.update("b", |_| panic!("unknown backup")).await);

    map.add("b", op("b", 0)).await;
    assert!(map.is_dirty("b").await);
    // Mutate the copy `get` returned, through every owned part, then read
    // the map again: it must still hold the original.
    let mut copy = map.get("b").await.unwrap();
    let again = map.get("b").await.unwrap();
    copy[0].status.phase = OperationPhase::Failed;
    copy[0].spec.operation_id.push_str("-mutated");
    // (an ItemRef is immutable and shared: replaced, not changed)
    copy[0].spec.post_operation_items[0] = crate::item::ItemRef::default();
    copy.push(op("b", 9));
    assert_ne!(copy, again, "the mutation happened");
    assert_eq!(map.get("b").await.unwrap(), vec![op("b", 0)]);
    // Two reads own distinct buffers: a `get` handing out a shared
    // reference (an `Arc`, a `Cow` of the map's list) would share them,
    // and a mutation through interior mutability would then reach the map.
    assert_ne!(copy.as_ptr(), again.as_ptr());
    assert_ne!(
        copy[0].spec.backup_item_action.as_ptr(),
        again[0].spec.backup_item_action.as_ptr()
    );
    assert_ne!(
        copy[0].spec.post_operation_items.as_ptr(),
        again[0].spec.post_operation_items.as_ptr()
    );

    map.insert_loaded("b", vec![op("b", 0)]).await;
    assert!(!map.is_dirty("b").await);
    assert!(!map.update("b", |_| false).await);
    assert!(!map.is_dirty("b").await, "no change, not dirty");
    assert!(map.update("b", |ops| complete(ops)).await);
    assert!(map.is_dirty("b").await);
    assert_eq!(
        map.get("b").await.unwrap()[0].status.phase,
        OperationPhase::Completed
    );

    map.add("a", op("a", 0)).await;
    assert_eq!(map.backups(), ["a", "b"]);
    map.remove("b").await;
    assert_eq!(map.backups(), ["a"]);
    assert!(!map.is_dirty("b").await);
}

#[tokio::test]
async fn sync_writes_once_per_change_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let store = local_store(&dir);
    let map = OperationsMap::new();
    for i in 0..3 {
        map.add("b", op("b", i)).await;
    }

    assert!(map.sync("b", &store).await.unwrap());
    assert!(!map.is_dirty("b").await);
    let puts = store.puts();
    assert!(!map.sync("b", &store).await.unwrap(), "clean: no write");
    assert!(!map.sync("unknown", &store).await.unwrap());
    assert_eq!(store.puts(), puts);
    assert_eq!(persisted(&store, "b").await, map.get("b").await);

    map.update("b", |ops| complete(ops)).await;
    assert!(map.sync("b", &store).await.unwrap());
    assert_eq!(store.puts(), puts + 1);
    assert_eq!(persisted(&store, "b").await, map.get("b").await);

    // A restart: a fresh map loads exactly that list, clean.
    let restarted = OperationsMap::new();
    assert_eq!(restarted.load("b", &store).await.unwrap(), 3);
    assert_eq!(restarted.get("b").await, map.get("b").await);
    assert!(!restarted.is_dirty("b").await);
    assert_eq!(restarted.load("none", &store).await.unwrap(), 0);
    assert_eq!(restarted.get("none").await, Some(vec![]));
}

#[tokio::test]
async fn failed_upload_keeps_state_dirty_and_previous_file() {
    let dir = tempfile::tempdir().unwrap();
    let (faulty, store) = faulty_store(&dir);
    let map = OperationsMap::new();
    map.add("b", op("b", 0)).await;
    assert!(map.sync("b", &store).await.unwrap());
    let first = persisted(&store, "b").await.unwrap();

    map.update("b", |ops| complete(ops)).await;
    let latest = map.get("b").await.unwrap();
    faulty.fail_puts(true);
    assert!(map.sync("b", &store).await.is_err());
    assert_eq!(map.get("b").await.unwrap(), latest, "map unchanged");
    assert!(map.is_dirty("b").await, "still dirty, so retried");
    assert_eq!(persisted(&store, "b").await.unwrap(), first);
    assert!(map.sync("b", &store).await.is_err(), "retried, fails again");

    faulty.fail_puts(false);
    assert!(map.sync("b", &store).await.unwrap());
    assert!(!map.is_dirty("b").await);
    assert_eq!(persisted(&store, "b").await.unwrap(), latest);
}

/// One operation whose plugin-supplied times cannot be written (before the
/// epoch, after year 9999) does not block the sync of the others: the file is
/// written with all of them, that one Failed with the reason and without the
/// bad time. Before, the whole `sync` failed on every period, for ever.
#[tokio::test]
async fn an_unwritable_timestamp_fails_its_operation_not_the_sync() {
    let dir = tempfile::tempdir().unwrap();
    let store = local_store(&dir);
    let map = OperationsMap::new();
    for i in 0..4 {
        map.add("b", op("b", i)).await;
    }
    map.update("b", |ops| {
        ops[1].status.started = Some(UNIX_EPOCH - Duration::from_secs(1));
        ops[2].status.updated = Some(UNIX_EPOCH + Duration::from_secs(253_402_300_800));
        true
    })
    .await;
    assert!(map.sync("b", &store).await.unwrap(), "the file is written");
    assert!(!map.is_dirty("b").await);
    let written = persisted(&store, "b").await.unwrap();
    assert_eq!(written.len(), 4);
    assert_eq!(written, map.get("b").await.unwrap(), "map and file agree");
    for i in [0, 3] {
        assert_eq!(written[i], op("b", i), "a good operation is untouched");
    }
    for (i, field) in [(1, "started"), (2, "updated")] {
        let s = &written[i].status;
        assert_eq!(s.phase, OperationPhase::Failed, "{i}");
        assert!(
            s.error.contains("example.io/snapshot")
                && s.error.contains(&format!("op-{i}"))
                && s.error.contains(field)
                && s.error.contains("1970..=9999"),
            "{}",
            s.error
        );
        assert_eq!((s.started, s.updated), (None, None));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paused_upload_blocks_readers_of_that_backup_only() {
    let dir = tempfile::tempdir().unwrap();
    let (faulty, store) = faulty_store(&dir);
    let map = Arc::new(OperationsMap::new());
    for b in ["a", "b"] {
        map.add(b, op(b, 0)).await;
        map.sync(b, &store).await.unwrap();
    }

    map.update("a", |ops| complete(ops)).await;
    let guard = faulty.pause_puts_to("a-itemoperations.json.gz");
    let syncing = tokio::spawn({
        let (map, store) = (map.clone(), store.clone());
        async move { map.sync("a", &store).await }
    });
    guard.paused().await;

    // A describe of "a" mid-upload waits: it can see neither the old state
    // (already superseded) nor a state the store does not hold yet.
    let mut describe = tokio::spawn({
        let map = map.clone();
        async move { map.get("a").await }
    });
    assert!(
        timeout(Duration::from_millis(200), &mut describe)
            .await
            .is_err(),
        "get(\"a\") returned during a's upload"
    );

    // Another backup is not blocked by a's upload.
    let other = async {
        map.update("b", |ops| complete(ops)).await;
        let wrote = map.sync("b", &store).await.unwrap();
        (wrote, map.get("b").await.unwrap())
    };
    let (wrote, b) = timeout(Duration::from_secs(5), other).await.unwrap();
    assert!(wrote);
    assert_eq!(b[0].status.phase, OperationPhase::Completed);
    assert_eq!(persisted(&store, "b").await.unwrap(), b);

    guard.release();
    assert!(syncing.await.unwrap().unwrap());
    let a = describe.await.unwrap().unwrap();
    assert_eq!(a[0].status.phase, OperationPhase::Completed);
    assert_eq!(persisted(&store, "a").await.unwrap(), a);
    assert!(!map.is_dirty("a").await);
}

/// xorshift64: enough randomness for picking backups, without a dependency.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_progress_reads_and_syncs_end_persisted_exactly() {
    const BACKUPS: usize = 20;
    const OPS: usize = 200;
    const UPDATES: usize = 3000;
    let dir = tempfile::tempdir().unwrap();
    let store = local_store(&dir);
    let map = Arc::new(OperationsMap::new());
    let names: Arc<Vec<String>> = Arc::new((0..BACKUPS).map(|b| format!("backup-{b}")).collect());
    for b in names.iter() {
        for i in 0..OPS {
            let mut op = op(b, i);
            op.status.n_total = 3;
            map.add(b, op).await;
        }
    }

    let mut tasks = Vec::new();
    // Updaters: one unit of progress on a random operation; InProgress on the
    // first, Completed on the last. Returns how many changes they made.
    for seed in 1..=4u64 {
        let (map, names) = (map.clone(), names.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut changes = 0;
            for _ in 0..UPDATES {
                let (b, i) = (rng.below(BACKUPS), rng.below(OPS));
                changes += map
                    .update(&names[b], |ops| {
                        let s = &mut ops[i].status;
                        if s.phase.is_terminal() {
                            return false;
                        }
                        let now = SystemTime::now();
                        s.n_completed += 1;
                        s.started.get_or_insert(now);
                        s.updated = Some(now);
                        s.phase = if s.n_completed == s.n_total {
                            OperationPhase::Completed
                        } else {
                            OperationPhase::InProgress
                        };
                        true
                    })
                    .await as i64;
                tokio::task::yield_now().await;
            }
            changes
        }));
    }
    // Describers: progress they see never goes backwards.
    for seed in 5..=6u64 {
        let (map, names) = (map.clone(), names.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut seen = vec![vec![0i64; OPS]; BACKUPS];
            for _ in 0..400 {
                let b = rng.below(BACKUPS);
                let ops = map.get(&names[b]).await.unwrap();
                assert_eq!(ops.len(), OPS);
                for (i, op) in ops.iter().enumerate() {
                    assert!(op.status.n_completed >= seen[b][i]);
                    seen[b][i] = op.status.n_completed;
                }
                tokio::task::yield_now().await;
            }
            0
        }));
    }
    // Syncers: every persisted file is whole, whenever it is read.
    for seed in 7..=8u64 {
        let (map, names, store) = (map.clone(), names.clone(), store.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            for _ in 0..100 {
                let b = &names[rng.below(BACKUPS)];
                if map.sync(b, &store).await.unwrap() {
                    assert_eq!(persisted(&store, b).await.unwrap().len(), OPS);
                }
            }
            0
        }));
    }
    let mut changes = 0;
    for t in tasks {
        changes += t.await.unwrap();
    }

    let mut progress = 0;
    for b in names.iter() {
        map.sync(b, &store).await.unwrap();
        assert!(!map.is_dirty(b).await);
        let ops = map.get(b).await.unwrap();
        assert_eq!(persisted(&store, b).await.unwrap(), ops, "{b}");
        progress += ops.iter().map(|o| o.status.n_completed).sum::<i64>();
    }
    assert_eq!(progress, changes, "no update lost");
}

/// A Canceled operation is written in Velero's vocabulary: phase `Failed`
/// with the error `canceled: <reason>` in the very file Velero reads
/// (`<backup>-itemoperations.json.gz`), and read back as Canceled, so a
/// resumed backup knows it ended (terminal: never polled again). A file
/// written before, with `Canceled` itself, still reads. Before, the file
/// held `"phase": "Canceled"`, which Velero does not know.
#[tokio::test]
async fn canceled_is_written_as_velero_failed_and_read_back_as_canceled() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let store = local_store(&dir);
    let map = OperationsMap::new();
    let mut canceled = op("b1", 1);
    canceled.status.phase = OperationPhase::Canceled;
    canceled.status.error = "the backup was deleted; cancel requested".into();
    map.add("b1", canceled.clone()).await;
    map.add("b1", op("b1", 2)).await;
    assert!(map.sync("b1", &store).await.unwrap());

    let file = dir.path().join("backups/b1/b1-itemoperations.json.gz");
    let mut json = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&file).unwrap())
        .read_to_string(&mut json)
        .unwrap();
    let raw: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(raw[0]["status"]["phase"], "Failed", "{raw}");
    assert_eq!(
        raw[0]["status"]["error"],
        "canceled: the backup was deleted; cancel requested"
    );
    assert_eq!(raw[1]["status"]["phase"], "New");
    assert!(!json.contains("\"Canceled\""), "{json}");

    // After a restart: Canceled again, with the reason as it was.
    let restarted = OperationsMap::new();
    assert_eq!(restarted.load("b1", &store).await.unwrap(), 2);
    let ops = restarted.get("b1").await.unwrap();
    assert_eq!(ops[0], canceled);
    assert!(ops[0].status.phase.is_terminal());

    // What an earlier iar wrote.
    let mut legacy = serde_json::to_value(&canceled).unwrap();
    legacy["status"]["phase"] = json!("Canceled");
    legacy["status"]["error"] = json!("gone");
    let read: Operation = serde_json::from_value(legacy).unwrap();
    assert_eq!(read.status.phase, OperationPhase::Canceled);
    assert_eq!(read.status.error, "gone");
}

/// `iar_operations{phase}` is kept as operations change (added, updated,
/// loaded, removed, the map dropped), so a scrape only reads it: the
/// gauge always equals a count of the map's operations by phase.
#[tokio::test]
async fn the_phase_gauge_follows_every_change() {
    let metrics: &'static crate::metrics::Metrics = Box::leak(Box::default());
    let gauge = |phase: &str| -> i64 {
        let text = metrics.encode();
        let line = format!("iar_operations{{phase=\"{phase}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&line))
            .map_or(0, |v| v.parse().unwrap())
    };
    let dir = tempfile::tempdir().unwrap();
    let store = local_store(&dir);
    let map = OperationsMap::with_metrics(metrics);
    for i in 0..3 {
        map.add("b1", op("b1", i)).await;
    }
    map.add("b2", op("b2", 9)).await;
    assert_eq!(gauge("New"), 4);
    map.update("b1", |ops| complete(ops)).await;
    map.update("b1", |ops| {
        ops[1].status.phase = OperationPhase::Canceled;
        true
    })
    .await;
    assert_eq!(
        [gauge("New"), gauge("Completed"), gauge("Canceled")],
        [2, 1, 1]
    );
    map.sync("b1", &store).await.unwrap();
    map.load("b1", &store).await.unwrap();
    assert_eq!(
        [gauge("New"), gauge("Completed"), gauge("Canceled")],
        [2, 1, 1],
        "loading what was persisted changes nothing"
    );
    map.remove("b1").await;
    assert_eq!([gauge("New"), gauge("Completed")], [1, 0]);
    drop(map);
    assert_eq!(gauge("New"), 0);
}
