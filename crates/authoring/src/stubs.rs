//! Clusters for testing plugins: [`StrictCluster`] answers only from
//! declared fixtures and records every read, so a test says exactly what a
//! plugin may look at; [`RecordingCluster`] wraps a real one and keeps what
//! it answered, for `iar run --record`.

use super::testfile::{ObjectRef, RecordedGet, Recording};
use iar_core::catalog::Catalog;
use iar_core::cluster::{ClusterError, ClusterReader, ClusterWriter, Created};
use iar_core::item::{Item, ItemRef};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Strict {
    /// `None`: declared absent.
    objects: BTreeMap<ItemRef, Option<Value>>,
    reads: BTreeSet<ItemRef>,
    /// Reads of objects that were not declared, in call order, once each.
    misses: Vec<ItemRef>,
    /// Objects the plugin created and deleted, in call order.
    created: Vec<ItemRef>,
    deleted: Vec<ItemRef>,
    next_uid: u64,
}

/// Answers `cluster-get` from fixtures only. A read of an undeclared object
/// answers "not found" (so the plugin goes on and the case reports every
/// miss at once) and is recorded as a miss, which fails the case.
#[derive(Default)]
pub struct StrictCluster(Mutex<Strict>);

/// A fixture that is not a Kubernetes object an item can be made of.
#[derive(Debug, thiserror::Error)]
#[error("fixture is not a Kubernetes object: {0}")]
pub struct NotAnObject(#[source] pub iar_core::item::ItemError);

impl StrictCluster {
    fn lock(&self) -> std::sync::MutexGuard<'_, Strict> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds or replaces an object; its identity is read as an item's is.
    pub fn set(&self, object: Value) -> Result<ItemRef, NotAnObject> {
        let item = Item::from_value(object, Catalog::builtin()).map_err(NotAnObject)?;
        let id = item.id.clone();
        self.lock()
            .objects
            .insert(id.clone(), Some(item.into_value()));
        Ok(id)
    }

    /// Declares an object absent (or removes one).
    pub fn remove(&self, id: ItemRef) {
        self.lock().objects.insert(id, None);
    }

    /// The object as the fixtures hold it now, without counting a read.
    pub fn peek(&self, id: &ItemRef) -> Option<Value> {
        self.lock().objects.get(id).cloned().flatten()
    }

    pub fn misses(&self) -> Vec<ItemRef> {
        self.lock().misses.clone()
    }

    pub fn was_read(&self, id: &ItemRef) -> bool {
        self.lock().reads.contains(id)
    }

    /// What the plugin created, in call order (a create that found its
    /// own object again is not counted twice).
    pub fn created(&self) -> Vec<ItemRef> {
        self.lock().created.clone()
    }

    /// What the plugin deleted, in call order.
    pub fn deleted(&self) -> Vec<ItemRef> {
        self.lock().deleted.clone()
    }
}

/// Writes land in the fixtures, as an API server would keep them: a
/// create is then read back by the plugin's next `cluster-get`.
impl ClusterWriter for StrictCluster {
    fn create_within(
        &self,
        id: &ItemRef,
        mut object: Value,
        _budget: std::time::Duration,
    ) -> Result<Created, ClusterError> {
        let mut s = self.lock();
        if let Some(Some(existing)) = s.objects.get(id) {
            return Ok(Created::Existing(existing.clone()));
        }
        s.next_uid += 1;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert(
                "uid".into(),
                Value::String(format!("created-{}", s.next_uid)),
            );
        }
        s.objects.insert(id.clone(), Some(object.clone()));
        s.created.push(id.clone());
        Ok(Created::New(object))
    }

    fn delete_within(
        &self,
        id: &ItemRef,
        uid: &str,
        _budget: std::time::Duration,
    ) -> Result<bool, ClusterError> {
        let mut s = self.lock();
        let matches = s
            .objects
            .get(id)
            .and_then(Option::as_ref)
            .is_some_and(|o| iar_core::cluster::writes::uid_of(o) == uid);
        if matches {
            s.objects.insert(id.clone(), None);
            s.deleted.push(id.clone());
        }
        Ok(matches)
    }
}

