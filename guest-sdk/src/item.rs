//! A typed view of the Kubernetes object a plugin is shown, and of the
//! backup it belongs to.

use crate::bindings::iar::plugin::types;
use serde::de::{Deserialize, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::cell::OnceCell;
use std::collections::BTreeMap;
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
/// whole object is at [`Item::json`] / [`Item::json_mut`], and
/// [`Item::parse_as`] reads it into a type of the plugin's own.
///
/// The object is parsed lazily: a call starts with its JSON text; the first
/// accessor of `apiVersion`, `kind` or `metadata` makes one pass that keeps
/// those and skips the rest, and an action that reads the object only
/// through [`Item::parse_as`] (naming in its own type the identity fields it
/// needs) makes that one pass alone.
/// Labels and annotations change only `metadata`, and an item changed only
/// there is written back with every other field copied as it came; the
/// whole object is parsed only when [`Item::json`] or [`Item::json_mut`]
/// asks for it. On the bench Pod this made the labels call's guest work
/// about half (see docs/performance.md).
#[derive(Clone, Debug)]
pub struct Item {
    repr: Repr,
}

#[derive(Clone, Debug)]
enum Repr {
    /// As the host sent it.
    Text(Lazy),
    /// Parsed whole (built from a value, or asked for mutably).
    Value(Value),
}

#[derive(Clone, Debug)]
struct Lazy {
    text: String,
    /// Read on first use (the host sends only JSON objects; a text that is
    /// not one reads as an empty head).
    head: OnceCell<Head>,
    /// `metadata` as changed by the plugin (`None`: as in `text`).
    metadata: Option<Value>,
    /// The whole object, for `json()` on an unchanged-since item.
    whole: OnceCell<Value>,
}

/// The fields most accessors read, from one pass over the text.
#[derive(Clone, Debug, Default)]
struct Head {
    api_version: Value,
    kind: Value,
    metadata: Value,
    /// Where the (last) `metadata` value sits in the text, so a changed
    /// `metadata` is written back by splicing, without a second pass.
    metadata_at: Option<std::ops::Range<usize>>,
}

impl Head {
    /// One pass over `text`: `None` when it is not a JSON object. The
    /// members are found by skimming (`skim.rs`: where values end, nothing
    /// checked, for the host checked the text) and only the head's values
    /// are parsed; serde reads the text whole when skimming gives up.
    fn read(text: &str) -> Option<Head> {
        Self::skim(text).or_else(|| Self::read_with_serde(text))
    }

    fn skim(text: &str) -> Option<Head> {
        let mut head = Head::default();
        crate::skim::members(text, |key, at| {
            // A repeated key keeps its last value, as a `Value` does.
            match key {
                "apiVersion" => head.api_version = serde_json::from_str(&text[at]).ok()?,
                "kind" => head.kind = serde_json::from_str(&text[at]).ok()?,
                "metadata" => {
                    head.metadata = serde_json::from_str(&text[at.clone()]).ok()?;
                    head.metadata_at = Some(at);
                }
                _ => {}
            }
            Some(())
        })?;
        Some(head)
    }

    fn read_with_serde(text: &str) -> Option<Head> {
        let mut head = serde_json::from_str::<Head>(text).ok()?;
        if let Some(at) = &mut head.metadata_at {
            // The visitor saw the metadata's slice of `text`: its offset.
            let start = at.start - text.as_ptr() as usize;
            *at = start..start + at.len();
        }
        Some(head)
    }
}

impl<'de> Deserialize<'de> for Head {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Head;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            // A repeated key keeps its last value, as a `Value` does.
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Head, A::Error> {
                let mut head = Head::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match key.as_ref() {
                        "apiVersion" => head.api_version = map.next_value()?,
                        "kind" => head.kind = map.next_value()?,
                        "metadata" => {
                            // Borrowed from the text (`from_str`): its address
                            // is where it sits, made an offset by `Head::read`.
                            let raw = map.next_value::<&'de RawValue>()?.get();
                            head.metadata =
                                serde_json::from_str(raw).map_err(serde::de::Error::custom)?;
                            let at = raw.as_ptr() as usize;
                            head.metadata_at = Some(at..at + raw.len());
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(head)
            }
        }
        d.deserialize_map(V)
    }
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        self.json() == other.json()
    }
}

