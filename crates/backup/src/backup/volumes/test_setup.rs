//! What the volume tests share: a directory of volumes with another
//! tenant's secret beside them, and a local store.

use iar_core::store::BackupStore;
use std::path::PathBuf;

/// Another tenant's token: no backup may read it, no restore write it.
pub(super) const SECRET: &[u8] = b"another tenant's token: s3cr3t";

pub(super) struct Setup {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    /// The volumes, as `<ns>/<claim>` (or a pod's) below it.
    pub(super) data: PathBuf,
    /// `data/other-tenant`, beside the volumes: its `token` holds
    /// [`SECRET`].
    pub(super) outside: PathBuf,
    pub(super) store: BackupStore,
    pub(super) store_dir: PathBuf,
}

pub(super) fn setup() -> Setup {
    let data = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let store = BackupStore::open(store_dir.path().to_str().unwrap()).unwrap();
    let outside = data.path().join("other-tenant");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("token"), SECRET).unwrap();
    Setup {
        data: data.path().to_path_buf(),
        outside,
        store_dir: store_dir.path().to_path_buf(),
        _dirs: (data, store_dir),
        store,
    }
}
