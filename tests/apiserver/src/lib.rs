//! A real Kubernetes API server for tests: etcd (from the `etcd-bin-vendored`
//! crate) and kube-apiserver (built from `k8s.io/kubernetes` by
//! `tools/kubernetes/build.sh`, or named by `IAR_KUBE_APISERVER`) on
//! free loopback ports, with RBAC on and two users ([`User`]).
//!
//! ```no_run
//! # async fn t() {
//! use iar_apiserver::User;
//! let Some(server) = iar_apiserver::shared().await else { return }; // skipped, loudly
//! let client = server.client(User::Admin).await.unwrap();
//! # }
//! ```
//!
//! [`shared`] starts one server per test binary, on first use, and stops it
//! when the binary exits; [`ApiServer::start`] starts one the caller owns,
//! stopped on drop. Either way both programs run in process groups of their
//! own that are killed as a whole, and the kernel kills them too if the test
//! binary dies without cleaning up (`PR_SET_PDEATHSIG`).
//!
//! Nodes: [`kwok`] plays many cheap ones (its pods' execs run local
//! processes); [`node`] runs one real one, `localhost` (containerd, runc and
//! a kubelet, in namespaces of their own; root only).

mod binaries;
pub mod cluster;
mod credentials;
mod error;
pub mod kwok;
pub mod node;
mod poll;
mod process;
pub mod snapshot_controller;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::ApiResource;

pub use binaries::{ENV_KUBE_APISERVER, ENV_KUBELET, build_script};
pub use credentials::User;
pub use error::StartError;

use credentials::{KubeletPki, Tokens};
use process::{ServerProcess, free_port, log_tail};

/// How long each program may take to become ready. Generous: the machines
/// that run these tests are often busy compiling.
const ETCD_READY: Duration = Duration::from_secs(60);
const APISERVER_READY: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(100);
const CRDS_SERVED: Duration = Duration::from_secs(60);

/// What a durable server audits: writes to iar's resources, to
/// VolumeSnapshots (what plugins create for backups, and GC deletes) and
/// pod execs, with who made them (user and user agent) and when.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request
  verbs: [update, patch]
  resources:
  - group: iar.dev
    resources: [backups/status]
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
  resources:
  - group: iar.dev
  - group: snapshot.storage.k8s.io
    resources: [volumesnapshots]
  - group: \"\"
    resources: [pods/exec]
- level: None
";

/// Where kube-apiserver listens and what it admits.
#[derive(Clone)]
pub(crate) struct Listen {
    /// Its one address (`--bind-address` and `--advertise-address`).
    address: Ipv4Addr,
    /// Its port; `None`: a free one.
    port: Option<u16>,
    /// `--service-cluster-ip-range`: the `kubernetes` Service's ClusterIP
    /// is its first address.
    service_cidr: &'static str,
    /// Whether the ServiceAccount admission plugin runs (it mounts each
    /// pod's token; it refuses pods whose service account does not exist,
    /// so only with a controller-manager creating `default` accounts).
    service_accounts: bool,
    /// Whether etcd fsyncs its writes: off for throwaway servers (faster
    /// on a shared disk), on for one whose etcd is killed and started
    /// again ([`ApiServer::restart`]), as a real one's is.
    durable: bool,
}

impl Listen {
    /// Loopback, a free port, no ServiceAccount admission: the tests'
    /// servers where no pod talks back.
    const LOOPBACK: Listen = Listen {
        address: Ipv4Addr::LOCALHOST,
        port: None,
        service_cidr: "10.0.0.0/24",
        service_accounts: false,
        durable: false,
    };
}

/// A running etcd + kube-apiserver pair and the files that describe it.
pub struct ApiServer {
    url: String,
    kubeconfig: PathBuf,
    tokens: Tokens,
    /// The CA kubelets trust and the API server's client certificate.
    kubelet_pki: KubeletPki,
    /// kube-apiserver first: it is stopped before the etcd it writes to.
    processes: Mutex<Vec<ServerProcess>>,
    startup: Duration,
    /// What [`ApiServer::restart`] starts again: the same programs on the
    /// same ports, so every client and proxy keeps its address.
    relaunch: Mutex<Option<Relaunch>>,
    /// etcd's data, certificates, keys, logs, the kubeconfig.
    dir: tempfile::TempDir,
}

