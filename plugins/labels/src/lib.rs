//! Adds labels and annotations, taken from the plugin's config, to every
//! item it applies to.
//!
//! Config: `labels` and `annotations` are `key=value` lists separated by
//! commas (`team=payments,tier=gold`); `resources` narrows which resources
//! it applies to (comma-separated, default: all).

use iar_sdk::{Backup, Error, Item, ItemAction, Output, Result, Selector, config, debug};

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

impl ItemAction for Labels {
    fn applies_to() -> Result<Selector> {
        let resources = config("resources").unwrap_or_default();
        Ok(Selector::resources(
            resources
                .split(',')
                .map(str::trim)
                .filter(|r| !r.is_empty()),
        ))
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

iar_sdk::export!(Labels);
