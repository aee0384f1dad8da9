//! The dispatcher: one step of a backup, decided by the phase the store
//! holds (not by anything this process remembers), handed to that phase's
//! reconciler. The decision ([`plan`]) is kept apart from the doing, so
//! that it can be tested alone.

use super::Step;
use super::errors::PhaseError;
use super::finalize::Finalize;
use super::load::{Loader, stored_object};
use super::record::Recorder;
use super::resume::Resume;
use super::waiting::Waiting;
use crate::backup::object::BackupPhase;

/// What a step does in a phase.
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

/// The phases a step may hand a backup to.
pub(super) struct Dispatcher<'a> {
    pub(super) loader: Loader<'a>,
    pub(super) recorder: Recorder<'a>,
    pub(super) resume: Resume<'a>,
    pub(super) waiting: Waiting<'a>,
    pub(super) finalize: Finalize<'a>,
}

impl Dispatcher<'_> {
    /// One step: a terminal backup is returned as it is, one being deleted
    /// is refused; any other is loaded and stepped by its phase. An error
    /// once the backup exists ends it Failed (a lost lease excepted) and
    /// is returned.
    pub(super) async fn step(&self, name: &str) -> Result<Step, PhaseError> {
        let object = stored_object(self.loader.store, name).await?;
        if object.status.phase.is_terminal() {
            return Ok(Step::Done(Box::new(object)));
        }
        if object.status.phase == BackupPhase::Deleting {
            return Err(PhaseError::Deleting(name.into()));
        }
        let mut run = self.loader.run(name, object).await?;
        let stepped = match plan(run.object.status.phase) {
            Plan::FailInterrupted => self.resume.step(&mut run).await,
            Plan::Poll => self.waiting.step(&mut run).await,
            Plan::Finalize => self.finalize.step(&mut run).await,
            Plan::Nothing => Ok(Step::Done(Box::new(run.object.clone()))),
        };
        match stepped {
            Ok(step) => Ok(step),
            Err(e) => Err(self.recorder.fail(&mut run, e).await),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every stored phase has one plan: the table the CLI and the
    /// controller share.
    #[test]
    fn each_phase_has_one_plan() {
        use BackupPhase::*;
        for (phase, expected) in [
            (New, Plan::FailInterrupted),
            (InProgress, Plan::FailInterrupted),
            (WaitingForPluginOperations, Plan::Poll),
            (WaitingForPluginOperationsPartiallyFailed, Plan::Poll),
            (Finalizing, Plan::Finalize),
            (FinalizingPartiallyFailed, Plan::Finalize),
            (Completed, Plan::Nothing),
            (PartiallyFailed, Plan::Nothing),
            (Failed, Plan::Nothing),
            (Deleting, Plan::Nothing),
        ] {
            assert_eq!(plan(phase), expected, "{phase}");
        }
    }

    /// Each stored phase goes to its phase: a missing backup is an error,
    /// an ended one is returned untouched, one being deleted is refused,
    /// an interrupted one fails, a waiting one polls.
    #[tokio::test]
    async fn a_step_goes_to_the_stored_phase() {
        use super::super::test_support::Parts;
        let parts = Parts::new();
        let d = parts.dispatcher();
        assert!(matches!(d.step("none").await, Err(PhaseError::NotFound(_))));

        parts.put_object("done", BackupPhase::Completed).await;
        let before = parts.store.backup_keys("done").await.unwrap();
        let Ok(Step::Done(object)) = d.step("done").await else {
            panic!("an ended backup is done")
        };
        assert_eq!(object.status.phase, BackupPhase::Completed);
        assert_eq!(parts.store.backup_keys("done").await.unwrap(), before);

        parts.put_object("deleting", BackupPhase::Deleting).await;
        assert!(matches!(
            d.step("deleting").await,
            Err(PhaseError::Deleting(_))
        ));

        parts.put_object("new", BackupPhase::New).await;
        assert!(matches!(d.step("new").await, Ok(Step::Done(_))));
        assert_eq!(parts.stored("new").await.status.phase, BackupPhase::Failed);

        // No operations stored: none pending, on to finalizing.
        parts
            .put_object("waiting", BackupPhase::WaitingForPluginOperations)
            .await;
        assert!(matches!(d.step("waiting").await, Ok(Step::Requeue(z)) if z.is_zero()));
        assert_eq!(
            parts.stored("waiting").await.status.phase,
            BackupPhase::Finalizing
        );
    }

    /// An error inside a phase ends the backup Failed with it, and is
    /// returned.
    #[tokio::test]
    async fn an_error_in_a_phase_fails_the_backup() {
        use super::super::test_support::Parts;
        let parts = Parts::new();
        parts.put_object("b", BackupPhase::Finalizing).await;
        // An operations file that does not parse: loading it fails.
        parts
            .store
            .put(
                "b",
                iar_core::store::BackupFile::ItemOperations,
                bytes::Bytes::from_static(b"not gzip"),
            )
            .await
            .unwrap();
        let err = parts.dispatcher().step("b").await.unwrap_err();
        let stored = parts.stored("b").await;
        assert_eq!(stored.status.phase, BackupPhase::Failed);
        assert_eq!(stored.status.failure_reason, err.to_string());
    }
}
