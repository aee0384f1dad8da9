//! The phase machine: New → InProgress → WaitingForPluginOperations[PartiallyFailed]
//! → Finalizing[PartiallyFailed] → Completed / PartiallyFailed / Failed.
//!
//! Every phase change is persisted before the next phase starts, so a killed
//! process leaves a backup that [`PhaseMachine::resume`] can continue: one found
//! InProgress is marked Failed (its items were never all written), one found
//! waiting or finalizing continues from its persisted operations, with each
//! operation's timeout still counted from its original creation.
//!
//! As Velero's controllers do, each phase is its own type holding only what
//! it uses, built for the call from the machine's parts: `FirstPass`
//! (`first_pass.rs`), `Waiting` (`waiting.rs`), `Finalize` (`finalize.rs`),
//! `Resume` (`resume.rs`: a backup found New or InProgress) and `Gc`
//! (`gc.rs`), each with its unit tests beside it. `Dispatcher`
//! (`dispatch.rs`) reads the stored phase and picks one; `Leases`
//! (`leases.rs`) is all of the lease handling; [`PhaseMachine`]
//! (`machine.rs`) is the facade callers hold.
//! Time is read from one [`Clock`](iar_core::clock::Clock), so the tests
//! of each phase step a clock instead of sleeping.

use crate::backup::object::BackupObject;
use iar_plugin::plugin::Plugin;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod blocks;
mod cancel;
mod contents;
mod created;
mod dispatch;
mod errors;
mod fenced_cluster;
mod finalize;
mod first_pass;
pub mod gc;
mod item_pass;
mod journal;
mod leases;
pub use leases::TakeoverFence;
mod live_blocks;
mod load;
mod machine;
pub mod maintenance;
mod plugin_set;
mod poller;
mod record;
mod resume;
mod settings;
#[cfg(test)]
mod test_support;
mod waiting;

pub use dispatch::{Plan, plan};
pub use errors::{ExpiryError, GcFailure, Invalid, PhaseError, PolicyError, SourcesError};
pub use first_pass::StartClaim;
pub use machine::PhaseMachine;
pub use plugin_set::recorded_plugins;
pub use resume::recorded_sources;
pub use settings::Settings;

/// What a caller wants to back up.
#[derive(Clone, Debug)]
pub struct BackupRequest {
    pub name: String,
    pub namespace: String,
    /// A Velero Backup `spec` (filters, itemOperationTimeout).
    pub spec: serde_json::Value,
    /// Manifest files or directories: the items, and the cluster.
    pub sources: Vec<PathBuf>,
    /// Recorded on the Backup object (iar records the plugin settings it
    /// was run with, for `resume`).
    pub annotations: BTreeMap<String, String>,
    /// The Backup resource's labels, kept on the Backup object (what a
    /// plugin reading the whole Backup sees, as in Velero).
    pub labels: BTreeMap<String, String>,
}

/// Receives every line of every backup's log as it is written (a progress
/// display, for example).
pub type Observer = Box<dyn Fn(&str, &str) + Send + Sync>;

/// Where a backup's plugins come from: a fixed list (the CLI), or the
/// current set of a registry that reloads them (the cluster). Each backup
/// pins the set it started with until it ends.
pub type PluginSource = Arc<dyn Fn() -> Vec<Plugin> + Send + Sync>;

/// Told of every phase change once it is persisted (the controller in a
/// cluster copies it into the Backup resource's status). Must not block.
pub type StatusSink = Arc<dyn Fn(&BackupObject) + Send + Sync>;

/// Whether a running backup has been given up by whoever asked for it (the
/// cluster controller: its Backup resource is deleted or gone), asked once
/// a sync period while its blocks wait for volume backups.
pub type CancelProbe =
    Arc<dyn Fn(String) -> futures::future::BoxFuture<'static, bool> + Send + Sync>;

/// What one [`PhaseMachine::step`] leaves to do.
#[derive(Debug)]
pub enum Step {
    /// Call `step` again after this long (operations still running).
    Requeue(Duration),
    /// The backup is in a terminal phase.
    Done(Box<BackupObject>),
}
