//! The facade callers hold: [`PhaseMachine`] owns what lives across steps
//! (the store, the operations, the pinned plugin sets, the pollers, the
//! kept leases, the log) and builds, for each call, the phase that does
//! the work with only the parts that phase uses.

use super::blocks::Blocks;
use super::cancel::Cancel;
use super::created::Created;
use super::dispatch::Dispatcher;
use super::errors::PhaseError;
use super::finalize::Finalize;
use super::first_pass::{self, FirstPass, PassTurns, StartClaim};
use super::gc::{Collected, Gc, Outcome};
use super::item_pass::PassRunner;
use super::journal::Journal;
use super::leases::{Kept, Leases};
use super::load::{Loader, stored_object};
use super::plugin_set::PluginSets;
use super::poller::Pollers;
use super::record::Recorder;
use super::resume::Resume;
use super::waiting::Waiting;
use super::{BackupRequest, CancelProbe, Observer, PluginSource, Settings, StatusSink, Step};
use crate::backup::hooks::HookRunner;
use crate::backup::object::BackupObject;
use crate::backup::volumes::VolumeBackupper;
use iar_core::clock::{Clock, RealClock};
use iar_core::cluster::ClusterReader;
use iar_core::cluster::writes::CreatedObject;
use iar_core::operations::OperationsMap;
use iar_core::select::BackupFilter;
use iar_core::store::{BackupStore, StoreError};
use iar_plugin::plugin::Plugin;
use std::sync::Arc;
use std::time::SystemTime;

/// Runs backups through their phases.
pub struct PhaseMachine {
    pub store: BackupStore,
    pub operations: Arc<OperationsMap>,
    pub cluster: Arc<dyn ClusterReader>,
    pub settings: Settings,
    /// Every timestamp the phases write, every expiry they judge.
    clock: Arc<dyn Clock>,
    /// Shared with the item pass, which records plugin lines as they come
    /// (not held per item until the pass ends).
    pub(super) journal: Arc<Journal>,
    /// Where plugins come from, and the set each running backup started
    /// with.
    plugins: PluginSets,
    pollers: Pollers,
    status_sink: Option<StatusSink>,
    cancel_probe: Option<CancelProbe>,
    /// Where hooks run when `settings.exec_hooks_locally` is off (the
    /// cluster controller: in the pod, through `pods/exec`); none: they are
    /// recorded as skipped.
    hook_runner: Option<Arc<dyn HookRunner>>,
    /// Where pod volumes are backed up when `settings.volume_data` is not
    /// set (the cluster controller: through node agents); none: a volume
    /// chosen for a backup is a warning.
    volume_backupper: Option<Arc<dyn VolumeBackupper>>,
    turns: PassTurns,
    /// Leases kept between the steps of the backups this process drives.
    pub(super) kept: Kept,
    /// Block work this machine started and has not recorded.
    pub(super) live_blocks: super::live_blocks::LiveBlocks,
    /// What a takeover writes before anything else.
    fencing: super::leases::Fencing,
}

impl PhaseMachine {
    pub fn new(
        plugins: Vec<Plugin>,
        store: BackupStore,
        cluster: Arc<dyn ClusterReader>,
        settings: Settings,
    ) -> Self {
        PhaseMachine {
            store,
            operations: Arc::new(OperationsMap::new()),
            cluster,
            settings,
            clock: RealClock::shared(),
            journal: Arc::default(),
            plugins: PluginSets::fixed(plugins),
            pollers: Pollers::default(),
            status_sink: None,
            cancel_probe: None,
            hook_runner: None,
            volume_backupper: None,
            turns: PassTurns::default(),
            kept: Kept::default(),
            live_blocks: Default::default(),
            fencing: Default::default(),
        }
    }

    /// Plugins from `source`, asked when a backup starts (or is taken over
    /// after a restart) and pinned for it.
    pub fn with_plugin_source(mut self, source: PluginSource) -> Self {
        self.plugins = PluginSets::from_source(source);
        self
    }

