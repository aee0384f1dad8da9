//! Turns at a first pass: at most `Settings::concurrent_passes` backups
//! list the cluster and run their plugins at once in one process, so a
//! burst of Backups queues instead of taking instances for all at once;
//! and claims for backups about to start, so a busy controller replica
//! leaves new ones to a less busy one.

use super::super::journal::Journal;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{Semaphore, SemaphorePermit};

#[derive(Default)]
pub(in crate::phases) struct PassTurns {
    /// Made on first use, so settings changed after the machine was made
    /// count.
    passes: OnceLock<Semaphore>,
    /// First passes running now, and the most that ever ran at once.
    running: AtomicUsize,
    high_water: AtomicUsize,
    /// Backups claimed to start here and not yet through their first step.
    starting: AtomicUsize,
}

/// A turn at a first pass; dropping it lets the next backup in.
pub(in crate::phases) struct PassTurn<'a> {
    _permit: SemaphorePermit<'a>,
    running: &'a AtomicUsize,
}

impl Drop for PassTurn<'_> {
    fn drop(&mut self) {
        self.running.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A place claimed for a backup about to start
/// ([`PhaseMachine::claim_start`](crate::phases::PhaseMachine::claim_start));
/// given back when dropped.
pub struct StartClaim<'a>(&'a AtomicUsize);

impl Drop for StartClaim<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl PassTurns {
    /// Waits for one of `most` turns at a first pass (listing and the item
    /// pass), held until the returned guard drops; a wait is said in the
    /// backup's log.
    pub(in crate::phases) async fn turn(
        &self,
        most: usize,
        journal: &Journal,
        backup: &str,
    ) -> PassTurn<'_> {
        let most = most.max(1);
        let passes = self.passes.get_or_init(|| Semaphore::new(most));
        let permit = match passes.try_acquire() {
            Ok(permit) => permit,
            Err(_) => {
                journal.line(
                    backup,
                    format!(
                        "waiting for a turn: {most} backups are listing and running their plugins"
                    ),
                );
                passes
                    .acquire()
                    .await
                    .expect("the semaphore is never closed")
            }
        };
        let now = self.running.fetch_add(1, Ordering::AcqRel) + 1;
        self.high_water.fetch_max(now, Ordering::AcqRel);
        PassTurn {
            _permit: permit,
            running: &self.running,
        }
    }

    /// Claims one of `most` places for a backup this process is about to
    /// start, or none when as many are starting here already. Claimed at
    /// once, not checked: reconciles that run together cannot all pass a
    /// check before any of them has taken its turn.
    pub(in crate::phases) fn claim(&self, most: usize) -> Option<StartClaim<'_>> {
        let most = most.max(1);
        self.starting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < most).then_some(n + 1)
            })
            .ok()
            .map(|_| StartClaim(&self.starting))
    }

    /// The most first passes that ran at once.
    pub(in crate::phases) fn high_water(&self) -> usize {
        self.high_water.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Claims stop at the limit and come back when dropped.
    #[test]
    fn claims_stop_at_the_limit_and_come_back_when_dropped() {
        let turns = PassTurns::default();
        let a = turns.claim(2).expect("first");
        let _b = turns.claim(2).expect("second");
        assert!(turns.claim(2).is_none(), "a third is refused");
        drop(a);
        assert!(turns.claim(2).is_some(), "a dropped claim frees its place");
        let one = PassTurns::default();
        let _only = one.claim(0).expect("zero is read as one");
        assert!(one.claim(0).is_none());
    }

    /// A second backup waits for a turn, says so in its log, and gets the
    /// turn once the first is given back; the high water mark is one.
    #[tokio::test]
    async fn a_backup_past_the_limit_waits_for_a_turn() {
        let turns = PassTurns::default();
        let journal = Journal::default();
        let first = turns.turn(1, &journal, "a").await;
        let second = turns.turn(1, &journal, "b");
        tokio::pin!(second);
        // Not ready while the first holds the only turn.
        assert!(futures::poll!(&mut second).is_pending());
        assert!(
            journal.lines("b")[0]
                .ends_with("waiting for a turn: 1 backups are listing and running their plugins"),
            "{:?}",
            journal.lines("b")
        );
        drop(first);
        let _second = second.await;
        assert_eq!(turns.high_water(), 1);
        assert!(journal.lines("a").is_empty(), "the first never waited");
    }
}
