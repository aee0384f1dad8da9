//! Reading a backup's persisted state back before a phase works on it:
//! its object, results and log, its pinned plugins, its operations. Every
//! step starts here, so that any process may take the next step.

use super::errors::PhaseError;
use super::journal::Journal;
use super::plugin_set::PluginSets;
use super::record::Run;
use crate::backup::object::{BackupObject, Results};
use iar_core::operations::OperationsMap;
use iar_core::store::{BackupFile, BackupStore, StoreError};

/// Reads a results or log file for resume; one that cannot be read is set
/// aside (so the rewrite does not replace it with a shorter one) and the
/// backup carries on with a fresh one, saying so in `notes`.
pub(super) async fn readable<T>(
    store: &BackupStore,
    name: &str,
    file: BackupFile,
    read: Result<Option<T>, StoreError>,
    notes: &mut Vec<String>,
) -> Result<Option<T>, PhaseError> {
    match read {
        Ok(v) => Ok(v),
        Err(StoreError::Corrupt { reason, .. }) => {
            let aside = store.set_aside(name, file).await?;
            notes.push(format!(
                "{} could not be read ({reason}); kept as {aside}, continuing with a new one",
                file.key(name)
            ));
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// The stored backup object, or [`PhaseError::NotFound`].
pub(super) async fn stored_object(
    store: &BackupStore,
    name: &str,
) -> Result<BackupObject, PhaseError> {
    store
        .get_json(name, BackupFile::Metadata)
        .await?
        .ok_or_else(|| PhaseError::NotFound(name.into()))
}

/// What loading a backup's state needs.
#[derive(Clone, Copy)]
pub(super) struct Loader<'a> {
    pub(super) store: &'a BackupStore,
    pub(super) journal: &'a Journal,
    pub(super) plugins: &'a PluginSets,
}

impl Loader<'_> {
    /// The persisted state of a backup, with its log continued from the
    /// store when this process has none of it yet (a resume).
    pub(super) async fn run(&self, name: &str, object: BackupObject) -> Result<Run, PhaseError> {
        let (store, journal) = (self.store, self.journal);
        self.plugins.pin_recorded(store, journal, name).await?;
        let mut notes = Vec::new();
        let read = store.get_json(name, BackupFile::Results).await;
        let results: Results = readable(store, name, BackupFile::Results, read, &mut notes)
            .await?
            .unwrap_or_default();
        if !journal.has(name) {
            let read = store.get_logs(name).await;
            if let Some(previous) =
                readable(store, name, BackupFile::Logs, read, &mut notes).await?
            {
                journal.preload(name, previous);
            }
            // This process takes it over (a restart, or another replica
            // died): its log says who drives it from here.
            journal.line(
                name,
                format!(
                    "driven by {} from phase {}",
                    store.holder(),
                    object.status.phase
                ),
            );
        }
        let mut run = Run { object, results };
        for note in notes {
            journal.line(name, note.clone());
            run.results.warnings.add("", note);
        }
        Ok(run)
    }
}

/// Loads a backup's operations from the store when this process does not
/// hold them (it resumed the backup or took it over).
pub(super) async fn ensure_operations(
    store: &BackupStore,
    journal: &Journal,
    operations: &OperationsMap,
    run: &Run,
) -> Result<(), PhaseError> {
    let name = run.name();
    if operations.get(name).await.is_none() {
        let n = operations.load(name, store).await?;
        journal.line(
            name,
            format!(
                "resumed in phase {} with {n} operations",
                run.object.status.phase
            ),
        );
    }
    Ok(())
}
