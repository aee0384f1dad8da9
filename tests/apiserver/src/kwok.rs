//! kwok (`sigs.k8s.io/kwok`, built by `tools/kubernetes/build.sh kwok`) as the
//! kubelet of the test API server: it marks the nodes annotated
//! [`NODE_ANNOTATION`] Ready, moves pods bound to them to Running, and
//! serves the kubelet API on a loopback port that the API server proxies
//! `pods/exec` to. An exec runs a local process, as the pod's kwok `Exec`
//! resource ([`Kwok::local_exec`]) says: its working directory and
//! environment. So a test's exec goes through the real client, the real
//! API server and the real kubelet protocol; only the container is a
//! local process.
//!
//! What kwok does not do: mount volumes. A test that needs a pod's volume
//! files lays them out itself, and says so.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::error::StartError;
use crate::poll;
use crate::process::{ServerProcess, free_port};
use crate::{ApiServer, binaries, lock, loud, skip_or_fail};

/// The annotation of the nodes kwok manages.
pub const NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

const READY: Duration = Duration::from_secs(60);
/// How often a wait looks again.
const EVERY: Duration = Duration::from_millis(100);

/// A running kwok.
pub struct Kwok {
    process: Mutex<Option<ServerProcess>>,
    port: u16,
    log: PathBuf,
}

impl Kwok {
    /// Starts kwok against `server` (admin credentials) with its Exec CRD
    /// installed. `Ok(None)` when there is no Go to build it with.
    pub async fn start(server: &ApiServer) -> Result<Option<Kwok>, StartError> {
        let kubeconfig = server.kubeconfig().to_path_buf();
        let dir = server.dir().to_path_buf();
        let Some(binary) = tokio::task::spawn_blocking(binaries::kwok)
            .await
            .expect("the build thread does not panic")?
        else {
            return Ok(None);
        };
        let files = binary.parent().expect("the binary is in a directory");
        let client = server.client(crate::User::Admin).await?;
        crate::install_crds(&client, &files.join("kwok-execs.crd.yaml")).await?;
        let kwok = Kwok::spawn(&binary, &files.join("kwok-stages.yaml"), &kubeconfig, &dir)?;
        kwok.wait_serving().await?;
        Ok(Some(kwok))
    }

    fn spawn(
        binary: &Path,
        stages: &Path,
        kubeconfig: &Path,
        dir: &Path,
    ) -> Result<Kwok, StartError> {
        let port = free_port()?;
        let log = dir.join("kwok.log");
        let mut command = std::process::Command::new(binary);
        command
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!(
                "--manage-nodes-with-annotation-selector={NODE_ANNOTATION}=fake"
            ))
            // Written into each node's status: the API server dials
            // InternalIP:port for the node's kubelet. No --node-name: it
            // would add a Hostname address, which the server prefers.
            .arg("--node-ip=127.0.0.1")
            .arg(format!("--node-port={port}"))
            .arg(format!("--server-address=127.0.0.1:{port}"))
            .arg("--enable-crds=Exec")
            .arg(format!("--config={}", stages.display()))
            // Its working directory is an exec's default one: keep it ours.
            .current_dir(dir);
        let process = ServerProcess::spawn("kwok", command, log.clone())?;
        Ok(Kwok {
            process: Mutex::new(Some(process)),
            port,
            log,
        })
    }

    /// Waits until kwok's server accepts connections.
    async fn wait_serving(&self) -> Result<(), StartError> {
        poll::until_async(
            Instant::now() + READY,
            EVERY,
            || async {
                if let Some(p) = lock(&self.process).as_mut() {
                    p.check_running()?;
                }
                let connected = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await;
                Ok(connected.map(drop).map_err(|e| e.to_string()))
            },
            |last| StartError::not_ready("kwok", READY, last, &self.log),
        )
        .await
    }

    /// The port of its kubelet API.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its log (stdout and stderr), for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Creates node `name` for kwok to manage and waits until it is Ready.
    pub async fn add_node(&self, client: &kube::Client, name: &str) -> Node {
        let nodes: Api<Node> = Api::all(client.clone());
        let node: Node = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "annotations": {NODE_ANNOTATION: "fake"},
                "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
            },
        }))
        .expect("a valid Node");
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("create node {name}: {e}"),
        }
        let what = format!("node {name} Ready");
        let check = || async {
            let node = nodes.get(name).await.expect("the node exists");
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if ready {
                Ok(node)
            } else {
                Err(format!("{:?}", node.status))
            }
        };
        let log = || format!("kwok's log:\n{}", self.log());
        poll::wait_for(&what, READY, EVERY, check, log).await
    }

    /// Says how an exec in pod `namespace/pod` runs: as a local process in
    /// `work_dir`, with `env` added to kwok's environment (a kwok `Exec`).
    pub async fn local_exec(
        &self,
        client: &kube::Client,
        namespace: &str,
        pod: &str,
        work_dir: &Path,
        env: &[(&str, &str)],
    ) {
        let envs: Vec<Value> = env
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect();
        let exec: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Exec",
            "metadata": {"name": pod, "namespace": namespace},
            "spec": {"execs": [{"local": {"workDir": work_dir, "envs": envs}}]},
        }))
        .expect("a valid Exec");
        let gvk = GroupVersionKind::gvk("kwok.x-k8s.io", "v1alpha1", "Exec");
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk(&gvk));
        api.create(&PostParams::default(), &exec)
            .await
            .unwrap_or_else(|e| panic!("create kwok Exec {namespace}/{pod}: {e}"));
    }

    /// Waits until pod `namespace/name` is Running (kwok's pod-ready stage).
    pub async fn wait_running(&self, client: &kube::Client, namespace: &str, name: &str) -> Pod {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let what = format!("pod {namespace}/{name} Running");
        let check = || async {
            let pod = pods.get(name).await.expect("the pod exists");
            if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                Ok(pod)
            } else {
                Err(format!("{:?}", pod.status))
            }
        };
        let log = || format!("kwok's log:\n{}", self.log());
        poll::wait_for(&what, READY, EVERY, check, log).await
    }

    /// Kills kwok. Idempotent.
    pub fn shutdown(&self) {
        if let Some(mut p) = lock(&self.process).take() {
            p.kill();
        }
    }
}

impl Drop for Kwok {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// kwok for the shared API server ([`crate::shared`]), started on first use
/// and stopped at exit. `None` when tests must skip (no Go; loud, and a
/// failure under `CI=true`). Panics if it cannot start.
pub async fn shared() -> Option<&'static Kwok> {
    static SHARED: OnceLock<Kwok> = OnceLock::new();
    static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    extern "C" fn stop_shared() {
        if let Some(kwok) = SHARED.get() {
            kwok.shutdown();
        }
    }

    let server = crate::shared().await?;
    let _starting = STARTING.lock().await;
    if let Some(kwok) = SHARED.get() {
        return Some(kwok);
    }
    match Kwok::start(server).await {
        Ok(Some(kwok)) => {
            // SAFETY: registers a function with no arguments that touches
            // only the static above; statics are never dropped.
            unsafe { libc::atexit(stop_shared) };
            loud(&format!(
                "iar-apiserver: kwok serves the kubelet API on 127.0.0.1:{}",
                kwok.port()
            ));
            Some(SHARED.get_or_init(|| kwok))
        }
        Ok(None) => {
            skip_or_fail("a kwok test: `go` is not on PATH, so kwok cannot be built");
            None
        }
        Err(e) => panic!("kwok did not start: {e}"),
    }
}
