//! The boundary's checks on what a plugin returns
//! (`iar::plugin::validate::execute_output` and `::progress`), with records
//! built by `arbitrary` as a hostile guest could return them, under small
//! limits so every bound is reached.
//!
//! Properties of an accepted `execute` output: the item is an object that
//! still reads as an item and keeps the input's API group, kind, namespace
//! and name; an operation id is non-empty, within its limit, not seen
//! before and never returned in finalize; post-operation items come only
//! with an operation id; every identifier names a resource and a name and
//! obeys Kubernetes' naming rules (`identifier::check`); the
//! related items are within their limit. Of an accepted `progress`: counts
//! are not negative, messages are within their limit, timestamps are the
//! ones returned, and the operation they go into can be written to the
//! operations file.

#![no_main]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arbitrary::Arbitrary;
use iar::catalog::Catalog;
use iar::contract::v1::types;
use iar::item::{ItemRef, group_of};
use iar::operations::{Operation, OperationSpec};
use iar::plugin::validate::{self, Phase};
use iar::{Item, Limits};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

#[derive(Arbitrary, Debug)]
struct Id {
    group: String,
    resource: String,
    namespace: String,
    name: String,
}

impl From<Id> for types::ResourceIdentifier {
    fn from(id: Id) -> Self {
        types::ResourceIdentifier {
            group: id.group,
            resource: id.resource,
            namespace: id.namespace,
            name: id.name,
        }
    }
}

/// The item a plugin returns: none, any text, or the input with some
/// identity fields replaced (by any JSON value) or removed.
#[derive(Arbitrary, Debug)]
enum ItemOut {
    Unchanged,
    Raw(String),
    Edited {
        api_version: Edit,
        kind: Edit,
        namespace: Edit,
        name: Edit,
        payload: String,
    },
}

#[derive(Arbitrary, Debug)]
enum Edit {
    Keep,
    Remove,
    Text(String),
    Number(i64),
    Null,
}

