//! The first pass: listing and filtering the items, the plugins' pass over
//! their blocks, and the tarball; it ends waiting or finalizing.

use super::BackupRequest;
use super::blocks::Blocks;
use super::contents::ContentsSink;
use super::created::Created;
use super::errors::{Invalid, PhaseError};
use super::item_pass::{FirstPassParts, PassRunner};
use super::journal::Journal;
use super::plugin_set::PluginSets;
use super::record::{Recorder, Run};
use crate::backup::block_work::BlockWork;
use crate::backup::expiry;
use crate::backup::object::{BackupObject, BackupPhase, Results, SOURCES_ANNOTATION, rfc3339};
use crate::backup::pass::{PassOutput, PassProgress};
use crate::backup::spec;
use iar_core::catalog::Catalog;
use iar_core::clock::Clock;
use iar_core::cluster::{ClusterError, ClusterReader};
use iar_core::item::{Item, ItemRef};
use iar_core::operations::OperationsMap;
use iar_core::select::BackupFilter;
use iar_core::store::tarball;
use iar_core::store::{BackupFile, BackupStore, StoreError};
use iar_plugin::plugin::Phase;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

mod outcomes;
mod turns;

pub(super) use turns::PassTurns;
pub use turns::StartClaim;

/// How often a running pass's progress reaches the status sink, at most.
const LIVE_STATUS_EVERY: Duration = Duration::from_secs(1);

/// A backup uid: unique per name, time and process, in the UUID's shape.
pub(super) fn new_uid(name: &str, now: SystemTime) -> String {
    use sha2::{Digest, Sha256};
    let now = now
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

/// What makes a request one that can never run, checked before any lease
/// is taken or anything written: a name the store cannot hold every file
/// of (over Kubernetes' 253 characters, or a lease file name over 255
/// bytes; [`BackupStore::check_backup_name`]), or a spec that does not
/// parse. Retrying such a request cannot help.
pub(super) fn validate(
    store: &BackupStore,
    req: &BackupRequest,
    default_ttl: Duration,
) -> Result<BackupFilter, PhaseError> {
    store.check_backup_name(&req.name)?;
    let spec_error = |reason: String| PhaseError::invalid(&req.name, Invalid::Spec(reason));
    crate::backup::spec::known_keys(&req.spec).map_err(spec_error)?;
    let filter = BackupFilter::from_spec(&req.spec).map_err(spec_error)?;
    spec::operation_timeout(&req.spec).map_err(spec_error)?;
    expiry::effective_ttl(&req.spec, default_ttl).map_err(|e| PhaseError::invalid(&req.name, e))?;
    Ok(filter)
}

/// The first pass's reconciler: a new backup from its request to waiting
/// (or finalizing).
pub(super) struct FirstPass<'a> {
    pub(super) store: &'a BackupStore,
    pub(super) operations: &'a OperationsMap,
    pub(super) cluster: &'a Arc<dyn ClusterReader>,
    pub(super) journal: &'a Journal,
    pub(super) plugins: &'a PluginSets,
    pub(super) recorder: Recorder<'a>,
    pub(super) blocks: Blocks<'a>,
    pub(super) passes: PassRunner<'a>,
    pub(super) created: Created<'a>,
    pub(super) turns: &'a PassTurns,
    /// The uid, the start timestamp and the expiration.
    pub(super) clock: &'a dyn Clock,
    /// `Settings::concurrent_passes`.
    pub(super) concurrent_passes: usize,
    /// `Settings::sync_period`: how often volume progress is persisted.
    pub(super) sync_period: Duration,
    /// `Settings::operation_timeout`: written into a spec that sets none.
    pub(super) operation_timeout: Duration,
    /// `Settings::default_backup_ttl`.
    pub(super) default_backup_ttl: Duration,
}

