//! `iar controller` against a real kube-apiserver and etcd (`iar-apiserver`):
//! Backup resources to Completed with their status and data, live items
//! through the spec's filters, `cluster-get` within a plugin's grants,
//! metrics and probes, two replicas with one leader, garbage collection of
//! expired backups, and deploy/'s RBAC.

use crate::support::{client, load, load_granted, repo, runtime, server, store};
use iar::backup::object::{BackupObject, BackupPhase};
use iar::item::ItemRef;
use iar::k8s::controller::{Options, Plugins, run};
use iar::k8s::crd::{Backup, BackupSpec};
use iar::k8s::live::LiveCluster;
use iar::k8s::plugins::PluginRegistry;
use iar::operations::{Operation, OperationPhase};
use iar::phases::Settings;
use iar::store::{BackupFile, BackupStore, tarball};
use iar::{BackupRef, Phase, Plugin, ReadGrants};
use iar_apiserver::{User, create_namespace};
use iar_tests::{artifacts, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// iar's CRDs, created once and established. (The VolumeSnapshot CRDs are
/// the real ones, installed with the real snapshot-controller:
/// `csi::snapshots`.)
pub(crate) async fn install_crds(client: &Client) {
    static DONE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    DONE.get_or_init(|| install_crds_on(client)).await;
}

/// iar's CRDs created on the server `client` talks to, established (a
/// server of the caller's own: [`install_crds`] does it once for the
/// shared one).
pub(crate) async fn install_crds_on(client: &Client) {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in [
        iar::k8s::crd::definition(),
        iar::k8s::crd::volume_backup_definition(),
        iar::k8s::crd::volume_restore_definition(),
        iar::k8s::crd::schedule_definition(),
        iar::k8s::crd::restore_definition(),
        iar::k8s::crd::download_request_definition(),
    ] {
        let name = crd.metadata.name.clone().unwrap();
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("create CRD {name}: {e}"),
        }
        wait_for(
            &format!("CRD {name} established"),
            Duration::from_secs(30),
            || {
                let crds = crds.clone();
                let name = name.clone();
                async move {
                    let crd = crds.get(&name).await.map_err(|e| e.to_string())?;
                    let established = crd.status.and_then(|s| s.conditions).is_some_and(|c| {
                        c.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                    established
                        .then_some(())
                        .ok_or_else(|| "not yet".to_string())
                }
            },
        )
        .await;
    }
}

pub(crate) async fn create_config_map(client: &Client, ns: &str, name: &str, app: &str) {
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "data": {"greeting": "hello"}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap_or_else(|e| panic!("create configmap {ns}/{name}: {e}"));
}

pub(crate) async fn create_backup(client: &Client, ns: &str, name: &str, spec: BackupSpec) {
    let backup = Backup::new(name, spec);
    Api::<Backup>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &backup)
        .await
        .unwrap_or_else(|e| panic!("create backup {ns}/{name}: {e}"));
}

/// Waits for the resource's status to reach `phase`.
pub(crate) async fn wait_phase(
    client: &Client,
    ns: &str,
    name: &str,
    phase: BackupPhase,
) -> Backup {
    let api = Api::<Backup>::namespaced(client.clone(), ns);
    wait_for(
        &format!("backup {ns}/{name} {phase}"),
        Duration::from_secs(90),
        || {
            let api = api.clone();
            async move {
                let b = api.get(name).await.map_err(|e| e.to_string())?;
                match b.status.as_ref().map(|s| s.phase) {
                    Some(p) if p == phase => Ok(b),
                    // A backup that ended otherwise says why.
                    other => Err(format!(
                        "phase {other:?}, failure reason {:?}",
                        b.status.as_ref().map(|s| s.failure_reason.as_str())
                    )),
                }
            }
        },
    )
    .await
}

pub(crate) fn spec(namespace: &str) -> BackupSpec {
    BackupSpec {
        included_namespaces: Some(vec![namespace.into()]),
        included_resources: Some(vec!["configmaps".into(), "persistentvolumeclaims".into()]),
        label_selector: Some(LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: None,
        }),
        ..BackupSpec::default()
    }
}

pub(crate) fn settings() -> Settings {
    Settings {
        sync_period: Duration::from_millis(200),
        lease_duration: Duration::from_secs(3),
        workers: 2,
        gc_period: GC_PERIOD,
        ..Settings::default()
    }
}

/// The tests' garbage-collection sweep period.
const GC_PERIOD: Duration = Duration::from_millis(300);

/// Starts the controller in this process; returns where it serves.
pub(crate) async fn start_controller(
    client: Client,
    namespace: &str,
    store: BackupStore,
    plugins: Vec<Plugin>,
    registry: Arc<PluginRegistry>,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let identity = format!("{namespace}-in-process");
    start_replica(client, namespace, store, plugins, registry, &identity).await
}

/// [`start_controller`] as replica `identity`: several share the
/// namespace's lease.
pub(crate) async fn start_replica(
    client: Client,
    namespace: &str,
    store: BackupStore,
    plugins: Vec<Plugin>,
    registry: Arc<PluginRegistry>,
    identity: &str,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    start_replica_with(
        client,
        namespace,
        store,
        plugins,
        registry,
        identity,
        settings(),
    )
    .await
}

/// [`start_replica`] with its own settings (a repository password: as
/// deploy/deployment.yaml gives the controller, so that it can forget a
/// deleted backup's volume snapshots).
pub(crate) async fn start_replica_with(
    client: Client,
    namespace: &str,
    store: BackupStore,
    plugins: Vec<Plugin>,
    registry: Arc<PluginRegistry>,
    identity: &str,
    settings: Settings,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let options = Options {
        namespace: namespace.into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        lease_name: "iar-controller".into(),
        identity: identity.into(),
        leader_lease: Duration::from_secs(3),
        settings,
        store,
        // Above the agents' 5 s heartbeat, short enough for a test.
        volume_agent_silence: Duration::from_secs(10),
        restore_helper_image: "iar:test".into(),
        pod_volume_timeout: Duration::from_secs(120),
        shutdown: None,
        drain: Duration::ZERO,
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    // The operator lets plugin ConfigMaps create VolumeSnapshots
    // (deploy/grant-policy.yaml says how), as pvc-snapshot needs.
    let watch = iar::k8s::plugins::WatchOptions {
        grant_policy: iar::k8s::plugins::policy::GrantPolicy {
            writable: vec![crate::csi::SNAPSHOT_GRANT.into()],
            // labels labels every item (ServiceAccounts too), pvc-snapshot
            // its claims.
            mutable: vec!["*".into(), "serviceaccounts".into()],
            ..Default::default()
        },
        ..Default::default()
    };
    let plugins = Plugins {
        runtime: runtime(),
        registry,
        files: plugins,
        watch,
    };
    let task = tokio::spawn(async move {
        if let Err(e) = run(client, options, plugins, Some(tx)).await {
            panic!("controller: {e}");
        }
    });
    (rx.await.expect("the controller serves"), task)
}

/// One HTTP/1.0 GET: (status code, body).
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, body.to_string())
}

