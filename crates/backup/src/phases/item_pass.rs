//! Running the plugins over items on a blocking thread: the first pass
//! (in blocks, with hooks and volumes) and finalize (post-operation items
//! alone) both go through [`PassRunner`].

use super::contents::ContentsSink;
use super::errors::PhaseError;
use super::journal::Journal;
use super::plugin_set::PluginSets;
use crate::backup::block_work::BlockWork;
use crate::backup::object::Results;
use crate::backup::pass::{self, ItemOutcome, PassOutput, PassProgress};
use iar_core::clock::Clock;
use iar_core::cluster::ClusterReader;
use iar_core::item::Item;
use iar_core::select::BackupFilter;
use iar_core::store::BackupStore;
use iar_plugin::plugin::{BackupRef, Relation};
use std::sync::Arc;

/// What only the first pass has: its blocks' hooks and volumes, the
/// spec's filter for related items, and its live progress. Finalize's pass
/// runs without them (it follows additional items, unfiltered, as
/// Velero's finalize does).
pub(super) struct FirstPassParts {
    pub(super) work: Arc<BlockWork>,
    pub(super) filter: BackupFilter,
    pub(super) progress: Arc<PassProgress>,
    /// Where each block's items go as it ends.
    pub(super) contents: Arc<ContentsSink>,
}

/// What a pass over items needs.
#[derive(Clone, Copy)]
pub(super) struct PassRunner<'a> {
    pub(super) plugins: &'a PluginSets,
    pub(super) cluster: &'a Arc<dyn ClusterReader>,
    /// Whose leases fence the plugins' cluster writes.
    pub(super) store: &'a BackupStore,
    pub(super) journal: &'a Arc<Journal>,
    /// `Settings::workers`: item-block workers.
    pub(super) workers: usize,
    /// When the operations the plugins start were created.
    pub(super) clock: &'a Arc<dyn Clock>,
}

impl PassRunner<'_> {
    /// Runs the plugins over `items` on a blocking thread (wasm calls
    /// block), with this pass's block relations.
    pub(super) async fn run(
        &self,
        name: &str,
        items: Vec<Item>,
        backup: BackupRef,
        first: Option<FirstPassParts>,
    ) -> Result<PassOutput, PhaseError> {
        let plugins = self.plugins.for_backup(name);
        // The plugins write to the cluster only under the backup's lease.
        let cluster = super::fenced_cluster::fenced(self.cluster.clone(), self.store, name);
        let workers = self.workers;
        let clock = self.clock.clone();
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
            pass::run_timed(
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
                &*clock,
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

/// An outcome's log lines, errors and warnings, into the backup's log and
/// results.
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
        journal.line(backup, format!("error: {e}"));
        results.errors.add(&outcome.id.namespace, e.clone());
    }
    for w in &outcome.warnings {
        journal.line(backup, format!("warning: {w}"));
        results.warnings.add(&outcome.id.namespace, w.clone());
    }
}
