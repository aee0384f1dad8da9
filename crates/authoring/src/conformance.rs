//! Generic checks any plugin must pass, whatever it does: a stable, valid
//! applies-to; outputs the boundary accepts on realistic items; no
//! operation in finalize; `unknown-operation` for ids it never made; a
//! harmless second cancel; the same output for the same input (and for a
//! restore action, its own three, in `restore`). Each
//! failure names its check and the smallest generated item that shows it.

mod restore;

use super::diff::json_diff;
use super::generate;
use super::stubs::StrictCluster;
use iar_core::catalog::Catalog;
use iar_core::item::Item;
use iar_plugin::Runtime;
use iar_plugin::plugin::{
    ActionError, BackupRef, CallError, ExecuteResult, Interface, LoadError, Phase, Plugin,
    PluginSettings, Violation,
};
use serde_json::{Value, json};
use std::sync::Arc;

/// An id no plugin made: no `/`, so it is not a namespace/name either.
pub const UNKNOWN_OPERATION: &str = "iar-conformance-unknown-operation";

/// The outcome of one check.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckResult {
    pub check: &'static str,
    pub passed: bool,
    /// Why it failed, or a note on a pass (what was skipped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The input that shows the failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<Value>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub plugin: String,
    pub version: Option<String>,
    pub generated: usize,
    pub selected: usize,
    pub checks: Vec<CheckResult>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }
}

fn pass(check: &'static str, note: Option<String>) -> CheckResult {
    CheckResult {
        check,
        passed: true,
        detail: note,
        item: None,
    }
}

fn fail(check: &'static str, detail: String, item: Option<&Item>) -> CheckResult {
    CheckResult {
        check,
        passed: false,
        detail: Some(detail),
        item: item.map(|i| i.value().clone()),
    }
}

fn backup(phase: Phase) -> BackupRef {
    BackupRef {
        object: None,
        name: "conformance".into(),
        namespace: "velero".into(),
        uid: "00000000-0000-4000-8000-00000000c0f0".into(),
        spec: json!({}),
        phase,
    }
}

/// A boundary violation, as opposed to the plugin's own refusal
/// (`failed`/`retryable`/`unknown-operation`), which any plugin may answer.
fn is_violation(e: &CallError) -> bool {
    !matches!(e.violation, Violation::Action(_))
}

fn never_seen(_: &str) -> bool {
    false
}

/// Runs every check. `Err` only when the plugin cannot be loaded for a
/// reason other than its applies-to (that is a check of its own).
pub fn check(
    runtime: &Runtime,
    name: &str,
    bytes: &[u8],
    settings: PluginSettings,
) -> Result<Report, LoadError> {
    let mut report = Report {
        plugin: name.to_string(),
        version: None,
        generated: 0,
        selected: 0,
        checks: Vec::new(),
    };
    let plugin = match Plugin::from_bytes(runtime, name, bytes, settings) {
        Ok(p) => p,
        Err(LoadError::AppliesTo(e)) => {
            report
                .checks
                .push(fail("applies-to-valid", e.to_string(), None));
            return Ok(report);
        }
        Err(e) => return Err(e),
    };
    report.version = Some(plugin.version().to_string());
    report.checks.push(pass("applies-to-valid", None));

    // The generated objects are also the cluster, so cluster-get finds
    // what a real cluster would hold next to the item.
    let cluster = Arc::new(StrictCluster::default());
    let action = plugin.exports(Interface::ItemAction);
    let selector = match action {
        true => plugin.applies_to().clone(),
        false => plugin
            .block_applies_to()
            .or(plugin.restore_applies_to())
            .cloned()
            .unwrap_or_default(),
    };
    let generated: Vec<Item> = generate::items(&selector)
        .into_iter()
        .filter_map(|v| Item::from_value(v, Catalog::builtin()).ok())
        .collect();
    for item in &generated {
        let _ = cluster.set(item.value().clone());
    }
    let selected: Vec<&Item> = generated
        .iter()
        .filter(|i| match action {
            true => plugin.applies(i),
            false => plugin.block_applies(i) || plugin.restore_applies(i),
        })
        .collect();
    report.generated = generated.len();
    report.selected = selected.len();

    report.checks.push(applies_to_stable(&plugin, &cluster));
    if action {
        report
            .checks
            .extend(action_checks(&plugin, &cluster, &selected));
    }
    if plugin.exports(Interface::ItemBlockAction) {
        // Its own selector, which may differ from the item action's.
        let block_selected: Vec<&Item> = generated
            .iter()
            .filter(|i| plugin.block_applies(i))
            .collect();
        report
            .checks
            .extend(block_checks(&plugin, &cluster, &block_selected));
    }
    if plugin.exports(Interface::RestoreItemAction) {
        let restore_selected: Vec<&Item> = generated
            .iter()
            .filter(|i| plugin.restore_applies(i))
            .collect();
        report
            .checks
            .extend(restore::checks(&plugin, &cluster, &restore_selected));
    }
    Ok(report)
}

