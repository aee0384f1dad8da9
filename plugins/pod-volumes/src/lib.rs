//! Keeps a workload's storage together: a Pod names the
//! PersistentVolumeClaims it mounts, and a bound PersistentVolumeClaim names
//! its PersistentVolume, so they are backed up with it.

use iar_sdk::{Backup, Item, ItemAction, Output, ResourceId, Result, Selector};
use serde::Deserialize;

struct PodVolumes;

/// The fields read, of a Pod or a PersistentVolumeClaim, in one pass: the
/// rest of the object is skipped, not parsed (`Item::parse_as`).
#[derive(Deserialize)]
struct Object {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Metadata,
    spec: Option<Spec>,
}

#[derive(Default, Deserialize)]
struct Metadata {
    #[serde(default)]
    namespace: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    /// A Pod's.
    volumes: Option<Vec<Volume>>,
    /// A PersistentVolumeClaim's.
    volume_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Volume {
    persistent_volume_claim: Option<Claim>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Claim {
    claim_name: Option<String>,
}

impl ItemAction for PodVolumes {
    fn applies_to() -> Result<Selector> {
        Ok(Selector::resources(["pods", "persistentvolumeclaims"]))
    }

    fn execute(item: Item, _backup: &Backup) -> Result<Output> {
        let object = item.parse_as::<Object>()?;
        let Some(spec) = object.spec else {
            return Ok(Output::unchanged());
        };
        let namespace = &object.metadata.namespace;
        let related: Vec<ResourceId> = match object.kind.as_str() {
            "Pod" => spec
                .volumes
                .into_iter()
                .flatten()
                .filter_map(|v| v.persistent_volume_claim?.claim_name)
                .map(|claim| {
                    ResourceId::namespaced("", "persistentvolumeclaims", namespace, &claim)
                })
                .collect(),
            "PersistentVolumeClaim" => spec
                .volume_name
                .filter(|pv| !pv.is_empty())
                .map(|pv| ResourceId::cluster("", "persistentvolumes", &pv))
                .into_iter()
                .collect(),
            _ => Vec::new(),
        };
        Ok(Output::unchanged().with_additional_items(related))
    }
}

iar_sdk::export!(PodVolumes);
