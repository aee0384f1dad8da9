use super::*;
use crate::backup::object::rfc3339;
use crate::phases::test_support::{Parts, t0};
use crate::phases::{PhaseMachine, Settings};
use bytes::Bytes;
use iar_core::store::BackupStore;
use iar_core::store::faulty::FaultyStore;
use std::sync::Arc;
use std::time::Duration;

const HOUR: Duration = Duration::from_secs(3600);

fn controller(store: BackupStore) -> PhaseMachine {
    let settings = Settings {
        lease_duration: Duration::from_secs(30),
        ..Settings::default()
    };
    PhaseMachine::new(Vec::new(), store, Arc::new(iar_core::NoCluster), settings)
}

/// A controller whose cluster is an overlay in `overlay` (what plugins
/// created), and the lines it logs.
fn overlay_controller(
    store: &BackupStore,
    overlay: &std::path::Path,
) -> (PhaseMachine, Arc<std::sync::Mutex<Vec<String>>>) {
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = lines.clone();
    let cluster = iar_core::ManifestCluster::new(Vec::new()).with_overlay(overlay.to_path_buf());
    let c = PhaseMachine::new(
        Vec::new(),
        store.clone(),
        Arc::new(cluster),
        Settings {
            lease_duration: Duration::from_secs(30),
            ..Settings::default()
        },
    )
    .with_observer(Box::new(move |_: &str, line: &str| {
        seen.lock().unwrap().push(line.to_string())
    }));
    (c, lines)
}

fn temp_store() -> (tempfile::TempDir, BackupStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = BackupStore::open(dir.path().to_str().unwrap()).unwrap();
    (dir, store)
}

/// A directory store whose deletes can be made to fail.
fn faulty_store() -> (tempfile::TempDir, Arc<FaultyStore>, BackupStore) {
    let dir = tempfile::tempdir().unwrap();
    let fs = object_store::local::LocalFileSystem::new_with_prefix(dir.path())
        .unwrap()
        .with_automatic_cleanup(true);
    let faulty = Arc::new(FaultyStore::new(Arc::new(fs)));
    let store = BackupStore::from_object_store(faulty.clone(), "faulty://gc");
    (dir, faulty, store)
}

/// A backup as a real one leaves it: the object, contents, results,
/// log, volume data, and a released lease.
async fn put_backup(
    store: &BackupStore,
    name: &str,
    phase: BackupPhase,
    expiration: Option<SystemTime>,
) {
    let mut object = BackupObject::new(name, "velero", "uid", serde_json::json!({}));
    object.status.phase = phase;
    object.status.expiration = expiration.map(rfc3339);
    store
        .put_json(name, BackupFile::Metadata, &object)
        .await
        .unwrap();
    for file in [BackupFile::Contents, BackupFile::Results, BackupFile::Logs] {
        store
            .put(name, file, Bytes::from_static(b"x"))
            .await
            .unwrap();
    }
    let chunk = format!("backups/{name}/volumes/data/0123");
    store
        .put_key(&chunk, Bytes::from_static(b"x"))
        .await
        .unwrap();
    // The process that wrote it, ended: its lease given back.
    let writer = store.as_another_process();
    let lease = writer.acquire_lease(name, HOUR).await.unwrap();
    lease.release().await.unwrap();
}

fn outcomes(collected: &[Collected]) -> Vec<(String, String)> {
    collected
        .iter()
        .map(|c| {
            let what = match &c.outcome {
                Outcome::Deleted(_) => "deleted".to_string(),
                Outcome::WouldDelete(_) => "would delete".to_string(),
                Outcome::Tidied => "tidied".to_string(),
                Outcome::Kept(k) => format!("kept {k:?}"),
                Outcome::Failed(e) => format!("failed: {e}"),
            };
            (c.name.clone(), what)
        })
        .collect()
}

/// Plants a VolumeSnapshot `shop/name` in the overlay at `overlay_dir`, as
/// pvc-snapshot would create it for backup `backup` (uid `backup_uid`): the
/// host's labels and annotation, uid `u-<name>`.
fn plant_snapshot(
    overlay_dir: &std::path::Path,
    name: &str,
    backup: &str,
    backup_uid: &str,
) -> iar_core::item::ItemRef {
    use iar_core::cluster::writes::{BACKUP_NAME_LABEL, BACKUP_UID_LABEL, CREATED_BY_ANNOTATION};
    let id =
        iar_core::item::ItemRef::new("snapshot.storage.k8s.io", "volumesnapshots", "shop", name);
    let value = serde_json::json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
        "metadata": {"name": name, "namespace": "shop", "uid": format!("u-{name}"),
            "labels": {BACKUP_NAME_LABEL: iar_core::names::label_value(backup),
                BACKUP_UID_LABEL: backup_uid},
            "annotations": {CREATED_BY_ANNOTATION: "pvc-snapshot"}},
        "spec": {"source": {"persistentVolumeClaimName": "data"}}});
    assert!(iar_core::cluster::overlay::create(overlay_dir, &id, &value).unwrap());
    id
}