    /// Runs hooks through `runner` (unless `settings.exec_hooks_locally`).
    pub fn with_hook_runner(mut self, runner: Arc<dyn HookRunner>) -> Self {
        self.hook_runner = Some(runner);
        self
    }

    /// Backs pod volumes up through `backupper` (unless
    /// `settings.volume_data`).
    pub fn with_volume_backupper(mut self, backupper: Arc<dyn VolumeBackupper>) -> Self {
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

    /// Calls `fence` when this process takes a backup's lease over from
    /// another, before anything else under it ([`super::leases::TakeoverFence`]).
    pub fn with_takeover_fence(mut self, fence: super::leases::TakeoverFence) -> Self {
        self.fencing.fence = Some(fence);
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

    /// Reads time from `clock` (a test's `ManualClock`): timestamps, uids,
    /// expirations, operation timeouts, log lines.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        Arc::get_mut(&mut self.journal)
            .expect("the clock is set before the machine runs")
            .clock = clock.clone();
        // Leases and fences too: a stepped clock expires a lease.
        self.store = self.store.clone().with_clock(clock.clone());
        self.clock = clock;
        self
    }

    // The phases and their parts, each built for one call.

    pub(super) fn recorder(&self) -> Recorder<'_> {
        Recorder {
            store: &self.store,
            journal: &self.journal,
            status_sink: self.status_sink.as_ref(),
            clock: &*self.clock,
        }
    }

