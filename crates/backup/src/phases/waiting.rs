//! WaitingForPluginOperations: polling rounds, their timeouts, and the
//! move to finalizing once no operation is pending.

use super::Step;
use super::errors::PhaseError;
use super::journal::Journal;
use super::load::ensure_operations;
use super::plugin_set::PluginSets;
use super::poller::{Poller, Pollers, Round, Update, apply, poll_threads};
use super::record::{Recorder, Run};
use crate::backup::object::BackupPhase;
use crate::backup::spec;
use iar_core::clock::Clock;
use iar_core::cluster::ClusterReader;
use iar_core::operations::{Operation, OperationPhase, OperationsMap};
use iar_core::store::BackupStore;
use iar_plugin::plugin::Phase;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The waiting phase's reconciler: what it polls with and where it writes.
pub(super) struct Waiting<'a> {
    pub(super) store: &'a BackupStore,
    pub(super) operations: &'a OperationsMap,
    pub(super) plugins: &'a PluginSets,
    pub(super) pollers: &'a Pollers,
    pub(super) cluster: &'a Arc<dyn ClusterReader>,
    pub(super) journal: &'a Journal,
    pub(super) recorder: Recorder<'a>,
    /// Operation timeouts are counted on its wall clock, the period on its
    /// monotonic one.
    pub(super) clock: &'a dyn Clock,
    /// `Settings::sync_period`: from the start of one poll to the next.
    pub(super) sync_period: Duration,
    /// `Settings::operation_timeout`, unless the spec says otherwise.
    pub(super) operation_timeout: Duration,
    /// `Settings::workers`: the most polling threads.
    pub(super) workers: usize,
}

