//! What the host offers a plugin: its log, its configuration, and read-only
//! lookups of cluster objects.

use crate::bindings::iar::plugin::host;
use crate::{Level, ResourceId};
use serde_json::Value;

/// Writes one line to the host log, tagged with this plugin's name.
pub fn log(level: Level, message: &str) {
    host::log(level, message);
}

/// This plugin's setting `key`, as the operator configured it.
pub fn config(key: &str) -> Option<String> {
    host::config(key)
}

/// Reads one object from the cluster. `Ok(None)` when it does not exist;
/// `Err` when the operator did not grant reading it, or the read failed.
pub fn cluster_get(id: &ResourceId) -> Result<Option<Value>, String> {
    match host::cluster_get(id)? {
        None => Ok(None),
        Some(json) => serde_json::from_str(&json)
            .map(Some)
            .map_err(|e| format!("host returned invalid JSON for {id}: {e}")),
    }
}
