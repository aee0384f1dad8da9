//! Contract 1.4.0's `update` and `patch`: changes to an object a plugin
//! created for its backup. The host reads the object, checks it is the
//! plugin's own, computes what to write (a patch is applied here, so what
//! was checked is what is written) and writes it as a replace at the
//! version read: a change made in between is a conflict, never lost.

use super::{WriteCall, WriteGrants, WriteRefused, WriteScope, check_common, refuse, rule, stamp};
use crate::item::ItemRef;
use serde_json::{Map, Value};

/// How a patch's body is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// RFC 6902 JSON patch.
    Json,
    /// Kubernetes' strategic merge patch: refused (rule `patch-type`).
    StrategicMerge,
}

/// Why an update or patch wrote nothing; contract 1.4.0's `write-error`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    #[error(transparent)]
    Refused(#[from] WriteRefused),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unavailable(String),
}

/// The checks made before anything is read: the grant, the call (not
/// finalize, which changes nothing), the item's namespace from
/// `execute`, the size of what the plugin sent.
pub fn check_change(
    verb: &str,
    scope: &WriteScope,
    grants: &WriteGrants,
    id: &ItemRef,
    body_len: usize,
    max_bytes: usize,
) -> Result<(), WriteRefused> {
    check_common(verb, scope, grants, id)?;
    if let WriteCall::Execute {
        namespace,
        finalize,
    } = &scope.call
    {
        if *finalize {
            return Err(refuse(
                rule::UPDATE_FINALIZE,
                format!("{verb} {id}: finalize changes nothing"),
            ));
        }
        if !id.namespace.is_empty() && id.namespace != *namespace {
            return Err(refuse(
                rule::NAMESPACE,
                format!("{verb} {id}: a plugin executing on an item writes only in its namespace"),
            ));
        }
    }
    if body_len > max_bytes {
        return Err(refuse(
            rule::OBJECT,
            format!("{verb} {id}: {body_len} bytes, over the plugin's maxItemBytes {max_bytes}"),
        ));
    }
    Ok(())
}

/// An update's object, parsed and checked against `id`: a JSON object of
/// `id`'s group with a kind, its name and namespace `id`'s (filled in
/// where absent), and the `metadata.resourceVersion` it was read at.
pub fn parse_update(id: &ItemRef, text: &str) -> Result<Value, WriteRefused> {
    let bad = |why: String| refuse(rule::OBJECT, format!("updating {id}: {why}"));
    let mut value: Value =
        serde_json::from_str(text).map_err(|e| bad(format!("the object is not JSON: {e}")))?;
    check_shape("updating", id, &mut value)?;
    if resource_version(&value).is_none() {
        return Err(refuse(
            rule::RESOURCE_VERSION,
            format!(
                "updating {id}: the object carries no metadata.resourceVersion (the version it was read at); read it, change it, send it back"
            ),
        ));
    }
    Ok(value)
}

/// The object's `metadata.resourceVersion`, when it has a non-empty one.
pub fn resource_version(object: &Value) -> Option<&str> {
    object["metadata"]["resourceVersion"]
        .as_str()
        .filter(|v| !v.is_empty())
}

/// `current` (the object as the cluster holds it) with `body` applied, as
/// `kind` reads it. A body that is not that kind of patch, or that does not
/// apply (a failed `test`, a missing path), is `Invalid`; a strategic
/// merge is refused.
pub fn apply_patch(
    id: &ItemRef,
    current: &Value,
    kind: PatchKind,
    body: &str,
) -> Result<Value, ChangeError> {
    let invalid = |why: String| ChangeError::Invalid(format!("patching {id}: {why}"));
    let mut out = current.clone();
    match kind {
        PatchKind::Merge => {
            let body: Value = serde_json::from_str(body)
                .map_err(|e| invalid(format!("the merge patch is not JSON: {e}")))?;
            if !body.is_object() {
                return Err(invalid("a merge patch is a JSON object".into()));
            }
            json_patch::merge(&mut out, &body);
        }
        PatchKind::Json => {
            let body: json_patch::Patch = serde_json::from_str(body)
                .map_err(|e| invalid(format!("the JSON patch is not RFC 6902's: {e}")))?;
            json_patch::patch(&mut out, &body).map_err(|e| invalid(e.to_string()))?;
        }
        PatchKind::StrategicMerge => return Err(check_patch_kind(id, kind).unwrap_err().into()),
    }
    Ok(out)
}

