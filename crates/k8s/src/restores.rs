//! Restore resources: the leader restores each new Restore's backup into
//! this cluster, one at a time and in the order they were made, as
//! Velero's restore controller does. `iar_restore::stored` restores, as
//! for `iar restore --cluster`; the resource's status says what it did,
//! and the results, log and record go under `restores/NAME/` in the store
//! (`iar describe NAME --restore`).
//!
//! A Restore runs once. It goes from New to InProgress (a patch over the
//! resource version read, so that two leaders of a moment never both
//! start it) before anything is created; one found InProgress when a
//! leader starts was cut short by the last leader, and is Failed, as
//! Velero's server marks such restores on start.

use super::crd::Restore;
use super::exec::RestoreHookExec;
use super::resource::patch_status;
use iar_backup::phases::PluginSource;
use iar_core::cluster::ClusterReader;
use iar_core::store::BackupStore;
use iar_core::store::restores::RestoreFile;
use iar_plugin::plugin::RestoreRef;
use iar_restore::builtin::VeleroConfigs;
use iar_restore::hooks::post::PodExec;
use iar_restore::spec::RestoreSpec;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How often the leader looks for new Restores.
const LOOK_EVERY: Duration = Duration::from_secs(2);

/// Tells a restore's blocking run to stop when dropped: the leader's
/// future is dropped when its term ends, and the restore it runs must not
/// go on creating objects beside the next leader's `Failed`.
#[derive(Default)]
struct StopOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Velero's words for a restore its server found InProgress on start.
const INTERRUPTED: &str =
    "found a restore with status \"InProgress\" during the server starting, mark it as \"Failed\"";

/// What a Restore is restored with.
#[derive(Clone)]
pub struct Restorer {
    pub store: BackupStore,
    pub plugins: PluginSource,
    pub cluster: Arc<dyn ClusterReader>,
    /// Fills restored pods' volumes through the node agents.
    pub pod_volumes: iar_restore::pod_volumes::PodVolumes,
}

/// Restores the namespace's new Restores, for as long as it runs (the
/// leader's term).
pub async fn restore_forever(
    client: kube::Client,
    namespace: String,
    restorer: Restorer,
) -> std::convert::Infallible {
    let api = Api::<Restore>::namespaced(client.clone(), &namespace);
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &namespace);
    // Restored pods' exec hooks run in their containers (pods/exec).
    let exec: Arc<dyn PodExec> = Arc::new(RestoreHookExec::new(
        client,
        tokio::runtime::Handle::current(),
    ));
    let mut started = false;
    loop {
        if !started {
            match fail_interrupted(&api).await {
                Ok(()) => started = true,
                Err(e) => tracing::warn!("restores: {e}"),
            }
        }
        if started && let Err(e) = tick(&api, &restorer, &exec, &config_maps).await {
            tracing::warn!("restores: {e}");
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

async fn fail_interrupted(api: &Api<Restore>) -> Result<(), kube::Error> {
    for restore in api.list(&ListParams::default()).await? {
        if phase(&restore) == "InProgress" {
            failed(api, &restore.name_any(), INTERRUPTED.to_string()).await?;
        }
    }
    Ok(())
}

fn phase(restore: &Restore) -> &str {
    restore
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("New")
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Ends a restore that could not run: Failed, with why.
async fn failed(api: &Api<Restore>, name: &str, reason: String) -> Result<(), kube::Error> {
    tracing::warn!(restore = %name, "Failed: {reason}");
    patch_status(
        api,
        name,
        None,
        &json!({"phase": "Failed", "failureReason": reason, "completionTimestamp": now()}),
    )
    .await
}

/// The data of Velero's change-storage-class and change-image-name
/// ConfigMaps in the Restores' namespace, as Velero's `GetPluginConfig`
/// finds each: none is no rule; two of one kind are an error naming both.
pub async fn velero_configs(config_maps: &Api<ConfigMap>) -> Result<VeleroConfigs, String> {
    Ok(VeleroConfigs {
        storage_classes: plugin_config(config_maps, iar_restore::builtin::STORAGE_CLASS_CONFIG)
            .await?,
        image_names: plugin_config(config_maps, iar_restore::builtin::IMAGE_NAME_CONFIG).await?,
    })
}

/// [`velero_configs`] in `namespace`.
pub async fn velero_configs_in(
    client: &kube::Client,
    namespace: &str,
) -> Result<VeleroConfigs, String> {
    velero_configs(&Api::namespaced(client.clone(), namespace)).await
}

async fn plugin_config(
    config_maps: &Api<ConfigMap>,
    selector: &str,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    let list = config_maps
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| format!("reading the ConfigMap labelled {selector:?}: {e}"))?;
    match &list.items[..] {
        [] => Ok(Default::default()),
        [one] => Ok(one.data.clone().unwrap_or_default()),
        many => Err(format!(
            "found more than one ConfigMap matching label selector {selector:?}: {:?}",
            many.iter().map(|c| c.name_any()).collect::<Vec<_>>()
        )),
    }
}

/// One look: the new Restores, oldest first, each to its end.
async fn tick(
    api: &Api<Restore>,
    restorer: &Restorer,
    exec: &Arc<dyn PodExec>,
    config_maps: &Api<ConfigMap>,
) -> Result<(), kube::Error> {
    let mut new: Vec<Restore> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|r| phase(r) == "New" && r.metadata.deletion_timestamp.is_none())
        .collect();
    new.sort_by(|a, b| {
        (a.metadata.creation_timestamp.as_ref(), a.name_any())
            .cmp(&(b.metadata.creation_timestamp.as_ref(), b.name_any()))
    });
    for restore in new {
        let name = restore.name_any();
        match run_one(api, restorer, exec.clone(), config_maps, &restore).await {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tracing::debug!(restore = %name, "started elsewhere: the resource changed since it was read");
            }
            Err(e) => tracing::warn!(restore = %name, "{e}"),
        }
    }
    Ok(())
}

