//! A repository's keys as the password sees them: which open the config.
//!
//! restic and rustic open a repository with the first key the password
//! opens. A key whose master key is not the config's (a "stray" key, left
//! by an older iar's overtaken `init`) then makes the repository
//! unopenable though a good key sits beside it. iar tries every key the
//! password opens until one's master key decrypts the config, and
//! [`check`] lists (and may delete) the stray ones.

use crate::crypto::RepoKey;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{Error, ObjectStore, ObjectStoreExt};
use rustic_core::repofile::KeyFile;
use std::sync::Arc;
use tokio::runtime::Handle;

/// What a key file is to this repository and password.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyStatus {
    /// The password opens it and its master key decrypts the config.
    Opens,
    /// The password opens it, but its master key does not decrypt the
    /// config, and no snapshot or index file: it can never open the
    /// repository, and a repair deletes it.
    Stray,
    /// Like `Stray`, but some snapshot or index files decrypt with it (an
    /// older iar wrote them after its overtaken `init`): those files are
    /// unreadable through the config's key, and this key is their only
    /// one, so it is never deleted.
    StrayWithData,
    /// The password does not open it (another operator's password, or a
    /// damaged file): never touched.
    Other,
}

/// One key file and what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyReport {
    /// The file's name under `keys/`.
    pub id: String,
    pub status: KeyStatus,
    /// Whether a repair deleted it.
    pub removed: bool,
}

/// The store, runtime and prefix the key files are read through.
pub(crate) struct KeyFiles<'a> {
    pub store: &'a Arc<dyn ObjectStore>,
    pub runtime: &'a Handle,
    pub prefix: &'a str,
}

/// A key file's master key under `password`; `None` if the password does
/// not open it (or it is not a key file).
fn master_key(bytes: &[u8], password: &str) -> Option<RepoKey> {
    let file: KeyFile = serde_json::from_slice(bytes).ok()?;
    let key = file.key_from_password(&password).ok()?;
    let (encrypt, k, r) = key.to_keys();
    RepoKey::from_parts(&encrypt, &k, &r)
}

impl KeyFiles<'_> {
    fn key_path(&self, id: &str) -> Path {
        Path::from(format!("{}/keys/{id}", self.prefix))
    }

    /// The key files' names, in the store's listing order.
    fn list(&self) -> Result<Vec<String>, Error> {
        let dir = Path::from(format!("{}/keys", self.prefix));
        let listed: Vec<_> = self
            .runtime
            .block_on(self.store.list(Some(&dir)).try_collect())?;
        Ok(listed
            .iter()
            .filter_map(|m| m.location.filename().map(str::to_string))
            .collect())
    }

    fn config(&self) -> Result<bytes::Bytes, Error> {
        let path = Path::from(format!("{}/config", self.prefix));
        self.runtime
            .block_on(async { self.store.get(&path).await?.bytes().await })
    }

    /// Each key file and its master key under `password` (`None`: not
    /// opened). A key removed since the listing is left out.
    fn read_all(&self, password: &str) -> Result<Vec<(String, Option<RepoKey>)>, Error> {
        let mut out = Vec::new();
        for id in self.list()? {
            let got = self
                .runtime
                .block_on(async { self.store.get(&self.key_path(&id)).await?.bytes().await });
            match got {
                Ok(bytes) => out.push((id, master_key(&bytes, password))),
                Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// The master key of the first key the password opens whose master
    /// key decrypts the config. `Err(Ok(n))`: none does, though the
    /// password opens `n` keys.
    pub(crate) fn opening_key(&self, password: &str) -> Result<Result<RepoKey, usize>, Error> {
        let config = self.config()?;
        let mut opened = 0;
        for id in self.list()? {
            let bytes = match self
                .runtime
                .block_on(async { self.store.get(&self.key_path(&id)).await?.bytes().await })
            {
                Ok(bytes) => bytes,
                Err(Error::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            let Some(key) = master_key(&bytes, password) else {
                continue;
            };
            opened += 1;
            if key.decrypt(&config).is_some() {
                return Ok(Ok(key));
            }
            tracing::warn!(key = %id, prefix = self.prefix, "a stray repository key: the password opens it but its master key does not decrypt the config");
        }
        Ok(Err(opened))
    }

    /// Every key file and what it is to `password` and the config; with
    /// `repair`, the stray ones are deleted.
    pub(crate) fn check(&self, password: &str, repair: bool) -> Result<Vec<KeyReport>, Error> {
        let config = self.config()?;
        let mut out = Vec::new();
        for (id, key) in self.read_all(password)? {
            let status = match key {
                Some(k) if k.decrypt(&config).is_some() => KeyStatus::Opens,
                Some(k) if self.decrypts_any_file(&k)? => KeyStatus::StrayWithData,
                Some(_) => KeyStatus::Stray,
                None => KeyStatus::Other,
            };
            let removed = repair && status == KeyStatus::Stray && {
                match self
                    .runtime
                    .block_on(self.store.delete(&self.key_path(&id)))
                {
                    Ok(()) | Err(Error::NotFound { .. }) => true,
                    Err(e) => return Err(e),
                }
            };
            out.push(KeyReport {
                id,
                status,
                removed,
            });
        }
        Ok(out)
    }

    /// Whether any snapshot or index file decrypts with `key`.
    fn decrypts_any_file(&self, key: &RepoKey) -> Result<bool, Error> {
        for dir in ["snapshots", "index"] {
            let dir = Path::from(format!("{}/{dir}", self.prefix));
            let listed: Vec<_> = self
                .runtime
                .block_on(self.store.list(Some(&dir)).try_collect())?;
            for meta in listed {
                let got = self
                    .runtime
                    .block_on(async { self.store.get(&meta.location).await?.bytes().await });
                match got {
                    Ok(bytes) if key.decrypt(&bytes).is_some() => return Ok(true),
                    Ok(_) | Err(Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(false)
    }

    /// Deletes `keys/<id>` (a failed `init`'s own key).
    pub(crate) fn remove(&self, id: &str) -> Result<(), Error> {
        match self.runtime.block_on(self.store.delete(&self.key_path(id))) {
            Ok(()) | Err(Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
