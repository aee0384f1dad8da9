//! What can stop a phase, typed: each variant keeps its cause as a
//! `#[source]`, so a caller can match it and a log can print the chain.

use iar_core::cluster::ClusterError;
use iar_core::item::ItemRef;
use iar_core::store::StoreError;
use iar_core::store::lease::LeaseError;

pub use super::blocks::PolicyError;
pub use super::resume::SourcesError;
pub use crate::backup::expiry::ExpiryError;

#[derive(Debug, thiserror::Error)]
pub enum PhaseError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("backup {0:?} not found in the store")]
    NotFound(String),
    #[error(
        "backup {name:?} already exists in {store}; choose another name, or delete it first (iar delete {name} --store {store})"
    )]
    Exists { name: String, store: String },
    #[error("backup {name:?}: {source}")]
    Invalid {
        name: String,
        #[source]
        source: Invalid,
    },
    #[error("backup {name:?}: reading items: {source}")]
    Items {
        name: String,
        #[source]
        source: ClusterError,
    },
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error("backup {name:?}: {what} panicked: {source}")]
    Panicked {
        name: String,
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    #[error("backup {name:?}: {what}: {source}")]
    Io {
        name: String,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("backup {name:?}: cannot resume: {source}")]
    Sources {
        name: String,
        #[source]
        source: SourcesError,
    },
    /// Unfreezes it owes could not be run (or claimed) before its
    /// deletion: the deletion stops, to be tried again, rather than take
    /// the ledger that says a pod is still frozen.
    #[error("backup {name:?}: before its deletion: {why} (rule: hook-ledger)")]
    UnfreezeOwed { name: String, why: String },
    /// Its volume snapshots could not be forgotten (a deletion then
    /// stops, to be tried again, rather than leave them in the repository).
    #[error("backup {name:?}: forgetting its volume snapshots: {why}")]
    VolumeData { name: String, why: String },
    #[error("volume repository maintenance: {0}")]
    Maintenance(String),
    #[error(
        "backup {0:?} is being deleted (phase Deleting); the next garbage collection (`iar gc`, or the controller's sweep) finishes it"
    )]
    Deleting(String),
    /// Its Backup resource was deleted before its first pass began (read
    /// afresh under the lease): nothing was written, and nothing runs.
    #[error("backup {0:?} was not started: its Backup resource was deleted first")]
    Withdrawn(String),
    /// An object a backup's plugins created could not be read or deleted
    /// (a deletion or cancel then stops, to be tried again: nothing is
    /// leaked quietly).
    #[error("backup {name:?}: {what} {object} (created by plugin {plugin}): {source}")]
    CreatedObject {
        name: String,
        what: &'static str,
        object: ItemRef,
        plugin: String,
        #[source]
        source: ClusterError,
    },
    /// A controller's backup whose plugins created objects in its cluster,
    /// deleted by a process that reaches none: refused before anything
    /// changes, rather than leave them behind as "already gone".
    #[error(
        "backup {name:?}: its plugins created {count} objects in the cluster (the first: {first}); this process reaches no cluster to delete them from: run it with --cluster where a kubeconfig reaches that cluster, or let the controller delete the backup (rule: created-in-cluster)"
    )]
    CreatedUnreachable {
        name: String,
        count: usize,
        first: ItemRef,
    },
}

impl PhaseError {
    pub(super) fn invalid(name: &str, source: impl Into<Invalid>) -> PhaseError {
        PhaseError::Invalid {
            name: name.to_string(),
            source: source.into(),
        }
    }
}

/// Why a backup cannot run (or be judged) as it is.
#[derive(Debug, thiserror::Error)]
pub enum Invalid {
    /// Its spec's filters or operation timeout do not parse; the message
    /// names the field (the parsers in `iar_core::select` and
    /// `backup::spec` say it as text).
    #[error("{0}")]
    Spec(String),
    #[error(transparent)]
    Expiry(#[from] ExpiryError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("its contents tarball is missing")]
    ContentsMissing,
}

/// One backup a sweep could not delete; the sweep goes on with the others.
#[derive(Debug, thiserror::Error)]
#[error("deleting expired backup {name:?}: {source}")]
pub struct GcFailure {
    pub name: String,
    #[source]
    pub source: PhaseError,
}
