//! Calls into a guest. This is the only code in iar that runs wasm: each
//! call runs under the plugin's deadline and memory cap, its output is
//! validated, its logs are forwarded, and a trapped instance is discarded.

use super::error::{ActionError, Call, CallError, Target, Violation};
use super::exports::{Action, Guest};
use super::validate::{self, ExecuteResult, Progress};
use super::{BackupRef, Plugin, RestoreRef};
use crate::contract::latest;
use crate::limits::{Isolation, Limits};
use crate::runtime::deadline_ticks;
use crate::sandbox::{
    GuestLog, HostCallLimit, MemoryCapExceeded, RunObject, State, WallClockExceeded,
};
use iar_core::cluster::ClusterReader;
use iar_core::cluster::writes::{CreatedObject, WriteCall, WriteScope};
use iar_core::item::{Item, ItemRef};
use iar_core::select::applies_to::ResourceSelector;
use std::sync::Arc;
use wasmtime::component::ResourceTableError;
use wasmtime::{Store, UpdateDeadline};

mod restore_calls;

/// Bytes of guest stderr kept in an error (the end, where a panic message is).
const STDERR_TAIL: usize = 2048;

struct Live {
    store: Store<State>,
    guest: Guest,
    /// The backup pass this instance has served; with `isolation: backup`
    /// a call for another pass gets a fresh instance.
    pass: Option<PassKey>,
}

/// One pass of one backup (namespace, name, uid, phase), or one restore
/// (namespace, name, uid): what `isolation: backup` keeps an instance for.
#[derive(Clone, PartialEq, Eq)]
enum PassKey {
    Backup(String, String, String, super::Phase),
    Restore(String, String, String),
}

impl PassKey {
    fn of(backup: &BackupRef) -> Self {
        PassKey::Backup(
            backup.namespace.clone(),
            backup.name.clone(),
            backup.uid.clone(),
            backup.phase,
        )
    }

    fn of_restore(restore: &RestoreRef) -> Self {
        PassKey::Restore(
            restore.namespace.clone(),
            restore.name.clone(),
            restore.uid.clone(),
        )
    }
}

/// One worker's instance of a plugin. Calls are synchronous and may run for
/// up to the plugin's deadline: async callers run them on a blocking thread
/// (`tokio::task::spawn_blocking`), never on the runtime itself.
///
/// The wasm instance behind it lives as the plugin's
/// [`Isolation`] says, enforced here so that no caller can get it wrong:
/// `item` makes a fresh one for every call; `backup` keeps one while calls
/// belong to the same backup pass (same backup, same phase) and makes a
/// fresh one when a call for another pass arrives. Fresh instances come from
/// the plugin's `InstancePre`, so they cost an instantiation, not a compile.
pub struct PluginInstance {
    plugin: Plugin,
    cluster: Arc<dyn ClusterReader>,
    live: Option<Live>,
    logs: Vec<GuestLog>,
    created: Vec<CreatedObject>,
    instantiations: usize,
    stdio: StdioCounts,
    /// The metric series of this plugin's successful calls, by call.
    ok_metrics: Vec<(Call, iar_core::metrics::CallOk)>,
    /// The backup or restore (kind, uid) of the current call: what its
    /// error text is counted against.
    run: Option<(&'static str, String)>,
}

/// What the guest wrote to stdout and stderr during the last call: bytes
/// kept (forwarded to the host log) and bytes dropped over the bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StdioCounts {
    pub stdout_kept: usize,
    pub stdout_dropped: usize,
    pub stderr_kept: usize,
    pub stderr_dropped: usize,
}

fn to_action_error(e: latest::types::ActionError, plugin: &Plugin) -> ActionError {
    let limits = plugin.limits();
    match e {
        latest::types::ActionError::Failed(m) => {
            ActionError::Failed(validate::action_message(m, limits))
        }
        latest::types::ActionError::Retryable(m) => {
            ActionError::Retryable(validate::action_message(m, limits))
        }
        latest::types::ActionError::UnknownOperation(m) => {
            ActionError::UnknownOperation(validate::action_message(m, limits))
        }
    }
}

impl PluginInstance {
    pub(crate) fn new(plugin: Plugin, cluster: Arc<dyn ClusterReader>) -> Self {
        PluginInstance {
            plugin,
            cluster,
            live: None,
            logs: Vec::new(),
            created: Vec::new(),
            instantiations: 0,
            stdio: StdioCounts::default(),
            ok_metrics: Vec::new(),
            run: None,
        }
    }

    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// How many wasm instances this worker created (1 + one per discarded
    /// instance).
    pub fn instantiations(&self) -> usize {
        self.instantiations
    }

