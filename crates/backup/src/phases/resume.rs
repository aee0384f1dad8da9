//! A backup found New or InProgress by a step: the process that ran its
//! first pass ended. One whose items were written and whose volume
//! backups outlived that process waits for them again; any other cannot
//! be continued and ends Failed. Also what `iar resume` checks first: the
//! item sources the backup was started with.

use super::Step;
use super::blocks::Blocks;
use super::errors::PhaseError;
use super::record::{Recorder, Run};
use crate::backup::object::{BackupObject, BackupPhase, SOURCES_ANNOTATION};
use std::path::PathBuf;
use std::time::Duration;

/// Why a backup's recorded item sources cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SourcesError {
    #[error("it has no {} annotation", SOURCES_ANNOTATION)]
    NoAnnotation,
    #[error("its {} annotation is not a list of paths: {}", SOURCES_ANNOTATION, .0)]
    NotPaths(#[source] serde_json::Error),
    #[error("its {} annotation is empty", SOURCES_ANNOTATION)]
    Empty,
    #[error(
        "the item sources it was started with are missing ({}); refusing to run it against an empty cluster",
        .0.join(", ")
    )]
    Missing(Vec<String>),
}

/// The manifest files or directories a backup was started with, as recorded
/// on its object, each still present. `resume` needs them as its cluster:
/// run against missing ones, finalize would find nothing and the backup
/// would end as if the cluster were empty, so their absence is an error.
pub fn recorded_sources(object: &BackupObject) -> Result<Vec<PathBuf>, PhaseError> {
    let refuse = |source: SourcesError| PhaseError::Sources {
        name: object.metadata.name.clone(),
        source,
    };
    let recorded = object
        .metadata
        .annotations
        .get(SOURCES_ANNOTATION)
        .ok_or_else(|| refuse(SourcesError::NoAnnotation))?;
    let sources: Vec<PathBuf> =
        serde_json::from_str(recorded).map_err(|e| refuse(SourcesError::NotPaths(e)))?;
    if sources.is_empty() {
        return Err(refuse(SourcesError::Empty));
    }
    let missing: Vec<String> = sources
        .iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if !missing.is_empty() {
        return Err(refuse(SourcesError::Missing(missing)));
    }
    Ok(sources)
}

/// The reconciler of a backup whose first pass was interrupted.
pub(super) struct Resume<'a> {
    pub(super) blocks: Blocks<'a>,
    pub(super) recorder: Recorder<'a>,
}

impl Resume<'_> {
    pub(super) async fn step(&self, run: &mut Run) -> Result<Step, PhaseError> {
        if self.blocks.blocks_resumable(run).await? {
            // Its items were written and its blocks' volume backups
            // outlived the process (node agents): wait for them again,
            // run the post hooks owed, go on.
            self.blocks.resume_blocks(run).await?;
            let next = if run.object.status.backup_item_operations_attempted == 0 {
                BackupPhase::finalizing(run.partially_failed())
            } else {
                BackupPhase::waiting(run.partially_failed())
            };
            self.recorder.set_phase(run, next).await?;
            return Ok(Step::Requeue(Duration::ZERO));
        }
        // Its items were never all written: it cannot be continued. What
        // its blocks left unfinished is failed and said.
        self.blocks.interrupted_blocks(run).await?;
        run.object.status.failure_reason = format!(
            "found in phase {} by a process taking it over: the one running its first pass ended, or lost the backup's lease, before its items were written",
            run.object.status.phase
        );
        self.recorder.set_phase(run, BackupPhase::Failed).await?;
        Ok(Step::Done(Box::new(run.object.clone())))
    }
}

#[cfg(test)]
mod tests;
