//! Contract 1.2.0's cluster calls: finding objects by their labels
//! (`cluster-list`), creating the objects a plugin's operations track and
//! deleting them again (`cluster-write`).

use crate::ResourceId;
use crate::bindings_v1_2::iar::plugin::{cluster_list, cluster_write};
use crate::bindings_v1_4::iar::plugin::cluster_write as cluster_write_v1_4;
pub use crate::bindings_v1_4::iar::plugin::cluster_write::{PatchType, WriteError};
use serde_json::Value;

/// The objects of a resource (`group` "" for core) in `namespace` (""
/// for every namespace, or a cluster-scoped resource) whose labels match
/// `label_selector` ("" matches all), sorted by namespace and name. Under
/// the plugin's read grant, as [`crate::cluster_get`]. More than 1000
/// objects is an error: narrow the selector.
pub fn list(
    group: &str,
    resource: &str,
    namespace: &str,
    label_selector: &str,
) -> Result<Vec<Value>, String> {
    cluster_list::list(group, resource, namespace, label_selector)?
        .iter()
        .map(|json| {
            serde_json::from_str(json)
                .map_err(|e| format!("reading a listed {resource} as the host returned it: {e}"))
        })
        .collect()
}

/// Creates `object` as `id` names it, and returns it as the cluster holds
/// it. When this plugin already created it for this backup (a retried
/// `execute`), that object is returned and nothing is created.
///
/// `Err` names the rule when the host refuses: the resource is not in the
/// plugin's `allowWrite` (`write-grant`), the call is not `execute` in the
/// backup phase (`write-call`, `no-create-in-finalize`), the namespace is
/// not the item's (`write-namespace`), the object does not match `id`
/// (`write-object`), or an object of that name is someone else's
/// (`create-conflict`).
pub fn create(id: &ResourceId, object: &Value) -> Result<Value, String> {
    let text = serde_json::to_string(object).map_err(|e| e.to_string())?;
    let created = cluster_write::create(id, &text)?;
    serde_json::from_str(&created).map_err(|e| format!("reading {id} as the host returned it: {e}"))
}

/// Deletes an object this plugin created for this backup; `Ok(false)`
/// when it is already gone. Refused (rule `delete-not-own`) for any other
/// object.
pub fn delete(id: &ResourceId) -> Result<bool, String> {
    cluster_write::delete(id)
}

/// Replaces an object this plugin created for this backup with `object`,
/// which carries the `metadata.resourceVersion` it was read at (what
/// [`create`] or an earlier write returned): a change made since is
/// [`WriteError::Conflict`]; read again and retry. Returns the object as
/// written. The host keeps what a plugin may not change (status, owner
/// references, finalizers, its own labels); refusals name the rule
/// (`update-not-own`, `write-identity`, `update-resource-version`,
/// `no-update-in-finalize`, and [`create`]'s). Contract 1.4.0.
pub fn update(id: &ResourceId, object: &Value) -> Result<Value, WriteError> {
    let text = serde_json::to_string(object).map_err(|e| WriteError::Invalid(e.to_string()))?;
    let written = cluster_write_v1_4::update(id, &text)?;
    serde_json::from_str(&written)
        .map_err(|e| WriteError::Unavailable(format!("reading {id} as the host returned it: {e}")))
}

/// Patches an object this plugin created for this backup with `body`, a
/// JSON merge patch ([`PatchType::Merge`]) or a JSON patch
/// ([`PatchType::Json`]); a strategic merge patch is refused (rule
/// `patch-type`). Without a `metadata.resourceVersion` in the body it
/// applies to the object as it is. Returns the object as written.
/// Contract 1.4.0.
pub fn patch(id: &ResourceId, kind: PatchType, body: &Value) -> Result<Value, WriteError> {
    let text = serde_json::to_string(body).map_err(|e| WriteError::Invalid(e.to_string()))?;
    let written = cluster_write_v1_4::patch(id, kind, &text)?;
    serde_json::from_str(&written)
        .map_err(|e| WriteError::Unavailable(format!("reading {id} as the host returned it: {e}")))
}

/// A name for an object this plugin creates, the same every time it is
/// asked with the same parts: `prefix-` and 16 hex digits of a digest of
/// the parts. Pass what makes the object unique, such as the item's uid
/// and the backup's uid. The prefix is cut to 46 characters and made a
/// valid name (lower case, `[a-z0-9-]`), so the result is a DNS-1123
/// label of at most 63 characters whatever it is given.
pub fn object_name(prefix: &str, parts: &[&str]) -> String {
    // 64-bit FNV-1a over the parts, each ended by a NUL so that ("ab", "c")
    // and ("a", "bc") differ: stable across builds and versions (std's
    // hasher is not), and no dependency.
    let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain([0u8]) {
            digest ^= u64::from(b);
            digest = digest.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    let prefix: String = prefix
        .chars()
        .take(46)
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .collect();
    let prefix = prefix.trim_matches('-');
    if prefix.is_empty() {
        format!("iar-{digest:016x}")
    } else {
        format!("{prefix}-{digest:016x}")
    }
}