fn tar_entries(store_dir: &Path, name: &str) -> BTreeMap<String, Value> {
    let path = store_dir
        .join("backups")
        .join(name)
        .join(format!("{name}.tar.gz"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    tarball::read(&bytes)
        .unwrap()
        .into_iter()
        .filter(|(p, _)| p.ends_with(".json"))
        .map(|(p, b)| (p, serde_json::from_slice(&b).unwrap()))
        .collect()
}

fn entry_path(group: &str, resource: &str, ns: &str, name: &str) -> String {
    tarball::item_path(&ItemRef::new(group, resource, ns, name)).unwrap()
}

/// A Backup created with the client goes to Completed through a plugin
/// operation whose VolumeSnapshot becomes ready in the live cluster; the
/// spec's filters pick the right live objects; the status is filled in on
/// the way; the data is in the store in Velero's layout and stays there
/// when the resource is deleted; metrics and probes answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_resource_runs_to_completed_with_its_status_and_data() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    crate::csi::ready(&admin).await;
    let (system, shop) = ("ctl-a", "ctl-a-shop");
    create_namespace(&admin, system).await;
    create_namespace(&admin, shop).await;
    create_config_map(&admin, shop, "web-config", "web").await;
    create_config_map(&admin, shop, "db-config", "db").await;
    crate::csi::csi_claim(&admin, shop, "data-web", "web").await;
    crate::csi::csi_claim(&admin, shop, "data-db", "db").await;
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": "web-token", "labels": {"app": "web"}}}),
    )
    .unwrap();
    Api::<Secret>::namespaced(admin.clone(), shop)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let (store_dir, store) = store();
    let rt = runtime();
    let plugins = vec![
        load(&rt, artifacts::LABELS, &[("labels", "backed-up-by=iar")]),
        crate::csi::pvc_snapshot(&rt),
    ];
    let (addr, controller) =
        start_controller(admin.clone(), system, store, plugins, PluginRegistry::new()).await;

    create_backup(&admin, system, "nightly", spec(shop)).await;
    let waiting = wait_phase(
        &admin,
        system,
        "nightly",
        BackupPhase::WaitingForPluginOperations,
    )
    .await;
    let status = waiting.status.unwrap();
    assert_eq!(status.progress.items_backed_up, 2, "{status:?}");
    assert_eq!(status.backup_item_operations_attempted, 1);
    assert!(status.start_timestamp.is_some());

    crate::csi::cut_snapshot(&admin, shop, "data-web-nightly").await;
    let done = wait_phase(&admin, system, "nightly", BackupPhase::Completed).await;
    let status = done.status.unwrap();
    assert_eq!(status.errors, 0, "{status:?}");
    assert_eq!(status.backup_item_operations_completed, 1);
    assert!(status.completion_timestamp.is_some());

    // Velero's layout: the object, and the items selected by the filters.
    let stored: BackupObject = serde_json::from_slice(
        &std::fs::read(store_dir.path().join("backups/nightly/velero-backup.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        stored.status, status,
        "the resource shows the persisted status"
    );
    let entries = tar_entries(store_dir.path(), "nightly");
    let web = &entries[&entry_path("", "configmaps", shop, "web-config")];
    assert_eq!(
        web["metadata"]["labels"]["backed-up-by"], "iar",
        "went through the plugin"
    );
    assert_eq!(web["kind"], "ConfigMap");
    assert!(entries.contains_key(&entry_path("", "persistentvolumeclaims", shop, "data-web")));
    // Finalize read the post-operation item live.
    let snapshot = &entries[&entry_path(
        "snapshot.storage.k8s.io",
        "volumesnapshots",
        shop,
        "data-web-nightly",
    )];
    assert_eq!(snapshot["status"]["readyToUse"], true);
    let names: Vec<&String> = entries.keys().collect();
    for left_out in ["db-config", "data-db", "web-token"] {
        assert!(
            !names.iter().any(|n| n.contains(left_out)),
            "{left_out} is filtered out: {names:?}"
        );
    }

    // Probes and metrics.
    assert_eq!(http_get(addr, "/healthz").0, 200);
    wait_for("readyz", Duration::from_secs(10), || async {
        match http_get(addr, "/readyz") {
            (200, _) => Ok(()),
            (code, body) => Err(format!("{code} {body}")),
        }
    })
    .await;
    let (code, text) = http_get(addr, "/metrics");
    assert_eq!(code, 200);
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
    let sample = |name: &str, labels: &[(&str, &str)]| {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum::<f64>()
    };
    assert!(
        sample(
            "iar_plugin_calls_total",
            &[
                ("plugin", "iar_plugin_labels"),
                ("call", "execute"),
                ("outcome", "ok")
            ]
        ) >= 2.0,
        "{text}"
    );
    assert!(
        sample(
            "iar_plugin_calls_total",
            &[("call", "progress"), ("outcome", "ok")]
        ) >= 1.0
    );
    assert!(
        sample("iar_backups", &[("phase", "Completed")]) >= 1.0,
        "{text}"
    );
    assert!(
        text.contains("iar_plugin_call_duration_seconds_bucket"),
        "{text}"
    );

    // Deleting the resource leaves the data.
    Api::<Backup>::namespaced(admin.clone(), system)
        .delete("nightly", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&admin, system, "nightly").await;
    assert!(
        store_dir
            .path()
            .join("backups/nightly/nightly.tar.gz")
            .exists()
    );
    controller.abort();
}

/// Waits until the resource is gone (its finalizer removed).
async fn wait_gone(client: &Client, ns: &str, name: &str) {
    let api = Api::<Backup>::namespaced(client.clone(), ns);
    wait_for(
        &format!("backup {ns}/{name} gone"),
        Duration::from_secs(60),
        || {
            let api = api.clone();
            async move {
                match api.get_opt(name).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(b) => Err(format!(
                        "still there: finalizers {:?}, deleting since {:?}",
                        b.metadata.finalizers, b.metadata.deletion_timestamp
                    )),
                }
            }
        },
    )
    .await
}

/// What the cancel and expiry tests share: a shop with one web ConfigMap
/// and one bound PVC, and the controller running the pvc-snapshot plugin
/// (whose operation waits until the test makes its snapshot ready) on a
/// store in a temporary directory.
async fn snapshot_scene(
    admin: &Client,
    system: &str,
    shop: &str,
) -> (tempfile::TempDir, BackupStore, tokio::task::JoinHandle<()>) {
    crate::csi::ready(admin).await;
    create_namespace(admin, system).await;
    create_namespace(admin, shop).await;
    create_config_map(admin, shop, "web-config", "web").await;
    crate::csi::csi_claim(admin, shop, "data-web", "web").await;
    let (store_dir, store) = store();
    let plugins = vec![crate::csi::pvc_snapshot(&runtime())];
    let (_, controller) = start_controller(
        admin.clone(),
        system,
        store.clone(),
        plugins,
        PluginRegistry::new(),
    )
    .await;
    (store_dir, store, controller)
}

/// A Backup resource deleted while its backup waits for an operation: the
/// finalizer holds the resource until the operation is cancelled through
/// its plugin (the contract's `cancel`) and marked Canceled, and the backup
/// ends Failed with the reason; what it wrote stays in the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_an_unfinished_backup_cancels_its_operations_and_keeps_its_data() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    let (system, shop) = ("ctl-del", "ctl-del-shop");
    let (store_dir, store, controller) = snapshot_scene(&admin, system, shop).await;

    create_backup(&admin, system, "doomed", spec(shop)).await;
    let waiting = wait_phase(
        &admin,
        system,
        "doomed",
        BackupPhase::WaitingForPluginOperations,
    )
    .await;
    assert_eq!(
        waiting.metadata.finalizers.as_deref(),
        Some(&["iar.dev/backup".to_string()][..]),
        "the controller holds the resource until it has ended its backup"
    );
    // The snapshot never becomes ready: only the deletion ends the wait.
    Api::<Backup>::namespaced(admin.clone(), system)
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&admin, system, "doomed").await;

    let stored: BackupObject = store
        .get_json("doomed", BackupFile::Metadata)
        .await
        .unwrap()
        .expect("the backup stays in the store");
    assert_eq!(stored.status.phase, BackupPhase::Failed, "{stored:?}");
    let reason = &stored.status.failure_reason;
    assert!(
        reason.contains("Backup resource ctl-del/doomed was deleted")
            && reason.contains("WaitingForPluginOperations"),
        "{reason}"
    );
    assert_eq!(stored.status.backup_item_operations_attempted, 1);
    assert_eq!(stored.status.backup_item_operations_failed, 1);
    let ops: Vec<Operation> = store
        .get_json("doomed", BackupFile::ItemOperations)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].status.phase, OperationPhase::Canceled, "{ops:?}");
    assert!(
        ops[0].status.error.ends_with("cancel requested"),
        "the plugin answered the cancel: {}",
        ops[0].status.error
    );
    // Velero's vocabulary in the Velero-layout file: Failed, "canceled: …".
    let raw: Value = {
        let file = store_dir
            .path()
            .join("backups/doomed/doomed-itemoperations.json.gz");
        let mut json = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(file).unwrap())
            .read_to_string(&mut json)
            .unwrap();
        serde_json::from_str(&json).unwrap()
    };
    assert_eq!(raw[0]["status"]["phase"], "Failed", "{raw}");
    assert!(
        raw[0]["status"]["error"]
            .as_str()
            .unwrap()
            .starts_with("canceled: "),
        "{raw}"
    );
    // The plugin's cancel ran (its log line) and deleted the snapshot it
    // had created; the data is kept.
    let logs = store.get_logs("doomed").await.unwrap().unwrap();
    assert!(
        logs.iter().any(|l| l.contains("backup gave up on")),
        "{logs:#?}"
    );
    crate::csi::wait_deleted(&admin, shop, "data-web-doomed").await;
    let entries = tar_entries(store_dir.path(), "doomed");
    assert!(entries.contains_key(&entry_path("", "configmaps", shop, "web-config")));
    assert!(entries.contains_key(&entry_path("", "persistentvolumeclaims", shop, "data-web")));

    // A finished backup's resource goes at once, and its backup is left
    // as it was.
    let configmaps_only = BackupSpec {
        included_resources: Some(vec!["configmaps".into()]),
        ..spec(shop)
    };
    create_backup(&admin, system, "quick", configmaps_only).await;
    wait_phase(&admin, system, "quick", BackupPhase::Completed).await;
    Api::<Backup>::namespaced(admin.clone(), system)
        .delete("quick", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&admin, system, "quick").await;
    let quick: BackupObject = store
        .get_json("quick", BackupFile::Metadata)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(quick.status.phase, BackupPhase::Completed);
    controller.abort();
}

