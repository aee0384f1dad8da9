//! The generic checks of a restore action (contract 1.3.0): outputs the
//! boundary accepts on realistic items, the same output for the same input,
//! and `unknown-operation` for an id it never made.

use super::{CheckResult, StrictCluster};
use super::{UNKNOWN_OPERATION, fail, is_violation, never_seen, pass};
use crate::diff::json_diff;
use iar_core::item::Item;
use iar_plugin::plugin::{ActionError, CallError, Plugin, RestoreRef, RestoreResult, Violation};
use serde_json::json;
use std::sync::Arc;

fn restore() -> RestoreRef {
    RestoreRef {
        object: None,
        name: "conformance-restore".into(),
        namespace: "velero".into(),
        uid: "00000000-0000-4000-8000-00000000c0f1".into(),
        spec: json!({"backupName": "conformance"}),
    }
}

pub(super) fn checks(
    plugin: &Plugin,
    cluster: &Arc<StrictCluster>,
    items: &[&Item],
) -> Vec<CheckResult> {
    let note =
        |n: usize| (n == 0).then(|| "selects none of the generated items; skipped".to_string());
    let r = restore();
    let shown = |a: &Result<RestoreResult, CallError>| match a {
        Ok(out) => serde_json::to_value(out).unwrap_or_default(),
        Err(e) => json!({ "error": e.to_string() }),
    };
    let mut accepted = pass("restore-execute-accepted", note(items.len()));
    let mut stable = pass("restore-deterministic", note(items.len()));
    for item in items {
        let mut instance = plugin.instance(cluster.clone());
        let first = instance.restore_execute(item, item, &r, &never_seen);
        if let Err(e) = &first
            && is_violation(e)
        {
            accepted = fail("restore-execute-accepted", e.to_string(), Some(item));
            break;
        }
        let again = shown(&instance.restore_execute(item, item, &r, &never_seen));
        let fresh = shown(&plugin.instance(cluster.clone()).restore_execute(
            item,
            item,
            &r,
            &never_seen,
        ));
        let first = shown(&first);
        if stable.passed
            && let Some(other) = [again, fresh].into_iter().find(|o| *o != first)
        {
            stable = fail(
                "restore-deterministic",
                format!(
                    "restore execute gave a different output for the same item (- first call, + a later one):\n{}",
                    json_diff(&first, &other)
                ),
                Some(item),
            );
        }
    }
    let probe = items.first().map(|i| i.id.clone()).unwrap_or_default();
    let unknown = match plugin.instance(cluster.clone()).restore_progress(
        UNKNOWN_OPERATION,
        &probe,
        &r,
    ) {
        Err(e)
            if matches!(
                e.violation,
                Violation::Action(ActionError::UnknownOperation(_))
            ) =>
        {
            pass("restore-progress-unknown-operation", None)
        }
        other => fail(
            "restore-progress-unknown-operation",
            format!(
                "restore progress of operation {UNKNOWN_OPERATION:?}, which it never started, must answer unknown-operation; it answered {}",
                match other {
                    Ok(p) => format!("progress {}", serde_json::to_string(&p).unwrap_or_default()),
                    Err(e) => e.to_string(),
                }
            ),
            None,
        ),
    };
    vec![accepted, stable, unknown]
}
