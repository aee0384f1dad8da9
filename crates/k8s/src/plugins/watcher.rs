//! The watch loop: plugin ConfigMaps and Velero plugin-config ConfigMaps in
//! one namespace (kube-runtime's watches and stores, [`super::watches`]),
//! reconciled into the registry.

use super::claims::{Claim, claim_note, claim_of, claimants, name};
use super::configmap::{self, PluginSpec, Source};
use super::load::{self, LoadFailure};
use super::policy::GrantPolicy;
use super::registry::PluginRegistry;
use super::status::{Report, Status, StatusWriter};
use super::watches::{self, Kind};
use futures::{FutureExt, StreamExt};
use iar_plugin::plugin::Plugin;
use iar_plugin::runtime::Runtime;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher::Event;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// The default of [`WatchOptions::read_timeout`].
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// The default of [`WatchOptions::compile_timeout`]: a first compile of a
/// 15 MB component (a JavaScript plugin) takes 35 s on an idle machine.
pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// kube's watcher retries every failure after a backoff (logged, and
    /// kept in the registry) and never ends; this is returned if it does
    /// all the same.
    #[error("the watch of plugin ConfigMaps in namespace {namespace:?} ended")]
    Ended { namespace: String },
    #[error("plugin ConfigMaps in namespace {namespace:?}: {reason}")]
    Https {
        namespace: String,
        #[source]
        reason: super::load::HttpsClientError,
    },
}

/// Options of [`watch_with`].
#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// PEM certificates trusted for `https://` references besides the
    /// platform's roots (an internal CA).
    pub extra_roots_pem: Option<Vec<u8>>,
    /// What any plugin ConfigMap may grant its plugin; one that asks for
    /// more is `GrantRefused`.
    pub grant_policy: GrantPolicy,
    /// The directory `data.reference` paths must be in; `None` (the
    /// default): path references are refused.
    pub reference_dir: Option<PathBuf>,
    /// How long reading one component (an https fetch, a file) may take.
    pub read_timeout: Duration,
    /// How long verifying, compiling and calling `applies-to` of one
    /// component may take, once a compile slot is free.
    pub compile_timeout: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            extra_roots_pem: None,
            grant_policy: GrantPolicy::default(),
            reference_dir: None,
            read_timeout: DEFAULT_READ_TIMEOUT,
            compile_timeout: DEFAULT_COMPILE_TIMEOUT,
        }
    }
}

/// [`watch_with`] for as long as the process runs, its error (if it
/// returns one) logged. It has nothing to restart: kube's watcher retries
/// each failure of the watch itself, after a growing delay of at most
/// [`super::MAX_RETRY_DELAY`]; what [`watch_with`] returns is a setup
/// error (the https client), which trying again would not mend.
pub async fn watch_forever(
    client: kube::Client,
    namespace: String,
    runtime: Runtime,
    registry: Arc<PluginRegistry>,
    options: WatchOptions,
) {
    if let Err(e) = watch_with(client, namespace, runtime, registry, options).await {
        tracing::error!("{e}; plugin ConfigMaps are not loaded");
    }
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

/// [`watch`], with options. A failure of a watch (the API server down, a
/// list or watch refused) is logged, with the rule to grant when access
/// was refused, and recorded in the registry
/// ([`PluginRegistry::watch_failures`]); the watch is tried again after a
/// delay that grows from 800 ms to [`super::MAX_RETRY_DELAY`], and nothing
/// is published before both watches have listed once.
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
    let (plugins, plugin_events) = watches::watch(api.clone(), &namespace, Kind::Plugin);
    let (velero, velero_events) = watches::watch(api, &namespace, Kind::Velero);
    let mut events = std::pin::pin!(futures::stream::select(plugin_events, velero_events));
    let slots = std::thread::available_parallelism().map_or(1, usize::from);
    let mut state = State {
        loader: Loader {
            runtime,
            https,
            reference_dir: options.reference_dir,
            read_timeout: options.read_timeout,
            compile_timeout: options.compile_timeout,
            compile: Arc::new(Semaphore::new(slots)),
        },
        policy: options.grant_policy,
        registry,
        writer: StatusWriter::new(client, &namespace),
        plugins: Watched::new(plugins),
        velero: Watched::new(velero),
        namespace: namespace.clone(),
        loaded: BTreeMap::new(),
        attempts: BTreeMap::new(),
        next_ticket: 0,
        changed: false,
        published: false,
    };
    // Loads run as tasks of their own, so that a slow one (an https
    // server that trickles, a long compile) never holds up the others or
    // the events; dropping the watch aborts them.
    let mut loads: JoinSet<Job> = JoinSet::new();
    loop {
        tokio::select! {
            next = events.next() => {
                let Some((kind, event)) = next else { break };
                let event = match event {
                    Ok(event) => event,
                    Err(failure) => {
                        tracing::warn!(%namespace, "{}", failure.message);
                        state.registry.watch_failed(failure);
                        continue;
                    }
                };
                if let Some(was) = state.registry.watch_recovered(kind.label()) {
                    tracing::info!(
                        %namespace,
                        "the ConfigMaps labelled {} are watched again, after {} failures",
                        kind.label(),
                        was.attempt
                    );
                }
                let watched = match kind {
                    Kind::Plugin => &mut state.plugins,
                    Kind::Velero => &mut state.velero,
                };
                if watched.changed_by(&event) {
                    state.converge(&mut loads).await;
                }
            }
            Some(done) = loads.join_next(), if !loads.is_empty() => {
                // A task's panic is caught inside it; a join error is an abort.
                if let Ok(job) = done {
                    state.finish(job).await;
                }
            }
        }
    }
    Err(WatchError::Ended { namespace })
}

