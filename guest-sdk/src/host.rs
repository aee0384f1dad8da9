//! What the host offers a plugin: its log, its configuration, and read-only
//! lookups of cluster objects.

use crate::bindings::iar::plugin::host;
use crate::{Level, ResourceId};
use serde_json::Value;
use std::cell::RefCell;

/// Writes one line to the host log, tagged with this plugin's name.
pub fn log(level: Level, message: &str) {
    host::log(level, message);
}

/// This plugin's setting `key`, as the operator configured it.
///
/// Asked of the host once per key and instance, then kept: the host gives
/// an instance a fixed configuration (a changed one reloads the plugin, and
/// new instances see it), and an action that reads its settings on every
/// item would otherwise cross the boundary for them every time.
pub fn config(key: &str) -> Option<String> {
    // A few keys: a list, and no `HashMap`, whose random seed is a WASI
    // call on every fresh instance.
    thread_local! {
        static KEPT: RefCell<Vec<(String, Option<String>)>> = const { RefCell::new(Vec::new()) };
    }
    KEPT.with_borrow_mut(|kept| {
        if let Some((_, value)) = kept.iter().find(|(k, _)| k == key) {
            return value.clone();
        }
        let value = host::config(key);
        kept.push((key.to_string(), value.clone()));
        value
    })
}

/// Reads one object from the cluster. `Ok(None)` when it does not exist;
/// `Err` when the operator did not grant reading it, or the read failed.
pub fn cluster_get(id: &ResourceId) -> Result<Option<Value>, String> {
    cluster_get_as(id)
}

/// [`cluster_get`] into a type of the plugin's own (a serde `Deserialize`):
/// the fields it does not name are skipped, not parsed.
pub fn cluster_get_as<T: serde::de::DeserializeOwned>(
    id: &ResourceId,
) -> Result<Option<T>, String> {
    match host::cluster_get(id)? {
        None => Ok(None),
        Some(json) => serde_json::from_str(&json)
            .map(Some)
            .map_err(|e| format!("reading {id} as the host returned it: {e}")),
    }
}
