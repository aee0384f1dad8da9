//! Keeps a workload's storage together: a Pod names the
//! PersistentVolumeClaims it mounts, and a bound PersistentVolumeClaim names
//! its PersistentVolume, so they are backed up with it.

use iar_sdk::{Backup, Item, ItemAction, Output, ResourceId, Result, Selector};

struct PodVolumes;

impl ItemAction for PodVolumes {
    fn applies_to() -> Result<Selector> {
        Ok(Selector::resources(["pods", "persistentvolumeclaims"]))
    }

    fn execute(item: Item, _backup: &Backup) -> Result<Output> {
        let json = item.json();
        let related: Vec<ResourceId> = match item.kind() {
            "Pod" => json["spec"]["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
                .map(|claim| {
                    ResourceId::namespaced("", "persistentvolumeclaims", item.namespace(), claim)
                })
                .collect(),
            "PersistentVolumeClaim" => json["spec"]["volumeName"]
                .as_str()
                .filter(|pv| !pv.is_empty())
                .map(|pv| ResourceId::cluster("", "persistentvolumes", pv))
                .into_iter()
                .collect(),
            _ => Vec::new(),
        };
        Ok(Output::unchanged().with_additional_items(related))
    }
}

iar_sdk::export!(PodVolumes);