/// The ConfigMaps one watch has seen: kube's store, which the event was
/// applied to before it got here. A (re)list is buffered there until it
/// is complete, so objects deleted while the watch was down disappear at
/// once and the first reconcile sees every plugin.
struct Watched {
    store: reflector::Store<ConfigMap>,
    /// Whether a first list is complete.
    synced: bool,
}

impl Watched {
    fn new(store: reflector::Store<ConfigMap>) -> Self {
        Watched {
            store,
            synced: false,
        }
    }

    /// Whether `event` (already in the store) changed its objects.
    fn changed_by(&mut self, event: &Event<ConfigMap>) -> bool {
        match event {
            Event::Init | Event::InitApply(_) => false,
            Event::InitDone => {
                self.synced = true;
                true
            }
            Event::Apply(_) | Event::Delete(_) => true,
        }
    }

    /// The objects now, by name.
    fn by_name(&self) -> BTreeMap<String, Arc<ConfigMap>> {
        self.store
            .state()
            .into_iter()
            .map(|cm| (name(&cm), cm))
            .collect()
    }
}

struct Loaded {
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
    claim: Claim,
    /// The ticket of the load running for it; a result with another
    /// ticket is of a version since replaced, and dropped.
    running: Option<u64>,
    /// How it ended (status and message, without the claim's note).
    settled: Option<(Status, String)>,
}

/// What a load task needs, cloned into each.
#[derive(Clone)]
struct Loader {
    runtime: Runtime,
    https: reqwest::Client,
    reference_dir: Option<PathBuf>,
    read_timeout: Duration,
    compile_timeout: Duration,
    /// Compiles at once: one per core. Waiting for a slot is not counted
    /// against the compile timeout.
    compile: Arc<Semaphore>,
}

/// A finished load task.
struct Job {
    configmap: String,
    ticket: u64,
    outcome: Outcome,
}

struct State {
    loader: Loader,
    policy: GrantPolicy,
    registry: Arc<PluginRegistry>,
    writer: StatusWriter,
    plugins: Watched,
    velero: Watched,
    namespace: String,
    /// By ConfigMap name.
    loaded: BTreeMap<String, Loaded>,
    attempts: BTreeMap<String, Attempt>,
    next_ticket: u64,
    /// Whether `loaded` changed since the last published generation.
    changed: bool,
    /// Whether a synced generation was published yet.
    published: bool,
}

enum Outcome {
    Loaded(Loaded, Duration),
    Disabled,
    Failed(LoadFailure),
}

