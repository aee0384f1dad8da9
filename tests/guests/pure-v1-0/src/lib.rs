//! Test fixture: a plugin built against `iar:plugin@1.0.0` alone
//! (`wit/plugin.wit`), with `wit-bindgen` directly. Plugins built with
//! `iar-sdk` since 1.1.0 import `host` and `types` at 1.1.0 (wit-component
//! unites semver-compatible imports to the newest); this one imports them at
//! 1.0.0, as every plugin built before 1.1.0 does, so it proves those keep
//! loading. It adds the label `contract=1.0.0`, read through the 1.0.0
//! `host.log` import.

mod bindings {
    wit_bindgen::generate!({
        path: "../../../wit",
        world: "iar:plugin/plugin@1.0.0",
    });
}

use bindings::exports::iar::plugin::item_action::Guest;
use bindings::iar::plugin::host::{Level, log};
use bindings::iar::plugin::types::{
    ActionError, Backup, ExecuteOutput, OperationProgress, ResourceSelector,
};

struct PureV1;

impl Guest for PureV1 {
    fn applies_to() -> Result<ResourceSelector, ActionError> {
        Ok(ResourceSelector {
            included_namespaces: Vec::new(),
            excluded_namespaces: Vec::new(),
            included_resources: vec!["pods".into()],
            excluded_resources: Vec::new(),
            label_selector: String::new(),
        })
    }

    fn execute(item: String, _backup: Backup) -> Result<ExecuteOutput, ActionError> {
        // A plain string edit keeps the fixture free of a JSON dependency:
        // the test's Pod has `"labels":{` in its metadata.
        let Some(at) = item.find("\"labels\":{") else {
            return Err(ActionError::Failed("the pod has no labels object".into()));
        };
        let cut = at + "\"labels\":{".len();
        let changed = format!("{}\"contract\":\"1.0.0\",{}", &item[..cut], &item[cut..]);
        log(Level::Info, "labelled through the 1.0.0 contract");
        Ok(ExecuteOutput {
            item: Some(changed),
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

bindings::export!(PureV1 with_types_in bindings);
