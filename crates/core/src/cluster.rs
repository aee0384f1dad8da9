//! Read-only cluster lookups offered to plugins (`cluster-get`), and which
//! resources an operator lets a plugin read.

use crate::catalog::{Catalog, GroupResource};
use crate::item::{Item, ItemRef};
use crate::manifests;
use crate::select::BackupFilter;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub mod catalog;
mod listing;
mod manifest;
pub mod mutate;
pub mod overlay;
pub mod writes;

pub use listing::SETTLED;
pub use manifest::{MISS_RESCAN, ManifestCluster};

/// Why a cluster could not answer. What a plugin sees of it is its text;
/// the host keeps the cause.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A manifest file or directory could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A manifest did not parse.
    #[error(transparent)]
    Manifest(#[from] manifests::ManifestError),
    /// An object that lacks what an item needs (a kind the catalog knows,
    /// a name).
    #[error("{0}")]
    NotAnItem(#[from] crate::item::ItemError),
    /// An identifier that breaks Kubernetes' naming rules; never sent.
    #[error("reading {id}: {part} (rule: {rule})", rule = crate::identifier::RULE)]
    InvalidIdentifier {
        id: ItemRef,
        part: Box<crate::identifier::InvalidPart>,
    },
    /// A resource that exists but cannot be read with `get`.
    #[error("{0} cannot be read with get")]
    NotGettable(GroupResource),
    /// No answer within the time the caller had.
    #[error("reading {id}: no answer from the API server within {wait:?}")]
    TimedOut {
        id: ItemRef,
        wait: std::time::Duration,
    },
    /// The API server refused or failed the request.
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// This cluster cannot list its objects.
    #[error("this cluster cannot list its objects")]
    CannotList,
    /// A list that would hold more objects than a plugin may be given.
    #[error("listing {what}: more than {limit} objects match; narrow the label selector")]
    TooMany { what: String, limit: usize },
    /// A thread panicked while holding the manifest cache.
    #[error("the manifest cache is poisoned (a lookup panicked)")]
    Poisoned,
    /// Host code panicked answering (a cluster reader's bug): an error for
    /// the one lookup, not the end of the backup.
    #[error("host code panicked: {0} (rule: host-panic)")]
    Panicked(String),
    /// A cluster's own refusal, as text (test and authoring clusters).
    #[error("{0}")]
    Refused(String),
    /// This cluster takes no writes (no cluster at all, a plain directory
    /// of manifests without an overlay).
    #[error(
        "this cluster cannot be written to (rule: {})",
        writes::rule::READ_ONLY
    )]
    ReadOnly,
    /// A write over a version that is no longer the object's (409): read it
    /// again and retry.
    #[error("{0}")]
    Conflict(String),
    /// A write to an object that is not there (404).
    #[error("{0}")]
    NotFound(String),
    /// The cluster refused the object written (400, 422).
    #[error("{0}")]
    Invalid(String),
    /// There is no API server to ask (a cluster of manifests, none).
    #[error("there is no API server: the cluster is manifests (rule: no-api-server)")]
    NoApiServer,
}

impl ClusterError {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ClusterError + '_ {
        move |source| ClusterError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The cluster a backup reads: `cluster-get` for plugins, the items to back
/// up, and post-operation items when finalizing. A directory of manifests
/// ([`ManifestCluster`]) or a live API server (`k8s::live::LiveCluster`).
#[async_trait::async_trait]
pub trait ClusterReader: ClusterWriter + Send + Sync {
    /// `Ok(None)` when the object does not exist. Called from blocking
    /// threads (plugin calls); async code calls [`ClusterReader::get_async`].
    fn get(&self, id: &ItemRef) -> Result<Option<Value>, ClusterError>;

    /// The object as compact JSON text, what `cluster-get` hands a plugin.
    /// A cluster that keeps objects' text answers without serializing.
    fn get_json(&self, id: &ItemRef) -> Result<Option<Arc<str>>, ClusterError> {
        Ok(self.get(id)?.map(|v| crate::item::json_text(&v).into()))
    }

    /// [`ClusterReader::get_json`] that gives up after `budget` (what is
    /// left of a plugin call's wall-clock ceiling). A cluster that answers
    /// from memory ignores it; one that waits on the network overrides it.
    fn get_json_within(
        &self,
        id: &ItemRef,
        budget: std::time::Duration,
    ) -> Result<Option<Arc<str>>, ClusterError> {
        let _ = budget;
        self.get_json(id)
    }

    /// The resources this cluster serves, each at its group's preferred
    /// version (contract 1.4.0's `cluster-catalog`), within `budget`. A
    /// cluster of manifests answers iar's built-in table; an API server,
    /// its discovery.
    fn catalog_within(
        &self,
        budget: std::time::Duration,
    ) -> Result<Arc<Vec<catalog::ApiResourceRow>>, ClusterError> {
        let _ = budget;
        static BUILTIN: std::sync::OnceLock<Arc<Vec<catalog::ApiResourceRow>>> =
            std::sync::OnceLock::new();
        Ok(BUILTIN
            .get_or_init(|| Arc::new(catalog::builtin_rows()))
            .clone())
    }