impl Loader {
    /// Reads, verifies and loads one plugin, each stage under its timeout.
    async fn attempt(self, mut spec: PluginSpec, velero: BTreeMap<String, String>) -> Outcome {
        let started = Instant::now();
        let configmap = spec.configmap.clone();
        let panicked = |e: tokio::task::JoinError| LoadFailure::Panicked {
            configmap: configmap.clone(),
            reason: e.to_string(),
        };
        let timed_out = |stage: String, after: Duration| {
            Outcome::Failed(LoadFailure::TimedOut {
                configmap: configmap.clone(),
                stage,
                after,
            })
        };
        let reference = spec.source.describe();
        let read = async {
            match &spec.source {
                Source::Inline(_) => Ok(None),
                Source::Url(url) => load::fetch(&self.https, &configmap, url)
                    .await
                    .map(Some)
                    .map_err(LoadFailure::from),
                Source::Path(path) => {
                    let (cm, path, dir) =
                        (configmap.clone(), path.clone(), self.reference_dir.clone());
                    tokio::task::spawn_blocking(move || load::read_path(&cm, &path, dir.as_deref()))
                        .await
                        .map_err(panicked)?
                        .map(Some)
                        .map_err(LoadFailure::from)
                }
            }
        };
        match tokio::time::timeout(self.read_timeout, read).await {
            Err(_) => return timed_out(format!("reading {reference}"), self.read_timeout),
            Ok(Err(failure)) => return Outcome::Failed(failure),
            Ok(Ok(Some(bytes))) => spec.source = Source::Inline(bytes),
            Ok(Ok(None)) => {}
        }
        // Never closed, so acquiring only waits.
        let Ok(_slot) = self.compile.clone().acquire_owned().await else {
            return Outcome::Failed(LoadFailure::Panicked {
                configmap,
                reason: "the compile slots are gone".into(),
            });
        };
        let order = spec.order;
        let runtime = self.runtime.clone();
        // Compiling is CPU-heavy and blocking; it must not stall the
        // async runtime the controller and the API server share. A load
        // abandoned at its timeout runs on to its end on its thread; its
        // result is dropped.
        let compile = tokio::task::spawn_blocking(move || load::load(&runtime, &spec, velero));
        match tokio::time::timeout(self.compile_timeout, compile).await {
            Err(_) => timed_out(
                "verifying, compiling and calling applies-to".into(),
                self.compile_timeout,
            ),
            Ok(Ok(Ok(plugin))) => Outcome::Loaded(Loaded { order, plugin }, started.elapsed()),
            Ok(Ok(Err(failure))) => Outcome::Failed(failure),
            Ok(Err(e)) => Outcome::Failed(panicked(e)),
        }
    }
}

impl State {
    async fn converge(&mut self, loads: &mut JoinSet<Job>) {
        // Nothing is published from a partial view: a plugin whose Velero
        // config has not been listed yet would load with the wrong config.
        if !(self.plugins.synced && self.velero.synced) {
            return;
        }
        let objects = self.plugins.by_name();
        let velero_configs = self.velero.store.state();
        let before = self.loaded.len();
        self.loaded.retain(|cm, _| objects.contains_key(cm));
        self.changed |= self.loaded.len() != before;
        // A deleted ConfigMap's running load is dropped when it ends.
        let writer = &self.writer;
        self.attempts.retain(|cm, _| {
            let kept = objects.contains_key(cm);
            if !kept {
                writer.forget(cm);
            }
            kept
        });
        let mut claims = {
            let claimants = claimants(objects.values().map(Arc::as_ref));
            objects
                .iter()
                .map(|(n, cm)| (n.clone(), claim_of(&claimants, cm)))
                .collect::<BTreeMap<_, _>>()
        };

        let mut reports = Vec::new();
        for (cm_name, cm) in &objects {
            let cm_name = cm_name.clone();
            let claim = claims.remove(&cm_name).expect("a claim per ConfigMap");
            let velero = match configmap::plugin_name(cm) {
                Ok(plugin) => configmap::velero_config(
                    &cm_name,
                    &plugin,
                    velero_configs.iter().map(Arc::as_ref),
                ),
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
                let unchanged = (resource_version.is_some()
                    && a.resource_version == resource_version
                    && a.velero == velero_key)
                    || a.fingerprint == configmap::fingerprint(cm, &velero_key);
                if unchanged {
                    a.resource_version = resource_version.clone();
                    a.velero = velero_key.clone();
                    match (&a.claim, &claim) {
                        (old, new) if old == new => continue,
                        // Only who else claims the name changed: the
                        // status says so, nothing reloads.
                        (Claim::Holds { plugin: old, .. }, Claim::Holds { plugin: new, .. })
                            if old == new =>
                        {
                            a.claim = claim;
                            if let Some((status, message)) = &a.settled {
                                let message = format!("{message}{}", claim_note(&a.claim));
                                reports.push((cm.clone(), *status, message));
                            }
                            continue;
                        }
                        _ => {}
                    }
                }
            }
            let fingerprint = configmap::fingerprint(cm, &velero_key);
            let mut attempt = Attempt {
                fingerprint,
                resource_version,
                velero: velero_key,
                claim: claim.clone(),
                running: None,
                settled: None,
            };
            let outcome = match claim {
                Claim::Waits {
                    plugin,
                    winner,
                    why,
                } => Some(Outcome::Failed(LoadFailure::NameConflict {
                    configmap: cm_name.clone(),
                    plugin,
                    winner,
                    why,
                })),
                Claim::Holds { .. } => match (configmap::parse(cm), velero) {
                    (Err(e), _) | (Ok(_), Err(e)) => Some(Outcome::Failed(e.into())),
                    (Ok(spec), _) if !spec.enabled => Some(Outcome::Disabled),
                    (Ok(spec), Ok(velero)) => {
                        let mut refused = self.policy.refusals(&spec.settings);
                        if let super::configmap::Source::Url(url) = &spec.source {
                            refused.extend(self.policy.reference_refusal(url));
                        }
                        if refused.is_empty() {
                            let ticket = self.next_ticket;
                            self.next_ticket += 1;
                            attempt.running = Some(ticket);
                            let loader = self.loader.clone();
                            let configmap = cm_name.clone();
                            loads.spawn(async move {
                                let outcome =
                                    std::panic::AssertUnwindSafe(loader.attempt(spec, velero))
                                        .catch_unwind()
                                        .await
                                        .unwrap_or_else(|panic| {
                                            Outcome::Failed(LoadFailure::Panicked {
                                                configmap: configmap.clone(),
                                                reason: panic_reason(&panic),
                                            })
                                        });
                                Job {
                                    configmap,
                                    ticket,
                                    outcome,
                                }
                            });
                            None
                        } else {
                            Some(Outcome::Failed(LoadFailure::GrantRefused {
                                configmap: cm_name.clone(),
                                plugin: spec.name,
                                refused,
                            }))
                        }
                    }
                },
            };
            self.attempts.insert(cm_name.clone(), attempt);
            if let Some(outcome) = outcome {
                reports.push(self.settle(&cm_name, cm.clone(), outcome));
            }
        }
        self.publish_and_report(reports).await;
    }

