//! Adds labels and annotations, taken from the plugin's config, to every
//! item it applies to when backed up; when restored, annotates each item
//! with the backup it came from (`iar.dev/restored-from: BACKUP`), so that
//! who looks at a restored object knows where it was restored from.
//!
//! Config: `labels` and `annotations` are `key=value` lists separated by
//! commas (`team=payments,tier=gold`); `resources` narrows which resources
//! it applies to (comma-separated, default: all), when backing up and when
//! restoring; `restored-from` renames the restore's annotation, and `-`
//! turns it off.
//!
//! Changing an item is a write: the operator grants it `allowMutate` for
//! what it applies to (`['*']`; ServiceAccounts, Secrets, RBAC and webhook
//! configurations only by their exact names, if it should label them).

use iar_sdk::{
    Backup, Error, Item, ItemAction, Output, RestoreInput, RestoreItemAction, RestoreOutput,
    Result, Selector, config, debug,
};

struct Labels;

fn pairs(key: &str) -> Result<Vec<(String, String)>> {
    let Some(list) = config(key) else {
        return Ok(Vec::new());
    };
    list.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().into(), v.trim().into())),
            _ => Err(Error::failed(format!(
                "config {key}: {p:?} is not key=value"
            ))),
        })
        .collect()
}

/// The annotation a restored item gets, unless the config turns it off.
const RESTORED_FROM: &str = "iar.dev/restored-from";

fn selector() -> Selector {
    let resources = config("resources").unwrap_or_default();
    Selector::resources(
        resources
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty()),
    )
}

impl ItemAction for Labels {
    fn applies_to() -> Result<Selector> {
        Ok(selector())
    }

    fn execute(mut item: Item, _backup: &Backup) -> Result<Output> {
        let (labels, annotations) = (pairs("labels")?, pairs("annotations")?);
        if labels.is_empty() && annotations.is_empty() {
            return Ok(Output::unchanged());
        }
        for (k, v) in &labels {
            item.set_label(k, v);
        }
        for (k, v) in &annotations {
            item.set_annotation(k, v);
        }
        debug!("labelled {} {}", item.kind(), item.name());
        Ok(Output::item(item))
    }
}

impl RestoreItemAction for Labels {
    fn applies_to() -> Result<Selector> {
        Ok(selector())
    }

    fn execute(input: RestoreInput) -> Result<RestoreOutput> {
        let key = config("restored-from").unwrap_or_else(|| RESTORED_FROM.to_string());
        let backup = input.restore.backup_name();
        if key == "-" || backup.is_empty() {
            return Ok(RestoreOutput::unchanged());
        }
        let mut item = input.item;
        item.set_annotation(&key, backup);
        debug!("{} {} restored from {backup}", item.kind(), item.name());
        Ok(RestoreOutput::item(item))
    }
}

iar_sdk::export_plugin!(item_action = Labels, restore_action = Labels);
