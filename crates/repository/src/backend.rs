//! restic's repository layout on iar's backup store: rustic_core's
//! [`WriteBackend`] over the same `object_store` client the backups use,
//! beneath one prefix (`restic/<namespace>`).
//!
//! The layout is restic's own (`config`, `keys/<id>`, `snapshots/<id>`,
//! `index/<id>`, `data/<first two hex digits>/<id>`), so `restic` and
//! `rustic` read the prefix as a repository.
//!
//! The config is written with a conditional create, so a repository never
//! gets a second config (a second `init` fails instead), and an optional
//! guard is asked first (the creating writer checks it still holds its
//! creation lease). The keys written are remembered, so a failed `init`
//! can remove its own.
//!
//! rustic_core is synchronous and runs its own threads; every call here
//! blocks its thread on the runtime's handle. Callers run the repository on
//! blocking threads (`spawn_blocking`), never on a runtime worker.

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use rustic_core::{ErrorKind, FileType, Id, ReadBackend, RusticError, RusticResult, WriteBackend};
use std::sync::{Arc, Mutex};
use tokio::runtime::Handle;

/// Asked before the config is written; an `Err` (why) refuses the write.
pub type ConfigGuard = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

pub struct StoreBackend {
    store: Arc<dyn ObjectStore>,
    /// The repository's prefix in the store, without a trailing `/`.
    prefix: String,
    /// The store's URL and the prefix, for messages.
    location: String,
    runtime: Handle,
    config_guard: Option<ConfigGuard>,
    /// The keys this backend wrote, in order.
    written_keys: Mutex<Vec<Id>>,
}

impl std::fmt::Debug for StoreBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBackend")
            .field("location", &self.location)
            .finish()
    }
}

impl StoreBackend {
    pub fn new(store: Arc<dyn ObjectStore>, url: &str, prefix: &str, runtime: Handle) -> Self {
        StoreBackend {
            store,
            prefix: prefix.trim_end_matches('/').to_string(),
            location: format!("{}/{}", url.trim_end_matches('/'), prefix),
            runtime,
            config_guard: None,
            written_keys: Mutex::default(),
        }
    }

    /// Asks `guard` before writing the config.
    pub fn with_config_guard(mut self, guard: ConfigGuard) -> Self {
        self.config_guard = Some(guard);
        self
    }

    /// The keys (`keys/<id>`) this backend has written.
    pub fn written_keys(&self) -> Vec<Id> {
        self.written_keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn key(&self, tpe: FileType, id: &Id) -> String {
        let hex = id.to_hex();
        let hex = hex.as_str();
        match tpe {
            FileType::Config => format!("{}/config", self.prefix),
            FileType::Pack => format!("{}/data/{}/{hex}", self.prefix, &hex[..2]),
            _ => format!("{}/{}/{hex}", self.prefix, tpe.dirname()),
        }
    }

    fn failed(&self, what: &str, key: &str, e: object_store::Error) -> Box<RusticError> {
        RusticError::with_source(ErrorKind::Backend, "{what} {key} failed", e)
            .attach_context("what", what)
            .attach_context("key", format!("{}/{key}", self.location_root()))
    }

    fn location_root(&self) -> &str {
        self.location
            .strip_suffix(&self.prefix)
            .map(|s| s.trim_end_matches('/'))
            .unwrap_or(&self.location)
    }
}

impl ReadBackend for StoreBackend {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn list_with_size(&self, tpe: FileType) -> RusticResult<Vec<(Id, u32)>> {
        let size = |n: u64, key: &str| {
            u32::try_from(n).map_err(|_| {
                RusticError::new(ErrorKind::Backend, "{key} is over 4 GiB: not a restic file")
                    .attach_context("key", key.to_string())
            })
        };
        if tpe == FileType::Config {
            let key = format!("{}/config", self.prefix);
            return match self
                .runtime
                .block_on(self.store.head(&Path::from(key.as_str())))
            {
                Ok(meta) => Ok(vec![(Id::default(), size(meta.size, &key)?)]),
                Err(object_store::Error::NotFound { .. }) => Ok(Vec::new()),
                Err(e) => Err(self.failed("reading", &key, e)),
            };
        }
        let dir = format!("{}/{}", self.prefix, tpe.dirname());
        let listed: Vec<_> = self
            .runtime
            .block_on(
                self.store
                    .list(Some(&Path::from(dir.as_str())))
                    .try_collect(),
            )
            .map_err(|e| self.failed("listing", &dir, e))?;
        let mut out = Vec::with_capacity(listed.len());
        for meta in listed {
            let Some(name) = meta.location.filename() else {
                continue;
            };
            // Anything else under the prefix (a staged upload of the local
            // store, a stray file) is not the repository's.
            let Ok(id) = name.parse::<Id>() else { continue };
            out.push((id, size(meta.size, meta.location.as_ref())?));
        }
        Ok(out)
    }

    fn read_full(&self, tpe: FileType, id: &Id) -> RusticResult<Bytes> {
        let key = self.key(tpe, id);
        self.runtime
            .block_on(async {
                self.store
                    .get(&Path::from(key.as_str()))
                    .await?
                    .bytes()
                    .await
            })
            .map_err(|e| self.failed("reading", &key, e))
    }

    fn read_partial(
        &self,
        tpe: FileType,
        id: &Id,
        _cacheable: bool,
        offset: u32,
        length: u32,
    ) -> RusticResult<Bytes> {
        let key = self.key(tpe, id);
        let range = u64::from(offset)..u64::from(offset) + u64::from(length);
        self.runtime
            .block_on(self.store.get_range(&Path::from(key.as_str()), range))
            .map_err(|e| self.failed("reading", &key, e))
    }

    fn warmup_path(&self, tpe: FileType, id: &Id) -> String {
        self.key(tpe, id)
    }
}

impl WriteBackend for StoreBackend {
    fn write_bytes(
        &self,
        tpe: FileType,
        id: &Id,
        _cacheable: bool,
        content: rustic_core::BytesList,
    ) -> RusticResult<()> {
        let key = self.key(tpe, id);
        let payload: PutPayload = content.into_vec().into_iter().collect();
        let mode = if tpe == FileType::Config {
            if let Some(guard) = &self.config_guard {
                guard().map_err(|why| {
                    RusticError::new(ErrorKind::Backend, "not writing {key}: {why}")
                        .attach_context("key", key.clone())
                        .attach_context("why", why)
                })?;
            }
            // One config per repository: a second writer's `init` fails.
            PutMode::Create
        } else {
            PutMode::Overwrite
        };
        self.runtime
            .block_on(self.store.put_opts(
                &Path::from(key.as_str()),
                payload,
                PutOptions::from(mode),
            ))
            .map_err(|e| self.failed("writing", &key, e))?;
        if tpe == FileType::Key {
            self.written_keys
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(*id);
        }
        Ok(())
    }

    fn remove(&self, tpe: FileType, id: &Id, _cacheable: bool) -> RusticResult<()> {
        let key = self.key(tpe, id);
        match self
            .runtime
            .block_on(self.store.delete(&Path::from(key.as_str())))
        {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.failed("removing", &key, e)),
        }
    }
}
