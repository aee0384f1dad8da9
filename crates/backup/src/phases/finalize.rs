//! Finalizing: the actions run again on post-operation items and the
//! tarball is rewritten.

use super::Step;
use super::contents::{archive_entries, resource_key};
use super::errors::{Invalid, PhaseError};
use super::item_pass::{PassRunner, record_messages};
use super::journal::Journal;
use super::load::ensure_operations;
use super::record::{Recorder, Run, blocking};
use crate::backup::object::BackupPhase;
use iar_core::cluster::ClusterReader;
use iar_core::item::ItemRef;
use iar_core::operations::OperationsMap;
use iar_core::store::tarball;
use iar_core::store::{BackupFile, BackupStore};
use iar_plugin::plugin::Phase;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The finalize phase's reconciler.
pub(super) struct Finalize<'a> {
    pub(super) store: &'a BackupStore,
    pub(super) operations: &'a OperationsMap,
    pub(super) cluster: &'a Arc<dyn ClusterReader>,
    pub(super) journal: &'a Journal,
    pub(super) passes: PassRunner<'a>,
    pub(super) recorder: Recorder<'a>,
}

impl Finalize<'_> {
    /// One step in a finalizing phase: the finalize pass, then the
    /// terminal phase.
    pub(super) async fn step(&self, run: &mut Run) -> Result<Step, PhaseError> {
        ensure_operations(self.store, self.journal, self.operations, run).await?;
        self.finalize(run).await?;
        let done = if run.partially_failed() {
            BackupPhase::PartiallyFailed
        } else {
            BackupPhase::Completed
        };
        self.recorder.set_phase(run, done).await?;
        Ok(Step::Done(Box::new(run.object.clone())))
    }

    /// Runs the actions again, in the finalize phase, on every post-operation
    /// item read again from the cluster, and rewrites the tarball: those
    /// entries replaced or appended, every other entry kept byte for byte.
    async fn finalize(&self, run: &mut Run) -> Result<(), PhaseError> {
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
            .passes
            .run(&name, items, run.backup_ref(Phase::Finalize), None)
            .await?
            .outcomes;
        let mut replace = BTreeMap::new();
        let mut listed: Vec<(String, String)> = Vec::new();
        for outcome in &outcomes {
            record_messages(
                &mut run.results,
                self.journal,
                &run.object.metadata.name,
                outcome,
            );
            if let Some(value) = &outcome.stored {
                match archive_entries(&outcome.id, value) {
                    Ok(both) => {
                        replace.extend(both.map(|(path, bytes)| (path, bytes.as_ref().to_vec())));
                        let entry = if outcome.id.namespace.is_empty() {
                            outcome.id.name.clone()
                        } else {
                            format!("{}/{}", outcome.id.namespace, outcome.id.name)
                        };
                        listed.push((resource_key(value), entry));
                    }
                    Err(e) => {
                        self.journal
                            .line(&run.object.metadata.name, format!("error: {e}"));
                        run.results.errors.add(&outcome.id.namespace, e)
                    }
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
                .ok_or_else(|| PhaseError::invalid(&name, Invalid::ContentsMissing))?;
            let rewritten = blocking(&name, "rewriting the tarball", move || {
                tarball::rewrite(&current, &replace)
            })
            .await?;
            self.store
                .put(&name, BackupFile::Contents, rewritten.into())
                .await?;
            // Items finalize added (a snapshot a plugin created, its
            // content and class) are backed up too: counted, as Velero's
            // finalize counts them, so the status matches the tarball.
            let added = self.list_finalized(&name, listed).await?;
            let progress = &mut run.object.status.progress;
            progress.items_backed_up += added;
            progress.total_items = progress.total_items.max(progress.items_backed_up);
        }
        Ok(())
    }

    /// Adds what finalize backed up to the resource list: a post-operation
    /// item may not have existed in the first pass (a snapshot a plugin
    /// created), and Velero's list names every item of the tarball. How
    /// many were new.
    async fn list_finalized(
        &self,
        name: &str,
        listed: Vec<(String, String)>,
    ) -> Result<u64, PhaseError> {
        let mut resources: BTreeMap<String, Vec<String>> = self
            .store
            .get_json(name, BackupFile::ResourceList)
            .await?
            .unwrap_or_default();
        let mut added = 0;
        for (key, entry) in listed {
            let list = resources.entry(key).or_default();
            if !list.contains(&entry) {
                list.push(entry);
                list.sort();
                added += 1;
            }
        }
        if added > 0 {
            self.store
                .put_json(name, BackupFile::ResourceList, &resources)
                .await?;
        }
        Ok(added)
    }
}

#[cfg(test)]
mod tests;