/// Expiry in the cluster. A Backup with the default ttl gets it written
/// into its stored spec (Velero's "720h0m0s") and an expiration on its
/// status, and stays. A Backup whose ttl (1s) passes while it waits for
/// its operation is not deleted while it waits, however many sweeps run;
/// once the operation completes and the backup ends, its data leaves the
/// store and its resource is deleted. A resource left with an expired
/// status and no stored backup is deleted by its next reconcile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_backup_goes_with_its_resource_once_it_has_ended() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    let (system, shop) = ("ctl-gc", "ctl-gc-shop");
    let (store_dir, store, controller) = snapshot_scene(&admin, system, shop).await;
    let stored = |name: &'static str| {
        let store = store.clone();
        async move {
            store
                .get_json::<BackupObject>(name, BackupFile::Metadata)
                .await
                .unwrap()
        }
    };

    let configmaps_only = BackupSpec {
        included_resources: Some(vec!["configmaps".into()]),
        ..spec(shop)
    };
    create_backup(&admin, system, "kept", configmaps_only).await;
    let kept = wait_phase(&admin, system, "kept", BackupPhase::Completed).await;
    let kept_object = stored("kept").await.expect("kept is stored");
    assert_eq!(kept_object.spec["ttl"], "720h0m0s");
    let expiration = kept_object
        .status
        .expiration
        .clone()
        .expect("an expiration");
    assert_eq!(kept.status.unwrap().expiration.as_ref(), Some(&expiration));
    let start = humantime::parse_rfc3339(kept_object.status.start_timestamp.as_ref().unwrap());
    let expires = humantime::parse_rfc3339(&expiration).unwrap();
    assert!(
        expires > start.unwrap() + Duration::from_secs(719 * 3600),
        "creation + 720h: {expiration}"
    );

    let short = BackupSpec {
        ttl: Some("1s".into()),
        ..spec(shop)
    };
    create_backup(&admin, system, "expiring", short).await;
    let waiting = wait_phase(
        &admin,
        system,
        "expiring",
        BackupPhase::WaitingForPluginOperations,
    )
    .await;
    let expiration = waiting.status.unwrap().expiration.expect("an expiration");
    // An unfinished backup stays however long expired. What bounds that
    // claim is a sweep that ran after the expiration: a witness in the
    // store, ended and expiring at the same moment, with no resource (so
    // only a sweep deletes it), goes in the first such sweep, which looked
    // at "expiring" too.
    let mut witness = kept_object.clone();
    witness.metadata.name = "witness".into();
    witness.metadata.uid = "witness-uid".into();
    witness.status.expiration = Some(expiration.clone());
    store
        .put_json("witness", BackupFile::Metadata, &witness)
        .await
        .unwrap();
    wait_for(
        "a sweep after the expiration (the witness deleted)",
        Duration::from_secs(30),
        || async {
            match stored("witness").await {
                None => Ok(()),
                Some(w) => Err(format!("the witness is {:?}", w.status.phase)),
            }
        },
    )
    .await;
    let still = stored("expiring")
        .await
        .expect("an unfinished backup is kept");
    assert_eq!(still.status.phase, BackupPhase::WaitingForPluginOperations);
    assert!(
        Api::<Backup>::namespaced(admin.clone(), system)
            .get_opt("expiring")
            .await
            .unwrap()
            .is_some()
    );

    // The operation completes, the backup ends, and then it goes, with
    // the snapshot its plugin created.
    crate::csi::cut_snapshot(&admin, shop, "data-web-expiring").await;
    wait_gone(&admin, system, "expiring").await;
    crate::csi::wait_deleted(&admin, shop, "data-web-expiring").await;
    assert!(stored("expiring").await.is_none());
    assert!(!store_dir.path().join("backups/expiring").exists());
    assert_eq!(store.list_backups().await.unwrap(), ["kept"]);
    // The other is untouched, resource and data.
    let kept = wait_phase(&admin, system, "kept", BackupPhase::Completed).await;
    assert_eq!(
        kept.status.unwrap().expiration,
        Some(expiration_of(&kept_object))
    );
    assert!(store_dir.path().join("backups/kept/kept.tar.gz").is_file());

    // The retry path: a resource left behind by a backup whose expired
    // data went (its deletion failed, or no iar watched it then) is
    // deleted by its next reconcile, and nothing is started for it.
    controller.abort();
    let _ = controller.await;
    let ended = json!({"status": {"phase": "Completed", "expiration": "2020-01-01T00:00:00Z"}});
    leftover_goes(&admin, system, shop, &store, "leftover", ended, false).await;
    // A resource whose status stayed running (its status writes lost to
    // an API server restart) while its backup ended in the store, expired
    // and was collected: the collection's tombstone for its uid says it is
    // a leftover, and it goes too (the fault campaign's seed 1404 found
    // one InProgress for good).
    let running = json!({"status": {"phase": "InProgress"}});
    leftover_goes(&admin, system, shop, &store, "stale", running, true).await;
}

/// A Backup resource `name` written with `status` while no controller
/// runs (and, `collected`, its uid's collection tombstone in the store)
/// is deleted by the next controller's reconcile, and nothing is started
/// for it.
async fn leftover_goes(
    admin: &Client,
    system: &str,
    shop: &str,
    store: &BackupStore,
    name: &str,
    status: Value,
    collected: bool,
) {
    create_backup(admin, system, name, spec(shop)).await;
    let resource = Api::<Backup>::namespaced(admin.clone(), system)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    if collected {
        store
            .put_collected(resource.metadata.uid.as_deref().unwrap())
            .await
            .unwrap();
    }
    let (_, controller) = start_controller(
        admin.clone(),
        system,
        store.clone(),
        Vec::new(),
        PluginRegistry::new(),
    )
    .await;
    wait_gone(admin, system, name).await;
    let stored: Option<BackupObject> = store.get_json(name, BackupFile::Metadata).await.unwrap();
    assert!(stored.is_none(), "nothing was started for {name}");
    controller.abort();
    let _ = controller.await;
}

fn expiration_of(object: &BackupObject) -> String {
    object.status.expiration.clone().unwrap()
}

/// `cluster-get` from a plugin call on a blocking thread reaches the live
/// server through the bridge, and only for resources the plugin is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_get_reads_live_objects_only_within_the_grants() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    crate::csi::ready(&admin).await;
    let ns = "ctl-grants";
    create_namespace(&admin, ns).await;
    crate::csi::csi_claim(&admin, ns, "data", "x").await;
    crate::csi::create_snapshot(&admin, ns, "data-b", "data").await;
    crate::csi::cut_snapshot(&admin, ns, "data-b").await;
    let cluster: Arc<dyn iar::ClusterReader> = Arc::new(LiveCluster::new(
        admin.clone(),
        tokio::runtime::Handle::current(),
    ));
    let rt = runtime();
    let granted = load_granted(
        &rt,
        artifacts::PVC_SNAPSHOT,
        &[],
        ReadGrants::only(&["volumesnapshots.snapshot.storage.k8s.io"]).unwrap(),
    );
    let denied = load_granted(
        &rt,
        artifacts::PVC_SNAPSHOT,
        &[],
        ReadGrants::only(&["persistentvolumeclaims"]).unwrap(),
    );
    let backup = BackupRef {
        object: None,
        name: "b".into(),
        namespace: "iar".into(),
        uid: "u".into(),
        spec: json!({}),
        phase: Phase::Backup,
    };
    let pvc = ItemRef::new("", "persistentvolumeclaims", ns, "data");
    let (ok, refused) = tokio::task::spawn_blocking(move || {
        let id = format!("{ns}/data-b");
        let ok = granted
            .instance(cluster.clone())
            .progress(&id, &pvc, &backup);
        let refused = denied.instance(cluster).progress(&id, &pvc, &backup);
        (ok, refused)
    })
    .await
    .unwrap();
    let progress = ok.expect("granted: the live snapshot is read");
    assert!(progress.completed, "{progress:?}");
    assert_eq!(progress.n_completed, 1);
    let error = refused.expect_err("denied: cluster-get fails").to_string();
    assert!(
        error.contains(
            "reading volumesnapshots.snapshot.storage.k8s.io is not granted to this plugin"
        ),
        "{error}"
    );
}

/// An `iar controller` process, killed when dropped.
pub(crate) struct ControllerProcess(std::process::Child);

