//! The plugin set a backup is pinned to, recorded with it so that a
//! process taking it over runs the same plugins (rule pinned-plugin-set).

use iar_core::store::{BackupFile, StoreError};
use iar_plugin::plugin::Plugin;

use super::*;

/// One plugin of a backup's pinned set, as the store records it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct PinnedPlugin {
    name: String,
    /// sha256 of the component, hex.
    digest: String,
}

impl PinnedPlugin {
    fn of(plugin: &Plugin) -> Self {
        PinnedPlugin {
            name: plugin.name().to_string(),
            digest: plugin.digest().to_string(),
        }
    }
}

impl PhaseMachine {
    /// Pins a new backup to the source's current set and records the set
    /// (names and digests) with the backup, before any plugin runs.
    pub(super) async fn pin_new(&self, backup: &str) -> Result<(), StoreError> {
        let set = self.plugins_for(backup);
        let recorded: Vec<PinnedPlugin> = set.iter().map(PinnedPlugin::of).collect();
        self.store
            .put_json(backup, BackupFile::PluginSet, &recorded)
            .await
    }

    /// Pins a backup this process takes over (after a restart, or from
    /// another replica) to the set it recorded: each recorded plugin whose
    /// name and digest are loaded now. A plugin of that name with another
    /// digest (an update, or another ConfigMap that claimed the name) does
    /// not inherit the backup's operations: they fail, naming both digests.
    /// A backup recorded before iar kept sets takes the current set.
    pub(super) async fn pin_recorded(&self, backup: &str) -> Result<(), PhaseError> {
        if self
            .pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(backup)
        {
            return Ok(());
        }
        let read = self.store.get_json(backup, BackupFile::PluginSet).await;
        let mut notes = Vec::new();
        let recorded: Option<Vec<PinnedPlugin>> = self
            .readable(backup, BackupFile::PluginSet, read, &mut notes)
            .await?;
        for note in notes {
            self.journal.line(backup, note);
        }
        let Some(recorded) = recorded else {
            self.plugins_for(backup);
            return Ok(());
        };
        let current = (self.plugins)();
        let mut set = Vec::new();
        for want in &recorded {
            match current.iter().find(|p| p.name() == want.name) {
                Some(p) if p.digest() == want.digest => set.push(p.clone()),
                found => {
                    let now = match found {
                        Some(p) => format!("the one loaded now is sha256:{}", p.digest()),
                        None => "none of that name is loaded now".to_string(),
                    };
                    self.journal.line(
                        backup,
                        format!(
                            "plugin {:?}: the version this backup started with (sha256:{}) is not loaded here and {now}; its operations fail rather than pass to another plugin (rule: pinned-plugin-set)",
                            want.name, want.digest
                        ),
                    );
                }
            }
        }
        self.pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(backup.to_string(), set);
        Ok(())
    }

    /// The plugins of a backup: the set it was pinned to, or the source's
    /// current set, pinned from now on.
    pub(super) fn plugins_for(&self, backup: &str) -> Vec<Plugin> {
        let mut pinned = self.pinned.lock().unwrap_or_else(|p| p.into_inner());
        pinned
            .entry(backup.to_string())
            .or_insert_with(|| (self.plugins)())
            .clone()
    }
}
