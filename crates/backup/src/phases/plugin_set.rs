//! The plugin set a backup is pinned to, recorded with it so that a
//! process taking it over runs the same plugins (rule pinned-plugin-set).

use super::PluginSource;
use super::errors::PhaseError;
use super::journal::Journal;
use super::load::readable;
use iar_core::store::{BackupFile, BackupStore, StoreError};
use iar_plugin::plugin::Plugin;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One plugin of a backup's pinned set, as the store records it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct PinnedPlugin {
    name: String,
    /// sha256 of the component, hex.
    digest: String,
    /// Its write grants (`resource.group`): where it may have created
    /// objects for the backup, which the backup's deletion searches by
    /// the backup's uid label, recorded or not (none recorded before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    writes: Vec<String>,
}

impl PinnedPlugin {
    fn of(plugin: &Plugin) -> Self {
        PinnedPlugin {
            name: plugin.name().to_string(),
            digest: plugin.digest().to_string(),
            writes: plugin
                .settings()
                .write_grants
                .entries()
                .map(str::to_string)
                .collect(),
        }
    }
}

/// The resources (`resource.group`) the plugins pinned to `backup` could
/// write, sorted, each once.
pub async fn recorded_write_grants(
    store: &BackupStore,
    backup: &str,
) -> Result<Vec<String>, StoreError> {
    let recorded: Option<Vec<PinnedPlugin>> = store.get_json(backup, BackupFile::PluginSet).await?;
    let mut writes: Vec<String> = recorded
        .unwrap_or_default()
        .into_iter()
        .flat_map(|p| p.writes)
        .collect();
    writes.sort();
    writes.dedup();
    Ok(writes)
}

/// The plugins (name, sha256 hex) `backup` recorded when it started, or
/// `None` for a backup recorded before iar kept sets: what a process
/// taking it over must load for its operations to go on.
pub async fn recorded_plugins(
    store: &BackupStore,
    backup: &str,
) -> Result<Option<Vec<(String, String)>>, StoreError> {
    let recorded: Option<Vec<PinnedPlugin>> = store.get_json(backup, BackupFile::PluginSet).await?;
    Ok(recorded.map(|r| r.into_iter().map(|p| (p.name, p.digest)).collect()))
}

/// Where plugins come from, and the set each running backup is pinned to.
pub(super) struct PluginSets {
    pub(super) source: PluginSource,
    pinned: Mutex<HashMap<String, Vec<Plugin>>>,
}

impl PluginSets {
    /// A fixed list (every backup gets it).
    pub(super) fn fixed(plugins: Vec<Plugin>) -> Self {
        PluginSets::from_source(Arc::new(move || plugins.clone()))
    }

    pub(super) fn from_source(source: PluginSource) -> Self {
        PluginSets {
            source,
            pinned: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Plugin>>> {
        self.pinned.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pins a new backup to the source's current set and records the set
    /// (names and digests) with the backup, before any plugin runs.
    pub(super) async fn pin_new(
        &self,
        store: &BackupStore,
        backup: &str,
    ) -> Result<(), StoreError> {
        let set = self.for_backup(backup);
        let recorded: Vec<PinnedPlugin> = set.iter().map(PinnedPlugin::of).collect();
        store
            .put_json(backup, BackupFile::PluginSet, &recorded)
            .await
    }

    /// Pins a backup this process takes over (after a restart, or from
    /// another replica) to the set it recorded: each recorded plugin whose
    /// name and digest are loaded now. A plugin of that name with another
    /// digest (an update, or another ConfigMap that claimed the name) does
    /// not inherit the backup's operations: they fail, naming both digests.
    /// A backup recorded before iar kept sets takes the current set.
    pub(super) async fn pin_recorded(
        &self,
        store: &BackupStore,
        journal: &Journal,
        backup: &str,
    ) -> Result<(), PhaseError> {
        if self.lock().contains_key(backup) {
            return Ok(());
        }
        let read = store.get_json(backup, BackupFile::PluginSet).await;
        let mut notes = Vec::new();
        let recorded: Option<Vec<PinnedPlugin>> =
            readable(store, backup, BackupFile::PluginSet, read, &mut notes).await?;
        for note in notes {
            journal.line(backup, note);
        }
        let Some(recorded) = recorded else {
            self.for_backup(backup);
            return Ok(());
        };
        let current = (self.source)();
        let mut set = Vec::new();
        for want in &recorded {
            match current.iter().find(|p| p.name() == want.name) {
                Some(p) if p.digest() == want.digest => set.push(p.clone()),
                found => {
                    let now = match found {
                        Some(p) => format!("the one loaded now is sha256:{}", p.digest()),
                        None => "none of that name is loaded now".to_string(),
                    };
                    journal.line(
                        backup,
                        format!(
                            "plugin {:?}: the version this backup started with (sha256:{}) is not loaded here and {now}; its operations fail rather than pass to another plugin (rule: pinned-plugin-set)",
                            want.name, want.digest
                        ),
                    );
                }
            }
        }
        self.lock().insert(backup.to_string(), set);
        Ok(())
    }

    /// The plugins of a backup: the set it was pinned to, or the source's
    /// current set, pinned from now on.
    pub(super) fn for_backup(&self, backup: &str) -> Vec<Plugin> {
        self.lock()
            .entry(backup.to_string())
            .or_insert_with(|| (self.source)())
            .clone()
    }

    pub(super) fn forget(&self, backup: &str) {
        self.lock().remove(backup);
    }

    pub(super) fn backups(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}
