use super::faulty::FaultyStore;
use super::*;
use serde_json::{Value, json};
use std::time::Duration;

fn temp_store() -> (tempfile::TempDir, BackupStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = BackupStore::open(dir.path().to_str().unwrap()).unwrap();
    (dir, store)
}

/// Free-form keys cannot leave `backups/<name>/`: a volume backupper
/// holding the store cannot overwrite another top-level object.
#[tokio::test]
async fn free_keys_stay_under_a_backup() {
    let (_dir, store) = temp_store();
    for bad in [
        "other/x",
        "backups/x",
        "backups//x",
        "backups/../x/y",
        "backups/a/../../x",
        "backups/a/./x",
        "/backups/a/x",
    ] {
        let err = store.put_key(bad, Bytes::from_static(b"1")).await;
        assert!(
            matches!(err, Err(StoreError::Name { .. })),
            "{bad}: {err:?}"
        );
        assert!(store.get_key(bad).await.is_err(), "{bad}");
    }
    let key = "backups/a/volumes/data/abc";
    assert!(!store.exists_key(key).await.unwrap());
    store.put_key(key, Bytes::from_static(b"1")).await.unwrap();
    assert!(store.exists_key(key).await.unwrap());
    assert_eq!(store.get_key(key).await.unwrap().unwrap(), &b"1"[..]);
    assert_eq!(store.count_under("backups/a/volumes").await.unwrap(), 1);
    assert_eq!(
        BackupFile::VolumeBackups.key("a"),
        "backups/a/a-volumebackups.json.gz"
    );
    assert_eq!(BackupFile::HookLedger.key("a"), "backups/a/a-hooks.json.gz");
}

#[test]
fn keys_follow_velero() {
    let b = "nightly";
    assert_eq!(
        BackupFile::Contents.key(b),
        "backups/nightly/nightly.tar.gz"
    );
    assert_eq!(
        BackupFile::Metadata.key(b),
        "backups/nightly/velero-backup.json"
    );
    assert_eq!(
        BackupFile::ItemOperations.key(b),
        "backups/nightly/nightly-itemoperations.json.gz"
    );
    assert_eq!(
        BackupFile::Results.key(b),
        "backups/nightly/nightly-results.gz"
    );
    assert_eq!(BackupFile::Logs.key(b), "backups/nightly/nightly-logs.gz");
}

#[tokio::test]
async fn put_get_list_on_a_directory() {
    let (dir, store) = temp_store();
    assert_eq!(store.list_backups().await.unwrap(), Vec::<String>::new());
    assert_eq!(store.get("b", BackupFile::Contents).await.unwrap(), None);
    for name in ["zeta", "alpha"] {
        store
            .put(name, BackupFile::Contents, Bytes::from_static(b"tar"))
            .await
            .unwrap();
    }
    assert_eq!(store.puts(), 2);
    assert_eq!(store.clone().puts(), 2, "clones share the counter");
    assert_eq!(
        store
            .get("zeta", BackupFile::Contents)
            .await
            .unwrap()
            .unwrap(),
        "tar"
    );
    assert!(dir.path().join("backups/zeta/zeta.tar.gz").is_file());
    assert_eq!(store.list_backups().await.unwrap(), ["alpha", "zeta"]);
    assert!(store.url().starts_with('/'));
    // Reopening the same directory as a file:// URL sees the same backups.
    let url = format!("file://{}", dir.path().display());
    let again = BackupStore::open(&url).unwrap();
    assert_eq!(again.list_backups().await.unwrap(), ["alpha", "zeta"]);
}

#[tokio::test]
async fn open_creates_a_missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a/b");
    let store = BackupStore::open(nested.to_str().unwrap()).unwrap();
    store
        .put_logs("b", &["one".into(), "two".into()])
        .await
        .unwrap();
    let gz = store.get("b", BackupFile::Logs).await.unwrap().unwrap();
    assert_eq!(gunzip(&gz).unwrap(), b"one\ntwo\n");
}

#[tokio::test]
async fn json_round_trips_plain_and_gzipped() {
    let (dir, store) = temp_store();
    let ops = json!([{"operationID": "op-1", "phase": "InProgress"}]);
    store
        .put_json("b", BackupFile::ItemOperations, &ops)
        .await
        .unwrap();
    let back: Value = store
        .get_json("b", BackupFile::ItemOperations)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, ops);
    let raw = std::fs::read(dir.path().join("backups/b/b-itemoperations.json.gz")).unwrap();
    assert_eq!(&raw[..2], [0x1f, 0x8b], "gzip magic");

    let meta = json!({"kind": "Backup", "status": {"phase": "Completed"}});
    store
        .put_json("b", BackupFile::Metadata, &meta)
        .await
        .unwrap();
    let raw = std::fs::read(dir.path().join("backups/b/velero-backup.json")).unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&raw).unwrap(),
        meta,
        "plain JSON"
    );
    let back: Value = store
        .get_json("b", BackupFile::Metadata)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, meta);
    let missing: Option<Value> = store.get_json("b", BackupFile::Results).await.unwrap();
    assert_eq!(missing, None);
}

