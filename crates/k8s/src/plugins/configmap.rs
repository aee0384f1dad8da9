//! One plugin ConfigMap: what it says (parsed without touching the network
//! or the compiler), the digest check, the Velero plugin-config convention,
//! and the manifest `iar plugin configmap` prints. Everything here is pure,
//! so every rule is unit-tested without a server.

use iar_plugin::plugin::PluginSettings;
use iar_plugin::plugin::SettingsFile;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The label that makes a ConfigMap in iar's namespace a plugin.
pub const LABEL: &str = "iar.dev/plugin";
/// Velero's label for ConfigMaps that configure a plugin.
pub const VELERO_LABEL: &str = "velero.io/plugin-config";
/// The plugin kinds whose Velero plugin-config iar reads (v2 is what iar
/// runs; v1 maps are accepted so existing ones keep working).
pub const VELERO_KINDS: [&str; 2] = ["BackupItemAction", "BackupItemActionV2"];

pub const KEY_WASM: &str = "plugin.wasm";
pub const KEY_SHA256: &str = "sha256";
pub const KEY_REFERENCE: &str = "reference";
pub const KEY_ENABLED: &str = "enabled";
pub const KEY_ORDER: &str = "order";
pub const KEY_SETTINGS: &str = "settings.yaml";
pub const KEY_NAME: &str = "name";

/// Kubernetes refuses a ConfigMap whose data and binaryData values add up
/// to more than 1 MiB.
pub const CONFIGMAP_LIMIT: usize = 1 << 20;
/// A referenced component larger than this is refused before it is read
/// whole: no plugin is near it, and an unbounded read is a memory risk.
pub const MAX_REFERENCED_BYTES: u64 = 64 << 20;

/// A ConfigMap that does not describe a loadable plugin. Each names the
/// ConfigMap and ends with the rule.
#[derive(Debug, thiserror::Error)]
pub enum ConfigMapError {
    #[error(
        "ConfigMap {configmap:?}: data.sha256 is missing; a plugin's component needs its sha256 (rule: digest-required)"
    )]
    DigestMissing { configmap: String },
    #[error(
        "ConfigMap {configmap:?}: data.sha256 {value:?} is not 64 hexadecimal digits (rule: digest-required)"
    )]
    DigestMalformed { configmap: String, value: String },
    /// Names the expected digest only: the digest of what was read would
    /// tell whoever wrote the ConfigMap something about a file they cannot
    /// read (a reference to another's file is a digest oracle otherwise).
    #[error(
        "ConfigMap {configmap:?}: the component does not have the sha256 data.sha256 names ({expected}) (rule: digest-match)"
    )]
    DigestMismatch { configmap: String, expected: String },
    #[error(
        "ConfigMap {configmap:?}: has neither binaryData.plugin.wasm nor data.reference (rule: plugin-source)"
    )]
    NoSource { configmap: String },
    #[error(
        "ConfigMap {configmap:?}: has both binaryData.plugin.wasm and data.reference; keep one (rule: plugin-source)"
    )]
    BothSources { configmap: String },
    #[error(
        "ConfigMap {configmap:?}: data.reference {value:?} is neither an absolute path nor an https:// URL (rule: plugin-source)"
    )]
    BadReference { configmap: String, value: String },
    #[error("ConfigMap {configmap:?}: data.reference {reference}: {reason} (rule: reference-dir)")]
    ReferenceRefused {
        configmap: String,
        reference: String,
        reason: String,
    },
    #[error("ConfigMap {configmap:?}: cannot read {reference}: {reason} (rule: plugin-source)")]
    SourceUnavailable {
        configmap: String,
        reference: String,
        #[source]
        reason: super::load::Unavailable,
    },
    #[error(
        "ConfigMap {configmap:?}: data.enabled {value:?} is not \"true\" or \"false\" (rule: plugin-settings)"
    )]
    BadEnabled { configmap: String, value: String },
    #[error(
        "ConfigMap {configmap:?}: data.order {value:?} is not an integer (rule: plugin-settings)"
    )]
    BadOrder { configmap: String, value: String },
    #[error("ConfigMap {configmap:?}: data.settings.yaml: {source} (rule: plugin-settings)")]
    Settings {
        configmap: String,
        #[source]
        source: iar_plugin::plugin::SettingsError,
    },
    #[error(
        "ConfigMap {configmap:?}: data.name {value:?} is not a plugin name (1 to 253 of a-z, 0-9, '.', '-', '_', '/') (rule: plugin-name)"
    )]
    BadName { configmap: String, value: String },
    #[error(
        "ConfigMap {configmap:?}: plugin {plugin:?} is configured by more than one Velero plugin-config ConfigMap: {found} (rule: plugin-settings)"
    )]
    VeleroConfigAmbiguous {
        configmap: String,
        plugin: String,
        found: String,
    },
}

