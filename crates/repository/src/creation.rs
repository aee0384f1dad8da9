//! The lease a writer holds while it creates a repository: the marker
//! `restic/<ns>/iar-init`, whose body names the holder.
//!
//! Two node agents may start a namespace's first volume backups at once,
//! and two `init`s would each write a key and a config. So one writer
//! creates the marker (a conditional create: one wins) and the others wait
//! for its config. A writer that died leaves its marker; once the marker
//! is older than the lease, another takes it over.
//!
//! The marker's age is judged by the store's clock, never this machine's:
//! a writer PUTs a probe object and compares its `last_modified` with the
//! marker's (both stamped by the store). A takeover is a conditional
//! overwrite of the stale marker's version, so only one taker wins; a
//! store without conditional update (object_store's LocalFileSystem) falls
//! back to delete-then-create, and the taker re-reads the marker to see
//! that it is still its own.

use bytes::Bytes;
use object_store::path::Path;
use object_store::{
    Error, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;

/// How long a writer may take to create a repository before another may
/// take over its marker.
pub(crate) const LEASE: Duration = Duration::from_secs(120);

/// How long a delete-then-create takeover waits before re-reading.
const SETTLE: Duration = Duration::from_millis(200);

/// What the marker holds.
#[derive(Serialize, Deserialize)]
struct MarkerBody {
    holder: String,
}

/// One writer's claim on a repository's creation.
pub(crate) struct CreationLease {
    store: Arc<dyn ObjectStore>,
    runtime: Handle,
    prefix: String,
    marker: Path,
    /// A random id for this attempt and the store's holder name: two
    /// attempts of one process are different holders.
    holder: String,
    lease: Duration,
}

/// The outcome of one attempt to take the marker.
pub(crate) enum Taking {
    Taken,
    /// Another writer holds it; worth trying again after this long.
    Held(Duration),
}

impl CreationLease {
    pub(crate) fn new(
        store: Arc<dyn ObjectStore>,
        runtime: Handle,
        prefix: &str,
        holder_name: &str,
        lease: Duration,
    ) -> Self {
        let attempt = rustic_core::Id::random().to_hex();
        CreationLease {
            store,
            runtime,
            prefix: prefix.to_string(),
            marker: Path::from(format!("{prefix}/iar-init")),
            holder: format!("{} {holder_name}", &attempt.as_str()[..16]),
            lease,
        }
    }

    fn body(&self) -> Bytes {
        Bytes::from(
            serde_json::to_vec(&MarkerBody {
                holder: self.holder.clone(),
            })
            .expect("serializes"),
        )
    }

    /// The marker's holder and metadata; `None` if there is no marker.
    fn read(&self) -> Result<Option<(String, ObjectMeta)>, Error> {
        self.runtime.block_on(async {
            let got = match self.store.get(&self.marker).await {
                Ok(got) => got,
                Err(Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            let meta = got.meta.clone();
            let bytes = got.bytes().await?;
            // An unreadable marker (an older iar's, which held the holder
            // as plain text) names no one this writer could be.
            let holder = serde_json::from_slice::<MarkerBody>(&bytes)
                .map(|b| b.holder)
                .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
            Ok(Some((holder, meta)))
        })
    }

    /// How old `meta`'s object is by the store's clock: the `last_modified`
    /// of a probe this writer PUTs now, less the object's.
    fn age(&self, meta: &ObjectMeta) -> Result<Duration, Error> {
        let probe = Path::from(format!(
            "{}/iar-clock-{}",
            self.prefix,
            &rustic_core::Id::random().to_hex().as_str()[..16]
        ));
        let now = self.runtime.block_on(async {
            self.store.put(&probe, Bytes::new().into()).await?;
            let head = self.store.head(&probe).await;
            let _ = self.store.delete(&probe).await;
            head.map(|h| h.last_modified)
        })?;
        // A marker stamped after the probe (clock steps between a store's
        // nodes) is as young as can be.
        Ok(now
            .signed_duration_since(meta.last_modified)
            .to_std()
            .unwrap_or_default())
    }

    /// Tries once to take the marker: creates it, or takes over one that
    /// is older than the lease.
    pub(crate) fn try_take(&self) -> Result<Taking, Error> {
        let created = self.runtime.block_on(self.store.put_opts(
            &self.marker,
            self.body().into(),
            PutOptions::from(PutMode::Create),
        ));
        match created {
            Ok(_) => return Ok(Taking::Taken),
            Err(Error::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
        let Some((_, meta)) = self.read()? else {
            // Released meanwhile: try again at once.
            return Ok(Taking::Held(Duration::ZERO));
        };
        let age = self.age(&meta)?;
        if age < self.lease {
            return Ok(Taking::Held(self.lease - age));
        }
        tracing::warn!(marker = %self.marker, ?age, "taking over a stale repository creation marker");
        let updated = if meta.e_tag.is_none() && meta.version.is_none() {
            None
        } else {
            let stale = UpdateVersion {
                e_tag: meta.e_tag.clone(),
                version: meta.version.clone(),
            };
            Some(self.runtime.block_on(self.store.put_opts(
                &self.marker,
                self.body().into(),
                PutOptions::from(PutMode::Update(stale)),
            )))
        };
        match updated {
            Some(Ok(_)) => {}
            // Another taker replaced (or removed) it first.
            Some(Err(Error::Precondition { .. } | Error::NotFound { .. })) => {
                return Ok(Taking::Held(Duration::ZERO));
            }
            None | Some(Err(Error::NotImplemented { .. })) => self.delete_then_create(&meta)?,
            Some(Err(e)) => return Err(e),
        }
        // Re-read: a store that ignores the condition, or a racing
        // delete-then-create, may have left another writer's body there.
        Ok(if self.holds_marker()? {
            Taking::Taken
        } else {
            Taking::Held(Duration::ZERO)
        })
    }

    /// The takeover without conditional update: the stale marker is
    /// deleted only while it is still the one judged stale, then created.
    fn delete_then_create(&self, stale: &ObjectMeta) -> Result<(), Error> {
        match self.read()? {
            Some((_, now))
                if now.e_tag == stale.e_tag && now.last_modified == stale.last_modified => {}
            _ => return Ok(()),
        }
        let created = self.runtime.block_on(async {
            match self.store.delete(&self.marker).await {
                Ok(()) | Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
            match self
                .store
                .put_opts(
                    &self.marker,
                    self.body().into(),
                    PutOptions::from(PutMode::Create),
                )
                .await
            {
                Ok(_) | Err(Error::AlreadyExists { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        });
        // A racing taker's delete-then-create lands within moments; the
        // re-read that follows then sees whose marker stands.
        std::thread::sleep(SETTLE);
        created
    }

    fn holds_marker(&self) -> Result<bool, Error> {
        Ok(self
            .read()?
            .is_some_and(|(holder, _)| holder == self.holder))
    }

    /// Whether this writer still holds the lease: the marker is its own and
    /// younger than the lease (by the store's clock). Checked before the
    /// config is written.
    pub(crate) fn holds(&self) -> Result<bool, Error> {
        match self.read()? {
            Some((holder, meta)) if holder == self.holder => Ok(self.age(&meta)? < self.lease),
            _ => Ok(false),
        }
    }

    /// Deletes the marker if it is still this writer's (another writer's
    /// marker is never removed).
    pub(crate) fn release(&self) {
        match self.holds_marker() {
            Ok(true) => {
                let _ = self.runtime.block_on(self.store.delete(&self.marker));
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(marker = %self.marker, "reading the creation marker: {e}"),
        }
    }
}
