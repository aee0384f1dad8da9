//! The restore half of an [`ActionSet`]: Velero's RestoreItemAction v2
//! calls on the plugins that export `restore-item-action`.

use super::{ActionSet, Refusal, parse_item, velero_object};
use iar_core::item::ItemRef;
use iar_core::select::ResourceSelector;
use iar_plugin::contract::Interface;
use iar_plugin::plugin::{Call, Progress, RestoreRef, RestoreResult};
use serde_json::Value;
use std::sync::Arc;

/// Velero's Restore object as the guest sees it.
pub fn restore_ref(plugin: &str, bytes: &[u8]) -> Result<RestoreRef, Refusal> {
    let obj = velero_object(plugin, "restore", bytes)?;
    let field = |ptr: &str| {
        obj.pointer(ptr)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Ok(RestoreRef {
        object: Some(Arc::from(String::from_utf8_lossy(bytes))),
        name: field("/metadata/name"),
        namespace: field("/metadata/namespace"),
        uid: field("/metadata/uid"),
        spec: obj
            .get("spec")
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default())),
    })
}

impl ActionSet {
    /// The plugin's restore-item-action selector; a plugin that exports no
    /// restore action is refused by rule.
    pub fn restore_applies_to(&self, action: &str) -> Result<ResourceSelector, Refusal> {
        let loaded = self.plugin(action)?;
        loaded.plugin.restore_applies_to().cloned().ok_or_else(|| {
            Refusal::BadRequest(format!(
                "plugin {:?}: does not export {} (rule: plugin-world); Velero asked for it as a RestoreItemActionV2",
                loaded.plugin.name(),
                Interface::RestoreItemAction
            ))
        })
    }

    /// The restore action on one item: `item` as Velero will create it,
    /// `from_backup` as it was backed up. The answer's item is the whole
    /// object (Velero's client reads it back whatever the plugin did).
    pub fn restore_execute(
        &self,
        action: &str,
        item: &[u8],
        from_backup: &[u8],
        restore: &[u8],
    ) -> Result<(Arc<str>, RestoreResult), Refusal> {
        let loaded = self.plugin(action)?;
        let plugin = loaded.plugin.name().to_string();
        let restore = restore_ref(&plugin, restore)?;
        let item = parse_item(&plugin, item)?;
        let from_backup = parse_item(&plugin, from_backup)?;
        // As for a backup: an item the read grants do not allow goes back
        // as Velero sent it, unseen (rule `read-grant`).
        if !loaded.plugin.may_read(&item, Call::RestoreExecute) {
            return Ok((item.json().clone(), RestoreResult::default()));
        }
        let started = |id: &str| self.claim_operation(&restore.uid, &plugin, id, &item.id);
        let out = self
            .with_instance(&loaded, |i| {
                i.restore_execute(&item, &from_backup, &restore, &started)
            })
            .map_err(Box::new)?;
        let json = match &out.item {
            Some(changed) => changed.json().clone(),
            None => item.json().clone(),
        };
        Ok((json, out))
    }

    /// A restore operation's progress.
    pub fn restore_progress(
        &self,
        action: &str,
        id: &str,
        restore: &[u8],
    ) -> Result<Progress, Refusal> {
        let loaded = self.plugin(action)?;
        let plugin = loaded.plugin.name().to_string();
        let restore = restore_ref(&plugin, restore)?;
        let item = self.operation_item(&restore.uid, &plugin, id);
        self.with_instance(&loaded, |i| i.restore_progress(id, &item, &restore))
            .map_err(|e| Refusal::Call(Box::new(e)))
    }

    /// Asks the restore action to stop an operation.
    pub fn restore_cancel(&self, action: &str, id: &str, restore: &[u8]) -> Result<(), Refusal> {
        let loaded = self.plugin(action)?;
        let plugin = loaded.plugin.name().to_string();
        let restore = restore_ref(&plugin, restore)?;
        let item = self.operation_item(&restore.uid, &plugin, id);
        self.with_instance(&loaded, |i| i.restore_cancel(id, &item, &restore))
            .map_err(|e| Refusal::Call(Box::new(e)))
    }

    /// Whether the additional items of an earlier execute are ready. Each
    /// identifier Velero sends is checked before the plugin sees it.
    pub fn additional_items_ready(
        &self,
        action: &str,
        items: &[ItemRef],
        restore: &[u8],
    ) -> Result<bool, Refusal> {
        let loaded = self.plugin(action)?;
        let plugin = loaded.plugin.name().to_string();
        let restore = restore_ref(&plugin, restore)?;
        for (index, id) in items.iter().enumerate() {
            iar_core::identifier::check(id).map_err(|part| {
                Refusal::BadRequest(format!(
                    "plugin {plugin:?}: additional item {index} Velero sent has a {part} (rule: {})",
                    iar_core::identifier::RULE
                ))
            })?;
        }
        self.with_instance(&loaded, |i| i.additional_items_ready(items, &restore))
            .map_err(|e| Refusal::Call(Box::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restore_that_is_not_an_object_is_refused_by_rule() {
        for bad in [&b"[]"[..], b"not json", b"\"x\""] {
            let e = restore_ref("p", bad).unwrap_err();
            assert!(e.to_string().contains("restore-is-json-object"), "{e}");
        }
        let r = restore_ref(
            "p",
            br#"{"metadata":{"name":"r","namespace":"velero","uid":"u"},"spec":{"backupName":"b"}}"#,
        )
        .unwrap();
        assert_eq!((r.name.as_str(), r.uid.as_str()), ("r", "u"));
        assert_eq!(r.spec["backupName"], "b");
    }
}
