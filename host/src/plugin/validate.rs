//! Checks on what a guest returned. Pure functions, so each rule is tested
//! on its own; `instance` applies them to every call.

use super::error::Violation;
use crate::contract::latest::types;
use crate::item::{ItemRef, group_of};
use crate::limits::Limits;
use crate::manifests::json_type;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Which pass of a backup a call belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Backup,
    Finalize,
}

/// What `execute` returned, checked.
#[derive(Clone, Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecuteResult {
    /// The changed item; `None` = unchanged.
    pub item: Option<Value>,
    pub additional_items: Vec<ItemRef>,
    pub operation_id: Option<String>,
    pub post_operation_items: Vec<ItemRef>,
    /// The changed item as the plugin wrote it (the text `item` was parsed
    /// from), so the next plugin gets it without a serialization.
    #[serde(skip)]
    pub(crate) item_text: Option<Arc<str>>,
}

/// Equal when what the plugin answered is equal; the text `item` was read
/// from is not compared.
impl PartialEq for ExecuteResult {
    fn eq(&self, other: &Self) -> bool {
        self.item == other.item
            && self.additional_items == other.additional_items
            && self.operation_id == other.operation_id
            && self.post_operation_items == other.post_operation_items
    }
}

impl ExecuteResult {
    /// The changed item with its text, giving up the rest.
    pub(crate) fn take_item(&mut self) -> Option<(Value, Option<Arc<str>>)> {
        let text = self.item_text.take();
        self.item.take().map(|v| (v, text))
    }
}

/// What `progress` returned, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    pub completed: bool,
    pub error: Option<String>,
    pub n_completed: i64,
    pub n_total: i64,
    pub operation_units: String,
    pub description: String,
    pub started: Option<SystemTime>,
    pub updated: Option<SystemTime>,
}

