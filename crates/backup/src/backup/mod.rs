//! Backups: the Velero objects iar persists, the spec's scalar fields, and the
//! pass of item actions over a set of items.

pub mod block_work;
pub mod blocks;
pub mod expiry;
pub mod hooks;
pub mod object;
pub mod pass;
pub mod schedule;
pub mod spec;
pub mod volume_policy;
pub mod volumes;

pub use object::{BackupObject, BackupPhase, Results};
