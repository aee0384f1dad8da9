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
            .delete(run.name(), Some(&run.object.metadata.uid))
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

#[cfg(test)]
mod tests {
    use super::super::test_support::Parts;
    use crate::backup::object::{BackupPhase, rfc3339};
    use iar_core::item::ItemRef;
    use iar_core::operations::{Operation, OperationPhase, OperationSpec, OperationsMap};
    use std::sync::Arc;

    /// A waiting backup canceled: its pending operation is cancelled
    /// through its plugin and ends Canceled, the backup ends Failed with
    /// the reason at the clock's time, what it wrote stays.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_canceled_backup_cancels_its_operations_and_fails_with_the_reason() {
        let plugin = super::super::test_support::hostile();
        let name = plugin.name().to_string();
        let parts = Parts::with(Arc::new(iar_core::NoCluster), vec![plugin]);
        parts
            .put_object("b", BackupPhase::WaitingForPluginOperations)
            .await;
        let spec = OperationSpec {
            backup_name: "b".into(),
            backup_uid: "uid-1".into(),
            backup_item_action: name,
            resource_identifier: ItemRef::new("", "configmaps", "shop", "cm"),
            operation_id: "op-1".into(),
            post_operation_items: Vec::new(),
        };
        parts
            .operations
            .insert_loaded("b", vec![Operation::new(spec, parts.now())])
            .await;
        let mut run = parts.load("b").await;

        parts
            .canceller()
            .run(&mut run, "its Backup resource was deleted")
            .await
            .unwrap();
        let stored = parts.stored("b").await;
        assert_eq!(stored.status.phase, BackupPhase::Failed);
        assert_eq!(
            stored.status.failure_reason,
            "its Backup resource was deleted"
        );
        assert_eq!(
            stored.status.completion_timestamp,
            Some(rfc3339(parts.now()))
        );
        let ops = OperationsMap::new();
        ops.load("b", &parts.store).await.unwrap();
        let op = &ops.get("b").await.unwrap()[0];
        assert_eq!(op.status.phase, OperationPhase::Canceled);
        assert_eq!(
            op.status.error,
            "its Backup resource was deleted; cancel requested"
        );
        let log = parts.journal.lines("b");
        assert!(log.iter().any(|l| l.ends_with("cancel op-1")), "{log:#?}");
        assert!(
            log.iter()
                .any(|l| l.ends_with("backup canceled: its Backup resource was deleted")),
            "{log:#?}"
        );
    }
}
