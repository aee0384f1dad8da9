//! Restores by iar: a backup's objects back into a cluster, a live API
//! server or a directory of manifests, in Velero's order and with
//! Velero's resets, the restore actions of iar's plugins run in the
//! sandbox. `iar restore` drives it; docs/restores.md says what it does
//! and where it differs from Velero's restore.

pub mod archive;
pub mod builtin;
pub mod csi;
mod engine;
pub mod hooks;
pub mod order;
pub mod pod_volumes;
pub mod prepare;
pub mod spec;
pub mod stored;

pub use engine::{Context, Outcome, STOPPED, run};
pub use iar_plugin::plugin::RestoreRef;

/// A uid for a restore that is not a resource (the command line's).
pub fn new_uid(name: &str, at: std::time::SystemTime) -> String {
    iar_core::names::uid_for(name, at)
}