/// Expired and ended (Completed or Failed alike) goes, with every key
/// under it; not yet expired, still running, or stored without an
/// expiration stays as it was. A dry run says the same and deletes
/// nothing.
#[tokio::test]
async fn a_sweep_deletes_only_expired_backups_that_ended() {
    let (dir, store) = temp_store();
    let now = t0();
    let past = Some(now - HOUR);
    put_backup(&store, "done", BackupPhase::Completed, past).await;
    put_backup(&store, "failed", BackupPhase::Failed, past).await;
    put_backup(&store, "fresh", BackupPhase::Completed, Some(now + HOUR)).await;
    put_backup(&store, "legacy", BackupPhase::PartiallyFailed, None).await;
    let waiting = BackupPhase::WaitingForPluginOperations;
    put_backup(&store, "waiting", waiting, past).await;
    let c = controller(store.clone());

    let dry = c.collect_garbage(now, true).await.unwrap();
    let kept_all = |o: &[(String, String)]| {
        assert_eq!(o[2].1, format!("kept NotYet({:?})", rfc3339(now + HOUR)));
        assert_eq!(o[3].1, "kept NoExpiration");
        assert_eq!(o[4].1, format!("kept Running({waiting:?})"));
    };
    let o = outcomes(&dry);
    assert_eq!((&*o[0].1, &*o[1].1), ("would delete", "would delete"));
    kept_all(&o);
    assert_eq!(store.list_backups().await.unwrap().len(), 5);

    let swept = c.collect_garbage(now, false).await.unwrap();
    let o = outcomes(&swept);
    assert_eq!((&*o[0].0, &*o[0].1), ("done", "deleted"));
    assert_eq!((&*o[1].0, &*o[1].1), ("failed", "deleted"));
    kept_all(&o);
    let Outcome::Deleted(last) = &swept[0].outcome else {
        unreachable!()
    };
    assert_eq!(last.status.phase, BackupPhase::Completed, "as it was found");
    for name in ["done", "failed"] {
        assert_eq!(store.backup_keys(name).await.unwrap(), Vec::<String>::new());
        assert!(!dir.path().join("backups").join(name).exists(), "{name}");
    }
    assert_eq!(
        store.list_backups().await.unwrap(),
        ["fresh", "legacy", "waiting"]
    );
    // What stays is untouched: five files and a lease each.
    for name in ["fresh", "legacy", "waiting"] {
        assert_eq!(store.backup_keys(name).await.unwrap().len(), 6, "{name}");
    }
    assert!(c.tracked_backups().await.is_empty());
}

/// One backup that cannot be deleted (an object that does not parse,
/// a lease another live process holds) is reported with its name and
/// why; the sweep deletes the others.
#[tokio::test]
async fn one_failure_is_reported_and_the_others_still_go() {
    let (_dir, store) = temp_store();
    let now = t0();
    let past = Some(now - HOUR);
    put_backup(&store, "a", BackupPhase::Completed, past).await;
    put_backup(&store, "busy", BackupPhase::Completed, past).await;
    put_backup(&store, "corrupt", BackupPhase::Completed, past).await;
    put_backup(&store, "z", BackupPhase::Completed, past).await;
    store
        .put("corrupt", BackupFile::Metadata, Bytes::from_static(b"{"))
        .await
        .unwrap();
    let _held = store.acquire_lease("busy", HOUR).await.unwrap();

    let o = outcomes(
        &controller(store.clone())
            .collect_garbage(now, false)
            .await
            .unwrap(),
    );
    assert_eq!(o[0], ("a".into(), "deleted".into()));
    assert_eq!(o[3], ("z".into(), "deleted".into()));
    assert!(
        o[1].1.starts_with("failed: deleting expired backup \"busy\": backup \"busy\" is being driven by another process"),
        "{o:?}"
    );
    assert!(
        o[2].1
            .starts_with("failed: deleting expired backup \"corrupt\"")
            && o[2].1.contains("velero-backup.json is corrupt"),
        "{o:?}"
    );
    assert_eq!(store.list_backups().await.unwrap(), ["busy", "corrupt"]);
}

