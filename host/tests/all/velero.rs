//! iar's backups in Velero's own hands. `iar backup` writes a backup,
//! through the wasm `labels` plugin, to a real S3 server (versitygw); a real
//! Velero server (v1.18.3, with velero-plugin-for-aws v1.14.3) whose
//! BackupStorageLocation is that bucket syncs it as a Velero Backup and
//! restores it into the test API server, with
//! `--features=EnableAPIGroupVersions`, which reads only the
//! `<version>-preferredversion` copies of the items. All three are built
//! from the Go module proxy once per machine by `tools/velero/build.sh`.

use crate::support::*;
use iar_apiserver::{ApiServer, User};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

pub(crate) const ACCESS_KEY: &str = "iar-test";
pub(crate) const SECRET_KEY: &str = "iar-test-secret-key";
pub(crate) const BUCKET: &str = "velero";

/// One Velero server at a time: its controller manager always serves
/// metrics on :8080 (no flag moves it), so a second one would exit.
pub(crate) static ONE_VELERO: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The directory `tools/velero/build.sh` built Velero's server and CLI, its
/// AWS plugin, versitygw and Velero's plugin client into, or
/// `None` (said loudly; a failure under CI) without Go.
pub(crate) fn tools() -> Option<PathBuf> {
    if Command::new("go").arg("version").output().is_err() {
        iar_apiserver::skip_or_fail("Go is not installed, so Velero cannot be built");
        return None;
    }
    let out = Command::new("bash")
        .arg(repo().join("tools/velero/build.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("running tools/velero/build.sh");
    assert!(out.status.success(), "tools/velero/build.sh failed");
    Some(PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()))
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed when the test ends, whatever happens, with
/// its process group when it leads one (Velero's server and the plugin
/// processes it starts: killing the server alone left them running).
pub(crate) struct Running(pub(crate) std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        // A child that leads no group of its own has none of this id:
        // the call then fails harmlessly and kill() below ends it.
        // SAFETY: kill(2) on a process group id; no memory is involved.
        unsafe { libc::kill(-(self.0.id() as libc::pid_t), libc::SIGKILL) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What object_store (in `iar`) and restic read to reach the S3 server.
pub(crate) fn s3_env(command: &mut std::process::Command, endpoint: &str) {
    command
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_ENDPOINT", endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1");
}

/// The backup store `s3://BUCKET` on the S3 server at `endpoint`, as this
/// process reaches it.
pub(crate) fn s3_store(endpoint: &str) -> iar::store::BackupStore {
    s3_store_as(endpoint, None)
}

/// [`s3_store`], its requests naming `user_agent` (in the store's access
/// log: the fault campaign tells its replicas apart by it).
pub(crate) fn s3_store_as(endpoint: &str, user_agent: Option<&str>) -> iar::store::BackupStore {
    let agent = user_agent.map(|a| object_store::HeaderValue::from_str(a).unwrap());
    let mut options = object_store::ClientOptions::new();
    if let Some(agent) = &agent {
        options = options.with_user_agent(agent.clone());
    }
    let builder = object_store::aws::AmazonS3Builder::new()
        .with_client_options(options)
        .with_bucket_name(BUCKET)
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id(ACCESS_KEY)
        .with_secret_access_key(SECRET_KEY)
        // As `BackupStore::open` retries.
        .with_retry(iar::store::retry_config());
    let s3 = std::sync::Arc::new(builder.clone().build().unwrap());
    // As `BackupStore::open`: fenced writes the store refuses after their
    // lease.
    let writer = iar::store::deadline::DeadlineWriter::for_s3(
        &builder,
        s3.clone(),
        object_store::path::Path::default(),
        agent,
    )
    .expect("plain S3 options take deadline writes");
    iar::store::BackupStore::from_object_store(s3, &format!("s3://{BUCKET}"))
        .with_deadline_writer(writer)
}

/// versitygw over a fresh directory with one bucket: its posix backend
/// keeps each bucket as a directory and each object as a file under it.
pub(crate) fn s3_server(tools: &Path, root: &Path) -> (iar_tests::s3::Gateway, String) {
    std::fs::create_dir_all(root.join(BUCKET)).unwrap();
    iar_tests::s3::versitygw(
        &tools.join("versitygw"),
        root,
        std::net::Ipv4Addr::LOCALHOST.into(),
        ACCESS_KEY,
        SECRET_KEY,
    )
}

/// `iar` with the S3 server's endpoint and keys in its environment, as
/// object_store reads them.
fn iar_on_s3(endpoint: &str, args: &[&str]) -> std::process::Output {
    iar_command(args)
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_ENDPOINT", endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1")
        .output()
        .expect("running iar")
}

/// The application iar backs up: a labelled Namespace, a ConfigMap, a
/// Service and a Deployment.
fn write_application(dir: &Path) {
    std::fs::write(
        dir.join("shop.yaml"),
        r#"apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {team: checkout}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: web-config, namespace: shop}
data: {greeting: hello}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1.27"}]
"#,
    )
    .unwrap();
}

pub(crate) fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

pub(crate) async fn create(
    client: &kube::Client,
    ar: &ApiResource,
    namespace: &str,
    object: Value,
) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, ar);
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {:?}: {e}", object.metadata.name));
}

/// Velero's CRDs, as `velero install --crds-only --dry-run -o yaml` prints
/// them, created and established.
pub(crate) async fn install_crds(tools: &Path, client: &kube::Client) {
    static DONE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    DONE.get_or_init(|| install_crds_once(tools, client)).await;
}

async fn install_crds_once(tools: &Path, client: &kube::Client) {
    let out = Command::new(tools.join("velero"))
        .args(["install", "--crds-only", "--dry-run", "-o", "yaml"])
        .output()
        .expect("velero install");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    for value in iar::yaml::manifests::<Value>(&stdout).unwrap() {
        let docs = match value.get("items") {
            Some(items) => items.as_array().unwrap().clone(),
            None if value.is_null() => continue,
            None => vec![value],
        };
        for crd in docs {
            let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
            names.push(crd.metadata.name.clone().unwrap());
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
    }
    assert!(names.iter().any(|n| n == "backups.velero.io"), "{names:?}");
    for name in names {
        iar_tests::wait_until(
            &format!("CRD {name} established"),
            Duration::from_secs(30),
            || {
                let crds = crds.clone();
                let name = name.clone();
                async move {
                    crds.get(&name).await.is_ok_and(|c| {
                        c.status.and_then(|s| s.conditions).is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "Established" && c.status == "True")
                        })
                    })
                }
            },
        )
        .await;
    }
}

/// Velero's plugin directory as `velero install` fills it: the aws plugin.
pub(crate) fn velero_plugins(tools: &Path, work: &Path) -> PathBuf {
    let plugins = work.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(
        tools.join("velero-plugin-for-aws"),
        plugins.join("velero-plugin-for-aws"),
    )
    .unwrap();
    plugins
}

