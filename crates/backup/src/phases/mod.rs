//! The phase machine: New → InProgress → WaitingForPluginOperations[PartiallyFailed]
//! → Finalizing[PartiallyFailed] → Completed / PartiallyFailed / Failed.
//!
//! Every phase change is persisted before the next phase starts, so a killed
//! process leaves a backup that [`PhaseMachine::resume`] can continue: one found
//! InProgress is marked Failed (its items were never all written), one found
//! waiting or finalizing continues from its persisted operations, with each
//! operation's timeout still counted from its original creation.

use crate::backup::expiry;
use crate::backup::object::{BackupObject, BackupPhase, Results, rfc3339};
use crate::backup::spec;
use iar_core::cluster::ClusterReader;
use iar_core::operations::OperationsMap;
use iar_core::select::BackupFilter;
use iar_core::store::lease::LeaseError;
use iar_core::store::{BackupFile, BackupStore, StoreError};
use iar_plugin::plugin::{BackupRef, Phase, Plugin};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

mod blocks;
mod contents;
mod created;
mod finalize;
mod first_pass;
pub mod gc;
mod held;
mod journal;
mod plugin_set;
mod poller;
mod resume;
mod settings;
mod waiting;

use journal::Journal;
use poller::{Poller, Round};
pub use resume::recorded_sources;
pub use settings::Settings;

#[derive(Debug, thiserror::Error)]
pub enum PhaseError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("backup {0:?} not found in the store")]
    NotFound(String),
    #[error("backup {name:?} already exists in {store}; choose another name")]
    Exists { name: String, store: String },
    #[error("backup {name:?}: {reason}")]
    Invalid { name: String, reason: String },
    #[error("backup {name:?}: reading items: {source}")]
    Items {
        name: String,
        #[source]
        source: iar_core::cluster::ClusterError,
    },
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error("backup {name:?}: {what} panicked: {source}")]
    Panicked {
        name: String,
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    #[error("backup {name:?}: {what}: {source}")]
    Io {
        name: String,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("backup {name:?}: cannot resume: {reason}")]
    Sources { name: String, reason: String },
    #[error(
        "backup {0:?} is being deleted (phase Deleting); the next garbage collection (`iar gc`, or the controller's sweep) finishes it"
    )]
    Deleting(String),
}

/// What a caller wants to back up.
#[derive(Clone, Debug)]
pub struct BackupRequest {
    pub name: String,
    pub namespace: String,
    /// A Velero Backup `spec` (filters, itemOperationTimeout).
    pub spec: serde_json::Value,
    /// Manifest files or directories: the items, and the cluster.
    pub sources: Vec<PathBuf>,
    /// Recorded on the Backup object (iar records the plugin settings it
    /// was run with, for `resume`).
    pub annotations: BTreeMap<String, String>,
}

/// Receives every line of every backup's log as it is written (a progress
/// display, for example).
pub type Observer = Box<dyn Fn(&str, &str) + Send + Sync>;

/// Where a backup's plugins come from: a fixed list (the CLI), or the
/// current set of a registry that reloads them (the cluster). Each backup
/// pins the set it started with until it ends.
pub type PluginSource = Arc<dyn Fn() -> Vec<Plugin> + Send + Sync>;

/// Told of every phase change once it is persisted (the controller in a
/// cluster copies it into the Backup resource's status). Must not block.
pub type StatusSink = Arc<dyn Fn(&BackupObject) + Send + Sync>;

/// Whether a running backup has been given up by whoever asked for it (the
/// cluster controller: its Backup resource is deleted or gone), asked once
/// a sync period while its blocks wait for volume backups.
pub type CancelProbe =
    Arc<dyn Fn(String) -> futures::future::BoxFuture<'static, bool> + Send + Sync>;

/// What one [`PhaseMachine::step`] leaves to do.
#[derive(Debug)]
pub enum Step {
    /// Call `step` again after this long (operations still running).
    Requeue(Duration),
    /// The backup is in a terminal phase.
    Done(Box<BackupObject>),
}