impl ConfigMapError {
    /// The rule's short name, as at the end of the message.
    pub fn rule(&self) -> &'static str {
        use ConfigMapError::*;
        match self {
            DigestMissing { .. } | DigestMalformed { .. } => "digest-required",
            DigestMismatch { .. } => "digest-match",
            ReferenceRefused { .. } => "reference-dir",
            NoSource { .. }
            | BothSources { .. }
            | BadReference { .. }
            | SourceUnavailable { .. } => "plugin-source",
            BadName { .. } => "plugin-name",
            BadEnabled { .. }
            | BadOrder { .. }
            | Settings { .. }
            | VeleroConfigAmbiguous { .. } => "plugin-settings",
        }
    }
}

/// Where the component's bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// In `binaryData.plugin.wasm`.
    Inline(Vec<u8>),
    /// A file on a volume mounted into iar's pod.
    Path(PathBuf),
    /// An `https://` URL.
    Url(String),
}

impl Source {
    /// What to call it in messages.
    pub fn describe(&self) -> String {
        match self {
            Source::Inline(_) => format!("binaryData.{KEY_WASM}"),
            Source::Path(p) => p.display().to_string(),
            Source::Url(u) => u.clone(),
        }
    }
}

/// What one plugin ConfigMap says.
#[derive(Clone, Debug)]
pub struct PluginSpec {
    /// The ConfigMap's name.
    pub configmap: String,
    /// The plugin's name: `data.name`, else the ConfigMap's name.
    pub name: String,
    pub enabled: bool,
    /// Plugins run in ascending `order`, then by name; default 0.
    pub order: i64,
    /// Lowercase hex.
    pub sha256: String,
    pub source: Source,
    /// From `settings.yaml`, without any Velero plugin-config.
    pub settings: PluginSettings,
}

fn name_of(cm: &ConfigMap) -> String {
    cm.metadata.name.clone().unwrap_or_default()
}

fn valid_plugin_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'_' | b'/')
        })
}

/// The plugin name a ConfigMap declares, if it is a valid one.
pub fn plugin_name(cm: &ConfigMap) -> Result<String, ConfigMapError> {
    let configmap = name_of(cm);
    let data = cm.data.as_ref();
    match data.and_then(|d| d.get(KEY_NAME)) {
        None => Ok(configmap),
        Some(value) if valid_plugin_name(value) => Ok(value.clone()),
        Some(value) => Err(ConfigMapError::BadName {
            configmap,
            value: value.clone(),
        }),
    }
}

