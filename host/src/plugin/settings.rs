//! The settings document an operator writes for one plugin: `NAME.yaml`
//! beside `NAME.wasm`, or the settings of a plugin ConfigMap. One format,
//! so a plugin moves from a directory to a cluster unchanged.

use super::PluginSettings;
use crate::cluster::ReadGrants;
use crate::limits::Limits;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct SettingsDoc {
    /// Answers to the plugin's `config(key)`.
    pub config: BTreeMap<String, String>,
    pub limits: Limits,
    /// Resources (globs over `resource.group`) `cluster-get` may read;
    /// absent: everything but Secrets.
    pub allow_read: Option<Vec<String>>,
}

impl SettingsDoc {
    /// Parses a YAML (or JSON) document; unknown keys are errors, so a typo
    /// never silently drops a limit.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(SettingsDoc::default());
        }
        serde_yaml::from_str(text).map_err(|e| e.to_string())
    }

    /// The settings, with `extra` config entries added over the document's.
    pub fn into_settings(
        self,
        extra: impl IntoIterator<Item = (String, String)>,
    ) -> Result<PluginSettings, String> {
        let grants = match &self.allow_read {
            Some(list) => ReadGrants::only(list)?,
            None => ReadGrants::default(),
        };
        let mut config = self.config;
        config.extend(extra);
        Ok(PluginSettings {
            limits: self.limits,
            config,
            grants,
        })
    }
}
