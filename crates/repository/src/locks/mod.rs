//! restic's repository locks (`locks/<id>`), as restic 0.18 defines them,
//! so iar and restic (or rustic) keep out of each other's way: a prune
//! never deletes data a running backup is about to reference.
//!
//! A lock is a small JSON file ([`LockFile`]) encrypted with the master
//! key like any restic file and named by the SHA-256 of its stored bytes.
//! An exclusive lock conflicts with every other lock; a shared one with an
//! exclusive one. Stale locks (restic's rule: older than 30 minutes, or
//! made on this host by a process that is gone) are ignored and removed,
//! as `restic unlock` would; iar's own locks also declare a shorter window
//! (10 minutes) that iar's readers honour and restic ignores. A holder
//! refreshes its lock every 3 minutes by writing a new one and deleting the
//! old ([`RepositoryLock`]).
//!
//! Taking a lock follows restic's `NewLock`: check for conflicting locks,
//! write this one, wait a moment and check again (a writer racing this
//! one has written its own by then), and on a conflict remove this one.

mod file;
mod guard;

pub use file::LockFile;
#[cfg(test)]
pub(crate) use file::hostname;
pub use guard::RepositoryLock;

use crate::RepositoryError;
use crate::crypto::{RepoKey, storage_id};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{Error, ObjectStore, ObjectStoreExt};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

/// restic's `StaleLockTimeout`.
pub const STALE_AFTER: Duration = Duration::from_secs(30 * 60);
/// How often iar refreshes its locks. Its holder counts a lock lost 1.5
/// refreshes before [`OWN_STALE_AFTER`] (5.5 minutes unrefreshed): room
/// for one store call begun just before then to end, with its retries
/// (`iar_core::store::retry_config`, 3 minutes and a request), before
/// anyone may judge the lock stale.
pub const REFRESH_EVERY: Duration = Duration::from_secs(3 * 60);
/// The window iar's own locks declare (`iar_stale_after_seconds`): past it
/// iar's readers judge them stale, where restic's CLI keeps its 30 minutes.
pub const OWN_STALE_AFTER: Duration = Duration::from_secs(10 * 60);
/// restic's `waitBeforeLockCheck`: a racing writer's lock is written by then.
const RECHECK_AFTER: Duration = Duration::from_millis(200);
/// restic's first wait between attempts, doubled up to the last.
const RETRY_FIRST: Duration = Duration::from_secs(5);
const RETRY_MOST: Duration = Duration::from_secs(60);

/// How locks are taken and held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockOptions {
    /// How long a conflicting lock is waited out before the operation is
    /// refused.
    pub retry_for: Duration,
    /// How often a held lock is refreshed.
    pub refresh_every: Duration,
    /// When another's lock that declares no window counts as stale.
    /// restic's 30 minutes; only a test changes it.
    pub stale_after: Duration,
    /// The window this process's locks declare to iar's readers; its
    /// holder stops before it passes unrefreshed ([`Self::lost_after`]).
    pub declares: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            // A backup waits out a short prune, a prune a short backup; a
            // longer one refuses and the next attempt (maintenance's, or the
            // next backup's) tries again.
            retry_for: Duration::from_secs(5 * 60),
            refresh_every: REFRESH_EVERY,
            stale_after: STALE_AFTER,
            declares: OWN_STALE_AFTER,
        }
    }
}

impl LockOptions {
    /// How long a holder may go unrefreshed before it counts its lock as
    /// lost: restic's `refreshabilityTimeout`, a little before others may
    /// judge the lock stale (room for clocks that disagree a little).
    pub fn lost_after(&self) -> Duration {
        self.stale_after
            .min(self.declares)
            .saturating_sub(self.refresh_every.saturating_mul(3) / 2)
    }

    /// A lock file of this process, declaring this window.
    pub(crate) fn lock_file(&self, exclusive: bool, username: &str) -> LockFile {
        LockFile::this_process(exclusive, username).declaring(self.declares)
    }
}

/// One repository's locks, as read and written through the store.
#[derive(Clone)]
pub(crate) struct Locks {
    shared: Arc<Shared>,
}

struct Shared {
    store: Arc<dyn ObjectStore>,
    runtime: Handle,
    prefix: String,
    location: String,
    key: RepoKey,
    username: String,
    options: LockOptions,
}

/// A lock file as read: its content, or why it cannot be read.
type Read = Result<LockFile, String>;

impl Locks {
    pub(crate) fn new(
        store: Arc<dyn ObjectStore>,
        runtime: Handle,
        prefix: &str,
        location: &str,
        key: RepoKey,
        username: &str,
        options: LockOptions,
    ) -> Self {
        Locks {
            shared: Arc::new(Shared {
                store,
                runtime,
                prefix: prefix.to_string(),
                location: location.to_string(),
                key,
                username: username.to_string(),
                options,
            }),
        }
    }

    pub(crate) fn with_options(&self, options: LockOptions) -> Self {
        let s = &self.shared;
        Self::new(
            s.store.clone(),
            s.runtime.clone(),
            &s.prefix,
            &s.location,
            s.key.clone(),
            &s.username,
            options,
        )
    }

    pub(crate) fn options(&self) -> &LockOptions {
        &self.shared.options
    }

    pub(crate) fn location(&self) -> &str {
        &self.shared.location
    }

    fn path(&self, id: &str) -> Path {
        Path::from(format!("{}/locks/{id}", self.shared.prefix))
    }

    fn failed(&self, what: &str, e: impl std::fmt::Display) -> RepositoryError {
        RepositoryError::Failed {
            location: self.shared.location.clone(),
            what: what.to_string(),
            why: format!("{e} (rule: repository-lock)"),
        }
    }