/// Parses a plugin ConfigMap. Checks everything that can be checked
/// without reading a referenced component: the digest's presence and form,
/// the source, `enabled`, `order`, `name`, and `settings.yaml`.
pub fn parse(cm: &ConfigMap) -> Result<PluginSpec, ConfigMapError> {
    let configmap = name_of(cm);
    let empty = BTreeMap::new();
    let data = cm.data.as_ref().unwrap_or(&empty);
    let name = plugin_name(cm)?;
    let sha256 = match data.get(KEY_SHA256).map(|s| s.trim()) {
        None | Some("") => return Err(ConfigMapError::DigestMissing { configmap }),
        // `sha256:` is accepted because `iar inspect` prints digests so.
        Some(value) => {
            let hex = value.strip_prefix("sha256:").unwrap_or(value);
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(ConfigMapError::DigestMalformed {
                    configmap,
                    value: value.to_string(),
                });
            }
            hex.to_ascii_lowercase()
        }
    };
    let inline = cm
        .binary_data
        .as_ref()
        .and_then(|b| b.get(KEY_WASM))
        .map(|b| b.0.clone());
    let source = match (inline, data.get(KEY_REFERENCE).map(|r| r.trim())) {
        (Some(_), Some(_)) => return Err(ConfigMapError::BothSources { configmap }),
        (None, None) => return Err(ConfigMapError::NoSource { configmap }),
        (Some(bytes), None) => Source::Inline(bytes),
        (None, Some(reference)) => {
            if reference.starts_with("https://") && reference.len() > "https://".len() {
                Source::Url(reference.to_string())
            } else if reference.starts_with('/') {
                Source::Path(PathBuf::from(reference))
            } else {
                return Err(ConfigMapError::BadReference {
                    configmap,
                    value: reference.to_string(),
                });
            }
        }
    };
    let enabled = match data.get(KEY_ENABLED).map(|s| s.trim()) {
        None | Some("true") => true,
        Some("false") => false,
        Some(other) => {
            return Err(ConfigMapError::BadEnabled {
                configmap,
                value: other.to_string(),
            });
        }
    };
    let order = match data.get(KEY_ORDER) {
        None => 0,
        Some(value) => value
            .trim()
            .parse::<i64>()
            .map_err(|_| ConfigMapError::BadOrder {
                configmap: configmap.clone(),
                value: value.clone(),
            })?,
    };
    let settings_error = |source| ConfigMapError::Settings {
        configmap: configmap.clone(),
        source,
    };
    let settings = SettingsFile::parse(data.get(KEY_SETTINGS).map_or("", String::as_str))
        .and_then(|doc| doc.into_settings([]))
        .map_err(settings_error)?;
    Ok(PluginSpec {
        configmap,
        name,
        enabled,
        order,
        sha256,
        source,
        settings,
    })
}

/// Checks the component's bytes against the ConfigMap's digest; done
/// before anything parses or compiles them.
pub fn verify(spec: &PluginSpec, bytes: &[u8]) -> Result<(), ConfigMapError> {
    if hex::encode(Sha256::digest(bytes)) == spec.sha256 {
        Ok(())
    } else {
        Err(ConfigMapError::DigestMismatch {
            configmap: spec.configmap.clone(),
            expected: spec.sha256.clone(),
        })
    }
}

/// Whether a Velero plugin-config ConfigMap configures `plugin`. Velero's
/// convention (`GetPluginConfig`): the label `velero.io/plugin-config`, and
/// a label whose key is the plugin's name and whose value is its kind
/// (`velero.io/change-storage-class: RestoreItemAction`). Velero's plugin
/// names carry a prefix, so the key matches with any prefix as well
/// (`example.io/labels` configures plugin `labels`).
pub fn velero_configures(cm: &ConfigMap, plugin: &str) -> bool {
    let Some(labels) = cm.metadata.labels.as_ref() else {
        return false;
    };
    labels.contains_key(VELERO_LABEL)
        && labels.iter().any(|(key, value)| {
            VELERO_KINDS.contains(&value.as_str())
                && (key == plugin || key.rsplit_once('/').is_some_and(|(_, n)| n == plugin))
        })
}

