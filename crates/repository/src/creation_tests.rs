//! Creating and opening a repository when writers race, stall, fail, or
//! left a stray key: on an in-memory store (conditional update) and a
//! local one (delete-then-create takeover).

use crate::crypto::RepoKey;
use crate::{Creation, KeyStatus, Password, RepositoryError, VolumeRepository, prefix};
use bytes::Bytes;
use futures::TryStreamExt;
use iar_core::store::BackupStore;
use iar_core::store::faulty::FaultyStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub(crate) fn memory_store() -> BackupStore {
    BackupStore::from_object_store(Arc::new(InMemory::new()), "memory:///")
}

pub(crate) fn password(p: &str) -> Password {
    Password::new(p).unwrap()
}

/// The names under `restic/<ns>/<dir>/`, sorted.
pub(crate) fn names(store: &BackupStore, rt: &tokio::runtime::Runtime, dir: &str) -> Vec<String> {
    let dir = Path::from(format!("{}/{dir}", prefix("shop")));
    let listed: Vec<_> = rt
        .block_on(store.object_store().list(Some(&dir)).try_collect())
        .unwrap();
    let mut out: Vec<String> = listed
        .iter()
        .map(|m| m.location.filename().unwrap().to_string())
        .collect();
    out.sort();
    out
}

fn marker_exists(store: &BackupStore, rt: &tokio::runtime::Runtime) -> bool {
    let marker = Path::from(format!("{}/iar-init", prefix("shop")));
    rt.block_on(store.object_store().head(&marker)).is_ok()
}

/// Writer A stalls between its key and its config until B, finding A's
/// marker older than the lease (by the store's clock), takes it over and
/// creates the repository. A then stops: no second config, its own key
/// removed, one usable key left.
fn stalled_writer_loses_its_lease(store: BackupStore) {
    let rt = runtime();
    let pw = password("pw");
    // Long enough for B's own init (scrypt) to finish within its lease,
    // on a loaded machine too (3 s once was not, at a load of 26 on 2
    // cores).
    let lease = Duration::from_secs(10);
    let (reached, at_stall) = mpsc::channel::<()>();
    let (release, released) = mpsc::channel::<()>();
    let released = Mutex::new(released);
    let reached = Mutex::new(reached);
    let stall: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        let _ = reached.lock().unwrap().send(());
        let _ = released.lock().unwrap().recv();
    });
    let a = {
        let (store, pw, handle) = (store.clone(), pw.clone(), rt.handle().clone());
        let creation = Creation {
            lease,
            before_config: Some(stall),
        };
        std::thread::spawn(move || {
            VolumeRepository::open_or_init_with(&store, "shop", &pw, &handle, &creation).map(|_| ())
        })
    };
    at_stall.recv_timeout(Duration::from_secs(120)).unwrap();
    let a_key = names(&store, &rt, "keys");
    assert_eq!(a_key.len(), 1, "A wrote its key");

    let creation = Creation {
        lease,
        before_config: None,
    };
    let b = VolumeRepository::open_or_init_with(&store, "shop", &pw, rt.handle(), &creation)
        .expect("B takes over the stale marker and creates the repository");
    release.send(()).unwrap();
    let err = a.join().unwrap().expect_err("A lost its lease");
    let err = err.to_string();
    assert!(err.contains("(rule: repository-init)"), "{err}");
    assert!(err.contains("took over the creation lease"), "{err}");
    assert!(err.contains("removed the key it wrote"), "{err}");

    let keys = names(&store, &rt, "keys");
    assert_eq!(keys.len(), 1, "one key: B's ({keys:?})");
    assert_ne!(keys, a_key, "A's key is gone");
    assert!(!marker_exists(&store, &rt), "B released its marker");
    assert!(
        b.check_keys(false)
            .unwrap()
            .iter()
            .all(|k| k.status == KeyStatus::Opens)
    );
    drop(b);
    VolumeRepository::open(&store, "shop", &pw, rt.handle()).expect("the repository opens");
}

#[test]
fn stalled_writer_loses_its_lease_on_a_store_with_conditional_update() {
    stalled_writer_loses_its_lease(memory_store());
}

#[test]
fn stalled_writer_loses_its_lease_on_a_local_store() {
    let dir = tempfile::tempdir().unwrap();
    stalled_writer_loses_its_lease(BackupStore::open(dir.path().to_str().unwrap()).unwrap());
}

#[test]
fn writers_racing_init_make_one_key_and_config() {
    let rt = runtime();
    let store = memory_store();
    let opened: Vec<_> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    VolumeRepository::open_or_init(&store, "shop", &password("pw"), rt.handle())
                        .map(|_| ())
                })
            })
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert!(opened.iter().all(Result::is_ok), "{opened:?}");
    assert_eq!(names(&store, &rt, "keys").len(), 1);
    assert!(!marker_exists(&store, &rt));
}