/// A deletion that stops part way leaves the object in phase
/// `Deleting` with some files gone; the next sweep finishes it, even
/// at a time before the expiration (once begun, a deletion is never
/// undone).
#[tokio::test]
async fn an_interrupted_deletion_is_finished_by_the_next_sweep() {
    let (_dir, faulty, store) = faulty_store();
    let now = t0();
    put_backup(&store, "b", BackupPhase::Completed, Some(now - HOUR)).await;
    let c = controller(store.clone());

    faulty.fail_deletes_after(Some(2));
    let o = outcomes(&c.collect_garbage(now, false).await.unwrap());
    faulty.fail_deletes_after(None);
    assert!(
        o[0].1.starts_with(
            "failed: deleting expired backup \"b\": backup store faulty://gc: backups/b/"
        ) && o[0].1.contains("injected failure: delete"),
        "{o:?}"
    );
    let object: BackupObject = store
        .get_json("b", BackupFile::Metadata)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(object.status.phase, BackupPhase::Deleting);
    let left = store.backup_keys("b").await.unwrap();
    let data = left.iter().filter(|k| key_role("b", k) == KeyRole::Data);
    assert!(
        (1..4).contains(&data.count()),
        "some of the four data files deleted, not all: {left:?}"
    );
    // Nothing drives a backup being deleted.
    let err = c.resume("b").await.unwrap_err();
    assert!(matches!(err, PhaseError::Deleting(_)), "{err}");

    let o = outcomes(&c.collect_garbage(now - 2 * HOUR, false).await.unwrap());
    assert_eq!(o, [("b".to_string(), "deleted".to_string())]);
    assert_eq!(store.list_backups().await.unwrap(), Vec::<String>::new());
}

/// Only a free lease left (the deletion stopped after the object went)
/// is tidied away; a lease that is held with no object yet is a backup
/// being created, and stays.
#[tokio::test]
async fn lease_files_left_by_a_deletion_are_tidied() {
    let (_dir, store) = temp_store();
    store
        .acquire_lease("left", HOUR)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let _creating = store.acquire_lease("new", HOUR).await.unwrap();
    let o = outcomes(
        &controller(store.clone())
            .collect_garbage(t0(), false)
            .await
            .unwrap(),
    );
    assert_eq!(
        o,
        [
            ("left".to_string(), "tidied".to_string()),
            ("new".to_string(), "kept NoObject".to_string())
        ]
    );
    assert_eq!(store.list_backups().await.unwrap(), ["new"]);
}

/// A planted expired backup whose created-objects record lists another
/// backup's VolumeSnapshot (with that snapshot's real uid) deletes
/// only what is labelled as created for it, name and uid: not the other
/// backup's, nor one that bears its uid under another backup's name.
/// Each refusal is in the log with its rule; the sweep still deletes
/// the backup and its own snapshot.
#[tokio::test]
async fn a_planted_created_objects_record_deletes_only_the_backups_own_objects() {
    use iar_core::cluster::overlay;
    use iar_core::cluster::writes::CreatedObject;
    let (_dir, store) = temp_store();
    let overlay_dir = tempfile::tempdir().unwrap();
    let snapshot = |name: &str, backup: &str, backup_uid: &str| CreatedObject {
        plugin: "pvc-snapshot".into(),
        id: plant_snapshot(overlay_dir.path(), name, backup, backup_uid),
        uid: format!("u-{name}"),
    };
    // put_backup's backups have the uid "uid".
    let own = snapshot("own", "planted", "uid");
    let victim = snapshot("victim", "other", "other-uid");
    let namesake = snapshot("namesake", "other", "uid");
    let now = t0();
    put_backup(&store, "planted", BackupPhase::Completed, Some(now - HOUR)).await;
    store
        .put_json(
            "planted",
            BackupFile::CreatedObjects,
            &[&victim, &own, &namesake],
        )
        .await
        .unwrap();
    let (c, lines) = overlay_controller(&store, overlay_dir.path());

    let o = outcomes(&c.collect_garbage(now, false).await.unwrap());
    assert_eq!(o, [("planted".to_string(), "deleted".to_string())]);
    let exists = |o: &CreatedObject| overlay::path_of(overlay_dir.path(), &o.id).exists();
    assert!(!exists(&own), "its own snapshot goes");
    assert!(exists(&victim), "another backup's snapshot stays");
    assert!(exists(&namesake), "its uid under another name stays");
    let lines = lines.lock().unwrap();
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l.contains("(rule: gc-not-owner)"))
        .collect();
    assert_eq!(refused.len(), 2, "{lines:#?}");
    assert!(
        refused[0].contains(
            "not deleting volumesnapshots.snapshot.storage.k8s.io shop/victim (listed as created by plugin pvc-snapshot): it is not labelled iar.dev/backup-name=planted and iar.dev/backup-uid=uid"
        ),
        "{refused:?}"
    );
    assert!(refused[1].contains("shop/namesake"), "{refused:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("deleted") && l.contains("shop/own")),
        "{lines:#?}"
    );
}

