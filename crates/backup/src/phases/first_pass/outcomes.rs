//! The end of the first pass's item work: the tarball, the resource
//! list, the created objects and the operations, stored.

use super::FirstPass;
use crate::backup::pass::ItemOutcome;
use crate::phases::contents::ContentsSink;
use crate::phases::errors::PhaseError;
use crate::phases::item_pass::record_messages;
use crate::phases::record::{Run, blocking};
use iar_core::operations::{Operation, OperationSpec};
use iar_core::store::BackupFile;
use std::collections::BTreeMap;
use std::sync::Arc;

impl FirstPass<'_> {
    /// Stores the tarball the pass wrote as it went, the resource list,
    /// and registers the operations its plugins started (persisted even
    /// when there are none, so describe and resume always find the file);
    /// returns how many.
    pub(super) async fn store_outcomes(
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
                self.journal,
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
        let contents = blocking(run.name(), "building the tarball", move || {
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
        self.operations.update(run.name(), |_| true).await;
        self.operations.sync(run.name(), self.store).await?;
        Ok(attempted)
    }
}
