//! Ending an unfinished backup that must not go on (its Backup resource
//! was deleted mid-way): its volume backups and operations are cancelled,
//! what its plugins created goes, and it ends Failed with the reason.

use super::blocks::Blocks;
use super::created::Created;
use super::dispatch::{Plan, plan};
use super::errors::PhaseError;
use super::journal::Journal;
use super::load::ensure_operations;
use super::poller::Round;
use super::record::{Recorder, Run};
use super::waiting::Waiting;
use crate::backup::object::BackupPhase;

/// What a cancel needs: the waiting phase's polling (to cancel through the
/// plugins), the blocks (to fail or cancel their work), the created
/// objects.
pub(super) struct Cancel<'a> {
    pub(super) waiting: Waiting<'a>,
    pub(super) blocks: Blocks<'a>,
    pub(super) created: Created<'a>,
    pub(super) journal: &'a Journal,
    pub(super) recorder: Recorder<'a>,
}

impl Cancel<'_> {
    pub(super) async fn run(&self, run: &mut Run, reason: &str) -> Result<(), PhaseError> {
        self.blocks.cancel_volume_backups(run.name()).await;
        match plan(run.object.status.phase) {
            Plan::FailInterrupted => self.blocks.interrupted_blocks(run).await?,
            Plan::Poll | Plan::Finalize => {
                let w = &self.waiting;
                ensure_operations(w.store, w.journal, w.operations, run).await?;
                w.poll_round(run, Round::Cancel(reason.to_string())).await?;
                w.finish(run).await?;
            }
            Plan::Nothing => {}
        }
        // Canceled: what its plugins created for it goes (their own
        // cancel may have deleted it already).
        if let Err(e) = self
            .created
            .delete(run.name(), &run.object.metadata.uid)
            .await
        {
            run.results.errors.add("", e.to_string());
        }
        self.journal
            .line(run.name(), format!("backup canceled: {reason}"));
        run.object.status.failure_reason = reason.to_string();
        self.recorder.set_phase(run, BackupPhase::Failed).await?;
        Ok(())
    }
}
