//! A restore case's expectations (contract 1.3.0): the item, additional
//! items and operation as for a backup's execute, and restore's own skip
//! and wait.

use super::expect::{Budget, check_execute};
use super::testfile::Expect;
use iar_core::item::Item;
use iar_plugin::plugin::{CallError, ExecuteResult, RestoreResult};

/// Checks a restore execute's answer; returns it, as a backup's execute
/// result, for the poll and cancel steps that follow.
pub(super) fn check(
    input: &Item,
    out: Result<RestoreResult, CallError>,
    expect: &Expect,
    pattern: &Option<regex::Regex>,
    budget: &Budget,
    failures: &mut Vec<String>,
) -> Option<ExecuteResult> {
    let call = "restore execute";
    if expect.post_operation_items.is_some() || expect.related_items.is_some() {
        failures.push(format!(
            "{call}: postOperationItems and relatedItems are a backup's; a restore case cannot expect them"
        ));
    }
    let (as_backup, restore) = match out {
        Ok(r) => (
            Ok(ExecuteResult {
                item: r.item.clone(),
                additional_items: r.additional_items.clone(),
                operation_id: r.operation_id.clone(),
                post_operation_items: Vec::new(),
            }),
            Some(r),
        ),
        Err(e) => (Err(e), None),
    };
    let checked = check_execute(call, input, as_backup, expect, pattern, budget, failures);
    if let (Some(r), Some(_)) = (&restore, &checked) {
        for (field, want, got) in [
            ("skipRestore", expect.skip_restore, r.skip_restore),
            (
                "waitForAdditionalItems",
                expect.wait_for_additional_items,
                r.wait_for_additional_items,
            ),
        ] {
            if let Some(want) = want
                && want != got
            {
                failures.push(format!("{call}: expected {field} {want}, got {got}"));
            }
        }
    }
    checked
}
