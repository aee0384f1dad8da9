//! Helpers shared by the fuzz targets: a store in memory and a runtime to
//! drive its async API, so the targets read files through the same
//! `BackupStore::get_json` that `iar resume` and `iar describe` use; and
//! the check that the boundary's scan of an item reads it as `Value` does.

use std::io::Write;
use std::sync::{Arc, OnceLock};

use iar::item_scan::{self, Identity, Scanned};
use iar::store::{BackupFile, BackupStore, StoreError};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The backup every store target writes and reads.
pub const BACKUP: &str = "fuzzed";

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime")
    })
}

/// A fresh store in memory, as `iar` opens a bucket.
pub fn memory_store() -> BackupStore {
    BackupStore::from_object_store(Arc::new(object_store::memory::InMemory::new()), "memory://")
}

/// Stores `bytes` verbatim as `file`, as a foreign writer (or a corrupted
/// disk) would leave it.
pub fn put_raw(store: &BackupStore, file: BackupFile, bytes: Vec<u8>) {
    runtime()
        .block_on(store.put(BACKUP, file, bytes.into()))
        .expect("an in-memory put cannot fail");
}

/// Reads `file` back as iar does.
pub fn get_json<T: DeserializeOwned>(
    store: &BackupStore,
    file: BackupFile,
) -> Result<Option<T>, StoreError> {
    runtime().block_on(store.get_json(BACKUP, file))
}

/// Writes `value` as iar does.
pub fn put_json<T: Serialize>(
    store: &BackupStore,
    file: BackupFile,
    value: &T,
) -> Result<(), StoreError> {
    runtime().block_on(store.put_json(BACKUP, file, value))
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).expect("writing to a Vec cannot fail");
    gz.finish().expect("writing to a Vec cannot fail")
}

/// The boundary scans a returned item instead of parsing it, and the host
/// parses it later on trust: `scan` (fast path, then serde) and `by_serde`
/// must each accept exactly what `Value` parses, and read the same
/// apiVersion, kind, namespace and name.
pub fn assert_scan_agrees_with_value(text: &str) {
    let parsed = text.parse::<serde_json::Value>();
    for (path, got) in [
        ("scan", item_scan::scan(text)),
        ("by_serde", item_scan::by_serde(text)),
    ] {
        match (got, &parsed) {
            (Ok(Scanned::Object(id)), Ok(v)) => {
                assert!(v.is_object(), "{path}: {text:?}");
                assert_eq!(id, Identity::of(v), "{path}: {text:?}");
            }
            (Ok(Scanned::NotObject), Ok(v)) => assert!(!v.is_object(), "{path}: {text:?}"),
            (Err(_), Err(_)) => {}
            (s, v) => panic!("{path} and Value disagree on {text:?}: {s:?} / {v:?}"),
        }
    }
}

/// Runs `f` to its end on the targets' runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    runtime().block_on(f)
}