    /// What the guest wrote to stdout/stderr during the last call.
    pub fn last_stdio(&self) -> StdioCounts {
        self.stdio
    }

    /// Log lines the guest wrote since the last call to this method.
    pub fn take_logs(&mut self) -> Vec<GuestLog> {
        std::mem::take(&mut self.logs)
    }

    /// Objects the guest created since the last call to this method, in
    /// calls that succeeded and in calls that failed after creating: each
    /// is the backup's to delete.
    pub fn take_created(&mut self) -> Vec<CreatedObject> {
        std::mem::take(&mut self.created)
    }

    /// Who a call writes as: creates only from `execute`, deletes from
    /// `execute`, `progress` and `cancel` (see `cluster::writes`).
    fn write_scope(&self, call: Call, target: &Target, backup: Option<&BackupRef>) -> WriteScope {
        // A plugin granted no write is refused by the grant whatever the
        // call: its calls pay nothing for a scope.
        let Some(backup) = backup.filter(|_| !self.plugin.0.write_grants.is_empty()) else {
            return WriteScope::default();
        };
        let call = match (call, target) {
            (Call::Execute, Target::Item(id)) => WriteCall::Execute {
                namespace: id.namespace.clone(),
                finalize: backup.phase == super::Phase::Finalize,
            },
            (Call::Progress, _) => WriteCall::Progress,
            (Call::Cancel, _) => WriteCall::Cancel,
            _ => WriteCall::None,
        };
        WriteScope {
            plugin: self.plugin.name().to_string(),
            backup_name: backup.name.clone(),
            backup_uid: backup.uid.clone(),
            call,
        }
    }

    fn error(
        &self,
        call: Call,
        target: &Target,
        violation: Violation,
        stderr: String,
    ) -> CallError {
        // A plugin's own error answer is not a sandbox violation.
        if !matches!(violation, Violation::Action(_)) {
            iar_core::metrics::global().violation(self.plugin.name(), violation.rule());
        }
        let (violation, stderr) = self.within_error_budget(violation, stderr);
        CallError {
            plugin: self.plugin.name().to_string(),
            call,
            target: target.clone(),
            violation,
            stderr,
        }
    }

    /// The plugin's own text (its error message, the call's stderr),
    /// counted against the run's `maxErrorBytesPerRun`; over it, withheld.
    /// The host's own messages are bounded by their shape and pass as
    /// they are.
    fn within_error_budget(&self, violation: Violation, stderr: String) -> (Violation, String) {
        let Some((run, uid)) = &self.run else {
            return (violation, stderr);
        };
        let message = match &violation {
            Violation::Action(a) => a.message().len(),
            _ => 0,
        };
        let limits = self.plugin.limits();
        if message + stderr.len() == 0
            || super::run_budget::claim_error_bytes(
                run,
                uid,
                self.plugin.name(),
                limits,
                message + stderr.len(),
            )
        {
            return (violation, stderr);
        }
        let text = super::run_budget::withheld(run, limits);
        let violation = match violation {
            Violation::Action(a) => Violation::Action(a.with_message(text)),
            other => other,
        };
        (violation, String::new())
    }