impl ControllerProcess {
    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Stops it as Kubernetes stops a pod (SIGTERM) and waits for it.
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        self.0.wait().unwrap()
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn spawn_controller(
    kubeconfig: &Path,
    namespace: &str,
    store: &Path,
    plugins: &Path,
    identity: &str,
    log: &Path,
) -> ControllerProcess {
    spawn_controller_leased(kubeconfig, namespace, store, plugins, identity, log, "3s")
}

/// [`spawn_controller`] with backup leases of `lease` (`--lease-duration`).
pub(crate) fn spawn_controller_leased(
    kubeconfig: &Path,
    namespace: &str,
    store: &Path,
    plugins: &Path,
    identity: &str,
    log: &Path,
    lease: &str,
) -> ControllerProcess {
    let log = std::fs::File::create(log).unwrap();
    let child = std::process::Command::new(crate::support::iar_bin())
        .args([
            "controller",
            "--namespace",
            namespace,
            "--listen",
            "127.0.0.1:0",
        ])
        .arg("--store")
        .arg(store)
        .arg("--plugins")
        .arg(plugins)
        .args([
            "--identity",
            identity,
            "--leader-lease",
            "3s",
            "--lease-duration",
            lease,
        ])
        .args(["--sync-period", "200ms", "--workers", "2"])
        .env("KUBECONFIG", kubeconfig)
        .env(
            "XDG_CACHE_HOME",
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("xdg-cache"),
        )
        .env("IAR_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("iar controller starts");
    ControllerProcess(child)
}

/// What the tests of several controller processes share: the system and
/// shop namespaces, a CSI claim `data-web` and a ConfigMap of app `web` in
/// the shop, and a work directory with a plugin directory (`labels`, and
/// `pvc-snapshot` granted its snapshots), a store and each replica's log.
pub(crate) struct ReplicaScene {
    pub work: tempfile::TempDir,
    pub plugins: PathBuf,
    pub store: PathBuf,
}

impl ReplicaScene {
    pub(crate) async fn new(admin: &Client, system: &str, shop: &str) -> Self {
        create_namespace(admin, system).await;
        create_namespace(admin, shop).await;
        crate::csi::csi_claim(admin, shop, "data-web", "web").await;
        create_config_map(admin, shop, "web-config", "web").await;
        let work = tempfile::tempdir().unwrap();
        let plugins = work.path().join("plugins");
        std::fs::create_dir(&plugins).unwrap();
        for p in [artifacts::LABELS, artifacts::PVC_SNAPSHOT] {
            let p = Path::new(p);
            std::fs::copy(p, plugins.join(p.file_name().unwrap())).unwrap();
        }
        crate::csi::grant_in_dir(&plugins, "iar_plugin_pvc_snapshot");
        let store = work.path().join("store");
        ReplicaScene {
            work,
            plugins,
            store,
        }
    }

    pub(crate) fn log(&self, who: &str) -> PathBuf {
        self.work.path().join(format!("{who}.log"))
    }

    /// Every named replica's log, for a failure message.
    pub(crate) fn logs(&self, replicas: &[&str]) -> String {
        replicas
            .iter()
            .map(|w| {
                format!(
                    "--- {w}:\n{}",
                    std::fs::read_to_string(self.log(w)).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

pub(crate) async fn lease_holder(client: &Client, ns: &str) -> Result<String, String> {
    let lease = Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt("iar-controller")
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no lease yet")?;
    lease
        .spec
        .and_then(|s| s.holder_identity)
        .ok_or_else(|| "no holder".into())
}

/// Two controller processes: one leads; it is killed while the backup waits
/// for its operation; the other takes over and finishes the backup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_controllers_one_leader_the_survivor_finishes_the_backup() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    crate::csi::ready(&admin).await;
    let (system, shop) = ("ctl-lead", "ctl-lead-shop");
    let scene = ReplicaScene::new(&admin, system, shop).await;
    let (log, logs) = (|who: &str| scene.log(who), || scene.logs(&["a", "b"]));
    let spawn = |who: &str| {
        spawn_controller(
            server.kubeconfig(),
            system,
            &scene.store,
            &scene.plugins,
            who,
            &log(who),
        )
    };

    let a = spawn("a");
    let holder = wait_for("a leads", Duration::from_secs(30), || {
        lease_holder(&admin, system)
    })
    .await;
    assert_eq!(holder, "a", "{}", logs());
    let _b = spawn("b");

    create_backup(&admin, system, "handover", spec(shop)).await;
    wait_phase(
        &admin,
        system,
        "handover",
        BackupPhase::WaitingForPluginOperations,
    )
    .await;
    drop(a); // SIGKILL: no release of either lease.

    crate::csi::cut_snapshot(&admin, shop, "data-web-handover").await;
    let done = wait_phase(&admin, system, "handover", BackupPhase::Completed).await;
    assert_eq!(done.status.unwrap().backup_item_operations_completed, 1);
    assert_eq!(
        lease_holder(&admin, system).await.unwrap(),
        "b",
        "{}",
        logs()
    );
    let b_log = std::fs::read_to_string(log("b")).unwrap();
    assert!(
        b_log.contains("resumed in phase WaitingForPluginOperations"),
        "{}",
        logs()
    );
}

/// deploy/'s RBAC: the controller running as its service account completes
/// a backup, and one of the whole cluster (every resource kube-apiserver
/// serves is listed: the enumerated reads are enough), deletes an expired
/// one's resource, and may not write what is not its own, nor read what is
/// not an object: a Secret's subresource, `pods/log`, `pods/attach`,
/// `nodes/proxy` are refused (403, by RBAC, not "not found"). Before, a
/// wildcard read granted every subresource too, so the test could not
/// fail on it. The one subresource granted, `pods/exec` for hooks, runs
/// one in a kwok pod as the service account.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_deploy_rbac_is_enough_and_no_more() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    install_crds(&admin).await;
    let deploy = repo().join("deploy");
    create_namespace(&admin, "iar-system").await;
    apply_rbac(&admin, &deploy.join("rbac.yaml")).await;
    // kwok's Exec CRD (installed first, so every run lists the same
    // resources) is one of "your own CRDs" that deploy/rbac.yaml tells the
    // operator to grant the read of; a backup that lists it fails without.
    let kwok = crate::pod_hooks::kwok().await;
    grant_read(&admin, "kwok.x-k8s.io", "execs").await;
    let shop = "rbac-shop";
    create_namespace(&admin, shop).await;
    create_config_map(&admin, shop, "web-config", "web").await;

    let sa = client(server, User::Controller).await;
    let (store_dir, store) = store();
    let rt = runtime();
    let plugins = vec![load(&rt, artifacts::LABELS, &[("labels", "rbac=ok")])];
    let (_, controller) = start_controller(
        sa.clone(),
        "iar-system",
        store,
        plugins,
        PluginRegistry::new(),
    )
    .await;
    create_backup(&admin, "iar-system", "rbac", spec(shop)).await;
    let done = wait_phase(&admin, "iar-system", "rbac", BackupPhase::Completed).await;
    assert_eq!(done.status.unwrap().progress.items_backed_up, 1);
    // Every namespace and cluster-scoped resource: each resource discovery
    // shows is listed, so a resource the role misses fails this backup.
    let everything = BackupSpec {
        included_namespaces: Some(vec!["*".into()]),
        // Their pods' hooks fail on purpose, or run in directories other
        // tests own: not this backup's business.
        excluded_namespaces: Some(
            crate::support::HOOKED_NAMESPACES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ),
        included_resources: None,
        ..spec(shop)
    };
    create_backup(&admin, "iar-system", "rbac-all", everything).await;
    let all = wait_phase(&admin, "iar-system", "rbac-all", BackupPhase::Completed).await;
    let status = all.status.unwrap();
    assert_eq!(status.errors, 0, "{status:?}");
    assert!(status.progress.items_backed_up >= 1, "{status:?}");
    // The finalizer it added, it can remove: a deleted Backup goes.
    Api::<Backup>::namespaced(admin.clone(), "iar-system")
        .delete("rbac", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&admin, "iar-system", "rbac").await;
    // An expired backup's resource it deletes itself, after its data.
    let expiring = BackupSpec {
        ttl: Some("1s".into()),
        ..spec(shop)
    };
    create_backup(&admin, "iar-system", "rbac-expiring", expiring).await;
    wait_gone(&admin, "iar-system", "rbac-expiring").await;
    assert!(!store_dir.path().join("backups/rbac-expiring").exists());
    controller.abort();

    // No more: nothing it backs up can be written or deleted, nor a
    // Schedule created or deleted (it creates the Backups its Schedules
    // make, and writes a Schedule's status and `skipImmediately` only).
    let forbidden = |r: Result<(), kube::Error>, what: &str| match r {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what}: expected 403, got {other:?}"),
    };
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
    forbidden(
        Api::<Secret>::namespaced(sa.clone(), shop)
            .create(&PostParams::default(), &secret)
            .await
            .map(|_| ()),
        "create a secret",
    );
    forbidden(
        Api::<ConfigMap>::namespaced(sa.clone(), shop)
            .patch(
                "web-config",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"a": "b"}})),
            )
            .await
            .map(|_| ()),
        "patch a configmap outside iar-system",
    );
    forbidden(
        Api::<iar::k8s::crd::Schedule>::namespaced(sa.clone(), "iar-system")
            .create(
                &PostParams::default(),
                &iar::k8s::crd::Schedule::new("forged", Default::default()),
            )
            .await
            .map(|_| ()),
        "create a Schedule",
    );
    forbidden(
        Api::<iar::k8s::crd::Schedule>::namespaced(sa.clone(), "iar-system")
            .delete("forged", &DeleteParams::default())
            .await
            .map(|_| ()),
        "delete a Schedule",
    );
    forbidden(
        Api::<Namespace>::all(sa.clone())
            .delete(shop, &DeleteParams::default())
            .await
            .map(|_| ()),
        "delete a namespace",
    );
    // Nor any read that is not of an object. Each object exists where it
    // matters, so a 404 could only come from an allowed request.
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "web-0"},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}
    }))
    .unwrap();
    Api::namespaced(admin.clone(), shop)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    Api::<Secret>::namespaced(admin.clone(), shop)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    for path in [
        format!("/api/v1/namespaces/{shop}/secrets/x/status"),
        format!("/api/v1/namespaces/{shop}/secrets/x/proxy"),
        format!("/api/v1/namespaces/{shop}/pods/web-0/log"),
        format!("/api/v1/namespaces/{shop}/pods/web-0/attach?stdout=true"),
        format!("/api/v1/namespaces/{shop}/pods/web-0/proxy/"),
        format!("/api/v1/namespaces/{shop}/services/web/proxy/"),
        "/api/v1/nodes/node-0/proxy/".to_string(),
        "/api/v1/nodes/node-0/proxy/configz".to_string(),
    ] {
        let request = axum::http::Request::get(path.as_str())
            .body(Vec::new())
            .unwrap();
        match sa.request_text(request).await {
            Err(kube::Error::Api(e)) if e.code == 403 => {}
            other => panic!("GET {path}: expected 403, got {other:?}"),
        }
    }
    // While the objects themselves stay readable.
    Api::<Secret>::namespaced(sa.clone(), shop)
        .get("x")
        .await
        .unwrap();
    // And a hook runs in a pod's container: `get` and `create` on
    // pods/exec, the one subresource granted, are enough for the websocket
    // exec (with either alone it is refused: 403).
    let Some(kwok) = kwok else {
        return;
    };
    use crate::pod_hooks::{hook, running_pod, target};
    use iar::backup::hooks::{HookRunner, HookStatus, OnError};
    kwok.add_node(&admin, "kwok-a").await;
    let container = tempfile::tempdir().unwrap();
    running_pod(kwok, &admin, shop, "hooked-0", json!({}), container.path()).await;
    let run = iar::k8s::exec::PodExecRunner::new(sa.clone())
        .run(
            &target(shop, "hooked-0"),
            &hook("app", &["true"], OnError::Fail, Duration::from_secs(10)),
        )
        .await;
    assert_eq!(run.status, HookStatus::Succeeded, "{run:?}");

    // And volume backups go through deploy/node-agent.yaml's service
    // account: the controller creates the request, the agent serves it.
    use crate::node_agent::{Agent, fs_backup_spec, pod_with_volume};
    apply_rbac(&admin, &deploy.join("node-agent.yaml")).await;
    let root = tempfile::tempdir().unwrap();
    let volume = pod_with_volume(
        kwok,
        &admin,
        shop,
        "vol-0",
        "kwok-a",
        "pv-rbac",
        root.path(),
        json!({}),
    )
    .await;
    std::fs::write(volume.join("data.txt"), "rows").unwrap();
    let url = store_dir.path().to_str().unwrap();
    let (_, controller) = start_controller(
        sa.clone(),
        "iar-system",
        BackupStore::open(url).unwrap(),
        Vec::new(),
        PluginRegistry::new(),
    )
    .await;
    create_backup(&admin, "iar-system", "rbac-volumes", fs_backup_spec(shop)).await;
    // The agent starts once the request exists: the controller then has to
    // watch it to see it end (a watch its role must allow).
    let requests_api =
        Api::<iar::k8s::volume_backup::VolumeBackup>::namespaced(admin.clone(), "iar-system");
    wait_for("the volume request", Duration::from_secs(60), || {
        let api = requests_api.clone();
        async move {
            let list = api
                .list(&kube::api::ListParams::default().labels("iar.dev/backup=rbac-volumes"))
                .await
                .map_err(|e| e.to_string())?;
            (!list.items.is_empty())
                .then_some(())
                .ok_or_else(|| "none yet".to_string())
        }
    })
    .await;
    let agent = Agent::start_as(
        server,
        User::NodeAgent,
        "iar-system",
        "kwok-a",
        root.path(),
        url,
    );
    let done = wait_until_done(&admin, "iar-system", "rbac-volumes").await;
    controller.abort();
    let status = done.status.unwrap();
    assert_eq!(status.errors, 0, "{status:?}\n{}", agent.log());
    assert_eq!(
        status.phase,
        BackupPhase::Completed,
        "{status:?}\n{}",
        agent.log()
    );
    let requests =
        Api::<iar::k8s::volume_backup::VolumeBackup>::namespaced(admin.clone(), "iar-system")
            .list(&kube::api::ListParams::default().labels("iar.dev/backup=rbac-volumes"))
            .await
            .unwrap();
    let phases: Vec<_> = requests
        .items
        .iter()
        .map(|r| r.status.as_ref().and_then(|s| s.phase))
        .collect();
    assert_eq!(phases, [Some(iar::backup::volumes::VolumePhase::Completed)]);
}