/// The Velero server of `namespace`, against the test API server, with the
/// plugin directory of [`velero_plugins`] and its credentials in a file, as
/// `velero install` would mount them. Its log is `work/velero-server.log`.
pub(crate) fn velero_server(
    tools: &Path,
    server: &ApiServer,
    work: &Path,
    namespace: &str,
    features: &str,
) -> Running {
    let plugins = work.join("plugins");
    assert!(plugins.is_dir(), "velero_plugins first");
    let credentials = work.join("credentials");
    std::fs::write(
        &credentials,
        format!("[default]\naws_access_key_id={ACCESS_KEY}\naws_secret_access_key={SECRET_KEY}\n"),
    )
    .unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(work.join("velero-server.log"))
        .unwrap();
    let child = Command::new(tools.join("velero"))
        .args([
            "server",
            "--namespace",
            namespace,
            "--uploader-type",
            "kopia",
        ])
        .arg("--plugin-dir")
        .arg(&plugins)
        .arg(format!("--features={features}"))
        .arg(format!("--metrics-address=127.0.0.1:{}", free_port()))
        .arg(format!("--profiler-address=127.0.0.1:{}", free_port()))
        // Operations are checked every 2 s instead of 10.
        .arg("--item-operation-sync-frequency=2s")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        // With EnableAPIGroupVersions, the restore reads its config map
        // through a client of its own, which ignores --kubeconfig. The
        // plugin processes Velero starts inherit it too: iar's reads its
        // plugins' cluster-get through it.
        .env("KUBECONFIG", server.kubeconfig())
        .env("AWS_SHARED_CREDENTIALS_FILE", &credentials)
        .env("HOME", work)
        // iar's plugin processes share the tests' compile cache.
        .env("IAR_CACHE_DIR", cache_dir())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        // Its own process group, which its plugin processes join: Drop
        // ends them all.
        .process_group(0)
        .spawn()
        .expect("starting velero server");
    Running(child)
}

pub(crate) fn gunzip(path: &Path) -> String {
    use std::io::Read;
    let Ok(file) = std::fs::File::open(path) else {
        return format!("({} is missing)", path.display());
    };
    let mut text = String::new();
    let _ = flate2::read::GzDecoder::new(file).read_to_string(&mut text);
    text
}