impl Item {
    /// Wraps a JSON object. Fails when `value` is not an object.
    pub fn from_value(value: Value) -> Result<Self, String> {
        if value.is_object() {
            Ok(Item {
                repr: Repr::Value(value),
            })
        } else {
            Err("an item must be a JSON object".to_string())
        }
    }

    /// An item of the text the host sent. Not read here: the host sends
    /// only JSON objects (checked at its boundary), so only a text that does
    /// not even start as one is refused now.
    pub(crate) fn parse(json: String) -> Result<Self, String> {
        if !json.trim_start().starts_with('{') {
            return Err("an item must be a JSON object".to_string());
        }
        Ok(Item {
            repr: Repr::Text(Lazy {
                text: json,
                head: OnceCell::new(),
                metadata: None,
                whole: OnceCell::new(),
            }),
        })
    }

    fn top(&self, key: &str) -> Option<&Value> {
        match &self.repr {
            Repr::Value(v) => v.get(key),
            Repr::Text(lazy) => Some(match key {
                "apiVersion" => &lazy.head().api_version,
                "kind" => &lazy.head().kind,
                "metadata" => match &lazy.metadata {
                    Some(changed) => changed,
                    None => &lazy.head().metadata,
                },
                _ => unreachable!("only the head's fields are read lazily"),
            }),
        }
    }

    fn meta_str(&self, key: &str) -> &str {
        self.top("metadata")
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `apiVersion`, for example `"v1"` or `"apps/v1"`.
    pub fn api_version(&self) -> &str {
        self.top("apiVersion").and_then(Value::as_str).unwrap_or("")
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
        self.top("kind").and_then(Value::as_str).unwrap_or("")
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.meta_str("name")
    }

    /// `metadata.namespace`; `""` for cluster-scoped objects.
    pub fn namespace(&self) -> &str {
        self.meta_str("namespace")
    }

    /// `metadata`, or an empty map when absent.
    pub fn metadata(&self) -> Map<String, Value> {
        self.top("metadata")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    }

    fn string_map(&self, key: &str) -> Vec<(String, String)> {
        self.top("metadata")
            .and_then(|m| m.get(key))
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
        self.top("metadata")?.get("labels")?.get(key)?.as_str()
    }

    /// One annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.top("metadata")?.get("annotations")?.get(key)?.as_str()
    }

    /// `metadata`, to change: the only part of a lazy item that changes
    /// without parsing the rest.
    fn metadata_mut(&mut self) -> &mut Value {
        if let Repr::Text(lazy) = &mut self.repr
            && let Some(whole) = lazy.whole.take()
        {
            // Parsed whole already: change that, so `json()` agrees.
            self.repr = Repr::Value(whole);
        }
        match &mut self.repr {
            // The head's copy is not read once `metadata` is set: moved.
            Repr::Text(lazy) => {
                if lazy.metadata.is_none() {
                    lazy.head();
                    let head = lazy.head.get_mut().expect("read above");
                    lazy.metadata = Some(std::mem::take(&mut head.metadata));
                }
                lazy.metadata.as_mut().expect("set above")
            }
            Repr::Value(value) => value
                .as_object_mut()
                .expect("an item is an object")
                .entry("metadata")
                .or_insert(Value::Null),
        }
    }

