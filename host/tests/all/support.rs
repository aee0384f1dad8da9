//! Helpers shared by the host crate's tests: the `iar` binary run the way a
//! user runs it, a runtime and plugins on the shared compile cache,
//! realistic items, local stores and volume data, and the shared API server.
//!
//! What the iar-tests crate's tests need too, and that needs none of iar's
//! types, is in the `iar-tests` library instead (`iar_tests::fixtures`,
//! `iar_tests::wait_for`, `iar_tests::store_files`).

use iar::catalog::Catalog;
use iar::store::BackupStore;
use iar::{BackupRef, Item, Phase, Plugin, PluginSettings, ReadGrants, Runtime, RuntimeConfig};
use iar_apiserver::{ApiServer, User};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The workspace root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ lives in the workspace root")
        .to_path_buf()
}

/// The compile cache every test and every `iar` they run share, in
/// `target/tmp`.
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("iar-component-cache")
}

/// `iar` with the shared compile cache, run in the workspace root, as
/// [`iar`] runs it, for callers that need the child process itself, other
/// stdio or more environment.
pub fn iar_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(iar_bin());
    cmd.args(args)
        .current_dir(repo())
        .env("IAR_CACHE_DIR", cache_dir());
    cmd
}

/// The `iar` binary the tests run: cargo's, or `IAR_TEST_BIN`'s (a long
/// run, `bench/faults.sh`, runs a copy, so that builds beside it change
/// nothing it runs).
pub fn iar_bin() -> PathBuf {
    std::env::var_os("IAR_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_iar").into())
}

/// A child process killed and reaped when dropped: a test that fails
/// while it runs does not leave it behind.
pub struct KillOnDrop(pub std::process::Child);

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `iar` with `args` to the end.
pub fn iar(args: &[&str]) -> Output {
    iar_command(args).output().expect("running iar")
}

pub fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A finished command's exit status, stdout and stderr, for a failure
/// message.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A runtime with the shared compile cache.
pub fn runtime() -> Runtime {
    runtime_with_cache(&cache_dir())
}

/// A runtime whose compile cache is `dir`.
pub fn runtime_with_cache(dir: &Path) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.to_path_buf()),
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

/// A plugin's settings with `config` and everything else the default.
pub fn plugin_settings(config: &[(&str, &str)]) -> PluginSettings {
    PluginSettings {
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        // Tests of other rules change items freely (a labeller labels a
        // namespace's ServiceAccount too); the item-change rules have
        // tests of their own (cli_mutate, iar-core, iar-plugin).
        mutate_grants: every_change(),
        ..PluginSettings::default()
    }
}

pub fn load(runtime: &Runtime, path: &str, config: &[(&str, &str)]) -> Plugin {
    load_granted(runtime, path, config, ReadGrants::default())
}

/// [`load`] with `grants` to read from the cluster.
pub fn load_granted(
    runtime: &Runtime,
    path: &str,
    config: &[(&str, &str)],
    grants: ReadGrants,
) -> Plugin {
    let settings = PluginSettings {
        grants,
        ..plugin_settings(config)
    };
    Plugin::from_file(runtime, Path::new(path), settings)
        .unwrap_or_else(|e| panic!("loading {path}: {e}"))
}

/// `value` as an item of the built-in catalog.
pub fn item(value: Value) -> Item {
    Item::from_value(value, Catalog::builtin()).expect("a valid item")
}

/// A Pod of about 2.5 KB in namespace `shop`, mounting PVC `data-<name>`.
pub fn pod(name: &str) -> Item {
    item(iar_tests::fixtures::pod("shop", name))
}

pub fn pvc(name: &str, bound: bool) -> Item {
    item(iar_tests::fixtures::pvc("shop", name, bound))
}

pub fn backup(phase: Phase) -> BackupRef {
    BackupRef {
        object: None,
        name: "nightly".into(),
        namespace: "velero".into(),
        uid: "11111111-2222-3333-4444-555555555555".into(),
        spec: json!({"includedNamespaces": ["shop"]}),
        phase,
    }
}

pub fn never_seen(_: &str) -> bool {
    false
}

/// A store on a fresh local directory (kept alive by the returned guard).
pub fn store() -> (tempfile::TempDir, BackupStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = BackupStore::open(dir.path().to_str().unwrap()).unwrap();
    (dir, store)
}

/// Volume data for PVC `pvc` in namespace `shop` under a `--volume-data`
/// directory: one file of `bytes` incompressible bytes.
pub fn write_volume(data: &Path, pvc: &str, bytes: usize) {
    let dir = data.join("shop").join(pvc);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("table"),
        iar_tests::fixtures::noise(pvc.len() as u64 + bytes as u64, bytes),
    )
    .unwrap();
}

/// `post` behind a gate: it runs once `blocks` pre hooks have stamped
/// their `$IAR_POD_NAME.pre` file, and fails the hook after 20 s (under
/// the hooks' 30 s timeout) if they never do. Blocks on fewer workers pass
/// it only if a block waiting on its volumes holds no worker: otherwise
/// the first blocks' post hooks wait here for pre hooks no worker is free
/// to run. A test of that order, which no machine's speed decides.
pub fn post_after_every_pre(blocks: usize, post: &str) -> String {
    let count = "$(ls \"$IAR_VOLUME_DATA\" | grep -c '[.]pre$')";
    format!(
        "n=0; while [ {count} -lt {blocks} ]; do n=$((n+1)); \
         if [ $n -gt 200 ]; then echo \"only {count} of {blocks} pre hooks ran: \
         a block waiting on its volume held a worker\" >&2; exit 1; fi; sleep 0.1; done; {post}"
    )
}

