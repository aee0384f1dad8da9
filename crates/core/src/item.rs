//! Items: Kubernetes objects as JSON, with the identity the host checks.

use crate::catalog::{Catalog, GroupResource};
use crate::item_scan::Identity;
use crate::spool::{Spool, Spooled};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// Names one object: group ("" for core), plural resource, namespace ("" for
/// cluster-scoped), name. Velero's ResourceIdentifier.
///
/// Shared: a backup names each item in several places at once (the
/// manifest cache and its index, the listed items, the set of items
/// claimed, the outcome), and a clone is a reference count, not four
/// strings (at 100,000 items the copies were a third of the heap). The
/// fields are read through [`ItemRefFields`].
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ItemRef(Arc<ItemRefFields>);

/// The fields of an [`ItemRef`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ItemRefFields {
    pub group: String,
    pub resource: String,
    pub namespace: String,
    pub name: String,
}

impl From<ItemRefFields> for ItemRef {
    fn from(fields: ItemRefFields) -> Self {
        ItemRef(Arc::new(fields))
    }
}

impl std::ops::Deref for ItemRef {
    type Target = ItemRefFields;
    fn deref(&self) -> &ItemRefFields {
        &self.0
    }
}

impl fmt::Debug for ItemRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemRef")
            .field("group", &self.group)
            .field("resource", &self.resource)
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish()
    }
}

impl Serialize for ItemRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ItemRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ItemRefFields::deserialize(d).map(ItemRef::from)
    }
}

impl ItemRef {
    pub fn new(
        group: impl Into<String>,
        resource: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> ItemRef {
        ItemRef::from(ItemRefFields {
            group: group.into(),
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        })
    }

    /// The fields, copied only if another clone shares them.
    pub fn into_fields(self) -> ItemRefFields {
        Arc::unwrap_or_clone(self.0)
    }

    pub fn group_resource(&self) -> GroupResource {
        GroupResource {
            group: self.group.clone(),
            resource: self.resource.clone(),
        }
    }
}

impl ItemRef {
    /// `namespace/name`, or the name of a cluster-scoped object: what
    /// follows a kind word ("pod shop/db-0") in a message.
    pub fn path(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
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
/// An item holds its JSON text, its parsed value, or both, each made from
/// the other on first use: an item read from a cluster starts as a value
/// and is written once, however many plugins it crosses; an item a plugin
/// changed starts as the text the plugin returned (checked by the boundary
/// without being parsed, see [`crate::item_scan`]) and is parsed only if
/// something on the host reads it. The value is changed only through
/// [`Item::set_value`], which forgets the text.
///
/// Both are shared, so cloning an item (a cached cluster object handed to
/// a backup, a block's items kept for its volume decisions) copies no JSON.
///
/// A listed item may hold neither, only where its text is in a [`Spool`]
/// ([`Item::spooled`]): a backup of 100,000 objects then holds positions,
/// and each text is read back when something asks for it, into the copy
/// that asked (a clone taken before that holds the position alone).
#[derive(Clone, Debug)]
pub struct Item {
    pub id: ItemRef,
    value: OnceLock<Arc<Value>>,
    text: OnceLock<Arc<str>>,
    spooled: Option<Spooled>,
    /// apiVersion, kind, metadata.namespace and metadata.name as the object
    /// has them (which the boundary compares), known without a parse.
    fields: Arc<Identity<'static>>,
    /// Its pod security fields as the item-change check reads them
    /// ([`SecurityFields`]), once: the output one plugin's check read is
    /// the input of the next plugin's.
    security: OnceLock<Option<Arc<SecurityFields>>>,
}

/// A pod spec's security fields by path (`cluster::mutate`'s reading);
/// `None` where the text's shape was left to a full comparison.
pub type SecurityFields = std::collections::BTreeMap<String, Value>;

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && self.value() == other.value()
    }
}

/// A value as compact JSON text. `serde_json::to_string` writes into one
/// buffer; `Value`'s `Display` goes through `fmt::Write` adapters and is
/// several times slower, which showed in every per-call profile.
pub fn json_text(value: &Value) -> String {
    serde_json::to_string(value).expect("a JSON value always serializes")
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
        // The identity fields are read once, for the checks, the id and
        // the item's own record of them.
        let fields = Identity::of(&value);
        for (field, v) in [
            ("apiVersion", &fields.api_version),
            ("kind", &fields.kind),
            ("metadata.name", &fields.name),
        ] {
            if v.is_empty() {
                return Err(ItemError::Missing(field));
            }
        }
        let gr = catalog.for_kind(&fields.api_version, &fields.kind);
        let id = ItemRef::new(
            gr.group,
            gr.resource,
            fields.namespace.to_string(),
            fields.name.to_string(),
        );
        Ok(Item {
            id,
            fields: Arc::new(fields),
            value: OnceLock::from(Arc::new(value)),
            text: OnceLock::new(),
            spooled: None,
            security: OnceLock::new(),
        })
    }