fn applies_to_stable(plugin: &Plugin, cluster: &Arc<StrictCluster>) -> CheckResult {
    const CHECK: &str = "applies-to-stable";
    for round in 1..=2 {
        let mut instance = plugin.instance(cluster.clone());
        if plugin.exports(Interface::ItemAction) {
            match instance.applies_to() {
                Ok(sel) if &sel == plugin.applies_to() => {}
                Ok(sel) => {
                    return fail(
                        CHECK,
                        format!(
                            "call {} answered {sel:?}, the first call answered {:?}",
                            round + 1,
                            plugin.applies_to()
                        ),
                        None,
                    );
                }
                Err(e) => return fail(CHECK, format!("call {}: {e}", round + 1), None),
            }
        }
        if let Some(first) = plugin.block_applies_to() {
            match instance.block_applies_to() {
                Ok(sel) if &sel == first => {}
                Ok(sel) => {
                    return fail(
                        CHECK,
                        format!(
                            "item-block-action call {} answered {sel:?}, the first {first:?}",
                            round + 1
                        ),
                        None,
                    );
                }
                Err(e) => return fail(CHECK, format!("call {}: {e}", round + 1), None),
            }
        }
    }
    pass(CHECK, None)
}

fn action_checks(
    plugin: &Plugin,
    cluster: &Arc<StrictCluster>,
    items: &[&Item],
) -> Vec<CheckResult> {
    let mut out = Vec::new();
    let note =
        |n: usize| (n == 0).then(|| "selects none of the generated items; skipped".to_string());

    // execute-accepted, and the first operation for cancel-twice.
    let mut accepted = pass("execute-accepted", note(items.len()));
    let mut operation: Option<(String, &Item)> = None;
    let mut refused = 0;
    for item in items {
        let mut instance = plugin.instance(cluster.clone());
        match instance.execute(item, &backup(Phase::Backup), &never_seen) {
            Ok(r) => {
                if operation.is_none()
                    && let Some(id) = r.operation_id
                {
                    operation = Some((id, item));
                }
            }
            Err(e) if is_violation(&e) => {
                accepted = fail("execute-accepted", e.to_string(), Some(item));
                break;
            }
            Err(_) => refused += 1,
        }
    }
    if accepted.passed && refused > 0 {
        accepted.detail = Some(format!(
            "the plugin refused {refused} of {} items with its own error",
            items.len()
        ));
    }
    out.push(accepted);

    let mut finalize = pass("finalize-no-operation", note(items.len()));
    for item in items {
        let mut instance = plugin.instance(cluster.clone());
        if let Err(e) = instance.execute(item, &backup(Phase::Finalize), &never_seen)
            && matches!(e.violation, Violation::OperationInFinalize(_))
        {
            finalize = fail("finalize-no-operation", e.to_string(), Some(item));
            break;
        }
    }
    out.push(finalize);

    out.push(deterministic(plugin, cluster, items));

    for (check, call) in [
        ("progress-unknown-operation", "progress"),
        ("cancel-unknown-operation", "cancel"),
    ] {
        let mut instance = plugin.instance(cluster.clone());
        let probe = items.first().map(|i| i.id.clone()).unwrap_or_default();
        let b = backup(Phase::Backup);
        let answer = match call {
            "progress" => instance
                .progress(UNKNOWN_OPERATION, &probe, &b)
                .map(|p| format!("progress {}", serde_json::to_string(&p).unwrap_or_default())),
            _ => instance
                .cancel(UNKNOWN_OPERATION, &probe, &b)
                .map(|()| "success".to_string()),
        };
        out.push(match answer {
            Err(e) if matches!(e.violation, Violation::Action(ActionError::UnknownOperation(_))) => {
                pass(check, None)
            }
            Err(e) => fail(
                check,
                format!("{call} of operation {UNKNOWN_OPERATION:?}, which it never started, must answer unknown-operation; it answered: {e}"),
                None,
            ),
            Ok(what) => fail(
                check,
                format!("{call} of operation {UNKNOWN_OPERATION:?}, which it never started, must answer unknown-operation; it answered {what}"),
                None,
            ),
        });
    }

    out.push(match operation {
        None => pass(
            "cancel-twice",
            Some("no generated item started an operation; skipped".into()),
        ),
        Some((id, item)) => cancel_twice(plugin, cluster, &id, item),
    });
    out
}