/// A directory with no object whose lease is free: a first pass that
/// never stored its object, or a deletion cut short, with a late file
/// (the fault campaign's seed 3314: a created-objects record and volume
/// progress after the deletion). The sweep tidies it: what its plugins
/// created and still bears its name goes (another backup's object, listed
/// in the record, stays), then its files and leases. A directory with a
/// file iar does not write, or a hook ledger (unfreezes owed), is left.
#[tokio::test]
async fn a_pass_that_never_stored_its_object_is_tidied_with_what_it_created() {
    use iar_core::cluster::overlay;
    use iar_core::cluster::writes::CreatedObject;
    let (_dir, store) = temp_store();
    let overlay_dir = tempfile::tempdir().unwrap();
    let snapshot = |name: &str, backup: &str| CreatedObject {
        plugin: "pvc-snapshot".into(),
        id: plant_snapshot(overlay_dir.path(), name, backup, "never-known"),
        uid: format!("u-{name}"),
    };
    let own = snapshot("own", "b1");
    let other = snapshot("other", "b2");
    // Its files as the process that wrote them left them.
    let writer = store.as_another_process();
    for name in ["b1", "foreign", "ledgered"] {
        store
            .acquire_lease(name, HOUR)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        writer
            .put_json(name, BackupFile::VolumeProgress, &Vec::<u8>::new())
            .await
            .unwrap();
    }
    writer
        .put_json("b1", BackupFile::CreatedObjects, &[&own, &other])
        .await
        .unwrap();
    writer
        .put_key(
            "backups/foreign/notes.txt",
            bytes::Bytes::from_static(b"not iar's"),
        )
        .await
        .unwrap();
    writer
        .put_json("ledgered", BackupFile::HookLedger, &Vec::<u8>::new())
        .await
        .unwrap();
    let (c, _lines) = overlay_controller(&store, overlay_dir.path());

    let o = outcomes(&c.collect_garbage(t0(), false).await.unwrap());
    assert_eq!(
        o,
        [
            ("b1".to_string(), "tidied".to_string()),
            ("foreign".to_string(), "kept NoObject".to_string()),
            ("ledgered".to_string(), "kept NoObject".to_string()),
        ]
    );
    let exists = |o: &CreatedObject| overlay::path_of(overlay_dir.path(), &o.id).exists();
    assert!(!exists(&own), "what it created goes");
    assert!(exists(&other), "another backup's object stays");
    assert_eq!(store.list_backups().await.unwrap(), ["foreign", "ledgered"]);
    assert!(
        store
            .backup_keys("foreign")
            .await
            .unwrap()
            .contains(&"backups/foreign/notes.txt".to_string())
    );
}

/// A tidy cut short by a store fault never leaves the tarball without
/// the volume records beside it: the tarball is what a process taking the
/// backup over resumes from, and without the records it would wait for no
/// volume and complete the backup with none (the fault campaign's class
/// of seeds 1222, 3230 and 3527: a Completed backup with no volume
/// records). The next sweep finishes the tidy.
#[tokio::test]
async fn a_tidy_cut_short_leaves_nothing_a_taker_would_resume() {
    let (_dir, faulty, store) = faulty_store();
    store
        .acquire_lease("b1", HOUR)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let writer = store.as_another_process();
    writer
        .put_json("b1", BackupFile::VolumeProgress, &Vec::<u8>::new())
        .await
        .unwrap();
    writer
        .put_key(
            &BackupFile::Contents.key("b1"),
            bytes::Bytes::from_static(b"tarball"),
        )
        .await
        .unwrap();
    let c = controller(store.clone());

    // One delete for the tidy's own lease taking (the generation before
    // its own), one of its files, then none.
    faulty.fail_deletes_after(Some(2));
    let o = outcomes(&c.collect_garbage(t0(), false).await.unwrap());
    faulty.fail_deletes_after(None);
    assert!(o[0].1.starts_with("failed"), "{o:?}");
    let keys = store.backup_keys("b1").await.unwrap();
    assert!(!keys.contains(&BackupFile::Contents.key("b1")), "{keys:?}");
    assert!(
        keys.contains(&BackupFile::VolumeProgress.key("b1")),
        "{keys:?}"
    );

    let o = outcomes(&c.collect_garbage(t0(), false).await.unwrap());
    assert_eq!(o, [("b1".to_string(), "tidied".to_string())]);
    assert!(store.list_backups().await.unwrap().is_empty());
}

