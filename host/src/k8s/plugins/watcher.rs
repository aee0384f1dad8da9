//! The watch loop: plugin ConfigMaps and Velero plugin-config ConfigMaps in
//! one namespace, reconciled into the registry.

use super::configmap::{self, LABEL, VELERO_LABEL};
use super::load::{self, LoadFailure};
use super::registry::PluginRegistry;
use super::status::{Report, Status, StatusWriter};
use crate::engine::Runtime;
use crate::plugin::Plugin;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// kube's watcher retries errors with a backoff and never ends; this is
    /// returned if it does all the same.
    #[error("the watch of plugin ConfigMaps in namespace {namespace:?} ended")]
    Ended { namespace: String },
    #[error("plugin ConfigMaps in namespace {namespace:?}: {reason}")]
    Https { namespace: String, reason: String },
}

/// Options of [`watch_with`].
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    /// PEM certificates trusted for `https://` references besides the
    /// platform's roots (an internal CA).
    pub extra_roots_pem: Option<Vec<u8>>,
}

/// Runs until the future is dropped: watches ConfigMaps labelled
/// `iar.dev/plugin` in `namespace` (and Velero plugin-config ConfigMaps),
/// loads/reloads/unloads plugins into `registry`.
pub async fn watch(
    client: kube::Client,
    namespace: String,
    runtime: Runtime,
    registry: Arc<PluginRegistry>,
) -> Result<(), WatchError> {
    watch_with(
        client,
        namespace,
        runtime,
        registry,
        WatchOptions::default(),
    )
    .await
}

/// [`watch`], with options.
pub async fn watch_with(
    client: kube::Client,
    namespace: String,
    runtime: Runtime,
    registry: Arc<PluginRegistry>,
    options: WatchOptions,
) -> Result<(), WatchError> {
    let https = load::https_client(options.extra_roots_pem.as_deref()).map_err(|reason| {
        WatchError::Https {
            namespace: namespace.clone(),
            reason,
        }
    })?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let plugins = watcher::watcher(api.clone(), watcher::Config::default().labels(LABEL))
        .default_backoff()
        .map(|e| (Kind::Plugin, e));
    let velero = watcher::watcher(api, watcher::Config::default().labels(VELERO_LABEL))
        .default_backoff()
        .map(|e| (Kind::Velero, e));
    let mut events = std::pin::pin!(futures::stream::select(plugins, velero));
    let mut state = State {
        runtime,
        registry,
        writer: StatusWriter::new(client, &namespace),
        https,
        plugins: Store::default(),
        velero: Store::default(),
        loaded: BTreeMap::new(),
        attempts: BTreeMap::new(),
        published: false,
    };
    while let Some((kind, event)) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                tracing::warn!(%namespace, "watching plugin ConfigMaps: {e}; retrying");
                continue;
            }
        };
        let store = match kind {
            Kind::Plugin => &mut state.plugins,
            Kind::Velero => &mut state.velero,
        };
        if store.apply(event) {
            state.reconcile().await;
        }
    }
    Err(WatchError::Ended { namespace })
}

#[derive(Clone, Copy)]
enum Kind {
    Plugin,
    Velero,
}

/// The ConfigMaps one watch has seen. A (re)list is buffered until it is
/// complete, so objects deleted while the watch was down disappear at once
/// and the first reconcile sees every plugin.
#[derive(Default)]
struct Store {
    objects: BTreeMap<String, ConfigMap>,
    buffer: Option<BTreeMap<String, ConfigMap>>,
    synced: bool,
}

fn name(cm: &ConfigMap) -> String {
    cm.metadata.name.clone().unwrap_or_default()
}