/// The config a plugin gets from Velero plugin-config ConfigMaps: the data
/// of the one that configures it. More than one is an error, as in Velero.
pub fn velero_config<'a>(
    configmap: &str,
    plugin: &str,
    velero: impl IntoIterator<Item = &'a ConfigMap>,
) -> Result<BTreeMap<String, String>, ConfigMapError> {
    let matching: Vec<&ConfigMap> = velero
        .into_iter()
        .filter(|cm| velero_configures(cm, plugin))
        .collect();
    match matching.as_slice() {
        [] => Ok(BTreeMap::new()),
        [one] => Ok(one.data.clone().unwrap_or_default()),
        many => Err(ConfigMapError::VeleroConfigAmbiguous {
            configmap: configmap.to_string(),
            plugin: plugin.to_string(),
            found: many
                .iter()
                .map(|cm| name_of(cm))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// The settings a plugin is loaded with: its `settings.yaml` config over
/// the Velero plugin-config (the plugin's own ConfigMap is the more
/// specific, so it wins a key both set).
pub fn merged_settings(spec: &PluginSpec, velero: BTreeMap<String, String>) -> PluginSettings {
    let mut settings = spec.settings.clone();
    let mut config = velero;
    config.extend(std::mem::take(&mut settings.config));
    settings.config = config;
    settings
}

/// What a load depends on, hashed: the ConfigMap's data and binaryData and
/// the Velero config it gets. Metadata (iar's own status annotations
/// included) is left out, so writing the status never causes a reload.
pub fn fingerprint(cm: &ConfigMap, velero: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    let mut field = |tag: &str, key: &str, value: &[u8]| {
        for part in [tag.as_bytes(), key.as_bytes(), value] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
    };
    for (k, v) in cm.data.iter().flatten() {
        field("data", k, v.as_bytes());
    }
    for (k, v) in cm.binary_data.iter().flatten() {
        field("binaryData", k, &v.0);
    }
    for (k, v) in velero {
        field("velero", k, v.as_bytes());
    }
    hex::encode(h.finalize())
}

/// Why `iar plugin configmap` cannot make a manifest.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error(
        "plugin {name:?}: a ConfigMap holding it would be {size} bytes, over Kubernetes' limit of {limit}; put the component on a volume or an https server and pass --reference (rule: configmap-size)"
    )]
    TooLarge {
        name: String,
        size: usize,
        limit: usize,
    },
    #[error(transparent)]
    Invalid(#[from] ConfigMapError),
}

/// What goes into a plugin ConfigMap.
#[derive(Clone, Debug, Default)]
pub struct ManifestInput {
    /// The ConfigMap's (and so the plugin's) name.
    pub name: String,
    pub namespace: String,
    /// The component; hashed, and inlined unless `reference` is given.
    pub component: Vec<u8>,
    /// `settings.yaml`, verbatim.
    pub settings: Option<String>,
    pub order: Option<i64>,
    /// A path or `https://` URL where the same bytes are.
    pub reference: Option<String>,
}

/// A plugin ConfigMap, validated by [`parse`] as the watcher will.
pub fn manifest(input: ManifestInput) -> Result<ConfigMap, ManifestError> {
    let mut data = BTreeMap::from([(
        KEY_SHA256.to_string(),
        hex::encode(Sha256::digest(&input.component)),
    )]);
    if let Some(settings) = input.settings {
        data.insert(KEY_SETTINGS.into(), settings);
    }
    if let Some(order) = input.order {
        data.insert(KEY_ORDER.into(), order.to_string());
    }
    let binary_data = match input.reference {
        Some(reference) => {
            data.insert(KEY_REFERENCE.into(), reference);
            None
        }
        None => Some(BTreeMap::from([(
            KEY_WASM.to_string(),
            ByteString(input.component),
        )])),
    };
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(input.name.clone()),
            namespace: Some(input.namespace),
            labels: Some(BTreeMap::from([(LABEL.to_string(), "true".to_string())])),
            ..ObjectMeta::default()
        },
        data: Some(data),
        binary_data,
        ..ConfigMap::default()
    };
    let size = configmap_size(&cm);
    if size > CONFIGMAP_LIMIT {
        return Err(ManifestError::TooLarge {
            name: input.name,
            size,
            limit: CONFIGMAP_LIMIT,
        });
    }
    parse(&cm)?;
    Ok(cm)
}

/// The size Kubernetes checks against its limit: every data and binaryData
/// value, and (to stay on the safe side) every key.
pub fn configmap_size(cm: &ConfigMap) -> usize {
    let data: usize = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    let binary: usize = cm
        .binary_data
        .iter()
        .flatten()
        .map(|(k, v)| k.len() + v.0.len())
        .sum();
    data + binary
}

#[cfg(test)]
mod tests;