/// Checks, starts and runs one Restore; its status says how it ended.
async fn run_one(
    api: &Api<Restore>,
    restorer: &Restorer,
    exec: Arc<dyn PodExec>,
    config_maps: &Api<ConfigMap>,
    restore: &Restore,
) -> Result<(), kube::Error> {
    let name = restore.name_any();
    let raw = Value::Object(restore.spec.fields.clone());
    let mut invalid = Vec::new();
    let spec = match RestoreSpec::from_value(&raw) {
        Ok(spec) => Some(spec),
        Err(e) => {
            invalid.push(e);
            None
        }
    };
    match restorer.store.get_restore(&name, RestoreFile::Object).await {
        Ok(Some(_)) => invalid.push(format!(
            "a restore named {name:?} is already in the store {}; name this one otherwise (rule: restore-name)",
            restorer.store.url()
        )),
        Ok(None) => {}
        Err(e) => invalid.push(format!("reading the store: {e}")),
    }
    let (Some(spec), true) = (spec, invalid.is_empty()) else {
        tracing::warn!(restore = %name, "FailedValidation: {}", invalid.join("; "));
        return patch_status(
            api,
            &name,
            restore.metadata.resource_version.as_deref(),
            &json!({"phase": "FailedValidation", "validationErrors": invalid}),
        )
        .await;
    };
    let started = SystemTime::now();
    let in_progress = json!({"phase": "InProgress", "startTimestamp": now()});
    patch_status(
        api,
        &name,
        restore.metadata.resource_version.as_deref(),
        &in_progress,
    )
    .await?;
    tracing::info!(restore = %name, backup = %spec.backup_name, "phase InProgress");
    let loaded = match iar_restore::stored::load(&restorer.store, &spec.backup_name).await {
        Ok(loaded) => loaded,
        Err(reason) => return failed(api, &name, reason).await,
    };
    let configs = match velero_configs(config_maps).await {
        Ok(configs) => configs,
        Err(reason) => return failed(api, &name, reason).await,
    };
    let restore_ref = RestoreRef {
        object: Some(plugin_view(restore, in_progress)),
        name: name.clone(),
        namespace: restore.namespace().unwrap_or_default(),
        uid: restore.uid().unwrap_or_default(),
        spec: raw,
    };
    let (cluster, plugins) = (restorer.cluster.clone(), (restorer.plugins)());
    let pod_volumes = restorer.pod_volumes.clone();
    let for_run = restore_ref.clone();
    // The restore's plugin calls are wasm calls and its creates wait on
    // the API server: a blocking thread, never the runtime's. Dropping
    // this future (the leader's term ended) does not stop that thread:
    // the guard tells it to.
    let stop = StopOnDrop::default();
    let stop_flag = stop.0.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        iar_restore::stored::restore(
            iar_restore::Context {
                spec: &spec,
                restore: for_run,
                cluster,
                plugins: &plugins,
                stop: Some(stop_flag),
                exec: Some(exec),
                configs,
                pod_volumes: Some(pod_volumes),
            },
            loaded,
        )
    })
    .await;
    drop(stop);
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => return failed(api, &name, format!("the restore stopped: {e}")).await,
    };
    let mut status = iar_restore::stored::status(&outcome, started, SystemTime::now());
    if let Err(e) =
        iar_restore::stored::save(&restorer.store, &restore_ref, &outcome, &status).await
    {
        // The objects are restored; only the record is missing. Said in
        // the status rather than dropped.
        tracing::warn!(restore = %name, "its results were not stored: {e}");
        status["failureReason"] =
            json!(format!("its results, log and record were not stored: {e}"));
    }
    tracing::info!(
        restore = %name,
        restored = outcome.restored,
        errors = outcome.results.errors.count(),
        warnings = outcome.results.warnings.count(),
        "phase {}",
        outcome.phase()
    );
    patch_status(api, &name, None, &status).await
}

/// The whole Restore as its plugins read it (contract 1.4.0's
/// `runs.restore`): the resource as read, with the status it was just
/// given (InProgress, its start time).
fn plugin_view(restore: &Restore, status: Value) -> std::sync::Arc<str> {
    let mut object = serde_json::to_value(restore).unwrap_or_else(|_| json!({}));
    if let Some(obj) = object.as_object_mut() {
        obj.insert("status".into(), status);
    }
    std::sync::Arc::from(object.to_string())
}