impl Store {
    /// Applies an event; true when the objects changed.
    fn apply(&mut self, event: Event<ConfigMap>) -> bool {
        match event {
            Event::Init => {
                self.buffer = Some(BTreeMap::new());
                false
            }
            Event::InitApply(cm) => {
                self.buffer
                    .get_or_insert_with(BTreeMap::new)
                    .insert(name(&cm), cm);
                false
            }
            Event::InitDone => {
                self.objects = self.buffer.take().unwrap_or_default();
                self.synced = true;
                true
            }
            Event::Apply(cm) => {
                self.objects.insert(name(&cm), cm);
                true
            }
            Event::Delete(cm) => {
                self.objects.remove(&name(&cm));
                true
            }
        }
    }
}

struct Loaded {
    name: String,
    order: i64,
    plugin: Plugin,
}

/// The last load attempted for a ConfigMap: what it was of, and how it
/// ended. An unchanged fingerprint is not attempted again, so iar's own
/// status patches (which change only metadata) never cause a reload.
struct Attempt {
    fingerprint: String,
    resource_version: Option<String>,
    /// The Velero config it was made with (or the error finding it).
    velero: BTreeMap<String, String>,
    /// For a `NameConflict`: the plugin name and the ConfigMap holding it.
    conflict: Option<(String, String)>,
}

struct State {
    runtime: Runtime,
    registry: Arc<PluginRegistry>,
    writer: StatusWriter,
    https: reqwest::Client,
    plugins: Store,
    velero: Store,
    /// By ConfigMap name.
    loaded: BTreeMap<String, Loaded>,
    attempts: BTreeMap<String, Attempt>,
    /// Whether a synced generation was published yet.
    published: bool,
}

enum Outcome {
    Loaded(Loaded, std::time::Duration),
    Disabled,
    Failed(LoadFailure),
}

impl State {
    async fn reconcile(&mut self) {
        // Nothing is published from a partial view: a plugin whose Velero
        // config has not been listed yet would load with the wrong config.
        if !(self.plugins.synced && self.velero.synced) {
            return;
        }
        let mut changed = !self.published;
        let objects = &self.plugins.objects;
        let before = self.loaded.len();
        self.loaded.retain(|cm, _| objects.contains_key(cm));
        changed |= self.loaded.len() != before;
        self.attempts.retain(|cm, _| objects.contains_key(cm));
        // A ConfigMap refused for a name another one held is tried again
        // once that one no longer holds it (deleted, disabled, renamed).
        let loaded = &self.loaded;
        self.attempts.retain(|_, a| match &a.conflict {
            Some((plugin, other)) => loaded.get(other).is_some_and(|l| &l.name == plugin),
            None => true,
        });

        let mut reports = Vec::new();
        let names: Vec<String> = self.plugins.objects.keys().cloned().collect();
        for cm_name in names {
            let cm = &self.plugins.objects[&cm_name];
            let velero = match configmap::plugin_name(cm) {
                Ok(plugin) => {
                    configmap::velero_config(&cm_name, &plugin, self.velero.objects.values())
                }
                Err(_) => Ok(BTreeMap::new()),
            };
            let velero_key = match &velero {
                Ok(config) => config.clone(),
                Err(e) => BTreeMap::from([(String::from("\0error"), e.to_string())]),
            };
            let resource_version = cm.metadata.resource_version.clone();
            // Cheap checks first: an unchanged object is not hashed again
            // (a plugin ConfigMap can hold a MiB).
            if let Some(a) = self.attempts.get_mut(&cm_name) {
                if resource_version.is_some()
                    && a.resource_version == resource_version
                    && a.velero == velero_key
                {
                    continue;
                }
                if a.fingerprint == configmap::fingerprint(cm, &velero_key) {
                    a.resource_version = resource_version;
                    a.velero = velero_key;
                    continue;
                }
            }
            let fingerprint = configmap::fingerprint(cm, &velero_key);
            let cm = cm.clone();
            let parsed = configmap::parse(&cm);
            let outcome = match (parsed, velero) {
                (Err(e), _) | (Ok(_), Err(e)) => Outcome::Failed(e.into()),
                (Ok(spec), Ok(velero)) => self.attempt(spec, velero).await,
            };
            let conflict = match &outcome {
                Outcome::Failed(LoadFailure::NameConflict { plugin, other, .. }) => {
                    Some((plugin.clone(), other.clone()))
                }
                _ => None,
            };
            let (status, message) = match outcome {
                Outcome::Loaded(entry, took) => {
                    let plugin = &entry.plugin;
                    let message = format!(
                        "plugin {:?} loaded: contract {}, sha256:{}, order {}, in {} ms",
                        plugin.name(),
                        plugin.version(),
                        plugin.digest(),
                        entry.order,
                        took.as_millis()
                    );
                    tracing::info!(configmap = %cm_name, "{message}");
                    self.loaded.insert(cm_name.clone(), entry);
                    changed = true;
                    (Status::Ready, message)
                }
                Outcome::Disabled => {
                    changed |= self.loaded.remove(&cm_name).is_some();
                    (
                        Status::Disabled,
                        format!(
                            "ConfigMap {cm_name:?}: enabled is \"false\"; the plugin is not loaded"
                        ),
                    )
                }
                Outcome::Failed(failure) => {
                    let status = failure.status();
                    crate::metrics::global().load_failure(status.as_str());
                    let kept = match self.loaded.get(&cm_name) {
                        Some(l) => format!(
                            "; the previous version (sha256:{}) stays loaded",
                            l.plugin.digest()
                        ),
                        None => String::new(),
                    };
                    let message = format!("{failure}{kept}");
                    tracing::warn!(configmap = %cm_name, "{message}");
                    (status, message)
                }
            };
            self.attempts.insert(
                cm_name,
                Attempt {
                    fingerprint,
                    resource_version,
                    velero: velero_key,
                    conflict,
                },
            );
            reports.push((cm, status, message));
        }

        if changed {
            let set = self
                .loaded
                .values()
                .map(|l| (l.order, l.plugin.clone()))
                .collect();
            self.registry.publish(set, true);
            self.published = true;
        }
        let generation = self.registry.current().generation;
        for (configmap, status, message) in reports {
            let loaded_digest = self
                .loaded
                .get(&name(&configmap))
                .map(|l| l.plugin.digest().to_string());
            let report = Report {
                configmap,
                status,
                message,
                loaded_digest,
            };
            self.writer.write(&report, generation).await;
        }
    }