    fn metadata_map_mut(&mut self, key: &str) -> &mut Map<String, Value> {
        let meta = self.metadata_mut();
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

    /// The whole object (parsed on first use).
    pub fn json(&self) -> &Value {
        match &self.repr {
            Repr::Value(v) => v,
            Repr::Text(lazy) => lazy.whole.get_or_init(|| lazy.parse_whole()),
        }
    }

    /// The whole object, to change anything else (spec, status...). Keep
    /// apiVersion, kind, namespace and name: the host refuses an item whose
    /// identity changed.
    pub fn json_mut(&mut self) -> &mut Value {
        if let Repr::Text(lazy) = &mut self.repr {
            let whole = lazy.whole.take().unwrap_or_else(|| lazy.parse_whole());
            self.repr = Repr::Value(whole);
        }
        let Repr::Value(value) = &mut self.repr else {
            unreachable!("made a value above")
        };
        value
    }

    /// Consumes the item, returning its JSON.
    pub fn into_json(mut self) -> Value {
        self.json_mut();
        let Repr::Value(value) = self.repr else {
            unreachable!("made a value above")
        };
        value
    }

    /// Reads the object into a type of the plugin's own (a serde
    /// `Deserialize`), skipping the fields it does not name: much less work
    /// than [`Item::json`] when an action reads a few fields.
    ///
    /// ```ignore
    /// #[derive(serde::Deserialize)]
    /// struct Pvc { spec: Spec }
    /// #[derive(serde::Deserialize)]
    /// #[serde(rename_all = "camelCase")]
    /// struct Spec { volume_name: Option<String> }
    /// let pvc: Pvc = item.parse_as()?;
    /// ```
    pub fn parse_as<T: DeserializeOwned>(&self) -> Result<T, crate::Error> {
        let read = match &self.repr {
            Repr::Text(lazy) if lazy.metadata.is_none() => serde_json::from_str(&lazy.text),
            _ => T::deserialize(self.json()),
        };
        read.map_err(|e| {
            crate::Error::Failed(format!(
                "{} {}/{}: {e}",
                self.kind(),
                self.namespace(),
                self.name()
            ))
        })
    }

    /// The object as JSON text, for the host: an unchanged lazy item is its
    /// text as it came; one changed only in `metadata` is its top-level
    /// fields copied as they came, with the new `metadata`.
    pub(crate) fn into_text(self) -> String {
        let lazy = match self.repr {
            Repr::Value(v) => return to_text(&v),
            Repr::Text(lazy) => lazy,
        };
        let Some(metadata) = lazy.metadata else {
            return lazy.text;
        };
        let metadata_text = to_text(&metadata);
        // `metadata` was set through `metadata_mut`, which read the head.
        if let Some(at) = lazy.head.get().and_then(|h| h.metadata_at.clone()) {
            let mut out = String::with_capacity(lazy.text.len() + metadata_text.len());
            out.push_str(&lazy.text[..at.start]);
            out.push_str(&metadata_text);
            out.push_str(&lazy.text[at.end..]);
            return out;
        }
        // No `metadata` in the text: one is added. The text was read as an
        // object when the item was made.
        let mut fields: BTreeMap<&str, &RawValue> =
            serde_json::from_str(&lazy.text).expect("an item's text is a JSON object");
        let metadata = RawValue::from_string(metadata_text).expect("written as JSON");
        fields.insert("metadata", &metadata);
        serde_json::to_string(&fields).expect("raw JSON always serializes")
    }
}

impl Lazy {
    fn head(&self) -> &Head {
        self.head
            .get_or_init(|| Head::read(&self.text).unwrap_or_default())
    }

    /// `Null` for a text that is not JSON, which the host never sends.
    fn parse_whole(&self) -> Value {
        let mut whole: Value = serde_json::from_str(&self.text).unwrap_or(Value::Null);
        if let (Some(m), Some(obj)) = (&self.metadata, whole.as_object_mut()) {
            obj.insert("metadata".into(), m.clone());
        }
        whole
    }
}

/// `serde_json::to_string`: one buffer, no `fmt::Write` adapters (which
/// took a quarter of an execute call when `Display` was used).
fn to_text(value: &Value) -> String {
    serde_json::to_string(value).expect("a JSON value always serializes")
}

#[cfg(test)]
mod tests;