impl FirstPass<'_> {
    /// Creates the backup (refused if one of that name exists) and runs
    /// its first pass. Any error once the backup exists ends it Failed
    /// with the reason, and is returned.
    pub(super) async fn create_and_run(
        &self,
        req: BackupRequest,
        filter: BackupFilter,
    ) -> Result<BackupObject, PhaseError> {
        let now = self.clock.system_now();
        let mut object = BackupObject::new_at(
            &req.name,
            &req.namespace,
            &new_uid(&req.name, now),
            req.spec.clone(),
            now,
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
        object.metadata.labels = req.labels.clone();
        // The expiration is fixed when the backup is first written, as
        // Velero fixes it when it accepts a backup.
        expiry::effective_ttl(&req.spec, self.default_backup_ttl)
            .and_then(|ttl| expiry::stamp(&mut object, ttl, now))
            .map_err(|e| PhaseError::invalid(&req.name, e))?;
        // The operation timeout in force is written into the stored spec,
        // as Velero defaults it there, so that describe shows it.
        if let Some(spec) = object.spec.as_object_mut()
            && spec
                .get("itemOperationTimeout")
                .is_none_or(|v| v.as_str().is_none_or(str::is_empty))
        {
            spec.insert(
                "itemOperationTimeout".into(),
                spec::format_go_duration(self.operation_timeout).into(),
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
        self.recorder.set_phase(&mut run, BackupPhase::New).await?;
        run.object.status.start_timestamp = Some(rfc3339(self.clock.system_now()));
        self.recorder
            .set_phase(&mut run, BackupPhase::InProgress)
            .await?;
        self.plugins.pin_new(self.store, &req.name).await?;
        match self.run(&mut run, &req, &filter).await {
            Ok(()) => Ok(run.object),
            Err(e) => Err(self.recorder.fail(&mut run, e).await),
        }
    }

    /// From InProgress to waiting or finalizing: the items listed and
    /// filtered, the plugins' pass over their blocks (volume backups and
    /// post hooks included), then the tarball and the operations.
    async fn run(
        &self,
        run: &mut Run,
        req: &BackupRequest,
        filter: &BackupFilter,
    ) -> Result<(), PhaseError> {
        let turn = self
            .turns
            .turn(self.concurrent_passes, self.journal, run.name())
            .await;
        let items = self.selected_items(run, req, filter).await?;
        let work = self.blocks.block_work(run).await?;
        let (pass, contents) = self.item_pass(run, items, &work, filter).await?;
        work.all_blocks_started();
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
        // What the plugins created is recorded first of all: a backup
        // whose tarball exists goes on (a resume), and one whose record
        // was lost to a store fault after it (the fault campaign: a full
        // disk) left its VolumeSnapshot behind when it was deleted.
        self.created.record(run, &pass.outcomes).await?;
        // The volume backups started by the pass are recorded before the
        // tarball: a restart that finds the tarball (and so resumes the
        // wait) must find every request too, or it would run owed post
        // hooks before their block's volumes ended and never record them.
        self.blocks
            .record_started_volumes(run.name(), &work)
            .await?;
        // The items and operations are stored before the blocks' volume
        // backups and post hooks are waited for: a restart during that
        // wait then finds the items written and resumes the wait (see
        // `Blocks::resume_blocks`) instead of failing the backup.
        let attempted = self.store_outcomes(run, &pass.outcomes, contents).await?;
        // The outcomes are in the store now; their memory goes.
        drop(pass.outcomes);
        run.object.status.hook_status = work.hook_counts();
        self.recorder.persist(run).await?;
        self.blocks.finish_blocks(run, &work, false).await?;
        let next = if attempted == 0 {
            BackupPhase::finalizing(run.partially_failed())
        } else {
            BackupPhase::waiting(run.partially_failed())
        };
        self.recorder
            .set_phase(run, next)
            .await
            .map_err(PhaseError::from)
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
                Err(e) => {
                    self.journal
                        .line(&run.object.metadata.name, format!("error: {e}"));
                    run.results.errors.add(&item.id.namespace, e)
                }
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
        let pass = self.passes.run(
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
        let mut tick = tokio::time::interval(self.sync_period);
        // The live status (items backed up of those known) goes to the
        // status sink at most once a second, and only when it moved; the
        // stored object is written on phase changes, as before.
        let mut live = tokio::time::interval(LIVE_STATUS_EVERY);
        let mut shown = (0, 0);
        loop {
            tokio::select! {
                pass = &mut pass => return Ok((pass?, contents)),
                _ = tick.tick() => self.blocks.persist_volume_progress(name, work).await?,
                _ = live.tick() => {
                    let now = progress.now();
                    if now != shown && self.recorder.status_sink.is_some() {
                        shown = now;
                        let mut object = run.object.clone();
                        object.status.progress.items_backed_up = now.0;
                        object.status.progress.total_items = now.1;
                        self.recorder.tell(&object);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