    fn instantiate(&mut self, pass: Option<PassKey>) -> Result<(), Violation> {
        let inner = &self.plugin.0;
        let limits = &inner.settings.limits;
        let state = State::new(
            limits,
            inner.config.clone(),
            inner.grants.clone(),
            inner.write_grants.clone(),
            self.cluster.clone(),
        );
        let mut store = Store::new(inner.runtime.engine(), state);
        store.limiter(|s| &mut s.memory);
        // Every string and list the host lifts out of the guest, in one
        // call's result or one host call's arguments, draws on this budget
        // before it is copied: entries that alias one buffer are counted
        // each time, so a small guest cannot make the host allocate more.
        store.set_hostcall_fuel(lift_budget(limits));
        // The epoch is wall-clock time. When it reaches the deadline, the
        // guest is charged only for the time it ran itself: time spent in
        // host calls (a slow cluster, a contended cache) extends the
        // deadline by as much, so the host's slowness never times out an
        // innocent plugin. The wall-clock ceiling counts everything, and
        // the next check comes at whichever of the two is sooner.
        store.epoch_deadline_callback(|ctx| {
            let state = ctx.data();
            let Some(wall_left) = state.wall_left() else {
                return Err(WallClockExceeded {
                    limit: state.wall_clock(),
                }
                .into());
            };
            let used = state.guest_time();
            Ok(match state.deadline().checked_sub(used) {
                Some(left) if !left.is_zero() => {
                    UpdateDeadline::Continue(deadline_ticks(left.min(wall_left)))
                }
                _ => UpdateDeadline::Interrupt,
            })
        });
        // Every host call is timed, WASI's included: a guest waiting in a
        // sleep or a poll is not running, so the CPU deadline leaves that
        // time out and only the wall-clock ceiling counts it.
        store.call_hook(|mut ctx, hook| {
            ctx.data_mut().on_call_hook(hook);
            Ok(())
        });
        store.data_mut().begin_call();
        store.set_epoch_deadline(first_check(limits));
        self.instantiations += 1;
        match inner.exports.instantiate(&mut store) {
            Ok(guest) => {
                self.live = Some(Live { store, guest, pass });
                Ok(())
            }
            Err(e) => Err(classify(e, limits)),
        }
    }

    /// Drops the live instance when the plugin's isolation says the next
    /// call must not share it.
    fn isolate(&mut self, pass: Option<&PassKey>) {
        let Some(live) = &self.live else { return };
        let fresh = match self.plugin.limits().isolation {
            Isolation::Item => true,
            Isolation::Backup => pass.is_some_and(|p| live.pass.as_ref() != Some(p)),
        };
        if fresh {
            self.live = None;
        }
    }