/// What an operator adds for a CRD of theirs: a ClusterRole reading
/// `group`'s `resource`, bound to iar's service account.
async fn grant_read(client: &Client, group: &str, resource: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let name = format!("iar-reader-{resource}.{group}");
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": [{"apiGroups": [group], "resources": [resource], "verbs": ["get", "list"]}],
    }))
    .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "iar", "namespace": "iar-system"}],
    }))
    .unwrap();
    for r in [
        Api::<ClusterRole>::all(client.clone())
            .create(&PostParams::default(), &role)
            .await
            .map(|_| ()),
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .map(|_| ()),
    ] {
        match r {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("grant the read of {resource}.{group}: {e}"),
        }
    }
}

/// Waits for the resource's status to reach an end, whichever.
pub(crate) async fn wait_until_done(client: &Client, ns: &str, name: &str) -> Backup {
    let api = Api::<Backup>::namespaced(client.clone(), ns);
    wait_for(
        &format!("backup {ns}/{name} ended"),
        Duration::from_secs(90),
        || {
            let api = api.clone();
            async move {
                let b = api.get(name).await.map_err(|e| e.to_string())?;
                match b.status.as_ref().map(|s| s.phase) {
                    Some(p) if p.is_terminal() => Ok(b),
                    other => Err(format!("phase {other:?}")),
                }
            }
        },
    )
    .await
}

/// Creates each object of a multi-document YAML file (RBAC kinds only).
pub(crate) async fn apply_rbac(client: &Client, path: &Path) {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let text = std::fs::read_to_string(path).unwrap();
    async fn create<K>(api: Api<K>, doc: Value)
    where
        K: kube::Resource
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let object: K = serde_json::from_value(doc).unwrap();
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("create {object:?}: {e}"),
        }
    }
    for doc in iar::yaml::manifests::<Value>(&text).unwrap() {
        let ns = doc["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let c = client.clone();
        match doc["kind"].as_str().unwrap() {
            "ServiceAccount" => create(Api::<ServiceAccount>::namespaced(c, &ns), doc).await,
            "ClusterRole" => create(Api::<ClusterRole>::all(c), doc).await,
            "ClusterRoleBinding" => create(Api::<ClusterRoleBinding>::all(c), doc).await,
            "Role" => create(Api::<Role>::namespaced(c, &ns), doc).await,
            "RoleBinding" => create(Api::<RoleBinding>::namespaced(c, &ns), doc).await,
            // What runs iar, not what it may do.
            "DaemonSet" | "Deployment" => {}
            // The own-node policy needs a pod-bound token (its node name
            // is in the token); these tests' agents use static tokens.
            "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding" => {}
            other => panic!("unexpected kind {other} in {path:?}"),
        }
    }
}

/// deploy/crd.yaml is what `iar crd` prints.
#[test]
fn the_deployed_crd_is_the_generated_one() {
    let deployed = std::fs::read_to_string(repo().join("deploy/crd.yaml")).unwrap();
    assert_eq!(
        deployed,
        iar::k8s::crd::definitions_yaml(),
        "regenerate with: iar crd > deploy/crd.yaml"
    );
}

/// A backup of a live namespace with 5,000 objects through the three
/// example plugins: objects per second and API requests per object.
/// `cargo test -p iar --test all -- --ignored --nocapture controller::live_backup_of_5000`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: minutes, prints figures"]
async fn live_backup_of_5000_objects() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    install_crds(&admin).await;
    let ns = "bench-5000";
    create_namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    let existing = api.list(&Default::default()).await.unwrap().items.len();
    let create_started = Instant::now();
    let objects = (existing..5000).map(|i| {
        let api = api.clone();
        async move {
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": format!("cm-{i:05}"), "labels": {"app": "bench"}},
                "data": {"payload": "x".repeat(512)}
            }))
            .unwrap();
            api.create(&PostParams::default(), &cm).await.map(|_| ())
        }
    });
    crate::support::in_flight(32, objects).await;
    eprintln!("created 5000 objects in {:.1?}", create_started.elapsed());

    let rt = runtime();
    let three = vec![
        load(&rt, artifacts::LABELS, &[("labels", "backed-up-by=iar")]),
        load(&rt, artifacts::POD_VOLUMES, &[]),
        crate::csi::pvc_snapshot(&rt),
    ];
    // The same backup with no plugins, in the same run: the baseline.
    let mut took = Vec::new();
    for (name, plugins) in [("bench-none", Vec::new()), ("bench-three", three)] {
        let (_store_dir, store) = store();
        let cluster = Arc::new(LiveCluster::new(
            admin.clone(),
            tokio::runtime::Handle::current(),
        ));
        let controller = iar::phases::PhaseMachine::new(
            plugins,
            store,
            cluster.clone(),
            Settings {
                workers: 2,
                ..settings()
            },
        );
        let started = Instant::now();
        let object = controller
            .run_backup(iar::phases::BackupRequest {
                labels: Default::default(),
                name: name.into(),
                namespace: "iar".into(),
                spec: json!({"includedNamespaces": [ns]}),
                sources: Vec::new(),
                annotations: Default::default(),
            })
            .await
            .unwrap();
        let elapsed = started.elapsed();
        let items = object.status.progress.items_backed_up;
        assert_eq!(object.status.phase, BackupPhase::Completed);
        assert_eq!(items, 5000);
        let requests = cluster.requests();
        eprintln!(
            "{name}: {items} objects in {elapsed:.2?}: {:.0} objects/s, {requests} API requests ({:.4} per object)",
            items as f64 / elapsed.as_secs_f64(),
            requests as f64 / items as f64
        );
        took.push(elapsed);
    }
    eprintln!(
        "three plugins / no plugins: {:.2}x",
        took[1].as_secs_f64() / took[0].as_secs_f64()
    );
}

async fn register_plugin(client: &Client, ns: &str, name: &str, component: &str, settings: &str) {
    use iar::k8s::plugins::configmap::{ManifestInput, manifest};
    let cm = manifest(ManifestInput {
        name: name.into(),
        namespace: ns.into(),
        component: std::fs::read(component).unwrap(),
        settings: Some(settings.into()),
        ..ManifestInput::default()
    })
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply("iar-test").force(),
            &Patch::Apply(&cm),
        )
        .await
        .unwrap_or_else(|e| panic!("apply plugin configmap {name}: {e}"));
}

