//! restic's lock rules as iar applies them: conflicts, the file's name and
//! encryption, refresh, loss, stale locks. restic's own binary reading and
//! honouring these locks is tested in `tests/restic_locks.rs`.

use crate::creation_tests::{memory_store, names, password, runtime};
use crate::crypto::{RepoKey, storage_id};
use crate::{LockFile, LockOptions, RepositoryError, VolumeRepository};
use bytes::Bytes;
use iar_core::store::BackupStore;
use iar_core::store::faulty::FaultyStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use std::sync::Arc;
use std::time::Duration;

fn options() -> LockOptions {
    LockOptions {
        retry_for: Duration::ZERO,
        ..LockOptions::default()
    }
}

fn open(store: &BackupStore, rt: &tokio::runtime::Runtime) -> VolumeRepository {
    VolumeRepository::open_or_init(store, "shop", &password("pw"), rt.handle())
        .unwrap()
        .with_lock_options(options())
}

fn key(repo: &VolumeRepository) -> RepoKey {
    RepoKey::from_master(&repo.repo.key()).unwrap()
}

fn read_lock(store: &BackupStore, rt: &tokio::runtime::Runtime, id: &str) -> Bytes {
    let path = Path::from(format!("restic/shop/locks/{id}"));
    rt.block_on(async { store.object_store().get(&path).await?.bytes().await })
        .unwrap()
}

#[test]
fn exclusive_conflicts_with_any_lock_and_shared_only_with_exclusive() {
    let rt = runtime();
    let store = memory_store();
    let repo = open(&store, &rt);

    let shared = repo.lock(false).unwrap();
    let another_shared = repo.lock(false).unwrap();
    let refused = repo.lock(true).unwrap_err();
    assert!(
        matches!(refused, RepositoryError::Locked { .. }),
        "{refused}"
    );
    let text = refused.to_string();
    assert!(text.contains("(rule: repository-lock)"), "{text}");
    assert!(
        text.contains(&format!("PID {}", std::process::id())),
        "{text}"
    );
    assert!(text.contains(&crate::locks::hostname()), "{text}");
    assert!(matches!(
        repo.prune(false),
        Err(RepositoryError::Locked { .. })
    ));
    // Forgetting beside a shared lock (a backup) is allowed.
    assert_eq!(repo.forget("b1", "").unwrap(), 0);
    drop((shared, another_shared));
    assert_eq!(names(&store, &rt, "locks"), Vec::<String>::new());

    let exclusive = repo.lock(true).unwrap();
    assert!(matches!(
        repo.lock(false),
        Err(RepositoryError::Locked { .. })
    ));
    drop(exclusive);
    repo.prune(false).unwrap();
    assert_eq!(names(&store, &rt, "locks"), Vec::<String>::new());
}

/// The file is restic's: named by the SHA-256 of its stored bytes, which
/// decrypt with the master key to restic's JSON, with the real pid and
/// host name.
#[test]
fn a_lock_file_is_named_by_its_hash_and_holds_restics_json() {
    let rt = runtime();
    let store = memory_store();
    let repo = open(&store, &rt);
    let lock = repo.lock(true).unwrap();
    assert_eq!(names(&store, &rt, "locks"), vec![lock.id()]);
    let stored = read_lock(&store, &rt, &lock.id());
    assert_eq!(storage_id(&stored), lock.id());
    let json: serde_json::Value =
        serde_json::from_slice(&key(&repo).decrypt(&stored).unwrap()).unwrap();
    assert_eq!(json["exclusive"], true);
    assert_eq!(json["pid"], std::process::id());
    assert_eq!(json["hostname"], crate::locks::hostname());
    assert!(json["username"].as_str().unwrap().contains("iar"), "{json}");
    let time: rustic_core::jiff::Timestamp = json["time"].as_str().unwrap().parse().unwrap();
    assert!(time.as_second() > 0);
}

#[test]
fn a_held_lock_is_refreshed_and_removed_on_drop() {
    let rt = runtime();
    let store = memory_store();
    let repo = open(&store, &rt).with_lock_options(LockOptions {
        refresh_every: Duration::from_millis(100),
        ..options()
    });
    let lock = repo.lock(false).unwrap();
    let first = lock.id();
    std::thread::sleep(Duration::from_millis(450));
    assert_ne!(lock.id(), first, "refreshed");
    assert_eq!(
        names(&store, &rt, "locks"),
        vec![lock.id()],
        "the old one deleted"
    );
    assert!(!lock.lost());
    drop(lock);
    assert_eq!(names(&store, &rt, "locks"), Vec::<String>::new());
}