/// Runs backups through their phases.
pub struct PhaseMachine {
    plugins: PluginSource,
    pub store: BackupStore,
    pub operations: Arc<OperationsMap>,
    pub cluster: Arc<dyn ClusterReader>,
    pub settings: Settings,
    /// Shared with the item pass, which records plugin lines as they come
    /// (not held per item until the pass ends).
    journal: Arc<Journal>,
    /// The plugin set each running backup started with.
    pinned: Mutex<HashMap<String, Vec<Plugin>>>,
    /// Each waiting backup's poller, kept between steps so that its
    /// instances live for the backup (isolation `backup`).
    pollers: Mutex<HashMap<String, Poller>>,
    status_sink: Option<StatusSink>,
    cancel_probe: Option<CancelProbe>,
    /// Where hooks run when `settings.exec_hooks_locally` is off (the
    /// cluster controller: in the pod, through `pods/exec`); none: they are
    /// recorded as skipped.
    hook_runner: Option<Arc<dyn crate::backup::hooks::HookRunner>>,
    /// Where pod volumes are backed up when `settings.volume_data` is not
    /// set (the cluster controller: through node agents); none: a volume
    /// chosen for a backup is a warning.
    volume_backupper: Option<Arc<dyn crate::backup::volumes::VolumeBackupper>>,
    /// Turns at a first pass, `settings.concurrent_passes` of them (made
    /// on first use, so settings changed after `new` count).
    passes: std::sync::OnceLock<tokio::sync::Semaphore>,
    /// First passes running now, and the most that ever ran at once.
    passes_running: std::sync::atomic::AtomicUsize,
    passes_high_water: std::sync::atomic::AtomicUsize,
    /// Leases kept between the steps of the backups this process drives.
    kept: held::Kept,
    /// Backups claimed to start here and not yet through their first step.
    starting: std::sync::atomic::AtomicUsize,
}

/// Where a backup stands while the controller drives it.
struct Run {
    object: BackupObject,
    results: Results,
}

impl Run {
    fn name(&self) -> &str {
        &self.object.metadata.name
    }

    fn partially_failed(&self) -> bool {
        self.results.errors.count() > 0
    }

    fn backup_ref(&self, phase: Phase) -> BackupRef {
        BackupRef {
            name: self.object.metadata.name.clone(),
            namespace: self.object.metadata.namespace.clone(),
            uid: self.object.metadata.uid.clone(),
            spec: self.object.spec.clone(),
            phase,
        }
    }
}

impl PhaseMachine {
    pub fn new(
        plugins: Vec<Plugin>,
        store: BackupStore,
        cluster: Arc<dyn ClusterReader>,
        settings: Settings,
    ) -> Self {
        PhaseMachine {
            plugins: Arc::new(move || plugins.clone()),
            store,
            operations: Arc::new(OperationsMap::new()),
            cluster,
            settings,
            journal: Arc::default(),
            pinned: Mutex::new(HashMap::new()),
            pollers: Mutex::new(HashMap::new()),
            status_sink: None,
            cancel_probe: None,
            hook_runner: None,
            volume_backupper: None,
            passes: std::sync::OnceLock::new(),
            passes_running: Default::default(),
            passes_high_water: Default::default(),
            kept: held::Kept::default(),
            starting: Default::default(),
        }
    }

    /// Plugins from `source`, asked when a backup starts (or is taken over
    /// after a restart) and pinned for it.
    pub fn with_plugin_source(mut self, source: PluginSource) -> Self {
        self.plugins = source;
        self
    }

    /// Runs hooks through `runner` (unless `settings.exec_hooks_locally`).
    pub fn with_hook_runner(mut self, runner: Arc<dyn crate::backup::hooks::HookRunner>) -> Self {
        self.hook_runner = Some(runner);
        self
    }

    /// Backs pod volumes up through `backupper` (unless
    /// `settings.volume_data`).
    pub fn with_volume_backupper(
        mut self,
        backupper: Arc<dyn crate::backup::volumes::VolumeBackupper>,
    ) -> Self {
        self.volume_backupper = Some(backupper);
        self
    }

    /// Asks `probe`, while a backup's blocks wait, whether it was given up;
    /// its volume backups are then canceled at once (the wait runs inside
    /// a reconcile, which the deletion's reconcile would wait behind).
    pub fn with_cancel_probe(mut self, probe: CancelProbe) -> Self {
        self.cancel_probe = Some(probe);
        self
    }

    pub fn with_status_sink(mut self, sink: StatusSink) -> Self {
        self.status_sink = Some(sink);
        self
    }

    /// Calls `observer(backup, line)` for every log line of every backup.
    pub fn with_observer(mut self, observer: Observer) -> Self {
        Arc::get_mut(&mut self.journal)
            .expect("the observer is set before the machine runs")
            .observer = Some(observer);
        self
    }

