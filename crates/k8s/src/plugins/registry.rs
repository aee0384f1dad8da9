//! The loaded plugins, as one immutable set per generation. A backup takes
//! [`PluginRegistry::current`] when it starts and keeps that `Arc`: a
//! reload publishes a new set and never changes one a backup holds.

use iar_plugin::plugin::Plugin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use tokio::sync::watch;

/// The plugins of one generation, in `order`, then name.
#[derive(Debug, Default)]
pub struct PluginSet {
    pub generation: u64,
    pub plugins: Vec<Plugin>,
}

impl PluginSet {
    /// The plugin of that name in this set.
    pub fn get(&self, name: &str) -> Option<&Plugin> {
        self.plugins.iter().find(|p| p.name() == name)
    }
}

pub struct PluginRegistry {
    current: RwLock<Arc<PluginSet>>,
    synced: AtomicBool,
    generation: watch::Sender<u64>,
}

impl PluginRegistry {
    /// An empty registry at generation 0, not yet synced.
    pub fn new() -> Arc<Self> {
        Arc::new(PluginRegistry {
            current: RwLock::new(Arc::new(PluginSet::default())),
            synced: AtomicBool::new(false),
            generation: watch::Sender::new(0),
        })
    }

    /// The set in force now; a backup pins the `Arc` it started with.
    pub fn current(&self) -> Arc<PluginSet> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether the first full list of plugin ConfigMaps has been applied.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Returns once the first full list of plugin ConfigMaps is applied:
    /// a backup started before would run without the plugins it was meant
    /// to have, and report no error.
    pub async fn wait_synced(&self) {
        // Subscribed before the check, so a publish in between still wakes.
        let mut generations = self.subscribe();
        while !self.is_synced() {
            if generations.changed().await.is_err() {
                return;
            }
        }
    }

    /// Receives each new generation number.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Publishes a new generation holding `plugins` (with their order) and
    /// returns its number. `synced` is set before subscribers hear of it,
    /// so one woken by the first generation sees `is_synced`.
    pub(crate) fn publish(&self, plugins: Vec<(i64, Plugin)>, synced: bool) -> u64 {
        let mut plugins = plugins;
        plugins.sort_by(|(a, pa), (b, pb)| a.cmp(b).then_with(|| pa.name().cmp(pb.name())));
        let generation = {
            let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
            let generation = current.generation + 1;
            *current = Arc::new(PluginSet {
                generation,
                plugins: plugins.into_iter().map(|(_, p)| p).collect(),
            });
            generation
        };
        if synced {
            self.synced.store(true, Ordering::Release);
        }
        self.generation.send_replace(generation);
        generation
    }
}