/// The garbage collector alone, its time from a stepped clock: a backup
/// is kept until the clock reaches its expiration and deleted once it
/// has; a deletion asked for does not wait for the expiration, but never
/// takes a backup still running.
#[tokio::test]
async fn expiry_is_judged_on_the_clock() {
    let parts = Parts::new();
    let expires = parts.now() + HOUR;
    put_backup(&parts.store, "b", BackupPhase::Completed, Some(expires)).await;
    put_backup(&parts.store, "running", BackupPhase::InProgress, None).await;
    put_backup(&parts.store, "asked", BackupPhase::Completed, Some(expires)).await;
    let gc = parts.gc();

    parts.clock.advance(HOUR - Duration::from_secs(1));
    let kept = gc.collect("b", parts.now(), false).await.unwrap();
    assert!(
        matches!(&kept, Outcome::Kept(Kept::NotYet(at)) if *at == rfc3339(expires)),
        "{kept:?}"
    );
    parts.clock.advance(Duration::from_secs(1));
    let gone = gc.collect("b", parts.now(), false).await.unwrap();
    assert!(matches!(gone, Outcome::Deleted(_)), "{gone:?}");
    assert_eq!(
        parts.store.backup_keys("b").await.unwrap(),
        Vec::<String>::new()
    );

    let running = gc.delete_backup("running", false).await.unwrap();
    assert!(
        matches!(
            running,
            Outcome::Kept(Kept::Running(BackupPhase::InProgress))
        ),
        "{running:?}"
    );
    let asked = gc.delete_backup("asked", false).await.unwrap();
    assert!(matches!(asked, Outcome::Deleted(_)), "{asked:?}");
    assert_eq!(parts.store.list_backups().await.unwrap(), ["running"]);
}

/// A sweep's failure is typed: the backup's name and the error that
/// stopped it, as its source.
#[tokio::test]
async fn a_sweep_failure_keeps_its_cause() {
    let parts = Parts::new();
    put_backup(
        &parts.store,
        "held",
        BackupPhase::Completed,
        Some(parts.now()),
    )
    .await;
    let _held = parts.store.acquire_lease("held", HOUR).await.unwrap();
    let swept = parts
        .gc()
        .collect_garbage(parts.now(), false)
        .await
        .unwrap();
    let Outcome::Failed(failure) = &swept[0].outcome else {
        panic!("{swept:?}")
    };
    assert_eq!(failure.name, "held");
    assert!(
        matches!(failure.source, PhaseError::Lease(LeaseError::Held { .. })),
        "{failure:?}"
    );
}

/// A record planted in the store whose `metadata.name` is another
/// backup's: the sweep deletes the planted directory, but tells no Backup
/// resource it is Deleting (the status sink writes the status of the
/// resource the object names).
#[tokio::test]
async fn a_planted_record_naming_another_backup_tells_that_backup_nothing() {
    let (_dir, store) = temp_store();
    let now = t0();
    put_backup(&store, "planted", BackupPhase::Completed, Some(now - HOUR)).await;
    let mut object: BackupObject = store
        .get_json("planted", BackupFile::Metadata)
        .await
        .unwrap()
        .unwrap();
    object.metadata.name = "victim".into();
    store
        .put_json("planted", BackupFile::Metadata, &object)
        .await
        .unwrap();
    put_backup(&store, "own", BackupPhase::Completed, Some(now - HOUR)).await;
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = told.clone();
    let c = controller(store.clone()).with_status_sink(Arc::new(move |o: &BackupObject| {
        seen.lock().unwrap().push(o.metadata.name.clone())
    }));
    let o = outcomes(&c.collect_garbage(now, false).await.unwrap());
    assert_eq!(
        o,
        [
            ("own".to_string(), "deleted".to_string()),
            ("planted".to_string(), "deleted".to_string())
        ]
    );
    assert_eq!(*told.lock().unwrap(), ["own"]);
}

