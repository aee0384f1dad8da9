//! Plugins from ConfigMaps, against a real kube-apiserver (`iar-apiserver`):
//! the watcher loads, reloads and unloads plugins as their ConfigMaps
//! change, refuses bad versions with a status and an Event while the last
//! good one keeps serving, and a set pinned before a reload keeps working.
//! Each test has its own namespace and its own watcher.

use crate::support::*;
use iar::k8s::plugins::configmap::{self, ManifestInput};
use iar::k8s::plugins::status::{ANNOTATION_DIGEST, ANNOTATION_GENERATION, ANNOTATION_STATUS};
use iar::k8s::plugins::{PluginRegistry, PluginSet, WatchOptions, watch_with};
use iar_apiserver::User;
use iar_tests::wait_for;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Generous: the machines that run these tests are often busy compiling.
const WITHIN: Duration = Duration::from_secs(60);

/// A namespace with a watcher running on it; the watcher stops on drop.
struct Harness {
    client: kube::Client,
    namespace: String,
    registry: Arc<PluginRegistry>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start(namespace: &str) -> Option<Harness> {
    start_with(namespace, runtime()).await
}

async fn start_with(namespace: &str, runtime: iar::Runtime) -> Option<Harness> {
    start_with_options(namespace, runtime, WatchOptions::default()).await
}

async fn start_with_options(
    namespace: &str,
    runtime: iar::Runtime,
    options: WatchOptions,
) -> Option<Harness> {
    let server = server().await?;
    let client = client(server, User::Admin).await;
    iar_apiserver::create_namespace(&client, namespace).await;
    let registry = PluginRegistry::new();
    let task = spawn_watcher(&client, namespace, runtime, &registry, options);
    let harness = Harness {
        client,
        namespace: namespace.into(),
        registry,
        task,
    };
    harness.wait_set("the first sync", |_| true).await;
    assert!(harness.registry.is_synced());
    Some(harness)
}

fn spawn_watcher(
    client: &kube::Client,
    namespace: &str,
    runtime: iar::Runtime,
    registry: &Arc<PluginRegistry>,
    mut options: WatchOptions,
) -> tokio::task::JoinHandle<()> {
    // The plugins here label what they run on (the hostile one annotates a
    // Secret it read): the operator allows those item changes, and every
    // ConfigMap asks for them (`plugin_cm`). The item-change rules have
    // tests of their own.
    if options.grant_policy.mutable.is_empty() {
        options.grant_policy.mutable = vec!["*".into(), "secrets".into()];
    }
    let (client, namespace, registry) = (client.clone(), namespace.to_string(), registry.clone());
    tokio::spawn(async move {
        let result = watch_with(client, namespace, runtime, registry, options).await;
        panic!("the watcher returned: {result:?}");
    })
}

fn bytes(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A good plugin ConfigMap, as `iar plugin configmap` makes it.
/// The item changes every test ConfigMap asks for.
const MUTATE_ALL: &str = "allowMutate: ['*', secrets]\n";

fn plugin_cm(name: &str, namespace: &str, component: &[u8], settings: Option<&str>) -> ConfigMap {
    configmap::manifest(ManifestInput {
        name: name.into(),
        namespace: namespace.into(),
        component: component.to_vec(),
        settings: Some(format!("{}\n{MUTATE_ALL}", settings.unwrap_or_default())),
        order: None,
        reference: None,
    })
    .expect("a valid manifest")
}

fn with_data(mut cm: ConfigMap, key: &str, value: &str) -> ConfigMap {
    cm.data
        .get_or_insert_with(BTreeMap::new)
        .insert(key.into(), value.into());
    cm
}

/// `component` inline, with its own (correct) digest.
fn with_component(mut cm: ConfigMap, component: &[u8]) -> ConfigMap {
    let digest = configmap::manifest(ManifestInput {
        name: "x".into(),
        component: component.to_vec(),
        ..ManifestInput::default()
    })
    .expect("a manifest")
    .data
    .unwrap()[configmap::KEY_SHA256]
        .clone();
    cm.binary_data = Some(BTreeMap::from([(
        configmap::KEY_WASM.into(),
        ByteString(component.to_vec()),
    )]));
    with_data(cm, configmap::KEY_SHA256, &digest)
}

impl Harness {
    /// Stops this watcher and starts a new one on the same namespace with
    /// an empty registry, as a restart of iar does; waits for its first
    /// sync.
    async fn restart(&mut self, options: WatchOptions) {
        self.task.abort();
        let _ = (&mut self.task).await;
        self.registry = PluginRegistry::new();
        self.task = spawn_watcher(
            &self.client,
            &self.namespace,
            runtime(),
            &self.registry,
            options,
        );
        self.wait_set("the first sync after the restart", |_| true)
            .await;
    }

    fn api(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates or updates by server-side apply, as `kubectl apply
    /// --server-side` does.
    async fn apply(&self, cm: &ConfigMap) {
        let mut cm = cm.clone();
        cm.metadata.namespace = Some(self.namespace.clone());
        let name = cm.metadata.name.clone().unwrap();
        self.api()
            .patch(
                &name,
                &PatchParams::apply("iar-test").force(),
                &Patch::Apply(&cm),
            )
            .await
            .unwrap_or_else(|e| panic!("apply ConfigMap {name}: {e}"));
    }

    async fn delete(&self, name: &str) {
        self.api()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete ConfigMap {name}: {e}"));
    }

    /// Waits on `subscribe()` until the current set satisfies `done`.
    async fn wait_set(&self, what: &str, done: impl Fn(&PluginSet) -> bool) -> Arc<PluginSet> {
        let mut rx = self.registry.subscribe();
        let deadline = Instant::now() + WITHIN;
        loop {
            let set = self.registry.current();
            if self.registry.is_synced() && done(&set) {
                return set;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => panic!("{what}: the registry was dropped"),
                Err(_) => panic!(
                    "{what}: not reached within {WITHIN:?}; generation {}, plugins {:?}",
                    set.generation, set.plugins
                ),
            }
        }
    }

    /// Waits until an Event with `reason` on the ConfigMap has a note
    /// containing `part`.
    async fn wait_event(&self, name: &str, reason: &str, part: &str) {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        wait_for(
            &format!("ConfigMap {name}: a {reason} Event naming {part:?}"),
            WITHIN,
            || async {
                let notes: Vec<String> = events
                    .list(&Default::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|e| {
                        e.reason.as_deref() == Some(reason)
                            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    })
                    .filter_map(|e| e.note)
                    .collect();
                if notes.iter().any(|n| n.contains(part)) {
                    Ok(())
                } else {
                    Err(format!("notes {notes:?}"))
                }
            },
        )
        .await
    }

    /// Waits until the ConfigMap's status message contains `part`.
    async fn wait_message(&self, name: &str, part: &str) -> String {
        wait_for(
            &format!("ConfigMap {name}: a status message with {part:?}"),
            WITHIN,
            || async {
                let message = self
                    .api()
                    .get(name)
                    .await
                    .ok()
                    .and_then(|cm| cm.metadata.annotations)
                    .and_then(|mut a| a.remove("iar.dev/status-message"))
                    .unwrap_or_default();
                if message.contains(part) {
                    Ok(message)
                } else {
                    Err(format!("it says {message:?}"))
                }
            },
        )
        .await
    }

    /// Waits until the ConfigMap's status annotation is `status` and an
    /// Event with that reason is on it; returns the ConfigMap's annotations.
    async fn wait_status(&self, name: &str, status: &str) -> BTreeMap<String, String> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        // Polling the API server: a refused load publishes no generation to wait on.
        wait_for(
            &format!("ConfigMap {name}: status {status} with its Event"),
            WITHIN,
            || async {
                let annotations = self
                    .api()
                    .get(name)
                    .await
                    .ok()
                    .and_then(|cm| cm.metadata.annotations)
                    .unwrap_or_default();
                let has_event = events
                    .list(&Default::default())
                    .await
                    .map(|list| {
                        list.items.iter().any(|e| {
                            e.reason.as_deref() == Some(status)
                                && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                                    == Some(name)
                        })
                    })
                    .unwrap_or(false);
                if annotations.get(ANNOTATION_STATUS).map(String::as_str) == Some(status)
                    && has_event
                {
                    Ok(annotations)
                } else {
                    Err(format!("event {has_event}, annotations {annotations:?}"))
                }
            },
        )
        .await
    }

    /// Waits until the clock (the API server's: it runs on this machine)
    /// is a whole second past ConfigMap `name`'s `creationTimestamp`, so
    /// that one created next has a later one (they have one-second
    /// resolution).
    async fn wait_a_second_past(&self, name: &str) {
        let created = self.created(name).await;
        iar_tests::wait_until(
            &format!("a second past {name}'s creationTimestamp"),
            WITHIN,
            || std::future::ready(std::time::SystemTime::now() >= created + Duration::from_secs(1)),
        )
        .await
    }

    /// ConfigMap `name`'s `creationTimestamp`.
    async fn created(&self, name: &str) -> std::time::SystemTime {
        let cm = self.api().get(name).await.unwrap();
        let stamp =
            serde_json::to_value(cm.metadata.creation_timestamp.expect("a creationTimestamp"))
                .unwrap();
        humantime::parse_rfc3339(stamp.as_str().unwrap()).unwrap()
    }
}

/// Runs the set's `labels` plugin on a pod and returns the pod's labels.
fn labels_after(set: &PluginSet) -> serde_json::Value {
    let plugin = set.get("labels").expect("labels is loaded");
    let out = plugin
        .instance(Arc::new(iar::NoCluster))
        .execute(&pod("web"), &backup(iar::Phase::Backup), &never_seen)
        .expect("labels runs");
    out.item.expect("labels changes the item").into_value()["metadata"]["labels"].clone()
}

fn names(set: &PluginSet) -> Vec<&str> {
    set.plugins.iter().map(|p| p.name()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_update_and_delete_change_the_loaded_set() {
    let Some(h) = start("plugins-lifecycle").await else {
        return;
    };
    let labels = bytes(artifacts::LABELS);
    h.apply(&plugin_cm(
        "labels",
        &h.namespace,
        &labels,
        Some("config: {labels: team=a}"),
    ))
    .await;
    let set = h
        .wait_set("labels loads", |s| s.get("labels").is_some())
        .await;
    assert_eq!(labels_after(&set)["team"], "a");
    let annotations = h.wait_status("labels", "Ready").await;
    let digest = set.get("labels").unwrap().digest().to_string();
    assert_eq!(annotations[ANNOTATION_DIGEST], format!("sha256:{digest}"));
    assert_eq!(
        annotations[ANNOTATION_GENERATION],
        set.generation.to_string()
    );

    // A second plugin with a lower order runs first.
    let pod_volumes = plugin_cm(
        "pod-volumes",
        &h.namespace,
        &bytes(artifacts::POD_VOLUMES),
        None,
    );
    h.apply(&with_data(pod_volumes, "order", "-1")).await;
    let set = h
        .wait_set("pod-volumes loads", |s| s.plugins.len() == 2)
        .await;
    assert_eq!(names(&set), ["pod-volumes", "labels"]);

    // An update reloads with the new settings.
    h.apply(&plugin_cm(
        "labels",
        &h.namespace,
        &labels,
        Some("config: {labels: team=b}"),
    ))
    .await;
    let set = h
        .wait_set("labels reloads", |s| {
            s.get("labels").is_some() && labels_after(s)["team"] == "b"
        })
        .await;
    assert_eq!(names(&set), ["pod-volumes", "labels"]);

    // Disabled: unloaded, and says so.
    h.apply(&with_data(
        plugin_cm(
            "labels",
            &h.namespace,
            &labels,
            Some("config: {labels: team=b}"),
        ),
        "enabled",
        "false",
    ))
    .await;
    h.wait_set("labels is disabled", |s| s.get("labels").is_none())
        .await;
    let annotations = h.wait_status("labels", "Disabled").await;
    assert!(
        !annotations.contains_key(ANNOTATION_DIGEST),
        "{annotations:?}"
    );

    h.delete("pod-volumes").await;
    let set = h
        .wait_set("pod-volumes unloads", |s| s.plugins.is_empty())
        .await;
    assert!(set.get("pod-volumes").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_versions_get_a_status_and_an_event_and_the_last_good_one_stays() {
    let Some(h) = start("plugins-bad").await else {
        return;
    };
    let labels = bytes(artifacts::LABELS);
    let good = plugin_cm(
        "labels",
        &h.namespace,
        &labels,
        Some("config: {labels: team=good}"),
    );
    h.apply(&good).await;
    let set = h
        .wait_set("labels loads", |s| s.get("labels").is_some())
        .await;
    let digest = set.get("labels").unwrap().digest().to_string();
    h.wait_status("labels", "Ready").await;

    let garbage = b"#!/bin/sh\necho not wasm\n".to_vec();
    let wrong_digest = with_data(
        with_component(good.clone(), &garbage),
        configmap::KEY_SHA256,
        &"0".repeat(64),
    );
    let cases = [
        ("DigestMismatch", wrong_digest),
        ("CompileError", with_component(good.clone(), &garbage)),
        (
            "ContractMismatch",
            with_component(good.clone(), &bytes(artifacts::WRONG_WORLD)),
        ),
        (
            "SettingsInvalid",
            with_data(
                good.clone(),
                configmap::KEY_SETTINGS,
                "limts: {deadline: 1s}",
            ),
        ),
        (
            "ContractMismatch",
            with_component(good.clone(), &bytes(artifacts::FUTURE_VERSION)),
        ),
        (
            "AppliesToFailed",
            with_data(
                with_component(good.clone(), &bytes(artifacts::HOSTILE)),
                configmap::KEY_SETTINGS,
                "config: {applies-to: loop}\nlimits: {deadline: 200ms}",
            ),
        ),
    ];
    for (status, cm) in cases {
        h.apply(&cm).await;
        let annotations = h.wait_status("labels", status).await;
        assert_eq!(
            annotations[ANNOTATION_DIGEST],
            format!("sha256:{digest}"),
            "{status}: the good version is still the one loaded"
        );
        let message = &annotations["iar.dev/status-message"];
        assert!(message.starts_with("ConfigMap \"labels\": "), "{message}");
        assert!(message.contains("stays loaded"), "{message}");
        let set = h.registry.current();
        assert_eq!(set.get("labels").unwrap().digest(), digest, "{status}");
        assert_eq!(labels_after(&set)["team"], "good", "{status}");
        // Back to good between cases, so each case is a change of its own.
        h.apply(&good).await;
        h.wait_status("labels", "Ready").await;
    }
    let metrics = iar::metrics::global().encode();
    for reason in [
        "DigestMismatch",
        "CompileError",
        "ContractMismatch",
        "SettingsInvalid",
    ] {
        assert!(
            metrics.contains(&format!(
                "iar_plugin_load_failures_total{{reason=\"{reason}\"}}"
            )),
            "{reason} counted: {metrics}"
        );
    }

    // A bad plugin with no good version before it: a status, nothing loaded.
    let broken = with_component(plugin_cm("broken", &h.namespace, &labels, None), &garbage);
    h.apply(&broken).await;
    let annotations = h.wait_status("broken", "CompileError").await;
    assert!(
        !annotations.contains_key(ANNOTATION_DIGEST),
        "{annotations:?}"
    );
    assert!(h.registry.current().get("broken").is_none());
    let no_digest = {
        let mut cm = plugin_cm("no-digest", &h.namespace, &labels, None);
        cm.data.as_mut().unwrap().remove(configmap::KEY_SHA256);
        cm
    };
    h.apply(&no_digest).await;
    h.wait_status("no-digest", "SourceInvalid").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_pinned_before_a_reload_keeps_the_old_plugin_and_it_still_runs() {
    let Some(h) = start("plugins-pinned").await else {
        return;
    };
    let labels = bytes(artifacts::LABELS);
    h.apply(&plugin_cm(
        "labels",
        &h.namespace,
        &labels,
        Some("config: {labels: version=old}"),
    ))
    .await;
    let pinned = h
        .wait_set("labels loads", |s| s.get("labels").is_some())
        .await;

    h.apply(&plugin_cm(
        "labels",
        &h.namespace,
        &labels,
        Some("config: {labels: version=new}"),
    ))
    .await;
    let current = h
        .wait_set("labels reloads", |s| s.generation > pinned.generation)
        .await;
    assert_eq!(labels_after(&current)["version"], "new");
    assert_eq!(
        labels_after(&pinned)["version"],
        "old",
        "the pinned set is unchanged"
    );

    h.delete("labels").await;
    h.wait_set("labels unloads", |s| s.get("labels").is_none())
        .await;
    assert_eq!(
        labels_after(&pinned)["version"],
        "old",
        "a pinned plugin runs after its ConfigMap is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn velero_plugin_config_reaches_the_plugin_config() {
    let Some(h) = start("plugins-velero").await else {
        return;
    };
    let velero = |value: &str| ConfigMap {
        metadata: ObjectMeta {
            name: Some("labels-plugin-config".into()),
            labels: Some(BTreeMap::from([
                (configmap::VELERO_LABEL.into(), "".into()),
                ("example.io/labels".into(), "BackupItemAction".into()),
            ])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("labels".into(), value.into())])),
        ..ConfigMap::default()
    };
    h.apply(&velero("source=velero")).await;
    h.apply(&plugin_cm(
        "labels",
        &h.namespace,
        &bytes(artifacts::LABELS),
        None,
    ))
    .await;
    let set = h
        .wait_set("labels loads", |s| s.get("labels").is_some())
        .await;
    assert_eq!(labels_after(&set)["source"], "velero");

    // A change to the Velero ConfigMap alone reloads the plugin.
    h.apply(&velero("source=velero-2")).await;
    let set = h
        .wait_set("labels reloads", |s| s.generation > set.generation)
        .await;
    assert_eq!(labels_after(&set)["source"], "velero-2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_writes_do_not_reload_and_a_reference_path_loads() {
    let dir = tempfile::tempdir().unwrap();
    let options = WatchOptions {
        reference_dir: Some(dir.path().to_path_buf()),
        ..WatchOptions::default()
    };
    let Some(h) = start_with_options("plugins-reference", runtime(), options).await else {
        return;
    };
    let path = dir.path().join("labels.wasm");
    let labels = bytes(artifacts::LABELS);
    std::fs::write(&path, &labels).unwrap();
    let by_reference = configmap::manifest(ManifestInput {
        name: "labels".into(),
        namespace: h.namespace.clone(),
        component: labels.clone(),
        settings: None,
        order: None,
        reference: Some(path.display().to_string()),
    })
    .unwrap();
    h.apply(&by_reference).await;
    let set = h
        .wait_set("labels loads", |s| s.get("labels").is_some())
        .await;
    h.wait_status("labels", "Ready").await;

    // iar's own status patch and someone else's annotation are metadata
    // only: no reload. The next real change is then the only new generation.
    let mut annotated = by_reference.clone();
    annotated.metadata.annotations = Some(BTreeMap::from([("team".into(), "x".into())]));
    h.apply(&annotated).await;
    h.apply(&plugin_cm(
        "pod-volumes",
        &h.namespace,
        &bytes(artifacts::POD_VOLUMES),
        None,
    ))
    .await;
    let after = h
        .wait_set("pod-volumes loads", |s| s.get("pod-volumes").is_some())
        .await;
    assert_eq!(
        after.generation,
        set.generation + 1,
        "no reload for metadata"
    );

    let missing = with_data(
        by_reference,
        configmap::KEY_REFERENCE,
        "/nonexistent/labels.wasm",
    );
    let mut missing = missing;
    missing.metadata.name = Some("missing".into());
    h.apply(&missing).await;
    let annotations = h.wait_status("missing", "SourceInvalid").await;
    let message = &annotations["iar.dev/status-message"];
    assert!(message.contains("/nonexistent/labels.wasm"), "{message}");
    assert!(message.contains("rule: reference-dir"), "{message}");
}

/// The YAML `iar plugin configmap` prints (the same `manifest` function,
/// serialized the same way), applied server-side, loads Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_manifest_applies_and_loads_ready() {
    // The operator lets plugins create VolumeSnapshots, as pvc-snapshot asks.
    let options = WatchOptions {
        grant_policy: iar::k8s::plugins::GrantPolicy {
            writable: vec!["volumesnapshots.snapshot.storage.k8s.io".into()],
            ..Default::default()
        },
        ..Default::default()
    };
    let Some(h) = start_with_options("plugins-manifest", runtime(), options).await else {
        return;
    };
    let yaml = iar::yaml::to_string(
        &configmap::manifest(ManifestInput {
            name: "pvc-snapshot".into(),
            namespace: h.namespace.clone(),
            component: bytes(artifacts::PVC_SNAPSHOT),
            settings: Some(
                "limits: {deadline: 2s}\nallowWrite: [volumesnapshots.snapshot.storage.k8s.io]\nallowMutate: [persistentvolumeclaims]\n".into(),
            ),
            order: Some(3),
            reference: None,
        })
        .unwrap(),
    )
    .unwrap();
    let cm: ConfigMap = iar::yaml::from_str(&yaml).expect("the YAML is a ConfigMap");
    h.apply(&cm).await;
    let set = h
        .wait_set("pvc-snapshot loads", |s| s.get("pvc-snapshot").is_some())
        .await;
    assert_eq!(
        set.get("pvc-snapshot").unwrap().limits().deadline,
        Duration::from_secs(2)
    );
    // Its status says what it was granted, for the operator to see.
    let annotations = h.wait_status("pvc-snapshot", "Ready").await;
    let message = &annotations["iar.dev/status-message"];
    assert!(
        message.ends_with(
            "reads [*], creates [volumesnapshots.snapshot.storage.k8s.io], changes [persistentvolumeclaims]"
        ),
        "{message}"
    );
}

/// How long a ConfigMap change takes to become a loaded generation: a cold
/// compile cache, a warm one (a settings change), and an unload. Prints
/// the figures; run with `-- --ignored --nocapture load_latency`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn load_latency() {
    let cache = tempfile::tempdir().unwrap();
    let runtime = iar::Runtime::new(iar::RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..iar::RuntimeConfig::default()
    })
    .unwrap();
    let Some(h) = start_with("plugins-latency", runtime).await else {
        return;
    };
    let labels = bytes(artifacts::LABELS);
    let begun = Instant::now();
    h.apply(&plugin_cm(
        "labels",
        &h.namespace,
        &labels,
        Some("config: {labels: n=0}"),
    ))
    .await;
    h.wait_set("labels loads", |s| s.get("labels").is_some())
        .await;
    let cold = begun.elapsed();
    let mut warm = Vec::new();
    for n in 1..=10 {
        let begun = Instant::now();
        let settings = format!("config: {{labels: n={n}}}");
        let want = n.to_string();
        h.apply(&plugin_cm("labels", &h.namespace, &labels, Some(&settings)))
            .await;
        h.wait_set("labels reloads", |s| {
            s.get("labels").is_some() && labels_after(s)["n"] == want
        })
        .await;
        warm.push(begun.elapsed());
    }
    warm.sort();
    let begun = Instant::now();
    h.delete("labels").await;
    h.wait_set("labels unloads", |s| s.get("labels").is_none())
        .await;
    let unload = begun.elapsed();
    println!(
        "labels ({} KiB): apply to loaded, cold cache {cold:?}; warm reload median {:?} (min {:?}, max {:?}, 10 runs); delete to unloaded {unload:?}",
        labels.len() / 1024,
        warm[5],
        warm[0],
        warm[9]
    );
}

/// An https server for the reference tests: `openssl s_server -WWW`
/// serving a directory with a certificate from a throwaway CA. Killed on
/// drop.
struct HttpsServer {
    child: std::process::Child,
    port: u16,
    ca_pem: Vec<u8>,
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn openssl(dir: &std::path::Path, args: &[&str]) -> bool {
    std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `None` when openssl is not installed (or cannot make the certificates):
/// the test is skipped, loudly, except under `CI=true`, where that fails it
/// ([`iar_apiserver::skip_or_fail`]), as a missing kube-apiserver does.
fn https_server(dir: &std::path::Path) -> Option<HttpsServer> {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca = [
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "1",
            "-subj",
            "/CN=iar-test-ca",
        ],
    ]
    .concat();
    let csr = [
        &["req"][..],
        &ec,
        &[
            "-keyout",
            "leaf.key",
            "-out",
            "leaf.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    ]
    .concat();
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let sign = [
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "leaf.pem",
        "-days",
        "1",
        "-extfile",
        "leaf.ext",
    ];
    if !(openssl(dir, &ca) && openssl(dir, &csr) && openssl(dir, &sign)) {
        iar_apiserver::skip_or_fail(
            "the https reference test: `openssl` is not on PATH or could not make its \
             certificates (install the openssl package; .ci/run does)",
        );
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = std::process::Command::new("openssl")
        .args([
            "s_server", "-quiet", "-WWW", "-cert", "leaf.pem", "-key", "leaf.key", "-accept",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl s_server");
    let server = HttpsServer {
        child,
        port,
        ca_pem: std::fs::read(dir.join("ca.pem")).unwrap(),
    };
    iar_tests::blocking::wait_for("openssl s_server listening", WITHIN, || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .map(drop)
            .map_err(|e| e.to_string())
    });
    Some(server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_reference_is_fetched_verified_and_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let labels = bytes(artifacts::LABELS);
    std::fs::write(dir.path().join("labels.wasm"), &labels).unwrap();
    let Some(server) = https_server(dir.path()) else {
        return;
    };
    let options = WatchOptions {
        extra_roots_pem: Some(server.ca_pem.clone()),
        grant_policy: iar::k8s::plugins::GrantPolicy {
            reference_hosts: vec!["127.0.0.1".into()],
            ..Default::default()
        },
        ..WatchOptions::default()
    };
    let Some(h) = start_with_options("plugins-https", runtime(), options).await else {
        return;
    };
    let url = format!("https://127.0.0.1:{}/labels.wasm", server.port);
    let by_url = configmap::manifest(ManifestInput {
        name: "labels".into(),
        namespace: h.namespace.clone(),
        component: labels.clone(),
        settings: Some(format!("config: {{labels: via=https}}\n{MUTATE_ALL}")),
        order: None,
        reference: Some(url.clone()),
    })
    .unwrap();
    h.apply(&by_url).await;
    let set = h
        .wait_set("labels loads", |s| s.get("labels").is_some())
        .await;
    assert_eq!(labels_after(&set)["via"], "https");
    h.wait_status("labels", "Ready").await;

    // The same URL under a digest it does not have: refused, the good one stays.
    let mut wrong = with_data(by_url.clone(), configmap::KEY_SHA256, &"1".repeat(64));
    wrong.metadata.name = Some("wrong".into());
    h.apply(&wrong).await;
    let annotations = h.wait_status("wrong", "DigestMismatch").await;
    let message = &annotations["iar.dev/status-message"];
    assert!(message.contains(&"1".repeat(64)), "the expected: {message}");
    assert!(
        !message.contains(set.get("labels").unwrap().digest()),
        "never the digest of what was read: {message}"
    );
    // Nothing listens on port 1: the fetch fails, naming the URL.
    let unreachable = "https://127.0.0.1:1/labels.wasm";
    let mut missing = with_data(by_url, configmap::KEY_REFERENCE, unreachable);
    missing.metadata.name = Some("missing".into());
    h.apply(&missing).await;
    let annotations = h.wait_status("missing", "SourceInvalid").await;
    assert!(
        annotations["iar.dev/status-message"].contains(unreachable),
        "{annotations:?}"
    );
    // A host the grant policy does not name (the cloud metadata address):
    // refused before any request, naming the rule.
    let metadata = "https://169.254.169.254/latest/meta-data/plugin.wasm";
    let mut elsewhere = with_data(missing, configmap::KEY_REFERENCE, metadata);
    elsewhere.metadata.name = Some("elsewhere".into());
    h.apply(&elsewhere).await;
    let annotations = h.wait_status("elsewhere", "GrantRefused").await;
    assert!(
        annotations["iar.dev/status-message"].contains("rule: reference-host"),
        "{annotations:?}"
    );
}

/// Two ConfigMaps for one plugin name: the newer is refused
/// (`NameConflict`, naming the older) and loads once the older no longer
/// claims the name; the older takes it back as soon as it claims it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_configmap_for_one_plugin_name_waits_for_the_first() {
    let Some(h) = start("plugins-conflict").await else {
        return;
    };
    let labels = bytes(artifacts::LABELS);
    h.apply(&plugin_cm(
        "labels",
        &h.namespace,
        &labels,
        Some("config: {labels: from=first}"),
    ))
    .await;
    h.wait_set("labels loads", |s| s.get("labels").is_some())
        .await;
    // creationTimestamp has one-second resolution: the second is newer.
    h.wait_a_second_past("labels").await;
    let second = with_data(
        plugin_cm(
            "labels-2",
            &h.namespace,
            &labels,
            Some("config: {labels: from=second}"),
        ),
        configmap::KEY_NAME,
        "labels",
    );
    h.apply(&second).await;
    assert!(h.created("labels-2").await > h.created("labels").await);
    let annotations = h.wait_status("labels-2", "NameConflict").await;
    let message = &annotations["iar.dev/status-message"];
    assert!(message.contains("rule: plugin-name-unique"), "{message}");
    assert!(
        message.contains("belongs to ConfigMap \"labels\", created earlier"),
        "{message}"
    );
    assert_eq!(labels_after(&h.registry.current())["from"], "first");
    // The holder's status names the one that waits.
    h.wait_message("labels", "\"labels-2\" also claim it").await;

    // Disabling the holder frees the name.
    let first = plugin_cm(
        "labels",
        &h.namespace,
        &labels,
        Some("config: {labels: from=first}"),
    );
    h.apply(&with_data(first.clone(), "enabled", "false")).await;
    let set = h
        .wait_set("the second takes the name", |s| {
            s.get("labels")
                .is_some_and(|_| labels_after(s)["from"] == "second")
        })
        .await;
    assert_eq!(set.plugins.len(), 1);
    h.wait_status("labels-2", "Ready").await;

    // Enabled again, the first is the older: it takes the name back at
    // once and the second waits again. (Before the oldest-wins rule the
    // second kept it, and the first waited.)
    h.apply(&first).await;
    h.wait_set("the first takes the name back", |s| {
        s.get("labels")
            .is_some_and(|_| labels_after(s)["from"] == "first")
    })
    .await;
    h.wait_message("labels-2", "belongs to ConfigMap \"labels\"")
        .await;
    h.wait_status("labels-2", "NameConflict").await;
    h.delete("labels-2").await;
    h.wait_status("labels", "Ready").await;
}

/// The oldest ConfigMap keeps a plugin name whatever order the watcher
/// sees them in: after a restart the list comes in name order, and a newer
/// ConfigMap whose name sorts first must not take the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_configmap_never_takes_a_plugin_name_even_across_a_restart() {
    let Some(mut h) = start("plugins-conflict-restart").await else {
        return;
    };
    let labels = bytes(artifacts::LABELS);
    let named = |cm: &str, from: &str| {
        with_data(
            plugin_cm(
                cm,
                &h.namespace,
                &labels,
                Some(&format!("config: {{labels: from={from}}}")),
            ),
            configmap::KEY_NAME,
            "labels",
        )
    };
    h.apply(&named("zz-owner", "owner")).await;
    h.wait_set("the owner loads", |s| s.get("labels").is_some())
        .await;
    h.wait_a_second_past("zz-owner").await;
    h.apply(&named("aa-intruder", "intruder")).await;
    assert!(h.created("aa-intruder").await > h.created("zz-owner").await);
    h.wait_status("aa-intruder", "NameConflict").await;
    assert_eq!(labels_after(&h.registry.current())["from"], "owner");

    h.restart(WatchOptions::default()).await;
    let set = h.registry.current();
    assert_eq!(set.plugins.len(), 1, "{:?}", names(&set));
    assert_eq!(
        labels_after(&set)["from"],
        "owner",
        "the older ConfigMap holds the name after the restart"
    );
    h.wait_message("aa-intruder", "belongs to ConfigMap \"zz-owner\"")
        .await;
    h.wait_message("zz-owner", "\"aa-intruder\" also claim it")
        .await;
}

/// The Secret `db` in the harness's namespace, and the item for it.
async fn secret_db(h: &Harness) -> iar::Item {
    use k8s_openapi::api::core::v1::Secret;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("db".into()),
            namespace: Some(h.namespace.clone()),
            ..ObjectMeta::default()
        },
        string_data: Some(BTreeMap::from([("password".into(), "hunter2".into())])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(h.client.clone(), &h.namespace)
        .create(&Default::default(), &secret)
        .await
        .expect("create the Secret");
    iar::Item::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": h.namespace}}),
        iar::catalog::Catalog::builtin(),
    )
    .unwrap()
}

/// Runs the hostile guest's `cluster-get` (one read of the item itself)
/// from the set's plugin `name` on `item`, against the live API server.
async fn cluster_get_through(
    h: &Harness,
    name: &str,
    item: &iar::Item,
) -> Result<serde_json::Value, String> {
    let plugin = h.registry.current().get(name).expect("loaded").clone();
    let cluster: Arc<dyn iar::ClusterReader> = Arc::new(iar::k8s::live::LiveCluster::new(
        h.client.clone(),
        tokio::runtime::Handle::current(),
    ));
    let item = item.clone();
    tokio::task::spawn_blocking(move || {
        plugin
            .instance(cluster)
            .execute(&item, &backup(iar::Phase::Backup), &never_seen)
            .map(|out| out.item.map(|i| i.into_value()).unwrap_or_default())
            .map_err(|e| e.to_string())
    })
    .await
    .unwrap()
}

const CLUSTER_GET: &str = "config: {behavior: cluster-get, cluster-gets: '1'}\n";

/// Under the default grant policy, a ConfigMap asking for Secrets or for
/// more than 4x a default limit is `GrantRefused` with an Event naming
/// what was refused and the rule, and is not loaded (an earlier good
/// version keeps serving); `allowRead: ['*']` loads, and cannot read a
/// Secret through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_asking_more_than_the_grant_policy_is_refused() {
    let Some(h) = start("plugins-policy").await else {
        return;
    };
    let hostile = bytes(artifacts::HOSTILE);
    let item = secret_db(&h).await;

    let star = plugin_cm(
        "hostile",
        &h.namespace,
        &hostile,
        Some(&format!("{CLUSTER_GET}allowRead: ['*']\n")),
    );
    h.apply(&star).await;
    let set = h
        .wait_set("hostile loads", |s| s.get("hostile").is_some())
        .await;
    let digest = set.get("hostile").unwrap().digest().to_string();
    h.wait_status("hostile", "Ready").await;
    let err = cluster_get_through(&h, "hostile", &item)
        .await
        .expect_err("'*' does not read Secrets");
    assert!(
        err.contains("reading secrets is not granted to this plugin"),
        "{err}"
    );

    let cases = [
        (
            format!("{CLUSTER_GET}allowRead: ['*', secrets]\n"),
            vec!["allowRead \"secrets\"", "`secrets`"],
        ),
        (
            format!("{CLUSTER_GET}limits: {{memoryBytes: 1073741824, deadline: 10m}}\n"),
            vec![
                "limits.memoryBytes 1073741824 (at most 268435456)",
                "limits.deadline 10m (at most 40s)",
            ],
        ),
    ];
    for (settings, named) in cases {
        h.apply(&plugin_cm(
            "hostile",
            &h.namespace,
            &hostile,
            Some(&settings),
        ))
        .await;
        let annotations = h.wait_status("hostile", "GrantRefused").await;
        let message = &annotations["iar.dev/status-message"];
        for part in named.iter().chain(&["rule: grant-policy", "stays loaded"]) {
            assert!(message.contains(part), "{part:?} in {message}");
        }
        assert_eq!(
            annotations[ANNOTATION_DIGEST],
            format!("sha256:{digest}"),
            "the version the policy allowed still serves"
        );
        h.wait_event("hostile", "GrantRefused", named[0]).await;
        // Back to the allowed version between cases.
        h.apply(&star).await;
        h.wait_status("hostile", "Ready").await;
    }

    // Refused with no earlier version: nothing loaded.
    h.apply(&plugin_cm(
        "greedy",
        &h.namespace,
        &hostile,
        Some("allowRead: [secrets]\n"),
    ))
    .await;
    let annotations = h.wait_status("greedy", "GrantRefused").await;
    assert!(!annotations.contains_key(ANNOTATION_DIGEST));
    assert!(h.registry.current().get("greedy").is_none());
}

/// An operator's policy that lists `secrets` lets a ConfigMap that names
/// them read a Secret; the same policy refuses what it does not list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_lists_secrets_lets_a_configmap_read_them_by_name() {
    let policy = iar::k8s::plugins::GrantPolicy::parse(
        "readable: [secrets, configmaps]\nisolation: [item]\n",
    )
    .unwrap();
    let options = WatchOptions {
        grant_policy: policy,
        ..WatchOptions::default()
    };
    let Some(h) = start_with_options("plugins-policy-secrets", runtime(), options).await else {
        return;
    };
    let hostile = bytes(artifacts::HOSTILE);
    let item = secret_db(&h).await;
    h.apply(&plugin_cm(
        "reader",
        &h.namespace,
        &hostile,
        Some(&format!(
            "{CLUSTER_GET}allowRead: [secrets]\nlimits: {{isolation: item}}\n"
        )),
    ))
    .await;
    h.wait_set("reader loads", |s| s.get("reader").is_some())
        .await;
    let out = cluster_get_through(&h, "reader", &item)
        .await
        .expect("granted by name");
    assert_eq!(
        out["metadata"]["annotations"]["hostile.iar.test/found"],
        "1"
    );

    // No allowRead is '*', and backup isolation: neither is in this policy.
    h.apply(&plugin_cm("defaults", &h.namespace, &hostile, None))
        .await;
    let annotations = h.wait_status("defaults", "GrantRefused").await;
    let message = &annotations["iar.dev/status-message"];
    assert!(message.contains("allowRead \"*\""), "{message}");
    assert!(message.contains("limits.isolation backup"), "{message}");
}

/// `data.reference` paths: only regular files under the configured
/// directory. A file outside it (by path or by symlink) and a FIFO inside
/// it are refused with the rule, without blocking the watcher (a good
/// plugin applied after the FIFO loads), and a digest mismatch names only
/// the expected digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_paths_must_be_regular_files_under_the_reference_dir() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let options = WatchOptions {
        reference_dir: Some(dir.path().to_path_buf()),
        ..WatchOptions::default()
    };
    let Some(h) = start_with_options("plugins-reference-dir", runtime(), options).await else {
        return;
    };
    let labels = bytes(artifacts::LABELS);
    std::fs::write(outside.path().join("labels.wasm"), &labels).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("labels.wasm"),
        dir.path().join("escape.wasm"),
    )
    .unwrap();
    let fifo = dir.path().join("fifo.wasm");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let by_reference = |name: &str, path: &std::path::Path| {
        configmap::manifest(ManifestInput {
            name: name.into(),
            namespace: h.namespace.clone(),
            component: labels.clone(),
            settings: None,
            order: None,
            reference: Some(path.display().to_string()),
        })
        .unwrap()
    };
    h.apply(&by_reference("fifo", &fifo)).await;
    h.apply(&plugin_cm("inline", &h.namespace, &labels, None))
        .await;
    for (name, path, reason) in [
        (
            "outside",
            outside.path().join("labels.wasm"),
            "is not under the reference directory",
        ),
        (
            "escape",
            dir.path().join("escape.wasm"),
            "resolves to a file outside the reference directory",
        ),
    ] {
        h.apply(&by_reference(name, &path)).await;
        let annotations = h.wait_status(name, "SourceInvalid").await;
        let message = &annotations["iar.dev/status-message"];
        assert!(message.contains(reason), "{message}");
        assert!(message.contains("rule: reference-dir"), "{message}");
    }
    let annotations = h.wait_status("fifo", "SourceInvalid").await;
    assert!(
        annotations["iar.dev/status-message"].contains("a FIFO, not a regular file"),
        "{annotations:?}"
    );
    h.wait_set("the inline plugin loads beside them", |s| {
        s.get("inline").is_some()
    })
    .await;
    let set = h.registry.current();
    assert_eq!(names(&set), ["inline"]);

    // Inside the directory, under a digest it does not have.
    std::fs::write(dir.path().join("labels.wasm"), &labels).unwrap();
    let wrong = with_data(
        by_reference("wrong", &dir.path().join("labels.wasm")),
        configmap::KEY_SHA256,
        &"2".repeat(64),
    );
    h.apply(&wrong).await;
    let annotations = h.wait_status("wrong", "DigestMismatch").await;
    let message = &annotations["iar.dev/status-message"];
    assert!(message.contains(&"2".repeat(64)), "{message}");
    assert!(
        !message.contains(set.get("inline").unwrap().digest()),
        "never the digest of what was read: {message}"
    );
}

/// A TCP listener that accepts and never answers: an https server that
/// hangs. Connections are held until the test ends.
fn silent_server() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = accepted.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    (port, accepted)
}

/// Loads run in parallel, each under a timeout: a plugin applied after
/// one whose https server never answers loads while that one still waits,
/// and after a restart the first sync is published once the hanging load
/// times out (`LoadTimeout`), with the good plugin in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_reference_holds_up_neither_other_loads_nor_the_first_sync() {
    let (port, accepted) = silent_server();
    let options = WatchOptions {
        read_timeout: Duration::from_secs(30),
        grant_policy: iar::k8s::plugins::GrantPolicy {
            reference_hosts: vec!["127.0.0.1".into()],
            ..Default::default()
        },
        ..WatchOptions::default()
    };
    let Some(mut h) = start_with_options("plugins-slow", runtime(), options).await else {
        return;
    };
    let labels = bytes(artifacts::LABELS);
    let hanging = configmap::manifest(ManifestInput {
        name: "hanging".into(),
        namespace: h.namespace.clone(),
        component: labels.clone(),
        settings: None,
        order: None,
        reference: Some(format!("https://127.0.0.1:{port}/labels.wasm")),
    })
    .unwrap();
    h.apply(&hanging).await;
    // The watcher starts on it first: it has connected to the server.
    iar_tests::wait_until(
        "the watcher connecting to the silent server",
        WITHIN,
        || std::future::ready(accepted.load(std::sync::atomic::Ordering::SeqCst) > 0),
    )
    .await;
    h.apply(&plugin_cm("labels", &h.namespace, &labels, None))
        .await;
    h.wait_set("labels loads", |s| s.get("labels").is_some())
        .await;
    let status = h
        .api()
        .get("hanging")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default()
        .remove(ANNOTATION_STATUS);
    // No status yet: what bounds that is the read timeout (30 s), which
    // the server, silent, makes the read wait out.
    assert_eq!(
        status, None,
        "labels loaded while the hanging reference is still being read"
    );

    let started = Instant::now();
    h.restart(WatchOptions {
        read_timeout: Duration::from_secs(2),
        grant_policy: iar::k8s::plugins::GrantPolicy {
            reference_hosts: vec!["127.0.0.1".into()],
            ..Default::default()
        },
        ..WatchOptions::default()
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "the first sync waited for the timeout, not for the https client's own ({:?})",
        started.elapsed()
    );
    assert_eq!(names(&h.registry.current()), ["labels"]);
    let annotations = h.wait_status("hanging", "LoadTimeout").await;
    assert!(
        annotations["iar.dev/status-message"].contains("rule: load-timeout"),
        "{annotations:?}"
    );
}

/// A plugin whose `applies-to` sleeps in WASI (for ever, as far as it
/// knows) does not stall the watcher: while it is still loading, another
/// plugin loads and then reloads with new config; the sleeper itself is
/// stopped at its wall-clock ceiling and its ConfigMap says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_sleeping_in_applies_to_stalls_no_other_load() {
    let Some(h) = start("plugins-sleep").await else {
        return;
    };
    let labels = bytes(artifacts::LABELS);
    h.apply(&plugin_cm(
        "sleeper",
        &h.namespace,
        &bytes(artifacts::HOSTILE),
        Some("config: {applies-to: sleep}\nlimits: {deadline: 1s, wallClock: 15s}\n"),
    ))
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    h.apply(&plugin_cm(
        "labels",
        &h.namespace,
        &labels,
        Some("config: {labels: round=one}\n"),
    ))
    .await;
    h.wait_set("labels loads", |s| s.get("labels").is_some())
        .await;
    h.apply(&plugin_cm(
        "labels",
        &h.namespace,
        &labels,
        Some("config: {labels: round=two}\n"),
    ))
    .await;
    h.wait_set("labels reloads", |s| {
        s.get("labels").is_some() && labels_after(s)["round"] == "two"
    })
    .await;
    // Both happened inside the sleeper's 15 s ceiling.
    assert!(
        started.elapsed() < Duration::from_secs(14),
        "the other loads waited for the sleeper ({:?})",
        started.elapsed()
    );
    assert!(h.registry.current().get("sleeper").is_none());
    let annotations = h.wait_status("sleeper", "AppliesToFailed").await;
    assert!(
        annotations["iar.dev/status-message"].contains("rule: wall-clock"),
        "{annotations:?}"
    );
}
