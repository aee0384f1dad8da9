//! Keeps a Pod in one item block with the ConfigMaps it reads, so that the
//! block's hooks run around the Pod and its settings together (contract
//! 1.1.0, `item-block-action` only).
//!
//! A Pod's related ConfigMaps: those mounted as volumes
//! (`spec.volumes[].configMap.name`), those loaded as environment
//! (`spec.containers[].envFrom[].configMapRef.name`), and those named in the
//! annotation `iar.dev/related-configmaps` (comma-separated), all in the
//! Pod's namespace. Config: `annotation` renames the annotation.

use iar_sdk::{Backup, Item, ItemBlockAction, ResourceId, Result, Selector, Value, config};

struct ConfigBlock;

const ANNOTATION: &str = "iar.dev/related-configmaps";

fn names_at<'a>(v: &'a Value, list: &str, field: &str) -> impl Iterator<Item = &'a str> {
    v.pointer(list)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(move |e| e.pointer(field)?.as_str())
}

impl ItemBlockAction for ConfigBlock {
    fn applies_to() -> Result<Selector> {
        Ok(Selector::resources(["pods"]))
    }

    fn get_related_items(item: Item, _backup: &Backup) -> Result<Vec<ResourceId>> {
        let pod = item.json();
        let mut names: Vec<String> = Vec::new();
        names.extend(names_at(pod, "/spec/volumes", "/configMap/name").map(String::from));
        for container in names_at_values(pod, "/spec/containers") {
            names.extend(names_at(container, "/envFrom", "/configMapRef/name").map(String::from));
        }
        let annotation = config("annotation").unwrap_or_else(|| ANNOTATION.to_string());
        if let Some(list) = item.annotation(&annotation) {
            names.extend(list.split(',').map(|n| n.trim().to_string()));
        }
        let mut seen: Vec<String> = Vec::new();
        for name in names.into_iter().filter(|n| !n.is_empty()) {
            if !seen.contains(&name) {
                seen.push(name);
            }
        }
        Ok(seen
            .iter()
            .map(|name| ResourceId::namespaced("", "configmaps", item.namespace(), name))
            .collect())
    }
}

fn names_at_values<'a>(v: &'a Value, list: &str) -> impl Iterator<Item = &'a Value> {
    v.pointer(list)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

iar_sdk::export_block_action!(ConfigBlock);