/// A backup planted under the name `sha256-<hex>` that a long-named
/// victim's label holds, with the victim's uid copied, lists the
/// victim's VolumeSnapshot: its labels match, but its full name cannot be
/// told from them, so it stays (rule `gc-full-name`). An object whose
/// full-name annotation is the backup's own still goes; one annotated
/// with another backup's name stays.
#[tokio::test]
async fn a_planted_digest_named_backup_deletes_no_long_named_victims_object() {
    use super::super::created::BACKUP_FULL_NAME_ANNOTATION;
    use iar_core::cluster::overlay;
    use iar_core::cluster::writes::{
        BACKUP_NAME_LABEL, BACKUP_UID_LABEL, CREATED_BY_ANNOTATION, CreatedObject,
    };
    use iar_core::item::ItemRef;
    let (_dir, store) = temp_store();
    let overlay_dir = tempfile::tempdir().unwrap();
    let victim_name = format!("nightly-{}", "x".repeat(80));
    let digest = iar_core::names::label_value(&victim_name);
    assert!(digest.starts_with("sha256-"), "{digest}");
    let snapshot = |name: &str, full: Option<&str>| {
        let id = ItemRef::new("snapshot.storage.k8s.io", "volumesnapshots", "shop", name);
        let mut annotations = serde_json::json!({CREATED_BY_ANNOTATION: "pvc-snapshot"});
        if let Some(full) = full {
            annotations[BACKUP_FULL_NAME_ANNOTATION] = full.into();
        }
        let value = serde_json::json!({
            "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
            "metadata": {"name": name, "namespace": "shop", "uid": format!("u-{name}"),
                "labels": {BACKUP_NAME_LABEL: digest.clone(), BACKUP_UID_LABEL: "uid"},
                "annotations": annotations},
            "spec": {"source": {"persistentVolumeClaimName": "data"}}});
        assert!(overlay::create(overlay_dir.path(), &id, &value).unwrap());
        CreatedObject {
            plugin: "pvc-snapshot".into(),
            id,
            uid: format!("u-{name}"),
        }
    };
    // The victim's objects, labelled with its digest and uid ("uid", as
    // put_backup's backups have).
    let victim = snapshot("victim", None);
    let annotated = snapshot("annotated", Some(&victim_name));
    let planted_own = snapshot("planted-own", Some(&digest));
    let now = t0();
    put_backup(&store, &digest, BackupPhase::Completed, Some(now - HOUR)).await;
    store
        .put_json(
            &digest,
            BackupFile::CreatedObjects,
            &[&victim, &annotated, &planted_own],
        )
        .await
        .unwrap();
    let (c, lines) = overlay_controller(&store, overlay_dir.path());
    let o = outcomes(&c.collect_garbage(now, false).await.unwrap());
    assert_eq!(o, [(digest.clone(), "deleted".to_string())]);
    let exists = |o: &CreatedObject| overlay::path_of(overlay_dir.path(), &o.id).exists();
    assert!(exists(&victim), "the long-named victim's snapshot stays");
    assert!(exists(&annotated), "an object of another full name stays");
    assert!(!exists(&planted_own), "its own, by full name, goes");
    let lines = lines.lock().unwrap();
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l.contains("(rule: gc-full-name)"))
        .collect();
    assert_eq!(refused.len(), 2, "{lines:#?}");
    assert!(refused[0].contains("shop/victim"), "{refused:?}");
    assert!(refused[1].contains(&victim_name), "{refused:?}");
}

/// Counts the hooks it is asked to run, by phase and pod; each succeeds.
#[derive(Default)]
struct CountingRunner {
    ran: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl crate::backup::hooks::HookRunner for CountingRunner {
    async fn run(
        &self,
        target: &crate::backup::hooks::HookTarget,
        hook: &crate::backup::hooks::ResolvedHook,
    ) -> crate::backup::hooks::HookRun {
        self.ran
            .lock()
            .unwrap()
            .push(format!("{:?} {}", hook.phase, target.pod.name));
        crate::backup::hooks::HookStatus::Succeeded.into()
    }
}

/// A controller's expired backup whose ledger says pod `db-0` was frozen
/// and never unfrozen (its block's machine lost it, or skipped the hook
/// because the backup was being deleted), with the pod in `items`.
async fn put_frozen_backup(store: &BackupStore, items: &std::path::Path) {
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": "shop", "annotations": {
            "pre.hook.backup.velero.io/command": "[\"fsfreeze\", \"--freeze\", \"/data\"]",
            "post.hook.backup.velero.io/command": "[\"fsfreeze\", \"--unfreeze\", \"/data\"]",
        }},
        "spec": {"containers": [{"name": "db"}]}});
    std::fs::write(items.join("pod.json"), pod.to_string()).unwrap();
    put_backup(store, "frozen", BackupPhase::Failed, Some(t0() - HOUR)).await;
    let mut object: BackupObject = store
        .get_json("frozen", BackupFile::Metadata)
        .await
        .unwrap()
        .unwrap();
    object.metadata.annotations.insert(
        crate::backup::object::RESOURCE_UID_ANNOTATION.into(),
        "resource-uid".into(),
    );
    store
        .put_json("frozen", BackupFile::Metadata, &object)
        .await
        .unwrap();
    let frozen = crate::backup::block_work::LedgerEntry {
        pod: iar_core::item::ItemRef::new("", "pods", "shop", "db-0"),
        phase: "pre".into(),
        state: "succeeded".into(),
    };
    store
        .put_json("frozen", BackupFile::HookLedger, &[frozen])
        .await
        .unwrap();
}

