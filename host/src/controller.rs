//! The phase machine: New → InProgress → WaitingForPluginOperations[PartiallyFailed]
//! → Finalizing[PartiallyFailed] → Completed / PartiallyFailed / Failed.
//!
//! Every phase change is persisted before the next phase starts, so a killed
//! process leaves a backup that [`Controller::resume`] can continue: one found
//! InProgress is marked Failed (its items were never all written), one found
//! waiting or finalizing continues from its persisted operations, with each
//! operation's timeout still counted from its original creation.

use crate::backup::block_work::{BlockWork, LedgerEntry};
use crate::backup::blocks::Relation;
use crate::backup::expiry;
use crate::backup::hooks::{
    BackupHooks, HookRunner, LocalProcessRunner, SkippingRunner, Verdict, verdict,
};
use crate::backup::object::{BackupObject, BackupPhase, Results, SOURCES_ANNOTATION, rfc3339};
use crate::backup::pass::{self, ItemOutcome, PassOutput};
use crate::backup::spec::{self, BackupFilter};
use crate::backup::volume_policy::default_volumes_to_fs_backup;
use crate::backup::volumes::{LocalDirBackupper, VolumeBackup, VolumeBackupper, VolumePhase};
use crate::cluster::ClusterReader;
use crate::item::{Item, ItemRef};
use crate::operations::{Operation, OperationPhase, OperationSpec, OperationsMap};
use crate::plugin::{BackupRef, Phase, Plugin, PluginInstance, Progress};
use crate::resources::Catalog;
use crate::store::lease::{Lease, LeaseError};
use crate::store::tarball;
use crate::store::{BackupFile, BackupStore, StoreError};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

pub mod gc;
mod journal;

use journal::Journal;

/// Controller settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How often progress is polled and persisted (at most once per period
    /// per backup, and always on a phase change).
    pub sync_period: Duration,
    /// Default operation timeout; a backup's `spec.itemOperationTimeout` wins.
    pub operation_timeout: Duration,
    /// Worker threads running item actions.
    pub workers: usize,
    /// How long this process's lease on a backup lasts unrenewed (renewed
    /// every third of it): after a crash, another process may take the
    /// backup over this long after the last renewal.
    pub lease_duration: Duration,
    /// `--volume-data`: one directory per `namespace/pvc` that pod volume
    /// backups read; without it no volume is backed up (a warning says so).
    pub volume_data: Option<std::path::PathBuf>,
    /// How many volume backups run at once.
    pub volume_concurrency: usize,
    /// `--exec-hooks-locally`: run backup hooks as local processes;
    /// otherwise they are recorded as skipped, with a warning.
    pub exec_hooks_locally: bool,
    /// The ttl of a backup whose spec sets none (or zero): Velero's
    /// `--default-backup-ttl`, 720h.
    pub default_backup_ttl: Duration,
    /// How often the cluster controller's leader sweeps the store for
    /// expired backups (Velero's GC controller: 1h).
    pub gc_period: Duration,
    /// How many backups list the cluster and run their item pass at once;
    /// the others wait their turn (their lease kept). A burst of Backups
    /// queues instead of listing the cluster and taking instances for all
    /// of them at once.
    pub concurrent_passes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            sync_period: Duration::from_secs(10),
            operation_timeout: Duration::from_secs(4 * 3600),
            workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            lease_duration: Duration::from_secs(15),
            volume_data: None,
            volume_concurrency: 4,
            exec_hooks_locally: false,
            default_backup_ttl: crate::backup::expiry::DEFAULT_TTL,
            gc_period: Duration::from_secs(3600),
            concurrent_passes: 2,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("backup {0:?} not found in the store")]
    NotFound(String),
    #[error("backup {name:?} already exists in {store}; choose another name")]
    Exists { name: String, store: String },
    #[error("backup {name:?}: {reason}")]
    Invalid { name: String, reason: String },
    #[error("backup {name:?}: reading items: {reason}")]
    Items { name: String, reason: String },
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error("backup {name:?}: {what} panicked: {reason}")]
    Panicked {
        name: String,
        what: &'static str,
        reason: String,
    },
    #[error("backup {name:?}: cannot resume: {reason}")]
    Sources { name: String, reason: String },
    #[error(
        "backup {0:?} is being deleted (phase Deleting); the next garbage collection (`iar gc`, or the controller's sweep) finishes it"
    )]
    Deleting(String),
}

/// The manifest files or directories a backup was started with, as recorded
/// on its object, each still present. `resume` needs them as its cluster:
/// run against missing ones, finalize would find nothing and the backup
/// would end as if the cluster were empty, so their absence is an error.
pub fn recorded_sources(object: &BackupObject) -> Result<Vec<PathBuf>, ControllerError> {
    let name = &object.metadata.name;
    let refuse = |reason: String| ControllerError::Sources {
        name: name.clone(),
        reason,
    };
    let recorded = object
        .metadata
        .annotations
        .get(SOURCES_ANNOTATION)
        .ok_or_else(|| refuse(format!("it has no {SOURCES_ANNOTATION} annotation")))?;
    let sources: Vec<PathBuf> = serde_json::from_str(recorded).map_err(|e| {
        refuse(format!(
            "its {SOURCES_ANNOTATION} annotation is not a list of paths: {e}"
        ))
    })?;
    if sources.is_empty() {
        return Err(refuse(format!(
            "its {SOURCES_ANNOTATION} annotation is empty"
        )));
    }
    let missing: Vec<String> = sources
        .iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if !missing.is_empty() {
        return Err(refuse(format!(
            "the item sources it was started with are missing ({}); refusing to run it against an empty cluster",
            missing.join(", ")
        )));
    }
    Ok(sources)
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

/// A turn at a first pass; dropping it lets the next backup in.
struct PassTurn<'a> {
    _permit: tokio::sync::SemaphorePermit<'a>,
    running: &'a std::sync::atomic::AtomicUsize,
}