#[tokio::test]
async fn garbage_is_corrupt_naming_the_key() {
    let (_dir, store) = temp_store();
    store
        .put("b", BackupFile::Results, Bytes::from_static(b"garbage"))
        .await
        .unwrap();
    let err = store
        .get_json::<Value>("b", BackupFile::Results)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("backups/b/b-results.gz"), "{err}");
    store
        .put("b", BackupFile::Metadata, Bytes::from_static(b"{not json"))
        .await
        .unwrap();
    let err = store
        .get_json::<Value>("b", BackupFile::Metadata)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("velero-backup.json is corrupt"),
        "{err}"
    );
}

fn faulty_store() -> (tempfile::TempDir, Arc<FaultyStore>, BackupStore) {
    let dir = tempfile::tempdir().unwrap();
    let fs = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let faulty = Arc::new(FaultyStore::new(Arc::new(fs)));
    let store = BackupStore::from_object_store(faulty.clone(), "faulty://test");
    (dir, faulty, store)
}

#[tokio::test]
async fn a_failed_put_leaves_the_previous_version() {
    let (_dir, faulty, store) = faulty_store();
    store
        .put_json("b", BackupFile::Metadata, &json!({"v": 1}))
        .await
        .unwrap();
    faulty.fail_puts(true);
    let err = store
        .put_json("b", BackupFile::Metadata, &json!({"v": 2}))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Io { .. }));
    assert!(
        msg.contains("faulty://test") && msg.contains("velero-backup.json"),
        "{msg}"
    );
    assert!(msg.contains("injected failure"), "{msg}");
    assert_eq!(store.puts(), 1, "failed puts are not counted");
    let now: Value = store
        .get_json("b", BackupFile::Metadata)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now, json!({"v": 1}));
}

#[tokio::test]
async fn a_reader_during_a_put_sees_the_old_version() {
    let (_dir, faulty, store) = faulty_store();
    store
        .put_json("b", BackupFile::Results, &json!(1))
        .await
        .unwrap();
    let guard = faulty.pause_puts_to("-results.gz");
    let writer = {
        let store = store.clone();
        tokio::spawn(async move { store.put_json("b", BackupFile::Results, &json!(2)).await })
    };
    tokio::time::timeout(Duration::from_secs(5), guard.paused())
        .await
        .unwrap();
    let seen: Value = store
        .get_json("b", BackupFile::Results)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen, json!(1));
    guard.release();
    writer.await.unwrap().unwrap();
    let seen: Value = store
        .get_json("b", BackupFile::Results)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen, json!(2));
}

#[test]
fn bad_locations_say_why() {
    for (location, want) in [
        ("s3://", "no bucket"),
        ("s3:// bucket", "not a URL"),
        ("http://[::1", "not a URL"),
        ("ftp://host/x", "unsupported scheme"),
    ] {
        let err = BackupStore::open(location).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, StoreError::Url { .. }), "{msg}");
        assert!(
            msg.contains(location) && msg.contains(want),
            "{location}: {msg}"
        );
    }
}

#[tokio::test]
async fn bad_backup_names_are_refused() {
    let (_dir, store) = temp_store();
    for name in ["", "a/b", "..", "."] {
        let err = store.get(name, BackupFile::Metadata).await.unwrap_err();
        assert!(matches!(err, StoreError::Name { .. }), "{name:?}: {err}");
    }
}

#[test]
fn s3_opens_without_network() {
    let store = BackupStore::open("s3://bucket/some/prefix").unwrap();
    assert_eq!(store.url(), "s3://bucket/some/prefix");
    assert_eq!(store.puts(), 0);
}

#[test]
fn a_credentials_failure_says_what_to_set() {
    let e = object_store::Error::Generic {
        store: "S3",
        source: "Error performing PUT http://169.254.169.254/latest/api/token: 403".into(),
    };
    assert!(super::credentials_hint(&e).contains("AWS_ACCESS_KEY_ID"));
    let other = object_store::Error::Generic {
        store: "S3",
        source: "connection refused".into(),
    };
    assert_eq!(super::credentials_hint(&other), "");
}