impl ClusterReader for StrictCluster {
    /// The declared objects that match; a list reads no undeclared object,
    /// so it records no miss.
    fn list_within(
        &self,
        gr: &iar_core::catalog::GroupResource,
        namespace: &str,
        selector: &iar_core::select::labels::LabelSelector,
        limit: usize,
        _budget: std::time::Duration,
    ) -> Result<Vec<Arc<str>>, ClusterError> {
        let s = self.lock();
        let found: Vec<Item> = s
            .objects
            .iter()
            .filter(|(id, _)| {
                id.group == gr.group
                    && id.resource == gr.resource
                    && (namespace.is_empty() || id.namespace == namespace)
            })
            .filter_map(|(id, object)| Some(Item::with_id(id.clone(), object.clone()?)))
            .filter(|item| selector.matches_with(|| item.labels()))
            .collect();
        iar_core::cluster::list_answer(gr, found, limit)
    }

    fn get(&self, id: &ItemRef) -> Result<Option<Value>, ClusterError> {
        let mut s = self.lock();
        s.reads.insert(id.clone());
        match s.objects.get(id) {
            Some(answer) => Ok(answer.clone()),
            None => {
                if !s.misses.contains(id) {
                    s.misses.push(id.clone());
                }
                Ok(None)
            }
        }
    }
}

/// Passes reads to another cluster and keeps each answer (the first answer
/// per object), in call order.
pub struct RecordingCluster {
    inner: Arc<dyn ClusterReader>,
    seen: Mutex<Vec<RecordedGet>>,
}

impl RecordingCluster {
    pub fn new(inner: Arc<dyn ClusterReader>) -> Self {
        RecordingCluster {
            inner,
            seen: Mutex::new(Vec::new()),
        }
    }

    /// What was read, as a replayable file.
    pub fn recording(&self) -> Recording {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        Recording {
            gets: seen
                .iter()
                .map(|g| RecordedGet {
                    id: g.id.clone(),
                    object: g.object.clone(),
                })
                .collect(),
        }
    }
}

/// Writes go to the cluster recorded from (`iar run --record` against a
/// live one); they are not part of the recording.
impl ClusterWriter for RecordingCluster {
    fn create_within(
        &self,
        id: &ItemRef,
        object: Value,
        budget: std::time::Duration,
    ) -> Result<Created, ClusterError> {
        self.inner.create_within(id, object, budget)
    }

    fn delete_within(
        &self,
        id: &ItemRef,
        uid: &str,
        budget: std::time::Duration,
    ) -> Result<bool, ClusterError> {
        self.inner.delete_within(id, uid, budget)
    }
}

impl ClusterReader for RecordingCluster {
    fn catalog_within(
        &self,
        budget: std::time::Duration,
    ) -> Result<Arc<Vec<iar_core::cluster::catalog::ApiResourceRow>>, ClusterError> {
        self.inner.catalog_within(budget)
    }

    fn server_version_within(
        &self,
        budget: std::time::Duration,
    ) -> Result<iar_core::cluster::catalog::ServerVersion, ClusterError> {
        self.inner.server_version_within(budget)
    }

    /// Passed on, not recorded: a replayed case declares the objects a
    /// list finds as fixtures.
    fn list_within(
        &self,
        gr: &iar_core::catalog::GroupResource,
        namespace: &str,
        selector: &iar_core::select::labels::LabelSelector,
        limit: usize,
        budget: std::time::Duration,
    ) -> Result<Vec<Arc<str>>, ClusterError> {
        self.inner
            .list_within(gr, namespace, selector, limit, budget)
    }

    fn get(&self, id: &ItemRef) -> Result<Option<Value>, ClusterError> {
        let answer = self.inner.get(id)?;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let key = ObjectRef::from(id);
        if !seen.iter().any(|g| g.id == key) {
            seen.push(RecordedGet {
                id: key,
                object: answer.clone(),
            });
        }
        Ok(answer)
    }
}