/// The patch kinds this host applies: merge and JSON; a strategic merge
/// needs the type's schema, which a cluster of manifests does not have
/// (rule `patch-type`).
pub fn check_patch_kind(id: &ItemRef, kind: PatchKind) -> Result<(), WriteRefused> {
    match kind {
        PatchKind::Merge | PatchKind::Json => Ok(()),
        PatchKind::StrategicMerge => Err(refuse(
            rule::PATCH_TYPE,
            format!(
                "patching {id}: a strategic merge patch is not applied by this host; send a merge or JSON patch"
            ),
        )),
    }
}

/// What an update or patch writes: `wanted` (the plugin's object, or the
/// patch's result) with what a plugin may not change taken from `current`:
/// `status`, and every field of `metadata` but `labels`, `annotations` and
/// `resourceVersion` (no new owner references or finalizers); the host's
/// marks set again. A change of apiVersion, kind, name, namespace or uid
/// is refused (rule `write-identity`).
pub fn rebase(
    verb: &str,
    scope: &WriteScope,
    id: &ItemRef,
    current: &Value,
    mut wanted: Value,
) -> Result<Value, WriteRefused> {
    check_shape(verb, id, &mut wanted)?;
    let identity = |what: &str| {
        refuse(
            rule::IDENTITY,
            format!("{verb} {id}: its {what} is not the object's; an object's identity stays"),
        )
    };
    for field in ["apiVersion", "kind"] {
        if wanted[field] != current[field] {
            return Err(identity(field));
        }
    }
    let uid = &wanted["metadata"]["uid"];
    if !uid.is_null() && *uid != current["metadata"]["uid"] {
        return Err(identity("metadata.uid"));
    }
    let Value::Object(map) = &mut wanted else {
        unreachable!("check_shape keeps only objects");
    };
    match current.get("status") {
        Some(status) => map.insert("status".into(), status.clone()),
        None => map.remove("status"),
    };
    let mut meta = current["metadata"].as_object().cloned().unwrap_or_default();
    let mine = map
        .remove("metadata")
        .and_then(|m| match m {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .unwrap_or_default();
    for field in ["labels", "annotations", "resourceVersion"] {
        match mine.get(field) {
            Some(value) => meta.insert(field.into(), value.clone()),
            None if field == "resourceVersion" => None,
            None => meta.remove(field),
        };
    }
    stamp(&mut meta, scope);
    map.insert("metadata".into(), Value::Object(meta));
    Ok(wanted)
}

/// A JSON object of `id`'s group, with a kind and metadata whose name and
/// namespace, where given, are `id`'s (filled in where not).
fn check_shape(verb: &str, id: &ItemRef, value: &mut Value) -> Result<(), WriteRefused> {
    let bad = |why: String| refuse(rule::OBJECT, format!("{verb} {id}: {why}"));
    let identity = |why: String| refuse(rule::IDENTITY, format!("{verb} {id}: {why}"));
    let Value::Object(map) = value else {
        return Err(bad("the object is not a JSON object".into()));
    };
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if api_version.is_empty() || map.get("kind").and_then(Value::as_str).is_none() {
        return Err(bad("the object has no apiVersion or kind".into()));
    }
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if group != id.group {
        return Err(identity(format!(
            "its apiVersion {api_version:?} is not of group {:?}",
            id.group
        )));
    }
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else {
        return Err(bad("its metadata is not an object".into()));
    };
    for (field, want) in [("name", &id.name), ("namespace", &id.namespace)] {
        match meta.get(field) {
            None | Some(Value::Null) => {
                if !want.is_empty() {
                    meta.insert(field.into(), Value::String(want.clone()));
                }
            }
            Some(Value::String(got)) if got == want => {}
            Some(got) => {
                return Err(identity(format!(
                    "its metadata.{field} {got} is not the identifier's {want:?}"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