impl Edit {
    fn apply(self, object: &mut serde_json::Map<String, Value>, key: &str) {
        match self {
            Edit::Keep => {}
            Edit::Remove => {
                object.remove(key);
            }
            Edit::Text(s) => {
                object.insert(key.into(), Value::String(s));
            }
            Edit::Number(n) => {
                object.insert(key.into(), json!(n));
            }
            Edit::Null => {
                object.insert(key.into(), Value::Null);
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Stamp {
    seconds: i64,
    nanoseconds: u32,
}

#[derive(Arbitrary, Debug)]
struct ProgressIn {
    completed: bool,
    error: Option<String>,
    n_completed: i64,
    n_total: i64,
    operation_units: String,
    description: String,
    started: Option<Stamp>,
    updated: Option<Stamp>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// The input item's identity; empty kind/name are replaced, as a real
    /// item always has them.
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
    out: ItemOut,
    additional: Vec<Id>,
    operation_id: Option<String>,
    post: Vec<Id>,
    finalize: bool,
    seen: Vec<String>,
    progress: ProgressIn,
}

fn limits() -> Limits {
    Limits {
        max_item_bytes: 2048,
        max_related_items: 8,
        max_operation_id_bytes: 16,
        max_message_bytes: 64,
        ..Limits::default()
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn check_execute(input: &Value, out: types::ExecuteOutput, finalize: bool, seen: &[String]) {
    let limits = limits();
    let phase = if finalize {
        Phase::Finalize
    } else {
        Phase::Backup
    };
    let returned_id = out.operation_id.clone();
    let related = out.additional_items.len() + out.post_operation_items.len();
    let is_seen = |id: &str| seen.iter().any(|s| s == id);
    if let Some(text) = &out.item {
        iar_fuzz::assert_scan_agrees_with_value(text);
    }
    let input_item =
        Item::from_value(input.clone(), Catalog::builtin()).expect("the input is an item");
    // Every change granted: the fuzzer exercises the rest of the boundary;
    // the grants' own rules are unit-tested in iar-core.
    let mut every: Vec<&str> = vec!["*", "pods/security"];
    every.extend(iar::cluster::mutate::RIGHTS_RESOURCES);
    let grants = iar::cluster::mutate::MutateGrants::only(&every).expect("valid grants");
    let result = match validate::execute_output(out, &input_item, phase, &limits, &grants, &is_seen)
    {
        Ok(r) => r,
        Err(v) => {
            let _ = v.to_string();
            return;
        }
    };
    assert_eq!(result.operation_id, returned_id, "the id is passed through");
    if let Some(id) = &result.operation_id {
        assert!(!finalize, "an operation id in finalize was accepted");
        assert!(!id.is_empty(), "an empty operation id was accepted");
        assert!(
            id.len() <= limits.max_operation_id_bytes,
            "{id:?} is over the limit"
        );
        assert!(!is_seen(id), "a duplicate operation id {id:?} was accepted");
    } else {
        assert!(
            result.post_operation_items.is_empty(),
            "post-operation items without an operation"
        );
    }
    assert!(
        related <= limits.max_related_items,
        "{related} related items accepted"
    );
    for id in result
        .additional_items
        .iter()
        .chain(&result.post_operation_items)
    {
        assert!(
            !id.resource.is_empty() && !id.name.is_empty(),
            "{id:?} accepted"
        );
        // Whatever passed the boundary obeys Kubernetes' naming rules, so
        // no accepted identifier can change the URL path it is read from.
        assert!(
            iar::identifier::check(id).is_ok() && !id.namespace.contains('/'),
            "{id:?} accepted"
        );
    }
    let Some(item) = &result.item else { return };
    let item = item.value();
    assert!(item.is_object(), "a non-object item was accepted: {item}");
    // Independently of the boundary's own reading: the output must still be
    // an item (apiVersion, kind and name present) and the same one.
    let read = Item::from_value(item.clone(), Catalog::builtin())
        .unwrap_or_else(|e| panic!("accepted an item that is not one ({e}): {item}"));
    let before = Item::from_value(input.clone(), Catalog::builtin()).expect("the input is an item");
    assert_eq!(
        (
            group_of(read.api_version()),
            read.kind(),
            &read.id.namespace,
            &read.id.name
        ),
        (
            group_of(before.api_version()),
            before.kind(),
            &before.id.namespace,
            &before.id.name
        ),
        "the item's identity changed: {input} became {item}"
    );
    assert_eq!(str_at(item, "/kind"), str_at(input, "/kind"));
}

fn stamp(s: Option<Stamp>) -> Option<types::Timestamp> {
    s.map(|s| types::Timestamp {
        seconds: s.seconds,
        nanoseconds: s.nanoseconds,
    })
}

/// The (seconds, nanoseconds) since the epoch of a time.
fn unstamp(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let whole = if d.subsec_nanos() == 0 { 0 } else { 1 };
            let nanos =
                (Duration::from_secs(whole) - Duration::new(0, d.subsec_nanos())).subsec_nanos();
            (-(d.as_secs() as i64) - whole as i64, nanos)
        }
    }
}

fn check_progress(p: ProgressIn) {
    let limits = limits();
    let given = (
        p.started.as_ref().map(|s| (s.seconds, s.nanoseconds)),
        p.updated.as_ref().map(|s| (s.seconds, s.nanoseconds)),
    );
    let record = types::OperationProgress {
        completed: p.completed,
        error: p.error,
        n_completed: p.n_completed,
        n_total: p.n_total,
        operation_units: p.operation_units,
        description: p.description,
        started: stamp(p.started),
        updated: stamp(p.updated),
    };
    let checked = match validate::progress(record, &limits) {
        Ok(c) => c,
        Err(v) => {
            let _ = v.to_string();
            return;
        }
    };
    assert!(
        checked.n_completed >= 0 && checked.n_total >= 0,
        "{checked:?}"
    );
    let message = checked.description.len() + checked.error.as_ref().map_or(0, String::len);
    assert!(
        message <= limits.max_message_bytes,
        "{message} bytes of message"
    );
    assert!(checked.operation_units.len() <= limits.max_message_bytes);
    assert_eq!(
        (checked.started.map(unstamp), checked.updated.map(unstamp)),
        given,
        "timestamps changed"
    );

    // What the controller does next: record the progress in the operation
    // and persist it. Accepted timestamps must be ones the file can hold.
    let spec = OperationSpec {
        backup_name: "b".into(),
        backup_uid: "u".into(),
        backup_item_action: "p".into(),
        resource_identifier: ItemRef::new("", "pods", "ns", "n"),
        operation_id: "op".into(),
        post_operation_items: Vec::new(),
    };
    let mut op = Operation::new(spec, UNIX_EPOCH);
    op.status.started = checked.started;
    op.status.updated = checked.updated;
    if let Err(e) = serde_json::to_vec(&op) {
        panic!("the boundary accepted {given:?}, which the operations file cannot hold: {e}");
    }
}

fuzz_target!(|input: Input| {
    let kind = if input.kind.is_empty() {
        "Pod".into()
    } else {
        input.kind
    };
    let name = if input.name.is_empty() {
        "n".into()
    } else {
        input.name
    };
    let api_version = if input.api_version.is_empty() {
        "v1".into()
    } else {
        input.api_version
    };
    let mut metadata = json!({"name": name});
    if !input.namespace.is_empty() {
        metadata["namespace"] = json!(input.namespace);
    }
    let item = json!({"apiVersion": api_version, "kind": kind, "metadata": metadata});

    let returned = match input.out {
        ItemOut::Unchanged => None,
        ItemOut::Raw(text) => Some(text),
        ItemOut::Edited {
            api_version,
            kind,
            namespace,
            name,
            payload,
        } => {
            let mut out = item.clone();
            let object = out.as_object_mut().expect("an object");
            api_version.apply(object, "apiVersion");
            kind.apply(object, "kind");
            object.insert("data".into(), json!({"payload": payload}));
            let meta = object["metadata"].as_object_mut().expect("an object");
            namespace.apply(meta, "namespace");
            name.apply(meta, "name");
            Some(out.to_string())
        }
    };
    let out = types::ExecuteOutput {
        item: returned,
        additional_items: input.additional.into_iter().map(Into::into).collect(),
        operation_id: input.operation_id,
        post_operation_items: input.post.into_iter().map(Into::into).collect(),
    };
    check_execute(&item, out, input.finalize, &input.seen);
    check_progress(input.progress);
});
