//! On a local store, a takeover revokes the writes its old holder still
//! has on the way. The fence checks the lease just before a write; a
//! holder stopped between the two (SIGSTOP, a frozen VM) would otherwise
//! write once after another process took the lease over
//! (`cli::a_paused_holder_resumed_after_a_takeover_writes_nothing` caught
//! one mid-rename).
//!
//! A local directory has no write conditional on another file, but a
//! rename is atomic against another rename. So each lease generation
//! stages its writes in a directory of its own, made before its lease
//! record exists, and a fenced write is a file created in that directory
//! then renamed over its key, both by path. A takeover first renames the
//! staging directories of the generations it takes over from out of the
//! way: from then on the old holder's create and rename find no source and
//! fail, so its write lands before the takeover or not at all. Unlike a
//! lock, this never waits: a holder stopped for good does not hold the
//! backup hostage (an earlier design with file locks did, and failed the
//! test above when the stop fell inside a write).
//!
//! The directories live under `plugins/iar/`, where Velero's layout keeps
//! plugins' own data.

use super::{StoreError, UrlProblem};
use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug)]
pub(super) struct LocalStaging {
    dir: PathBuf,
    /// Where object_store keeps a key, so a staged write lands where its
    /// reads look.
    fs: Arc<LocalFileSystem>,
}

/// Why a staged write did not land.
pub(super) enum StageError {
    /// The write's staging directory was revoked by a takeover.
    Revoked,
    Io(std::io::Error),
}

impl LocalStaging {
    pub(super) fn under(root: &Path, fs: Arc<LocalFileSystem>) -> Self {
        LocalStaging {
            dir: root.join("plugins/iar/fence-staging"),
            fs,
        }
    }

    /// The file of `key`, as object_store's local store names it.
    pub(super) fn file_of(&self, key: &ObjectPath) -> Result<PathBuf, object_store::Error> {
        self.fs.path_to_filesystem(key)
    }

    fn of(&self, backup: &str) -> PathBuf {
        self.dir.join(backup)
    }

    fn problem(&self, e: std::io::Error) -> StoreError {
        StoreError::Url {
            url: self.dir.display().to_string(),
            reason: UrlProblem::CreateDir(e),
        }
    }

    /// A new staging directory for `generation` of `backup`'s lease, made
    /// before that generation's record so that no instant exists where
    /// the lease is held and its writes cannot be revoked.
    pub(super) async fn prepare(
        &self,
        backup: &str,
        generation: u64,
    ) -> Result<PathBuf, StoreError> {
        let dir = self
            .of(backup)
            .join(format!("{generation:020}-{}", unique()));
        let made = dir.clone();
        blocking(move || {
            std::fs::create_dir_all(made.parent().expect("has a parent"))?;
            std::fs::create_dir(&made)
        })
        .await
        .map_err(|e| self.problem(e))?;
        Ok(dir)
    }

    /// Revokes the staging directories of every generation up to
    /// `through`: each is renamed away in one step (a write of its holder
    /// still on the way then fails), then removed.
    pub(super) async fn revoke(&self, backup: &str, through: u64) -> Result<(), StoreError> {
        let root = self.of(backup);
        blocking(move || {
            let entries = match std::fs::read_dir(&root) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            };
            for entry in entries {
                let entry = entry?;
                let name = entry.file_name();
                let name = name.to_string_lossy();
                let revoked = name.starts_with("revoked-");
                let older = name
                    .split_once('-')
                    .and_then(|(g, _)| g.parse::<u64>().ok())
                    .is_some_and(|g| g <= through);
                if !(revoked || older) {
                    continue;
                }
                let away = if revoked {
                    entry.path()
                } else {
                    let away = root.join(format!("revoked-{}", unique()));
                    std::fs::rename(entry.path(), &away)?;
                    away
                };
                // Best effort: what is left is never written through again.
                let _ = std::fs::remove_dir_all(away);
            }
            Ok(())
        })
        .await
        .map_err(|e| self.problem(e))
    }

    /// Removes a staging directory whose generation ended here (released,
    /// or never created). Best effort.
    pub(super) async fn discard(dir: PathBuf) {
        let _ = blocking(move || std::fs::remove_dir_all(dir)).await;
    }

    /// Writes `bytes` to `target` through `staged` (the writer's staging
    /// directory), durably: the staged file and the target's directory
    /// are synced, so a crash leaves the old file or the new one.
    pub(super) async fn put(
        staged: &Path,
        target: PathBuf,
        bytes: Bytes,
    ) -> Result<(), StageError> {
        let file = staged.join(unique());
        tokio::task::spawn_blocking(move || stage_and_rename(&file, &target, &bytes))
            .await
            .unwrap_or_else(|e| Err(StageError::Io(std::io::Error::other(e))))
    }
}

fn stage_and_rename(file: &Path, target: &Path, bytes: &[u8]) -> Result<(), StageError> {
    // By path, never through a directory handle: once the staging
    // directory is renamed away these find nothing.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(file)
        .map_err(revoked_if_gone)?;
    f.write_all(bytes).map_err(StageError::Io)?;
    f.sync_all().map_err(StageError::Io)?;
    drop(f);
    let parent = target.parent().expect("a key has a parent");
    std::fs::create_dir_all(parent).map_err(StageError::Io)?;
    if let Err(e) = std::fs::rename(file, target) {
        let _ = std::fs::remove_file(file);
        return Err(revoked_if_gone(e));
    }
    std::fs::File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(StageError::Io)
}

fn revoked_if_gone(e: std::io::Error) -> StageError {
    if e.kind() == std::io::ErrorKind::NotFound {
        StageError::Revoked
    } else {
        StageError::Io(e)
    }
}

/// A name no other staging of this or another process takes: the pid,
/// the time and a counter.
fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!(
        "{}-{nanos:x}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// File system calls off the async runtime's threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}
