//! Calls into a guest. This is the only code in iar that runs wasm: each
//! call runs under the plugin's deadline and memory cap, its output is
//! validated, its logs are forwarded, and a trapped instance is discarded.

use super::error::{ActionError, Call, CallError, Target, Violation};
use super::validate::{self, ExecuteResult, Progress};
use super::{BackupRef, Plugin};
use crate::cluster::ClusterReader;
use crate::contract::v1;
use crate::engine::deadline_ticks;
use crate::item::{Item, ItemRef};
use crate::sandbox::{GuestLog, MemoryCapExceeded, State};
use crate::selector::ResourceSelector;
use std::sync::Arc;
use wasmtime::Store;

/// Bytes of guest stderr kept in an error (the end, where a panic message is).
const STDERR_TAIL: usize = 2048;

struct Live {
    store: Store<State>,
    bindings: v1::Plugin,
}

/// One worker's instance of a plugin. Calls are synchronous and may run for
/// up to the plugin's deadline: async callers run them on a blocking thread
/// (`tokio::task::spawn_blocking`), never on the runtime itself.
pub struct PluginInstance {
    plugin: Plugin,
    cluster: Arc<dyn ClusterReader>,
    live: Option<Live>,
    logs: Vec<GuestLog>,
    instantiations: usize,
}

fn to_action_error(e: v1::types::ActionError, plugin: &Plugin) -> ActionError {
    let limits = plugin.limits();
    match e {
        v1::types::ActionError::Failed(m) => {
            ActionError::Failed(validate::action_message(m, limits))
        }
        v1::types::ActionError::Retryable(m) => {
            ActionError::Retryable(validate::action_message(m, limits))
        }
        v1::types::ActionError::UnknownOperation(m) => {
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
            instantiations: 0,
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

    /// Log lines the guest wrote since the last call to this method.
    pub fn take_logs(&mut self) -> Vec<GuestLog> {
        std::mem::take(&mut self.logs)
    }

    fn error(
        &self,
        call: Call,
        target: &Target,
        violation: Violation,
        stderr: String,
    ) -> CallError {
        CallError {
            plugin: self.plugin.name().to_string(),
            call,
            target: target.clone(),
            violation,
            stderr,
        }
    }

    fn instantiate(&mut self) -> Result<(), Violation> {
        let inner = &self.plugin.0;
        let state = State::new(
            &inner.settings.limits,
            inner.config.clone(),
            inner.grants.clone(),
            self.cluster.clone(),
        );
        let mut store = Store::new(inner.runtime.engine(), state);
        store.limiter(|s| &mut s.memory);
        store.epoch_deadline_trap();
        store.set_epoch_deadline(deadline_ticks(inner.settings.limits.deadline));
        self.instantiations += 1;
        match inner.pre.instantiate(&mut store) {
            Ok(bindings) => {
                self.live = Some(Live { store, bindings });
                Ok(())
            }
            Err(e) => Err(classify(e, &inner.settings.limits.deadline)),
        }
    }

    /// Runs one call with the deadline armed. On a trap the instance is
    /// dropped: a trapped component instance may not be entered again.
    fn call<R>(
        &mut self,
        call: Call,
        target: &Target,
        f: impl FnOnce(&v1::Plugin, &mut Store<State>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        if self.live.is_none()
            && let Err(violation) = self.instantiate()
        {
            return Err(self.error(Call::Instantiate, target, violation, String::new()));
        }
        let deadline = self.plugin.limits().deadline;
        let live = self.live.as_mut().expect("instantiated above");
        live.store.set_epoch_deadline(deadline_ticks(deadline));
        let result = f(&live.bindings, &mut live.store);
        let stderr = self.drain_output();
        match result {
            Ok(r) => Ok(r),
            Err(e) => {
                self.live = None;
                let violation = classify(e, &deadline);
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

    /// Forwards the guest's log lines and stdio to the host log (tagged with
    /// the plugin) and returns the tail of its stderr.
    fn drain_output(&mut self) -> String {
        let Some(live) = self.live.as_mut() else {
            return String::new();
        };
        let plugin = self.plugin.name();
        let state = live.store.data_mut();
        for line in state.logs.drain(..) {
            match line.level {
                "error" => tracing::error!(plugin, "{}", line.message),
                "warn" => tracing::warn!(plugin, "{}", line.message),
                "info" => tracing::info!(plugin, "{}", line.message),
                "debug" => tracing::debug!(plugin, "{}", line.message),
                _ => tracing::trace!(plugin, "{}", line.message),
            }
            self.logs.push(line);
        }
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
        let answer = self.call(Call::AppliesTo, &target, |b, s| {
            b.iar_plugin_item_action().call_applies_to(s)
        })?;
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
                Err(self.error(Call::AppliesTo, &target, v, String::new()))
            }
        }
    }

    /// Runs the action on one item. `seen_operation` answers whether this
    /// plugin already returned an operation id in this backup.
    pub fn execute(
        &mut self,
        item: &Item,
        backup: &BackupRef,
        seen_operation: &dyn Fn(&str) -> bool,
    ) -> Result<ExecuteResult, CallError> {
        let target = Target::Item(item.id.clone());
        let json = item.value.to_string();
        let wit_backup = backup.to_wit();
        let answer = self.call(Call::Execute, &target, |b, s| {
            b.iar_plugin_item_action()
                .call_execute(s, &json, &wit_backup)
        })?;
        let out = answer.map_err(|e| {
            let v = Violation::Action(to_action_error(e, &self.plugin));
            self.error(Call::Execute, &target, v, String::new())
        })?;
        validate::execute_output(
            out,
            &item.value,
            backup.phase,
            self.plugin.limits(),
            seen_operation,
        )
        .map_err(|v| self.error(Call::Execute, &target, v, String::new()))
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
        let answer = self.call(Call::Progress, &target, |b, s| {
            b.iar_plugin_item_action()
                .call_progress(s, operation_id, &wit_backup)
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
        let answer = self.call(Call::Cancel, &target, |b, s| {
            b.iar_plugin_item_action()
                .call_cancel(s, operation_id, &wit_backup)
        })?;
        answer.map_err(|e| {
            let v = Violation::Action(to_action_error(e, &self.plugin));
            self.error(Call::Cancel, &target, v, String::new())
        })
    }
}

/// Turns a wasmtime error into the rule it broke.
fn classify(e: wasmtime::Error, deadline: &std::time::Duration) -> Violation {
    if let Some(cap) = e.downcast_ref::<MemoryCapExceeded>() {
        return Violation::MemoryCap {
            limit: cap.limit,
            requested: cap.requested,
        };
    }
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => Violation::Deadline(*deadline),
        Some(wasmtime::Trap::StackOverflow) => Violation::StackOverflow,
        Some(trap) => Violation::Trap {
            message: trap.to_string(),
        },
        None => Violation::Trap {
            message: format!("{e:#}"),
        },
    }
}