fn cancel_twice(
    plugin: &Plugin,
    cluster: &Arc<StrictCluster>,
    id: &str,
    item: &Item,
) -> CheckResult {
    let mut instance = plugin.instance(cluster.clone());
    let b = backup(Phase::Backup);
    for n in 1..=2 {
        match instance.cancel(id, &item.id, &b) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.violation,
                    Violation::Action(ActionError::UnknownOperation(_))
                ) && n == 2 => {}
            Err(e) => {
                return fail(
                    "cancel-twice",
                    format!("cancel {n} of operation {id:?}: {e}"),
                    Some(item),
                );
            }
        }
    }
    pass("cancel-twice", None)
}

/// Same item three times: a fresh instance, the same instance again, and
/// another fresh instance. Any difference is state or randomness leaking
/// into outputs.
fn deterministic(plugin: &Plugin, cluster: &Arc<StrictCluster>, items: &[&Item]) -> CheckResult {
    const CHECK: &str = "deterministic";
    let b = backup(Phase::Backup);
    let shown = |r: &Result<ExecuteResult, CallError>| match r {
        Ok(out) => serde_json::to_value(out).unwrap_or_default(),
        Err(e) => json!({ "error": e.to_string() }),
    };
    for item in items {
        let mut first = plugin.instance(cluster.clone());
        let a = shown(&first.execute(item, &b, &never_seen));
        let created = cluster.created();
        let again = shown(&first.execute(item, &b, &never_seen));
        let fresh = shown(
            &plugin
                .instance(cluster.clone())
                .execute(item, &b, &never_seen),
        );
        // A retried execute (contract 1.2.0) must find what it created,
        // not create another: names derived from the item and the backup.
        let more: Vec<String> = cluster.created()[created.len()..]
            .iter()
            .map(ToString::to_string)
            .collect();
        if !more.is_empty() {
            return fail(
                CHECK,
                format!(
                    "execute created more objects when called again for the same item ({}): name what it creates from the item and the backup (iar_sdk::object_name), so a retry finds it",
                    more.join(", ")
                ),
                Some(item),
            );
        }
        for (what, other) in [
            ("a second call on the same instance", again),
            ("a call on another fresh instance", fresh),
        ] {
            if other != a {
                return fail(
                    CHECK,
                    format!(
                        "execute gave a different output for the same item on {what} (- first call, + {what}):\n{}",
                        json_diff(&a, &other)
                    ),
                    Some(item),
                );
            }
        }
    }
    pass(CHECK, None)
}

fn block_checks(
    plugin: &Plugin,
    cluster: &Arc<StrictCluster>,
    items: &[&Item],
) -> Vec<CheckResult> {
    let b = backup(Phase::Backup);
    let mut accepted = pass("related-items-accepted", None);
    let mut stable = pass("related-items-deterministic", None);
    for item in items {
        let mut instance = plugin.instance(cluster.clone());
        let first = instance.get_related_items(item, &b);
        if let Err(e) = &first
            && is_violation(e)
        {
            accepted = fail("related-items-accepted", e.to_string(), Some(item));
            break;
        }
        let second = instance.get_related_items(item, &b);
        if stable.passed && first != second {
            stable = fail(
                "related-items-deterministic",
                format!("get-related-items answered {first:?}, then {second:?}"),
                Some(item),
            );
        }
    }
    vec![accepted, stable]
}

/// The report as text: one line per check, failures with their item.
pub fn text(report: &Report) -> String {
    let mut out = format!(
        "conformance of {} (contract {}): {} generated items, {} selected\n",
        report.plugin,
        report.version.as_deref().unwrap_or("?"),
        report.generated,
        report.selected
    );
    for c in &report.checks {
        let status = if c.passed { "ok  " } else { "FAIL" };
        out += &format!("{status} {}", c.check);
        if let Some(d) = &c.detail {
            let mut lines = d.lines();
            out += &format!(": {}", lines.next().unwrap_or_default());
            for l in lines {
                out += &format!("\n     {l}");
            }
        }
        out += "\n";
        if let Some(item) = &c.item {
            out += "     item:\n";
            for l in serde_json::to_string_pretty(item)
                .unwrap_or_default()
                .lines()
            {
                out += &format!("       {l}\n");
            }
        }
    }
    let failed = report.checks.iter().filter(|c| !c.passed).count();
    out += &format!(
        "\n{} checks: {} passed, {failed} failed\n",
        report.checks.len(),
        report.checks.len() - failed
    );
    out
}