impl Drop for PassTurn<'_> {
    fn drop(&mut self) {
        self.running
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// One plugin of a backup's pinned set, as the store records it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct PinnedPlugin {
    name: String,
    /// sha256 of the component, hex.
    digest: String,
}

impl PinnedPlugin {
    fn of(plugin: &Plugin) -> Self {
        PinnedPlugin {
            name: plugin.name().to_string(),
            digest: plugin.digest().to_string(),
        }
    }
}

/// Where a backup's plugins come from: a fixed list (the CLI), or the
/// current set of a registry that reloads them (the cluster). Each backup
/// pins the set it started with until it ends.
pub type PluginSource = Arc<dyn Fn() -> Vec<Plugin> + Send + Sync>;

/// Told of every phase change once it is persisted (the controller in a
/// cluster copies it into the Backup resource's status). Must not block.
pub type StatusSink = Arc<dyn Fn(&BackupObject) + Send + Sync>;

/// What one [`Controller::step`] leaves to do.
#[derive(Debug)]
pub enum Step {
    /// Call `step` again after this long (operations still running).
    Requeue(Duration),
    /// The backup is in a terminal phase.
    Done(Box<BackupObject>),
}

/// Runs backups through their phases.
pub struct Controller {
    plugins: PluginSource,
    pub store: BackupStore,
    pub operations: Arc<OperationsMap>,
    pub cluster: Arc<dyn ClusterReader>,
    pub settings: Settings,
    journal: Journal,
    /// The plugin set each running backup started with.
    pinned: Mutex<HashMap<String, Vec<Plugin>>>,
    /// Each waiting backup's poller, kept between steps so that its
    /// instances live for the backup (isolation `backup`).
    pollers: Mutex<HashMap<String, Poller>>,
    status_sink: Option<StatusSink>,
    /// Turns at a first pass, `settings.concurrent_passes` of them (made
    /// on first use, so settings changed after `new` count).
    passes: std::sync::OnceLock<tokio::sync::Semaphore>,
    /// First passes running now, and the most that ever ran at once.
    passes_running: std::sync::atomic::AtomicUsize,
    passes_high_water: std::sync::atomic::AtomicUsize,
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

fn new_uid(name: &str) -> String {
    use sha2::{Digest, Sha256};
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let h = hex::encode(Sha256::digest(format!(
        "{name}/{}/{}",
        now.as_nanos(),
        std::process::id()
    )));
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// An item as the tarball holds it: compact JSON, as Velero writes items
/// (`json.Marshal`), and the text the item already has when a plugin
/// changed it or it crossed into one, so nothing is serialized again.
fn item_bytes(item: &Item) -> Vec<u8> {
    item.json().as_bytes().to_vec()
}

impl Controller {
    pub fn new(
        plugins: Vec<Plugin>,
        store: BackupStore,
        cluster: Arc<dyn ClusterReader>,
        settings: Settings,
    ) -> Self {
        Controller {
            plugins: Arc::new(move || plugins.clone()),
            store,
            operations: Arc::new(OperationsMap::new()),
            cluster,
            settings,
            journal: Journal::default(),
            pinned: Mutex::new(HashMap::new()),
            pollers: Mutex::new(HashMap::new()),
            status_sink: None,
            passes: std::sync::OnceLock::new(),
            passes_running: Default::default(),
            passes_high_water: Default::default(),
        }
    }

    /// Plugins from `source`, asked when a backup starts (or is taken over
    /// after a restart) and pinned for it.
    pub fn with_plugin_source(mut self, source: PluginSource) -> Self {
        self.plugins = source;
        self
    }

    pub fn with_status_sink(mut self, sink: StatusSink) -> Self {
        self.status_sink = Some(sink);
        self
    }

    /// Waits for a turn at a first pass (listing and the item pass), held
    /// until the returned guard drops.
    async fn pass_turn(&self, backup: &str) -> PassTurn<'_> {
        use std::sync::atomic::Ordering;
        let passes = self
            .passes
            .get_or_init(|| tokio::sync::Semaphore::new(self.settings.concurrent_passes.max(1)));
        let permit = match passes.try_acquire() {
            Ok(permit) => permit,
            Err(_) => {
                self.journal.line(
                    backup,
                    format!(
                        "waiting for a turn: {} backups are listing and running their plugins",
                        self.settings.concurrent_passes.max(1)
                    ),
                );
                passes
                    .acquire()
                    .await
                    .expect("the semaphore is never closed")
            }
        };
        let now = self.passes_running.fetch_add(1, Ordering::AcqRel) + 1;
        self.passes_high_water.fetch_max(now, Ordering::AcqRel);
        PassTurn {
            _permit: permit,
            running: &self.passes_running,
        }
    }

    /// The most first passes that ran at once in this controller.
    pub fn concurrent_passes_seen(&self) -> usize {
        self.passes_high_water
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Pins a new backup to the source's current set and records the set
    /// (names and digests) with the backup, before any plugin runs.
    async fn pin_new(&self, backup: &str) -> Result<(), StoreError> {
        let set = self.plugins_for(backup);
        let recorded: Vec<PinnedPlugin> = set.iter().map(PinnedPlugin::of).collect();
        self.store
            .put_json(backup, BackupFile::PluginSet, &recorded)
            .await
    }

    /// Pins a backup this process takes over (after a restart, or from
    /// another replica) to the set it recorded: each recorded plugin whose
    /// name and digest are loaded now. A plugin of that name with another
    /// digest (an update, or another ConfigMap that claimed the name) does
    /// not inherit the backup's operations: they fail, naming both digests.
    /// A backup recorded before iar kept sets takes the current set.
    async fn pin_recorded(&self, backup: &str) -> Result<(), ControllerError> {
        if self
            .pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(backup)
        {
            return Ok(());
        }
        let read = self.store.get_json(backup, BackupFile::PluginSet).await;
        let mut notes = Vec::new();
        let recorded: Option<Vec<PinnedPlugin>> = self
            .readable(backup, BackupFile::PluginSet, read, &mut notes)
            .await?;
        for note in notes {
            self.journal.line(backup, note);
        }
        let Some(recorded) = recorded else {
            self.plugins_for(backup);
            return Ok(());
        };
        let current = (self.plugins)();
        let mut set = Vec::new();
        for want in &recorded {
            match current.iter().find(|p| p.name() == want.name) {
                Some(p) if p.digest() == want.digest => set.push(p.clone()),
                found => {
                    let now = match found {
                        Some(p) => format!("the one loaded now is sha256:{}", p.digest()),
                        None => "none of that name is loaded now".to_string(),
                    };
                    self.journal.line(
                        backup,
                        format!(
                            "plugin {:?}: the version this backup started with (sha256:{}) is not loaded here and {now}; its operations fail rather than pass to another plugin (rule: pinned-plugin-set)",
                            want.name, want.digest
                        ),
                    );
                }
            }
        }
        self.pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(backup.to_string(), set);
        Ok(())
    }

    /// The plugins of a backup: the set it was pinned to, or the source's
    /// current set, pinned from now on.
    fn plugins_for(&self, backup: &str) -> Vec<Plugin> {
        let mut pinned = self.pinned.lock().unwrap_or_else(|p| p.into_inner());
        pinned
            .entry(backup.to_string())
            .or_insert_with(|| (self.plugins)())
            .clone()
    }

    /// Calls `observer(backup, line)` for every log line of every backup.
    pub fn with_observer(mut self, observer: Observer) -> Self {
        self.journal.observer = Some(observer);
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

    /// Runs `work` while holding `lease`, renewing it every third of its
    /// duration, and releases it at the end. If the lease is lost (another
    /// process took it over after it expired) `work` is dropped where it
    /// stands and nothing more is written: the other process drives the
    /// backup now.
    async fn leased<T>(
        &self,
        mut lease: Lease,
        work: impl Future<Output = Result<T, ControllerError>>,
    ) -> Result<T, ControllerError> {
        let result = {
            let keep = async {
                loop {
                    tokio::time::sleep(lease.renew_every()).await;
                    match lease.renew().await {
                        Ok(()) => {}
                        // Transient: retried until the lease expires.
                        Err(LeaseError::Store(e)) => {
                            tracing::warn!("renewing a backup lease failed, will retry: {e}");
                        }
                        Err(lost) => return lost,
                    }
                }
            };
            tokio::select! {
                r = work => r,
                lost = keep => Err(ControllerError::Lease(lost)),
            }
        };
        // A lost lease is someone else's now; a failed release expires.
        if !matches!(result, Err(ControllerError::Lease(_)))
            && let Err(e) = lease.release().await
        {
            tracing::warn!("releasing a backup lease failed: {e}");
        }
        result
    }

    /// Ends a backup Failed with the error that stopped it, so that nothing
    /// is left InProgress for `resume` to guess about; returns the error.
    /// A lost lease is not a failure of the backup (another process drives
    /// it) and writes nothing.
    async fn fail(&self, run: &mut Run, error: ControllerError) -> ControllerError {
        if matches!(error, ControllerError::Lease(_)) || !run.object.status.phase.is_running() {
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
    /// ([`ControllerError::Exists`], [`LeaseError::Held`]); any error once
    /// the backup exists ends it Failed with the reason, and is returned.
    pub async fn run_backup(&self, req: BackupRequest) -> Result<BackupObject, ControllerError> {
        let filter = self.validate(&req)?;
        let lease = self
            .store
            .acquire_lease(&req.name, self.settings.lease_duration)
            .await?;
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
    /// backup's lease; [`Controller::step`] takes it from there.
    pub async fn start(&self, req: BackupRequest) -> Result<BackupObject, ControllerError> {
        let filter = self.validate(&req)?;
        self.create_and_run(req, filter).await
    }

    /// What makes a request one that can never run, checked before any
    /// lease is taken or anything written: a name the store cannot hold
    /// every file of (over Kubernetes' 253 characters, or a lease file name
    /// over 255 bytes; [`BackupStore::check_backup_name`]), or a spec that
    /// does not parse. Retrying such a request cannot help.
    pub fn validate(&self, req: &BackupRequest) -> Result<BackupFilter, ControllerError> {
        self.store.check_backup_name(&req.name)?;
        let invalid = |reason: String| ControllerError::Invalid {
            name: req.name.clone(),
            reason,
        };
        let filter = BackupFilter::from_spec(&req.spec).map_err(invalid)?;
        spec::operation_timeout(&req.spec).map_err(invalid)?;
        expiry::effective_ttl(&req.spec, self.settings.default_backup_ttl).map_err(invalid)?;
        Ok(filter)
    }

    /// Steps a backup until it ends, sleeping between polls.
    async fn steps(&self, name: &str) -> Result<BackupObject, ControllerError> {
        loop {
            match self.step(name).await? {
                Step::Requeue(after) => tokio::time::sleep(after).await,
                Step::Done(object) => return Ok(*object),
            }
        }
    }

    async fn create_and_run(
        &self,
        req: BackupRequest,
        filter: BackupFilter,
    ) -> Result<BackupObject, ControllerError> {
        let mut object = BackupObject::new(
            &req.name,
            &req.namespace,
            &new_uid(&req.name),
            req.spec.clone(),
        );
        let sources: Vec<String> = req
            .sources
            .iter()
            .map(|p| {
                std::path::absolute(p)
                    .unwrap_or_else(|_| p.clone())
                    .display()
                    .to_string()
            })
            .collect();
        object.metadata.annotations.insert(
            SOURCES_ANNOTATION.into(),
            serde_json::to_string(&sources).expect("strings serialize"),
        );
        object.metadata.annotations.extend(req.annotations.clone());
        // The expiration is fixed when the backup is first written, as
        // Velero fixes it when it accepts a backup.
        expiry::effective_ttl(&req.spec, self.settings.default_backup_ttl)
            .and_then(|ttl| expiry::stamp(&mut object, ttl, SystemTime::now()))
            .map_err(|reason| ControllerError::Invalid {
                name: req.name.clone(),
                reason,
            })?;
        // Velero refuses a second backup of the same name; so does iar,
        // rather than overwrite one (or a half-done one that could resume).
        // A conditional create, so that of two processes that both found
        // the name free exactly one creates it.
        self.store
            .create_json(&req.name, BackupFile::Metadata, &object)
            .await
            .map_err(|e| match e {
                StoreError::Exists { .. } => ControllerError::Exists {
                    name: req.name.clone(),
                    store: self.store.url().to_string(),
                },
                e => e.into(),
            })?;
        let mut run = Run {
            object,
            results: Results::default(),
        };
        self.set_phase(&mut run, BackupPhase::New).await?;
        run.object.status.start_timestamp = Some(rfc3339(SystemTime::now()));
        self.set_phase(&mut run, BackupPhase::InProgress).await?;
        self.pin_new(&req.name).await?;
        match self.first_pass(&mut run, &req, &filter).await {
            Ok(()) => Ok(run.object),
            Err(e) => Err(self.fail(&mut run, e).await),
        }
    }

    /// From InProgress to the end.
    async fn first_pass(
        &self,
        run: &mut Run,
        req: &BackupRequest,
        filter: &BackupFilter,
    ) -> Result<(), ControllerError> {
        let items_error = |reason: String| ControllerError::Items {
            name: req.name.clone(),
            reason,
        };
        let turn = self.pass_turn(run.name()).await;
        // Manifests named by the request, or the cluster's own objects.
        // When the cluster is those very manifests (`iar backup`), it lists
        // them through its parse cache: the plugins' lookups and finalize
        // then parse no file a second time.
        let items = if req.sources.is_empty() {
            self.cluster.list(filter).await.map_err(items_error)?
        } else if let Some(listed) = self.cluster.list_sources(&req.sources, filter).await {
            listed.map_err(items_error)?
        } else {
            crate::manifests::read_items(&req.sources, Catalog::builtin())
                .map_err(|e| items_error(e.to_string()))?
        };
        // An identity Kubernetes would refuse never reaches a plugin or the
        // tarball: the item is an error, named.
        let mut selected = Vec::new();
        for item in items.into_iter().filter(|i| filter.matches(i)) {
            match tarball::item_path(&item.id) {
                Ok(_) => selected.push(item),
                Err(e) => run.results.errors.add(&item.id.namespace, e),
            }
        }
        let items = selected;
        self.journal.line(
            run.name(),
            format!("{} items selected by the spec", items.len()),
        );
        let work = self.block_work(run).await?;
        let name = run.name().to_string();
        let pass = {
            let pass = self.run_pass(
                &name,
                items,
                run.backup_ref(Phase::Backup),
                true,
                Some(work.clone()),
                Some(filter.clone()),
            );
            tokio::pin!(pass);
            // Volume backups start while the pass still runs: their
            // progress is persisted from then on, once per sync period.
            let mut tick = tokio::time::interval(self.settings.sync_period);
            loop {
                tokio::select! {
                    pass = &mut pass => break pass?,
                    _ = tick.tick() => self.persist_volume_progress(&name, &work).await?,
                }
            }
        };
        // The turn covers listing and the plugins; waiting on volumes and
        // post hooks does not hold one.
        drop(turn);
        self.journal
            .line(run.name(), format!("{} item blocks formed", pass.blocks));
        for w in pass.warnings {
            self.journal.line(run.name(), format!("warning: {w}"));
            run.results.warnings.add("", w);
        }
        for e in pass.errors {
            self.journal.line(run.name(), format!("error: {e}"));
            run.results.errors.add("", e);
        }
        let outcomes = pass.outcomes;
        self.finish_blocks(run, &work).await?;

        let mut entries: Vec<(String, Vec<u8>)> =
            vec![(tarball::VERSION_PATH.to_string(), tarball::VERSION.to_vec())];
        // Post-operation items go last, in their own gzip member: finalize
        // rewrites that member alone (see `store::tarball`).
        let post_operation: HashSet<&ItemRef> = outcomes
            .iter()
            .flat_map(|o| &o.operations)
            .flat_map(|op| &op.post_operation_items)
            .collect();
        let mut tail = Vec::new();
        let mut attempted = 0;
        self.operations.insert_loaded(run.name(), Vec::new()).await;
        for outcome in &outcomes {
            record_messages(
                &mut run.results,
                &self.journal,
                &run.object.metadata.name,
                outcome,
            );
            if let Some(value) = &outcome.stored {
                match tarball::item_path(&outcome.id) {
                    Ok(path) => {
                        let part = if post_operation.contains(&outcome.id) {
                            &mut tail
                        } else {
                            &mut entries
                        };
                        part.push((path, item_bytes(value)));
                        run.object.status.progress.items_backed_up += 1;
                    }
                    Err(e) => run.results.errors.add(&outcome.id.namespace, e),
                }
            }
            for op in &outcome.operations {
                attempted += 1;
                let spec = OperationSpec {
                    backup_name: run.name().to_string(),
                    backup_uid: run.object.metadata.uid.clone(),
                    backup_item_action: op.plugin.clone(),
                    resource_identifier: op.item.clone(),
                    operation_id: op.operation_id.clone(),
                    post_operation_items: op.post_operation_items.clone(),
                };
                self.operations
                    .add(run.name(), Operation::new(spec, op.created))
                    .await;
            }
        }
        run.object.status.progress.total_items = outcomes.len() as u64;
        run.object.status.backup_item_operations_attempted = attempted;
        self.journal.line(
            run.name(),
            format!(
                "{} of {} items backed up, {attempted} operations started",
                run.object.status.progress.items_backed_up,
                outcomes.len()
            ),
        );
        let split = !post_operation.is_empty();
        // Compressing every item is CPU work: off the runtime's threads.
        let contents = self
            .blocking(&req.name, "building the tarball", move || {
                if !split {
                    tarball::build(entries)
                } else {
                    tarball::build_split(entries, tail)
                }
            })
            .await?;
        self.store
            .put(run.name(), BackupFile::Contents, contents.into())
            .await?;
        // Written even when empty, so describe and resume always find it.
        self.operations.update(run.name(), |_| true).await;
        self.operations.sync(run.name(), &self.store).await?;

        let next = if attempted == 0 {
            BackupPhase::finalizing(run.partially_failed())
        } else {
            BackupPhase::waiting(run.partially_failed())
        };
        self.set_phase(run, next)
            .await
            .map_err(ControllerError::from)
    }

    /// Continues a backup a killed process left behind. Refused while
    /// another live process holds the backup's lease.
    pub async fn resume(&self, name: &str) -> Result<BackupObject, ControllerError> {
        let object: BackupObject = self
            .store
            .get_json(name, BackupFile::Metadata)
            .await?
            .ok_or_else(|| ControllerError::NotFound(name.into()))?;
        if object.status.phase.is_terminal() {
            return Ok(object);
        }
        if object.status.phase == BackupPhase::Deleting {
            return Err(ControllerError::Deleting(name.into()));
        }
        let lease = self
            .store
            .acquire_lease(name, self.settings.lease_duration)
            .await?;
        let result = self.leased(lease, self.steps(name)).await;
        self.forget(name).await;
        result
    }

    /// Runs `work` on a backup under its lease (taken here, renewed while
    /// `work` runs, released after): what the cluster controller wraps
    /// each reconcile in, so that two processes never drive one backup.
    pub async fn with_lease<T>(
        &self,
        name: &str,
        work: impl Future<Output = Result<T, ControllerError>>,
    ) -> Result<T, ControllerError> {
        let lease = self
            .store
            .acquire_lease(name, self.settings.lease_duration)
            .await?;
        self.leased(lease, work).await
    }

    /// Reads a results or log file for resume; one that cannot be read is
    /// set aside (so the rewrite does not replace it with a shorter one)
    /// and the backup carries on with a fresh one, saying so.
    async fn readable<T>(
        &self,
        name: &str,
        file: BackupFile,
        read: Result<Option<T>, StoreError>,
        notes: &mut Vec<String>,
    ) -> Result<Option<T>, ControllerError> {
        match read {
            Ok(v) => Ok(v),
            Err(StoreError::Corrupt { reason, .. }) => {
                let aside = self.store.set_aside(name, file).await?;
                notes.push(format!(
                    "{} could not be read ({reason}); kept as {aside}, continuing with a new one",
                    file.key(name)
                ));
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// One step of the phase machine, decided by the phase the store holds
    /// (not by anything this process remembers), so that any process may
    /// take the next step after a restart or a change of leader:
    ///
    /// - New / InProgress: the first pass never finished (it runs inside
    ///   [`Controller::start`]); the backup is failed, with the reason.
    /// - waiting: every pending operation is polled once; when none is
    ///   left the backup moves to finalizing and the step asks to be run
    ///   again at once, otherwise after the rest of the sync period.
    /// - finalizing: the finalize pass, then the terminal phase.
    ///
    /// The caller holds the backup's lease. An error once the backup
    /// exists ends it Failed (a lost lease excepted) and is returned.
    pub async fn step(&self, name: &str) -> Result<Step, ControllerError> {
        let object: BackupObject = self
            .store
            .get_json(name, BackupFile::Metadata)
            .await?
            .ok_or_else(|| ControllerError::NotFound(name.into()))?;
        if object.status.phase.is_terminal() {
            return Ok(Step::Done(Box::new(object)));
        }
        if object.status.phase == BackupPhase::Deleting {
            return Err(ControllerError::Deleting(name.into()));
        }
        let mut run = self.load_run(name, object).await?;
        match self.advance(&mut run).await {
            Ok(step) => Ok(step),
            Err(e) => Err(self.fail(&mut run, e).await),
        }
    }

    /// Ends an unfinished backup that must not go on (the cluster
    /// controller calls it when a Backup resource is deleted mid-way):
    /// every pending operation is cancelled through its plugin (the
    /// contract's `cancel`) and ends Canceled, and the backup ends Failed
    /// with `reason`. What it wrote stays in the store. A finished backup
    /// (or one being deleted) is returned as it is. The caller holds the
    /// backup's lease.
    pub async fn cancel(&self, name: &str, reason: &str) -> Result<BackupObject, ControllerError> {
        let object: BackupObject = self
            .store
            .get_json(name, BackupFile::Metadata)
            .await?
            .ok_or_else(|| ControllerError::NotFound(name.into()))?;
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

    async fn cancel_run(&self, run: &mut Run, reason: &str) -> Result<(), ControllerError> {
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
        self.journal
            .line(run.name(), format!("backup canceled: {reason}"));
        run.object.status.failure_reason = reason.to_string();
        self.set_phase(run, BackupPhase::Failed).await?;
        Ok(())
    }

    /// The persisted state of a backup, with its log continued from the
    /// store when this process has none of it yet (a resume).
    async fn load_run(&self, name: &str, object: BackupObject) -> Result<Run, ControllerError> {
        self.pin_recorded(name).await?;
        let mut notes = Vec::new();
        let read = self.store.get_json(name, BackupFile::Results).await;
        let results: Results = self
            .readable(name, BackupFile::Results, read, &mut notes)
            .await?
            .unwrap_or_default();
        if !self.journal.has(name) {
            let read = self.store.get_logs(name).await;
            if let Some(previous) = self
                .readable(name, BackupFile::Logs, read, &mut notes)
                .await?
            {
                self.journal.preload(name, previous);
            }
        }
        let mut run = Run { object, results };
        for note in notes {
            self.journal.line(name, note.clone());
            run.results.warnings.add("", note);
        }
        Ok(run)
    }

    async fn advance(&self, run: &mut Run) -> Result<Step, ControllerError> {
        match plan(run.object.status.phase) {
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

    /// Loads a backup's operations from the store when this process does
    /// not hold them (it resumed the backup or took it over).
    async fn ensure_operations(&self, run: &Run) -> Result<(), ControllerError> {
        let name = run.name();
        if self.operations.get(name).await.is_none() {
            let n = self.operations.load(name, &self.store).await?;
            self.journal.line(
                name,
                format!(
                    "resumed in phase {} with {n} operations",
                    run.object.status.phase
                ),
            );
        }
        Ok(())
    }

    /// The hooks and volume backups of this backup's blocks, from its spec
    /// and the settings. A hooks section that does not parse is an error
    /// in the results; the backup goes on without spec hooks.
    ///
    /// The volume policy (`spec.resourcePolicy`) is different: one that is
    /// missing or does not parse fails the backup, because going on
    /// without it could back up volumes the policy skips.
    async fn block_work(&self, run: &mut Run) -> Result<Arc<BlockWork>, ControllerError> {
        let policies = resource_policies(
            &run.object.spec,
            &run.object.metadata.namespace,
            self.cluster.as_ref(),
        )
        .await
        .map_err(|reason| ControllerError::Invalid {
            name: run.object.metadata.name.clone(),
            reason,
        })?;
        let spec = &run.object.spec;
        let hooks = BackupHooks::from_spec(spec).unwrap_or_else(|e| {
            run.results.errors.add(
                "",
                format!("backup {}: spec hooks: {e}", run.object.metadata.name),
            );
            BackupHooks::default()
        });
        let runner: Arc<dyn HookRunner> = if self.settings.exec_hooks_locally {
            Arc::new(LocalProcessRunner {
                volume_data: self
                    .settings
                    .volume_data
                    .clone()
                    .unwrap_or_else(|| ".".into()),
            })
        } else {
            Arc::new(SkippingRunner)
        };
        let backupper = self.settings.volume_data.as_ref().map(|dir| {
            Arc::new(LocalDirBackupper::new(
                dir.clone(),
                self.store.clone(),
                self.settings.volume_concurrency,
            )) as Arc<dyn VolumeBackupper>
        });
        Ok(Arc::new(
            BlockWork::new(
                run.object.metadata.name.clone(),
                hooks,
                runner,
                backupper,
                self.settings.volume_data.clone(),
                policies,
                default_volumes_to_fs_backup(spec),
                tokio::runtime::Handle::current(),
            )
            .with_ledger(self.store.clone()),
        ))
    }

    /// Writes the latest state of every volume backup started so far (none
    /// started: nothing written).
    async fn persist_volume_progress(
        &self,
        name: &str,
        work: &BlockWork,
    ) -> Result<(), ControllerError> {
        let progress = work.progress();
        if !progress.is_empty() {
            self.store
                .put_json(name, BackupFile::VolumeBackups, &progress)
                .await?;
        }
        Ok(())
    }

    /// Waits for every block's volume backups and post hooks, persisting
    /// the volume backups' progress once per sync period and at the end;
    /// records every hook run and every volume backup that did not complete
    /// in the results and the log.
    async fn finish_blocks(&self, run: &mut Run, work: &BlockWork) -> Result<(), ControllerError> {
        let name = run.name().to_string();
        let report = {
            let finished = work.finish();
            tokio::pin!(finished);
            let mut tick = tokio::time::interval(self.settings.sync_period);
            loop {
                tokio::select! {
                    report = &mut finished => break report,
                    _ = tick.tick() => self.persist_volume_progress(&name, work).await?,
                }
            }
        };
        for record in &report.hooks {
            let ns = record.pod.namespace.as_str();
            match verdict(record) {
                Verdict::Ok => self.journal.line(&name, format!("hook: {record}")),
                Verdict::Warning(m) => {
                    self.journal.line(&name, format!("warning: hook: {m}"));
                    run.results.warnings.add(ns, m);
                }
                Verdict::BlockFailed(m) => {
                    self.journal.line(&name, format!("error: hook: {m}"));
                    run.results.errors.add(ns, m);
                }
            }
        }
        for (ns, w) in report.warnings {
            self.journal.line(&name, format!("warning: {w}"));
            run.results.warnings.add(&ns, w);
        }
        for v in &report.volumes {
            self.journal.line(
                &name,
                format!(
                    "volume backup: {}: {:?}, {}/{} bytes",
                    v.describe(),
                    v.phase,
                    v.bytes_done,
                    v.bytes_total
                ),
            );
            if v.phase != VolumePhase::Completed {
                run.results.errors.add(
                    &v.pod_namespace,
                    format!(
                        "volume backup {}: {:?}: {}",
                        v.describe(),
                        v.phase,
                        v.error.as_deref().unwrap_or("no reason given")
                    ),
                );
            }
        }
        if !report.volumes.is_empty() {
            self.store
                .put_json(&name, BackupFile::VolumeBackups, &report.volumes)
                .await?;
        }
        Ok(())
    }

    /// Fails the volume backups a killed process left unfinished and
    /// reports the post hooks it interrupted or never reached, from the
    /// hook ledger; runs none of them.
    async fn interrupted_blocks(&self, run: &mut Run) -> Result<(), ControllerError> {
        let name = run.name().to_string();
        let ledger: Vec<LedgerEntry> = self
            .store
            .get_json(&name, BackupFile::HookLedger)
            .await?
            .unwrap_or_default();
        let mut volumes: Vec<VolumeBackup> = self
            .store
            .get_json(&name, BackupFile::VolumeBackups)
            .await?
            .unwrap_or_default();
        let messages = crate::backup::block_work::interrupted(&ledger, &mut volumes);
        if !volumes.is_empty() {
            self.store
                .put_json(&name, BackupFile::VolumeBackups, &volumes)
                .await?;
        }
        for (ns, m) in messages {
            self.journal.line(&name, format!("error: {m}"));
            run.results.errors.add(&ns, m);
        }
        Ok(())
    }

    async fn run_pass(
        &self,
        name: &str,
        items: Vec<Item>,
        backup: BackupRef,
        follow_additional: bool,
        work: Option<Arc<BlockWork>>,
        filter: Option<BackupFilter>,
    ) -> Result<PassOutput, ControllerError> {
        let plugins = self.plugins_for(name);
        let cluster = self.cluster.clone();
        let workers = self.settings.workers;
        // wasm calls block: the pass runs on a blocking thread.
        tokio::task::spawn_blocking(move || {
            // Plugin relations: one adapter per plugin exporting the 1.1.0
            // `item-block-action`, for this pass only (its instances follow
            // the plugin's isolation like the actions' do).
            let relations: Vec<Box<dyn Relation>> = plugins
                .iter()
                .filter_map(|p| {
                    crate::plugin::PluginRelation::new(p.clone(), cluster.clone(), backup.clone())
                })
                .map(|r| Box::new(r) as Box<dyn Relation>)
                .collect();
            let relations: Vec<&dyn Relation> = relations.iter().map(|r| r.as_ref()).collect();
            pass::run(
                &plugins,
                items,
                &backup,
                &cluster,
                workers,
                follow_additional,
                &relations,
                work.as_ref(),
                filter.as_ref(),
            )
        })
        .await
        .map_err(|e| ControllerError::Panicked {
            name: name.to_string(),
            what: "the item pass",
            reason: e.to_string(),
        })
    }

    /// Runs CPU-bound work (the tarball's compression) on a blocking
    /// thread, so that no runtime thread stalls behind it.
    async fn blocking<T: Send + 'static>(
        &self,
        name: &str,
        what: &'static str,
        work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
    ) -> Result<T, ControllerError> {
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| ControllerError::Panicked {
                name: name.to_string(),
                what,
                reason: e.to_string(),
            })?
            .map_err(|e| ControllerError::Invalid {
                name: name.to_string(),
                reason: format!("{what}: {e}"),
            })
    }

    fn timeout_for(&self, run: &Run) -> Duration {
        spec::operation_timeout(&run.object.spec)
            .ok()
            .flatten()
            .unwrap_or(self.settings.operation_timeout)
    }

    /// Polls (or cancels) every pending operation once and persists what
    /// changed; true when none is left pending.
    async fn poll_round(&self, run: &Run, round: Round) -> Result<bool, ControllerError> {
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
        .map_err(|e| ControllerError::Panicked {
            name: name.clone(),
            what: "polling operation progress",
            reason: e.to_string(),
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

    /// Once every operation is terminal: persists them, counts them on the
    /// backup, and records each one that did not complete as an error.
    async fn finish_waiting(&self, run: &mut Run) -> Result<(), ControllerError> {
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

    /// Runs the actions again, in the finalize phase, on every post-operation
    /// item read again from the cluster, and rewrites the tarball: those
    /// entries replaced or appended, every other entry kept byte for byte.
    async fn finalize(&self, run: &mut Run) -> Result<(), ControllerError> {
        let name = run.name().to_string();
        let ops = self.operations.get(&name).await.unwrap_or_default();
        let mut wanted: Vec<ItemRef> = ops
            .iter()
            .flat_map(|o| o.spec.post_operation_items.clone())
            .collect();
        wanted.sort();
        wanted.dedup();
        let mut items = Vec::new();
        for id in &wanted {
            // The operation named the object; its identity is the one it
            // was backed up under.
            let read = self.cluster.get_item_async(id).await.map(|found| {
                found.map(|mut item| {
                    item.id = id.clone();
                    item
                })
            });
            match read {
                Ok(Some(item)) => items.push(item),
                Ok(None) => run.results.warnings.add(
                    &id.namespace,
                    format!("post-operation item {id} was not found when finalizing"),
                ),
                Err(e) => run
                    .results
                    .errors
                    .add(&id.namespace, format!("post-operation item {id}: {e}")),
            }
        }
        let outcomes = self
            .run_pass(
                &name,
                items,
                run.backup_ref(Phase::Finalize),
                false,
                None,
                None,
            )
            .await?
            .outcomes;
        let mut replace = BTreeMap::new();
        for outcome in &outcomes {
            record_messages(
                &mut run.results,
                &self.journal,
                &run.object.metadata.name,
                outcome,
            );
            if let Some(value) = &outcome.stored {
                match tarball::item_path(&outcome.id) {
                    Ok(path) => {
                        replace.insert(path, item_bytes(value));
                    }
                    Err(e) => run.results.errors.add(&outcome.id.namespace, e),
                }
            }
        }
        self.journal.line(
            &name,
            format!("finalize: {} post-operation items updated", replace.len()),
        );
        if !replace.is_empty() {
            let current = self
                .store
                .get(&name, BackupFile::Contents)
                .await?
                .ok_or_else(|| ControllerError::Invalid {
                    name: name.clone(),
                    reason: "its contents tarball is missing".into(),
                })?;
            let rewritten = self
                .blocking(&name, "rewriting the tarball", move || {
                    tarball::rewrite(&current, &replace)
                })
                .await?;
            self.store
                .put(&name, BackupFile::Contents, rewritten.into())
                .await?;
        }
        Ok(())
    }
}

/// What a step does in a phase: the decision of [`Controller::step`],
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

fn record_messages(results: &mut Results, journal: &Journal, backup: &str, outcome: &ItemOutcome) {
    for line in &outcome.logs {
        journal.record(backup, line.clone());
    }
    for e in &outcome.errors {
        results.errors.add(&outcome.id.namespace, e.clone());
    }
    for w in &outcome.warnings {
        results.warnings.add(&outcome.id.namespace, w.clone());
    }
}

/// What one poll learned about one operation.
#[derive(Debug)]
enum Update {
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
enum Round {
    Poll,
    Cancel(String),
}

/// Polls operations on a blocking thread; keeps one instance per plugin and
/// polling thread across the periods of one backup.
struct Poller {
    plugins: Vec<Plugin>,
    /// One per polling thread: its instances (one per plugin) and log lines.
    workers: Vec<PollWorker>,
    cluster: Arc<dyn ClusterReader>,
    backup: BackupRef,
    timeout: Duration,
    logs: Vec<String>,
}

#[derive(Default)]
struct PollWorker {
    instances: HashMap<String, PluginInstance>,
    logs: Vec<String>,
}

/// Operations one polling thread takes at least: below it, threads cost
/// more than they save.
const OPERATIONS_PER_POLL_THREAD: usize = 256;

/// Threads to poll `pending` operations on: one for a few, up to `workers`
/// for many.
fn poll_threads(pending: usize, workers: usize) -> usize {
    (pending / OPERATIONS_PER_POLL_THREAD).clamp(1, workers.max(1))
}

/// Keyed by plugin and id: ids are unique per plugin only.
type PollUpdate = ((String, String), Update);

impl Poller {
    /// Polls every operation of `pending` once, on `threads` threads, each
    /// a contiguous share of the list with its own instances; answers and
    /// log lines in the order of `pending`.
    fn poll_all(
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
struct Shared<'a> {
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

fn poll_call(
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
fn cancel_call(
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
fn apply(op: &mut Operation, update: &Update, now: SystemTime) -> bool {
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

/// The backup's volume policy: Velero's `spec.resourcePolicy` names a
/// ConfigMap (`kind: configmap`) in the backup's namespace whose one data
/// value is the policy document. `Ok(None)` when the spec names none.
pub async fn resource_policies(
    spec: &serde_json::Value,
    backup_namespace: &str,
    cluster: &dyn ClusterReader,
) -> Result<Option<crate::backup::volume_policy::ResourcePolicies>, String> {
    let Some(reference) = spec.get("resourcePolicy").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let field = |f: &str| {
        reference
            .get(f)
            .and_then(|v| v.as_str())
            .ok_or_else(|| format!("resourcePolicy.{f} must be a string"))
    };
    let kind = field("kind")?;
    if !kind.eq_ignore_ascii_case("configmap") {
        return Err(format!(
            "resourcePolicy.kind is {kind:?}; only a configmap is supported"
        ));
    }
    let name = field("name")?;
    let id = crate::item::ItemRef {
        group: String::new(),
        resource: "configmaps".into(),
        namespace: backup_namespace.into(),
        name: name.into(),
    };
    let config_map = cluster
        .get_async(&id)
        .await
        .map_err(|e| format!("resourcePolicy: reading configmap {backup_namespace}/{name}: {e}"))?
        .ok_or_else(|| {
            format!("resourcePolicy: configmap {backup_namespace}/{name} does not exist")
        })?;
    let data = config_map
        .get("data")
        .and_then(|d| d.as_object())
        .filter(|d| d.len() == 1)
        .ok_or_else(|| {
            format!("resourcePolicy: configmap {backup_namespace}/{name} must hold exactly one data key, the policy")
        })?;
    let (key, document) = data.iter().next().expect("one key, checked above");
    let document = document.as_str().ok_or_else(|| {
        format!("resourcePolicy: configmap {backup_namespace}/{name}: data.{key} is not a string")
    })?;
    crate::backup::volume_policy::ResourcePolicies::parse(document)
        .map(Some)
        .map_err(|e| format!("configmap {backup_namespace}/{name}, data.{key}: {e}"))
}

#[cfg(test)]
mod poll_tests {
    use super::*;
    use crate::{NoCluster, PluginSettings, Runtime, RuntimeConfig};

    fn op(plugin: &str, i: usize) -> Operation {
        let spec = OperationSpec {
            backup_name: "b".into(),
            backup_uid: "u".into(),
            backup_item_action: plugin.into(),
            resource_identifier: ItemRef {
                resource: "pods".into(),
                namespace: "ns".into(),
                name: format!("p{i}"),
                ..ItemRef::default()
            },
            operation_id: format!("op-{i}"),
            post_operation_items: Vec::new(),
        };
        Operation::new(spec, SystemTime::now())
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
        let updates = poller.poll_all(&ops, SystemTime::now(), 3, &Round::Poll);
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
        let updates = poller.poll_all(&ops[..5], SystemTime::now(), 1, &Round::Poll);
        assert_eq!(updates.len(), 5);
        assert_eq!(poller.workers.len(), 3);
    }
}
