//! A plugin instance's restore-item-action calls (contract 1.3.0), under
//! the same deadline, memory cap and output checks as its backup calls.

use super::{PluginInstance, to_action_error};
use crate::contract::latest;
use crate::plugin::RestoreRef;
use crate::plugin::error::{Call, CallError, Target, Violation};
use crate::plugin::exports::Guest;
use crate::plugin::run_budget;
use crate::plugin::validate::{self, Progress, RestoreResult};
use crate::sandbox::RunObject;
use iar_core::item::{Item, ItemRef};
use iar_core::select::applies_to::ResourceSelector;

impl PluginInstance {
    /// Asks what the plugin's restore action applies to.
    pub fn restore_applies_to(&mut self) -> Result<ResourceSelector, CallError> {
        let target = Target::None;
        let answer = self.call_in(
            Call::RestoreAppliesTo,
            &target,
            None,
            None,
            RunObject::None,
            |g, s| restore(g).call_applies_to(s),
        )?;
        self.selector(Call::RestoreAppliesTo, answer)
    }

    /// Runs the restore action on one item of a restore: `item` as it will
    /// be created (the restore's namespace mapping applied), `from_backup`
    /// as it was backed up. `seen_operation` is asked as for a backup's
    /// execute, last.
    pub fn restore_execute(
        &mut self,
        item: &Item,
        from_backup: &Item,
        restore_ref: &RestoreRef,
        seen_operation: &dyn Fn(&str) -> bool,
    ) -> Result<RestoreResult, CallError> {
        let target = Target::Item(item.id.clone());
        let input = latest::restore_action::RestoreInput {
            item: item.json().to_string(),
            item_from_backup: from_backup.json().to_string(),
            restore: restore_ref.to_wit(),
        };
        let answer = self.call_restore(Call::RestoreExecute, &target, restore_ref, |g, s| {
            restore(g).call_execute(s, &input)
        })?;
        let out = answer.map_err(|e| {
            let v = Violation::Action(to_action_error(e, &self.plugin));
            self.error(Call::RestoreExecute, &target, v, String::new())
        })?;
        let limits = self.plugin.limits();
        // Claimed before the checks, given back if one refuses: the
        // operation id is claimed last of all, and a refused output must
        // not use up budget or id.
        let wait = match out.wait_for_additional_items {
            true => validate::ready_wait(true, out.additional_items_ready_timeout_ms, limits)
                .unwrap_or(validate::DEFAULT_READY_WAIT),
            false => std::time::Duration::ZERO,
        };
        let reserved = run_budget::reserve(
            "restore",
            &restore_ref.uid,
            self.plugin.name(),
            limits,
            out.additional_items.len(),
            wait,
        )
        .map_err(|v| self.error(Call::RestoreExecute, &target, v, String::new()))?;
        let grants = &self.plugin.0.settings.mutate_grants;
        validate::restore_output(
            out,
            item,
            &restore_ref.spec,
            &from_backup.id.namespace,
            limits,
            grants,
            seen_operation,
        )
        .map_err(|v| {
            reserved.refund();
            self.error(Call::RestoreExecute, &target, v, String::new())
        })
    }

    /// A restore operation's progress.
    pub fn restore_progress(
        &mut self,
        operation_id: &str,
        item: &ItemRef,
        restore_ref: &RestoreRef,
    ) -> Result<Progress, CallError> {
        let target = Target::Operation {
            id: operation_id.to_string(),
            item: item.clone(),
        };
        let wit = restore_ref.to_wit();
        let answer = self.call_restore(Call::RestoreProgress, &target, restore_ref, |g, s| {
            restore(g).call_progress(s, operation_id, &wit)
        })?;
        let p = answer.map_err(|e| {
            let v = Violation::Action(to_action_error(e, &self.plugin));
            self.error(Call::RestoreProgress, &target, v, String::new())
        })?;
        validate::progress(p, self.plugin.limits())
            .map_err(|v| self.error(Call::RestoreProgress, &target, v, String::new()))
    }

    /// Asks the restore action to stop an operation.
    pub fn restore_cancel(
        &mut self,
        operation_id: &str,
        item: &ItemRef,
        restore_ref: &RestoreRef,
    ) -> Result<(), CallError> {
        let target = Target::Operation {
            id: operation_id.to_string(),
            item: item.clone(),
        };
        let wit = restore_ref.to_wit();
        let answer = self.call_restore(Call::RestoreCancel, &target, restore_ref, |g, s| {
            restore(g).call_cancel(s, operation_id, &wit)
        })?;
        answer.map_err(|e| {
            let v = Violation::Action(to_action_error(e, &self.plugin));
            self.error(Call::RestoreCancel, &target, v, String::new())
        })
    }

    /// Whether the additional items of an earlier restore execute are
    /// ready. At most the plugin's limit on related items is handed over
    /// (rule output-size, as when they were returned).
    pub fn additional_items_ready(
        &mut self,
        items: &[ItemRef],
        restore_ref: &RestoreRef,
    ) -> Result<bool, CallError> {
        let target = Target::None;
        let ids = validate::ready_query(items, self.plugin.limits())
            .map_err(|v| self.error(Call::AdditionalItemsReady, &target, v, String::new()))?;
        let wit = restore_ref.to_wit();
        let answer =
            self.call_restore(Call::AdditionalItemsReady, &target, restore_ref, |g, s| {
                restore(g).call_are_additional_items_ready(s, &ids, &wit)
            })?;
        answer.map_err(|e| {
            let v = Violation::Action(to_action_error(e, &self.plugin));
            self.error(Call::AdditionalItemsReady, &target, v, String::new())
        })
    }
}

/// The restore action of an instance; `call` checked that it is exported.
fn restore(guest: &Guest) -> &latest::restore_action::Guest {
    guest
        .restore
        .as_ref()
        .expect("checked by call: restore-item-action exported")
}
