//! Selecting objects: Kubernetes label selectors, a plugin's applies-to
//! and a backup's filters. One implementation of includes and excludes
//! serves both, as in Velero.

pub mod applies_to;
pub mod backup_filter;
mod label_object;
pub mod labels;
pub mod spec_keys;

pub use applies_to::{CompiledSelector, ResourceSelector, SelectorError};
pub use backup_filter::{BackupFilter, EXCLUDE_LABEL};
pub use labels::{LabelSelector, LabelSelectorError};
