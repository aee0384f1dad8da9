//! Backups: the Velero objects iar persists, the spec's filters, and the
//! pass of item actions over a set of items.

pub mod object;
pub mod pass;
pub mod spec;

pub use object::{BackupObject, BackupPhase, Results};
pub use spec::BackupFilter;