fn identifiers(
    list: &'static str,
    ids: Vec<types::ResourceIdentifier>,
) -> Result<Vec<ItemRef>, Violation> {
    ids.into_iter()
        .enumerate()
        .map(|(index, id)| {
            for (field, v) in [("resource", &id.resource), ("name", &id.name)] {
                if v.is_empty() {
                    return Err(Violation::InvalidIdentifier { list, index, field });
                }
            }
            Ok(ItemRef {
                group: id.group,
                resource: id.resource,
                namespace: id.namespace,
                name: id.name,
            })
        })
        .collect()
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The item must stay the same object: same group, kind, namespace, name.
fn same_identity(input: &Value, output: &Value) -> Result<(), Violation> {
    let checks: [(&'static str, String, String); 4] = [
        (
            "API group",
            group_of(str_at(input, "/apiVersion")).to_string(),
            group_of(str_at(output, "/apiVersion")).to_string(),
        ),
        (
            "kind",
            str_at(input, "/kind").into(),
            str_at(output, "/kind").into(),
        ),
        (
            "namespace",
            str_at(input, "/metadata/namespace").into(),
            str_at(output, "/metadata/namespace").into(),
        ),
        (
            "name",
            str_at(input, "/metadata/name").into(),
            str_at(output, "/metadata/name").into(),
        ),
    ];
    // Group alone is not enough: "v1" and a missing, null or numeric
    // apiVersion all read as the core group, and such an item could not be
    // stored (a fuzzer found it).
    if str_at(output, "/apiVersion").is_empty() {
        return Err(Violation::IdentityChanged {
            field: "apiVersion",
            before: str_at(input, "/apiVersion").into(),
            after: output
                .get("apiVersion")
                .map(|v| v.to_string())
                .unwrap_or_default(),
        });
    }
    for (field, before, after) in checks {
        if before != after {
            return Err(Violation::IdentityChanged {
                field,
                before,
                after,
            });
        }
    }
    Ok(())
}

fn bounded(what: &'static str, size: usize, limit: usize) -> Result<(), Violation> {
    if size > limit {
        return Err(Violation::OutputTooLarge { what, size, limit });
    }
    Ok(())
}

/// Checks `execute`'s output against every rule of the boundary.
/// `seen_operation` answers whether this plugin already returned an id in
/// this backup; it is asked last, after every other rule passed, so a caller
/// may claim the id in it without a refused output using the id up.
pub fn execute_output(
    out: types::ExecuteOutput,
    input: &Value,
    phase: Phase,
    limits: &Limits,
    seen_operation: &dyn Fn(&str) -> bool,
) -> Result<ExecuteResult, Violation> {
    if let Some(id) = &out.operation_id {
        // Checked first: in finalize the id must never reach the caller.
        if phase == Phase::Finalize {
            return Err(Violation::OperationInFinalize(id.clone()));
        }
        if id.is_empty() {
            return Err(Violation::EmptyOperationId);
        }
        bounded(
            "an operation id (bytes)",
            id.len(),
            limits.max_operation_id_bytes,
        )?;
    } else if !out.post_operation_items.is_empty() {
        return Err(Violation::PostItemsWithoutOperation);
    }
    bounded(
        "additional and post-operation items",
        out.additional_items.len() + out.post_operation_items.len(),
        limits.max_related_items,
    )?;
    let (item, item_text) = match out.item {
        None => (None, None),
        Some(json) => {
            bounded("an item (bytes)", json.len(), limits.max_item_bytes)?;
            // `FromStr` rather than `serde_json::from_str`: the parser is
            // then serde_json's own compiled code, optimized in every
            // profile (dependencies are, this crate is not in dev builds).
            let value: Value = json
                .parse()
                .map_err(|e: serde_json::Error| Violation::ItemNotJson(e.to_string()))?;
            if !value.is_object() {
                return Err(Violation::ItemNotObject(json_type(&value)));
            }
            same_identity(input, &value)?;
            (Some(value), Some(Arc::from(json)))
        }
    };
    let additional_items = identifiers("additional-items", out.additional_items)?;
    let post_operation_items = identifiers("post-operation-items", out.post_operation_items)?;
    // Last, once everything else passed: `seen_operation` may claim the id,
    // and an output the boundary refuses must not use it up.
    if let Some(id) = &out.operation_id
        && seen_operation(id)
    {
        return Err(Violation::DuplicateOperationId(id.clone()));
    }
    Ok(ExecuteResult {
        item,
        additional_items,
        operation_id: out.operation_id,
        post_operation_items,
        item_text,
    })
}

/// Checks what `get-related-items` returned: at most
/// `limits.max_related_items` identifiers (checked first, before any is
/// read), each naming a resource and an object.
pub fn related_items(
    ids: Vec<types::ResourceIdentifier>,
    limits: &Limits,
) -> Result<Vec<ItemRef>, Violation> {
    bounded("related items", ids.len(), limits.max_related_items)?;
    identifiers("get-related-items", ids)
}

/// 10000-01-01T00:00:00Z, the first second RFC 3339 cannot write.
const MAX_TIMESTAMP_SECONDS: i64 = 253_402_300_800;

fn timestamp(
    field: &'static str,
    t: Option<types::Timestamp>,
) -> Result<Option<SystemTime>, Violation> {
    let Some(t) = t else { return Ok(None) };
    if t.nanoseconds >= 1_000_000_000 {
        return Err(Violation::InvalidTimestamp {
            field,
            nanos: t.nanoseconds,
        });
    }
    // What the operations file can hold (RFC 3339, 1970 through 9999): a
    // time outside it would fail the whole file's upload later, far from
    // the plugin that sent it.
    if !(0..MAX_TIMESTAMP_SECONDS).contains(&t.seconds) {
        return Err(Violation::TimestampOutOfRange {
            field,
            seconds: t.seconds,
        });
    }
    Ok(Some(
        UNIX_EPOCH + Duration::new(t.seconds.unsigned_abs(), t.nanoseconds),
    ))
}

/// Checks `progress`'s output.
pub fn progress(p: types::OperationProgress, limits: &Limits) -> Result<Progress, Violation> {
    for (field, value) in [("n-completed", p.n_completed), ("n-total", p.n_total)] {
        if value < 0 {
            return Err(Violation::NegativeProgress { field, value });
        }
    }
    let message_len = p.description.len() + p.error.as_ref().map_or(0, String::len);
    bounded(
        "a progress message (bytes)",
        message_len,
        limits.max_message_bytes,
    )?;
    bounded(
        "operation units (bytes)",
        p.operation_units.len(),
        limits.max_message_bytes,
    )?;
    Ok(Progress {
        completed: p.completed,
        error: p.error,
        n_completed: p.n_completed,
        n_total: p.n_total,
        operation_units: p.operation_units,
        description: p.description,
        started: timestamp("started", p.started)?,
        updated: timestamp("updated", p.updated)?,
    })
}

/// Bounds the message of a plugin's own error, so a plugin cannot flood the
/// results with one giant string.
pub fn action_message(mut message: String, limits: &Limits) -> String {
    if message.len() > limits.max_message_bytes {
        let mut cut = limits.max_message_bytes;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str("… (truncated)");
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(resource: &str, name: &str) -> types::ResourceIdentifier {
        types::ResourceIdentifier {
            group: String::new(),
            resource: resource.into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    /// get-related-items answers: valid ones pass in order; the count is
    /// checked before any identifier (an over-long list is refused as
    /// output-size even when it also holds an invalid identifier); an empty
    /// resource or name is refused with its index.
    #[test]
    fn related_items_are_bounded_then_each_checked() {
        let limits = Limits {
            max_related_items: 2,
            ..Limits::default()
        };
        let ok = related_items(vec![id("configmaps", "a"), id("secrets", "b")], &limits);
        assert_eq!(
            ok.unwrap()
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        let cases = [
            (
                vec![id("configmaps", "a"), id("", "b"), id("configmaps", "c")],
                "output-size",
            ),
            (
                vec![id("configmaps", "a"), id("configmaps", "")],
                "valid-resource-identifier",
            ),
            (vec![id("", "a")], "valid-resource-identifier"),
        ];
        for (ids, rule) in cases {
            let err = related_items(ids.clone(), &limits).unwrap_err();
            assert_eq!(err.rule(), rule, "{ids:?}: {err}");
        }
        let err = related_items(vec![id("configmaps", "a"), id("configmaps", "")], &limits);
        assert_eq!(
            err.unwrap_err(),
            Violation::InvalidIdentifier {
                list: "get-related-items",
                index: 1,
                field: "name"
            }
        );
    }
}