/// A collected backup's resource uid is remembered, under `plugins/`
/// (a key Velero's layout admits), and a uid that is not one key segment
/// is refused.
#[tokio::test]
async fn a_collected_resource_is_remembered() {
    let (dir, store) = temp_store();
    let uid = "4f1c2b7e-0000-4000-8000-000000000001";
    assert!(!store.was_collected(uid).await.unwrap());
    store.put_collected(uid).await.unwrap();
    assert!(store.was_collected(uid).await.unwrap());
    assert!(dir.path().join("plugins/iar/collected").join(uid).exists());
    assert!(matches!(
        store.was_collected("a/b").await.unwrap_err(),
        StoreError::Name { .. }
    ));
}

/// A claim is created once: the first caller gets it, the next finds it
/// with what the first wrote, and its holder may rewrite it.
#[tokio::test]
async fn a_claim_is_created_once() {
    let (_dir, store) = temp_store();
    let what = ["post", "shop", "db-0"];
    let mine = serde_json::json!({"token": "a"});
    assert_eq!(store.claim_once("b", &what, &mine).await.unwrap(), None);
    let theirs = serde_json::json!({"token": "b"});
    assert_eq!(
        store.claim_once("b", &what, &theirs).await.unwrap(),
        Some(mine)
    );
    let ended = serde_json::json!({"token": "a", "state": "succeeded"});
    store.update_claim("b", &what, &ended).await.unwrap();
    assert_eq!(store.read_claim("b", &what).await.unwrap(), Some(ended));
    assert!(
        store
            .claim_once("b", &["post", ".."], &theirs)
            .await
            .is_err()
    );
}

/// A holder stopped between its write's fence check and the write's end
/// does not hold a takeover off on a local store, and its write, resumed
/// after the takeover, lands nowhere: the takeover revoked its staging
/// (the race `cli::a_paused_holder_resumed_after_a_takeover_writes_nothing`
/// caught once, a SIGSTOP between the staged file and its rename; an
/// earlier lock made the takeover wait for ever instead).
#[tokio::test]
async fn a_takeover_revokes_a_local_write_between_its_check_and_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let store = BackupStore::open(dir.path().to_str().unwrap()).unwrap();
    let _lease = store
        .acquire_lease("b", std::time::Duration::from_millis(300))
        .await
        .unwrap();
    // Stopped mid-write: past its check, its staging known.
    let (fence, writing) = store.writing("b").await.unwrap();
    store.check_fence("b").await.unwrap();
    let staged = fence.staging.clone().expect("a local store stages");
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let taker = store.as_another_process();
    let taken = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        taker.acquire_lease("b", std::time::Duration::from_secs(30)),
    )
    .await
    .expect("a takeover does not wait for a stopped writer")
    .unwrap();
    let (path, _) = store.path("b", BackupFile::Results).unwrap();
    let target = store.local.as_ref().unwrap().file_of(&path).unwrap();
    // The held write resumes: refused, and nothing is where it would land.
    let late =
        super::local_stage::LocalStaging::put(&staged, target.clone(), Bytes::from_static(b"late"))
            .await;
    assert!(matches!(late, Err(super::local_stage::StageError::Revoked)));
    assert!(
        !target.exists(),
        "the stopped write landed after the takeover"
    );
    drop(writing);
    // The taker writes; the old holder's next write is refused.
    taker
        .put("b", BackupFile::Results, Bytes::from_static(b"taker"))
        .await
        .unwrap();
    let refused = store
        .put("b", BackupFile::Results, Bytes::from_static(b"late"))
        .await
        .unwrap_err();
    assert!(matches!(refused, StoreError::Fenced { .. }), "{refused}");
    assert_eq!(std::fs::read(&target).unwrap(), b"taker");
    drop(taken);
}

/// A lease is given back only once the writes already past their fence
/// check have ended: a release frees the lease at once, so a write still
/// on its way would land after the next holder began (the campaign's seed
/// 3134: a volume progress file 3 s after a takeover that followed a
/// release). Writes that come after the release are refused.
#[tokio::test]
async fn a_release_waits_for_the_writes_in_flight() {
    let (_dir, store) = temp_store();
    let lease = store
        .acquire_lease("b", std::time::Duration::from_secs(30))
        .await
        .unwrap();
    let (_, in_flight) = store.writing("b").await.unwrap();
    let release = tokio::spawn(lease.release());
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(!release.is_finished(), "released with a write in flight");
    drop(in_flight);
    release.await.unwrap().unwrap();
    let late = store
        .put("b", BackupFile::Results, Bytes::from_static(b"late"))
        .await
        .unwrap_err();
    assert!(matches!(late, StoreError::Fenced { .. }), "{late}");
}