/// The server log's errors and warnings (the cause of a stop is rarely in
/// the last lines), then its last 40 lines.
pub(crate) fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let problems: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| {
            ["level=error", "level=fatal", "level=warning"]
                .iter()
                .any(|p| l.contains(p))
        })
        .take(30)
        .collect();
    format!(
        "errors and warnings:\n{}\nlast lines:\n{}",
        problems.join("\n"),
        lines[lines.len().saturating_sub(40)..].join("\n")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn velero_restores_an_iar_backup_with_api_group_versions() {
    let Some(server) = server().await else { return };
    let Some(tools) = tools() else { return };
    let _one = ONE_VELERO.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (_s3, endpoint) = s3_server(&tools, &work.path().join("s3"));

    // iar backs the application up into the bucket, through a wasm plugin.
    let items = work.path().join("items");
    std::fs::create_dir_all(&items).unwrap();
    write_application(&items);
    // And what a restore's built-in actions change: an account with a
    // legacy token reference, RBAC whose subject follows a namespace
    // mapping, a claim, and a pod bound to a node that mounts it.
    std::fs::write(
        items.join("more.yaml"),
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {name: web, namespace: shop}
secrets: [{name: web-token-abcde}, {name: web-registry}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader, namespace: shop}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: web-reads, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}
subjects: [{kind: ServiceAccount, name: web, namespace: shop}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: cache, namespace: shop}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: runner, namespace: shop, labels: {app: runner}}
spec:
  nodeName: node-a
  priority: 0
  containers: [{name: run, image: "busybox:1.36", command: [sleep, "3600"]}]
  volumes: [{name: cache, persistentVolumeClaim: {claimName: cache}}]
"#,
    )
    .unwrap();
    let plugins = work.path().join("iar-plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(iar_tests::artifacts::LABELS, plugins.join("labels.wasm")).unwrap();
    std::fs::write(
        plugins.join("labels.yaml"),
        "config:\n  labels: backed-up-by=iar\n# It labels every item, the namespace's ServiceAccounts and RBAC too.\nallowMutate: ['*', serviceaccounts, roles.rbac.authorization.k8s.io, rolebindings.rbac.authorization.k8s.io]\n",
    )
    .unwrap();
    let spec = work.path().join("spec.yaml");
    std::fs::write(&spec, "includedNamespaces: [shop]\n").unwrap();
    let out = iar_on_s3(
        &endpoint,
        &[
            "backup",
            "--items",
            items.to_str().unwrap(),
            "--plugins",
            plugins.to_str().unwrap(),
            "--spec",
            spec.to_str().unwrap(),
            "--store",
            &format!("s3://{BUCKET}"),
            "--sync-period",
            "1s",
            "nightly",
        ],
    );
    assert!(out.status.success(), "iar backup: {}", text(&out));
    // And the example application with its ready VolumeSnapshot: the
    // pvc-snapshot plugin's operation completes, and finalize backs up the
    // snapshot with its bound content and class.
    // pvc-snapshot creates it (with its write grant) in the manifest
    // cluster's overlay; the snapshot controller is played there: the
    // content it makes, and the snapshot's status once bound to it.
    let snapshot_plugins = work.path().join("snapshot-plugins");
    std::fs::create_dir_all(&snapshot_plugins).unwrap();
    std::fs::copy(
        iar_tests::artifacts::PVC_SNAPSHOT,
        snapshot_plugins.join("pvc-snapshot.wasm"),
    )
    .unwrap();
    crate::csi::grant_in_dir(&snapshot_plugins, "pvc-snapshot");
    // This backup is written to the bucket's directory as a local store,
    // which versitygw serves: the manifest mode's own layout, overlay
    // included (under plugins/iar/), is what Velero's location validation
    // below reads; an entry at the top it does not know would make it
    // refuse the whole location.
    let bucket_dir = work.path().join("s3").join(BUCKET);
    let overlay = bucket_dir.join("plugins/iar/cluster-overlay");
    let contents = overlay.join("volumesnapshotcontents.snapshot.storage.k8s.io/_cluster");
    std::fs::create_dir_all(&contents).unwrap();
    std::fs::write(
        contents.join("snapcontent-data-web-0-demo.yaml"),
        "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshotContent\nmetadata: {name: snapcontent-data-web-0-demo}\nspec:\n  deletionPolicy: Retain\n  driver: hostpath.csi.k8s.io\n  source: {volumeHandle: vol-data-web-0}\n  volumeSnapshotClassName: csi-snapclass\n  volumeSnapshotRef: {apiVersion: snapshot.storage.k8s.io/v1, kind: VolumeSnapshot, name: data-web-0-demo, namespace: shop}\nstatus: {creationTime: 1764464404000000000, readyToUse: true, restoreSize: 1073741824, snapshotHandle: snap-data-web-0-demo}\n",
    )
    .unwrap();
    let snapshot_controller = iar_tests::snapshots::SnapshotController::start(&overlay);
    snapshot_controller.set(
        "data-web-0-demo",
        json!({"boundVolumeSnapshotContentName": "snapcontent-data-web-0-demo",
            "creationTime": "2026-11-30T01:00:04Z", "readyToUse": true, "restoreSize": "1Gi"}),
    );
    let out = iar(&[
        "backup",
        "--items",
        repo().join("examples/cluster").to_str().unwrap(),
        "--plugins",
        snapshot_plugins.to_str().unwrap(),
        "--store",
        bucket_dir.to_str().unwrap(),
        "--sync-period",
        "1s",
        "demo",
    ]);
    assert!(out.status.success(), "iar backup demo: {}", text(&out));
    drop(snapshot_controller);

    // Velero, pointed at the same bucket.
    let client = client(server, User::Admin).await;
    install_crds(&tools, &client).await;
    iar_apiserver::create_namespace(&client, "velero").await;
    velero_deployment(&client, "velero").await;
    create_location(&client, "velero", &endpoint).await;
    // Velero's CSI support reads the three snapshot kinds: the real CRDs,
    // with the real snapshot-controller.
    assert!(
        crate::csi::snapshots(&client).await,
        "the snapshot-controller runs"
    );
    velero_plugins(&tools, work.path());
    let since = std::time::SystemTime::now() - Duration::from_secs(1);
    let velero = velero_server(
        &tools,
        server,
        work.path(),
        "velero",
        "EnableAPIGroupVersions,EnableCSI",
    );
    let log = work.path().join("velero-server.log");
    // Velero's own validation of the store's layout (its persistence
    // code's IsValid) accepts the bucket iar wrote, overlay and all.
    wait_location_available(&client, "velero", since, &log).await;

    // Backup sync runs on a one-minute timer, whatever its flag says.
    let backups: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "velero",
        &resource("velero.io", "v1", "Backup", "backups"),
    );
    let synced = wait_for_or_log(
        "Velero to sync iar's backup",
        &log,
        Duration::from_secs(150),
        || {
            let backups = backups.clone();
            async move { backups.get_opt("nightly").await.ok().flatten() }
        },
    )
    .await;
    assert_eq!(
        synced.data["status"]["phase"], "Completed",
        "{:?}",
        synced.data
    );
    assert_eq!(synced.data["status"]["formatVersion"], "1.1.0");

    // Velero's CLI reads what iar wrote beside the tarball, through the
    // server's download requests: the resource list and the log.
    let velero_cli = |args: &[&str]| {
        let out = Command::new(tools.join("velero"))
            .args(args)
            .args(["--namespace", "velero", "--kubeconfig"])
            .arg(server.kubeconfig())
            .env("HOME", work.path())
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "velero {args:?}: {shown}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        shown
    };
    let described = velero_cli(&[
        "backup",
        "describe",
        "nightly",
        "--details",
        "--colorized=false",
    ]);
    assert!(!described.contains("not found"), "{described}");
    for line in [
        "Phase:  Completed",
        "Backup Format Version:  1.1.0",
        "ItemOperationTimeout:  4h0m0s",
        "Items backed up:              9",
        "Resource List:\n  apps/v1/Deployment:\n    - shop/web\n  rbac.authorization.k8s.io/v1/Role:\n    - shop/reader\n  rbac.authorization.k8s.io/v1/RoleBinding:\n    - shop/web-reads\n  v1/ConfigMap:\n    - shop/web-config\n  v1/Namespace:\n    - shop\n  v1/PersistentVolumeClaim:\n    - shop/cache\n  v1/Pod:\n    - shop/runner\n  v1/Service:\n    - shop/web\n  v1/ServiceAccount:\n    - shop/web\n",
    ] {
        assert!(described.contains(line), "{line:?} not in:\n{described}");
    }
    let logs = velero_cli(&["backup", "logs", "nightly"]);
    assert!(logs.contains("items selected by the spec"), "{logs}");

    let s3_root = work.path().join("s3");
    let (status, results) = velero_restore(
        &client,
        "velero",
        "nightly-1",
        json!({"backupName": "nightly"}),
        &s3_root,
        &log,
    )
    .await;
    assert_eq!(
        status["phase"], "Completed",
        "restore status {}\nrestore results: {results}",
        status,
    );
    assert_eq!(status.get("errors"), None, "{}", status);

    // What came back: the Namespace with its labels (from its own object),
    // the ConfigMap as the plugin left it, the Service and the Deployment.
    let ns = Api::<Namespace>::all(client.clone())
        .get("shop")
        .await
        .unwrap();
    assert_eq!(ns.metadata.labels.unwrap()["team"], "checkout");
    let cm = Api::<ConfigMap>::namespaced(client.clone(), "shop")
        .get("web-config")
        .await
        .unwrap();
    assert_eq!(cm.metadata.labels.as_ref().unwrap()["backed-up-by"], "iar");
    assert_eq!(cm.data.unwrap()["greeting"], "hello");
    let svc = Api::<Service>::namespaced(client.clone(), "shop")
        .get("web")
        .await
        .unwrap();
    assert_eq!(svc.metadata.labels.as_ref().unwrap()["backed-up-by"], "iar");
    let deploy = Api::<Deployment>::namespaced(client.clone(), "shop")
        .get("web")
        .await
        .unwrap();
    assert_eq!(
        deploy.metadata.labels.as_ref().unwrap()["velero.io/restore-name"],
        "nightly-1"
    );

    // The same backup restored by Velero's server and by iar into empty
    // namespaces: the same objects, field for field, but for what each
    // restore names itself by and what the API server assigns.
    let (status, results) = velero_restore(
        &client,
        "velero",
        "nightly-velero",
        json!({"backupName": "nightly", "namespaceMapping": {"shop": "shop-velero"}}),
        &s3_root,
        &log,
    )
    .await;
    assert_eq!(status["phase"], "Completed", "{status}\n{results}");
    let mut by_iar = iar_command(&[
        "restore",
        "nightly-iar",
        "--from-backup",
        "nightly",
        "--store",
        &format!("s3://{BUCKET}"),
        "--namespace-mappings",
        "shop:shop-iar",
        "--cluster",
    ]);
    s3_env(&mut by_iar, &endpoint);
    by_iar.env("KUBECONFIG", server.kubeconfig());
    let out = tokio::task::block_in_place(|| by_iar.output().unwrap());
    assert!(out.status.success(), "iar restore: {}", text(&out));
    same_as_velero_restored(&client, "shop-velero", "shop-iar").await;

    // With EnableCSI, Velero restores iar's VolumeSnapshot as a static one
    // bound to a VolumeSnapshotContent it recreates from the backed-up
    // content's snapshot handle (it refuses a snapshot without one).
    let (status, results) = velero_restore(
        &client,
        "velero",
        "demo-csi",
        json!({"backupName": "demo",
            "includedResources": ["volumesnapshots.snapshot.storage.k8s.io"]}),
        &s3_root,
        &log,
    )
    .await;
    assert_eq!(
        status["phase"], "Completed",
        "restore status {}\nrestore results: {results}",
        status,
    );
    let snapshots: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "shop",
        &resource(
            "snapshot.storage.k8s.io",
            "v1",
            "VolumeSnapshot",
            "volumesnapshots",
        ),
    );
    let restored = snapshots.list(&Default::default()).await.unwrap();
    let vs = restored
        .items
        .iter()
        .find(|v| {
            v.metadata.labels.as_ref().is_some_and(|l| {
                l.get("velero.io/restore-name").map(String::as_str) == Some("demo-csi")
            })
        })
        .unwrap_or_else(|| panic!("no restored VolumeSnapshot in {:?}", restored.items));
    let content_name = vs.data["spec"]["source"]["volumeSnapshotContentName"]
        .as_str()
        .unwrap_or_else(|| panic!("a static snapshot: {}", vs.data));
    let contents: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource(
            "snapshot.storage.k8s.io",
            "v1",
            "VolumeSnapshotContent",
            "volumesnapshotcontents",
        ),
    );
    let content = contents.get(content_name).await.unwrap();
    assert_eq!(
        content.data["spec"]["source"]["snapshotHandle"], "snap-data-web-0-demo",
        "{}",
        content.data
    );
    drop(velero);
}

