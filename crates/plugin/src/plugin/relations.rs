//! A plugin's `item-block-action` as a [`Relation`] for
//! [`iar_backup::backup::blocks::form_blocks`].

use super::{BackupRef, Plugin, PluginInstance};
use iar_core::cluster::ClusterReader;
use iar_core::item::{Item, ItemRef};
use std::sync::{Arc, Mutex};

/// A source of related items beyond the built-in ones: an `item-block-action`
/// plugin, or a closure in tests. `name` is used in error messages.
pub trait Relation: Send + Sync {
    fn name(&self) -> &str;
    /// The items that must be in the same block as `item`.
    fn related(&self, item: &Item) -> Result<Vec<ItemRef>, String>;
}

/// A named closure as a [`Relation`].
pub struct FnRelation<F> {
    pub name: String,
    pub f: F,
}

impl<F> Relation for FnRelation<F>
where
    F: Fn(&Item) -> Result<Vec<ItemRef>, String> + Send + Sync,
{
    fn name(&self) -> &str {
        &self.name
    }
    fn related(&self, item: &Item) -> Result<Vec<ItemRef>, String> {
        (self.f)(item)
    }
}

/// Relations from one plugin that exports `item-block-action`, for one
/// backup pass (the `backup` every `get-related-items` call belongs to).
///
/// `Relation` is `Send + Sync` and `related` takes `&self`, while a call
/// needs a `&mut PluginInstance`. The adapter keeps a pool of idle
/// instances: a call takes one out (or makes one when none is idle), runs
/// without any lock held, and puts it back. So it is sound to share across
/// workers (each instance is used by one thread at a time, and
/// `PluginInstance` is `Send`), and concurrent callers never wait on each
/// other's wasm calls. The plugin's isolation policy still holds per
/// instance: with `isolation: item` each call gets a fresh wasm instance.
pub struct PluginRelation {
    plugin: Plugin,
    cluster: Arc<dyn ClusterReader>,
    backup: BackupRef,
    idle: Mutex<Vec<PluginInstance>>,
}

impl PluginRelation {
    /// `None` when the plugin does not export `item-block-action`.
    pub fn new(plugin: Plugin, cluster: Arc<dyn ClusterReader>, backup: BackupRef) -> Option<Self> {
        plugin
            .exports(super::Interface::ItemBlockAction)
            .then(|| PluginRelation {
                plugin,
                cluster,
                backup,
                idle: Mutex::new(Vec::new()),
            })
    }

    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// Instances idle in the pool: at most the number of callers that ever
    /// ran at once.
    pub fn idle_instances(&self) -> usize {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn take(&self) -> PluginInstance {
        // A panic in another caller cannot leave the Vec half-changed.
        let popped = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        popped.unwrap_or_else(|| self.plugin.instance(self.cluster.clone()))
    }

    fn give_back(&self, instance: PluginInstance) {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(instance);
    }
}

impl Relation for PluginRelation {
    fn name(&self) -> &str {
        self.plugin.name()
    }

    fn related(&self, item: &Item) -> Result<Vec<ItemRef>, String> {
        if !self.plugin.block_applies(item) {
            return Ok(Vec::new());
        }
        let mut instance = self.take();
        let result = instance.get_related_items(item, &self.backup);
        // A trapped wasm instance was already discarded inside the
        // PluginInstance; the next call on it makes a fresh one.
        self.give_back(instance);
        result.map_err(|e| e.to_string())
    }
}
