//! What one plugin may name, make a restore wait for, and say in its
//! errors across all its calls of one backup or restore, in this process:
//! a bound per call (`maxRelatedItems`, `maxMessageBytes`) does not stop
//! 10,000 calls each naming 10,000 items or failing with 64 KiB, nor a
//! restore action asking every item's restore to wait.
//! Counted like `maxCreatesPerBackup` (iar-core's `CREATES`): by run uid
//! and plugin, a few bytes each, never cleared, so reloading a plugin does
//! not reset its count.

use crate::limits::Limits;
use crate::plugin::error::Violation;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

/// What a backup or restore has had from one plugin.
#[derive(Clone, Copy, Debug, Default)]
struct Spent {
    items: usize,
    ready_wait: Duration,
    error_bytes: usize,
}

/// (run kind, run uid, plugin) -> spent.
type Key = (&'static str, String, String);

static SPENT: LazyLock<Mutex<HashMap<Key, Spent>>> = LazyLock::new(Default::default);

/// A claim on a run's budget, given back by [`Reserved::refund`] when the
/// call's output is refused for another rule.
#[derive(Debug)]
pub(crate) struct Reserved {
    key: Option<Key>,
    spent: Spent,
}

impl Reserved {
    pub(crate) fn refund(self) {
        let Some(key) = self.key else { return };
        let mut all = SPENT.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = all.get_mut(&key) {
            s.items = s.items.saturating_sub(self.spent.items);
            s.ready_wait = s.ready_wait.saturating_sub(self.spent.ready_wait);
        }
    }
}

/// Claims `items` and `ready_wait` from `plugin`'s budget in the run
/// (`run`: "backup" or "restore") with uid `uid`, or refuses the call
/// (rule `run-budget`) and claims nothing.
pub(crate) fn reserve(
    run: &'static str,
    uid: &str,
    plugin: &str,
    limits: &Limits,
    items: usize,
    ready_wait: Duration,
) -> Result<Reserved, Violation> {
    // Most calls name nothing: no lock, no key. A call over the per-call
    // bound is refused by that rule (output-size), next, and claims nothing.
    if (items == 0 && ready_wait.is_zero()) || items > limits.max_related_items {
        return Ok(Reserved {
            key: None,
            spent: Spent::default(),
        });
    }
    let key = (run, uid.to_string(), plugin.to_string());
    let mut all = SPENT.lock().unwrap_or_else(|p| p.into_inner());
    let spent = all.entry(key.clone()).or_default();
    let total_items = spent.items.saturating_add(items);
    if total_items > limits.max_items_per_run {
        return Err(Violation::RunBudget {
            what: "additional, post-operation and related items",
            run,
            spent: total_items.to_string(),
            limit: format!("{} (maxItemsPerRun)", limits.max_items_per_run),
        });
    }
    let total_wait = spent.ready_wait.saturating_add(ready_wait);
    if total_wait > limits.max_ready_wait_per_run {
        return Err(Violation::RunBudget {
            what: "waits for additional items",
            run,
            spent: humantime::format_duration(total_wait).to_string(),
            limit: format!(
                "{} (maxReadyWaitPerRun)",
                humantime::format_duration(limits.max_ready_wait_per_run)
            ),
        });
    }
    spent.items = total_items;
    spent.ready_wait = total_wait;
    Ok(Reserved {
        key: Some(key),
        spent: Spent {
            items,
            ready_wait,
            error_bytes: 0,
        },
    })
}

/// Claims `bytes` of error text (a plugin's own error message and the
/// stderr of the failed call) from `plugin`'s budget in the run: false
/// once the run's total would pass `maxErrorBytesPerRun`, and the text is
/// then withheld (see [`withheld`]) and claims nothing.
pub(crate) fn claim_error_bytes(
    run: &'static str,
    uid: &str,
    plugin: &str,
    limits: &Limits,
    bytes: usize,
) -> bool {
    let key = (run, uid.to_string(), plugin.to_string());
    let mut all = SPENT.lock().unwrap_or_else(|p| p.into_inner());
    let spent = all.entry(key).or_default();
    let total = spent.error_bytes.saturating_add(bytes);
    if total > limits.max_error_bytes_per_run {
        return false;
    }
    spent.error_bytes = total;
    true
}

/// What stands for an error message over the run's budget: the failure is
/// still reported, item by item; its text is not.
pub(crate) fn withheld(run: &'static str, limits: &Limits) -> String {
    format!(
        "message withheld: this plugin's error text in this {run} passed {} bytes (maxErrorBytesPerRun; rule: run-budget)",
        limits.max_error_bytes_per_run
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_items_per_run: 10,
            max_ready_wait_per_run: Duration::from_secs(60),
            ..Limits::default()
        }
    }

    #[test]
    fn items_are_counted_across_calls_per_run_and_plugin() {
        let l = limits();
        for _ in 0..2 {
            reserve("backup", "u-items", "p", &l, 5, Duration::ZERO).unwrap();
        }
        let e = reserve("backup", "u-items", "p", &l, 1, Duration::ZERO).unwrap_err();
        assert_eq!(e.rule(), "run-budget");
        assert!(e.to_string().contains("11"), "{e}");
        // Another plugin, another run, another kind of run: their own.
        reserve("backup", "u-items", "q", &l, 10, Duration::ZERO).unwrap();
        reserve("backup", "u-items-2", "p", &l, 10, Duration::ZERO).unwrap();
        reserve("restore", "u-items", "p", &l, 10, Duration::ZERO).unwrap();
    }

    #[test]
    fn a_refund_gives_back_exactly_its_claim() {
        let l = limits();
        let r = reserve("restore", "u-refund", "p", &l, 10, Duration::from_secs(60)).unwrap();
        assert!(reserve("restore", "u-refund", "p", &l, 1, Duration::ZERO).is_err());
        r.refund();
        reserve("restore", "u-refund", "p", &l, 10, Duration::from_secs(60)).unwrap();
    }

    /// Error text is counted across calls; over the budget it is
    /// withheld, and a shorter message that still fits is kept.
    #[test]
    fn error_text_adds_up_to_the_run_budget() {
        let l = Limits {
            max_error_bytes_per_run: 100,
            ..Limits::default()
        };
        assert!(claim_error_bytes("restore", "u-err", "p", &l, 60));
        assert!(!claim_error_bytes("restore", "u-err", "p", &l, 60));
        assert!(claim_error_bytes("restore", "u-err", "p", &l, 40));
        assert!(!claim_error_bytes("restore", "u-err", "p", &l, 1));
        // Another plugin's text is its own.
        assert!(claim_error_bytes("restore", "u-err", "q", &l, 100));
        assert!(withheld("restore", &l).contains("rule: run-budget"));
    }

    #[test]
    fn waits_add_up_to_the_run_budget() {
        let l = limits();
        reserve("restore", "u-wait", "p", &l, 1, Duration::from_secs(40)).unwrap();
        let e = reserve("restore", "u-wait", "p", &l, 1, Duration::from_secs(40)).unwrap_err();
        assert!(e.to_string().contains("maxReadyWaitPerRun"), "{e}");
        // The refused call claimed nothing: 20 s still fit.
        reserve("restore", "u-wait", "p", &l, 1, Duration::from_secs(20)).unwrap();
    }
}
