//! A restore's files, where Velero keeps them: `restores/<name>/`, the
//! results (`restore-<name>-results.gz`, Velero's warnings and errors by
//! scope) and the log (`restore-<name>-logs.gz`), plus iar's record of the
//! restore itself (`restore-<name>.json`: its spec and status, which
//! Velero keeps in the cluster and iar's manifest mode has nowhere else).

use super::{BackupStore, NameProblem, StoreError, gunzip, gzip};
use bytes::Bytes;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use std::sync::atomic::Ordering;

const RESTORES: &str = "restores";

/// One of a restore's files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreFile {
    /// The Restore object (spec and status), plain JSON.
    Object,
    /// Velero's `{"warnings": …, "errors": …}`, gzip'd JSON.
    Results,
    /// The restore's log lines, gzip'd text.
    Logs,
}

impl RestoreFile {
    pub fn key(self, restore: &str) -> String {
        let file = match self {
            RestoreFile::Object => format!("restore-{restore}.json"),
            RestoreFile::Results => format!("restore-{restore}-results.gz"),
            RestoreFile::Logs => format!("restore-{restore}-logs.gz"),
        };
        format!("{RESTORES}/{restore}/{file}")
    }

    fn gzipped(self) -> bool {
        self != RestoreFile::Object
    }
}

impl BackupStore {
    fn restore_path(&self, restore: &str, file: RestoreFile) -> Result<(Path, String), StoreError> {
        crate::names::dns_subdomain(restore).map_err(|e| StoreError::Name {
            name: restore.to_string(),
            reason: NameProblem::NotAnObjectName(e.to_string()),
        })?;
        let key = file.key(restore);
        Ok((Path::from(key.as_str()), key))
    }

    /// `key` as the store path of one of a restore's files: exactly what
    /// [`RestoreFile::key`] makes for a restore name, and nothing else.
    pub(super) fn checked_restore_key(&self, key: &str) -> Result<Path, StoreError> {
        let not_one = || StoreError::Name {
            name: key.to_string(),
            reason: NameProblem::Key("not one of a restore's files"),
        };
        let restore = key
            .strip_prefix("restores/")
            .and_then(|rest| rest.split_once('/'))
            .map(|(name, _)| name)
            .ok_or_else(not_one)?;
        let known = [RestoreFile::Object, RestoreFile::Results, RestoreFile::Logs];
        if !known.iter().any(|f| f.key(restore) == key) {
            return Err(not_one());
        }
        // The name checked as every restore's is.
        self.restore_path(restore, RestoreFile::Object)?;
        Ok(Path::from(key))
    }

    /// Writes one of a restore's files (gzip'd where Velero gzips it).
    pub async fn put_restore(
        &self,
        restore: &str,
        file: RestoreFile,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let (path, key) = self.restore_path(restore, file)?;
        let body = if file.gzipped() {
            gzip(bytes)
        } else {
            bytes.to_vec()
        };
        self.store
            .put(&path, Bytes::from(body).into())
            .await
            .map_err(|e| self.io(key, e))?;
        self.puts.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// One of a restore's files, unzipped; `None` if it does not exist.
    pub async fn get_restore(
        &self,
        restore: &str,
        file: RestoreFile,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let (path, key) = self.restore_path(restore, file)?;
        let bytes = match self.store.get(&path).await {
            Ok(r) => r.bytes().await.map_err(|e| self.io(key.clone(), e))?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.io(key, e)),
        };
        if !file.gzipped() {
            return Ok(Some(bytes.to_vec()));
        }
        gunzip(&bytes)
            .map(Some)
            .map_err(|e| self.corrupt(key, super::Corruption::NotGzip(e)))
    }
}