/// The objects of backup `nightly` that Velero restored into `velero_ns`
/// and iar into `iar_ns`, compared field by field once each is rid of
/// what differs by design: what the API server assigns (identity,
/// version, times, field managers, a Service's address), the namespace
/// itself and the label naming the restore. Nothing else may differ.
async fn same_as_velero_restored(client: &kube::Client, velero_ns: &str, iar_ns: &str) {
    // Each restore's own namespace, where a binding's subject was mapped
    // to it, is said the same way for both.
    fn comparable(mut v: Value, target: &str) -> Value {
        if let Some(Value::Array(subjects)) = v.get_mut("subjects") {
            for s in subjects {
                if s["namespace"] == target {
                    s["namespace"] = json!("<the restore's namespace>");
                }
            }
        }
        let meta = v["metadata"].as_object_mut().unwrap();
        for key in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "generation",
            "namespace",
            "name",
        ] {
            meta.remove(key);
        }
        if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
            labels.remove("velero.io/restore-name");
            labels.remove("kubernetes.io/metadata.name");
        }
        let object = v.as_object_mut().unwrap();
        object.remove("status");
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("clusterIP");
            spec.remove("clusterIPs");
        }
        v
    }
    let mut compared = Vec::new();
    let mut as_iar_restored = std::collections::BTreeMap::new();
    let namespaces = Api::<DynamicObject>::all_with(
        client.clone(),
        &resource("", "v1", "Namespace", "namespaces"),
    );
    let pairs: Vec<(ApiResource, Option<&str>)> = vec![
        (resource("", "v1", "Namespace", "namespaces"), None),
        (
            resource("", "v1", "ConfigMap", "configmaps"),
            Some("web-config"),
        ),
        (resource("", "v1", "Service", "services"), Some("web")),
        (
            resource("apps", "v1", "Deployment", "deployments"),
            Some("web"),
        ),
        (
            resource("", "v1", "ServiceAccount", "serviceaccounts"),
            Some("web"),
        ),
        (
            resource("rbac.authorization.k8s.io", "v1", "Role", "roles"),
            Some("reader"),
        ),
        (
            resource(
                "rbac.authorization.k8s.io",
                "v1",
                "RoleBinding",
                "rolebindings",
            ),
            Some("web-reads"),
        ),
        (
            resource("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
            Some("cache"),
        ),
        (resource("", "v1", "Pod", "pods"), Some("runner")),
    ];
    for (ar, name) in pairs {
        let (by_velero, by_iar) = match name {
            None => (
                namespaces.get(velero_ns).await.unwrap(),
                namespaces.get(iar_ns).await.unwrap(),
            ),
            Some(name) => (
                Api::<DynamicObject>::namespaced_with(client.clone(), velero_ns, &ar)
                    .get(name)
                    .await
                    .unwrap_or_else(|e| panic!("Velero's {} {name}: {e}", ar.kind)),
                Api::<DynamicObject>::namespaced_with(client.clone(), iar_ns, &ar)
                    .get(name)
                    .await
                    .unwrap_or_else(|e| panic!("iar's {} {name}: {e}", ar.kind)),
            ),
        };
        let by_iar = serde_json::to_value(by_iar).unwrap();
        as_iar_restored.insert(ar.kind.clone(), by_iar.clone());
        let (by_velero, by_iar) = (
            comparable(serde_json::to_value(by_velero).unwrap(), velero_ns),
            comparable(by_iar, iar_ns),
        );
        assert_eq!(
            by_iar, by_velero,
            "{} as iar restored it (left) and as Velero did (right)",
            ar.kind
        );
        compared.push(ar.kind);
    }
    assert_eq!(
        compared,
        [
            "Namespace",
            "ConfigMap",
            "Service",
            "Deployment",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "PersistentVolumeClaim",
            "Pod"
        ]
    );
    // Both mapped the binding's subject, and dropped the legacy token.
    assert_eq!(
        as_iar_restored["RoleBinding"]["subjects"][0]["namespace"],
        iar_ns
    );
    assert_eq!(
        as_iar_restored["ServiceAccount"]["secrets"],
        json!([{"name": "web-registry"}])
    );
}

/// Waits for `check` to find something; on a timeout the message ends
/// with the Velero server's log.
pub(crate) async fn wait_for_or_log<T, F, Fut>(
    what: &str,
    log: &Path,
    within: Duration,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    iar_tests::wait_for(what, within, || {
        let found = check();
        async move {
            found
                .await
                .ok_or_else(|| format!("velero server log:\n{}", tail(log)))
        }
    })
    .await
}

/// iar's own store on real S3 (versitygw, through object_store's S3
/// client): a backup is created once and only once (the conditional create
/// is honoured: a second `iar backup` of the name is refused, naming it),
/// its lease is taken and released, `iar get`/`describe`/`logs` read it,
/// and `iar delete` removes every object of it and nothing of another.
#[test]
fn iar_keeps_its_store_on_real_s3() {
    let Some(tools) = tools() else { return };
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("s3");
    let (_s3, endpoint) = s3_server(&tools, &root);
    let items = work.path().join("items");
    std::fs::create_dir_all(&items).unwrap();
    write_application(&items);
    let run = |args: &[&str]| iar_on_s3(&endpoint, args);
    let store = format!("s3://{BUCKET}/iar");
    let items_s = items.to_str().unwrap();
    for name in ["first", "second"] {
        let out = run(&["backup", "--items", items_s, "--store", &store, name]);
        assert!(out.status.success(), "{name}: {}", text(&out));
    }
    let again = run(&["backup", "--items", items_s, "--store", &store, "first"]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already exists"),
        "{}",
        text(&again)
    );
    // The objects are where Velero looks, under the prefix; no lease is
    // left held.
    let backup_dir = root.join(BUCKET).join("iar/backups/first");
    for file in [
        "velero-backup.json",
        "first.tar.gz",
        "first-resource-list.json.gz",
        "first-logs.gz",
    ] {
        assert!(backup_dir.join(file).is_file(), "{file}");
    }
    let got = run(&["get", "--store", &store]);
    assert!(got.status.success(), "{}", text(&got));
    let shown = String::from_utf8_lossy(&got.stdout);
    assert!(
        shown.contains("first") && shown.contains("second"),
        "{shown}"
    );
    let logs = run(&["logs", "first", "--store", &store]);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("phase Completed"),
        "{}",
        text(&logs)
    );

    let deleted = run(&["delete", "first", "--store", &store]);
    assert!(deleted.status.success(), "{}", text(&deleted));
    let left: Vec<_> = std::fs::read_dir(&backup_dir)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left of the deleted backup: {left:?}");
    assert!(
        root.join(BUCKET)
            .join("iar/backups/second/second.tar.gz")
            .is_file()
    );
    let described = run(&["describe", "second", "--store", &store]);
    assert!(described.status.success(), "{}", text(&described));
}

