//! A plugin's settings: [`PluginSettings`] as the host applies them, and
//! [`SettingsFile`], the same as an operator writes them in YAML: the `NAME.yaml`
//! beside `NAME.wasm` for `iar backup`, and the `settings:` of an
//! `iar test` file. One format, so a tested setting is the deployed one.

use crate::limits::Limits;
use iar_core::cluster::ReadGrants;
use iar_core::cluster::mutate::MutateGrants;
use iar_core::cluster::writes::WriteGrants;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
    /// What the guest may change in the items it returns (`allowMutate`):
    /// a returned item is created by a restore, or stored for one, so a
    /// change is a write; nothing by default.
    pub mutate_grants: MutateGrants,
    /// The cluster the load's `applies-to` calls read, where the plugin
    /// will run against one: a plugin on Velero's framework initializes
    /// its action (and its clients, discovery included) at its first
    /// call, and Velero's built-ins read the API server there. By default
    /// none (manifests or nothing answer as without a cluster).
    pub load_cluster: LoadCluster,
}

/// [`PluginSettings::load_cluster`].
#[derive(Clone, Default)]
pub struct LoadCluster(pub Option<std::sync::Arc<dyn iar_core::cluster::ClusterReader>>);

impl std::fmt::Debug for LoadCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Some(_) => "LoadCluster(Some(..))",
            None => "LoadCluster(None)",
        })
    }
}

impl PluginSettings {
    /// The grants in one line, as the ConfigMap's status and `iar plugin
    /// velero-install` show them: `reads [*], creates [], changes []`.
    pub fn grants_summary(&self) -> String {
        let list = |v: Vec<&str>| format!("[{}]", v.join(", "));
        format!(
            "reads {}, creates {}, changes {}",
            list(self.grants.patterns().collect()),
            list(self.write_grants.entries().collect()),
            list(self.mutate_grants.entries().collect()),
        )
    }
}

/// `config`, `limits`, `allowRead`, `allowWrite` and `allowMutate`; unknown fields are errors, so a typo
/// is not silently a default.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct SettingsFile {
    pub config: BTreeMap<String, String>,
    pub limits: Limits,
    pub allow_read: Option<Vec<String>>,
    /// Resources the plugin may create, by exact `resource.group`.
    pub allow_write: Vec<String>,
    /// Resources whose items the plugin may change: globs over
    /// `resource.group`, RBAC, webhooks, Secrets and ServiceAccounts only
    /// by exact name, a pod's security fields only by `RESOURCE/security`.
    pub allow_mutate: Vec<String>,
}

/// Settings that cannot be read or applied.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("reading plugin settings {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A settings file's YAML, or what it says, does not read.
    #[error("{}{source}", path.as_ref().map(|p| format!("plugin settings {}: ", p.display())).unwrap_or_default())]
    Parse {
        /// The file, when the settings are one.
        path: Option<PathBuf>,
        #[source]
        source: Box<iar_core::yaml::Error>,
    },
    #[error(transparent)]
    Grant(#[from] iar_core::cluster::GrantError),
}

impl SettingsFile {
    /// Reads a settings file; a missing file is the defaults.
    pub fn read_or_default(path: &Path) -> Result<SettingsFile, SettingsError> {
        if !path.exists() {
            return Ok(SettingsFile::default());
        }
        let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        iar_core::yaml::from_str(&text).map_err(|e| SettingsError::Parse {
            path: Some(path.to_path_buf()),
            source: Box::new(e),
        })
    }

    /// Parses a YAML (or JSON) document; empty text is the defaults.
    pub fn parse(text: &str) -> Result<SettingsFile, SettingsError> {
        if text.trim().is_empty() {
            return Ok(SettingsFile::default());
        }
        iar_core::yaml::from_str(text).map_err(|e| SettingsError::Parse {
            path: None,
            source: Box::new(e),
        })
    }

    /// The settings a plugin is loaded with; `extra` config wins over the file's.
    pub fn into_settings(
        self,
        extra: impl IntoIterator<Item = (String, String)>,
    ) -> Result<PluginSettings, SettingsError> {
        let grants = match &self.allow_read {
            Some(list) => ReadGrants::only(list)?,
            None => ReadGrants::default(),
        };
        let write_grants = WriteGrants::only(&self.allow_write)?;
        let mutate_grants = MutateGrants::only(&self.allow_mutate)?;
        let mut config = self.config;
        config.extend(extra);
        Ok(PluginSettings {
            limits: self.limits,
            config,
            grants,
            write_grants,
            mutate_grants,
            load_cluster: LoadCluster::default(),
        })
    }
}
