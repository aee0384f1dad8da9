//! Polling operations on blocking threads, one instance per plugin and
//! thread kept across the periods of a backup.

use crate::backup::object::rfc3339;
use iar_core::cluster::ClusterReader;
use iar_core::operations::{Operation, OperationPhase};
use iar_plugin::plugin::{BackupRef, Plugin, PluginInstance, Progress};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// What one poll learned about one operation.
#[derive(Debug)]
pub(super) enum Update {
    Progress(Progress),
    /// Transient: kept as it is, retried next period until it times out.
    Retry(String),
    Failed(String),
    TimedOut(String),
    /// The backup was canceled; the plugin was asked to cancel.
    Canceled(String),
}

/// What a round does with each pending operation: ask its progress, or
/// cancel it because the backup ends (the reason says why).
pub(super) enum Round {
    Poll,
    Cancel(String),
}

/// Each waiting backup's poller, kept between steps so that its instances
/// live for the backup (isolation `backup`).
#[derive(Default)]
pub(super) struct Pollers(std::sync::Mutex<HashMap<String, Poller>>);

impl Pollers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Poller>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn take(&self, backup: &str) -> Option<Poller> {
        self.lock().remove(backup)
    }

    pub(super) fn put(&self, backup: &str, poller: Poller) {
        self.lock().insert(backup.to_string(), poller);
    }

    pub(super) fn forget(&self, backup: &str) {
        self.lock().remove(backup);
    }
}

/// Polls operations on a blocking thread; keeps one instance per plugin and
/// polling thread across the periods of one backup.
pub(super) struct Poller {
    pub(super) plugins: Vec<Plugin>,
    /// One per polling thread: its instances (one per plugin) and log lines.
    pub(super) workers: Vec<PollWorker>,
    pub(super) cluster: Arc<dyn ClusterReader>,
    pub(super) backup: BackupRef,
    pub(super) timeout: Duration,
    pub(super) logs: Vec<String>,
}

#[derive(Default)]
pub(super) struct PollWorker {
    instances: HashMap<String, PluginInstance>,
    logs: Vec<String>,
}

/// Operations one polling thread takes at least: below it, threads cost
/// more than they save.
pub(super) const OPERATIONS_PER_POLL_THREAD: usize = 256;

/// Threads to poll `pending` operations on: one for a few, up to `workers`
/// for many.
pub(super) fn poll_threads(pending: usize, workers: usize) -> usize {
    (pending / OPERATIONS_PER_POLL_THREAD).clamp(1, workers.max(1))
}

/// Keyed by plugin and id: ids are unique per plugin only.
pub(super) type PollUpdate = ((String, String), Update);

impl Poller {
    /// Polls every operation of `pending` once, on `threads` threads, each
    /// a contiguous share of the list with its own instances; answers and
    /// log lines in the order of `pending`.
    pub(super) fn poll_all(
        &mut self,
        pending: &[Operation],
        now: SystemTime,
        threads: usize,
        round: &Round,
    ) -> Vec<PollUpdate> {
        let threads = threads.clamp(1, pending.len().max(1));
        if self.workers.len() < threads {
            self.workers.resize_with(threads, PollWorker::default);
        }
        let shared = Shared {
            plugins: &self.plugins,
            cluster: &self.cluster,
            backup: &self.backup,
            timeout: self.timeout,
        };
        let shared = &shared;
        let poll_share = |worker: &mut PollWorker, ops: &[Operation]| -> Vec<PollUpdate> {
            ops.iter()
                .map(|op| {
                    let key = (
                        op.spec.backup_item_action.clone(),
                        op.spec.operation_id.clone(),
                    );
                    (key, worker.poll(shared, op, now, round))
                })
                .collect()
        };
        let updates = if threads == 1 {
            poll_share(&mut self.workers[0], pending)
        } else {
            let share = pending.len().div_ceil(threads);
            std::thread::scope(|scope| {
                let handles: Vec<_> = self
                    .workers
                    .iter_mut()
                    .zip(pending.chunks(share))
                    .map(|(worker, ops)| scope.spawn(move || poll_share(worker, ops)))
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                    .collect()
            })
        };
        for worker in &mut self.workers {
            self.logs.append(&mut worker.logs);
        }
        updates
    }
}

/// What every polling thread of a round reads.
pub(super) struct Shared<'a> {
    plugins: &'a [Plugin],
    cluster: &'a Arc<dyn ClusterReader>,
    backup: &'a BackupRef,
    timeout: Duration,
}

impl PollWorker {
    fn poll(&mut self, shared: &Shared, op: &Operation, now: SystemTime, round: &Round) -> Update {
        let Shared {
            plugins,
            cluster,
            backup,
            timeout,
        } = *shared;
        let plugin_name = &op.spec.backup_item_action;
        let Some(plugin) = plugins.iter().find(|p| p.name() == plugin_name) else {
            return Update::Failed(format!(
                "plugin {plugin_name:?} that started it is not in this backup's plugin set here (not loaded, or loaded at another digest; see the backup's log) (rule: pinned-plugin-set)"
            ));
        };
        let instance = self
            .instances
            .entry(plugin_name.clone())
            .or_insert_with(|| plugin.instance(cluster.clone()));
        let update = match round {
            Round::Poll => poll_call(instance, op, backup, timeout, now),
            Round::Cancel(reason) => cancel_call(instance, op, backup, reason),
        };
        let logs = instance.take_logs();
        self.logs
            .extend(logs.into_iter().map(|l| l.line(plugin_name)));
        update
    }
}

