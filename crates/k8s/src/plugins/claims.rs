//! The claim rule: which of several plugin ConfigMaps holds a plugin
//! name. The oldest wins, decided from the objects alone.

use super::configmap;
use k8s_openapi::api::core::v1::ConfigMap;
use std::collections::BTreeMap;

pub(super) fn name(cm: &ConfigMap) -> String {
    cm.metadata.name.clone().unwrap_or_default()
}

/// Which ConfigMap holds a plugin name. Of the ConfigMaps that claim one
/// (a valid name, not `enabled: "false"`), the oldest `creationTimestamp`
/// holds it, then the smaller uid: decided from the objects alone, so the
/// order events arrive in, or a restart, never moves a name to a newer
/// ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Claim {
    /// Holds its plugin's name (`None`: claims none, being disabled or
    /// badly named); `rivals` are the newer ConfigMaps that claim it too.
    Holds {
        plugin: Option<String>,
        rivals: Vec<String>,
    },
    /// An older ConfigMap holds the name.
    Waits {
        plugin: String,
        winner: String,
        why: String,
    },
}

/// The plugin name a ConfigMap claims.
pub(super) fn claimed_name(cm: &ConfigMap) -> Option<String> {
    let name = configmap::plugin_name(cm).ok()?;
    let disabled = cm
        .data
        .as_ref()
        .and_then(|d| d.get(configmap::KEY_ENABLED))
        .is_some_and(|v| v.trim() == "false");
    (!disabled).then_some(name)
}

/// How old a ConfigMap is, oldest first: its creation time (none sorts
/// last), its uid, its name.
pub(super) fn age(cm: &ConfigMap) -> impl Ord + use<> {
    let created = cm.metadata.creation_timestamp.clone();
    (
        created.is_none(),
        created,
        cm.metadata.uid.clone().unwrap_or_default(),
        name(cm),
    )
}

/// Each claimed plugin name with its claimants, oldest first.
pub(super) fn claimants<'a>(
    objects: impl IntoIterator<Item = &'a ConfigMap>,
) -> BTreeMap<String, Vec<&'a ConfigMap>> {
    let mut claims: BTreeMap<String, Vec<&ConfigMap>> = BTreeMap::new();
    for cm in objects {
        if let Some(plugin) = claimed_name(cm) {
            claims.entry(plugin).or_default().push(cm);
        }
    }
    for list in claims.values_mut() {
        list.sort_by_cached_key(|cm| age(cm));
    }
    claims
}

pub(super) fn claim_of(claims: &BTreeMap<String, Vec<&ConfigMap>>, cm: &ConfigMap) -> Claim {
    let Some(plugin) = claimed_name(cm) else {
        return Claim::Holds {
            plugin: None,
            rivals: Vec::new(),
        };
    };
    let list = &claims[&plugin];
    let winner = list[0];
    if name(winner) == name(cm) {
        return Claim::Holds {
            plugin: Some(plugin),
            rivals: list[1..].iter().map(|c| name(c)).collect(),
        };
    }
    let (theirs, ours) = (
        &winner.metadata.creation_timestamp,
        &cm.metadata.creation_timestamp,
    );
    let why = match (theirs, ours) {
        (Some(t), Some(o)) if t < o => format!("created earlier ({})", t.0),
        (Some(t), Some(_)) => format!("created the same second ({}) with the smaller uid", t.0),
        _ => "first by name (no creation times)".into(),
    };
    Claim::Waits {
        plugin,
        winner: name(winner),
        why,
    }
}

/// What a status message says about the claim, besides the outcome.
pub(super) fn claim_note(claim: &Claim) -> String {
    match claim {
        Claim::Holds {
            plugin: Some(plugin),
            rivals,
        } if !rivals.is_empty() => format!(
            "; plugin {plugin:?} is this ConfigMap's, the oldest of those claiming it: {} also claim it and are not loaded (rule: plugin-name-unique)",
            rivals
                .iter()
                .map(|r| format!("{r:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => String::new(),
    }
}