/// Plugins registered as ConfigMaps run the backup; a reload while it waits
/// (one plugin deleted, another's config changed) does not touch it: it
/// finishes with the set it started with, and the next backup gets the
/// new set.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_keeps_its_plugin_set_through_a_reload() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    crate::csi::ready(&admin).await;
    let (system, shop) = ("ctl-pin", "ctl-pin-shop");
    create_namespace(&admin, system).await;
    create_namespace(&admin, shop).await;
    create_config_map(&admin, shop, "web-config", "web").await;
    crate::csi::csi_claim(&admin, shop, "data-web", "web").await;
    register_plugin(
        &admin,
        system,
        "labels",
        artifacts::LABELS,
        "config:\n  labels: set=first\nallowMutate: ['*', serviceaccounts]\n",
    )
    .await;
    register_plugin(
        &admin,
        system,
        "pvc-snapshot",
        artifacts::PVC_SNAPSHOT,
        "allowWrite: [volumesnapshots.snapshot.storage.k8s.io]\nallowMutate: [persistentvolumeclaims]\n",
    )
    .await;

    let registry = PluginRegistry::new();
    let (store_dir, store) = store();
    let (_, controller) =
        start_controller(admin.clone(), system, store, Vec::new(), registry.clone()).await;
    let names = |r: &PluginRegistry| -> Vec<String> {
        r.current()
            .plugins
            .iter()
            .map(|p| p.name().to_string())
            .collect()
    };
    wait_for("both plugins loaded", Duration::from_secs(60), || {
        let n = names(&registry);
        async move { (n.len() == 2).then_some(()).ok_or(format!("{n:?}")) }
    })
    .await;

    create_backup(&admin, system, "pinned", spec(shop)).await;
    wait_phase(
        &admin,
        system,
        "pinned",
        BackupPhase::WaitingForPluginOperations,
    )
    .await;
    // The reload: pvc-snapshot gone, labels' config changed.
    Api::<ConfigMap>::namespaced(admin.clone(), system)
        .delete("pvc-snapshot", &DeleteParams::default())
        .await
        .unwrap();
    register_plugin(
        &admin,
        system,
        "labels",
        artifacts::LABELS,
        "config:\n  labels: set=second\nallowMutate: ['*', serviceaccounts]\n",
    )
    .await;
    wait_for("the reload applied", Duration::from_secs(60), || {
        let n = names(&registry);
        async move { (n == ["labels"]).then_some(()).ok_or(format!("{n:?}")) }
    })
    .await;

    crate::csi::cut_snapshot(&admin, shop, "data-web-pinned").await;
    let done = wait_phase(&admin, system, "pinned", BackupPhase::Completed).await;
    // The operation was polled by the unloaded pvc-snapshot of its set.
    assert_eq!(done.status.unwrap().backup_item_operations_completed, 1);
    let web = |backup: &str| {
        tar_entries(store_dir.path(), backup)[&entry_path("", "configmaps", shop, "web-config")]
            ["metadata"]["labels"]["set"]
            .clone()
    };
    assert_eq!(web("pinned"), "first");

    create_backup(&admin, system, "after", spec(shop)).await;
    let after = wait_phase(&admin, system, "after", BackupPhase::Completed).await;
    assert_eq!(
        after.status.unwrap().backup_item_operations_attempted,
        0,
        "no pvc-snapshot now"
    );
    assert_eq!(web("after"), "second");
    controller.abort();
}

/// Identifiers crafted to change the URL path a `cluster-get` reaches,
/// against the real API server. Tried from outside before this rule: a
/// plugin granted only ConfigMaps that asked for namespace
/// `<ns>/secrets/topsecret?x=` got the Secret back. Now each crafted part is
/// refused with rule invalid-identifier before any request (the plugin
/// sees the refusal; nothing of the Secret reaches it), with a client that
/// could read everything, and the live cluster refuses the same
/// identifiers when asked directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_identifiers_cannot_read_a_secret_a_pod_log_or_a_node_subresource() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    let ns = "ctl-crafted";
    create_namespace(&admin, ns).await;
    create_config_map(&admin, ns, "x", "web").await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "topsecret", "namespace": ns},
        "stringData": {"token": "the-secret-value"},
    }))
    .unwrap();
    let _ = Api::<Secret>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await;
    let live = Arc::new(LiveCluster::new(
        admin.clone(),
        tokio::runtime::Handle::current(),
    ));
    let cluster: Arc<dyn iar::ClusterReader> = live.clone();
    let rt = runtime();
    let backup = BackupRef {
        object: None,
        name: "b".into(),
        namespace: "iar".into(),
        uid: "u".into(),
        spec: json!({}),
        phase: Phase::Backup,
    };
    let crafted = [
        ("configmaps", format!("{ns}/secrets/topsecret?x="), "x"),
        ("configmaps", format!("{ns}/secrets/topsecret#"), "x"),
        ("configmaps", ns.to_string(), "../secrets/topsecret"),
        ("pods", ns.to_string(), "web-0/log"),
        ("nodes/proxy", String::new(), "node-1"),
    ];
    for (resource, namespace, name) in crafted {
        let plugin = load_granted(
            &rt,
            artifacts::HOSTILE,
            &[
                ("behavior", "get-id"),
                ("id-resource", resource),
                ("id-namespace", &namespace),
                ("id-name", name),
            ],
            ReadGrants::only(&["configmaps", "pods", "nodes"]).unwrap(),
        );
        let item = iar::Item::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": ns}}),
            iar::catalog::Catalog::builtin(),
        )
        .unwrap();
        let (cluster, backup) = (cluster.clone(), backup.clone());
        let out = tokio::task::spawn_blocking(move || {
            plugin
                .instance(cluster)
                .execute(&item, &backup, &|_| false)
                .map_err(|e| e.to_string())
        })
        .await
        .unwrap()
        .expect("the refusal is the plugin's to handle; the call succeeds");
        let got =
            out.item.expect("annotated").value()["metadata"]["annotations"]["hostile.iar.test/got"]
                .as_str()
                .unwrap()
                .to_string();
        assert!(
            got.starts_with("error:cluster-get refused:")
                && got.ends_with("(rule: invalid-identifier)"),
            "{resource} {namespace:?} {name:?}: {got}"
        );
        assert!(
            !got.contains("the-secret-value") && !got.contains("dGhlLXNlY3JldC12YWx1ZQ"),
            "{got}"
        );

        let id = ItemRef::new("", resource, namespace.clone(), name);
        let direct = iar::ClusterReader::get_async(live.as_ref(), &id)
            .await
            .expect_err("refused when asked directly");
        assert!(
            direct.to_string().contains("(rule: invalid-identifier)"),
            "{direct}"
        );
    }
    // The same plugin and grants still read what they may.
    let plugin = load_granted(
        &rt,
        artifacts::HOSTILE,
        &[
            ("behavior", "get-id"),
            ("id-resource", "configmaps"),
            ("id-namespace", ns),
            ("id-name", "x"),
        ],
        ReadGrants::only(&["configmaps"]).unwrap(),
    );
    let item = iar::Item::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": ns}}),
        iar::catalog::Catalog::builtin(),
    )
    .unwrap();
    let out = tokio::task::spawn_blocking(move || {
        plugin
            .instance(cluster)
            .execute(&item, &backup, &|_| false)
            .map_err(|e| e.to_string())
    })
    .await
    .unwrap()
    .unwrap();
    let got = out.item.unwrap().value()["metadata"]["annotations"]["hostile.iar.test/got"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        got.starts_with("found:") && got.contains("\"kind\":\"ConfigMap\""),
        "{got}"
    );
}

/// In the live controller as in the manifest mode: an additional item the
/// spec excludes (a Secret in another namespace, the spec naming only the
/// shop's) is not backed up, and the backup's log says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_live_backup_leaves_out_additional_items_its_spec_excludes() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    install_crds(&admin).await;
    let (system, shop, other) = ("ctl-addl", "ctl-addl-shop", "ctl-addl-other");
    for ns in [system, shop, other] {
        create_namespace(&admin, ns).await;
    }
    create_config_map(&admin, shop, "web-config", "web").await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "topsecret", "namespace": other},
        "stringData": {"token": "the-secret-value"},
    }))
    .unwrap();
    let _ = Api::<Secret>::namespaced(admin.clone(), other)
        .create(&PostParams::default(), &secret)
        .await;
    let (store_dir, store) = store();
    let rt = runtime();
    let naming = load(
        &rt,
        artifacts::HOSTILE,
        &[
            ("behavior", "additional-id"),
            ("id-resource", "secrets"),
            ("id-namespace", other),
            ("id-name", "topsecret"),
        ],
    );
    let (_, controller) = start_controller(
        admin.clone(),
        system,
        store.clone(),
        vec![naming],
        PluginRegistry::new(),
    )
    .await;
    let spec = BackupSpec {
        included_namespaces: Some(vec![shop.into()]),
        ..BackupSpec::default()
    };
    create_backup(&admin, system, "addl", spec).await;
    wait_phase(&admin, system, "addl", BackupPhase::Completed).await;
    controller.abort();
    let entries = tar_entries(store_dir.path(), "addl");
    assert!(entries.contains_key(&entry_path("", "configmaps", shop, "web-config")));
    assert!(
        !entries.keys().any(|p| p.contains("secrets")),
        "{:?}",
        entries.keys()
    );
    let logs = store.get("addl", BackupFile::Logs).await.unwrap().unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(&logs[..])
        .read_to_string(&mut text)
        .unwrap();
    assert!(
        text.lines().any(
            |l| l.contains(&format!("additional item secrets {other}/topsecret"))
                && l.contains("left out of the backup: its namespace")
        ),
        "{text}"
    );
}