/// A holder that cannot refresh until others may judge its lock stale, or
/// whose lock someone removed, reports the lock lost.
#[test]
fn a_lock_that_cannot_be_refreshed_or_was_removed_is_lost() {
    let rt = runtime();
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty = Arc::new(FaultyStore::new(inner.clone()));
    let store = BackupStore::from_object_store(faulty.clone(), "memory:///");
    let quick = LockOptions {
        refresh_every: Duration::from_millis(100),
        // Lost a little before 4 s after the lock's time: far past the
        // first check even on a loaded machine, which once took more than
        // the 1 s this was.
        stale_after: Duration::from_millis(4000),
        ..options()
    };
    let repo = open(&store, &rt).with_lock_options(quick);
    let lock = repo.lock(false).unwrap();
    faulty.fail_puts(true);
    std::thread::sleep(Duration::from_millis(200));
    assert!(!lock.lost(), "not yet");
    eventually(|| lock.lost(), "lost once unrefreshed past its stale time");
    assert!(matches!(
        lock.check(),
        Err(RepositoryError::LockLost { .. })
    ));
    faulty.fail_puts(false);
    drop(lock);

    let lock = repo.lock(false).unwrap();
    let path = Path::from(format!("restic/shop/locks/{}", lock.id()));
    rt.block_on(store.object_store().delete(&path)).unwrap();
    eventually(|| lock.lost(), "lost once removed by someone else");
}

/// Polls `done` every 20 ms for at most 30 s: what a test waits for, not
/// how fast the machine is.
fn eventually(done: impl Fn() -> bool, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "not within 30 s: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stale locks (restic's rule) do not stand in the way, and are removed
/// as `restic unlock` would: one 31 minutes old from another host, one
/// from this host whose process is gone. A fresh one from another host
/// stands.
#[test]
fn stale_locks_are_ignored_and_removed() {
    let rt = runtime();
    let store = memory_store();
    let repo = open(&store, &rt);
    let write = |lock: &LockFile| repo.locks.write(lock).unwrap();
    let old =
        rustic_core::jiff::Timestamp::now() - rustic_core::jiff::SignedDuration::from_mins(31);
    let mine = LockFile::this_process(true, "restic");
    let long_ago = write(&LockFile {
        time: old.to_string(),
        hostname: "another-host".into(),
        ..mine.clone()
    });
    let dead_here = write(&LockFile {
        pid: i64::from(i32::MAX),
        ..mine.clone()
    });
    let exclusive = repo.lock(true).unwrap();
    assert_eq!(names(&store, &rt, "locks"), vec![exclusive.id()]);
    assert!(![long_ago, dead_here].contains(&exclusive.id()));
    drop(exclusive);

    let fresh_elsewhere = write(&LockFile {
        hostname: "another-host".into(),
        ..mine
    });
    let refused = repo.lock(false).unwrap_err().to_string();
    assert!(refused.contains("another-host"), "{refused}");
    assert_eq!(names(&store, &rt, "locks"), vec![fresh_elsewhere]);
}

/// A lock an iar holder in another pod left when it was killed (another
/// host, so its pid cannot be probed) declares its window: iar removes it
/// once 11 minutes old, where a restic lock as old still stands.
#[test]
fn a_killed_iar_holders_lock_is_stale_after_its_declared_window() {
    let rt = runtime();
    let store = memory_store();
    let repo = open(&store, &rt);
    let eleven_ago =
        rustic_core::jiff::Timestamp::now() - rustic_core::jiff::SignedDuration::from_mins(11);
    let killed = LockFile {
        time: eleven_ago.to_string(),
        hostname: "iar-controller-7d9f-x2".into(),
        ..LockFile::this_process(true, "iar controller")
    };
    let restics = repo.locks.write(&killed).unwrap();
    let refused = repo.lock(false).unwrap_err().to_string();
    assert!(refused.contains("iar-controller-7d9f-x2"), "{refused}");
    assert_eq!(names(&store, &rt, "locks"), vec![restics.clone()]);
    repo.locks.remove(&restics).unwrap();

    let iars = repo
        .locks
        .write(&killed.declaring(crate::locks::OWN_STALE_AFTER))
        .unwrap();
    let taken = repo.lock(true).unwrap();
    assert_eq!(names(&store, &rt, "locks"), vec![taken.id()]);
    assert_ne!(taken.id(), iars);
}

/// restic compresses its lock files in a version 2 repository (a version
/// byte, then zstd); they are read as well as plain ones. A file that does
/// not decrypt refuses the lock, as restic's `invalid lock file`.
#[test]
fn compressed_locks_are_read_and_invalid_ones_refuse() {
    let rt = runtime();
    let store = memory_store();
    let repo = open(&store, &rt);
    let lock = LockFile {
        hostname: "another-host".into(),
        ..LockFile::this_process(true, "restic")
    };
    let mut plain = vec![2u8];
    plain.extend(zstd::encode_all(&serde_json::to_vec(&lock).unwrap()[..], 3).unwrap());
    let stored = key(&repo).encrypt(&plain);
    let id = storage_id(&stored);
    let put = |id: &str, bytes: Vec<u8>| {
        let path = Path::from(format!("restic/shop/locks/{id}"));
        rt.block_on(store.object_store().put(&path, Bytes::from(bytes).into()))
            .unwrap();
    };
    put(&id, stored);
    let refused = repo.lock(false).unwrap_err().to_string();
    assert!(refused.contains("an exclusive lock of PID"), "{refused}");
    let path = Path::from(format!("restic/shop/locks/{id}"));
    rt.block_on(store.object_store().delete(&path)).unwrap();

    put(&"f".repeat(64), b"not encrypted".repeat(4));
    let refused = repo.lock(false).unwrap_err().to_string();
    assert!(refused.contains("invalid lock file"), "{refused}");
    assert!(refused.contains("(rule: repository-lock)"), "{refused}");
}
