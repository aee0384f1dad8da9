//! The loaded plugins, as one immutable set per generation. A backup takes
//! [`PluginRegistry::current`] when it starts and keeps that `Arc`: a
//! reload publishes a new set and never changes one a backup holds.

use iar_plugin::plugin::Plugin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
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

/// The latest failure of a ConfigMap watch that is failing now. kube's
/// watcher tries again after [`retry_in`](Self::retry_in); the failure is
/// gone once the watch delivers again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchFailure {
    /// The label the watch selects by: `iar.dev/plugin`, or Velero's
    /// `velero.io/plugin-config`.
    pub label: &'static str,
    /// Failures in a row.
    pub attempt: u32,
    /// How long the watch waits before it tries again: growing with
    /// `attempt`, at most [`super::MAX_RETRY_DELAY`].
    pub retry_in: Duration,
    /// What failed (what to grant, when the API server refused) and when
    /// it is retried: the line logged.
    pub message: String,
}

pub struct PluginRegistry {
    current: RwLock<Arc<PluginSet>>,
    synced: AtomicBool,
    generation: watch::Sender<u64>,
    failures: watch::Sender<Vec<WatchFailure>>,
}

impl PluginRegistry {
    /// An empty registry at generation 0, not yet synced.
    pub fn new() -> Arc<Self> {
        Arc::new(PluginRegistry {
            current: RwLock::new(Arc::new(PluginSet::default())),
            synced: AtomicBool::new(false),
            generation: watch::Sender::new(0),
            failures: watch::Sender::new(Vec::new()),
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

    /// The ConfigMap watches failing now, each with its latest failure (in
    /// label order); empty while every watch delivers.
    pub fn watch_failures(&self) -> watch::Receiver<Vec<WatchFailure>> {
        self.failures.subscribe()
    }

    /// Records a watch's failure, replacing its previous one.
    pub(crate) fn watch_failed(&self, failure: WatchFailure) {
        self.failures.send_modify(|all| {
            all.retain(|f| f.label != failure.label);
            all.push(failure);
            all.sort_by_key(|f| f.label);
        });
    }

    /// The watch selecting by `label` delivered: its failure, if it had
    /// one, is removed and returned.
    pub(crate) fn watch_recovered(&self, label: &str) -> Option<WatchFailure> {
        let mut was = None;
        self.failures.send_if_modified(|all| {
            let at = all.iter().position(|f| f.label == label);
            was = at.map(|at| all.remove(at));
            was.is_some()
        });
        was
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
