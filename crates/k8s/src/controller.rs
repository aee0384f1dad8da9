//! `iar controller`: the pieces put together. Every replica serves health
//! and metrics and drives backups (each backup by one replica, as its
//! store lease says); only the leader collects garbage.

use super::crd::Backup;
use super::exec::PodExecRunner;
use super::leader::Elector;
use super::live::LiveCluster;
use super::plugins::{PluginRegistry, WatchOptions, watch_forever};
use super::reconcile::{Context, error_policy, reconcile};
use super::resource::patch_status;
use super::serve::{Health, serve};
use super::volume_requests::RequestBackupper;
use futures::StreamExt;
use iar_backup::backup::object::{BackupObject, BackupStatus};
use iar_backup::phases::{PhaseMachine, PluginSource, Settings, StatusSink};
use iar_core::store::BackupStore;
use iar_plugin::{Plugin, Runtime};
use kube::api::Api;
use kube::runtime::{Controller, watcher};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub struct Options {
    /// Where Backups, plugin ConfigMaps and the leader Lease live.
    pub namespace: String,
    /// `/healthz`, `/readyz`, `/metrics`.
    pub listen: SocketAddr,
    pub lease_name: String,
    /// This replica's name in the Lease (the pod name in a cluster).
    pub identity: String,
    pub leader_lease: Duration,
    pub settings: Settings,
    pub store: BackupStore,
    /// When it resolves (SIGTERM, in `iar controller`), the replica starts
    /// no new step, lets the steps running now finish for at most
    /// [`Options::drain`], and gives back the leases of the backups it
    /// drives, so another replica takes them at once. None: it runs until
    /// the watch ends.
    pub shutdown: Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// How long a stopping replica lets running steps finish: a backup's
    /// first pass cut short cannot be resumed (its items are not
    /// written), so it ends Failed as in Velero; one that finishes goes on
    /// in another replica. Less than the pod's termination grace period.
    pub drain: Duration,
    /// How long a node agent may say nothing about a volume backup request
    /// (not take it, or stop reporting) before it fails; more than the
    /// agents' heartbeat ([`super::node_agent::HEARTBEAT`]).
    pub volume_agent_silence: Duration,
    /// The image a restored pod's `restore-wait` init container runs
    /// (iar's own), and how long one pod volume's restore may take.
    pub restore_helper_image: String,
    pub pod_volume_timeout: Duration,
}

/// Where plugins come from: the ConfigMaps of the namespace (hot
/// reloaded into `registry`), and files loaded at start. A file plugin
/// wins over a ConfigMap plugin of the same name, and is not bound by the
/// grant policy in `watch` (the operator wrote it).
pub struct Plugins {
    pub runtime: Runtime,
    pub registry: Arc<PluginRegistry>,
    pub files: Vec<Plugin>,
    /// How ConfigMaps are loaded: the grant policy, the reference
    /// directory, the timeouts.
    pub watch: WatchOptions,
}

