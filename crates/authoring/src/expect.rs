//! Comparing what a call returned with what a case expects; every
//! mismatch becomes one readable failure message.

use super::diff::json_diff;
use super::testfile::{Case, Expect, ExpectError, ObjectRef};
use anyhow::Context;
use iar_core::item::{Item, ItemRef};
use iar_plugin::plugin::{CallError, ExecuteResult};
use std::time::Duration;

pub(super) fn compile_pattern(expect: &Expect) -> anyhow::Result<Option<regex::Regex>> {
    expect
        .operation_id_pattern
        .as_deref()
        .map(|p| {
            // Anchored: the pattern describes the whole id.
            regex::Regex::new(&format!("^(?:{p})$"))
                .with_context(|| format!("operationIdPattern {p:?}"))
        })
        .transpose()
}

/// The case's budgets, to name the one a deadline or memory error broke.
pub(super) struct Budget {
    max_duration: Option<Duration>,
    max_memory: Option<usize>,
}

impl Budget {
    pub(super) fn of(case: &Case) -> Budget {
        Budget {
            max_duration: case.max_duration,
            max_memory: case.max_memory,
        }
    }

    /// A failure message, naming the budget when the error is one.
    pub(super) fn explain(&self, message: &str, rule: Option<&str>) -> String {
        let rule = rule.or_else(|| {
            ["cpu-deadline", "memory-cap"]
                .into_iter()
                .find(|r| message.contains(&format!("(rule: {r})")))
        });
        match (rule, self.max_duration, self.max_memory) {
            (Some("cpu-deadline"), Some(d), _) => format!(
                "budget maxDuration of {} exceeded: {message}",
                humantime::format_duration(d)
            ),
            (Some("memory-cap"), _, Some(m)) => {
                format!("budget maxMemory of {m} bytes exceeded: {message}")
            }
            _ => message.to_string(),
        }
    }
}

pub(super) fn describe_error(e: &ExpectError) -> String {
    let mut s = String::new();
    if let Some(r) = &e.rule {
        s += &format!(" with rule {r}");
    }
    if let Some(m) = &e.message {
        s += &format!(" with a message containing {m:?}");
    }
    s
}

pub(super) fn check_error(
    call: &str,
    e: &CallError,
    want: &Option<ExpectError>,
    budget: &Budget,
    failures: &mut Vec<String>,
) {
    let rule = e.violation.rule();
    let message = e.to_string();
    let Some(want) = want else {
        failures.push(budget.explain(&format!("{call} failed: {message}"), Some(rule)));
        return;
    };
    if let Some(r) = &want.rule
        && r != rule
    {
        failures.push(budget.explain(
            &format!(
                "expected {call} to fail with rule {r}, it failed with rule {rule}: {message}"
            ),
            Some(rule),
        ));
    }
    if let Some(m) = &want.message
        && !message.contains(m.as_str())
    {
        failures.push(format!(
            "expected {call}'s error to contain {m:?}, it was: {message}"
        ));
    }
}

pub(super) fn compare_refs(
    what: &str,
    want: &[ObjectRef],
    got: &[ItemRef],
    failures: &mut Vec<String>,
) {
    let got: Vec<ObjectRef> = got.iter().map(ObjectRef::from).collect();
    if want != got.as_slice() {
        let as_json = |v: &[ObjectRef]| serde_json::to_value(v).expect("refs are JSON");
        failures.push(format!(
            "{what} differ from expected (- expected, + actual):\n{}",
            json_diff(&as_json(want), &as_json(&got))
        ));
    }
}

/// Checks an execute result against the expectations; returns the result
/// when the call succeeded, for the steps that follow.
pub(super) fn check_execute(
    call: &str,
    input: &Item,
    out: Result<ExecuteResult, CallError>,
    expect: &Expect,
    pattern: &Option<regex::Regex>,
    budget: &Budget,
    failures: &mut Vec<String>,
) -> Option<ExecuteResult> {
    let out = match (out, &expect.error) {
        (Err(e), want) => {
            check_error(call, &e, want, budget, failures);
            return None;
        }
        (Ok(_), Some(e)) => {
            failures.push(format!(
                "expected {call} to fail{}, it succeeded",
                describe_error(e)
            ));
            return None;
        }
        (Ok(out), None) => out,
    };
    let actual = out.item.as_ref().unwrap_or(input).value();
    if let Some(want) = &expect.item
        && want != actual
    {
        failures.push(format!(
            "{call}: output item differs from expected (- expected, + actual):\n{}",
            json_diff(want, actual)
        ));
    }
    for (pointer, want) in &expect.pointers {
        match actual.pointer(pointer) {
            Some(got) if got == want => {}
            Some(got) => failures.push(format!(
                "{call}: output item at {pointer}: expected {want}, found {got}"
            )),
            None => failures.push(format!(
                "{call}: output item at {pointer}: expected {want}, found nothing"
            )),
        }
    }
    match (expect.unchanged, &out.item) {
        (Some(true), Some(changed)) if changed.value() != input.value() => failures.push(format!(
            "{call}: expected the item unchanged, the plugin changed it (- input, + output):\n{}",
            json_diff(input.value(), changed.value())
        )),
        (Some(false), None) => failures.push(format!(
            "{call}: expected a changed item, the plugin returned none"
        )),
        _ => {}
    }
    if let Some(want) = &expect.additional_items {
        compare_refs(
            &format!("{call}: additionalItems"),
            want,
            &out.additional_items,
            failures,
        );
    }
    if let Some(want) = &expect.post_operation_items {
        compare_refs(
            &format!("{call}: postOperationItems"),
            want,
            &out.post_operation_items,
            failures,
        );
    }
    let got_id = out.operation_id.as_deref();
    if let Some(want) = &expect.operation_id
        && got_id != Some(want.as_str())
    {
        failures.push(format!(
            "{call}: expected operation id {want:?}, got {}",
            show_id(got_id)
        ));
    }
    if let Some(re) = pattern
        && !got_id.is_some_and(|id| re.is_match(id))
    {
        failures.push(format!(
            "{call}: expected an operation id matching {:?}, got {}",
            expect.operation_id_pattern.as_deref().unwrap_or(""),
            show_id(got_id)
        ));
    }
    if expect.no_operation == Some(true) && got_id.is_some() {
        failures.push(format!(
            "{call}: expected no operation, got {}",
            show_id(got_id)
        ));
    }
    Some(out)
}

fn show_id(id: Option<&str>) -> String {
    id.map(|i| format!("{i:?}"))
        .unwrap_or_else(|| "none".into())
}
