//! Fencing a backup's writes by its lease. A process that holds a lease
//! (or held one and never gave it back) checks, before each write of one of
//! that backup's files, that its generation is still the newest in the
//! store and has not expired by its own clock; otherwise the write is
//! refused (rule `lease-fence`) and nothing is written.
//!
//! So a holder paused past its lease (a stopped process, a hung renewal)
//! writes nothing once it resumes after another process took over, and a
//! task that outlives its lease (a post hook, a volume backup left
//! running) stops at its next write. The check is a listing just before
//! the put, not part of it: a holder paused between the two, or a write
//! held up on the way, could still land once. On S3 the put itself then
//! carries the lease's end, which the store enforces ([`super::deadline`]);
//! on a local store a takeover revokes the writes between their check
//! and their end ([`super::local_stage`]); object_store offers neither for
//! GCS or Azure. docs/decisions.md says more.

use super::{BackupStore, StoreError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// The lease this process holds (or held) on one backup, as its writes
/// see it.
#[derive(Debug)]
pub(crate) struct Fence {
    pub(super) generation: u64,
    pub(super) expires: Mutex<SystemTime>,
    /// Set when the lease was dropped without being released: whatever of
    /// this process still writes for the backup is working past its lease.
    pub(super) abandoned: AtomicBool,
    /// Set when the lease was given back: free at once for another
    /// process, so nothing of this one writes for the backup until it
    /// takes the lease again (a new fence). The fence stays for that.
    pub(super) released: AtomicBool,
    /// Read-held by each write from its check to its end; the release
    /// takes it for writing, so it waits for the writes in flight.
    pub(super) writes: Arc<tokio::sync::RwLock<()>>,
    /// On a local store, the directory this generation's writes are
    /// staged in, which a takeover renames away ([`super::local_stage`]).
    pub(super) staging: Option<std::path::PathBuf>,
}

/// What a write holds while it is in flight ([`BackupStore::writing`]).
pub(super) struct Writing(#[allow(dead_code)] pub(super) tokio::sync::OwnedRwLockReadGuard<()>);

/// Every fence of one store, by backup. Shared by the store's clones.
#[derive(Debug, Default)]
pub(super) struct Fences(Mutex<HashMap<String, Arc<Fence>>>);

impl Fences {
    pub(super) fn set(&self, backup: &str, fence: Arc<Fence>) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(backup.to_string(), fence);
    }

    pub(super) fn get(&self, backup: &str) -> Option<Arc<Fence>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(backup)
            .cloned()
    }
}

impl BackupStore {
    /// The generation of this process's lease on `backup`, while it holds
    /// (or held and never gave back) one: what a write made under it can
    /// later be checked against ([`BackupStore::current_lease`]).
    pub fn fence_generation(&self, backup: &str) -> Option<u64> {
        self.fences.get(backup).map(|f| f.generation)
    }

    /// This process's fence on `backup` as its own clock sees it, without
    /// asking the store (which may be out of reach): `Ok(None)` where it
    /// holds no lease on it; the reason once the lease was given back,
    /// given up or expired unrenewed; otherwise the fence and the lease's
    /// end.
    fn local_fence(&self, backup: &str) -> Result<Option<(Arc<Fence>, SystemTime)>, String> {
        let Some(fence) = self.fences.get(backup) else {
            return Ok(None);
        };
        if fence.released.load(Ordering::Acquire) {
            return Err(format!(
                "this process gave its lease (generation {}) back; it writes nothing more for the backup without taking the lease again",
                fence.generation
            ));
        }
        if fence.abandoned.load(Ordering::Acquire) {
            return Err(format!(
                "this process gave up its lease (generation {}) without releasing it",
                fence.generation
            ));
        }
        let expires = *fence.expires.lock().unwrap_or_else(|p| p.into_inner());
        if expires <= self.clock.system_now() {
            return Err(format!(
                "its lease (generation {}) expired at {} unrenewed",
                fence.generation,
                humantime::format_rfc3339_millis(expires)
            ));
        }
        Ok(Some((fence, expires)))
    }

    /// How long this process's lease on `backup` stands by its own clock
    /// ([`BackupStore::local_fence`]'s answer). What a write outside the
    /// store (a plugin's cluster write) is checked against and bounded by:
    /// a process cut off from the store cannot renew, so its lease runs
    /// out here as it does for the process that takes over.
    pub fn lease_time_left(&self, backup: &str) -> Result<Option<std::time::Duration>, String> {
        let now = self.clock.system_now();
        Ok(self
            .local_fence(backup)?
            .map(|(_, expires)| expires.duration_since(now).unwrap_or_default()))
    }

    /// Refuses a write of `backup`'s files when this process's lease on it
    /// is no longer its own; otherwise the lease's end, which the write
    /// must not land after ([`super::deadline`]). No fence (no lease taken
    /// here): unchecked, `None`.
    pub(super) async fn check_fence(&self, backup: &str) -> Result<Option<SystemTime>, StoreError> {
        let refuse = |reason: String| StoreError::Fenced {
            backup: backup.to_string(),
            reason,
        };
        let Some((fence, expires)) = self.local_fence(backup).map_err(refuse)? else {
            return Ok(None);
        };
        match self.current_lease(backup).await? {
            Some(current) if current.generation == fence.generation => Ok(Some(expires)),
            Some(current) => Err(refuse(format!(
                "{} took its lease over (generation {}, this process held {})",
                current.holder, current.generation, fence.generation
            ))),
            None => Err(refuse(format!(
                "its lease (generation {}) is gone from the store",
                fence.generation
            ))),
        }
    }
}