/// A Backup created the moment the controller starts, while a slow plugin
/// ConfigMap is still loading, waits for the plugins: tried before this
/// rule, such backups completed with no plugin run at all and 0 errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_created_at_start_waits_for_the_plugins_to_load() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    install_crds(&admin).await;
    let (system, shop) = ("ctl-race", "ctl-race-shop");
    create_namespace(&admin, system).await;
    create_namespace(&admin, shop).await;
    create_config_map(&admin, shop, "web-config", "web").await;
    register_plugin(
        &admin,
        system,
        "labels",
        artifacts::LABELS,
        "config:\n  labels: set=loaded\nallowMutate: ['*', serviceaccounts]\n",
    )
    .await;
    // Its applies-to takes 5 s: the first sync cannot be quicker, and the
    // backup (listing and all) is well under way by then. Without the wait
    // this test fails: the backup completes with no plugin run.
    register_plugin(
        &admin,
        system,
        "slow",
        artifacts::HOSTILE,
        "config:\n  applies-to: slow\n  slow-ms: \"5000\"\n",
    )
    .await;
    let (store_dir, store) = store();
    let registry = PluginRegistry::new();
    let (_, controller) =
        start_controller(admin.clone(), system, store, Vec::new(), registry.clone()).await;
    create_backup(&admin, system, "early", spec(shop)).await;
    wait_phase(&admin, system, "early", BackupPhase::Completed).await;
    controller.abort();
    let web =
        &tar_entries(store_dir.path(), "early")[&entry_path("", "configmaps", shop, "web-config")];
    assert_eq!(
        web["metadata"]["labels"]["set"], "loaded",
        "the labels plugin ran: {web}"
    );
}

/// `cluster-get` for resources that do not exist, repeated: discovery runs
/// again at most once per REDISCOVER_AFTER, not twice per lookup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_of_unknown_resources_do_not_rerun_discovery_each_time() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    let live = LiveCluster::new(admin, tokio::runtime::Handle::current());
    for i in 0..50 {
        let id = ItemRef::new("nowhere.example.com", format!("things{i}"), "shop", "x");
        assert_eq!(
            iar::ClusterReader::get_async(&live, &id).await.unwrap(),
            None
        );
    }
    // One discovery (two requests) for the first lookup; none after.
    assert!(live.requests() <= 4, "{} requests", live.requests());
}

/// The Backup resource's status moves while the pass runs (issue 19's live
/// status): items backed up out of those known reach
/// `status.progress` at most once a second, before the backup leaves
/// InProgress, and end at the final count. A plugin that naps 40 ms per
/// item on the tests' two workers makes a pass of several seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_status_shows_progress_while_the_pass_runs() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    install_crds(&admin).await;
    let (system, shop) = ("ctl-live", "ctl-live-shop");
    for ns in [system, shop] {
        create_namespace(&admin, ns).await;
    }
    const ITEMS: u64 = 150;
    for i in 0..ITEMS {
        create_config_map(&admin, shop, &format!("cm-{i:03}"), "web").await;
    }
    let (_store_dir, store) = store();
    let rt = runtime();
    let napping = load(
        &rt,
        artifacts::HOSTILE,
        &[("behavior", "nap"), ("nap-ms", "40")],
    );
    let (_, controller) = start_controller(
        admin.clone(),
        system,
        store,
        vec![napping],
        PluginRegistry::new(),
    )
    .await;
    let spec = BackupSpec {
        included_namespaces: Some(vec![shop.into()]),
        included_resources: Some(vec!["configmaps".into()]),
        ..BackupSpec::default()
    };
    create_backup(&admin, system, "live", spec).await;
    let api = Api::<Backup>::namespaced(admin.clone(), system);
    // Every distinct (phase, done, total) the resource showed on the way.
    let seen = std::sync::Mutex::new(Vec::new());
    let last = wait_for("backup live to end", Duration::from_secs(90), || async {
        let b = api.get("live").await.unwrap();
        let mut seen = seen.lock().unwrap();
        if let Some(status) = &b.status {
            let p = (
                status.phase,
                status.progress.items_backed_up,
                status.progress.total_items,
            );
            if seen.last() != Some(&p) {
                seen.push(p);
            }
            if status.phase.is_terminal() {
                return Ok(b);
            }
        }
        Err(format!("{seen:?}"))
    })
    .await;
    let seen = seen.into_inner().unwrap();
    controller.abort();
    let status = last.status.unwrap();
    assert_eq!(status.phase, BackupPhase::Completed, "{seen:?}");
    assert_eq!(status.progress.items_backed_up, ITEMS, "{seen:?}");
    let during: Vec<_> = seen
        .iter()
        .filter(|(phase, done, total)| {
            *phase == BackupPhase::InProgress && *done > 0 && *done < ITEMS && *total == ITEMS
        })
        .collect();
    assert!(
        !during.is_empty(),
        "no progress shown while InProgress: {seen:?}"
    );
    // Counts only grow.
    let counts: Vec<u64> = seen.iter().map(|(_, done, _)| *done).collect();
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
}

/// pvc-snapshot against the live API server and the real snapshot-
/// controller, call by call: execute creates the claim's VolumeSnapshot,
/// labelled with the backup and annotated with the plugin, in the class
/// labelled for the volume's driver; a retried execute (another instance,
/// as after a restart) gets the same snapshot back and creates no second
/// one; the controller binds it to a content; cancel deletes it. Without
/// the write grant the claim fails naming the rule, and nothing is
/// created.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pvc_snapshot_creates_one_labelled_snapshot_the_real_controller_binds() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    crate::csi::ready(&admin).await;
    let ns = "ctl-csi";
    create_namespace(&admin, ns).await;
    crate::csi::csi_claim(&admin, ns, "data", "db").await;
    let cluster: Arc<dyn iar::ClusterReader> = Arc::new(LiveCluster::new(
        admin.clone(),
        tokio::runtime::Handle::current(),
    ));
    let claim = cluster
        .get_item_async(&ItemRef::new("", "persistentvolumeclaims", ns, "data"))
        .await
        .unwrap()
        .expect("the claim");
    let backup = BackupRef {
        object: None,
        name: "live".into(),
        namespace: "iar-system".into(),
        uid: "5e1f0000-0000-4000-8000-00000000c5c1".into(),
        spec: json!({}),
        phase: Phase::Backup,
    };
    let rt = runtime();
    let granted = crate::csi::pvc_snapshot(&rt);
    let ungranted = load(&rt, artifacts::PVC_SNAPSHOT, &[]);
    let (first, again, refused) = tokio::task::spawn_blocking({
        let (cluster, claim, backup) = (cluster.clone(), claim.clone(), backup.clone());
        move || {
            let never = |_: &str| false;
            let refused = ungranted
                .instance(cluster.clone())
                .execute(&claim, &backup, &never)
                .map(|o| o.operation_id);
            let first = granted
                .instance(cluster.clone())
                .execute(&claim, &backup, &never)
                .unwrap();
            let again = granted
                .instance(cluster)
                .execute(&claim, &backup, &never)
                .unwrap();
            (first, again, refused)
        }
    })
    .await
    .unwrap();
    let refused = refused.expect_err("no write grant").to_string();
    assert!(refused.contains("(rule: write-grant)"), "{refused}");
    assert_eq!(first.operation_id.as_deref(), Some("ctl-csi/data-live"));
    assert_eq!(again.operation_id, first.operation_id);

    let snapshots = crate::csi::snapshot_api(&admin, ns)
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(snapshots.items.len(), 1, "one snapshot for two tries");
    let vs = &snapshots.items[0];
    let labels = vs.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["iar.dev/backup-uid"], backup.uid);
    assert_eq!(labels["iar.dev/backup-name"], "live");
    assert_eq!(labels["velero.io/backup-name"], "live");
    assert_eq!(
        vs.metadata.annotations.clone().unwrap_or_default()["iar.dev/created-by"],
        "iar_plugin_pvc_snapshot"
    );
    assert_eq!(
        vs.data["spec"]["volumeSnapshotClassName"],
        crate::csi::CLASS
    );
    assert_eq!(
        vs.data["spec"]["source"]["persistentVolumeClaimName"],
        "data"
    );

    // The real controller binds it; the test plays the driver's sidecar.
    let content = crate::csi::cut_snapshot(&admin, ns, "data-live").await;
    let bound = crate::csi::content_api(&admin).get(&content).await.unwrap();
    assert_eq!(
        bound.data["spec"]["source"]["volumeHandle"],
        "vol-ctl-csi-data"
    );
    let op = first.operation_id.unwrap();
    let progress = tokio::task::spawn_blocking({
        let (cluster, claim, backup, plugin) = (
            cluster.clone(),
            claim.clone(),
            backup.clone(),
            crate::csi::pvc_snapshot(&rt),
        );
        move || {
            let mut instance = plugin.instance(cluster);
            let p = instance.progress(&op, &claim.id, &backup).unwrap();
            instance.cancel(&op, &claim.id, &backup).unwrap();
            p
        }
    })
    .await
    .unwrap();
    assert!(
        progress.completed && progress.error.is_none(),
        "{progress:?}"
    );
    crate::csi::wait_deleted(&admin, ns, "data-live").await;
}