impl Waiting<'_> {
    /// One step in a waiting phase: every pending operation is polled
    /// once; when none is left the backup moves to finalizing and the step
    /// asks to be run again at once, otherwise after the rest of the sync
    /// period.
    pub(super) async fn step(&self, run: &mut Run) -> Result<Step, PhaseError> {
        ensure_operations(self.store, self.journal, self.operations, run).await?;
        let round = self.clock.now();
        if self.poll_round(run, Round::Poll).await? {
            self.finish(run).await?;
            let next = BackupPhase::finalizing(run.partially_failed());
            self.recorder.set_phase(run, next).await?;
            Ok(Step::Requeue(Duration::ZERO))
        } else {
            self.show_operation_counts(run).await;
            // A period is from the start of one poll to the start of the
            // next.
            let spent = self.clock.now().saturating_duration_since(round);
            Ok(Step::Requeue(self.sync_period.saturating_sub(spent)))
        }
    }

    pub(super) fn timeout_for(&self, run: &Run) -> Duration {
        spec::operation_timeout(&run.object.spec)
            .ok()
            .flatten()
            .unwrap_or(self.operation_timeout)
    }

    /// Polls (or cancels) every pending operation once and persists what
    /// changed; true when none is left pending.
    pub(super) async fn poll_round(&self, run: &Run, round: Round) -> Result<bool, PhaseError> {
        let name = run.name().to_string();
        let ops = self.operations.get(&name).await.unwrap_or_default();
        let pending: Vec<Operation> = ops
            .into_iter()
            .filter(|o| !o.status.phase.is_terminal())
            .collect();
        if pending.is_empty() {
            return Ok(true);
        }
        let p = self.pollers.take(&name).unwrap_or_else(|| Poller {
            plugins: self.plugins.for_backup(&name),
            workers: Vec::new(),
            // Its plugins write to the cluster only under the lease.
            cluster: super::fenced_cluster::fenced(self.cluster.clone(), self.store, &name),
            backup: run.backup_ref(Phase::Backup),
            timeout: self.timeout_for(run),
            logs: Vec::new(),
        });
        let threads = poll_threads(pending.len(), self.workers);
        let now = self.clock.system_now();
        // wasm calls block: polling runs on a blocking thread (and, for many
        // operations, on as many scoped threads as there are workers).
        let (updates, mut p) = tokio::task::spawn_blocking(move || {
            let mut p = p;
            let updates = p.poll_all(&pending, now, threads, &round);
            (updates, p)
        })
        .await
        .map_err(|e| PhaseError::Panicked {
            name: name.clone(),
            what: "polling operation progress",
            source: e,
        })?;
        for line in std::mem::take(&mut p.logs) {
            self.journal.record(&name, line);
        }
        self.pollers.put(&name, p);
        for ((_, id), update) in &updates {
            match update {
                Update::Failed(reason) | Update::TimedOut(reason) => self
                    .journal
                    .line(&name, format!("operation {id:?} failed: {reason}")),
                Update::Canceled(reason) => self
                    .journal
                    .line(&name, format!("operation {id:?} canceled: {reason}")),
                Update::Progress(_) | Update::Retry(_) => {}
            }
        }
        let now = self.clock.system_now();
        let by_key: HashMap<(&str, &str), &Update> = updates
            .iter()
            .map(|((plugin, id), u)| ((plugin.as_str(), id.as_str()), u))
            .collect();
        let mut all_done = true;
        // One pass over the list: apply this period's answers and learn
        // whether anything is still pending, without a second copy.
        self.operations
            .update(&name, |ops| {
                let mut changed = false;
                for op in ops.iter_mut().filter(|o| !o.status.phase.is_terminal()) {
                    let key = (
                        op.spec.backup_item_action.as_str(),
                        op.spec.operation_id.as_str(),
                    );
                    if let Some(update) = by_key.get(&key) {
                        changed |= apply(op, update, now);
                    }
                    all_done &= op.status.phase.is_terminal();
                }
                changed
            })
            .await;
        if let Err(e) = self.operations.sync(&name, self.store).await {
            // Kept dirty in the map; the next period retries.
            tracing::error!(backup = %name, "persisting operation progress failed, will retry: {e}");
        }
        Ok(all_done)
    }

    /// While operations run: their counts as they change (completed,
    /// failed), told to the status sink, as Velero's operations controller
    /// updates its Backup each period. Persisted with the next phase change.
    async fn show_operation_counts(&self, run: &mut Run) {
        let ops = self.operations.get(run.name()).await.unwrap_or_default();
        let count = |f: &dyn Fn(OperationPhase) -> bool| {
            ops.iter().filter(|o| f(o.status.phase)).count() as u64
        };
        let completed = count(&|p| p == OperationPhase::Completed);
        let failed = count(&|p| p.is_terminal() && p != OperationPhase::Completed);
        let status = &mut run.object.status;
        if (
            status.backup_item_operations_completed,
            status.backup_item_operations_failed,
        ) == (completed, failed)
        {
            return;
        }
        status.backup_item_operations_completed = completed;
        status.backup_item_operations_failed = failed;
        self.recorder.tell(&run.object);
    }

    /// Once every operation is terminal: persists them, counts them on the
    /// backup, and records each one that did not complete as an error.
    pub(super) async fn finish(&self, run: &mut Run) -> Result<(), PhaseError> {
        let name = run.name().to_string();
        self.pollers.forget(&name);
        self.operations.sync(&name, self.store).await?;
        let ops = self.operations.get(&name).await.unwrap_or_default();
        run.object.status.backup_item_operations_attempted = ops.len() as u64;
        run.object.status.backup_item_operations_completed = ops
            .iter()
            .filter(|o| o.status.phase == OperationPhase::Completed)
            .count() as u64;
        run.object.status.backup_item_operations_failed = ops
            .iter()
            .filter(|o| o.status.phase != OperationPhase::Completed)
            .count() as u64;
        for op in ops
            .iter()
            .filter(|o| o.status.phase != OperationPhase::Completed)
        {
            let message = format!(
                "operation {:?} of plugin {:?} on {}: {}",
                op.spec.operation_id,
                op.spec.backup_item_action,
                op.spec.resource_identifier,
                op.status.error
            );
            if !run.results.errors.all().any(|m| m == &message) {
                run.results
                    .errors
                    .add(&op.spec.resource_identifier.namespace, message);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