    /// An object whose identity the caller knows (a live list says which
    /// resource each object is, which a kind alone cannot for a CRD).
    pub fn with_id(id: ItemRef, value: Value) -> Item {
        Item {
            id,
            fields: Arc::new(Identity::of(&value)),
            value: OnceLock::from(Arc::new(value)),
            text: OnceLock::new(),
            spooled: None,
            security: OnceLock::new(),
        }
    }

    /// The object a plugin returned for this item: `text`, which the
    /// boundary scanned to be one JSON object with the identity `fields`.
    pub fn changed_to(&self, text: Arc<str>, fields: Identity<'static>) -> Item {
        Item {
            id: self.id.clone(),
            value: OnceLock::new(),
            text: OnceLock::from(text),
            fields: Arc::new(fields),
            spooled: None,
            security: OnceLock::new(),
        }
    }

    /// Its security fields, read by `read` the first time they are asked
    /// for (or set by [`Item::with_security`]).
    pub fn security(
        &self,
        read: impl FnOnce() -> Option<SecurityFields>,
    ) -> Option<&Arc<SecurityFields>> {
        self.security.get_or_init(|| read().map(Arc::new)).as_ref()
    }

    /// The item with its security fields known (read from its text by the
    /// check that accepted it); `None` leaves them to be read when asked.
    pub fn with_security(self, fields: Option<Arc<SecurityFields>>) -> Item {
        if let Some(fields) = fields {
            let _ = self.security.set(Some(fields));
        }
        self
    }

    /// The object, parsed from its text on first use.
    pub fn value(&self) -> &Value {
        self.value.get_or_init(|| {
            if self.text.get().is_none()
                && let Some(text) = self.read_spooled()
            {
                let _ = self.text.set(text);
            }
            let text = self
                .text
                .get()
                .expect("an item holds its text or its value");
            // Only texts the boundary's scan accepted are held without a
            // value, and the scan accepts exactly what `Value` parses.
            Arc::new(text.parse().expect("an item's text was checked to parse"))
        })
    }

    /// The same item held as its compact text alone, its parsed value
    /// dropped: a few hundred bytes less per KB of object, for items that
    /// are kept long and read as text (a manifest cluster's).
    pub fn text_only(self) -> Item {
        let text = self.json().clone();
        Item {
            id: self.id,
            value: OnceLock::new(),
            text: OnceLock::from(text),
            fields: self.fields,
            spooled: None,
            security: self.security,
        }
    }

    /// The same item held as a position in `spool`: its text is written
    /// there and dropped from memory, and read back on first use. If the
    /// spool cannot be written (a full disk), the item stays as it was,
    /// in memory: slower to nothing, only bigger.
    pub fn spooled(self, spool: &Arc<Spool>) -> Item {
        if self.is_spooled_only() {
            return self;
        }
        match spool.put(self.json()) {
            Ok(spooled) => Item {
                id: self.id,
                value: OnceLock::new(),
                text: OnceLock::new(),
                fields: self.fields,
                spooled: Some(spooled),
                // Kept small: a spooled item's fields are read again.
                security: OnceLock::new(),
            },
            Err(e) => {
                tracing::warn!("item {}: kept in memory, not spooled: {e}", self.id);
                self
            }
        }
    }

    /// Whether the item holds no body in memory, only its spool position.
    pub fn is_spooled_only(&self) -> bool {
        self.spooled.is_some() && self.text.get().is_none() && self.value.get().is_none()
    }

    /// The text, read back from the spool (not kept).
    fn read_spooled(&self) -> Option<Arc<str>> {
        let spooled = self.spooled.as_ref()?;
        // The spool is this process's own unlinked file: failing to read
        // it back is the machine failing (a panic, which the item pass
        // turns into this item's error, rule host-panic).
        let text = spooled.read().unwrap_or_else(|e| {
            panic!(
                "item {}: reading its text back from the spool: {e}",
                self.id
            )
        });
        Some(text.into())
    }

