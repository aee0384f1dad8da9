//! Removing a backup's objects. The order that makes a deletion safe to
//! interrupt (the object marked `Deleting`, its other files, the object,
//! the lease last) is kept by `gc`; these are the store operations.

use super::{BACKUPS, BackupFile, BackupStore, StoreError};
use object_store::ObjectStoreExt;
use object_store::path::Path;

/// What one key under `backups/<name>/` is, for the order of a deletion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRole {
    /// `velero-backup.json`: deleted after every other file but the lease.
    Object,
    /// One generation of the backup's lease: deleted last.
    Lease(u64),
    /// Contents, results, logs, operations, volume data, set-aside files.
    Data,
}

pub fn key_role(backup: &str, key: &str) -> KeyRole {
    if key == BackupFile::Metadata.key(backup) {
        KeyRole::Object
    } else if let Some(generation) = super::lease::generation_of(backup, key) {
        KeyRole::Lease(generation)
    } else {
        KeyRole::Data
    }
}

impl BackupStore {
    /// Every key under `backups/<name>/`, sorted.
    pub async fn backup_keys(&self, backup: &str) -> Result<Vec<String>, StoreError> {
        use futures::TryStreamExt;
        self.path(backup, BackupFile::Metadata)?;
        let prefix = format!("{BACKUPS}/{backup}");
        let listed: Vec<_> = self
            .store
            .list(Some(&Path::from(prefix.as_str())))
            .try_collect()
            .await
            .map_err(|e| self.io(format!("{prefix}/"), e))?;
        let mut keys: Vec<String> = listed
            .into_iter()
            .map(|o| o.location.as_ref().to_string())
            .collect();
        keys.sort();
        Ok(keys)
    }

    /// Deletes one object by key (checked like [`BackupStore::put_key`]).
    /// One that is already gone is not an error: a deletion interrupted
    /// part way is finished by running it again.
    pub async fn delete_key(&self, key: &str) -> Result<(), StoreError> {
        let path = self.checked_key(key)?;
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.io(key.to_string(), e)),
        }
    }

    /// Deletes the lease generations of a backup up to and including
    /// `generation`: the one a deletion held and those before it. A
    /// process that took the name since holds a newer one, which stays.
    pub async fn delete_leases_through(
        &self,
        backup: &str,
        generation: u64,
    ) -> Result<(), StoreError> {
        for key in self.backup_keys(backup).await? {
            if matches!(key_role(backup, &key), KeyRole::Lease(g) if g <= generation) {
                self.delete_key(&key).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Duration;

    #[test]
    fn keys_are_told_apart() {
        assert_eq!(
            key_role("b", "backups/b/velero-backup.json"),
            KeyRole::Object
        );
        assert_eq!(
            key_role("b", "backups/b/b-lease-00000000000000000007.json"),
            KeyRole::Lease(7)
        );
        for data in [
            "backups/b/b.tar.gz",
            "backups/b/b-results.gz.corrupt-17",
            "backups/b/volumes/data/abc",
            // Another backup's lease, and a lookalike.
            "backups/b/c-lease-00000000000000000001.json",
            "backups/b/b-lease-x.json",
        ] {
            assert_eq!(key_role("b", data), KeyRole::Data, "{data}");
        }
    }

    /// Every key goes, a key already gone is fine, and on a local
    /// directory the emptied directories go too, so the backup is no
    /// longer listed (another backup whose name shares a prefix stays).
    #[tokio::test]
    async fn deleting_every_key_leaves_nothing_listed() {
        let dir = tempfile::tempdir().unwrap();
        let store = BackupStore::open(dir.path().to_str().unwrap()).unwrap();
        for key in [
            "backups/b/b.tar.gz",
            "backups/b/volumes/data/abc",
            "backups/bb/bb.tar.gz",
        ] {
            store.put_key(key, Bytes::from_static(b"x")).await.unwrap();
        }
        let lease = store
            .acquire_lease("b", Duration::from_secs(60))
            .await
            .unwrap();
        let keys = store.backup_keys("b").await.unwrap();
        assert_eq!(keys.len(), 3, "{keys:?}");
        for key in keys.iter().filter(|k| key_role("b", k) == KeyRole::Data) {
            store.delete_key(key).await.unwrap();
            store.delete_key(key).await.unwrap();
        }
        assert_eq!(store.list_backups().await.unwrap(), ["b", "bb"]);
        lease.release().await.unwrap();
        store.delete_leases_through("b", 1).await.unwrap();
        assert_eq!(store.backup_keys("b").await.unwrap(), Vec::<String>::new());
        assert_eq!(store.list_backups().await.unwrap(), ["bb"]);
        assert!(!dir.path().join("backups/b").exists());
        assert!(dir.path().join("backups/bb/bb.tar.gz").is_file());
    }
}