/// How the two programs were started, to start them again alike.
#[derive(Clone)]
struct Relaunch {
    kube_apiserver: PathBuf,
    port: u16,
    etcd_ports: (u16, u16),
    listen: Listen,
}

/// A program of the pair, for [`ApiServer::restart`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    Etcd,
    KubeApiserver,
}

impl ApiServer {
    /// Starts a server owned by the caller (stopped when dropped). `Ok(None)`
    /// when there is no kube-apiserver to run: `IAR_KUBE_APISERVER` is unset
    /// and Go is absent.
    pub async fn start() -> Result<Option<ApiServer>, StartError> {
        tokio::task::spawn_blocking(|| {
            let Some(binary) = binaries::kube_apiserver()? else {
                return Ok(None);
            };
            ApiServer::start_with(&binary).map(Some)
        })
        .await
        .expect("the startup thread does not panic")
    }

    /// As [`ApiServer::start`], with an etcd that fsyncs every write, for
    /// a server whose programs are restarted ([`ApiServer::restart`]).
    pub async fn start_durable() -> Result<Option<ApiServer>, StartError> {
        tokio::task::spawn_blocking(|| {
            let Some(binary) = binaries::kube_apiserver()? else {
                return Ok(None);
            };
            let listen = Listen {
                durable: true,
                ..Listen::LOOPBACK
            };
            ApiServer::start_listening(&binary, &listen).map(Some)
        })
        .await
        .expect("the startup thread does not panic")
    }

    /// Starts a server running `kube_apiserver`. Blocks for the whole
    /// startup (seconds); async callers use [`ApiServer::start`].
    pub fn start_with(kube_apiserver: &Path) -> Result<ApiServer, StartError> {
        ApiServer::start_listening(kube_apiserver, &Listen::LOOPBACK)
    }

    pub(crate) fn start_listening(
        kube_apiserver: &Path,
        listen: &Listen,
    ) -> Result<ApiServer, StartError> {
        let begun = Instant::now();
        let mut attempt = 1;
        loop {
            match ApiServer::launch(kube_apiserver, begun, listen) {
                Err(e) if e.is_port_race() && attempt < 3 => attempt += 1,
                result => return result,
            }
        }
    }

    /// The API server's URL, `https://ADDRESS:PORT` (loopback unless it
    /// serves a [`cluster`]).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A kubeconfig with a context per [`User`], named after it; the
    /// current context is `admin`.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The bearer token `user` authenticates with.
    pub fn token(&self, user: User) -> &str {
        self.tokens.get(user)
    }

    /// How long startup took, from spawning etcd to `/readyz` answering ok.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// The certificate the API server serves (self-signed, made by it):
    /// what its clients, pods included, trust.
    pub fn serving_ca(&self) -> PathBuf {
        self.dir().join("certs/apiserver.crt")
    }

    /// The key it signs service-account tokens with.
    pub(crate) fn service_account_key(&self) -> PathBuf {
        credentials::service_account_key_path(self.dir())
    }

    /// The CA kubelets trust for client certificates: the API server's
    /// own (`--kubelet-client-certificate`) is signed by it.
    pub fn kubelet_client_ca(&self) -> &Path {
        &self.kubelet_pki.ca_cert
    }

    /// The process ids of the servers still running (each leads its group).
    pub fn pids(&self) -> Vec<u32> {
        lock(&self.processes)
            .iter()
            .map(ServerProcess::pid)
            .collect()
    }

    /// The directory holding etcd's data, the keys, logs and kubeconfig;
    /// removed by [`ApiServer::shutdown`].
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The audit log of a durable server ([`ApiServer::start_durable`]):
    /// one JSON event per line, at `Metadata` level, for every write to
    /// `iar.dev` resources and every pod exec, once answered.
    pub fn audit_log(&self) -> PathBuf {
        self.dir().join("audit.log")
    }