    async fn attempt(
        &self,
        mut spec: configmap::PluginSpec,
        velero: BTreeMap<String, String>,
    ) -> Outcome {
        if !spec.enabled {
            return Outcome::Disabled;
        }
        if let Some((other, _)) = self
            .loaded
            .iter()
            .find(|(cm, l)| **cm != spec.configmap && l.name == spec.name)
        {
            return Outcome::Failed(LoadFailure::NameConflict {
                configmap: spec.configmap.clone(),
                plugin: spec.name.clone(),
                other: other.clone(),
            });
        }
        let started = Instant::now();
        if let configmap::Source::Url(url) = &spec.source {
            match load::fetch(&self.https, &spec.configmap, url).await {
                Ok(bytes) => spec.source = configmap::Source::Inline(bytes),
                Err(e) => return Outcome::Failed(e.into()),
            }
        }
        let runtime = self.runtime.clone();
        let configmap = spec.configmap.clone();
        let (name, order) = (spec.name.clone(), spec.order);
        // Compiling is CPU-heavy and blocking; it must not stall the
        // async runtime the controller and the API server share.
        match tokio::task::spawn_blocking(move || load::load(&runtime, &spec, velero)).await {
            Ok(Ok(plugin)) => Outcome::Loaded(
                Loaded {
                    name,
                    order,
                    plugin,
                },
                started.elapsed(),
            ),
            Ok(Err(failure)) => Outcome::Failed(failure),
            Err(e) => Outcome::Failed(LoadFailure::Panicked {
                configmap,
                reason: e.to_string(),
            }),
        }
    }
}