/// The time a hook wrote into `data/file` with `date +%s%N`: its own
/// clock reading of when it started.
pub fn stamp(data: &Path, file: &str) -> SystemTime {
    let ns: u64 = std::fs::read_to_string(data.join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .trim()
        .parse()
        .unwrap();
    UNIX_EPOCH + Duration::from_nanos(ns)
}

/// The shared API server (one per test binary), or `None` (the harness
/// has said loudly why) to skip.
pub async fn server() -> Option<&'static ApiServer> {
    iar::tls::install_crypto();
    iar_apiserver::shared().await
}

/// Creates `object` (any kind iar's built-in catalog knows); one that
/// exists already (a namespace's `default` ServiceAccount) is left as it is.
pub async fn create_object(client: &kube::Client, object: &Value) {
    use kube::api::{Api, ApiResource, DynamicObject, PostParams};
    let item = Item::from_value(object.clone(), Catalog::builtin())
        .unwrap_or_else(|e| panic!("{object}: {e}"));
    let id = item.id;
    let (group, version) = match object["apiVersion"].as_str().unwrap().rsplit_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            object["apiVersion"].as_str().unwrap().to_string(),
        ),
    };
    let gvk = kube::api::GroupVersionKind::gvk(&group, &version, object["kind"].as_str().unwrap());
    let resource = ApiResource::from_gvk_with_plural(&gvk, &id.resource);
    let api: Api<DynamicObject> = match id.namespace.as_str() {
        "" => Api::all_with(client.clone(), &resource),
        ns => Api::namespaced_with(client.clone(), ns, &resource),
    };
    let dynamic: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    match api.create(&PostParams::default(), &dynamic).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating {id}: {e}"),
    }
}

/// The shared API server holding `namespaces` and `objects` (created as
/// its admin), as the kubeconfig a command's `KUBECONFIG` names; `None`
/// (the harness has said why) to skip.
pub async fn seeded_server(namespaces: &[&str], objects: &[Value]) -> Option<PathBuf> {
    let server = server().await?;
    let client = client(server, User::Admin).await;
    for ns in namespaces {
        iar_apiserver::create_namespace(&client, ns).await;
    }
    for object in objects {
        create_object(&client, object).await;
    }
    Some(server.kubeconfig().to_path_buf())
}

pub async fn client(server: &ApiServer, user: User) -> kube::Client {
    server
        .client(user)
        .await
        .unwrap_or_else(|e| panic!("client for {user:?}: {e}"))
}

/// The namespaces whose pods have backup hooks (pod_hooks, node_agent): a
/// test that backs up the whole cluster leaves them out.
pub const HOOKED_NAMESPACES: &[&str] = &[
    "exec-shop",
    "exec-rules",
    "exec-failing",
    "agent-shop",
    "agent-killed",
    "agent-restart",
    "agent-order",
];

/// Runs `requests`, `at_once` of them at a time; the first that fails
/// fails the test.
pub(crate) async fn in_flight<F, E>(at_once: usize, requests: impl IntoIterator<Item = F>)
where
    F: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Debug,
{
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(requests)
        .buffer_unordered(at_once)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
}

/// Every item change granted, what decides rights included (but a pod's
/// security fields, which no example plugin changes).
pub fn every_change() -> iar::cluster::mutate::MutateGrants {
    let mut all = vec!["*"];
    all.extend(iar::cluster::mutate::RIGHTS_RESOURCES);
    iar::cluster::mutate::MutateGrants::only(&all).unwrap()
}

/// Runs a component build script (`go-sdk/build.sh`, `go-sdk/velero/build.sh`)
/// of the repository into `out_dir` with this test's `iar`, and returns
/// the paths it printed, one per line; its messages go to the test's
/// stderr. `needs` says what it needs when it fails.
pub fn run_build_script(script: &str, out_dir: &Path, needs: &str) -> Vec<PathBuf> {
    let script = repo().join(script);
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(out_dir)
        .env("IAR", env!("CARGO_BIN_EXE_iar"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed ({}): its messages are above; it needs {needs}",
        script.display(),
        out.status
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(PathBuf::from)
        .collect()
}

/// An admin kubeconfig for `server` (its current context the admin's),
/// each cluster reached at the address `reroute` gives for the server's
/// own (a proxy or a hop in between), written to `dir/file`.
pub(crate) fn admin_kubeconfig_via(
    server: &ApiServer,
    dir: &Path,
    file: &str,
    reroute: impl Fn(std::net::SocketAddr) -> std::net::SocketAddr,
) -> PathBuf {
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(server.kubeconfig()).unwrap()).unwrap();
    config["current-context"] = User::Admin.name().into();
    for cluster in config["clusters"].as_array_mut().unwrap() {
        let url = cluster["cluster"]["server"].as_str().unwrap().to_string();
        let upstream = url.trim_start_matches("https://").parse().unwrap();
        cluster["cluster"]["server"] = format!("https://{}", reroute(upstream)).into();
    }
    let path = dir.join(file);
    std::fs::write(&path, config.to_string()).unwrap();
    path
}