    /// Persists the backup object, results and log. Called on every phase change.
    async fn persist(&self, run: &Run) -> Result<(), StoreError> {
        let name = run.name();
        self.store
            .put_json(name, BackupFile::Results, &run.results)
            .await?;
        self.store.put_logs(name, &self.journal.lines(name)).await?;
        // The object last: its phase is what resume trusts.
        self.store
            .put_json(name, BackupFile::Metadata, &run.object)
            .await
    }

    async fn set_phase(&self, run: &mut Run, phase: BackupPhase) -> Result<(), StoreError> {
        run.object.status.phase = phase;
        run.object.status.errors = run.results.errors.count();
        run.object.status.warnings = run.results.warnings.count();
        if phase.is_terminal() {
            run.object.status.completion_timestamp = Some(rfc3339(SystemTime::now()));
        }
        self.journal.line(run.name(), format!("phase {phase}"));
        self.persist(run).await?;
        if let Some(sink) = &self.status_sink {
            sink(&run.object);
        }
        Ok(())
    }

    /// The backups this controller holds anything for (operations, log
    /// lines), sorted. Empty between backups: a long-running process
    /// forgets each backup when it ends, whatever the outcome.
    pub async fn tracked_backups(&self) -> Vec<String> {
        let mut names = self.operations.backups();
        names.extend(self.journal.backups());
        names.extend(
            self.pinned
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .keys()
                .cloned(),
        );
        names.extend(self.kept.backups());
        names.sort();
        names.dedup();
        names
    }