pub(super) fn poll_call(
    instance: &mut PluginInstance,
    op: &Operation,
    backup: &BackupRef,
    timeout: Duration,
    now: SystemTime,
) -> Update {
    let id = &op.spec.operation_id;
    let item = &op.spec.resource_identifier;
    let created = op.status.created.unwrap_or(now);
    if now.duration_since(created).unwrap_or_default() >= timeout {
        // The one cancel: the operation turns Failed right after, so it is
        // never polled or cancelled again.
        let cancel = match instance.cancel(id, item, backup) {
            Ok(()) => "cancel requested".to_string(),
            Err(e) => format!("cancel failed: {e}"),
        };
        return Update::TimedOut(format!(
            "asynchronous action timed out after {} (created {}); {cancel}",
            humantime::format_duration(timeout),
            rfc3339(created)
        ));
    }
    match instance.progress(id, item, backup) {
        Ok(p) => Update::Progress(p),
        Err(e) if e.is_retryable() => Update::Retry(e.to_string()),
        Err(e) => Update::Failed(e.to_string()),
    }
}

/// Asks the plugin to cancel an operation its backup no longer waits for;
/// the operation ends Canceled whatever the plugin answers.
pub(super) fn cancel_call(
    instance: &mut PluginInstance,
    op: &Operation,
    backup: &BackupRef,
    reason: &str,
) -> Update {
    let (id, item) = (&op.spec.operation_id, &op.spec.resource_identifier);
    Update::Canceled(match instance.cancel(id, item, backup) {
        Ok(()) => format!("{reason}; cancel requested"),
        Err(e) => format!("{reason}; cancel failed: {e}"),
    })
}

/// Applies one poll's result; returns whether anything changed.
pub(super) fn apply(op: &mut Operation, update: &Update, now: SystemTime) -> bool {
    let before = op.clone();
    let s = &mut op.status;
    match update {
        Update::Progress(p) => {
            s.n_completed = p.n_completed;
            s.n_total = p.n_total;
            s.operation_units = p.operation_units.clone();
            s.description = p.description.clone();
            if let Some(started) = p.started {
                s.started.get_or_insert(started);
                if s.phase == OperationPhase::New {
                    s.phase = OperationPhase::InProgress;
                }
            }
            if p.completed {
                match &p.error {
                    Some(e) => {
                        s.phase = OperationPhase::Failed;
                        s.error = e.clone();
                    }
                    None => s.phase = OperationPhase::Completed,
                }
            }
            if op.status != before.status {
                op.status.updated = Some(p.updated.unwrap_or(now));
            }
        }
        Update::Retry(reason) => s.description = format!("retrying: {reason}"),
        Update::Failed(reason) | Update::TimedOut(reason) => {
            s.phase = OperationPhase::Failed;
            s.error = reason.clone();
            s.updated = Some(now);
        }
        Update::Canceled(reason) => {
            s.phase = OperationPhase::Canceled;
            s.error = reason.clone();
            s.updated = Some(now);
        }
    }
    *op != before
}

#[cfg(test)]
mod poll_tests {
    use super::*;
    use iar_core::NoCluster;
    use iar_core::item::ItemRef;
    use iar_core::operations::OperationSpec;
    use iar_plugin::plugin::Phase;
    use iar_plugin::{PluginSettings, Runtime, RuntimeConfig};

    fn op(plugin: &str, i: usize) -> Operation {
        let spec = OperationSpec {
            backup_name: "b".into(),
            backup_uid: "u".into(),
            backup_item_action: plugin.into(),
            resource_identifier: ItemRef::new("", "pods", "ns", format!("p{i}")),
            operation_id: format!("op-{i}"),
            post_operation_items: Vec::new(),
        };
        Operation::new(spec, now())
    }

    /// Any fixed time: nothing here is near its timeout.
    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    /// Many operations are polled on several threads, each with its own
    /// instance, and the answers come back in the order of the list (the
    /// labels plugin starts no operations, so each answer names its id).
    /// A few are polled on one thread.
    #[test]
    fn polling_splits_many_operations_over_threads_in_order() {
        assert_eq!(poll_threads(10, 4), 1);
        assert_eq!(poll_threads(OPERATIONS_PER_POLL_THREAD * 2, 4), 2);
        assert_eq!(poll_threads(100_000, 4), 4);
        assert_eq!(poll_threads(100_000, 0), 1);

        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: None,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let plugin = Plugin::from_file(
            &runtime,
            iar_tests::artifacts::LABELS.as_ref(),
            PluginSettings::default(),
        )
        .unwrap();
        let name = plugin.name().to_string();
        let mut poller = Poller {
            plugins: vec![plugin],
            workers: Vec::new(),
            cluster: Arc::new(NoCluster),
            backup: BackupRef {
                object: None,
                name: "b".into(),
                namespace: "velero".into(),
                uid: "u".into(),
                spec: serde_json::json!({}),
                phase: Phase::Backup,
            },
            timeout: Duration::from_secs(3600),
            logs: Vec::new(),
        };
        let ops: Vec<Operation> = (0..600).map(|i| op(&name, i)).collect();
        let updates = poller.poll_all(&ops, now(), 3, &Round::Poll);
        assert_eq!(poller.workers.len(), 3);
        assert!(poller.workers.iter().all(|w| w.instances.len() == 1));
        assert_eq!(updates.len(), ops.len());
        for (i, ((plugin, id), update)) in updates.iter().enumerate() {
            assert_eq!(
                (plugin.as_str(), id.as_str()),
                (name.as_str(), &*format!("op-{i}"))
            );
            match update {
                Update::Failed(m) => assert!(m.contains(&format!("\"op-{i}\"")), "{m}"),
                _ => panic!("op-{i}: the labels plugin starts no operations"),
            }
        }
        // A later period with fewer threads reuses the first worker.
        let updates = poller.poll_all(&ops[..5], now(), 1, &Round::Poll);
        assert_eq!(updates.len(), 5);
        assert_eq!(poller.workers.len(), 3);
    }
}