impl Plugins {
    /// The set a backup starting now is pinned to.
    fn source(&self) -> PluginSource {
        let registry = self.registry.clone();
        let files = self.files.clone();
        Arc::new(move || {
            let mut set = files.clone();
            let current = registry.current();
            set.extend(
                current
                    .plugins
                    .iter()
                    .filter(|p| !files.iter().any(|f| f.name() == p.name()))
                    .cloned(),
            );
            set
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("serving health and metrics on {addr}: {source}")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Runs until the Backup watch ends; an error only when it cannot serve
/// health and metrics.
pub async fn run(
    client: kube::Client,
    options: Options,
    plugins: Plugins,
    bound: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
) -> Result<(), RunError> {
    iar_core::tls::install_crypto();
    let api: Api<Backup> = Api::namespaced(client.clone(), &options.namespace);
    let cluster = Arc::new(LiveCluster::new(
        client.clone(),
        tokio::runtime::Handle::current(),
    ));

    // The store's leases name this replica: which one drives a backup is
    // read off its lease.
    let store = options.store.with_holder_name(&options.identity);
    // Every phase change reaches the resource's status, in order, from one
    // writer task; the phase machine never waits for the API server. Each
    // status carries the lease generation it was made under, and is not
    // written once another process has taken the backup's lease since:
    // a status held up by a partition, or queued behind one, would land
    // over the new holder's (the fault campaign's lease audit found a
    // replica writing status seconds after a takeover). The reconcile
    // writes the stored status again if a skipped one was the last.
    type Queued = (String, BackupStatus, Option<u64>);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Queued>();
    let sink_store = store.clone();
    let sink: StatusSink = Arc::new(move |object: &BackupObject| {
        iar_core::metrics::global().backup_phase(
            &format!("{}/{}", object.metadata.namespace, object.metadata.name),
            &object.status.phase.to_string(),
        );
        let name = object.metadata.name.clone();
        let generation = sink_store.fence_generation(&name);
        let _ = tx.send((name, object.status.clone(), generation));
    });
    let writer_api = api.clone();
    let writer_store = store.clone();
    tokio::spawn(async move {
        // The phase each backup was last seen in: `kubectl logs` shows a
        // line per phase change, not one per progress update.
        let mut phases = std::collections::HashMap::new();
        while let Some((name, status, generation)) = rx.recv().await {
            // Made under a lease: the resource's version is read first and
            // the lease checked after, and the status is written only over
            // that version, so that one held up on the way lands over
            // nothing a taker wrote since the check.
            let version = match generation {
                Some(made_under) => {
                    match super::resource::fenced_version(
                        &writer_api,
                        &writer_store,
                        &name,
                        made_under,
                    )
                    .await
                    {
                        Ok(version) => version,
                        Err(why) => {
                            tracing::debug!(backup = %name, "status {} not written: {why}", status.phase);
                            continue;
                        }
                    }
                }
                None => None,
            };
            // A status queued before the backup ended (a progress write
            // held up by the store) is not written over the end: the
            // reconcile that ended it wrote the terminal status at once
            // (the fault campaign saw Completed turn back to InProgress).
            if !status.phase.is_terminal()
                && let Ok(Some(stored)) = writer_store
                    .get_json::<BackupObject>(&name, iar_core::store::BackupFile::Metadata)
                    .await
                && stored.status.phase != status.phase
                && (stored.status.phase.is_terminal()
                    || stored.status.phase == iar_backup::backup::object::BackupPhase::Deleting)
            {
                tracing::debug!(backup = %name, "status {} not written: the backup is {} in the store", status.phase, stored.status.phase);
                continue;
            }
            if phases.get(&name) != Some(&status.phase) {
                tracing::info!(
                    backup = %name,
                    items = status.progress.items_backed_up,
                    errors = status.errors,
                    warnings = status.warnings,
                    "phase {}",
                    status.phase
                );
                if status.phase.is_terminal() {
                    phases.remove(&name);
                } else {
                    phases.insert(name.clone(), status.phase);
                }
            }
            match patch_status(&writer_api, &name, version.as_deref(), &status).await {
                Ok(()) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    tracing::debug!(backup = %name, "status {} not written: the resource changed since it was read", status.phase);
                }
                // The reconcile that ends the backup writes it again.
                Err(e) => tracing::warn!(backup = %name, "writing status {}: {e}", status.phase),
            }
        }
    });

    // Plugin ConfigMaps: watched for as long as the process runs, leader
    // or not, so that a replica taking over has its plugins loaded.
    {
        let (client, namespace) = (client.clone(), options.namespace.clone());
        let (runtime, registry) = (plugins.runtime.clone(), plugins.registry.clone());
        let watch_options = plugins.watch.clone();
        tokio::spawn(watch_forever(
            client,
            namespace,
            runtime,
            registry,
            watch_options,
        ));
    }
    let registry = plugins.registry.clone();
    let restorer = super::restores::Restorer {
        store: store.clone(),
        plugins: plugins.source(),
        cluster: cluster.clone(),
        pod_volumes: iar_restore::pod_volumes::PodVolumes {
            restorer: Arc::new(super::volume_restorer::RequestRestorer {
                client: client.clone(),
                namespace: options.namespace.clone(),
                store_url: store.url().to_string(),
                schedule_wait: Duration::from_secs(600),
                timeout: options.pod_volume_timeout,
                runtime: tokio::runtime::Handle::current(),
            }),
            image: options.restore_helper_image.clone(),
        },
    };
    let store_url = store.url().to_string();
    let controller = Arc::new(
        PhaseMachine::new(Vec::new(), store, cluster, options.settings)
            .with_plugin_source(plugins.source())
            .with_hook_runner(Arc::new(PodExecRunner::new(client.clone())))
            .with_volume_backupper(Arc::new(RequestBackupper::new(
                client.clone(),
                &options.namespace,
                store_url.as_str(),
                options.volume_agent_silence,
            )))
            .with_status_sink(sink)
            .with_takeover_fence({
                let api = api.clone();
                Arc::new(move |name: String, generation: u64| {
                    let api = api.clone();
                    Box::pin(async move { super::resource::fence(&api, &name, generation).await })
                })
            })
            .with_cancel_probe(given_up(Api::namespaced(
                client.clone(),
                &options.namespace,
            ))),
    );

    let health = Arc::new(Health {
        ready: Default::default(),
        controller: controller.clone(),
    });
    let (tx_bound, rx_bound) = tokio::sync::oneshot::channel();
    let addr = options.listen;
    let server = tokio::spawn(serve(addr, health.clone(), tx_bound));
    match rx_bound.await {
        Ok(at) => {
            tracing::info!("serving /healthz /readyz /metrics on {at}");
            if let Some(bound) = bound {
                let _ = bound.send(at);
            }
        }
        Err(_) => {
            let source = match server.await {
                Ok(Err(e)) => e,
                _ => std::io::Error::other("the server ended before binding"),
            };
            return Err(RunError::Serve { addr, source });
        }
    }
    {
        let health = health.clone();
        let client = client.clone();
        tokio::spawn(async move {
            loop {
                let ready = registry.is_synced() && client.apiserver_version().await.is_ok();
                health.ready.store(ready, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        });
    }

    let schedule_client = client.clone();
    let elector = Elector::new(
        client,
        &options.namespace,
        &options.lease_name,
        &options.identity,
        options.leader_lease,
    );
    // However this ends (the future dropped included), the leases kept
    // for the backups it drives are let go, not renewed by their keepers
    // for a controller that no longer steps them, and their block work
    // stops as it would with the process.
    let _abandon = AbandonKept(controller.clone());
    let context = Arc::new(Context::new(controller, api.clone()));
    let registry = plugins.registry.clone();
    // No backup starts (or resumes) before the plugin ConfigMaps have all
    // loaded; `/readyz` says the same.
    if !registry.is_synced() {
        tracing::info!("waiting for the plugin ConfigMaps to load before reconciling");
        registry.wait_synced().await;
    }
    // Every replica reconciles: the backups' store leases share them out
    // (`super::reconcile`). On start the watch lists every Backup: those
    // persisted and unfinished, and not driven by a live replica, are
    // taken over by their first reconcile. Reconciles at once are bounded
    // too (kube-runtime's default is unbounded); the heavy part of each,
    // a backup's first pass, takes a turn of `Settings::concurrent_passes`.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let reconciling = Controller::new(api, watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(16))
        // Once told, it takes no new reconcile and ends when the running
        // ones have.
        .graceful_shutdown_on(async move {
            let _ = stopped.await;
        })
        .run(reconcile, error_policy, context.clone())
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!("reconcile: {e}");
            }
        });
    // Only the garbage-collection sweep, the schedules, the restores and
    // the download requests are singular: the leader runs them. A replica
    // that loses the Lease stops them and stands for it again; its backups
    // go on.
    let sweeping = async {
        loop {
            let leading = async {
                let schedules = super::schedules::schedule_forever(
                    schedule_client.clone(),
                    options.namespace.clone(),
                );
                let restores = super::restores::restore_forever(
                    schedule_client.clone(),
                    options.namespace.clone(),
                    restorer.clone(),
                );
                let downloads = super::downloads::answer_forever(
                    schedule_client.clone(),
                    options.namespace.clone(),
                    restorer.store.clone(),
                );
                let (never, _, _, _) = tokio::join!(
                    super::sweep::sweep_forever(&context),
                    schedules,
                    restores,
                    downloads
                );
                never
            };
            match elector.run(leading).await {
                Ok(never) => match never {},
                Err(e) => {
                    tracing::warn!("{e}; no longer sweeping, standing for the lease again");
                    tokio::time::sleep(options.leader_lease / 3).await;
                }
            }
        }
    };
    let shutdown = async {
        match options.shutdown {
            Some(stop) => stop.await,
            None => std::future::pending().await,
        }
    };
    // Every replica, leader or not, ends the backups it keeps a lease for
    // whose resources are gone (no reconcile comes for them).
    let orphan_period = (context.controller.settings.sync_period * 3).max(Duration::from_secs(3));
    let ending_orphans = super::sweep::end_kept_orphans_forever(&context, orphan_period);
    tokio::pin!(reconciling);
    tokio::select! {
        () = &mut reconciling => {}
        never = sweeping => match never {},
        never = ending_orphans => match never {},
        () = shutdown => {
            let drain = options.drain;
            tracing::info!(
                "stopping: no new steps; the running ones may finish for {drain:?}, then the leases of the backups this replica drives are given back"
            );
            let _ = stop.send(());
            if tokio::time::timeout(drain, &mut reconciling).await.is_err() {
                tracing::warn!("steps still running after {drain:?}: abandoned (a backup's first pass among them ends Failed)");
            }
        }
    }
    // A step still running is dropped (its lease abandoned: it expires);
    // the backups between steps are free at once.
    context.controller.give_back_kept_leases().await;
    Ok(())
}

struct AbandonKept(Arc<PhaseMachine>);

impl Drop for AbandonKept {
    fn drop(&mut self) {
        self.0.abandon_kept_leases();
        self.0.abandon_block_work();
    }
}

/// A backup is given up once its Backup resource is being deleted, or is
/// gone; an error reading it is not taken for either.
fn given_up(api: Api<Backup>) -> iar_backup::phases::CancelProbe {
    Arc::new(move |name: String| {
        let api = api.clone();
        Box::pin(async move {
            match api.get_opt(&name).await {
                Ok(Some(b)) => b.metadata.deletion_timestamp.is_some(),
                Ok(None) => true,
                Err(_) => false,
            }
        })
    })
}