    /// Runs one call with the deadline armed. On a trap the instance is
    /// dropped: a trapped component instance may not be entered again.
    fn call<R>(
        &mut self,
        call: Call,
        target: &Target,
        backup: Option<&BackupRef>,
        f: impl FnOnce(&Guest, &mut Store<State>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let pass = backup.map(PassKey::of);
        let object = match backup {
            Some(b) if self.plugin.0.reads_runs => RunObject::Backup(b.object_text()),
            _ => RunObject::None,
        };
        self.call_in(call, target, pass, backup, object, f)
    }

    /// [`Self::call`] for a restore's calls: the instance is kept per
    /// restore, and no write is in scope (a restore action's writes are not
    /// part of the contract yet: each is refused by rule `write-call`).
    fn call_restore<R>(
        &mut self,
        call: Call,
        target: &Target,
        restore: &RestoreRef,
        f: impl FnOnce(&Guest, &mut Store<State>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let object = match self.plugin.0.reads_runs {
            true => RunObject::Restore(restore.object_text()),
            false => RunObject::None,
        };
        let pass = Some(PassKey::of_restore(restore));
        self.call_in(call, target, pass, None, object, f)
    }

    fn call_in<R>(
        &mut self,
        call: Call,
        target: &Target,
        pass: Option<PassKey>,
        backup: Option<&BackupRef>,
        object: RunObject,
        f: impl FnOnce(&Guest, &mut Store<State>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let interface = call.interface();
        if !self.plugin.exports(interface) {
            let violation = Violation::NotExported(interface);
            return Err(self.error(call, target, violation, String::new()));
        }
        // Set only when it changes: most calls belong to the run before.
        let run = match &pass {
            Some(PassKey::Backup(_, _, uid, _)) => Some(("backup", uid.as_str())),
            Some(PassKey::Restore(_, _, uid)) => Some(("restore", uid.as_str())),
            None => None,
        };
        if self.run.as_ref().map(|(kind, uid)| (*kind, uid.as_str())) != run {
            self.run = run.map(|(kind, uid)| (kind, uid.to_string()));
        }
        self.isolate(pass.as_ref());
        // The pass is kept by the instance it makes: cloned only then, so
        // a reused instance's call costs no copy of it.
        if self.live.is_none()
            && let Err(violation) = self.instantiate(pass.clone())
        {
            return Err(self.error(Call::Instantiate, target, violation, String::new()));
        }
        let scope = self.write_scope(call, target, backup);
        let live = self.live.as_mut().expect("instantiated above");
        live.store.data_mut().begin_call();
        live.store.data_mut().write_scope = scope;
        live.store.data_mut().run_object = object;
        let home = match &pass {
            Some(PassKey::Backup(namespace, ..) | PassKey::Restore(namespace, ..)) => namespace,
            None => "",
        };
        if live.store.data().home_namespace != home {
            live.store.data_mut().home_namespace = home.to_string();
        }
        live.store
            .set_epoch_deadline(first_check(self.plugin.limits()));
        let started = std::time::Instant::now();
        let mut result = f(&live.guest, &mut live.store);
        let took = started.elapsed();
        // A guest whose last wait ended at the ceiling may return before
        // the epoch callback sees it: the ceiling holds all the same.
        let ceiling = live.store.data().wall_clock();
        if result.is_ok() && took >= ceiling {
            result = Err(WallClockExceeded { limit: ceiling }.into());
        }
        let stderr = self.drain_output();
        match result {
            Ok(r) => {
                self.ok_metrics(call).record(took);
                Ok(r)
            }
            Err(e) => {
                self.live = None;
                let violation = classify(e, self.plugin.limits());
                iar_core::metrics::global().plugin_call(
                    self.plugin.name(),
                    &call.to_string(),
                    violation.rule(),
                    took,
                );
                let violation = match violation {
                    Violation::Trap { message } if !stderr.is_empty() => Violation::Trap {
                        message: format!("{message}; guest stderr: {}", stderr.trim_end()),
                    },
                    other => other,
                };
                Err(self.error(call, target, violation, stderr))
            }
        }
    }

    fn ok_metrics(&mut self, call: Call) -> &iar_core::metrics::CallOk {
        let at = match self.ok_metrics.iter().position(|(c, _)| *c == call) {
            Some(at) => at,
            None => {
                let series =
                    iar_core::metrics::global().call_ok(self.plugin.name(), &call.to_string());
                self.ok_metrics.push((call, series));
                self.ok_metrics.len() - 1
            }
        };
        &self.ok_metrics[at].1
    }

    /// Keeps the guest's log lines for [`Instance::take_logs`], forwards
    /// its stdio to the host log (tagged with the plugin) and returns the
    /// tail of its stderr.
    fn drain_output(&mut self) -> String {
        self.stdio = StdioCounts::default();
        let Some(live) = self.live.as_mut() else {
            return String::new();
        };
        let plugin = self.plugin.name();
        let state = live.store.data_mut();
        // A retried create finds its own object again: one record each.
        for record in state.created.drain(..) {
            if !self.created.contains(&record) {
                self.created.push(record);
            }
        }
        // Kept, not echoed: whoever takes the lines decides what reaches
        // the host log (a backup's journal shows each plugin's head only,
        // so terminal output is bounded by the log bound, not by what a
        // plugin writes).
        self.logs.append(&mut state.logs);
        if state.logs_dropped > 0 {
            tracing::warn!(
                plugin,
                dropped = state.logs_dropped,
                "plugin log lines over the limit were dropped"
            );
            state.logs_dropped = 0;
        }
        let mut tail = String::new();
        for (stream, output) in [("stdout", &state.stdout), ("stderr", &state.stderr)] {
            let (bytes, dropped) = output.take();
            if stream == "stdout" {
                (self.stdio.stdout_kept, self.stdio.stdout_dropped) = (bytes.len(), dropped);
            } else {
                (self.stdio.stderr_kept, self.stdio.stderr_dropped) = (bytes.len(), dropped);
            }
            let text = String::from_utf8_lossy(&bytes);
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                tracing::info!(plugin, stream, "{line}");
            }
            if dropped > 0 {
                tracing::warn!(
                    plugin,
                    stream,
                    dropped,
                    "guest output over the limit was dropped"
                );
            }
            if stream == "stderr" {
                let start = text.len().saturating_sub(STDERR_TAIL);
                let start = (start..text.len())
                    .find(|i| text.is_char_boundary(*i))
                    .unwrap_or(text.len());
                tail = text[start..].to_string();
            }
        }
        tail
    }

    /// Asks what the plugin applies to.
    pub fn applies_to(&mut self) -> Result<ResourceSelector, CallError> {
        let target = Target::None;
        let answer = self.call(Call::AppliesTo, &target, None, |b, s| {
            action(b).applies_to(s)
        })?;
        self.selector(Call::AppliesTo, answer)
    }

    /// Asks what the plugin's item-block action applies to (which items
    /// `get-related-items` is called for).
    pub fn block_applies_to(&mut self) -> Result<ResourceSelector, CallError> {
        let answer = self.call(Call::BlockAppliesTo, &Target::None, None, |b, s| {
            block(b).call_applies_to(s)
        })?;
        self.selector(Call::BlockAppliesTo, answer)
    }

    fn selector(
        &self,
        call: Call,
        answer: Result<latest::types::ResourceSelector, latest::types::ActionError>,
    ) -> Result<ResourceSelector, CallError> {
        match answer {
            Ok(sel) => Ok(ResourceSelector {
                included_namespaces: sel.included_namespaces,
                excluded_namespaces: sel.excluded_namespaces,
                included_resources: sel.included_resources,
                excluded_resources: sel.excluded_resources,
                label_selector: sel.label_selector,
            }),
            Err(e) => {
                let v = Violation::Action(to_action_error(e, &self.plugin));
                Err(self.error(call, &Target::None, v, String::new()))
            }
        }
    }

    /// Asks the plugin's item-block action which items must be backed up in
    /// the same block as `item`. Every identifier is checked (rule
    /// invalid-identifier) and their number bounded by the plugin's
    /// `max_related_items` (rule output-size). Callers ask only for items
    /// [`Plugin::block_applies`] matches.
    pub fn get_related_items(
        &mut self,
        item: &Item,
        backup: &BackupRef,
    ) -> Result<Vec<ItemRef>, CallError> {
        let target = Target::Item(item.id.clone());
        let json = item.json().clone();
        let wit_backup = backup.to_wit();
        let answer = self.call(Call::GetRelatedItems, &target, Some(backup), |b, s| {
            block(b).call_get_related_items(s, &json[..], &wit_backup)
        })?;
        let ids = answer.map_err(|e| {
            let v = Violation::Action(to_action_error(e, &self.plugin));
            self.error(Call::GetRelatedItems, &target, v, String::new())
        })?;
        let limits = self.plugin.limits();
        let related = validate::related_items(ids, limits)
            .map_err(|v| self.error(Call::GetRelatedItems, &target, v, String::new()))?;
        super::run_budget::reserve(
            "backup",
            &backup.uid,
            self.plugin.name(),
            limits,
            related.len(),
            std::time::Duration::ZERO,
        )
        .map_err(|v| self.error(Call::GetRelatedItems, &target, v, String::new()))?;
        Ok(related)
    }

    /// Creates a wasm instance as a fresh call would, and drops it, calling
    /// nothing: `examples/compare` times it to split what a fresh call adds
    /// into instantiating and tearing down (this) and the guest's first
    /// call on a new instance (the rest). False if instantiation failed.
    #[doc(hidden)]
    pub fn instantiate_and_drop(&mut self) -> bool {
        let ok = self.instantiate(None).is_ok();
        self.live = None;
        ok
    }

    /// Runs the action on one item. `seen_operation` answers whether this
    /// plugin already returned an operation id in this backup; it is asked
    /// only once the rest of the output passed the boundary, so it may claim
    /// the id as it answers.
    pub fn execute(
        &mut self,
        item: &Item,
        backup: &BackupRef,
        seen_operation: &dyn Fn(&str) -> bool,
    ) -> Result<ExecuteResult, CallError> {
        let target = Target::Item(item.id.clone());
        // The item's text, kept with it: an item is serialized at most once
        // however many calls and plugins it goes through.
        let json = item.json().clone();
        let wit_backup = backup.to_wit();
        let answer = self.call(Call::Execute, &target, Some(backup), |b, s| {
            action(b).execute(s, &json[..], &wit_backup)
        })?;
        let out = answer.map_err(|e| {
            let v = Violation::Action(to_action_error(e, &self.plugin));
            self.error(Call::Execute, &target, v, String::new())
        })?;
        let limits = self.plugin.limits();
        // Claimed before the checks and given back if one refuses, as the
        // operation id is claimed last: a refused output uses up neither.
        let reserved = super::run_budget::reserve(
            "backup",
            &backup.uid,
            self.plugin.name(),
            limits,
            out.additional_items.len() + out.post_operation_items.len(),
            std::time::Duration::ZERO,
        )
        .map_err(|v| self.error(Call::Execute, &target, v, String::new()))?;
        validate::execute_output(
            out,
            item,
            backup.phase,
            limits,
            &self.plugin.0.settings.mutate_grants,
            seen_operation,
        )
        .map_err(|v| {
            reserved.refund();
            self.error(Call::Execute, &target, v, String::new())
        })
    }

    /// Asks for an operation's progress. `item` is the item whose execute
    /// started it (for error messages).
    pub fn progress(
        &mut self,
        operation_id: &str,
        item: &ItemRef,
        backup: &BackupRef,
    ) -> Result<Progress, CallError> {
        let target = Target::Operation {
            id: operation_id.to_string(),
            item: item.clone(),
        };
        let wit_backup = backup.to_wit();
        let answer = self.call(Call::Progress, &target, Some(backup), |b, s| {
            action(b).progress(s, operation_id, &wit_backup)
        })?;
        let p = answer.map_err(|e| {
            let v = Violation::Action(to_action_error(e, &self.plugin));
            self.error(Call::Progress, &target, v, String::new())
        })?;
        validate::progress(p, self.plugin.limits())
            .map_err(|v| self.error(Call::Progress, &target, v, String::new()))
    }

    /// Asks the plugin to stop an operation.
    pub fn cancel(
        &mut self,
        operation_id: &str,
        item: &ItemRef,
        backup: &BackupRef,
    ) -> Result<(), CallError> {
        let target = Target::Operation {
            id: operation_id.to_string(),
            item: item.clone(),
        };
        let wit_backup = backup.to_wit();
        let answer = self.call(Call::Cancel, &target, Some(backup), |b, s| {
            action(b).cancel(s, operation_id, &wit_backup)
        })?;
        answer.map_err(|e| {
            let v = Violation::Action(to_action_error(e, &self.plugin));
            self.error(Call::Cancel, &target, v, String::new())
        })
    }
}

/// The item action of an instance; `call` checked that the plugin exports it.
fn action(guest: &Guest) -> &Action {
    guest
        .action
        .as_ref()
        .expect("checked by call: item-action exported")
}

/// The item-block action of an instance; `call` checked that it is exported.
fn block(guest: &Guest) -> &latest::block_action::Guest {
    guest
        .block
        .as_ref()
        .expect("checked by call: item-block-action exported")
}

/// Bytes the host lifts out of the guest in one call at most: as much as
/// the guest's whole memory cap, plus everything the output limits allow
/// (an item, the related items' identifiers at their longest, an
/// operation id, messages). Without aliasing a guest cannot hand over more
/// than its memory, so an honest answer that is merely too large still
/// reaches the boundary's size checks and their precise errors; with
/// aliasing, it cannot make the host copy more than this.
pub fn lift_budget(limits: &Limits) -> usize {
    const IDENTIFIER_BYTES: usize = 4 * 256 + 64;
    limits
        .memory_bytes
        .saturating_add(limits.max_item_bytes)
        .saturating_add(limits.max_related_items.saturating_mul(IDENTIFIER_BYTES))
        .saturating_add(limits.max_operation_id_bytes)
        .saturating_add(limits.max_message_bytes.saturating_mul(2))
        .saturating_add(64 << 10)
}

/// wasmtime's error when a lift runs out of `hostcall_fuel` (its type is
/// private; the message is what it exposes).
const LIFT_EXHAUSTED: &str = "fuel allocated for hostcalls has been exhausted";

/// Epoch ticks to the first deadline check of a call: the CPU deadline or
/// the wall-clock ceiling, whichever is sooner.
fn first_check(limits: &Limits) -> u64 {
    deadline_ticks(limits.deadline.min(limits.wall_clock_ceiling()))
}

/// Turns a wasmtime error into the rule it broke.
fn classify(e: wasmtime::Error, limits: &Limits) -> Violation {
    if let Some(wall) = e.downcast_ref::<WallClockExceeded>() {
        return Violation::WallClock(wall.limit);
    }
    if format!("{e:#}").contains(LIFT_EXHAUSTED) {
        return Violation::LiftBudget {
            limit: lift_budget(limits),
        };
    }
    if let Some(cap) = e.downcast_ref::<MemoryCapExceeded>() {
        return Violation::MemoryCap {
            limit: cap.limit,
            requested: cap.requested,
        };
    }
    if let Some(calls) = e.downcast_ref::<HostCallLimit>() {
        return Violation::HostCalls { limit: calls.limit };
    }
    if let Some(ResourceTableError::Full) = e.downcast_ref::<ResourceTableError>() {
        return Violation::ResourceTable {
            limit: limits.max_resources,
        };
    }
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => Violation::Deadline(limits.deadline),
        Some(wasmtime::Trap::StackOverflow) => Violation::StackOverflow,
        Some(trap) => Violation::Trap {
            message: trap.to_string(),
        },
        None => Violation::Trap {
            message: format!("{e:#}"),
        },
    }
}
