//! The block work this phase machine started, by backup uid, until its
//! report is recorded. A step that fails while blocks still run (a lost
//! API connection, a store restart) leaves them running; when the same
//! machine resumes the backup it waits for that work and records what it
//! did, rather than start again from the hook ledger, which lacks what a
//! failed ledger write did not record (a post hook then never ran: the
//! fault campaign's seed 710). Each replica has its own: another process
//! has only the ledger.

use crate::backup::block_work::{BlockWork, PostClaims};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub(super) struct LiveBlocks {
    works: Mutex<HashMap<String, Arc<BlockWork>>>,
    /// The machine's claims on post hooks, shared by all its block work.
    claims: Arc<PostClaims>,
}

impl LiveBlocks {
    pub(super) fn claims(&self) -> Arc<PostClaims> {
        self.claims.clone()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<BlockWork>>> {
        self.works.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `work` as backup `uid`'s, replacing an earlier attempt's.
    pub(super) fn insert(&self, uid: &str, work: &Arc<BlockWork>) {
        if !uid.is_empty() {
            self.map().insert(uid.to_string(), work.clone());
        }
    }

    /// Backup `uid`'s block work started by this machine and not yet
    /// recorded.
    pub(super) fn get(&self, uid: &str) -> Option<Arc<BlockWork>> {
        self.map().get(uid).cloned()
    }

    /// Stops the block work of backup `name` (its lease went to another
    /// process), and forgets it.
    pub(super) fn abort_backup(&self, name: &str) {
        self.map().retain(|_, work| {
            let ours = work.backup == name;
            if ours {
                work.abort();
            }
            !ours
        });
    }

    /// Stops every block work kept here, and forgets it.
    pub(super) fn abort_all(&self) {
        for (_, work) in self.map().drain() {
            work.abort();
        }
    }

    /// Forgets backup `uid`'s work once its report is recorded (a few
    /// records per pod: what a backup this machine stopped driving keeps
    /// until the process ends).
    pub(super) fn remove(&self, uid: &str) {
        self.map().remove(uid);
    }
}