/// A backup that goes while its ledger owes a pod's unfreeze runs that
/// unfreeze first, once, claimed in the store; a process that runs no
/// hooks keeps a controller's backup for a controller to delete. Before,
/// the deletion took the ledger and the pod stayed frozen for good (the
/// fault campaign's seeds 1004, 1404 and 1411).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_runs_the_unfreeze_its_backup_owes_first() {
    let (_dir, store) = temp_store();
    let items = tempfile::tempdir().unwrap();
    put_frozen_backup(&store, items.path()).await;
    let cluster = Arc::new(iar_core::ManifestCluster::new(vec![
        items.path().to_path_buf(),
    ]));
    let settings = || Settings {
        lease_duration: Duration::from_secs(30),
        ..Settings::default()
    };

    let no_hooks = PhaseMachine::new(Vec::new(), store.clone(), cluster.clone(), settings());
    let o = outcomes(&no_hooks.collect_garbage(t0(), false).await.unwrap());
    assert_eq!(o, [("frozen".to_string(), "kept UnfreezeOwed".to_string())]);

    let runner = Arc::new(CountingRunner::default());
    let c = PhaseMachine::new(Vec::new(), store.clone(), cluster, settings())
        .with_hook_runner(runner.clone());
    let o = outcomes(&c.collect_garbage(t0(), false).await.unwrap());
    assert_eq!(o, [("frozen".to_string(), "deleted".to_string())]);
    assert_eq!(*runner.ran.lock().unwrap(), ["Post db-0"]);
    assert!(store.list_backups().await.unwrap().is_empty());

    // Owed by the ledger but claimed and ended (run by its claimer, whose
    // end the ledger lacks: a write lost): nothing is left to run, and a
    // process that runs no hooks deletes it. (Backed up again by another
    // process: this one gave its lease on the name back.)
    put_frozen_backup(&store.as_another_process(), items.path()).await;
    let ended = serde_json::json!({"holder": "another", "token": "t", "state": "succeeded"});
    store
        .claim_once("frozen", &["post", "shop", "db-0"], &ended)
        .await
        .unwrap();
    let o = outcomes(&no_hooks.collect_garbage(t0(), false).await.unwrap());
    assert_eq!(o, [("frozen".to_string(), "deleted".to_string())]);
    assert_eq!(runner.ran.lock().unwrap().len(), 1);

    // Claimed and never ended (its claimer crashed, maybe before its
    // exec): still owed, so a process that runs no hooks keeps it for one
    // that does, which runs it again (`rerun_tests`; seeds 4429, 4512).
    put_frozen_backup(&store.as_another_process(), items.path()).await;
    let started = serde_json::json!({"holder": "another", "token": "t", "state": "started"});
    store
        .claim_once("frozen", &["post", "shop", "db-0"], &started)
        .await
        .unwrap();
    let o = outcomes(&no_hooks.collect_garbage(t0(), false).await.unwrap());
    assert_eq!(o, [("frozen".to_string(), "kept UnfreezeOwed".to_string())]);
}

/// A Failed backup whose ledger owes its pod's unfreeze (a step's error
/// ended it before its blocks' post hooks ran) has it run by the next
/// sweep, once, though the backup is kept; a Completed one owing the same
/// is not touched (its blocks ran their post hooks, or claimed them).
/// Before, the pod stayed frozen until the backup's deletion (the fault
/// campaign's seeds 3668, 3670, 3671 and 3837).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_runs_the_unfreeze_a_failed_backup_owes() {
    let (_dir, store) = temp_store();
    let items = tempfile::tempdir().unwrap();
    put_frozen_backup(&store, items.path()).await;
    // Not expired: kept, and Failed.
    let mut object: BackupObject = store
        .get_json("frozen", BackupFile::Metadata)
        .await
        .unwrap()
        .unwrap();
    object.status.expiration = Some(rfc3339(t0() + HOUR));
    store
        .put_json("frozen", BackupFile::Metadata, &object)
        .await
        .unwrap();
    let cluster = Arc::new(iar_core::ManifestCluster::new(vec![
        items.path().to_path_buf(),
    ]));
    let runner = Arc::new(CountingRunner::default());
    let c = PhaseMachine::new(
        Vec::new(),
        store.clone(),
        cluster,
        Settings {
            lease_duration: Duration::from_secs(30),
            ..Settings::default()
        },
    )
    .with_hook_runner(runner.clone());

    for _ in 0..2 {
        let o = outcomes(&c.collect_garbage(t0(), false).await.unwrap());
        assert_eq!(
            o,
            [(
                "frozen".to_string(),
                format!("kept NotYet({:?})", rfc3339(t0() + HOUR))
            )]
        );
    }
    assert_eq!(*runner.ran.lock().unwrap(), ["Post db-0"]);

    // The same, Completed, its claim gone: left alone.
    store
        .delete_key("backups/frozen/frozen-claims/post/shop/db-0")
        .await
        .unwrap();
    object.status.phase = BackupPhase::Completed;
    store
        .as_another_process()
        .put_json("frozen", BackupFile::Metadata, &object)
        .await
        .unwrap();
    c.collect_garbage(t0(), false).await.unwrap();
    assert_eq!(runner.ran.lock().unwrap().len(), 1);
}

