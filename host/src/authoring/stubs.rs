//! Clusters for testing plugins: [`StrictCluster`] answers only from
//! declared fixtures and records every read, so a test says exactly what a
//! plugin may look at; [`RecordingCluster`] wraps a real one and keeps what
//! it answered, for `iar run --record`.

use super::testfile::{ObjectRef, RecordedGet, Recording};
use crate::catalog::Catalog;
use crate::cluster::{ClusterError, ClusterReader};
use crate::item::{Item, ItemRef};
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
}

/// Answers `cluster-get` from fixtures only. A read of an undeclared object
/// answers "not found" (so the plugin goes on and the case reports every
/// miss at once) and is recorded as a miss, which fails the case.
#[derive(Default)]
pub struct StrictCluster(Mutex<Strict>);

impl StrictCluster {
    fn lock(&self) -> std::sync::MutexGuard<'_, Strict> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds or replaces an object; its identity is read as an item's is.
    pub fn set(&self, object: Value) -> Result<ItemRef, String> {
        let item = Item::from_value(object, Catalog::builtin())
            .map_err(|e| format!("fixture is not a Kubernetes object: {e}"))?;
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
}

impl ClusterReader for StrictCluster {
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

impl ClusterReader for RecordingCluster {
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
