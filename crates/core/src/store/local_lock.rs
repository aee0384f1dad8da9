//! On a local store, a fenced write and a takeover of its lease exclude
//! each other. The fence checks the lease just before the write; a holder
//! stopped between the two (SIGSTOP, a frozen VM) would write once after
//! another process took the lease (`cli::a_paused_holder_resumed_after_a_takeover_writes_nothing`
//! caught one mid-rename). A local directory has no conditional write on
//! another file, but it has file locks: each fenced write holds a shared
//! lock on the backup's lock file from its check to its rename, a takeover
//! an exclusive one from reading the lease to creating the next
//! generation. A process stopped mid-write holds the takeover off until it
//! is resumed (and its write then lands before the takeover) or killed
//! (the kernel drops its lock). Lock files live under `plugins/iar/`,
//! where Velero's layout keeps plugins' own data.

use super::{StoreError, UrlProblem};
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a takeover waits for a write in progress (a stopped writer
/// holds it off for as long as it is stopped).
const TAKEOVER_WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(5);

#[derive(Debug)]
pub(super) struct LocalLocks {
    dir: PathBuf,
}

/// A held lock; dropping it (closing the file) releases it.
pub(super) struct Held(#[allow(dead_code)] File);

impl LocalLocks {
    pub(super) fn under(root: &Path) -> Self {
        LocalLocks {
            dir: root.join("plugins/iar/fence-locks"),
        }
    }

    fn open(&self, backup: &str) -> Result<File, StoreError> {
        let err = |e: std::io::Error| StoreError::Url {
            url: self.dir.display().to_string(),
            reason: UrlProblem::CreateDir(e),
        };
        std::fs::create_dir_all(&self.dir).map_err(err)?;
        File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(format!("{backup}.lock")))
            .map_err(err)
    }

    /// For a fenced write: waits for any takeover in progress.
    pub(super) async fn shared(&self, backup: &str) -> Result<Held, StoreError> {
        let file = self.open(backup)?;
        loop {
            match file.try_lock_shared() {
                Ok(()) => return Ok(Held(file)),
                Err(TryLockError::WouldBlock) => tokio::time::sleep(POLL).await,
                Err(TryLockError::Error(e)) => {
                    return Err(StoreError::Url {
                        url: self.dir.display().to_string(),
                        reason: UrlProblem::CreateDir(e),
                    });
                }
            }
        }
    }

    /// For a takeover: waits (up to [`TAKEOVER_WAIT`]) for the writes in
    /// progress; `None` when they did not end.
    pub(super) async fn exclusive(&self, backup: &str) -> Result<Option<Held>, StoreError> {
        let file = self.open(backup)?;
        let until = Instant::now() + TAKEOVER_WAIT;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Some(Held(file))),
                Err(TryLockError::WouldBlock) if Instant::now() < until => {
                    tokio::time::sleep(POLL).await;
                }
                Err(TryLockError::WouldBlock) => return Ok(None),
                Err(TryLockError::Error(e)) => {
                    return Err(StoreError::Url {
                        url: self.dir.display().to_string(),
                        reason: UrlProblem::CreateDir(e),
                    });
                }
            }
        }
    }
}