    /// The API server's version, within `budget`; a cluster without one
    /// answers [`ClusterError::NoApiServer`].
    fn server_version_within(
        &self,
        budget: std::time::Duration,
    ) -> Result<catalog::ServerVersion, ClusterError> {
        let _ = budget;
        Err(ClusterError::NoApiServer)
    }

    /// [`ClusterReader::get`] for async callers: a cluster that answers
    /// over the network overrides it, so that no runtime thread blocks.
    async fn get_async(&self, id: &ItemRef) -> Result<Option<Value>, ClusterError> {
        self.get(id)
    }

    /// Every object the backup's filter selects. A cluster that cannot
    /// list says so.
    async fn list(&self, filter: &BackupFilter) -> Result<Vec<Item>, ClusterError> {
        let _ = filter;
        Err(ClusterError::CannotList)
    }

    /// The objects of the manifests `sources` that the filter selects, when
    /// this cluster is those very manifests: listed through its own parse
    /// cache, so that the plugins' lookups and finalize in the same backup
    /// find every file already parsed instead of parsing it a second time.
    /// `None`: the caller reads the manifests itself.
    async fn list_sources(
        &self,
        sources: &[PathBuf],
        filter: &BackupFilter,
    ) -> Option<Result<Vec<Item>, ClusterError>> {
        let _ = (sources, filter);
        None
    }

    /// The object as an [`Item`], for backing it up; an object without the
    /// identity an item needs is an error.
    fn get_item(&self, id: &ItemRef) -> Result<Option<Item>, ClusterError> {
        self.get(id)?.map(to_item).transpose()
    }

    /// The objects of `gr` in `namespace` ("" for all) whose labels match
    /// `selector`, as JSON text, sorted by namespace and name; more than
    /// `limit` is [`ClusterError::TooMany`]. For a plugin's `cluster-list`.
    fn list_within(
        &self,
        gr: &GroupResource,
        namespace: &str,
        selector: &crate::select::labels::LabelSelector,
        limit: usize,
        budget: std::time::Duration,
    ) -> Result<Vec<Arc<str>>, ClusterError> {
        let _ = (gr, namespace, selector, limit, budget);
        Err(ClusterError::CannotList)
    }

    /// [`ClusterWriter::delete_within`] for async callers (deleting what a
    /// backup's plugins created, when the backup is deleted or canceled).
    async fn delete_async(&self, id: &ItemRef, uid: &str) -> Result<bool, ClusterError> {
        self.delete_within(id, uid, std::time::Duration::from_secs(30))
    }

    /// [`ClusterReader::get_item`] for async callers (finalize).
    async fn get_item_async(&self, id: &ItemRef) -> Result<Option<Item>, ClusterError> {
        self.get_async(id).await?.map(to_item).transpose()
    }
}

/// What a create found: the object it created, or one of the same name that
/// was already there (the caller decides whether that one is the writer's
/// own, created by an earlier try).
#[derive(Clone, Debug, PartialEq)]
pub enum Created {
    New(Value),
    Existing(Value),
}

/// The writes a plugin's `cluster-write` makes, checked by
/// [`writes`] before they get here. A cluster that cannot be written
/// refuses them (the defaults).
pub trait ClusterWriter: Send + Sync {
    /// Whether this is a live API server's cluster (not manifests and
    /// their overlay): what a controller's backup created is only there.
    fn is_live(&self) -> bool {
        false
    }

    /// Creates `object` as `id`; an object of that name already there is
    /// [`Created::Existing`], not an error. Gives up after `budget`.
    fn create_within(
        &self,
        id: &ItemRef,
        object: Value,
        budget: std::time::Duration,
    ) -> Result<Created, ClusterError> {
        let _ = (id, object, budget);
        Err(ClusterError::ReadOnly)
    }

    /// Replaces `id` with `object`, whose `metadata.resourceVersion` is
    /// the one the caller read (a restore's `existingResourcePolicy:
    /// update`): a change made in between is a conflict, not overwritten.
    /// Returns the object as written.
    fn replace_within(
        &self,
        id: &ItemRef,
        object: Value,
        budget: std::time::Duration,
    ) -> Result<Value, ClusterError> {
        let _ = (id, object, budget);
        Err(ClusterError::ReadOnly)
    }