    /// A client authenticated as `user`, for the caller's runtime (a kube
    /// client's connections belong to the runtime that made it).
    pub async fn client(&self, user: User) -> Result<kube::Client, StartError> {
        client_for(&self.kubeconfig, user).await
    }

    /// Kills both process groups and removes the directory. Idempotent;
    /// also run by `Drop` and, for [`shared`], at process exit.
    pub fn shutdown(&self) {
        for mut process in lock(&self.processes).drain(..) {
            process.kill();
        }
        let _ = std::fs::remove_dir_all(self.dir.path());
    }

    fn launch(
        kube_apiserver: &Path,
        begun: Instant,
        listen: &Listen,
    ) -> Result<ApiServer, StartError> {
        let dir = tempfile::Builder::new()
            .prefix("iar-apiserver-")
            .tempdir()
            .map_err(StartError::io("create the server directory"))?;
        let tokens = Tokens::generate()?;
        let kubelet_pki = KubeletPki::generate(dir.path())?;
        let port = match listen.port {
            Some(port) => port,
            None => free_port()?,
        };
        let mut server = ApiServer {
            url: format!("https://{}:{port}", listen.address),
            kubeconfig: dir.path().join("kubeconfig"),
            tokens,
            kubelet_pki,
            processes: Mutex::new(Vec::new()),
            startup: Duration::ZERO,
            relaunch: Mutex::new(None),
            dir,
        };
        let etcd_ports = (free_port()?, free_port()?);
        let etcd_url = server.start_etcd(etcd_ports, listen.durable)?;
        server.start_kube_apiserver(kube_apiserver, port, &etcd_url, listen)?;
        server.startup = begun.elapsed();
        *lock(&server.relaunch) = Some(Relaunch {
            kube_apiserver: kube_apiserver.to_path_buf(),
            port,
            etcd_ports,
            listen: listen.clone(),
        });
        Ok(server)
    }

    /// Kills `program` (SIGKILL, as a crash or an OOM kill does), waits
    /// `down`, and starts it again on the same ports with the same data,
    /// certificates and tokens; returns once it is ready again. Blocks
    /// for the whole restart (seconds). Clients see their connections
    /// reset, then refused, then answered again: etcd's data outlives
    /// its process, so nothing stored is lost.
    pub fn restart(&self, program: Program, down: Duration) -> Result<(), StartError> {
        let relaunch = lock(&self.relaunch)
            .clone()
            .expect("a started server knows how it was started");
        let name = match program {
            Program::Etcd => "etcd",
            Program::KubeApiserver => "kube-apiserver",
        };
        {
            let mut processes = lock(&self.processes);
            if let Some(at) = processes.iter().position(|p| p.program == name) {
                processes.remove(at).kill();
            }
        }
        std::thread::sleep(down);
        let etcd_url = format!("http://127.0.0.1:{}", relaunch.etcd_ports.0);
        match program {
            Program::Etcd => self
                .start_etcd(relaunch.etcd_ports, relaunch.listen.durable)
                .map(drop),
            Program::KubeApiserver => self.start_kube_apiserver(
                &relaunch.kube_apiserver,
                relaunch.port,
                &etcd_url,
                &relaunch.listen,
            ),
        }
    }