    /// The object, giving up the item (copied if another clone shares it).
    pub fn into_value(self) -> Value {
        self.value();
        let shared = self.value.into_inner().expect("parsed above");
        Arc::try_unwrap(shared).unwrap_or_else(|shared| (*shared).clone())
    }

    /// Replaces the object (its identity stays `id`: callers replace an
    /// object only by one the boundary checked to be the same object).
    pub fn set_value(&mut self, value: Value) {
        self.fields = Arc::new(Identity::of(&value));
        self.value = OnceLock::from(Arc::new(value));
        self.text = OnceLock::new();
        self.spooled = None;
    }

    /// The object as compact JSON text: written once, then kept.
    pub fn json(&self) -> &Arc<str> {
        self.text.get_or_init(|| {
            if self.value.get().is_none()
                && let Some(text) = self.read_spooled()
            {
                return text;
            }
            json_text(
                self.value
                    .get()
                    .expect("an item holds its text or its value"),
            )
            .into()
        })
    }

    /// apiVersion, kind, namespace and name as the object has them.
    pub fn fields(&self) -> &Identity<'static> {
        &self.fields
    }

    pub fn kind(&self) -> &str {
        &self.fields.kind
    }

    pub fn api_version(&self) -> &str {
        &self.fields.api_version
    }

    /// `metadata.labels` (non-string values are ignored). An item held as
    /// text is not parsed into a value for this (which it would then keep):
    /// the labels alone are read from the text.
    pub fn labels(&self) -> BTreeMap<String, String> {
        // A spooled item's labels are read from its text read back, which
        // is then dropped: a filter asking every listed item keeps none.
        let read_back;
        let text = match self.text.get() {
            None if self.value.get().is_none() => {
                read_back = self.read_spooled();
                read_back.as_ref()
            }
            text => text,
        };
        if let (None, Some(text)) = (self.value.get(), text) {
            #[derive(serde::Deserialize, Default)]
            struct Object {
                #[serde(default)]
                metadata: Metadata,
            }
            #[derive(serde::Deserialize, Default)]
            struct Metadata {
                #[serde(default)]
                labels: Option<BTreeMap<String, Value>>,
            }
            let object: Object = serde_json::from_str(text).unwrap_or_default();
            return object
                .metadata
                .labels
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(k, v)| match v {
                    Value::String(s) => Some((k, s)),
                    _ => None,
                })
                .collect();
        }
        self.value()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config_map() -> Item {
        let value = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "labels": {"app": "web", "n": 1}},
            "data": {"k": "v"}});
        Item::from_value(value, Catalog::builtin()).unwrap()
    }

    /// A spooled item holds no body; its labels are read without keeping
    /// one; a clone taken before a read stays a position while the copy
    /// that read holds the text, the same bytes as before spooling.
    #[test]
    fn a_spooled_item_reads_its_text_back_into_the_copy_that_asks() {
        let spool = Spool::new().unwrap();
        let before = config_map();
        let text = before.json().clone();
        let item = before.clone().spooled(&spool);
        assert!(item.is_spooled_only());
        assert_eq!(item.api_version(), "v1");
        assert_eq!(item.kind(), "ConfigMap");
        let labels = item.labels();
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert!(!labels.contains_key("n"), "non-string values are ignored");
        assert!(item.is_spooled_only(), "labels kept no body");
        let kept = item.clone();
        assert_eq!(item.json(), &text);
        assert!(!item.is_spooled_only());
        assert!(kept.is_spooled_only());
        assert_eq!(kept.value(), before.value());
        assert_eq!(kept.into_value(), before.into_value());
        // Spooling a spooled item writes nothing more.
        let len = spool.len();
        let again = item.clone().spooled(&spool).spooled(&spool);
        assert_eq!(spool.len(), len + text.len() as u64);
        assert_eq!(again.json(), &text);
    }

    /// A changed value forgets the position: the item is its new value.
    #[test]
    fn set_value_replaces_a_spooled_body() {
        let spool = Spool::new().unwrap();
        let mut item = config_map().spooled(&spool);
        let mut value = item.value().clone();
        value["data"]["k"] = "changed".into();
        item.set_value(value.clone());
        assert_eq!(item.clone().into_value(), value);
        assert!(!item.is_spooled_only());
    }
}
