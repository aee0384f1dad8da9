//! Test fixture: a 1.1.0 plugin that exports both interfaces (through
//! `iar_sdk::export_both!`). Its item action labels every item
//! `block-hostile=seen`; its `get-related-items` does what the config key
//! `related` says:
//!
//! - `names` (default): the ConfigMaps listed in config `names`
//!   (comma-separated), in the item's namespace;
//! - `empty-name`: one identifier with an empty name;
//! - `empty-resource`: one identifier with an empty resource;
//! - `count`: config `count` ConfigMaps `cm-0`, `cm-1`, ...;
//! - `trap`: panics;
//! - `loop`: never returns;
//! - `fail`: answers `failed("no relations today")`.

use iar_sdk::{
    Backup, Error, Item, ItemAction, ItemBlockAction, Output, ResourceId, Result, Selector, config,
};

struct BlockHostile;

impl ItemAction for BlockHostile {
    fn applies_to() -> Result<Selector> {
        Ok(Selector::all())
    }

    fn execute(mut item: Item, _backup: &Backup) -> Result<Output> {
        item.set_label("block-hostile", "seen");
        Ok(Output::item(item))
    }
}

impl ItemBlockAction for BlockHostile {
    fn applies_to() -> Result<Selector> {
        Ok(Selector::resources(["pods"]))
    }

    fn get_related_items(item: Item, _backup: &Backup) -> Result<Vec<ResourceId>> {
        let ns = item.namespace().to_string();
        let cm = |name: &str| ResourceId::namespaced("", "configmaps", &ns, name);
        match config("related").as_deref().unwrap_or("names") {
            "names" => Ok(config("names")
                .unwrap_or_default()
                .split(',')
                .filter(|n| !n.is_empty())
                .map(cm)
                .collect()),
            "empty-name" => Ok(vec![cm("ok"), cm("")]),
            "empty-resource" => Ok(vec![ResourceId::namespaced("", "", &ns, "x")]),
            "count" => {
                let n: usize = config("count").and_then(|c| c.parse().ok()).unwrap_or(0);
                Ok((0..n).map(|i| cm(&format!("cm-{i}"))).collect())
            }
            "trap" => panic!("get-related-items was told to trap"),
            "loop" => {
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "fail" => Err(Error::failed("no relations today")),
            other => Err(Error::failed(format!("unknown related mode {other:?}"))),
        }
    }
}

iar_sdk::export_both!(BlockHostile);