    /// Starts etcd on `(client, peer)` ports and waits for its `/health`;
    /// returns its client URL.
    fn start_etcd(&self, (client, peer): (u16, u16), durable: bool) -> Result<String, StartError> {
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut command = Command::new(binaries::etcd()?);
        command
            .arg("--name=iar-test")
            .arg(format!("--data-dir={}", self.dir().join("etcd").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=iar-test={peer_url}"));
        if !durable {
            // Throwaway data: fsync would only slow every write on a shared disk.
            command.arg("--unsafe-no-fsync");
        }
        let etcd = ServerProcess::spawn("etcd", command, self.dir().join("etcd.log"))?;
        // Last: stopped after the kube-apiserver that writes to it.
        lock(&self.processes).push(etcd);

        poll::until(
            Instant::now() + ETCD_READY,
            POLL,
            || {
                self.check_running()?;
                Ok(match etcd_health(client) {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(String::from("/health is not true")),
                    Err(e) => Err(e.to_string()),
                })
            },
            |last| self.not_ready("etcd", ETCD_READY, last),
        )?;
        Ok(client_url)
    }

    /// Starts kube-apiserver, writes the kubeconfig once its self-signed
    /// certificate exists, and waits for `/readyz`.
    fn start_kube_apiserver(
        &self,
        binary: &Path,
        port: u16,
        etcd_url: &str,
        listen: &Listen,
    ) -> Result<(), StartError> {
        let dir = self.dir();
        let (signing_key, public_key) = credentials::service_account_key(dir)?;
        let token_file = dir.join("tokens.csv");
        self.tokens.write_auth_file(&token_file)?;
        let cert_dir = dir.join("certs");
        let mut command = Command::new(binary);
        command
            .arg(format!("--etcd-servers={etcd_url}"))
            .arg(format!("--bind-address={}", listen.address))
            .arg(format!("--advertise-address={}", listen.address))
            .arg(format!("--secure-port={port}"))
            // It generates a self-signed CA and serving certificate here.
            .arg(format!("--cert-dir={}", cert_dir.display()))
            .arg(format!("--token-auth-file={}", token_file.display()))
            .arg("--authorization-mode=RBAC")
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!(
                "--service-account-key-file={}",
                public_key.display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                signing_key.display()
            ))
            .arg(format!(
                "--service-cluster-ip-range={}",
                listen.service_cidr
            ))
            // A loopback address is not a valid endpoint for the `kubernetes`
            // Service (and no kube-proxy would route one): without this the
            // server logs an error every 10 s.
            .arg("--endpoint-reconciler-type=none")
            // Exec and logs dial a node's first address of these types.
            // The real node ([`node`]) is named `localhost` (a kubelet
            // refuses a loopback --node-ip, and its InternalIP is the
            // machine's, where it does not listen); nodes played by kwok
            // ([`kwok`]) have no Hostname address and a loopback InternalIP.
            .arg("--kubelet-preferred-address-types=Hostname,InternalIP")
            // Who the API server is to a kubelet: the real node's kubelet
            // authenticates it by this certificate (kwok checks none).
            .arg(format!(
                "--kubelet-client-certificate={}",
                self.kubelet_pki.client_cert.display()
            ))
            .arg(format!(
                "--kubelet-client-key={}",
                self.kubelet_pki.client_key.display()
            ));
        if listen.durable {
            // The campaign's servers keep an audit log of the writes to
            // iar's resources: who wrote a Backup's status when, against
            // who held its lease ([`ApiServer::audit_log`]).
            let policy = dir.join("audit-policy.yaml");
            std::fs::write(&policy, AUDIT_POLICY).map_err(|source| StartError::Io {
                what: "writing the audit policy".into(),
                source,
            })?;
            command
                .arg(format!("--audit-policy-file={}", policy.display()))
                .arg(format!("--audit-log-path={}", self.audit_log().display()))
                .arg("--audit-log-format=json")
                .arg("--audit-log-mode=blocking");
        }
        if !listen.service_accounts {
            // No controller-manager runs to create default service
            // accounts, so this plugin would reject every pod.
            command.arg("--disable-admission-plugins=ServiceAccount");
        }
        let apiserver =
            ServerProcess::spawn("kube-apiserver", command, dir.join("kube-apiserver.log"))?;
        // Stopped first: it goes before etcd.
        lock(&self.processes).insert(0, apiserver);

        let deadline = Instant::now() + APISERVER_READY;
        let ca = cert_dir.join("apiserver.crt");
        poll::until(
            deadline,
            POLL,
            || {
                self.check_running()?;
                Ok(if ca.exists() {
                    Ok(())
                } else {
                    Err(format!("no {ca:?}"))
                })
            },
            |last| self.not_ready("kube-apiserver", APISERVER_READY, last),
        )?;
        // The certificate file may still be being written; a client that
        // cannot read it yet is retried below.
        credentials::write_kubeconfig(&self.kubeconfig, &self.url, &ca, &self.tokens)?;
        self.wait_ready(deadline)
    }

    /// Polls `/readyz` as the admin until it answers `ok`. The client runs
    /// on a runtime of its own, on a thread of its own, so this works from
    /// any caller (a runtime cannot be started inside another).
    fn wait_ready(&self, deadline: Instant) -> Result<(), StartError> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(StartError::io("start a runtime"))?;
                    runtime.block_on(self.poll_ready(deadline))
                })
                .join()
                .expect("the readiness thread does not panic")
        })
    }

    async fn poll_ready(&self, deadline: Instant) -> Result<(), StartError> {
        poll::until_async(
            deadline,
            POLL,
            || async {
                self.check_running()?;
                Ok(match readyz(&self.kubeconfig).await {
                    Ok(body) if body.trim() == "ok" => Ok(()),
                    Ok(body) => Err(body),
                    Err(e) => Err(e),
                })
            },
            |last| self.not_ready("kube-apiserver", APISERVER_READY, last),
        )
        .await
    }

    /// `Err` naming the first server that has exited.
    fn check_running(&self) -> Result<(), StartError> {
        lock(&self.processes)
            .iter_mut()
            .try_for_each(ServerProcess::check_running)
    }

    fn not_ready(&self, program: &'static str, waited: Duration, last: String) -> StartError {
        let log = self.dir().join(format!("{program}.log"));
        StartError::NotReady {
            program,
            waited,
            last,
            tail: log_tail(&log),
            log,
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn client_for(kubeconfig: &Path, user: User) -> Result<kube::Client, StartError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    // Both rustls providers are compiled in (see Cargo.toml); an `Err` means
    // one is installed already, which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let context = user.name();
    let boxed =
        |e: Box<dyn std::error::Error + Send + Sync>| StartError::Client { context, source: e };
    let kubeconfig = Kubeconfig::read_from(kubeconfig).map_err(|e| boxed(e.into()))?;
    let options = KubeConfigOptions {
        context: Some(context.to_string()),
        ..KubeConfigOptions::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| boxed(e.into()))?;
    kube::Client::try_from(config).map_err(|e| boxed(e.into()))
}

/// The body of `/readyz`, or why there was none.
async fn readyz(kubeconfig: &Path) -> Result<String, String> {
    let client = client_for(kubeconfig, User::Admin)
        .await
        .map_err(|e| e.to_string())?;
    let request = http::Request::get("/readyz")
        .body(Vec::new())
        .expect("a static request is valid");
    client
        .request_text(request)
        .await
        .map_err(|e| e.to_string())
}

/// One plain-HTTP `GET /health` against etcd's client port.
fn etcd_health(port: u16) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response.contains(r#""health":"true""#))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Killing processes is still right after a panic elsewhere.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The server of this test binary: started on first use (building
/// kube-apiserver first if needed), stopped when the binary exits. `None`
/// when tests must skip because `IAR_KUBE_APISERVER` is unset and Go is
/// absent; that is written to stderr past the test harness's capture, so a
/// skip is never silent, and under `CI=true` it is a failure instead
/// ([`skip_or_fail`]). Panics if the server cannot start.
pub async fn shared() -> Option<&'static ApiServer> {
    static SHARED: OnceLock<Result<Option<ApiServer>, String>> = OnceLock::new();

    extern "C" fn stop_shared() {
        if let Some(Ok(Some(server))) = SHARED.get() {
            server.shutdown();
        }
    }

    let shared = tokio::task::spawn_blocking(|| {
        SHARED.get_or_init(|| {
            let server = binaries::kube_apiserver()
                .and_then(|binary| binary.map(|b| ApiServer::start_with(&b)).transpose())
                .map_err(|e| e.to_string())?;
            if let Some(server) = &server {
                // SAFETY: registers a function with no arguments that
                // touches only the static above. Statics are never dropped,
                // so this is what stops the shared server at exit.
                unsafe { libc::atexit(stop_shared) };
                loud(&format!(
                    "iar-apiserver: started etcd + kube-apiserver at {} in {:.1?}",
                    server.url(),
                    server.startup_time()
                ));
            }
            Ok(server)
        })
    })
    .await
    .expect("the startup thread does not panic");
    match shared {
        Ok(Some(server)) => Some(server),
        Ok(None) => {
            skip_or_fail(&format!(
                "a real-API-server test: {ENV_KUBE_APISERVER} is unset and `go` is not on \
                 PATH, so there is no kube-apiserver to run. Install Go or set \
                 {ENV_KUBE_APISERVER} to a kube-apiserver binary."
            ));
            None
        }
        Err(e) => panic!("the shared API server did not start: {e}"),
    }
}

/// Whether this is a CI run (`CI=true`, as GitHub Actions, GitLab and
/// `.ci/run` set it): there, a test whose tool is missing fails rather
/// than skips, so a green run means every test ran.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// What a test does when a tool it needs is missing: under `CI=true` it
/// panics with `what`; elsewhere it says loudly, past the harness's
/// capture, that it SKIPPED `what`, and the caller returns.
pub fn skip_or_fail(what: &str) {
    if in_ci() {
        panic!("CI=true, so a missing tool fails the test instead of skipping it: {what}");
    }
    loud(&format!("\n!!! SKIPPED {what} !!!\n"));
}

/// Writes to the real stderr: `eprintln!` is captured by the test harness
/// and shown only for failing tests.
fn loud(message: &str) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// Creates a namespace (the tests' first step against a server); panics
/// naming it if the server refuses.
pub async fn create_namespace(client: &kube::Client, name: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, ObjectMeta, PostParams};
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
}

