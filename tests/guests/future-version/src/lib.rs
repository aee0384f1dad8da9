//! Test fixture: a plugin built against `iar:plugin@2.0.0`, a major version
//! of the contract this host does not support.
//!
//! It uses `wit-bindgen` directly on its own copy of the contract (`wit/`,
//! identical to the real one but for the version), not `iar-sdk`, which only
//! knows 1.0.0. The implementation is trivial; what matters is that its
//! exports are named `iar:plugin/item-action@2.0.0`, so the host must refuse
//! it and name the versions it supports.

mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "iar:plugin/plugin@2.0.0",
    });
}

use bindings::exports::iar::plugin::item_action::Guest;
use bindings::iar::plugin::types::{
    ActionError, Backup, ExecuteOutput, OperationProgress, ResourceSelector,
};

struct FutureVersion;

impl Guest for FutureVersion {
    fn applies_to() -> Result<ResourceSelector, ActionError> {
        Ok(ResourceSelector {
            included_namespaces: Vec::new(),
            excluded_namespaces: Vec::new(),
            included_resources: Vec::new(),
            excluded_resources: Vec::new(),
            label_selector: String::new(),
        })
    }

    fn execute(_item: String, _backup: Backup) -> Result<ExecuteOutput, ActionError> {
        Ok(ExecuteOutput {
            item: None,
            additional_items: Vec::new(),
            operation_id: None,
            post_operation_items: Vec::new(),
        })
    }

    fn progress(operation_id: String, _backup: Backup) -> Result<OperationProgress, ActionError> {
        Err(ActionError::UnknownOperation(operation_id))
    }

    fn cancel(operation_id: String, _backup: Backup) -> Result<(), ActionError> {
        Err(ActionError::UnknownOperation(operation_id))
    }
}

bindings::export!(FutureVersion with_types_in bindings);