/// Every entry of a gzipped tarball, by path.
pub(crate) fn tarball(path: &Path) -> std::collections::BTreeMap<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut archive = tar::Archive::new(flate2::read::MultiGzDecoder::new(file));
    let mut entries = std::collections::BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut text = String::new();
        entry.read_to_string(&mut text).unwrap();
        entries.insert(name, text);
    }
    entries
}

/// One item of a tarball, parsed; a missing one names what is there.
pub(crate) fn entry(entries: &std::collections::BTreeMap<String, String>, path: &str) -> Value {
    let text = entries
        .get(path)
        .unwrap_or_else(|| panic!("{path} not in {:?}", entries.keys().collect::<Vec<_>>()));
    serde_json::from_str(text).unwrap()
}

/// Waits until the server started at `since` has validated the default
/// location as Available (the status may still be an earlier server's): a
/// Backup created before that fails validation.
pub(crate) async fn wait_location_available(
    client: &kube::Client,
    velero_ns: &str,
    since: std::time::SystemTime,
    log: &Path,
) {
    let bsls: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        velero_ns,
        &resource(
            "velero.io",
            "v1",
            "BackupStorageLocation",
            "backupstoragelocations",
        ),
    );
    wait_for_or_log(
        "the location to be Available",
        log,
        Duration::from_secs(60),
        || {
            let bsls = bsls.clone();
            async move {
                bsls.get("default").await.ok().filter(|b| {
                    let validated = b.data["status"]["lastValidationTime"]
                        .as_str()
                        .and_then(|t| humantime::parse_rfc3339(t).ok());
                    b.data["status"]["phase"] == "Available"
                        && validated.is_some_and(|t| t >= since)
                })
            }
        },
    )
    .await;
}

/// A scaled-down Deployment named `velero` in Velero's namespace: Velero's
/// restore looks its server up (the pod volume restore action); nothing
/// needs to run in it.
pub(crate) async fn velero_deployment(client: &kube::Client, velero_ns: &str) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), velero_ns);
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "velero", "namespace": velero_ns},
                "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "velero"}},
                    "template": {"metadata": {"labels": {"app": "velero"}},
                        "spec": {"containers": [{"name": "velero", "image": "velero/velero:v1.18.3"}]}}}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
}

/// Waits for a Velero Backup or Restore (`ar`) named `name` to end
/// (Completed, PartiallyFailed, Failed or FailedValidation); the whole
/// object.
pub(crate) async fn wait_ended(
    client: &kube::Client,
    velero_ns: &str,
    ar: &ApiResource,
    name: &str,
    log: &Path,
) -> DynamicObject {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), velero_ns, ar);
    wait_for_or_log(
        &format!("Velero {} {name} to end", ar.kind),
        log,
        Duration::from_secs(180),
        || {
            let api = api.clone();
            async move {
                api.get_opt(name).await.ok().flatten().filter(|o| {
                    matches!(
                        o.data["status"]["phase"].as_str(),
                        Some("Completed" | "PartiallyFailed" | "Failed" | "FailedValidation")
                    )
                })
            }
        },
    )
    .await
}

/// Velero's default BackupStorageLocation in `velero_ns`: the test bucket
/// on the S3 server at `endpoint`.
pub(crate) async fn create_location(client: &kube::Client, velero_ns: &str, endpoint: &str) {
    create(
        client,
        &resource(
            "velero.io",
            "v1",
            "BackupStorageLocation",
            "backupstoragelocations",
        ),
        velero_ns,
        json!({
            "apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
            "metadata": {"name": "default", "namespace": velero_ns},
            "spec": {"provider": "aws", "default": true,
                "objectStorage": {"bucket": BUCKET},
                "config": {"region": "us-east-1", "s3ForcePathStyle": "true", "s3Url": endpoint}}
        }),
    )
    .await;
}

/// Creates a Velero Restore with `spec` and waits for it to end: its
/// status, and its results file as Velero wrote it to the bucket (versitygw
/// keeps each object as a file under `s3_root`).
pub(crate) async fn velero_restore(
    client: &kube::Client,
    velero_ns: &str,
    name: &str,
    spec: Value,
    s3_root: &Path,
    log: &Path,
) -> (Value, String) {
    start_restore(client, velero_ns, name, spec).await;
    restore_ended(client, velero_ns, name, s3_root, log).await
}

/// Creates Velero Restore `name` with `spec`.
async fn start_restore(client: &kube::Client, velero_ns: &str, name: &str, spec: Value) {
    let ar = resource("velero.io", "v1", "Restore", "restores");
    create(
        client,
        &ar,
        velero_ns,
        json!({"apiVersion": "velero.io/v1", "kind": "Restore",
            "metadata": {"name": name, "namespace": velero_ns}, "spec": spec}),
    )
    .await;
}

/// Waits for Velero Restore `name` to end; its status and its results
/// file.
async fn restore_ended(
    client: &kube::Client,
    velero_ns: &str,
    name: &str,
    s3_root: &Path,
    log: &Path,
) -> (Value, String) {
    let ar = resource("velero.io", "v1", "Restore", "restores");
    let done = wait_ended(client, velero_ns, &ar, name, log).await;
    let results = gunzip(
        &s3_root
            .join(BUCKET)
            .join(format!("restores/{name}/restore-{name}-results.gz")),
    );
    (done.data["status"].clone(), results)
}

/// Creates a Velero Backup of `namespace` and waits for it to end.
pub(crate) async fn velero_backup(
    client: &kube::Client,
    velero_ns: &str,
    name: &str,
    namespace: &str,
    log: &Path,
) -> Value {
    let ar = resource("velero.io", "v1", "Backup", "backups");
    create(
        client,
        &ar,
        velero_ns,
        json!({"apiVersion": "velero.io/v1", "kind": "Backup",
            "metadata": {"name": name, "namespace": velero_ns},
            "spec": {"includedNamespaces": [namespace], "snapshotVolumes": false,
                "storageLocation": "default", "ttl": "24h0m0s"}}),
    )
    .await;
    wait_ended(client, velero_ns, &ar, name, log).await.data
}