    /// A load task ended: its outcome counts if it is still the attempt
    /// of its ConfigMap's current version.
    async fn finish(&mut self, job: Job) {
        let current = self
            .attempts
            .get(&job.configmap)
            .is_some_and(|a| a.running == Some(job.ticket));
        let key = ObjectRef::new(&job.configmap).within(&self.namespace);
        let Some(cm) = self.plugins.store.get(&key) else {
            return;
        };
        if !current {
            return;
        }
        if let Some(a) = self.attempts.get_mut(&job.configmap) {
            a.running = None;
        }
        let report = self.settle(&job.configmap, cm, job.outcome);
        self.publish_and_report(vec![report]).await;
    }

    /// Applies an outcome to the loaded set and the attempt; the report to
    /// write.
    fn settle(
        &mut self,
        cm_name: &str,
        cm: Arc<ConfigMap>,
        outcome: Outcome,
    ) -> (Arc<ConfigMap>, Status, String) {
        let (status, message) = match outcome {
            Outcome::Loaded(entry, took) => {
                let plugin = &entry.plugin;
                let message = format!(
                    "plugin {:?} loaded: contract {}, sha256:{}, order {}, in {} ms; {}",
                    plugin.name(),
                    plugin.version(),
                    plugin.digest(),
                    entry.order,
                    took.as_millis(),
                    plugin.settings().grants_summary()
                );
                tracing::info!(configmap = %cm_name, "{message}");
                self.loaded.insert(cm_name.to_string(), entry);
                self.changed = true;
                (Status::Ready, message)
            }
            Outcome::Disabled => {
                self.changed |= self.loaded.remove(cm_name).is_some();
                (
                    Status::Disabled,
                    format!(
                        "ConfigMap {cm_name:?}: enabled is \"false\"; the plugin is not loaded"
                    ),
                )
            }
            Outcome::Failed(failure) => {
                let status = failure.status();
                iar_core::metrics::global().load_failure(status.as_str());
                // A name taken by an older ConfigMap is not kept serving
                // from this one: the older one holds it now.
                if matches!(failure, LoadFailure::NameConflict { .. }) {
                    self.changed |= self.loaded.remove(cm_name).is_some();
                }
                let kept = match self.loaded.get(cm_name) {
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
        let note = match self.attempts.get_mut(cm_name) {
            Some(a) => {
                a.settled = Some((status, message.clone()));
                claim_note(&a.claim)
            }
            None => String::new(),
        };
        (cm, status, format!("{message}{note}"))
    }

    /// Publishes a generation when the loaded set changed, but the first
    /// one only once every load of the first sync has ended (each bounded
    /// by its timeouts); then writes the statuses.
    async fn publish_and_report(&mut self, reports: Vec<(Arc<ConfigMap>, Status, String)>) {
        let idle = self.attempts.values().all(|a| a.running.is_none());
        if (self.published && self.changed) || (!self.published && idle) {
            let set = self
                .loaded
                .values()
                .map(|l| (l.order, l.plugin.clone()))
                .collect();
            self.registry.publish(set, true);
            self.published = true;
            self.changed = false;
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
}

fn panic_reason(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

#[cfg(test)]
mod tests;