/// A key of another master key under the same password, listed first
/// (an older iar's overtaken `init` left one): the repository still
/// opens, and `check_keys` finds it and repairs it away; a key of another
/// password is never touched.
#[test]
fn a_stray_key_listed_first_does_not_make_the_repository_unopenable() {
    let rt = runtime();
    let store = memory_store();
    let pw = password("pw");
    drop(VolumeRepository::open_or_init(&store, "shop", &pw, rt.handle()).unwrap());
    let good = names(&store, &rt, "keys");

    // Key files of other repositories: one the password opens, one it does not.
    let key_of = |pw: &Password| {
        let other = memory_store();
        drop(VolumeRepository::open_or_init(&other, "shop", pw, rt.handle()).unwrap());
        let id = names(&other, &rt, "keys").remove(0);
        let path = Path::from(format!("restic/shop/keys/{id}"));
        rt.block_on(async { other.object_store().get(&path).await?.bytes().await })
            .unwrap()
    };
    let plant = |name: &str, bytes: Bytes| {
        let path = Path::from(format!("restic/shop/keys/{name}"));
        rt.block_on(store.object_store().put(&path, bytes.into()))
            .unwrap();
    };
    // Named to sort (and so, in memory, list) before the real key.
    let stray = "0".repeat(64);
    let foreign = format!("{}1", "0".repeat(63));
    plant(&stray, key_of(&pw));
    plant(&foreign, key_of(&password("another operator's")));

    // rustic (as restic) stops at the first key the password opens.
    let (plain, _) = VolumeRepository::unopened(&store, "shop", rt.handle()).unwrap();
    assert!(
        plain
            .open(&rustic_core::Credentials::password("pw"))
            .is_err()
    );
    let repo =
        VolumeRepository::open(&store, "shop", &pw, rt.handle()).expect("opens past the stray key");
    let status = |id: &str, reports: &[crate::KeyReport]| {
        reports.iter().find(|r| r.id == id).map(|r| r.status)
    };
    let checked = repo.check_keys(false).unwrap();
    assert_eq!(status(&stray, &checked), Some(KeyStatus::Stray));
    assert_eq!(status(&foreign, &checked), Some(KeyStatus::Other));
    assert_eq!(status(&good[0], &checked), Some(KeyStatus::Opens));
    assert!(checked.iter().all(|r| !r.removed));

    let repaired = repo.check_keys(true).unwrap();
    assert!(repaired.iter().any(|r| r.id == stray && r.removed));
    let mut left = vec![foreign.clone(), good[0].clone()];
    left.sort();
    assert_eq!(names(&store, &rt, "keys"), left);

    assert!(matches!(
        VolumeRepository::open(&store, "shop", &password("wrong"), rt.handle()),
        Err(RepositoryError::WrongPassword { .. })
    ));
}

/// A stray key whose master key some index or snapshot file needs is the
/// only key to that file: never deleted.
#[test]
fn a_stray_key_that_data_needs_is_kept() {
    let rt = runtime();
    let store = memory_store();
    let pw = password("pw");
    let repo = VolumeRepository::open_or_init(&store, "shop", &pw, rt.handle()).unwrap();
    let other = memory_store();
    let other_repo = VolumeRepository::open_or_init(&other, "shop", &pw, rt.handle()).unwrap();
    let id = names(&other, &rt, "keys").remove(0);
    let path = |dir: &str, name: &str| Path::from(format!("restic/shop/{dir}/{name}"));
    let stray = rt
        .block_on(async {
            other
                .object_store()
                .get(&path("keys", &id))
                .await?
                .bytes()
                .await
        })
        .unwrap();
    rt.block_on(store.object_store().put(&path("keys", &id), stray.into()))
        .unwrap();
    let sealed = RepoKey::from_master(&other_repo.repo.key())
        .unwrap()
        .encrypt(b"{\"packs\":[]}");
    let name = crate::crypto::storage_id(&sealed);
    rt.block_on(
        store
            .object_store()
            .put(&path("index", &name), Bytes::from(sealed).into()),
    )
    .unwrap();

    let repaired = repo.check_keys(true).unwrap();
    let report = repaired.iter().find(|r| r.id == id).unwrap();
    assert_eq!(report.status, KeyStatus::StrayWithData);
    assert!(!report.removed);
    assert_eq!(names(&store, &rt, "keys").len(), 2);
}

/// An `init` that wrote its key and then failed (here: the config's put)
/// removes the key, so the next writer's repository has no stray one.
#[test]
fn a_failed_init_leaves_no_key() {
    let rt = runtime();
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty = Arc::new(FaultyStore::new(inner.clone()));
    faulty.fail_puts_to("/config");
    let failing = BackupStore::from_object_store(faulty, "memory:///");
    let pw = password("pw");
    let err = VolumeRepository::open_or_init(&failing, "shop", &pw, rt.handle())
        .err()
        .expect("the config cannot be written");
    let err = err.to_string();
    assert!(err.contains("removed the key it wrote"), "{err}");
    assert_eq!(names(&failing, &rt, "keys"), Vec::<String>::new());
    assert!(!marker_exists(&failing, &rt));

    let store = BackupStore::from_object_store(inner, "memory:///");
    let repo = VolumeRepository::open_or_init(&store, "shop", &pw, rt.handle()).unwrap();
    assert_eq!(names(&store, &rt, "keys").len(), 1);
    assert!(
        repo.check_keys(false)
            .unwrap()
            .iter()
            .all(|k| k.status == KeyStatus::Opens)
    );
}

/// On a store that ignores a conditional create every writer would take
/// the marker: creating a repository there is refused, nothing written.
#[test]
fn creating_on_a_store_without_conditional_create_is_refused() {
    let rt = runtime();
    let faulty = Arc::new(FaultyStore::new(Arc::new(InMemory::new())));
    faulty.ignore_conditional_puts(true);
    let store = BackupStore::from_object_store(faulty, "memory:///");
    let err = VolumeRepository::open_or_init(&store, "shop", &password("pw"), rt.handle())
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("(rule: store-conditional-writes)"), "{err}");
    assert_eq!(names(&store, &rt, "keys"), Vec::<String>::new());
    assert!(!marker_exists(&store, &rt));
}