/// A Velero server runs iar's wasm plugins through the `iar` binary in its
/// plugin directory: the `labels` plugin's labels are in Velero's tarball,
/// `pvc-snapshot`'s operation is tracked by Velero's own operations
/// controller to Completed (its progress reads the VolumeSnapshot from the
/// API server through cluster-get), and a hostile plugin added later (a
/// Velero restart, as for any plugin) fails its items without taking the
/// server or the backup down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn velero_server_backs_up_through_iar_s_wasm_plugins() {
    let Some(server) = server().await else { return };
    let Some(tools) = tools() else { return };
    let _one = ONE_VELERO.lock().await;
    let work = tempfile::tempdir().unwrap();
    let (_s3, endpoint) = s3_server(&tools, &work.path().join("s3"));
    let (velero_ns, app) = ("velero-iar", "ledger");

    let client = client(server, User::Admin).await;
    install_crds(&tools, &client).await;
    iar_apiserver::create_namespace(&client, velero_ns).await;
    iar_apiserver::create_namespace(&client, app).await;
    create(
        &client,
        &resource("", "v1", "ConfigMap", "configmaps"),
        app,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "app-config", "namespace": app}, "data": {"mode": "strict"}}),
    )
    .await;
    // A claim on a CSI volume: pvc-snapshot, inside Velero, creates its
    // snapshot; the real snapshot-controller binds it, and the test plays
    // the driver's sidecar once it is bound.
    assert!(
        crate::csi::snapshots(&client).await,
        "the snapshot-controller runs"
    );
    crate::csi::csi_claim(&client, app, "data", "ledger").await;
    // A Pod that reads app-config: config-block, Velero's ItemBlockAction
    // here, relates the two, so Velero asks it for the Pod's related items.
    create(
        &client,
        &resource("", "v1", "Pod", "pods"),
        app,
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": app},
            "spec": {"containers": [{"name": "web", "image": "web:1",
                "envFrom": [{"configMapRef": {"name": "app-config"}}]}]}}),
    )
    .await;
    create_location(&client, velero_ns, &endpoint).await;

    // Velero's plugin directory, filled as deploy/velero/'s init container
    // fills it: `iar plugin velero-install` copies the binary and the wasm
    // plugins of the image.
    let plugins = velero_plugins(&tools, work.path());
    let image = work.path().join("image-plugins");
    std::fs::create_dir(&image).unwrap();
    std::fs::copy(iar_tests::artifacts::LABELS, image.join("labels.wasm")).unwrap();
    std::fs::write(
        image.join("labels.yaml"),
        "config: {labels: via=iar-in-velero}\nallowMutate: ['*', serviceaccounts]\n",
    )
    .unwrap();
    // The Go SDK's port of labels (go-sdk/examples/labels), served beside
    // the Rust one with a label of its own: every item must show both.
    std::fs::copy(crate::go_sdk::go("labels-go"), image.join("labels-go.wasm")).unwrap();
    std::fs::write(
        image.join("labels-go.yaml"),
        "config: {labels: via-go=iar-in-velero}\nallowMutate: ['*', serviceaccounts]\n",
    )
    .unwrap();
    std::fs::copy(
        iar_tests::artifacts::PVC_SNAPSHOT,
        image.join("pvc-snapshot.wasm"),
    )
    .unwrap();
    crate::csi::grant_in_dir(&image, "pvc-snapshot");
    std::fs::copy(
        iar_tests::artifacts::CONFIG_BLOCK,
        image.join("config-block.wasm"),
    )
    .unwrap();
    // A restore action with an asynchronous operation (`op-<item>`, done at
    // its first progress call): Velero's restore operations controller
    // tracks it.
    std::fs::copy(
        iar_tests::artifacts::RESTORE_HOSTILE,
        image.join("restore-op.wasm"),
    )
    .unwrap();
    std::fs::write(image.join("restore-op.yaml"), "config: {mode: operation}\n").unwrap();
    let install = || {
        let out = iar(&[
            "plugin",
            "velero-install",
            "--to",
            plugins.to_str().unwrap(),
            "--plugins",
            image.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        install(),
        "iar.dev/config-block\niar.dev/labels-go\niar.dev/labels\niar.dev/pvc-snapshot\niar.dev/restore-op\n"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o111;
        assert_ne!(mode(&plugins.join("iar")), 0, "the binary is executable");
        assert_eq!(
            mode(&plugins.join("iar-plugins/labels.wasm")),
            0,
            "a wasm file is not, or Velero would run it"
        );
    }
    let log = work.path().join("velero-server.log");
    velero_deployment(&client, velero_ns).await;
    let since = std::time::SystemTime::now() - Duration::from_secs(1);
    let velero = velero_server(&tools, server, work.path(), velero_ns, "");
    wait_location_available(&client, velero_ns, since, &log).await;

    let sidecar = tokio::spawn({
        let client = client.clone();
        async move { crate::csi::cut_snapshot(&client, app, "data-via-velero").await }
    });
    let status = velero_backup(&client, velero_ns, "via-velero", app, &log).await;
    sidecar.await.expect("the sidecar played its part");
    let bucket = work.path().join("s3").join(BUCKET).join("backups");
    assert_eq!(
        status["status"]["phase"],
        "Completed",
        "{}\n{}",
        status["status"],
        tail(&log)
    );
    let status = &status["status"];
    assert_eq!(
        status["progress"]["itemsBackedUp"],
        5,
        "the Namespace, ConfigMap, Pod, PVC and PV (the VolumeSnapshot is finalize's): {status}\n{}",
        tail(&log)
    );
    assert_eq!(status["backupItemOperationsAttempted"], 1, "{status}");
    assert_eq!(status["backupItemOperationsCompleted"], 1, "{status}");
    let entries = tarball(&bucket.join("via-velero/via-velero.tar.gz"));
    let config = entry(
        &entries,
        &format!("resources/configmaps/namespaces/{app}/app-config.json"),
    );
    assert_eq!(config["metadata"]["labels"]["via"], "iar-in-velero");
    assert_eq!(config["data"]["mode"], "strict");
    // The Go labels plugin ran inside Velero exactly where the Rust one
    // did: every item in the tarball carries both labels or neither.
    let mut labelled = Vec::new();
    for (path, text) in &entries {
        if !(path.starts_with("resources/") && path.ends_with(".json")) {
            continue;
        }
        let item: Value = serde_json::from_str(text).unwrap();
        let labels = &item["metadata"]["labels"];
        assert_eq!(
            labels.get("via-go"),
            labels.get("via"),
            "{path}: the Go (left) and Rust (right) labels differ"
        );
        if labels.get("via").is_some() {
            labelled.push(path.as_str());
        }
    }
    for kind in ["configmaps", "pods", "persistentvolumeclaims"] {
        assert!(
            labelled
                .iter()
                .any(|p| p.starts_with(&format!("resources/{kind}/"))),
            "no {kind} labelled by both: {labelled:?}"
        );
    }
    // The post-operation item, backed up in Velero's finalize pass.
    let snapshot_path = format!(
        "resources/volumesnapshots.snapshot.storage.k8s.io/namespaces/{app}/data-via-velero.json"
    );
    assert!(
        entries.contains_key(&snapshot_path),
        "{snapshot_path} not in {:?}",
        entries.keys().collect::<Vec<_>>()
    );
    let operations: Value = serde_json::from_str(&gunzip(
        &bucket.join("via-velero/via-velero-itemoperations.json.gz"),
    ))
    .unwrap();
    let op = &operations[0];
    assert_eq!(
        op["spec"]["operationID"],
        format!("{app}/data-via-velero"),
        "{operations}"
    );
    assert_eq!(
        op["spec"]["backupItemAction"], "iar.dev/pvc-snapshot",
        "{operations}"
    );
    assert_eq!(op["status"]["phase"], "Completed", "{operations}");

    // Velero restores the backup iar's plugins took part in (into a new
    // namespace: the test API server runs no namespace controller, so the
    // old one cannot be deleted).
    let (status, results) = velero_restore(
        &client,
        velero_ns,
        "via-velero-1",
        json!({"backupName": "via-velero",
            "namespaceMapping": {app: format!("{app}-restored")},
            "includedResources": ["configmaps"]}),
        &work.path().join("s3"),
        &log,
    )
    .await;
    assert_eq!(status["phase"], "Completed", "{}\n{results}", status);
    let restored = Api::<ConfigMap>::namespaced(client.clone(), &format!("{app}-restored"))
        .get("app-config")
        .await
        .unwrap();
    assert_eq!(
        restored.metadata.labels.as_ref().unwrap()["via"],
        "iar-in-velero"
    );
    assert_eq!(
        restored.metadata.labels.as_ref().unwrap()["via-go"],
        "iar-in-velero"
    );
    assert_eq!(restored.data.unwrap()["mode"], "strict");
    assert_eq!(
        restored.metadata.annotations.as_ref().unwrap()["iar.dev/restored-from"],
        "via-velero",
        "labels' restore action, run by Velero's restore"
    );
    // restore-op's operation, tracked by Velero's restore operations
    // controller through iar's Progress to Completed before the restore
    // ended, and shown by Velero's own CLI.
    assert_eq!(status["restoreItemOperationsAttempted"], 1, "{status}");
    assert_eq!(status["restoreItemOperationsCompleted"], 1, "{status}");
    assert_eq!(status.get("restoreItemOperationsFailed"), None, "{status}");
    let out = Command::new(tools.join("velero"))
        .args(["restore", "describe", "via-velero-1", "--details"])
        .args([
            "--colorized=false",
            "--namespace",
            velero_ns,
            "--kubeconfig",
        ])
        .arg(server.kubeconfig())
        .env("HOME", work.path())
        .output()
        .unwrap();
    let described = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "velero restore describe: {described}");
    // Velero's describer aligns columns with tabs and spaces.
    let lines: Vec<String> = described
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    for line in [
        "Restore Item Operations:",
        &format!("Operation for configmaps {app}-restored/app-config:"),
        "Restore Item Action Plugin: iar.dev/restore-op",
        "Operation ID: op-app-config",
        "Phase: Completed",
        "Progress: 1 of 1 complete ()",
        "Progress description: restored",
    ] {
        assert!(
            lines.iter().any(|l| l == line),
            "{line:?} not in:\n{described}"
        );
    }
    drop(velero);

    // Velero runs its CSI restore actions only with EnableCSI (its log says
    // "Skip action velero.io/csi-volumesnapshot-restorer ... because the
    // CSI feature is not enabled" otherwise), so the claim's restore from
    // its snapshot is asked of a server started with it.
    let since = std::time::SystemTime::now() - Duration::from_secs(1);
    let velero = velero_server(&tools, server, work.path(), velero_ns, "EnableCSI");
    wait_location_available(&client, velero_ns, since, &log).await;
    restores_a_claim_from_its_snapshot(&client, velero_ns, app, work.path(), &log).await;
    drop(velero);

    // A hostile plugin, added later: Velero lists plugins when it starts,
    // so it is restarted, as for any new plugin. Each comes with its
    // settings file.
    let add = |wasm: &str, name: &str, settings: &str| {
        std::fs::copy(wasm, image.join(format!("{name}.wasm"))).unwrap();
        std::fs::write(image.join(format!("{name}.yaml")), settings).unwrap();
    };
    add(
        iar_tests::artifacts::HOSTILE,
        "crash",
        "config: {behavior: panic}\n",
    );
    // And a hostile restore action, which renames every ConfigMap.
    add(
        iar_tests::artifacts::RESTORE_HOSTILE,
        "restorer",
        "config: {mode: rename}\n",
    );
    // And one that names a ClusterRoleBinding as an additional item of
    // every Pod it restores: Velero itself would restore it on a restore
    // of one namespace (it admits cluster-scoped additional items unless
    // includeClusterResources is false).
    add(
        iar_tests::artifacts::RESTORE_HOSTILE,
        "escalator",
        "config: {mode: bring-binding, resources: pods}\n",
    );
    // And one that makes every Pod it restores privileged, in the host's
    // PID namespace, mounting the host's `/`: Velero would create it with
    // its own rights. It holds `allowMutate: ["*"]`, which no glob lets
    // reach a pod's security fields.
    add(
        iar_tests::artifacts::RESTORE_HOSTILE,
        "privileger",
        "config: {mode: privileged-pod, resources: pods}\nallowMutate: [\"*\"]\n",
    );
    // And one that asks Velero to wait ~292 years for its additional item
    // and never calls it ready (`u64::MAX` ms, which Velero would honour:
    // it runs one restore at a time, so every later restore would wait).
    // Its wait is cut to its `maxReadyWait`. It sorts before the others,
    // so Velero runs it first on a ConfigMap.
    add(
        iar_tests::artifacts::RESTORE_HOSTILE,
        "delayer",
        "config: {mode: wait-forever, ready: 'false'}\nlimits: {maxReadyWait: 2s}\n",
    );
    // And one that floods: 600 additional items for every claim it
    // restores, over its `maxItemsPerRun` of 100 (Velero would try to
    // restore each, and keep a warning per missing one in memory).
    add(
        iar_tests::artifacts::RESTORE_HOSTILE,
        "avalanche",
        "config: {mode: many, count: '600', resources: persistentvolumeclaims}\nlimits: {maxItemsPerRun: 100}\n",
    );
    let installed = install();
    assert!(
        installed.contains("iar.dev/crash")
            && installed.contains("iar.dev/avalanche")
            && installed.contains("iar.dev/delayer")
            && installed.contains("iar.dev/restorer")
            && installed.contains("iar.dev/escalator"),
        "{installed}"
    );
    let since = std::time::SystemTime::now() - Duration::from_secs(1);
    let mut velero = velero_server(&tools, server, work.path(), velero_ns, "");
    wait_location_available(&client, velero_ns, since, &log).await;
    let status = velero_backup(&client, velero_ns, "hostile", app, &log).await;
    assert_eq!(
        status["status"]["phase"], "PartiallyFailed",
        "{}",
        status["status"]
    );
    assert!(
        velero.0.try_wait().unwrap().is_none(),
        "the Velero server is still running"
    );
    // Velero leaves an item whose action failed out of the backup, and goes
    // on: every item failed in the crash plugin, each with its own error,
    // so the plugin process answered every call after the first panic.
    let errors = status["status"]["errors"].as_u64().unwrap_or_default();
    assert!(errors >= 3, "{}", status["status"]);
    let backup_log = gunzip(&bucket.join("hostile/hostile-logs.gz"));
    let failed_items = backup_log
        .lines()
        .filter(|l| l.contains("level=error") && l.contains("crash") && l.contains("no-trap"))
        .count();
    assert_eq!(
        failed_items as u64, errors,
        "each error names the plugin and the rule:\n{backup_log}"
    );

    // Velero's restore runs the hostile restore actions on the ConfigMap:
    // the delayer's wait ends at its bound, the restorer's change fails the
    // item with the plugin, the item and the rule named, the restore ends
    // PartiallyFailed, and the server serves on. A restore created while
    // it waits is not held up: it runs once the first ends (Velero runs one
    // at a time), and ends too.
    start_restore(
        &client,
        velero_ns,
        "via-velero-2",
        json!({"backupName": "via-velero",
            "namespaceMapping": {app: format!("{app}-again")},
            "includedResources": ["configmaps"]}),
    )
    .await;
    let restores = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        velero_ns,
        &resource("velero.io", "v1", "Restore", "restores"),
    );
    wait_for_or_log(
        "via-velero-2 to start",
        &log,
        Duration::from_secs(60),
        || {
            let restores = restores.clone();
            async move {
                restores
                    .get_opt("via-velero-2")
                    .await
                    .ok()
                    .flatten()
                    .filter(|r| {
                        r.data["status"]["phase"] != Value::Null
                            && r.data["status"]["phase"] != "New"
                    })
            }
        },
    )
    .await;
    start_restore(
        &client,
        velero_ns,
        "after-the-stall",
        json!({"backupName": "via-velero",
            "namespaceMapping": {app: format!("{app}-after")},
            "includedResources": ["namespaces"]}),
    )
    .await;
    let s3 = work.path().join("s3");
    let (status, results) = restore_ended(&client, velero_ns, "via-velero-2", &s3, &log).await;
    assert_eq!(status["phase"], "PartiallyFailed", "{status}\n{results}");
    assert!(
        results.contains("restorer")
            && results.contains("app-config")
            && results.contains("item-identity-unchanged"),
        "the restore's errors name the plugin, the item and the rule: {results}"
    );
    assert!(
        results.contains("error verifying additional items are ready to use"),
        "the delayer's wait ended at its bound, as an error of the item: {results}"
    );
    let (status, results) = restore_ended(&client, velero_ns, "after-the-stall", &s3, &log).await;
    assert_eq!(status["phase"], "Completed", "{status}\n{results}");
    // A restore of the namespace's Pods: the escalator's additional item is
    // refused inside the plugin process, by rule, before Velero sees it.
    let (status, results) = velero_restore(
        &client,
        velero_ns,
        "via-velero-3",
        json!({"backupName": "via-velero",
            "includedNamespaces": [app],
            "namespaceMapping": {app: format!("{app}-third")},
            "includedResources": ["pods"]}),
        &work.path().join("s3"),
        &log,
    )
    .await;
    assert_eq!(status["phase"], "PartiallyFailed", "{status}\n{results}");
    // Velero stops at the first action that fails an item: one of the two
    // hostile actions' refusals names the Pod, each with its rule.
    assert!(
        (results.contains("escalator")
            && results.contains("attacker-admin")
            && results.contains("additional-item-outside-restore"))
            || (results.contains("privileger") && results.contains("rights-change-not-granted")),
        "the restore's errors name the plugin, the item and the rule: {results}"
    );
    // And the cluster holds no Pod the restore made privileged.
    let pods =
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &format!("{app}-third"))
            .list(&Default::default())
            .await
            .unwrap();
    for pod in pods {
        let spec = serde_json::to_value(pod.spec).unwrap();
        assert_ne!(spec["hostPID"], true, "{spec}");
    }
    // A restore of the claim: the flood is refused in the plugin process,
    // by rule, before Velero restores any of it.
    let (status, results) = velero_restore(
        &client,
        velero_ns,
        "via-velero-4",
        json!({"backupName": "via-velero",
            "namespaceMapping": {app: format!("{app}-fourth")},
            "includedResources": ["persistentvolumeclaims"]}),
        &s3,
        &log,
    )
    .await;
    assert_eq!(status["phase"], "PartiallyFailed", "{status}\n{results}");
    assert!(
        results.contains("avalanche")
            && results.contains("maxItemsPerRun")
            && results.contains("run-budget"),
        "the restore's errors name the plugin, the limit and the rule: {results}"
    );
    let flooded = Api::<ConfigMap>::namespaced(client.clone(), &format!("{app}-fourth"))
        .list(&Default::default())
        .await
        .unwrap();
    assert!(
        flooded
            .items
            .iter()
            .all(|c| !c.metadata.name.as_deref().unwrap_or("").starts_with("cm-")),
        "nothing of the flood was restored"
    );
    assert!(
        velero.0.try_wait().unwrap().is_none(),
        "the Velero server is still running"
    );
}