    /// Writes `lock` encrypted, named as restic names it; returns its id.
    pub(crate) fn write(&self, lock: &LockFile) -> Result<String, Error> {
        let json = serde_json::to_vec(lock).expect("a lock serializes");
        let stored = self.shared.key.encrypt(&json);
        let id = storage_id(&stored);
        self.shared.runtime.block_on(
            self.shared
                .store
                .put(&self.path(&id), Bytes::from(stored).into()),
        )?;
        Ok(id)
    }

    pub(crate) fn remove(&self, id: &str) -> Result<(), Error> {
        match self
            .shared
            .runtime
            .block_on(self.shared.store.delete(&self.path(id)))
        {
            Ok(()) | Err(Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn exists(&self, id: &str) -> Result<bool, Error> {
        match self
            .shared
            .runtime
            .block_on(self.shared.store.head(&self.path(id)))
        {
            Ok(_) => Ok(true),
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every lock file: id and content. Empty files are left out (restic
    /// skips them: an interrupted upload), as are files removed meanwhile.
    pub(crate) fn read_all(&self) -> Result<Vec<(String, Read)>, Error> {
        let s = &self.shared;
        let dir = Path::from(format!("{}/locks", s.prefix));
        let listed: Vec<_> = s.runtime.block_on(s.store.list(Some(&dir)).try_collect())?;
        let mut out = Vec::new();
        for meta in listed {
            let Some(id) = meta.location.filename().map(str::to_string) else {
                continue;
            };
            // Only ids are locks: restic's local backend writes a lock to
            // a temporary name first.
            if meta.size == 0 || id.parse::<rustic_core::Id>().is_err() {
                continue;
            }
            let got = s
                .runtime
                .block_on(async { s.store.get(&meta.location).await?.bytes().await });
            let bytes = match got {
                Ok(b) => b,
                Err(Error::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            out.push((id, self.decode(&bytes)));
        }
        Ok(out)
    }

    fn decode(&self, stored: &[u8]) -> Read {
        let plain = self
            .shared
            .key
            .decrypt(stored)
            .ok_or("it does not decrypt with the repository's key")?;
        // restic compresses the files of a version 2 repository: a version
        // byte 2, then zstd; plain JSON otherwise.
        let json = match plain.first() {
            Some(2) => zstd::decode_all(&plain[1..]).map_err(|e| format!("zstd: {e}"))?,
            _ => plain,
        };
        let lock: LockFile = serde_json::from_slice(&json).map_err(|e| e.to_string())?;
        if lock.made().is_none() {
            return Err(format!("its time {:?} is not RFC 3339", lock.time));
        }
        Ok(lock)
    }

    /// The first lock (other than `own`) that conflicts with taking an
    /// `exclusive` or shared one. Stale locks are removed on the way.
    fn conflict(
        &self,
        exclusive: bool,
        own: Option<&str>,
    ) -> Result<Option<LockFile>, RepositoryError> {
        let all = self
            .read_all()
            .map_err(|e| self.failed("reading locks", e))?;
        for (id, read) in all {
            if Some(id.as_str()) == own {
                continue;
            }
            // As restic: a lock it cannot read might be anyone's; refuse
            // rather than guess.
            let lock = read.map_err(|why| {
                self.failed(
                    "reading locks",
                    format!("invalid lock file locks/{id}: {why}; if no one uses the repository, `restic unlock --remove-all` removes it"),
                )
            })?;
            if lock.is_stale(self.shared.options.stale_after) {
                tracing::info!(repository = %self.shared.location, lock = %id, holder = %lock.describe(), "removing a stale lock");
                let _ = self.remove(&id);
                continue;
            }
            if exclusive || lock.exclusive {
                return Ok(Some(lock));
            }
        }
        Ok(None)
    }

    /// One attempt, as restic's `NewLock`: `Err(holder)` on a conflict.
    fn attempt(
        &self,
        exclusive: bool,
    ) -> Result<Result<RepositoryLock, LockFile>, RepositoryError> {
        if let Some(holder) = self.conflict(exclusive, None)? {
            return Ok(Err(holder));
        }
        let made = Instant::now();
        let id = self
            .write(
                &self
                    .shared
                    .options
                    .lock_file(exclusive, &self.shared.username),
            )
            .map_err(|e| self.failed("writing a lock", e))?;
        std::thread::sleep(RECHECK_AFTER);
        match self.conflict(exclusive, Some(&id)) {
            Ok(None) => Ok(Ok(RepositoryLock::start(self.clone(), exclusive, id, made))),
            Ok(Some(holder)) => {
                let _ = self.remove(&id);
                Ok(Err(holder))
            }
            Err(e) => {
                let _ = self.remove(&id);
                Err(e)
            }
        }
    }

    /// Takes a lock, waiting out conflicting ones for up to `retry_for`;
    /// then refuses, naming the holder.
    pub(crate) fn take(&self, exclusive: bool) -> Result<RepositoryLock, RepositoryError> {
        let deadline = Instant::now() + self.shared.options.retry_for;
        let mut wait = RETRY_FIRST;
        loop {
            let holder = match self.attempt(exclusive)? {
                Ok(lock) => return Ok(lock),
                Err(holder) => holder,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RepositoryError::Locked {
                    location: self.shared.location.clone(),
                    wanted: if exclusive {
                        "an exclusive"
                    } else {
                        "a shared"
                    },
                    holder: holder.describe(),
                });
            }
            tracing::info!(repository = %self.shared.location, holder = %holder.describe(), "the repository is locked; waiting");
            std::thread::sleep(wait.min(left));
            wait = (wait * 2).min(RETRY_MOST);
        }
    }
}
