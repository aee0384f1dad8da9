//! A plugin's settings: [`PluginSettings`] as the host applies them, and
//! [`SettingsFile`], the same as an operator writes them in YAML: the `NAME.yaml`
//! beside `NAME.wasm` for `iar backup`, and the `settings:` of an
//! `iar test` file. One format, so a tested setting is the deployed one.

use crate::limits::Limits;
use iar_core::cluster::ReadGrants;
use iar_core::cluster::writes::WriteGrants;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// How the operator configured one plugin.
#[derive(Clone, Debug, Default)]
pub struct PluginSettings {
    pub limits: Limits,
    /// Answers to the guest's `config(key)`.
    pub config: BTreeMap<String, String>,
    /// What the guest may read through `cluster-get`.
    pub grants: ReadGrants,
    /// What the guest may create (and delete once created) through
    /// `cluster-write` (contract 1.2.0); nothing by default.
    pub write_grants: WriteGrants,
}

/// `config`, `limits`, `allowRead` and `allowWrite`; unknown fields are errors, so a typo
/// is not silently a default.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct SettingsFile {
    pub config: BTreeMap<String, String>,
    pub limits: Limits,
    pub allow_read: Option<Vec<String>>,
    /// Resources the plugin may create, by exact `resource.group`.
    pub allow_write: Vec<String>,
}

impl SettingsFile {
    /// Reads a settings file; a missing file is the defaults.
    pub fn read_or_default(path: &Path) -> anyhow::Result<SettingsFile> {
        use anyhow::Context;
        if !path.exists() {
            return Ok(SettingsFile::default());
        }
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading plugin settings {}", path.display()))?;
        serde_yaml::from_str(&text).with_context(|| format!("plugin settings {}", path.display()))
    }

    /// Parses a YAML (or JSON) document; empty text is the defaults.
    pub fn parse(text: &str) -> Result<SettingsFile, String> {
        if text.trim().is_empty() {
            return Ok(SettingsFile::default());
        }
        serde_yaml::from_str(text).map_err(|e| e.to_string())
    }

    /// The settings a plugin is loaded with; `extra` config wins over the file's.
    pub fn into_settings(
        self,
        extra: impl IntoIterator<Item = (String, String)>,
    ) -> Result<PluginSettings, String> {
        let grants = match &self.allow_read {
            Some(list) => ReadGrants::only(list)?,
            None => ReadGrants::default(),
        };
        let write_grants = WriteGrants::only(&self.allow_write)?;
        let mut config = self.config;
        config.extend(extra);
        Ok(PluginSettings {
            limits: self.limits,
            config,
            grants,
            write_grants,
        })
    }
}
