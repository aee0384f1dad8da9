//! Continuing a backup another process left: its recorded sources, its
//! persisted results and log, its operations.

use crate::backup::object::{BackupObject, BackupPhase, Results, SOURCES_ANNOTATION};
use iar_core::store::{BackupFile, StoreError};
use std::path::PathBuf;

use super::*;

/// The manifest files or directories a backup was started with, as recorded
/// on its object, each still present. `resume` needs them as its cluster:
/// run against missing ones, finalize would find nothing and the backup
/// would end as if the cluster were empty, so their absence is an error.
pub fn recorded_sources(object: &BackupObject) -> Result<Vec<PathBuf>, PhaseError> {
    let name = &object.metadata.name;
    let refuse = |reason: String| PhaseError::Sources {
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

impl PhaseMachine {
    /// Continues a backup a killed process left behind. Refused while
    /// another live process holds the backup's lease.
    pub async fn resume(&self, name: &str) -> Result<BackupObject, PhaseError> {
        let object: BackupObject = self
            .store
            .get_json(name, BackupFile::Metadata)
            .await?
            .ok_or_else(|| PhaseError::NotFound(name.into()))?;
        if object.status.phase.is_terminal() {
            return Ok(object);
        }
        if object.status.phase == BackupPhase::Deleting {
            return Err(PhaseError::Deleting(name.into()));
        }
        let lease = super::held::take(&self.store, name, self.settings.lease_duration).await?;
        let result = self.leased(lease, self.steps(name)).await;
        self.forget(name).await;
        result
    }

    /// Reads a results or log file for resume; one that cannot be read is
    /// set aside (so the rewrite does not replace it with a shorter one)
    /// and the backup carries on with a fresh one, saying so.
    pub(super) async fn readable<T>(
        &self,
        name: &str,
        file: BackupFile,
        read: Result<Option<T>, StoreError>,
        notes: &mut Vec<String>,
    ) -> Result<Option<T>, PhaseError> {
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

    /// The persisted state of a backup, with its log continued from the
    /// store when this process has none of it yet (a resume).
    pub(super) async fn load_run(
        &self,
        name: &str,
        object: BackupObject,
    ) -> Result<Run, PhaseError> {
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
            // This process takes it over (a restart, or another replica
            // died): its log says who drives it from here.
            self.journal.line(
                name,
                format!(
                    "driven by {} from phase {}",
                    self.store.holder(),
                    object.status.phase
                ),
            );
        }
        let mut run = Run { object, results };
        for note in notes {
            self.journal.line(name, note.clone());
            run.results.warnings.add("", note);
        }
        Ok(run)
    }

    /// Loads a backup's operations from the store when this process does
    /// not hold them (it resumed the backup or took it over).
    pub(super) async fn ensure_operations(&self, run: &Run) -> Result<(), PhaseError> {
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
}
