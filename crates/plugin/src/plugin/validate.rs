//! Checks on what a guest returned. Pure functions, so each rule is tested
//! on its own; `instance` applies them to every call.

use super::error::Violation;
use crate::contract::latest::types;
use crate::limits::Limits;
use iar_core::cluster::mutate::MutateGrants;
use iar_core::item::SecurityFields;
use iar_core::item::{Item, ItemRef, group_of};
use iar_core::item_scan::{self, Identity, Scanned};
use iar_core::manifests::json_type;
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
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecuteResult {
    /// The changed item (same `id`, held as the text the plugin wrote);
    /// `None` = unchanged.
    #[serde(serialize_with = "item_value")]
    pub item: Option<Item>,
    pub additional_items: Vec<ItemRef>,
    pub operation_id: Option<String>,
    pub post_operation_items: Vec<ItemRef>,
}

fn item_value<S: serde::Serializer>(item: &Option<Item>, s: S) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&item.as_ref().map(Item::value), s)
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
            let id = ItemRef::new(id.group, id.resource, id.namespace, id.name);
            iar_core::identifier::check(&id).map_err(|part| Violation::InvalidIdentifier {
                list,
                index,
                part: Box::new(part),
            })?;
            Ok(id)
        })
        .collect()
}

/// The item must stay the same object: same group, kind, namespace, name.
/// `output` is the returned text, parsed only to describe a violation.
fn same_identity(input: &Identity, output: &Identity, text: &str) -> Result<(), Violation> {
    // Group alone is not enough: "v1" and a missing, null or numeric
    // apiVersion all read as the core group, and such an item could not be
    // stored (a fuzzer found it).
    if output.api_version.is_empty() {
        let parsed: Value = text.parse().unwrap_or_default();
        return Err(Violation::IdentityChanged {
            field: "apiVersion",
            before: input.api_version.to_string(),
            after: parsed
                .get("apiVersion")
                .map(|v| v.to_string())
                .unwrap_or_default(),
        });
    }
    let checks: [(&'static str, &str, &str); 4] = [
        (
            "API group",
            group_of(&input.api_version),
            group_of(&output.api_version),
        ),
        ("kind", &input.kind, &output.kind),
        ("namespace", &input.namespace, &output.namespace),
        ("name", &input.name, &output.name),
    ];
    for (field, before, after) in checks {
        if before != after {
            return Err(Violation::IdentityChanged {
                field,
                before: before.to_string(),
                after: after.to_string(),
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

/// The item a plugin returned for `input`: bounded, one JSON object, the
/// same object, and changed only where `grants` allow.
fn changed_item(
    json: String,
    input: &Item,
    limits: &Limits,
    grants: &MutateGrants,
) -> Result<Item, Violation> {
    bounded("an item (bytes)", json.len(), limits.max_item_bytes)?;
    // Scanned, not parsed: one pass that checks the text is one JSON
    // object (exactly as `Value` would) and reads its identity, building
    // nothing; the host parses the item only if it reads it.
    let fields = match item_scan::scan(&json) {
        Ok(Scanned::Object(fields)) => fields.into_owned(),
        Ok(Scanned::NotObject) => {
            let value: Value = json.parse().unwrap_or_default();
            return Err(Violation::ItemNotObject(json_type(&value)));
        }
        Err(e) => return Err(Violation::ItemNotJson(e.to_string())),
    };
    same_identity(input.fields(), &fields, &json)?;
    let security = changes_granted(&json, input, grants)?;
    Ok(input
        .changed_to(Arc::from(json), fields)
        .with_security(security))
}

/// A returned item differing from the one handed in is a write (a restore
/// creates it; a backup stores it for a restore to create): the grants
/// must cover the change. Compared as JSON values, so key order and
/// spacing are not changes.
fn changes_granted(
    json: &str,
    input: &Item,
    grants: &MutateGrants,
) -> Result<Option<Arc<SecurityFields>>, Violation> {
    if **input.json() == *json {
        return Ok(None);
    }
    // `changed_item`'s scan accepted exactly what `Value` parses.
    grants
        .check_item(input, json)
        .map_err(|r| Violation::ChangeNotGranted {
            rule: r.rule,
            path: r.path,
            need: r.need,
        })
}

/// An operation id a plugin returned: non-empty and bounded.
fn operation_id(id: &str, limits: &Limits) -> Result<(), Violation> {
    if id.is_empty() {
        return Err(Violation::EmptyOperationId);
    }
    bounded(
        "an operation id (bytes)",
        id.len(),
        limits.max_operation_id_bytes,
    )
}

/// What a restore action's `execute` returned, checked.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreResult {
    /// The item to create (same identity as the input); `None` = as given.
    #[serde(serialize_with = "item_value")]
    pub item: Option<Item>,
    pub additional_items: Vec<ItemRef>,
    pub skip_restore: bool,
    pub operation_id: Option<String>,
    pub wait_for_additional_items: bool,
    /// `None`: the restore tool's default.
    pub additional_items_ready_timeout: Option<Duration>,
}

/// Checks a restore action's `execute` output: the item as
/// [`execute_output`] checks it (a plugin cannot move an item to another
/// namespace), additional items bounded, each checked and within the
/// restore's scope ([`super::restore_scope`]; `own_namespace` is the item's
/// namespace in the backup), a wait only with items to wait for and no
/// longer than `limits.max_ready_wait`, the operation id non-empty, bounded
/// and, last, unique (`seen_operation`, as for a backup).
pub fn restore_output(
    out: crate::contract::latest::restore_action::RestoreOutput,
    input: &Item,
    restore_spec: &Value,
    own_namespace: &str,
    limits: &Limits,
    grants: &MutateGrants,
    seen_operation: &dyn Fn(&str) -> bool,
) -> Result<RestoreResult, Violation> {
    if let Some(id) = &out.operation_id {
        operation_id(id, limits)?;
    }
    bounded(
        "additional items",
        out.additional_items.len(),
        limits.max_related_items,
    )?;
    if out.wait_for_additional_items && out.additional_items.is_empty() {
        return Err(Violation::WaitWithoutItems);
    }
    let item = out
        .item
        .map(|json| changed_item(json, input, limits, grants))
        .transpose()?;
    let additional_items = identifiers("additional-items", out.additional_items)?;
    let must_include = item
        .as_ref()
        .is_some_and(|i| super::restore_scope::must_include(i.value()));
    super::restore_scope::check(restore_spec, own_namespace, must_include, &additional_items)?;
    if let Some(id) = &out.operation_id
        && seen_operation(id)
    {
        return Err(Violation::DuplicateOperationId(id.clone()));
    }
    Ok(RestoreResult {
        item,
        additional_items,
        skip_restore: out.skip_restore,
        operation_id: out.operation_id,
        wait_for_additional_items: out.wait_for_additional_items,
        additional_items_ready_timeout: ready_wait(
            out.wait_for_additional_items,
            out.additional_items_ready_timeout_ms,
            limits,
        ),
    })
}

/// The ready wait a restore action's answer holds the restore for: its
/// ask cut to `limits.max_ready_wait`. `None` (the restore tool's default,
/// Velero's 10 minutes) stays `None` when it fits the bound.
pub fn ready_wait(wait: bool, asked_ms: Option<u64>, limits: &Limits) -> Option<Duration> {
    // Zero is Velero's own plugins' way of saying "the default".
    let asked = asked_ms.filter(|&ms| ms > 0).map(Duration::from_millis);
    if !wait {
        return asked;
    }
    match asked {
        Some(d) if d > limits.max_ready_wait => Some(limits.max_ready_wait),
        None if DEFAULT_READY_WAIT > limits.max_ready_wait => Some(limits.max_ready_wait),
        other => other,
    }
}

/// What Velero waits for additional items when an action names no time
/// (its `--resource-timeout` default).
pub const DEFAULT_READY_WAIT: Duration = Duration::from_secs(600);

/// Checks what `are-additional-items-ready` was asked about is what the
/// host may hand over: the identifiers of one earlier execute's answer.
pub fn ready_query(
    ids: &[ItemRef],
    limits: &Limits,
) -> Result<Vec<types::ResourceIdentifier>, Violation> {
    bounded("additional items", ids.len(), limits.max_related_items)?;
    Ok(ids
        .iter()
        .map(|id| types::ResourceIdentifier {
            group: id.group.clone(),
            resource: id.resource.clone(),
            namespace: id.namespace.clone(),
            name: id.name.clone(),
        })
        .collect())
}

/// Checks `execute`'s output against every rule of the boundary.
/// `seen_operation` answers whether this plugin already returned an id in
/// this backup; it is asked last, after every other rule passed, so a caller
/// may claim the id in it without a refused output using the id up.
pub fn execute_output(
    out: types::ExecuteOutput,
    input: &Item,
    phase: Phase,
    limits: &Limits,
    grants: &MutateGrants,
    seen_operation: &dyn Fn(&str) -> bool,
) -> Result<ExecuteResult, Violation> {
    if let Some(id) = &out.operation_id {
        // Checked first: in finalize the id must never reach the caller.
        if phase == Phase::Finalize {
            return Err(Violation::OperationInFinalize(id.clone()));
        }
        operation_id(id, limits)?;
    } else if !out.post_operation_items.is_empty() {
        return Err(Violation::PostItemsWithoutOperation);
    }
    bounded(
        "additional and post-operation items",
        out.additional_items.len() + out.post_operation_items.len(),
        limits.max_related_items,
    )?;
    let item = out
        .item
        .map(|json| changed_item(json, input, limits, grants))
        .transpose()?;
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
                "invalid-identifier",
            ),
            (vec![id("", "a")], "invalid-identifier"),
            (vec![id("configmaps", "a/log")], "invalid-identifier"),
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
                part: Box::new(iar_core::identifier::InvalidPart {
                    field: "name",
                    value: String::new(),
                    problem: "is empty".into()
                })
            }
        );
    }

    fn item(value: Value) -> Item {
        Item::from_value(value, iar_core::catalog::Catalog::builtin()).unwrap()
    }

    fn mutate(entries: &[&str]) -> MutateGrants {
        MutateGrants::only(entries).unwrap()
    }

    /// A backup action's changed item is a write: refused without a grant
    /// (rule item-change-not-granted, naming the first changed path),
    /// passed with one; an unchanged item, or the same JSON respaced,
    /// needs none.
    #[test]
    fn a_backup_change_needs_a_mutate_grant() {
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "shop"}, "spec": {"containers": []}});
        let input = item(pod.clone());
        let mut labelled = pod.clone();
        labelled["metadata"]["labels"] = serde_json::json!({"team": "a"});
        let out = |json: String| types::ExecuteOutput {
            item: Some(json),
            additional_items: Vec::new(),
            operation_id: None,
            post_operation_items: Vec::new(),
        };
        let run = |json: String, grants: &MutateGrants| {
            execute_output(
                out(json),
                &input,
                Phase::Backup,
                &Limits::default(),
                grants,
                &|_| false,
            )
        };
        let err = run(labelled.to_string(), &MutateGrants::none()).unwrap_err();
        assert_eq!(err.rule(), "item-change-not-granted");
        assert!(err.to_string().contains("\".metadata.labels\""), "{err}");
        assert!(run(labelled.to_string(), &mutate(&["pods"])).is_ok());
        assert!(
            run(
                serde_json::to_string_pretty(&pod).unwrap(),
                &MutateGrants::none()
            )
            .is_ok()
        );
        let mut privileged = pod.clone();
        privileged["spec"]["hostNetwork"] = Value::from(true);
        let err = run(privileged.to_string(), &mutate(&["*"])).unwrap_err();
        assert_eq!(err.rule(), "rights-change-not-granted", "{err}");
    }

    /// The same on restore: a ClusterRoleBinding rewritten is refused
    /// under a glob, passed under its exact name.
    #[test]
    fn a_restore_change_to_rights_needs_the_exact_grant() {
        let crb = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding", "metadata": {"name": "view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}});
        let input = item(crb.clone());
        let mut admin = crb;
        admin["roleRef"]["name"] = Value::from("cluster-admin");
        let run = |grants: &MutateGrants| {
            let out = crate::contract::latest::restore_action::RestoreOutput {
                item: Some(admin.to_string()),
                additional_items: Vec::new(),
                skip_restore: false,
                operation_id: None,
                wait_for_additional_items: false,
                additional_items_ready_timeout_ms: None,
            };
            restore_output(
                out,
                &input,
                &serde_json::json!({}),
                "",
                &Limits::default(),
                grants,
                &|_| false,
            )
        };
        let err = run(&mutate(&["*"])).unwrap_err();
        assert_eq!(err.rule(), "rights-change-not-granted");
        assert!(err.to_string().contains(".roleRef.name"), "{err}");
        assert!(run(&mutate(&["clusterrolebindings.rbac.authorization.k8s.io"])).is_ok());
    }
}