    async fn forget(&self, name: &str) {
        self.operations.remove(name).await;
        self.journal.forget(name);
        self.pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        self.pollers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    /// Drops what this process holds for a backup it no longer drives (it
    /// ended, or another process took it over).
    pub async fn release(&self, name: &str) {
        self.forget(name).await;
    }

    /// Runs `work` under a lease just taken, renewing it every third of
    /// its duration, and gives it back at the end. If the lease is lost
    /// (another process took it over after it expired) `work` is dropped
    /// where it stands and nothing more is written: the other process
    /// drives the backup now.
    async fn leased<T>(
        &self,
        lease: held::Held,
        work: impl Future<Output = Result<T, PhaseError>>,
    ) -> Result<T, PhaseError> {
        let result = lease.run(work).await;
        self.finish_lease(lease, result, false).await
    }

    /// After work under `lease`: kept for the next step (`keep`), or given
    /// back. A lost lease is someone else's now, and is dropped; a failed
    /// give-back expires.
    async fn finish_lease<T>(
        &self,
        lease: held::Held,
        result: Result<T, PhaseError>,
        keep: bool,
    ) -> Result<T, PhaseError> {
        if matches!(result, Err(PhaseError::Lease(_))) {
            return result;
        }
        if keep {
            self.kept.put(lease);
            return result;
        }
        match lease.give_back().await {
            Ok(()) => result,
            // Taken over while the work ran (a process paused past its
            // lease that then found the backup ended by its taker): the
            // work's success is not this process's.
            Err(lost @ LeaseError::Lost { .. }) if result.is_ok() => Err(PhaseError::Lease(lost)),
            Err(e) => {
                tracing::warn!("releasing a backup lease failed: {e}");
                result
            }
        }
    }

    /// The backup's lease: the one this process keeps between steps, or
    /// taken now.
    async fn lease_for(&self, name: &str) -> Result<held::Held, PhaseError> {
        if let Some(kept) = self.kept.take(name)
            && !kept.is_lost()
        {
            return Ok(kept);
        }
        Ok(held::take(&self.store, name, self.settings.lease_duration).await?)
    }

    /// Ends a backup Failed with the error that stopped it, so that nothing
    /// is left InProgress for `resume` to guess about; returns the error.
    /// A lost lease is not a failure of the backup (another process drives
    /// it) and writes nothing.
    async fn fail(&self, run: &mut Run, error: PhaseError) -> PhaseError {
        if matches!(error, PhaseError::Lease(_)) || !run.object.status.phase.is_running() {
            return error;
        }
        run.object.status.failure_reason = error.to_string();
        self.journal
            .line(run.name(), format!("backup failed: {error}"));
        if let Err(e) = self.set_phase(run, BackupPhase::Failed).await {
            tracing::error!(
                backup = %run.name(),
                "recording the failure failed too: {e}; the store still says {}",
                run.object.status.phase
            );
        }
        error
    }

    /// Runs a whole backup: first pass, waiting for operations, finalize.
    /// Another process creating or driving the same backup makes this fail
    /// ([`PhaseError::Exists`], [`LeaseError::Held`]); any error once
    /// the backup exists ends it Failed with the reason, and is returned.
    pub async fn run_backup(&self, req: BackupRequest) -> Result<BackupObject, PhaseError> {
        let filter = self.validate(&req)?;
        let lease = held::take(&self.store, &req.name, self.settings.lease_duration).await?;
        let name = req.name.clone();
        let result = self
            .leased(lease, async {
                self.create_and_run(req, filter).await?;
                self.steps(&name).await
            })
            .await;
        self.forget(&name).await;
        result
    }

    /// Starts a backup that does not exist yet: creates it and runs its
    /// first pass, which ends with the backup waiting for its operations or
    /// finalizing (or Failed, returned as the error). The caller holds the
    /// backup's lease; [`PhaseMachine::step`] takes it from there.
    pub async fn start(&self, req: BackupRequest) -> Result<BackupObject, PhaseError> {
        let filter = self.validate(&req)?;
        self.create_and_run(req, filter).await
    }

    /// What makes a request one that can never run, checked before any
    /// lease is taken or anything written: a name the store cannot hold
    /// every file of (over Kubernetes' 253 characters, or a lease file name
    /// over 255 bytes; [`BackupStore::check_backup_name`]), or a spec that
    /// does not parse. Retrying such a request cannot help.
    pub fn validate(&self, req: &BackupRequest) -> Result<BackupFilter, PhaseError> {
        self.store.check_backup_name(&req.name)?;
        let invalid = |reason: String| PhaseError::Invalid {
            name: req.name.clone(),
            reason,
        };
        let filter = BackupFilter::from_spec(&req.spec).map_err(invalid)?;
        spec::operation_timeout(&req.spec).map_err(invalid)?;
        expiry::effective_ttl(&req.spec, self.settings.default_backup_ttl).map_err(invalid)?;
        Ok(filter)
    }

    /// Steps a backup until it ends, sleeping between polls.
    async fn steps(&self, name: &str) -> Result<BackupObject, PhaseError> {
        loop {
            match self.step(name).await? {
                Step::Requeue(after) => tokio::time::sleep(after).await,
                Step::Done(object) => return Ok(*object),
            }
        }
    }

    /// Runs `work` on a backup under its lease (the one this process keeps
    /// between the backup's steps, or taken here; renewed while `work`
    /// runs, given back after): so that two processes never drive one
    /// backup.
    pub async fn with_lease<T>(
        &self,
        name: &str,
        work: impl Future<Output = Result<T, PhaseError>>,
    ) -> Result<T, PhaseError> {
        let lease = self.lease_for(name).await?;
        self.leased(lease, work).await
    }

    /// Abandons the leases kept between steps: they are no longer renewed
    /// and expire, so that another process takes their backups over. For
    /// a controller that stops driving (its run ended or was dropped)
    /// while this value lives on.
    pub fn abandon_kept_leases(&self) {
        self.kept.abandon_all();
    }

    /// Gives back (releases in the store) the leases kept between steps,
    /// and forgets their backups: what a controller replica does when it
    /// is stopped, so that another takes its backups at once instead of
    /// after their leases expire.
    pub async fn give_back_kept_leases(&self) {
        for held in self.kept.take_all() {
            let name = held.backup().to_string();
            match held.give_back().await {
                Ok(()) => tracing::info!(backup = %name, "gave its lease back"),
                Err(e) => tracing::warn!(backup = %name, "giving its lease back: {e}"),
            }
            self.forget(&name).await;
        }
    }

    /// One step under the backup's lease, as [`PhaseMachine::with_lease`],
    /// except that a backup that goes on (a requeue) keeps its lease in
    /// this process for its next step: the cluster controller's replicas
    /// each drive the backups they took from first step to last, and the
    /// others leave them alone until the lease expires (the replica died).
    pub async fn drive(
        &self,
        name: &str,
        step: impl Future<Output = Result<Step, PhaseError>>,
    ) -> Result<Step, PhaseError> {
        let lease = self.lease_for(name).await?;
        let result = lease.run(step).await;
        let keep = matches!(result, Ok(Step::Requeue(_)));
        self.finish_lease(lease, result, keep).await
    }

    /// One step of the phase machine, decided by the phase the store holds
    /// (not by anything this process remembers), so that any process may
    /// take the next step after a restart or a change of leader:
    ///
    /// - New / InProgress: the first pass never finished (it runs inside
    ///   [`PhaseMachine::start`]); the backup is failed, with the reason.
    /// - waiting: every pending operation is polled once; when none is
    ///   left the backup moves to finalizing and the step asks to be run
    ///   again at once, otherwise after the rest of the sync period.
    /// - finalizing: the finalize pass, then the terminal phase.
    ///
    /// The caller holds the backup's lease. An error once the backup
    /// exists ends it Failed (a lost lease excepted) and is returned.
    pub async fn step(&self, name: &str) -> Result<Step, PhaseError> {
        let object: BackupObject = self
            .store
            .get_json(name, BackupFile::Metadata)
            .await?
            .ok_or_else(|| PhaseError::NotFound(name.into()))?;
        if object.status.phase.is_terminal() {
            return Ok(Step::Done(Box::new(object)));
        }
        if object.status.phase == BackupPhase::Deleting {
            return Err(PhaseError::Deleting(name.into()));
        }
        let mut run = self.load_run(name, object).await?;
        match self.advance(&mut run).await {
            Ok(step) => Ok(step),
            Err(e) => Err(self.fail(&mut run, e).await),
        }
    }

    async fn advance(&self, run: &mut Run) -> Result<Step, PhaseError> {
        match plan(run.object.status.phase) {
            Plan::FailInterrupted if self.blocks_resumable(run).await? => {
                // Its items were written and its blocks' volume backups
                // outlived the process (node agents): wait for them again,
                // run the post hooks owed, go on.
                self.resume_blocks(run).await?;
                let next = if run.object.status.backup_item_operations_attempted == 0 {
                    BackupPhase::finalizing(run.partially_failed())
                } else {
                    BackupPhase::waiting(run.partially_failed())
                };
                self.set_phase(run, next).await?;
                Ok(Step::Requeue(Duration::ZERO))
            }
            Plan::FailInterrupted => {
                // Its items were never all written: it cannot be continued.
                // What its blocks left unfinished is failed and said.
                self.interrupted_blocks(run).await?;
                run.object.status.failure_reason = format!(
                    "found in phase {} after a restart: the process running it ended before its items were written",
                    run.object.status.phase
                );
                self.set_phase(run, BackupPhase::Failed).await?;
                Ok(Step::Done(Box::new(run.object.clone())))
            }
            Plan::Poll => {
                self.ensure_operations(run).await?;
                let round = std::time::Instant::now();
                if self.poll_round(run, Round::Poll).await? {
                    self.finish_waiting(run).await?;
                    let next = BackupPhase::finalizing(run.partially_failed());
                    self.set_phase(run, next).await?;
                    Ok(Step::Requeue(Duration::ZERO))
                } else {
                    self.show_operation_counts(run).await;
                    // A period is from the start of one poll to the start
                    // of the next.
                    Ok(Step::Requeue(
                        self.settings.sync_period.saturating_sub(round.elapsed()),
                    ))
                }
            }
            Plan::Finalize => {
                self.ensure_operations(run).await?;
                self.finalize(run).await?;
                let done = if run.partially_failed() {
                    BackupPhase::PartiallyFailed
                } else {
                    BackupPhase::Completed
                };
                self.set_phase(run, done).await?;
                Ok(Step::Done(Box::new(run.object.clone())))
            }
            Plan::Nothing => Ok(Step::Done(Box::new(run.object.clone()))),
        }
    }

    /// Runs CPU-bound work (the tarball's compression) on a blocking
    /// thread, so that no runtime thread stalls behind it.
    async fn blocking<T: Send + 'static>(
        &self,
        name: &str,
        what: &'static str,
        work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
    ) -> Result<T, PhaseError> {
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| PhaseError::Panicked {
                name: name.to_string(),
                what,
                source: e,
            })?
            .map_err(|source| PhaseError::Io {
                name: name.to_string(),
                what,
                source,
            })
    }
}

/// What a step does in a phase: the decision of [`PhaseMachine::step`],
/// kept apart from the doing so that it can be tested alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// New or InProgress found by a step: the first pass was interrupted.
    FailInterrupted,
    Poll,
    Finalize,
    Nothing,
}

pub fn plan(phase: BackupPhase) -> Plan {
    match phase {
        BackupPhase::New | BackupPhase::InProgress => Plan::FailInterrupted,
        BackupPhase::WaitingForPluginOperations
        | BackupPhase::WaitingForPluginOperationsPartiallyFailed => Plan::Poll,
        BackupPhase::Finalizing | BackupPhase::FinalizingPartiallyFailed => Plan::Finalize,
        BackupPhase::Completed
        | BackupPhase::PartiallyFailed
        | BackupPhase::Failed
        | BackupPhase::Deleting => Plan::Nothing,
    }
}
