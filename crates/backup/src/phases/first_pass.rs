//! The first pass: listing and filtering the items, the plugins' pass over
//! their blocks, and the tarball; it ends waiting or finalizing.

use crate::backup::block_work::BlockWork;
use crate::backup::expiry;
use crate::backup::object::{BackupObject, BackupPhase, Results, SOURCES_ANNOTATION, rfc3339};
use crate::backup::pass::{self, ItemOutcome, PassOutput, PassProgress};
use iar_core::catalog::Catalog;
use iar_core::cluster::ClusterError;
use iar_core::item::{Item, ItemRef};
use iar_core::operations::{Operation, OperationSpec};
use iar_core::select::BackupFilter;
use iar_core::store::tarball;
use iar_core::store::{BackupFile, StoreError};
use iar_plugin::plugin::Relation;
use iar_plugin::plugin::{BackupRef, Phase};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use super::contents::ContentsSink;
use super::*;

/// A turn at a first pass; dropping it lets the next backup in.
pub(super) struct PassTurn<'a> {
    _permit: tokio::sync::SemaphorePermit<'a>,
    running: &'a std::sync::atomic::AtomicUsize,
}

/// A place claimed for a backup about to start ([`PhaseMachine::claim_start`]);
/// given back when dropped.
pub struct StartClaim<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for StartClaim<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Drop for PassTurn<'_> {
    fn drop(&mut self) {
        self.running
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

pub(super) fn new_uid(name: &str) -> String {
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

/// What only the first pass has: its blocks' hooks and volumes, the
/// spec's filter for related items, and its live progress. Finalize's pass
/// runs without them (it follows additional items, unfiltered, as
/// Velero's finalize does).
pub(super) struct FirstPassParts {
    work: Arc<BlockWork>,
    filter: BackupFilter,
    progress: Arc<PassProgress>,
    /// Where each block's items go as it ends.
    contents: Arc<ContentsSink>,
}

/// How often a running pass's progress reaches the status sink, at most.
const LIVE_STATUS_EVERY: Duration = Duration::from_secs(1);

impl PhaseMachine {
    /// Waits for a turn at a first pass (listing and the item pass), held
    /// until the returned guard drops.
    pub(super) async fn pass_turn(&self, backup: &str) -> PassTurn<'_> {
        use std::sync::atomic::Ordering;
        let passes = self.passes();
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

    fn passes(&self) -> &tokio::sync::Semaphore {
        self.passes
            .get_or_init(|| tokio::sync::Semaphore::new(self.settings.concurrent_passes.max(1)))
    }

    /// Claims one of `settings.concurrent_passes` places for a backup this
    /// process is about to start, or none when as many are starting here
    /// already. A controller replica takes a new backup only with a claim,
    /// and leaves it to a less busy replica otherwise. Claimed at once,
    /// not checked: reconciles that run together cannot all pass a check
    /// before any of them has taken its turn.
    pub fn claim_start(&self) -> Option<StartClaim<'_>> {
        use std::sync::atomic::Ordering;
        let most = self.settings.concurrent_passes.max(1);
        self.starting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < most).then_some(n + 1)
            })
            .ok()
            .map(|_| StartClaim(&self.starting))
    }

    /// The most first passes that ran at once in this controller.
    pub fn concurrent_passes_seen(&self) -> usize {
        self.passes_high_water
            .load(std::sync::atomic::Ordering::Acquire)
    }

    pub(super) async fn create_and_run(
        &self,
        req: BackupRequest,
        filter: BackupFilter,
    ) -> Result<BackupObject, PhaseError> {
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
            .map_err(|reason| PhaseError::Invalid {
                name: req.name.clone(),
                reason,
            })?;
        // The operation timeout in force is written into the stored spec,
        // as Velero defaults it there, so that describe shows it.
        if let Some(spec) = object.spec.as_object_mut()
            && spec
                .get("itemOperationTimeout")
                .is_none_or(|v| v.as_str().is_none_or(str::is_empty))
        {
            spec.insert(
                "itemOperationTimeout".into(),
                crate::backup::spec::format_go_duration(self.settings.operation_timeout).into(),
            );
        }
        // Velero refuses a second backup of the same name; so does iar,
        // rather than overwrite one (or a half-done one that could resume).
        // A conditional create, so that of two processes that both found
        // the name free exactly one creates it.
        self.store
            .create_json(&req.name, BackupFile::Metadata, &object)
            .await
            .map_err(|e| match e {
                StoreError::Exists { .. } => PhaseError::Exists {
                    name: req.name.clone(),
                    store: self.store.url().to_string(),
                },
                e => e.into(),
            })?;
        let mut run = Run {
            object,
            results: Results::default(),
        };
        // Which process drives it, in its log: of several controller
        // replicas, the one that took it.
        self.journal
            .line(&req.name, format!("driven by {}", self.store.holder()));
        self.set_phase(&mut run, BackupPhase::New).await?;
        run.object.status.start_timestamp = Some(rfc3339(SystemTime::now()));
        self.set_phase(&mut run, BackupPhase::InProgress).await?;
        self.pin_new(&req.name).await?;
        match self.first_pass(&mut run, &req, &filter).await {
            Ok(()) => Ok(run.object),
            Err(e) => Err(self.fail(&mut run, e).await),
        }
    }

    /// From InProgress to waiting or finalizing: the items listed and
    /// filtered, the plugins' pass over their blocks (volume backups and
    /// post hooks included), then the tarball and the operations.
    pub(super) async fn first_pass(
        &self,
        run: &mut Run,
        req: &BackupRequest,
        filter: &BackupFilter,
    ) -> Result<(), PhaseError> {
        let turn = self.pass_turn(run.name()).await;
        let items = self.selected_items(run, req, filter).await?;
        let work = self.block_work(run).await?;
        let (pass, contents) = self.item_pass(run, items, &work, filter).await?;
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
        // The volume backups started by the pass are recorded before the
        // tarball: a restart that finds the tarball (and so resumes the
        // wait) must find every request too, or it would run owed post
        // hooks before their block's volumes ended and never record them.
        self.persist_volume_progress(run.name(), &work).await?;
        // The items and operations are stored before the blocks' volume
        // backups and post hooks are waited for: a restart during that
        // wait then finds the items written and resumes the wait (see
        // `resume_blocks`) instead of failing the backup.
        let attempted = self.store_outcomes(run, &pass.outcomes, contents).await?;
        // The outcomes are in the store now; their memory goes.
        drop(pass.outcomes);
        run.object.status.hook_status = work.hook_counts();
        self.persist(run).await?;
        self.finish_blocks(run, &work).await?;
        let next = if attempted == 0 {
            BackupPhase::finalizing(run.partially_failed())
        } else {
            BackupPhase::waiting(run.partially_failed())
        };
        self.set_phase(run, next).await.map_err(PhaseError::from)
    }

    /// The items the backup's spec selects: the manifests named by the
    /// request, or the cluster's own objects, filtered. An identity
    /// Kubernetes would refuse never reaches a plugin or the tarball: the
    /// item is an error, named.
    async fn selected_items(
        &self,
        run: &mut Run,
        req: &BackupRequest,
        filter: &BackupFilter,
    ) -> Result<Vec<Item>, PhaseError> {
        let items_error = |source: ClusterError| PhaseError::Items {
            name: req.name.clone(),
            source,
        };
        // When the cluster is those very manifests (`iar backup`), it lists
        // them through its parse cache: the plugins' lookups and finalize
        // then parse no file a second time.
        // A cluster lists what the filter selects; files read here are
        // filtered here (a second match would read every spooled item's
        // labels back once more).
        let (items, filtered) = if req.sources.is_empty() {
            (self.cluster.list(filter).await.map_err(items_error)?, true)
        } else if let Some(listed) = self.cluster.list_sources(&req.sources, filter).await {
            (listed.map_err(items_error)?, true)
        } else {
            let read = iar_core::manifests::read_items(&req.sources, Catalog::builtin())
                .map_err(|e| items_error(e.into()))?;
            (read, false)
        };
        let mut selected = Vec::with_capacity(items.len());
        for item in items.into_iter().filter(|i| filtered || filter.matches(i)) {
            match tarball::item_path(&item.id) {
                Ok(_) => selected.push(item),
                Err(e) => run.results.errors.add(&item.id.namespace, e),
            }
        }
        self.add_namespace_objects(run, filter, &mut selected).await;
        self.journal.line(
            run.name(),
            format!("{} items selected by the spec", selected.len()),
        );
        Ok(selected)
    }

    /// Adds the Namespace object of each namespace the backup covers, read
    /// from the cluster (a namespace without one is said in the log, as
    /// Velero logs it).
    async fn add_namespace_objects(
        &self,
        run: &mut Run,
        filter: &BackupFilter,
        selected: &mut Vec<Item>,
    ) {
        for ns in filter.namespace_objects_wanted(selected) {
            let id = ItemRef::new("", "namespaces", "", ns.clone());
            match self.cluster.get_item_async(&id).await {
                Ok(Some(mut item)) if filter.keeps_namespace_object(&item) => {
                    item.id = id;
                    selected.push(item);
                }
                Ok(Some(_)) => {}
                Ok(None) => self.journal.line(
                    run.name(),
                    format!("namespace {ns}: no Namespace object in the cluster; a restore creates it without labels or annotations"),
                ),
                Err(e) => run
                    .results
                    .errors
                    .add(&ns, format!("reading namespace {ns}: {e}")),
            }
        }
    }

    /// The plugins' pass over the items. Volume backups start while it
    /// still runs: their progress is persisted from then on, once per sync
    /// period.
    async fn item_pass(
        &self,
        run: &Run,
        items: Vec<Item>,
        work: &Arc<BlockWork>,
        filter: &BackupFilter,
    ) -> Result<(PassOutput, Arc<ContentsSink>), PhaseError> {
        let name = run.name();
        let progress = Arc::new(PassProgress::default());
        let contents = Arc::new(ContentsSink::new().map_err(|source| PhaseError::Io {
            name: name.to_string(),
            what: "starting the tarball",
            source,
        })?);
        let pass = self.run_pass(
            name,
            items,
            run.backup_ref(Phase::Backup),
            Some(FirstPassParts {
                work: work.clone(),
                filter: filter.clone(),
                progress: progress.clone(),
                contents: contents.clone(),
            }),
        );
        tokio::pin!(pass);
        let mut tick = tokio::time::interval(self.settings.sync_period);
        // The live status (items backed up of those known) goes to the
        // status sink at most once a second, and only when it moved; the
        // stored object is written on phase changes, as before.
        let mut live = tokio::time::interval(LIVE_STATUS_EVERY);
        let mut shown = (0, 0);
        loop {
            tokio::select! {
                pass = &mut pass => return Ok((pass?, contents)),
                _ = tick.tick() => self.persist_volume_progress(name, work).await?,
                _ = live.tick() => {
                    let now = progress.now();
                    if now != shown && let Some(sink) = &self.status_sink {
                        shown = now;
                        let mut object = run.object.clone();
                        object.status.progress.items_backed_up = now.0;
                        object.status.progress.total_items = now.1;
                        sink(&object);
                    }
                }
            }
        }
    }

    /// Stores the tarball the pass wrote as it went, the resource list,
    /// and registers the operations its plugins started (persisted even
    /// when there are none, so describe and resume always find the file);
    /// returns how many.
    async fn store_outcomes(
        &self,
        run: &mut Run,
        outcomes: &[ItemOutcome],
        contents: Arc<ContentsSink>,
    ) -> Result<u64, PhaseError> {
        let mut resources: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut attempted = 0;
        self.operations.insert_loaded(run.name(), Vec::new()).await;
        for outcome in outcomes {
            record_messages(
                &mut run.results,
                &self.journal,
                &run.object.metadata.name,
                outcome,
            );
            if let Some(written) = &outcome.written {
                run.object.status.progress.items_backed_up += 1;
                let entry = if outcome.id.namespace.is_empty() {
                    outcome.id.name.clone()
                } else {
                    format!("{}/{}", outcome.id.namespace, outcome.id.name)
                };
                match resources.get_mut(&*written.resource_key) {
                    Some(list) => list.push(entry),
                    None => {
                        resources.insert(written.resource_key.to_string(), vec![entry]);
                    }
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
        let contents = Arc::into_inner(contents).expect("the pass is over: no worker holds it");
        let late = contents.late_post_operation_items(outcomes);
        // Ending the stream compresses the tail (and, rarely, the whole):
        // CPU work, off the runtime's threads.
        let contents = self
            .blocking(run.name(), "building the tarball", move || {
                contents.finish(late)
            })
            .await?;
        self.store
            .put(run.name(), BackupFile::Contents, contents.into())
            .await?;
        for list in resources.values_mut() {
            list.sort();
        }
        self.store
            .put_json(run.name(), BackupFile::ResourceList, &resources)
            .await?;
        self.record_created(run, outcomes).await?;
        self.operations.update(run.name(), |_| true).await;
        self.operations.sync(run.name(), &self.store).await?;
        Ok(attempted)
    }

    /// Runs the plugins over `items` on a blocking thread (wasm calls
    /// block), with this pass's block relations.
    pub(super) async fn run_pass(
        &self,
        name: &str,
        items: Vec<Item>,
        backup: BackupRef,
        first: Option<FirstPassParts>,
    ) -> Result<PassOutput, PhaseError> {
        let plugins = self.plugins_for(name);
        let cluster = self.cluster.clone();
        let workers = self.settings.workers;
        let (journal, backup_name) = (self.journal.clone(), name.to_string());
        // wasm calls block: the pass runs on a blocking thread.
        tokio::task::spawn_blocking(move || {
            // Plugin relations: one adapter per plugin exporting the 1.1.0
            // `item-block-action`, for this pass only (its instances follow
            // the plugin's isolation like the actions' do).
            let relations: Vec<Box<dyn Relation>> = plugins
                .iter()
                .filter_map(|p| {
                    iar_plugin::plugin::PluginRelation::new(
                        p.clone(),
                        cluster.clone(),
                        backup.clone(),
                    )
                })
                .map(|r| Box::new(r) as Box<dyn Relation>)
                .collect();
            let relations: Vec<&dyn Relation> = relations.iter().map(|r| r.as_ref()).collect();
            let take = first.as_ref().map(|f| {
                let (contents, journal, backup_name) = (&f.contents, &journal, &backup_name);
                move |outcome: &mut ItemOutcome| {
                    // Into the bounded log now: what a plugin writes is
                    // never held per item until the pass ends.
                    for line in std::mem::take(&mut outcome.logs) {
                        journal.record(backup_name, line);
                    }
                    contents.take(outcome)
                }
            });
            pass::run(
                &plugins,
                items,
                &backup,
                &cluster,
                workers,
                first.is_some(),
                &relations,
                first.as_ref().map(|f| &f.work),
                first.as_ref().map(|f| &f.filter),
                first.as_ref().map(|f| &*f.progress),
                take.as_ref().map(|t| t as pass::OutcomeSink<'_>),
            )
        })
        .await
        .map_err(|e| PhaseError::Panicked {
            name: name.to_string(),
            what: "the item pass",
            source: e,
        })
    }
}

pub(super) fn record_messages(
    results: &mut Results,
    journal: &Journal,
    backup: &str,
    outcome: &ItemOutcome,
) {
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