/// Operation counts reach the Backup resource's status as operations end,
/// while the backup still waits for the others, as Velero's operations
/// controller updates its Backup each period; before, they appeared only
/// once every operation had ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operation_counts_show_while_the_backup_waits() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    crate::csi::ready(&admin).await;
    let (system, shop) = ("ctl-count", "ctl-count-shop");
    create_namespace(&admin, system).await;
    create_namespace(&admin, shop).await;
    crate::csi::csi_claim(&admin, shop, "a", "web").await;
    crate::csi::csi_claim(&admin, shop, "b", "web").await;
    let (_store_dir, store) = store();
    let plugins = vec![crate::csi::pvc_snapshot(&runtime())];
    let (_, controller) =
        start_controller(admin.clone(), system, store, plugins, PluginRegistry::new()).await;
    create_backup(&admin, system, "counting", spec(shop)).await;
    wait_phase(
        &admin,
        system,
        "counting",
        BackupPhase::WaitingForPluginOperations,
    )
    .await;
    crate::csi::cut_snapshot(&admin, shop, "a-counting").await;
    let api = Api::<Backup>::namespaced(admin.clone(), system);
    wait_for(
        "one operation completed, shown while the other runs",
        Duration::from_secs(30),
        || {
            let api = api.clone();
            async move {
                let status = api
                    .get("counting")
                    .await
                    .map_err(|e| e.to_string())?
                    .status
                    .unwrap_or_default();
                (status.phase == BackupPhase::WaitingForPluginOperations
                    && status.backup_item_operations_attempted == 2
                    && status.backup_item_operations_completed == 1)
                    .then_some(())
                    .ok_or_else(|| format!("{status:?}"))
            }
        },
    )
    .await;
    crate::csi::cut_snapshot(&admin, shop, "b-counting").await;
    let done = wait_phase(&admin, system, "counting", BackupPhase::Completed).await;
    assert_eq!(done.status.unwrap().backup_item_operations_completed, 2);
    controller.abort();
}

/// A controller's backup whose plugin created a VolumeSnapshot, deleted
/// from the command line: without `--cluster` the deletion is refused
/// before anything changes (rule `created-in-cluster`), the backup and
/// its snapshot kept; with it, the snapshot goes with the backup. Before,
/// `iar delete` looked for the snapshot in the manifests' overlay, called
/// it "already gone", and left it in the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_controllers_backup_deleted_from_the_command_line_takes_its_snapshot() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    let (system, shop) = ("ctl-cli-delete", "ctl-cli-delete-shop");
    let (store_dir, store, controller) = snapshot_scene(&admin, system, shop).await;
    create_backup(&admin, system, "snap", spec(shop)).await;
    wait_phase(
        &admin,
        system,
        "snap",
        BackupPhase::WaitingForPluginOperations,
    )
    .await;
    crate::csi::cut_snapshot(&admin, shop, "data-web-snap").await;
    wait_phase(&admin, system, "snap", BackupPhase::Completed).await;
    controller.abort();
    let _ = controller.await;

    let delete = |cluster: bool| {
        let mut command = std::process::Command::new(crate::support::iar_bin());
        command
            .args(["delete", "snap", "--store"])
            .arg(store_dir.path())
            .env("KUBECONFIG", server.kubeconfig());
        if cluster {
            command.arg("--cluster");
        }
        command.output().unwrap()
    };
    let refused = delete(false);
    let said = crate::support::text(&refused);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("rule: created-in-cluster") && said.contains("data-web-snap"),
        "{said}"
    );
    assert_eq!(store.list_backups().await.unwrap(), ["snap"]);
    let kept = crate::csi::snapshot_api(&admin, shop)
        .get_opt("data-web-snap")
        .await
        .unwrap();
    assert!(kept.is_some(), "the snapshot stays with its backup");

    let deleted = delete(true);
    assert!(
        deleted.status.success(),
        "{}",
        crate::support::text(&deleted)
    );
    crate::csi::wait_deleted(&admin, shop, "data-web-snap").await;
    assert!(store.list_backups().await.unwrap().is_empty());
}

/// A replica that keeps a backup's lease between steps ends that backup
/// once its Backup resource is gone, leader or not: the fault campaign's
/// seed 3829 had a resource deleted within a second of its creation, its
/// cleanup before the first pass took the lease; the pass then kept the
/// lease for a next step that never came (kube-runtime does not reconcile
/// a resource that is gone), and the leader's sweep leaves a backup whose
/// lease a live replica keeps. A kept backup whose resource lives, or
/// whose resource is another one of that name now, is told apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_ends_the_backup_it_keeps_whose_resource_is_gone() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    install_crds(&admin).await;
    let ns = "kept-orphan-system";
    create_namespace(&admin, ns).await;
    let api: Api<Backup> = Api::namespaced(admin.clone(), ns);
    let live = api
        .create(
            &PostParams::default(),
            &Backup::new("alive", BackupSpec::default()),
        )
        .await
        .unwrap();
    let (_dir, store) = store();
    let uid_key = iar::k8s::resource::RESOURCE_UID_ANNOTATION;
    for (name, uid) in [
        ("gone", "deleted-resource-uid".to_string()),
        ("alive", live.metadata.uid.clone().unwrap()),
    ] {
        let mut object = BackupObject::new(name, ns, "store-uid", json!({}));
        object.status.phase = BackupPhase::WaitingForPluginOperations;
        object.metadata.annotations.insert(uid_key.into(), uid);
        store
            .put_json(name, BackupFile::Metadata, &object)
            .await
            .unwrap();
    }
    // A replica's machine over the API server, with no plugins.
    let replica = || {
        Arc::new(iar::phases::PhaseMachine::new(
            Vec::new(),
            store.clone(),
            Arc::new(LiveCluster::new(
                admin.clone(),
                tokio::runtime::Handle::current(),
            )),
            settings(),
        ))
    };
    let machine = replica();
    // Each backup's step ends in a requeue: its lease is kept here.
    for name in ["gone", "alive"] {
        let step = machine
            .drive(name, async {
                Ok(iar::phases::Step::Requeue(Duration::from_secs(600)))
            })
            .await
            .unwrap();
        assert!(matches!(step, iar::phases::Step::Requeue(_)));
    }
    assert_eq!(machine.kept_backups(), ["alive", "gone"]);
    let ctx = iar::k8s::reconcile::Context::new(machine.clone(), api.clone());
    // The leader's sweep leaves both: their leases are held.
    let leader = iar::k8s::reconcile::Context::new(replica(), api.clone());
    iar::k8s::sweep::sweep(&leader, std::time::SystemTime::now()).await;
    let phase = |name: &'static str| {
        let store = store.clone();
        async move {
            store
                .get_json::<BackupObject>(name, BackupFile::Metadata)
                .await
                .unwrap()
                .unwrap()
                .status
        }
    };
    assert_eq!(
        phase("gone").await.phase,
        BackupPhase::WaitingForPluginOperations
    );

    iar::k8s::sweep::end_kept_orphans(&ctx).await;
    let gone = phase("gone").await;
    assert_eq!(gone.phase, BackupPhase::Failed);
    assert!(
        gone.failure_reason
            .contains("was deleted while the backup was WaitingForPluginOperations"),
        "{}",
        gone.failure_reason
    );
    assert_eq!(
        phase("alive").await.phase,
        BackupPhase::WaitingForPluginOperations
    );
    assert_eq!(machine.kept_backups(), ["alive"]);

    // The resource deleted and made again under the same name: another
    // resource, so its backup is ended too.
    api.delete("alive", &DeleteParams::default()).await.unwrap();
    wait_for("alive deleted", Duration::from_secs(30), || {
        let api = api.clone();
        async move {
            match api.get_opt("alive").await {
                Ok(None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    api.create(
        &PostParams::default(),
        &Backup::new("alive", BackupSpec::default()),
    )
    .await
    .unwrap();
    iar::k8s::sweep::end_kept_orphans(&ctx).await;
    assert_eq!(phase("alive").await.phase, BackupPhase::Failed);
    assert!(machine.kept_backups().is_empty());
    api.delete("alive", &DeleteParams::default()).await.unwrap();
}

/// A backup left running in the store with no process driving it and no
/// Backup resource (deleted as the backup began: the resource's cleanup
/// looked for a lease before the first pass took one, and the driver
/// then lost its lease to a store fault; the fault campaign's seed 3413)
/// is ended Failed by the leader's sweep, with the reason. One of another
/// namespace's controller, or with no resource uid, is not this
/// controller's and stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_backup_whose_resource_is_gone_is_ended_by_the_sweep() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    install_crds(&admin).await;
    let ns = "orphan-system";
    create_namespace(&admin, ns).await;
    let (_dir, store) = store();
    let uid_key = iar::k8s::resource::RESOURCE_UID_ANNOTATION;
    for (name, namespace, uid) in [
        ("orphan", ns, Some("deleted-resource-uid")),
        ("elsewhere", "another-system", Some("other-uid")),
        ("no-uid", ns, None),
    ] {
        let mut object = BackupObject::new(name, namespace, "store-uid", json!({}));
        object.status.phase = BackupPhase::WaitingForPluginOperations;
        if let Some(uid) = uid {
            object
                .metadata
                .annotations
                .insert(uid_key.into(), uid.into());
        }
        store
            .put_json(name, BackupFile::Metadata, &object)
            .await
            .unwrap();
    }
    let (_, controller) = start_controller(
        admin.clone(),
        ns,
        store.clone(),
        Vec::new(),
        PluginRegistry::new(),
    )
    .await;
    let ended: BackupObject = wait_for(
        "the orphan ended by the sweep",
        Duration::from_secs(60),
        || {
            let store = store.clone();
            async move {
                let o: BackupObject = store
                    .get_json("orphan", BackupFile::Metadata)
                    .await
                    .map_err(|e| e.to_string())?
                    .unwrap();
                if o.status.phase.is_running() {
                    Err(format!("{}", o.status.phase))
                } else {
                    Ok(o)
                }
            }
        },
    )
    .await;
    assert_eq!(ended.status.phase, BackupPhase::Failed);
    assert!(
        ended
            .status
            .failure_reason
            .contains("was deleted while the backup was WaitingForPluginOperations"),
        "{}",
        ended.status.failure_reason
    );
    for name in ["elsewhere", "no-uid"] {
        let o: BackupObject = store
            .get_json(name, BackupFile::Metadata)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            o.status.phase,
            BackupPhase::WaitingForPluginOperations,
            "{name}"
        );
    }
    controller.abort();
}
