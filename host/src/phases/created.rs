//! The objects a backup's plugins created in the cluster (contract 1.2.0):
//! recorded with the backup when its first pass is stored, and deleted
//! when the backup is deleted or canceled, each only while its uid is the
//! one recorded (a newer object of the same name stays).

use super::{PhaseError, PhaseMachine, Run};
use crate::backup::pass::ItemOutcome;
use crate::cluster::ClusterError;
use crate::cluster::writes::CreatedObject;
use crate::store::BackupFile;

impl PhaseMachine {
    /// Records what the first pass's plugins created, in the order they
    /// created it, with a line each in the backup's log.
    pub(super) async fn record_created(
        &self,
        run: &Run,
        outcomes: &[ItemOutcome],
    ) -> Result<(), PhaseError> {
        let mut created: Vec<&CreatedObject> = Vec::new();
        // One record per object: a retried execute gets its object back.
        for object in outcomes.iter().flat_map(|o| &o.created) {
            if !created.contains(&object) {
                created.push(object);
            }
        }
        if created.is_empty() {
            return Ok(());
        }
        for object in &created {
            self.journal.line(
                run.name(),
                format!(
                    "plugin {} created {} (uid {})",
                    object.plugin, object.id, object.uid
                ),
            );
        }
        self.store
            .put_json(run.name(), BackupFile::CreatedObjects, &created)
            .await?;
        Ok(())
    }

    /// What a stored backup's plugins created; empty when they created
    /// nothing.
    pub async fn created_objects(&self, name: &str) -> Result<Vec<CreatedObject>, PhaseError> {
        Ok(self
            .store
            .get_json(name, BackupFile::CreatedObjects)
            .await?
            .unwrap_or_default())
    }

    /// Deletes what the backup's plugins created. An object already gone
    /// is fine. A cluster that cannot be written (`iar delete` with no
    /// cluster) leaves them, said in the log; any other failure is an
    /// error, so that the deletion is tried again and nothing is leaked
    /// quietly.
    pub(super) async fn delete_created(&self, name: &str) -> Result<(), PhaseError> {
        for object in self.created_objects(name).await? {
            match self.cluster.delete_async(&object.id, &object.uid).await {
                Ok(deleted) => self.journal.line(
                    name,
                    if deleted {
                        format!(
                            "deleted {} (created by plugin {})",
                            object.id, object.plugin
                        )
                    } else {
                        format!(
                            "{} (created by plugin {}) was already gone",
                            object.id, object.plugin
                        )
                    },
                ),
                Err(ClusterError::ReadOnly) => {
                    tracing::warn!(backup = %name, object = %object.id, plugin = %object.plugin,
                        "this process has no cluster to delete it from: it stays (labelled iar.dev/backup-uid)");
                }
                Err(e) => {
                    return Err(PhaseError::Invalid {
                        name: name.to_string(),
                        reason: format!(
                            "deleting {} (created by plugin {}): {e}",
                            object.id, object.plugin
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}
