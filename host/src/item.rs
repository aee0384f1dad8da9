//! Items: Kubernetes objects as JSON, with the identity the host checks.

use crate::resources::{Catalog, GroupResource};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

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
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    pub id: ItemRef,
    pub value: Value,
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
        Ok(Item { id, value })
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
