//! Items: Kubernetes objects as JSON, with the identity the host checks.

use crate::resources::{Catalog, GroupResource};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// Names one object: group ("" for core), plural resource, namespace ("" for
/// cluster-scoped), name. Velero's ResourceIdentifier.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ItemRef {
    pub group: String,
    pub resource: String,
    pub namespace: String,
    pub name: String,
}

impl ItemRef {
    pub fn group_resource(&self) -> GroupResource {
        GroupResource {
            group: self.group.clone(),
            resource: self.resource.clone(),
        }
    }
}

impl fmt::Display for ItemRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.group_resource())?;
        if self.namespace.is_empty() {
            write!(f, " {}", self.name)
        } else {
            write!(f, " {}/{}", self.namespace, self.name)
        }
    }
}

/// Why a JSON value is not a usable item.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ItemError {
    #[error("not a JSON object")]
    NotObject,
    #[error("missing {0}")]
    Missing(&'static str),
}

/// One object and its identity.
///
/// The object's JSON text is kept beside its value once known (written on
/// first use, or handed over by a plugin that changed it), so an item
/// crosses into a plugin without being serialized again for every call or
/// every plugin. The value is reached through [`Item::value`] and changed
/// only through [`Item::set_value`], which forgets the text.
#[derive(Clone, Debug)]
pub struct Item {
    pub id: ItemRef,
    value: Value,
    text: OnceLock<Arc<str>>,
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && self.value == other.value
    }
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The API group of an apiVersion: "" for "v1", "apps" for "apps/v1".
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

impl Item {
    /// Reads an object's identity: apiVersion, kind and metadata.name are
    /// required; the resource name comes from the catalog.
    pub fn from_value(value: Value, catalog: &Catalog) -> Result<Item, ItemError> {
        if !value.is_object() {
            return Err(ItemError::NotObject);
        }
        let api_version = str_at(&value, "/apiVersion");
        let kind = str_at(&value, "/kind");
        let name = str_at(&value, "/metadata/name");
        for (field, v) in [
            ("apiVersion", api_version),
            ("kind", kind),
            ("metadata.name", name),
        ] {
            if v.is_empty() {
                return Err(ItemError::Missing(field));
            }
        }
        let gr = catalog.for_kind(api_version, kind);
        let id = ItemRef {
            group: gr.group,
            resource: gr.resource,
            namespace: str_at(&value, "/metadata/namespace").to_string(),
            name: name.to_string(),
        };
        Ok(Item {
            id,
            value,
            text: OnceLock::new(),
        })
    }

    /// An object whose identity the caller knows (a live list says which
    /// resource each object is, which a kind alone cannot for a CRD).
    pub fn with_id(id: ItemRef, value: Value) -> Item {
        Item {
            id,
            value,
            text: OnceLock::new(),
        }
    }

    /// The object.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The object, giving up the item.
    pub fn into_value(self) -> Value {
        self.value
    }

    /// Replaces the object (its identity stays `id`: callers replace an
    /// object only by one the boundary checked to be the same object).
    pub fn set_value(&mut self, value: Value) {
        self.value = value;
        self.text = OnceLock::new();
    }

    /// Replaces the object by one whose JSON text is `text` (what a plugin
    /// returned, parsed into `value` by the boundary).
    pub(crate) fn set_value_and_text(&mut self, value: Value, text: Arc<str>) {
        self.value = value;
        self.text = OnceLock::from(text);
    }

    /// The object as JSON text: serialized once, then kept.
    pub fn json(&self) -> &Arc<str> {
        self.text.get_or_init(|| self.value.to_string().into())
    }

    pub fn kind(&self) -> &str {
        str_at(&self.value, "/kind")
    }

    pub fn api_version(&self) -> &str {
        str_at(&self.value, "/apiVersion")
    }

    /// `metadata.labels` (non-string values are ignored).
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.value
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }
}