/// Creates the CustomResourceDefinitions in the YAML file `path` (one or
/// more documents; one that exists already is fine) and waits until each
/// is Established and lists in every version it serves.
pub(crate) async fn install_crds(client: &kube::Client, path: &Path) -> Result<(), StartError> {
    use kube::api::{Api, DynamicObject, PostParams};

    let text = std::fs::read_to_string(path).map_err(StartError::io(format!("read {path:?}")))?;
    let parse_error = |e: String| StartError::Io {
        what: format!("parse {path:?}"),
        source: std::io::Error::other(e),
    };
    // Created as written: the typed struct would drop any field it lacks.
    let raw: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<CustomResourceDefinition>(&()),
    );
    // All parsed before the first await (null documents are left out).
    let documents = serde_saphyr::from_multiple::<serde_json::Value>(&text)
        .map_err(|e| parse_error(e.to_string()))?;
    let mut names = Vec::new();
    for value in documents {
        let crd: DynamicObject =
            serde_json::from_value(value).map_err(|e| parse_error(e.to_string()))?;
        let name = crd
            .metadata
            .name
            .clone()
            .ok_or_else(|| parse_error(String::from("a CRD without a name")))?;
        match raw.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                return Err(StartError::Client {
                    context: "admin",
                    source: e.into(),
                });
            }
        }
        names.push(name);
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = Instant::now() + CRDS_SERVED;
    for name in names {
        poll::until_async(
            deadline,
            POLL,
            || async { Ok(crd_served(client, &crds, &name).await) },
            |last| StartError::Client {
                context: "admin",
                source: format!("CRD {name} not served after {CRDS_SERVED:?}: {last}").into(),
            },
        )
        .await?;
    }
    Ok(())
}

/// `Ok` once CRD `name` is Established and a list of each version it
/// serves succeeds; else why not.
async fn crd_served(
    client: &kube::Client,
    crds: &kube::api::Api<CustomResourceDefinition>,
    name: &str,
) -> Result<(), String> {
    use kube::api::{Api, DynamicObject};

    let crd = crds.get(name).await.map_err(|e| e.to_string())?;
    let established = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Established" && c.status == "True");
    if !established {
        return Err(String::from("not Established"));
    }
    let spec = &crd.spec;
    for version in spec.versions.iter().filter(|v| v.served) {
        let resource = ApiResource {
            group: spec.group.clone(),
            version: version.name.clone(),
            api_version: format!("{}/{}", spec.group, version.name),
            kind: spec.names.kind.clone(),
            plural: spec.names.plural.clone(),
        };
        Api::<DynamicObject>::all_with(client.clone(), &resource)
            .list(&Default::default())
            .await
            .map_err(|e| format!("list {}/{}: {e}", resource.api_version, resource.plural))?;
    }
    Ok(())
}