    /// Deletes `id` if its uid is still `uid`; `Ok(false)` when it is gone
    /// (or was replaced by another object of the same name, which stays).
    fn delete_within(
        &self,
        id: &ItemRef,
        uid: &str,
        budget: std::time::Duration,
    ) -> Result<bool, ClusterError> {
        let _ = (id, uid, budget);
        Err(ClusterError::ReadOnly)
    }
}

/// What every cluster answers a `cluster-list` with: the objects found,
/// sorted by namespace and name, as their text; more than `limit` is an
/// error, never a cut list.
pub fn list_answer<I: std::borrow::Borrow<Item>>(
    gr: &GroupResource,
    mut found: Vec<I>,
    limit: usize,
) -> Result<Vec<Arc<str>>, ClusterError> {
    if found.len() > limit {
        return Err(ClusterError::TooMany {
            what: gr.to_string(),
            limit,
        });
    }
    found.sort_by(|a, b| {
        let (a, b) = (a.borrow(), b.borrow());
        (&a.id.namespace, &a.id.name).cmp(&(&b.id.namespace, &b.id.name))
    });
    Ok(found
        .iter()
        .map(|item| item.borrow().json().clone())
        .collect())
}

fn to_item(value: Value) -> Result<Item, ClusterError> {
    Ok(Item::from_value(value, Catalog::builtin())?)
}

/// No cluster at all: every lookup finds nothing, and nothing is written.
pub struct NoCluster;

impl ClusterWriter for NoCluster {}

#[async_trait::async_trait]
impl ClusterReader for NoCluster {
    fn get(&self, _id: &ItemRef) -> Result<Option<Value>, ClusterError> {
        Ok(None)
    }

    async fn list(&self, _filter: &BackupFilter) -> Result<Vec<Item>, ClusterError> {
        Ok(Vec::new())
    }

    fn list_within(
        &self,
        _gr: &GroupResource,
        _namespace: &str,
        _selector: &crate::select::labels::LabelSelector,
        _limit: usize,
        _budget: std::time::Duration,
    ) -> Result<Vec<Arc<str>>, ClusterError> {
        Ok(Vec::new())
    }
}

/// Which resources a plugin may read through `cluster-get`, and which items
/// it is handed (items are reads: see `Plugin::may_read`), as globs over
/// `resource.group` ("volumesnapshots.snapshot.storage.k8s.io", "pods").
///
/// Secrets (core `secrets`) are never matched by a glob: `*`, `secret*` or
/// `*s` do not grant them, only the exact entry `secrets` does, since they
/// hold credentials.
#[derive(Clone, Debug)]
pub struct ReadGrants {
    allow: Vec<glob::Pattern>,
}

/// The one entry that grants Secrets.
pub const SECRETS_GRANT: &str = "secrets";

impl Default for ReadGrants {
    /// Everything but Secrets (`*`): a plugin that needs Secrets must be
    /// granted them by name.
    fn default() -> Self {
        ReadGrants {
            allow: vec![glob::Pattern::new("*").expect("valid glob")],
        }
    }
}

/// A read or write grant that cannot be one.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    #[error("invalid read grant {entry:?}: {source}")]
    ReadGlob {
        entry: String,
        #[source]
        source: glob::PatternError,
    },
    #[error(
        "allowWrite entry {entry:?}: a write is granted by the resource's exact name (resource.group), not a glob"
    )]
    WriteGlob { entry: String },
    #[error("allowWrite entry {entry:?} is not a resource name (resource.group)")]
    WriteNotAResource {
        entry: String,
        #[source]
        source: crate::names::NameError,
    },
    #[error("allowMutate entry {entry:?}: {reason}")]
    Mutate { entry: String, reason: String },
}

impl ReadGrants {
    /// Exactly these resources (globs; Secrets only by the entry `secrets`).
    pub fn only<S: AsRef<str>>(patterns: &[S]) -> Result<Self, GrantError> {
        let allow = patterns
            .iter()
            .map(|p| {
                glob::Pattern::new(p.as_ref()).map_err(|source| GrantError::ReadGlob {
                    entry: p.as_ref().to_string(),
                    source,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(ReadGrants { allow })
    }

    /// Nothing may be read.
    pub fn none() -> Self {
        ReadGrants { allow: Vec::new() }
    }

    /// The entries as written (`*` for the default).
    pub fn patterns(&self) -> impl Iterator<Item = &str> {
        self.allow.iter().map(glob::Pattern::as_str)
    }

    pub fn allows(&self, gr: &GroupResource) -> bool {
        if is_secrets(gr) {
            return self.allow.iter().any(|p| p.as_str() == SECRETS_GRANT);
        }
        // `*` (the default) without formatting the name: every item of a
        // backup is checked against every plugin's grants.
        if self.allow.iter().any(|p| p.as_str() == "*") {
            return true;
        }
        let name = gr.to_string();
        self.allow.iter().any(|p| p.matches(&name))
    }
}

/// Core Secrets, the one resource granted only by name.
pub fn is_secrets(gr: &GroupResource) -> bool {
    gr.group.is_empty() && gr.resource == SECRETS_GRANT
}

#[cfg(test)]
mod tests;
