//! The steps after execute: an operation's polls and cancels, fixture
//! changes in between, and the finalize pass on its post-operation items.

use super::expect::{Budget, check_error, check_execute, compile_pattern, describe_error};
use super::stubs::StrictCluster;
use super::testfile::{Expect, ExpectProgress, Step};
use anyhow::anyhow;
use iar_core::catalog::Catalog;
use iar_core::item::Item;
use iar_plugin::plugin::{
    BackupRef, CallError, ExecuteResult, Phase, PluginInstance, Progress, RestoreRef,
};
use serde_json::Value;

/// The steps after execute: an operation's polls and cancels, fixture
/// changes in between, and the finalize pass.
pub(super) struct Life<'a> {
    pub(super) instance: &'a mut PluginInstance,
    pub(super) cluster: &'a StrictCluster,
    pub(super) item: &'a Item,
    pub(super) backup: &'a BackupRef,
    /// A restore case's restore: polls and cancels are its operation's.
    pub(super) restore: Option<&'a RestoreRef>,
    pub(super) budget: &'a Budget,
    pub(super) seen: &'a dyn Fn(&str) -> bool,
    pub(super) failures: &'a mut Vec<String>,
}

impl Life<'_> {
    pub(super) fn run(
        &mut self,
        out: Option<&ExecuteResult>,
        steps: &[Step],
    ) -> anyhow::Result<()> {
        for (i, step) in steps.iter().enumerate() {
            let n = i + 1;
            let op = out.and_then(|o| o.operation_id.as_deref());
            match step {
                Step::Set(obj) => {
                    self.cluster
                        .set(obj.clone())
                        .map_err(|e| anyhow!("step {n}: {e}"))?;
                }
                Step::Remove(r) => self.cluster.remove(r.clone().into()),
                Step::Poll(want) => {
                    let Some(op) = op else {
                        self.failures
                            .push(format!("step {n} (poll): execute started no operation"));
                        return Ok(());
                    };
                    let got = match self.restore {
                        Some(r) => self.instance.restore_progress(op, &self.item.id, r),
                        None => self.instance.progress(op, &self.item.id, self.backup),
                    };
                    self.check_progress(n, got, want);
                }
                Step::Cancel(want) => {
                    let Some(op) = op else {
                        self.failures
                            .push(format!("step {n} (cancel): execute started no operation"));
                        return Ok(());
                    };
                    let call = format!("step {n} (cancel)");
                    let canceled = match self.restore {
                        Some(r) => self.instance.restore_cancel(op, &self.item.id, r),
                        None => self.instance.cancel(op, &self.item.id, self.backup),
                    };
                    match (canceled, &want.error) {
                        (Ok(()), None) => {}
                        (Ok(()), Some(e)) => self.failures.push(format!(
                            "{call}: expected cancel to fail{}, it succeeded",
                            describe_error(e)
                        )),
                        (Err(e), want) => check_error(&call, &e, want, self.budget, self.failures),
                    }
                }
                Step::Finalize(_) if self.restore.is_some() => {
                    self.failures.push(format!(
                        "step {n} (finalize): a restore has no finalize pass"
                    ));
                }
                Step::Finalize(expect) => self.finalize(n, out, expect)?,
            }
        }
        Ok(())
    }

    fn check_progress(
        &mut self,
        n: usize,
        got: Result<Progress, CallError>,
        want: &ExpectProgress,
    ) {
        let call = format!("step {n} (poll)");
        let p = match (got, &want.error) {
            (Err(e), w) => return check_error(&call, &e, w, self.budget, self.failures),
            (Ok(_), Some(e)) => {
                return self.failures.push(format!(
                    "{call}: expected progress to fail{}, it succeeded",
                    describe_error(e)
                ));
            }
            (Ok(p), None) => p,
        };
        let mut field = |name: &str, want: Option<Value>, got: Value| {
            if let Some(w) = want
                && w != got
            {
                self.failures
                    .push(format!("{call}: expected {name} {w}, got {got}"));
            }
        };
        field(
            "completed",
            want.completed.map(Value::from),
            p.completed.into(),
        );
        field(
            "nCompleted",
            want.n_completed.map(Value::from),
            p.n_completed.into(),
        );
        field("nTotal", want.n_total.map(Value::from), p.n_total.into());
        field(
            "operationUnits",
            want.operation_units.clone().map(Value::from),
            p.operation_units.clone().into(),
        );
        field(
            "description",
            want.description.clone().map(Value::from),
            p.description.clone().into(),
        );
        match (&want.failure, &p.error) {
            (Some(w), None) if !w.is_empty() => self.failures.push(format!(
                "{call}: expected the operation to fail with {w:?}, it reported no error"
            )),
            (Some(w), Some(e)) if w.is_empty() || !e.contains(w.as_str()) => self.failures.push(
                format!("{call}: expected operation error {w:?}, it reported {e:?}"),
            ),
            _ => {}
        }
    }

    fn finalize(
        &mut self,
        n: usize,
        out: Option<&ExecuteResult>,
        expect: &Expect,
    ) -> anyhow::Result<()> {
        let call = format!("step {n} (finalize)");
        let posts = out
            .map(|o| o.post_operation_items.clone())
            .unwrap_or_default();
        if posts.is_empty() {
            self.failures
                .push(format!("{call}: execute named no post-operation items"));
        }
        let backup = BackupRef {
            object: None,
            phase: Phase::Finalize,
            ..self.backup.clone()
        };
        let pattern = compile_pattern(expect)?;
        for id in posts {
            // The host reads the post-operation item, as a backup does; that
            // read is not the plugin's, so it is not counted.
            let Some(value) = self.cluster.peek(&id) else {
                self.failures.push(format!(
                    "{call}: post-operation item {id} is not in the fixtures"
                ));
                continue;
            };
            let item = Item::from_value(value, Catalog::builtin())
                .map_err(|e| anyhow!("{call}: fixture {id}: {e}"))?;
            if !self.instance.plugin().applies(&item) {
                continue;
            }
            let got = self.instance.execute(&item, &backup, self.seen);
            check_execute(
                &format!("{call} of {id}"),
                &item,
                got,
                expect,
                &pattern,
                self.budget,
                self.failures,
            );
        }
        Ok(())
    }
}