/// What a plugin created for a backup and the record lacks (a pass stopped
/// between the create and the record) is found by the backup's uid label
/// in the resources its pinned plugins could write, and deleted with it;
/// an object of another backup, or with the uid label and another name,
/// stays. Before, only the record was read, and the campaign's seed 1802
/// left a VolumeSnapshot behind.
#[tokio::test]
async fn what_the_record_lacks_is_found_by_the_backups_uid_label() {
    use iar_core::cluster::overlay;
    use iar_core::item::ItemRef;
    let (_dir, store) = temp_store();
    let overlay_dir = tempfile::tempdir().unwrap();
    let snapshot = |name: &str, backup: &str, backup_uid: &str| {
        plant_snapshot(overlay_dir.path(), name, backup, backup_uid)
    };
    let unrecorded = snapshot("unrecorded", "cut", "uid");
    let other = snapshot("other", "other", "other-uid");
    let namesake = snapshot("namesake", "other", "uid");
    let now = t0();
    put_backup(&store, "cut", BackupPhase::Failed, Some(now - HOUR)).await;
    let pinned = serde_json::json!([{"name": "pvc-snapshot", "digest": "00",
        "writes": ["volumesnapshots.snapshot.storage.k8s.io"]}]);
    store
        .put_json("cut", BackupFile::PluginSet, &pinned)
        .await
        .unwrap();
    let (c, _lines) = overlay_controller(&store, overlay_dir.path());

    let o = outcomes(&c.collect_garbage(now, false).await.unwrap());
    assert_eq!(o, [("cut".to_string(), "deleted".to_string())]);
    let exists = |id: &ItemRef| overlay::path_of(overlay_dir.path(), id).exists();
    assert!(!exists(&unrecorded), "its own unrecorded snapshot goes");
    assert!(exists(&other), "another backup's stays");
    assert!(
        exists(&namesake),
        "its uid under another backup's name stays"
    );
}

/// A live cluster in which every pod is gone (its node with it).
struct PodsGone;

impl iar_core::cluster::ClusterWriter for PodsGone {
    fn is_live(&self) -> bool {
        true
    }
}

#[async_trait::async_trait]
impl iar_core::cluster::ClusterReader for PodsGone {
    fn get(
        &self,
        _: &iar_core::item::ItemRef,
    ) -> Result<Option<serde_json::Value>, iar_core::cluster::ClusterError> {
        Ok(None)
    }
}

/// An unfreeze owed (claimed, never ended) to a pod that is gone leaves
/// nothing to undo: a process that runs no hooks deletes the backup,
/// where it keeps one whose pod is there for a controller (the
/// campaign's seed 4740: `iar delete` refused a backup whose pod had
/// gone with its node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfreeze_owed_to_a_pod_that_is_gone_keeps_nothing() {
    let (_dir, store) = temp_store();
    let items = tempfile::tempdir().unwrap();
    put_frozen_backup(&store, items.path()).await;
    let started = serde_json::json!({"holder": "crashed", "token": "t", "state": "started"});
    store
        .claim_once("frozen", &["post", "shop", "db-0"], &started)
        .await
        .unwrap();
    let no_hooks = PhaseMachine::new(
        Vec::new(),
        store.clone(),
        Arc::new(PodsGone),
        Settings {
            lease_duration: Duration::from_secs(30),
            ..Settings::default()
        },
    );
    let o = outcomes(&no_hooks.collect_garbage(t0(), false).await.unwrap());
    assert_eq!(o, [("frozen".to_string(), "deleted".to_string())]);
}