/// Velero restores the claim pvc-snapshot snapshotted in backup
/// `via-velero`, and only the claim (its resource filter names nothing
/// else): pvc-snapshot's restore action, run by Velero, points the claim's
/// data source at the snapshot under the name Velero's own VolumeSnapshot
/// restore action gives it, and names the snapshot as an item Velero must
/// restore first whatever its filters say. Velero's CSI actions (on with
/// `EnableCSI`) restore the snapshot statically bound to a content holding
/// the backed-up snapshot handle; the real snapshot-controller binds the two; the test
/// plays the CSI driver's sidecar and provisioner, and the claim is bound
/// to a volume provisioned from that snapshot.
async fn restores_a_claim_from_its_snapshot(
    client: &kube::Client,
    velero_ns: &str,
    app: &str,
    work: &Path,
    log: &Path,
) {
    let target = format!("{app}-csi");
    let (status, results) = velero_restore(
        client,
        velero_ns,
        "via-velero-csi",
        json!({"backupName": "via-velero",
            "namespaceMapping": {app: &target},
            "includedResources": ["persistentvolumeclaims"]}),
        &work.join("s3"),
        log,
    )
    .await;
    assert_eq!(status["phase"], "Completed", "{status}\n{results}");
    let restore = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        velero_ns,
        &resource("velero.io", "v1", "Restore", "restores"),
    )
    .get("via-velero-csi")
    .await
    .unwrap();
    let uid = restore.metadata.uid.unwrap();
    // Velero's name for the restored snapshot: hex sha256 of
    // "<restore uid>/<name in the backup>".
    let restored_name = {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(format!("{uid}/data-via-velero"));
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let claims = Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        client.clone(),
        &target,
    );
    let claim = claims.get("data").await.unwrap();
    let spec = claim.spec.as_ref().unwrap();
    let source = spec
        .data_source
        .as_ref()
        .expect("the claim has a data source");
    assert_eq!(
        (
            source.kind.as_str(),
            source.name.as_str(),
            source.api_group.as_deref()
        ),
        (
            "VolumeSnapshot",
            restored_name.as_str(),
            Some("snapshot.storage.k8s.io")
        ),
        "{claim:?}"
    );
    assert_eq!(spec.volume_name, None, "the old volume's binding is gone");
    // The snapshot, restored first although the filter named only claims,
    // and its content with the backed-up snapshot handle.
    let snapshot = crate::csi::snapshot_api(client, &target)
        .get(&restored_name)
        .await
        .unwrap_or_else(|e| {
            let restore_log = gunzip(
                &work
                    .join("s3")
                    .join(BUCKET)
                    .join("restores/via-velero-csi/restore-via-velero-csi-logs.gz"),
            );
            panic!("the restored snapshot {restored_name}: {e}\n{results}\n{restore_log}")
        });
    let content_name = snapshot.data["spec"]["source"]["volumeSnapshotContentName"]
        .as_str()
        .unwrap_or_else(|| panic!("restored as a static snapshot: {:?}", snapshot.data))
        .to_string();
    let content = crate::csi::content_api(client)
        .get(&content_name)
        .await
        .unwrap();
    assert_eq!(
        content.data["spec"]["source"]["snapshotHandle"], "snap-data-via-velero",
        "{:?}",
        content.data
    );
    // The real snapshot-controller binds them; the sidecar's part is
    // played (the driver confirms the handle), then the provisioner's.
    crate::csi::cut_snapshot(client, &target, &restored_name).await;
    let volume = crate::csi::provision_from_snapshot(client, &target, "data").await;
    let claim = claims.get("data").await.unwrap();
    assert_eq!(
        claim.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Bound"),
        "{claim:?}"
    );
    assert_eq!(
        claim.spec.unwrap().volume_name.as_deref(),
        Some(volume.as_str())
    );
}
