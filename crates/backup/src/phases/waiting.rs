//! WaitingForPluginOperations: polling rounds, their timeouts, and
//! cancelling a backup's operations.

use crate::backup::object::{BackupObject, BackupPhase};
use crate::backup::spec;
use iar_core::operations::{Operation, OperationPhase};
use iar_core::store::BackupFile;
use iar_plugin::plugin::Phase;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use super::poller::{Poller, Update, apply, poll_threads};
use super::*;

impl PhaseMachine {
    pub(super) fn timeout_for(&self, run: &Run) -> Duration {
        spec::operation_timeout(&run.object.spec)
            .ok()
            .flatten()
            .unwrap_or(self.settings.operation_timeout)
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
        let p = self
            .pollers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&name);
        let p = p.unwrap_or_else(|| Poller {
            plugins: self.plugins_for(&name),
            workers: Vec::new(),
            cluster: self.cluster.clone(),
            backup: run.backup_ref(Phase::Backup),
            timeout: self.timeout_for(run),
            logs: Vec::new(),
        });
        let threads = poll_threads(pending.len(), self.settings.workers);
        // wasm calls block: polling runs on a blocking thread (and, for many
        // operations, on as many scoped threads as there are workers).
        let (updates, mut p) = tokio::task::spawn_blocking(move || {
            let mut p = p;
            let updates = p.poll_all(&pending, SystemTime::now(), threads, &round);
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
        self.pollers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone(), p);
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
        let now = SystemTime::now();
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
        if let Err(e) = self.operations.sync(&name, &self.store).await {
            // Kept dirty in the map; the next period retries.
            tracing::error!(backup = %name, "persisting operation progress failed, will retry: {e}");
        }
        Ok(all_done)
    }

    /// While operations run: their counts as they change (completed,
    /// failed), told to the status sink, as Velero's operations controller
    /// updates its Backup each period. Persisted with the next phase change.
    pub(super) async fn show_operation_counts(&self, run: &mut Run) {
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
        if let Some(sink) = &self.status_sink {
            sink(&run.object);
        }
    }

    /// Once every operation is terminal: persists them, counts them on the
    /// backup, and records each one that did not complete as an error.
    pub(super) async fn finish_waiting(&self, run: &mut Run) -> Result<(), PhaseError> {
        let name = run.name().to_string();
        self.pollers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&name);
        self.operations.sync(&name, &self.store).await?;
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

    /// Ends an unfinished backup that must not go on (the cluster
    /// controller calls it when a Backup resource is deleted mid-way):
    /// every pending operation is cancelled through its plugin (the
    /// contract's `cancel`) and ends Canceled, and the backup ends Failed
    /// with `reason`. What it wrote stays in the store. A finished backup
    /// (or one being deleted) is returned as it is. The caller holds the
    /// backup's lease.
    pub async fn cancel(&self, name: &str, reason: &str) -> Result<BackupObject, PhaseError> {
        let object: BackupObject = self
            .store
            .get_json(name, BackupFile::Metadata)
            .await?
            .ok_or_else(|| PhaseError::NotFound(name.into()))?;
        if !object.status.phase.is_running() {
            return Ok(object);
        }
        let mut run = self.load_run(name, object).await?;
        let ended = self.cancel_run(&mut run, reason).await;
        let result = match ended {
            Ok(()) => Ok(run.object),
            Err(e) => Err(self.fail(&mut run, e).await),
        };
        self.forget(name).await;
        result
    }

    /// Asks the node agents to stop every unfinished volume backup of
    /// `name` (no lease needed: it only marks the requests); a failure to
    /// ask is logged, and whoever cancels goes on.
    pub async fn cancel_volume_backups(&self, name: &str) {
        if let Some(backupper) = &self.volume_backupper
            && let Err(e) = backupper.cancel_backup(name).await
        {
            tracing::warn!(backup = %name, "{e}");
        }
    }

    pub(super) async fn cancel_run(&self, run: &mut Run, reason: &str) -> Result<(), PhaseError> {
        self.cancel_volume_backups(run.name()).await;
        match plan(run.object.status.phase) {
            Plan::FailInterrupted => self.interrupted_blocks(run).await?,
            Plan::Poll | Plan::Finalize => {
                self.ensure_operations(run).await?;
                self.poll_round(run, Round::Cancel(reason.to_string()))
                    .await?;
                self.finish_waiting(run).await?;
            }
            Plan::Nothing => {}
        }
        // Canceled: what its plugins created for it goes (their own
        // cancel may have deleted it already).
        if let Err(e) = self
            .delete_created(run.name(), &run.object.metadata.uid)
            .await
        {
            run.results.errors.add("", e.to_string());
        }
        self.journal
            .line(run.name(), format!("backup canceled: {reason}"));
        run.object.status.failure_reason = reason.to_string();
        self.set_phase(run, BackupPhase::Failed).await?;
        Ok(())
    }
}
