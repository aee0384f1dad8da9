//! A typed view of the Kubernetes object a plugin is shown, and of the
//! backup it belongs to.

use crate::bindings::iar::plugin::types;
use serde_json::{Map, Value};
use std::fmt;

/// Names one Kubernetes object: group ("" for core), plural resource,
/// namespace ("" for cluster-scoped), name.
pub use types::ResourceIdentifier as ResourceId;

impl ResourceId {
    /// A namespaced object: `ResourceId::namespaced("", "persistentvolumeclaims", "ns", "data")`.
    pub fn namespaced(group: &str, resource: &str, namespace: &str, name: &str) -> Self {
        ResourceId {
            group: group.to_string(),
            resource: resource.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// A cluster-scoped object: `ResourceId::cluster("", "persistentvolumes", "pv-1")`.
    pub fn cluster(group: &str, resource: &str, name: &str) -> Self {
        Self::namespaced(group, resource, "", name)
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gr = if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        };
        if self.namespace.is_empty() {
            write!(f, "{gr} {}", self.name)
        } else {
            write!(f, "{gr} {}/{}", self.namespace, self.name)
        }
    }
}

/// Which pass of a backup a call belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The first pass; operations may be started.
    Backup,
    /// After all operations ended; starting an operation is refused.
    Finalize,
}

/// The backup a call belongs to.
#[derive(Clone, Debug)]
pub struct Backup {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// The Backup object's `spec`.
    pub spec: Value,
    pub phase: Phase,
}

impl From<types::Backup> for Backup {
    fn from(b: types::Backup) -> Self {
        Backup {
            name: b.name,
            namespace: b.namespace,
            uid: b.uid,
            spec: serde_json::from_str(&b.spec).unwrap_or(Value::Null),
            phase: match b.phase {
                types::Phase::Backup => Phase::Backup,
                types::Phase::Finalize => Phase::Finalize,
            },
        }
    }
}

/// One Kubernetes object. Accessors cover what most actions need; the
/// whole object is at [`Item::json`] / [`Item::json_mut`].
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    value: Value,
}

impl Item {
    /// Wraps a JSON object. Fails when `value` is not an object.
    pub fn from_value(value: Value) -> Result<Self, String> {
        if value.is_object() {
            Ok(Item { value })
        } else {
            Err("an item must be a JSON object".to_string())
        }
    }

    pub(crate) fn parse(json: &str) -> Result<Self, String> {
        let value = serde_json::from_str(json).map_err(|e| format!("item is not JSON: {e}"))?;
        Self::from_value(value)
    }

    fn str_at(&self, path: &[&str]) -> &str {
        let mut v = &self.value;
        for key in path {
            match v.get(key) {
                Some(next) => v = next,
                None => return "",
            }
        }
        v.as_str().unwrap_or("")
    }

    /// `apiVersion`, for example `"v1"` or `"apps/v1"`.
    pub fn api_version(&self) -> &str {
        self.str_at(&["apiVersion"])
    }

    /// The API group: `""` for core, `"apps"` for `apps/v1`.
    pub fn group(&self) -> &str {
        self.api_version()
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or("")
    }

    /// `kind`, for example `"Pod"`.
    pub fn kind(&self) -> &str {
        self.str_at(&["kind"])
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.str_at(&["metadata", "name"])
    }

    /// `metadata.namespace`; `""` for cluster-scoped objects.
    pub fn namespace(&self) -> &str {
        self.str_at(&["metadata", "namespace"])
    }

    /// `metadata`, or an empty map when absent.
    pub fn metadata(&self) -> Map<String, Value> {
        self.value
            .get("metadata")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    }

    fn string_map(&self, key: &str) -> Vec<(String, String)> {
        self.value
            .pointer(&format!("/metadata/{key}"))
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `metadata.labels` as pairs, in key order.
    pub fn labels(&self) -> Vec<(String, String)> {
        self.string_map("labels")
    }

    /// `metadata.annotations` as pairs, in key order.
    pub fn annotations(&self) -> Vec<(String, String)> {
        self.string_map("annotations")
    }

    /// One label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.value
            .get("metadata")?
            .get("labels")?
            .get(key)?
            .as_str()
    }

    /// One annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.value
            .get("metadata")?
            .get("annotations")?
            .get(key)?
            .as_str()
    }

    fn metadata_map_mut(&mut self, key: &str) -> &mut Map<String, Value> {
        let obj = self.value.as_object_mut().expect("an item is an object");
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        let map = meta
            .as_object_mut()
            .expect("just made an object")
            .entry(key)
            .or_insert_with(|| Value::Object(Map::new()));
        if !map.is_object() {
            *map = Value::Object(Map::new());
        }
        map.as_object_mut().expect("just made an object")
    }

    /// Sets `metadata.labels[key] = value`.
    pub fn set_label(&mut self, key: &str, value: &str) {
        self.metadata_map_mut("labels")
            .insert(key.to_string(), Value::String(value.to_string()));
    }

    /// Sets `metadata.annotations[key] = value`.
    pub fn set_annotation(&mut self, key: &str, value: &str) {
        self.metadata_map_mut("annotations")
            .insert(key.to_string(), Value::String(value.to_string()));
    }

    /// The whole object.
    pub fn json(&self) -> &Value {
        &self.value
    }

    /// The whole object, to change anything else (spec, status...). Keep
    /// apiVersion, kind, namespace and name: the host refuses an item whose
    /// identity changed.
    pub fn json_mut(&mut self) -> &mut Value {
        &mut self.value
    }

    /// Consumes the item, returning its JSON.
    pub fn into_json(self) -> Value {
        self.value
    }
}