    pub(super) fn loader(&self) -> Loader<'_> {
        Loader {
            store: &self.store,
            journal: &self.journal,
            plugins: &self.plugins,
        }
    }

    pub(super) fn leases(&self) -> Leases<'_> {
        Leases {
            store: &self.store,
            duration: self.settings.lease_duration,
            kept: &self.kept,
            live: &self.live_blocks,
            fencing: &self.fencing,
        }
    }

    pub(super) fn blocks(&self) -> Blocks<'_> {
        Blocks::new(
            &self.settings,
            &self.store,
            &self.cluster,
            &self.journal,
            self.status_sink.as_ref(),
            self.cancel_probe.as_ref(),
            self.hook_runner.as_ref(),
            self.volume_backupper.as_ref(),
            &self.clock,
            &self.live_blocks,
        )
    }

    pub(super) fn passes(&self) -> PassRunner<'_> {
        PassRunner {
            plugins: &self.plugins,
            cluster: &self.cluster,
            store: &self.store,
            journal: &self.journal,
            workers: self.settings.workers,
            clock: &self.clock,
        }
    }

    pub(super) fn created(&self) -> Created<'_> {
        Created {
            store: &self.store,
            cluster: &self.cluster,
            journal: &self.journal,
        }
    }

    pub(super) fn first_pass(&self) -> FirstPass<'_> {
        FirstPass {
            store: &self.store,
            operations: &self.operations,
            cluster: &self.cluster,
            journal: &self.journal,
            plugins: &self.plugins,
            recorder: self.recorder(),
            blocks: self.blocks(),
            passes: self.passes(),
            created: self.created(),
            turns: &self.turns,
            clock: &*self.clock,
            concurrent_passes: self.settings.concurrent_passes,
            sync_period: self.settings.sync_period,
            operation_timeout: self.settings.operation_timeout,
            default_backup_ttl: self.settings.default_backup_ttl,
        }
    }

    pub(super) fn waiting(&self) -> Waiting<'_> {
        Waiting {
            store: &self.store,
            operations: &self.operations,
            plugins: &self.plugins,
            pollers: &self.pollers,
            cluster: &self.cluster,
            journal: &self.journal,
            recorder: self.recorder(),
            clock: &*self.clock,
            sync_period: self.settings.sync_period,
            operation_timeout: self.settings.operation_timeout,
            workers: self.settings.workers,
        }
    }

    pub(super) fn finalize(&self) -> Finalize<'_> {
        Finalize {
            store: &self.store,
            operations: &self.operations,
            cluster: &self.cluster,
            journal: &self.journal,
            passes: self.passes(),
            recorder: self.recorder(),
        }
    }

    pub(super) fn interrupted(&self) -> Resume<'_> {
        Resume {
            blocks: self.blocks(),
            recorder: self.recorder(),
        }
    }

    pub(super) fn dispatcher(&self) -> Dispatcher<'_> {
        Dispatcher {
            loader: self.loader(),
            recorder: self.recorder(),
            resume: self.interrupted(),
            waiting: self.waiting(),
            finalize: self.finalize(),
        }
    }

    pub(super) fn canceller(&self) -> Cancel<'_> {
        Cancel {
            waiting: self.waiting(),
            blocks: self.blocks(),
            created: self.created(),
            journal: &self.journal,
            recorder: self.recorder(),
        }
    }

    pub(super) fn gc(&self) -> Gc<'_> {
        Gc {
            store: &self.store,
            leases: self.leases(),
            created: self.created(),
            status_sink: self.status_sink.as_ref(),
            clock: &*self.clock,
            repository_password: self.settings.repository_password.as_ref(),
            blocks: self.blocks(),
        }
    }

    // What callers ask for.

    /// The backups this controller holds anything for (operations, log
    /// lines), sorted. Empty between backups: a long-running process
    /// forgets each backup when it ends, whatever the outcome.
    pub async fn tracked_backups(&self) -> Vec<String> {
        let mut names = self.operations.backups();
        names.extend(self.journal.backups());
        names.extend(self.plugins.backups());
        names.extend(self.kept.backups());
        names.sort();
        names.dedup();
        names
    }

    async fn forget(&self, name: &str) {
        self.operations.remove(name).await;
        self.journal.forget(name);
        self.plugins.forget(name);
        self.pollers.forget(name);
    }

    /// Drops what this process holds for a backup it no longer drives (it
    /// ended, or another process took it over).
    pub async fn release(&self, name: &str) {
        self.forget(name).await;
    }

    /// Runs a whole backup: first pass, waiting for operations, finalize.
    /// Another process creating or driving the same backup makes this fail
    /// ([`PhaseError::Exists`], [`LeaseError::Held`](iar_core::store::lease::LeaseError::Held));
    /// any error once the backup exists ends it Failed with the reason,
    /// and is returned.
    pub async fn run_backup(&self, req: BackupRequest) -> Result<BackupObject, PhaseError> {
        let filter = self.validate(&req)?;
        let leases = self.leases();
        let lease = leases.take(&req.name).await?;
        let name = req.name.clone();
        let result = leases
            .leased(lease, async {
                self.first_pass().create_and_run(req, filter).await?;
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
        self.first_pass().create_and_run(req, filter).await
    }

    /// What makes a request one that can never run, checked before any
    /// lease is taken or anything written: a name the store cannot hold
    /// every file of, or a spec that does not parse. Retrying such a
    /// request cannot help.
    pub fn validate(&self, req: &BackupRequest) -> Result<BackupFilter, PhaseError> {
        first_pass::validate(&self.store, req, self.settings.default_backup_ttl)
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
        self.leases().with_lease(name, work).await
    }

    /// The backups whose leases this process keeps between their steps,
    /// sorted.
    pub fn kept_backups(&self) -> Vec<String> {
        self.kept.backups()
    }

    /// Abandons the leases kept between steps: they are no longer renewed
    /// and expire, so that another process takes their backups over. For
    /// a controller that stops driving (its run ended or was dropped)
    /// while this value lives on.
    pub fn abandon_kept_leases(&self) {
        self.kept.abandon_all();
    }

    /// Stops the block work (volume waits, post hooks) this machine
    /// started and has not recorded: for a controller that stops driving,
    /// as if its process ended. Whoever takes its backups over follows
    /// their volume backups again and runs the post hooks the ledger owes.
    pub fn abandon_block_work(&self) {
        self.live_blocks.abort_all();
    }

    /// Gives back (releases in the store) the leases kept between steps,
    /// and forgets their backups: what a controller replica does when it
    /// is stopped, so that another takes its backups at once instead of
    /// after their leases expire.
    pub async fn give_back_kept_leases(&self) {
        for name in self.leases().give_back_kept().await {
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
        self.leases().drive(name, step).await
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
        self.dispatcher().step(name).await
    }

    /// Continues a backup a killed process left behind. Refused while
    /// another live process holds the backup's lease.
    pub async fn resume(&self, name: &str) -> Result<BackupObject, PhaseError> {
        let object = stored_object(&self.store, name).await?;
        if object.status.phase.is_terminal() {
            return Ok(object);
        }
        if object.status.phase == crate::backup::object::BackupPhase::Deleting {
            return Err(PhaseError::Deleting(name.into()));
        }
        let leases = self.leases();
        let lease = leases.take(name).await?;
        let result = leases.leased(lease, self.steps(name)).await;
        self.forget(name).await;
        result
    }

    /// Ends an unfinished backup that must not go on (the cluster
    /// controller calls it when a Backup resource is deleted mid-way):
    /// every pending operation is cancelled through its plugin (the
    /// contract's `cancel`) and ends Canceled, and the backup ends Failed
    /// with `reason`. What it wrote stays in the store. A finished backup
    /// (or one being deleted) is returned as it is. The caller holds the
    /// backup's lease.
    pub async fn cancel(&self, name: &str, reason: &str) -> Result<BackupObject, PhaseError> {
        let object = stored_object(&self.store, name).await?;
        if !object.status.phase.is_running() {
            return Ok(object);
        }
        let mut run = self.loader().run(name, object).await?;
        let result = match self.canceller().run(&mut run, reason).await {
            Ok(()) => Ok(run.object),
            Err(e) => Err(self.recorder().fail(&mut run, e).await),
        };
        self.forget(name).await;
        result
    }

    /// Asks the node agents to stop every unfinished volume backup of
    /// `name` (no lease needed: it only marks the requests); a failure to
    /// ask is logged, and whoever cancels goes on.
    pub async fn cancel_volume_backups(&self, name: &str) {
        self.blocks().cancel_volume_backups(name).await;
    }

    /// Claims one of `settings.concurrent_passes` places for a backup this
    /// process is about to start, or none when as many are starting here
    /// already. A controller replica takes a new backup only with a claim,
    /// and leaves it to a less busy replica otherwise.
    pub fn claim_start(&self) -> Option<StartClaim<'_>> {
        self.turns.claim(self.settings.concurrent_passes)
    }

    /// The most first passes that ran at once in this controller.
    pub fn concurrent_passes_seen(&self) -> usize {
        self.turns.high_water()
    }

    /// One sweep over every backup in the store. Only listing the store
    /// can fail the sweep; each backup's own error is its outcome.
    pub async fn collect_garbage(
        &self,
        now: SystemTime,
        dry_run: bool,
    ) -> Result<Vec<Collected>, StoreError> {
        self.gc().collect_garbage(now, dry_run).await
    }

    /// Deletes one backup if it has expired (or finishes its deletion).
    pub async fn collect(
        &self,
        name: &str,
        now: SystemTime,
        dry_run: bool,
    ) -> Result<Outcome, PhaseError> {
        self.gc().collect(name, now, dry_run).await
    }

    /// Deletes one backup now, expired or not, in the same crash-safe order
    /// as a sweep (`iar delete`, Velero's `backup delete`). A backup still
    /// running is kept; a missing one is said so.
    pub async fn delete_backup(&self, name: &str, dry_run: bool) -> Result<Outcome, PhaseError> {
        self.gc().delete_backup(name, dry_run).await
    }

    /// What a stored backup's plugins created; empty when they created
    /// nothing.
    pub async fn created_objects(&self, name: &str) -> Result<Vec<CreatedObject>, PhaseError> {
        self.created().list(name).await
    }
}
