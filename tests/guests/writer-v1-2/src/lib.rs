//! Test fixture: a plugin built against `iar:plugin@1.2.0`, world `writer`
//! (`wit/v1.2/plugin.wit`), with `wit-bindgen` directly: its exports are at
//! 1.2.0, not 1.0.0 as an SDK plugin's are. On each pod it creates the
//! ConfigMap `<pod>-marker` in the pod's namespace through `cluster-write`
//! and returns the pod unchanged; a refused create fails the item with the
//! host's answer.

mod bindings {
    wit_bindgen::generate!({
        path: "../../../wit/v1.2",
        world: "iar:plugin/writer@1.2.0",
    });
}

use bindings::exports::iar::plugin::item_action::Guest;
use bindings::iar::plugin::cluster_write::create;
use bindings::iar::plugin::types::{
    ActionError, Backup, ExecuteOutput, OperationProgress, ResourceIdentifier, ResourceSelector,
};

struct Writer;

/// The value of `"key":"..."` in `text`, the first one: enough for a
/// pod's name and namespace without a JSON dependency.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let at = text.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let end = text[at..].find('"')?;
    Some(&text[at..at + end])
}

impl Guest for Writer {
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
        let missing = || ActionError::Failed("the pod has no name or namespace".into());
        let name = format!("{}-marker", field(&item, "name").ok_or_else(missing)?);
        let namespace = field(&item, "namespace").ok_or_else(missing)?.to_string();
        let object = format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"{name}\",\"namespace\":\"{namespace}\"}},\"data\":{{\"by\":\"1.2.0\"}}}}"
        );
        let id = ResourceIdentifier {
            group: String::new(),
            resource: "configmaps".into(),
            namespace,
            name,
        };
        create(&id, &object).map_err(ActionError::Failed)?;
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

bindings::export!(Writer with_types_in bindings);
