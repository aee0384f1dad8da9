//! A backup while a phase drives it ([`Run`]), and how every phase writes
//! a phase change down ([`Recorder`]): results, log, then the object, and
//! the status sink told after.

use super::StatusSink;
use super::errors::PhaseError;
use super::journal::Journal;
use crate::backup::object::{BackupObject, BackupPhase, Results, is_iar_annotation, rfc3339};
use iar_core::clock::Clock;
use iar_core::store::{BackupFile, BackupStore, StoreError};
use iar_plugin::plugin::{BackupRef, Phase};

/// Where a backup stands while the controller drives it.
pub(super) struct Run {
    pub(super) object: BackupObject,
    pub(super) results: Results,
}

impl Run {
    pub(super) fn name(&self) -> &str {
        &self.object.metadata.name
    }

    pub(super) fn partially_failed(&self) -> bool {
        self.results.errors.count() > 0
    }

    /// The backup as a pass's calls see it; once per pass.
    pub(super) fn backup_ref(&self, phase: Phase) -> BackupRef {
        BackupRef {
            object: Some(self.plugin_view()),
            name: self.object.metadata.name.clone(),
            namespace: self.object.metadata.namespace.clone(),
            uid: self.object.metadata.uid.clone(),
            spec: self.object.spec.clone(),
            phase,
        }
    }

    /// The whole Backup as a plugin reads it (contract 1.4.0's
    /// `runs.backup`): the stored object as it stands, without iar's own
    /// annotations (the plugin settings, the item sources, the resource's
    /// uid are iar's bookkeeping, not the user's Backup).
    fn plugin_view(&self) -> std::sync::Arc<str> {
        let mut object = self.object.clone();
        object
            .metadata
            .annotations
            .retain(|key, _| !is_iar_annotation(key));
        let text = serde_json::to_string(&object).expect("a backup object serializes");
        std::sync::Arc::from(text)
    }
}

/// What a phase needs to write a backup's state down.
#[derive(Clone, Copy)]
pub(super) struct Recorder<'a> {
    pub(super) store: &'a BackupStore,
    pub(super) journal: &'a Journal,
    pub(super) status_sink: Option<&'a StatusSink>,
    /// The completion timestamp's.
    pub(super) clock: &'a dyn Clock,
}

impl Recorder<'_> {
    /// Persists the backup object, results and log. Called on every phase change.
    pub(super) async fn persist(&self, run: &Run) -> Result<(), StoreError> {
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

    pub(super) async fn set_phase(
        &self,
        run: &mut Run,
        phase: BackupPhase,
    ) -> Result<(), StoreError> {
        run.object.status.phase = phase;
        run.object.status.errors = run.results.errors.count();
        run.object.status.warnings = run.results.warnings.count();
        if phase.is_terminal() {
            run.object.status.completion_timestamp = Some(rfc3339(self.clock.system_now()));
        }
        self.journal.line(run.name(), format!("phase {phase}"));
        self.persist(run).await?;
        self.tell(&run.object);
        Ok(())
    }

    /// Tells the status sink (if any) what the backup looks like now.
    pub(super) fn tell(&self, object: &BackupObject) {
        if let Some(sink) = self.status_sink {
            sink(object);
        }
    }

    /// Ends a backup Failed with the error that stopped it, so that nothing
    /// is left InProgress for `resume` to guess about; returns the error.
    /// A lost lease is not a failure of the backup (another process drives
    /// it) and writes nothing.
    pub(super) async fn fail(&self, run: &mut Run, error: PhaseError) -> PhaseError {
        if matches!(error, PhaseError::Lease(_)) || !run.object.status.phase.is_running() {
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
}

/// Runs CPU-bound work (the tarball's compression) on a blocking thread,
/// so that no runtime thread stalls behind it.
pub(super) async fn blocking<T: Send + 'static>(
    name: &str,
    what: &'static str,
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, PhaseError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| PhaseError::Panicked {
            name: name.to_string(),
            what,
            source: e,
        })?
        .map_err(|source| PhaseError::Io {
            name: name.to_string(),
            what,
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::object::{CONFIG_ANNOTATION, SOURCES_ANNOTATION};
    use serde_json::{Value, json};

    /// A pass's calls read the stored Backup whole (labels, the user's
    /// annotations, status), but not iar's bookkeeping annotations.
    #[test]
    fn a_pass_reads_the_backup_whole_without_iars_annotations() {
        let mut object = BackupObject::new("nightly", "iar", "u-1", json!({"ttl": "1h0m0s"}));
        object
            .metadata
            .labels
            .insert("team".into(), "payments".into());
        let annotations = &mut object.metadata.annotations;
        annotations.insert("note".into(), "kept".into());
        annotations.insert(CONFIG_ANNOTATION.into(), "{}".into());
        annotations.insert(SOURCES_ANNOTATION.into(), "[]".into());
        object.status.phase = BackupPhase::InProgress;
        object.status.start_timestamp = Some("2026-12-07T10:00:00Z".into());
        let run = Run {
            object,
            results: Results::default(),
        };
        let given = run.backup_ref(Phase::Backup);
        let seen: Value = serde_json::from_str(&given.object.expect("set")).unwrap();
        assert_eq!(seen["metadata"]["labels"], json!({"team": "payments"}));
        assert_eq!(seen["metadata"]["annotations"], json!({"note": "kept"}));
        assert_eq!(seen["metadata"]["uid"], "u-1");
        assert_eq!(seen["spec"], json!({"ttl": "1h0m0s"}));
        assert_eq!(seen["status"]["phase"], "InProgress");
        assert_eq!(seen["status"]["startTimestamp"], "2026-12-07T10:00:00Z");
        // The stored object keeps its annotations: `iar resume` reads them.
        assert!(
            run.object
                .metadata
                .annotations
                .contains_key(CONFIG_ANNOTATION)
        );
    }
}
