//! One real node for the test API server: Debian's containerd and runc and
//! a kubelet built from `k8s.io/kubernetes` (the module and Go build of
//! kube-apiserver: `tools/kubernetes/build.sh kubelet`), running real
//! pods from two local images (`tools/node/build.sh`: kubelet's pause and a
//! busybox, both `FROM scratch`, since no registry is reachable). Where
//! kwok plays a kubelet ([`crate::kwok`]), this is one: an exec reaches a
//! real container over the kubelet's streaming path, with its real exit
//! code and stdin; a volume is a directory the kubelet made under
//! [`Node::kubelet_root`], written by the container.
//!
//! ```no_run
//! # async fn t() {
//! let Some(node) = iar_apiserver::node::shared().await else { return }; // skipped, loudly
//! # }
//! ```
//!
//! Nothing of it stays on the host:
//!
//! - containerd and the kubelet run in one mount namespace and one PID
//!   namespace of their own (`unshare --mount --propagation private --pid`,
//!   then `nsenter` into both). Their mounts (the containers' root
//!   filesystems, the kubelet's bind mounts, network-namespace files) never
//!   reach the host's mount table, and the namespace's first process (the
//!   kubelet's pause, which reaps orphans) takes every process of the node
//!   with it when it dies, containers included. The kernel kills it when
//!   the test binary dies (`PR_SET_PDEATHSIG` on `unshare`, whose
//!   `--kill-child` passes it on).
//! - In that namespace a tmpfs covers `/run` and `/var/lib` (containerd's
//!   shim sockets and runc's state, `/var/run/netns`, libcni's cache, the
//!   kubelet's hard-wired `/var/lib/kubelet/device-plugins`), `/var/log` is
//!   a directory of the node's (pod logs), and copies are bind-mounted over
//!   the sysctls the kubelet sets (`vm/overcommit_memory`, `vm/panic_on_oom`,
//!   `kernel/panic`, `kernel/panic_on_oops`, `kernel/keys/root_max*`), so
//!   the host's keep their values.
//! - All state (containerd's root and state, the kubelet's root, CNI
//!   configuration and addresses, logs) is in one temporary directory.
//!
//! What the host does see, and [`Node::shutdown`] removes: the CNI bridge
//! [`BRIDGE`] (no address, no route, no masquerading: pods need no traffic
//! beyond the node) with the pods' veths, and runc's cgroups (`k8s.io/<id>`
//! in each hierarchy). One node runs per machine at a time (a lock in the
//! cache directory); a node started after one whose test binary was killed
//! first removes what that one left (its bridge, its containers' cgroups,
//! its directory).
//!
//! The settings that make a v1.36 kubelet run on these machines: cgroup v1
//! accepted (`failCgroupV1: false`), the `cgroupfs` driver without QoS
//! cgroups or node-allocatable enforcement, swap allowed, and containerd's
//! `restrict_oom_score_adj` (they refuse OOM score changes: without it
//! every sandbox fails in `runc create`). No scheduler runs: pods name
//! `nodeName: localhost` ([`NAME`]).

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node as NodeObject, Pod, PodStatus};
use kube::api::Api;
use serde_json::{Value, json};

use crate::binaries::{self, find_in_path};
use crate::error::StartError;
use crate::poll;
use crate::process::{ServerProcess, free_port, log_tail};
use crate::{ApiServer, User, lock, loud, skip_or_fail};

mod host;
mod layout;
pub(crate) use host::MachineLock;
pub use host::firewall_rules;
use host::*;
use layout::{Layout, Settings};

/// The node's name. A kubelet refuses a loopback `--node-ip`, and its
/// InternalIP (the machine's address) is not where it listens; the API
/// server dials the Hostname address first, which this makes `localhost`.
pub const NAME: &str = "localhost";

/// The workload image: Debian's static busybox with a link per applet in
/// `/bin`, so a container can `sh -c`. Pods must say
/// `imagePullPolicy: Never` (there is no registry to pull from).
pub const BUSYBOX_IMAGE: &str = "iar.test/busybox:1";

/// The sandbox image, kubelet's own pause.
pub const PAUSE_IMAGE: &str = "iar.test/pause:3.10";

/// The kubelet's root inside the node's namespace, as on any node (a
/// DaemonSet's hostPath names it): a bind mount of
/// [`Node::kubelet_root`], shared within the namespace so that a pod's
/// `HostToContainer` mount of it sees the kubelet's later mounts.
pub const KUBELET_ROOT: &str = "/var/lib/kubelet";

/// The CNI bridge on the host.
pub const BRIDGE: &str = "iarbr0";

/// Pod addresses (host-local IPAM); nothing routes to them.
const SUBNET: &str = "10.244.213.0/24";

/// The first pod address when the bridge has one (the gateway, `.1`).
const RANGE_START: &str = "10.244.213.10";

/// The sysctls the kubelet writes at startup (its `setupKernelTunables`):
/// copies are mounted over them inside the node's namespace.
const SYSCTLS: [&str; 6] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// What the node runs, by a file its Debian package installs.
const PACKAGED: [&str; 9] = [
    "/usr/bin/containerd",
    "/usr/bin/containerd-shim-runc-v2",
    "/usr/bin/ctr",
    "/usr/sbin/runc",
    "/usr/lib/cni/bridge",
    "/usr/lib/cni/host-local",
    "/usr/lib/cni/loopback",
    "/bin/busybox",
    // The kubelet's chains; a fresh machine may lack it until the build
    // installs it (it was once required up front, and the real-node
    // tests failed on a fresh machine before anything installed it).
    "/usr/sbin/iptables",
];

const NAMESPACE_READY: Duration = Duration::from_secs(20);
const CONTAINERD_READY: Duration = Duration::from_secs(60);
const NODE_READY: Duration = Duration::from_secs(120);
const POD_RUNNING: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(100);

/// How the node's directory in the temporary directory is named.
const DIR_PREFIX: &str = "iar-node-";

/// A running node.
pub struct Node {
    dir: PathBuf,
    kubelet_root: PathBuf,
    socket: PathBuf,
    running: Mutex<Option<Running>>,
    /// Whether `k8s.io` cgroups existed before: if not, shutdown removes
    /// the parents too.
    k8s_cgroups_existed: bool,
    /// The kubelet's iptables chains that existed before it started
    /// (another kubelet's): shutdown removes only the others.
    kube_chains_before: Vec<KubeChain>,
    /// From the start to the node's Ready condition.
    startup: Duration,
    /// From spawning the kubelet to the node's Ready condition.
    ready: Duration,
    /// The machine's node lock, released when dropped.
    _lock: MachineLock,
    _temp: tempfile::TempDir,
}

/// The processes, in the order they stop.
struct Running {
    kubelet: Option<ServerProcess>,
    containerd: Option<ServerProcess>,
    /// `unshare`, whose child `init` is the namespaces' first process.
    namespace: ServerProcess,
    init: libc::pid_t,
}

/// What a node runs beyond the tests' two images, and how its pods reach
/// the host.
#[derive(Default)]
pub(crate) struct Options {
    /// docker-archive tars imported into the node's containerd beside
    /// pause and busybox.
    pub(crate) images: Vec<PathBuf>,
    /// Routes for the pods: to the bridge's address
    /// ([`crate::cluster::GATEWAY`], which the caller has put on it) and,
    /// through it, to these networks (the Service network). Without any,
    /// pods reach nothing beyond the node.
    pub(crate) routes: Vec<&'static str>,
}

impl Node {
    /// Starts a node registered with `server` (as its admin) and waits
    /// until it is Ready. [`StartError::Unavailable`] when this machine
    /// cannot run one (not root, a kernel feature or a tool missing): a
    /// reason to skip.
    pub async fn start(server: &ApiServer) -> Result<Node, StartError> {
        if let Some(missing) = unavailable() {
            return Err(StartError::Unavailable(missing));
        }
        let begun = Instant::now();
        let lock = MachineLock::take().await?;
        Node::start_locked(server, lock, Options::default(), begun).await
    }

    /// [`Node::start`] with the machine's lock already held (and what a
    /// crashed node left removed): a [`crate::cluster`] takes it before
    /// it makes the bridge its API server listens on.
    pub(crate) async fn start_locked(
        server: &ApiServer,
        lock: MachineLock,
        options: Options,
        begun: Instant,
    ) -> Result<Node, StartError> {
        let temp = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .map_err(StartError::io("create the node directory"))?;
        let dir = temp.path().to_path_buf();
        // Covered inside the node's namespace: the node's own files must lie
        // elsewhere.
        for covered in ["/run", "/var/run", "/var/lib", "/var/log"] {
            if dir.starts_with(covered) {
                return Err(StartError::Unavailable(format!(
                    "the temporary directory {dir:?} is under {covered}, which the node covers \
                     with its own; set TMPDIR elsewhere"
                )));
            }
        }
        let pki = dir.join("pki");
        fs::create_dir_all(&pki).map_err(StartError::io(format!("create {pki:?}")))?;
        let serving = server.kubelet_pki.issue_serving(&pki)?;
        let settings = Settings {
            kubeconfig: server.kubeconfig().to_path_buf(),
            client_ca: server.kubelet_client_ca().to_path_buf(),
            serving,
            routes: options.routes,
        };
        let images = options.images;
        let (mut node, spawned) =
            tokio::task::spawn_blocking(move || Node::launch(lock, temp, settings, &images))
                .await
                .expect("the startup thread does not panic")?;
        let client = server.client(User::Admin).await?;
        node.wait_ready(&client).await?;
        node.ready = spawned.elapsed();
        node.startup = begun.elapsed();
        Ok(node)
    }

    /// The node's name, [`NAME`].
    pub fn name(&self) -> &'static str {
        NAME
    }

    /// The kubelet's root as the host sees it ([`KUBELET_ROOT`] in the
    /// node's namespace): pod volumes are at
    /// `pods/<uid>/volumes/<plugin>/<name>` in it, as on any node. What
    /// the kubelet mounts there (a local volume, a projected token) is
    /// seen only inside the node's namespace.
    pub fn kubelet_root(&self) -> &Path {
        &self.kubelet_root
    }

    /// The node's directory: every file of containerd, the kubelet and CNI.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// From the start to the Ready condition (images loaded, the kubelet
    /// registered).
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// From spawning the kubelet to the Ready condition.
    pub fn ready_time(&self) -> Duration {
        self.ready
    }

    /// The last lines of the kubelet's and containerd's logs, for a
    /// failing test's message.
    pub fn logs(&self) -> String {
        format!(
            "last lines of the kubelet's log:\n{}\nlast lines of containerd's log:\n{}",
            log_tail(&self.dir.join("kubelet.log")),
            log_tail(&self.dir.join("containerd.log"))
        )
    }

    /// A pod for this node (`nodeName` set: no scheduler runs) whose one
    /// container `app` runs `sh -c script` in [`BUSYBOX_IMAGE`]. A test
    /// adds labels, annotations and volumes to it. It stops within a
    /// second of being deleted.
    pub fn busybox_pod(&self, name: &str, script: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeName": NAME,
                // No cluster DNS runs.
                "dnsPolicy": "Default",
                "enableServiceLinks": false,
                "automountServiceAccountToken": false,
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", script],
                }],
            },
        })
    }

    /// Waits until pod `namespace/name` is Running with every container
    /// started; panics at once, with the kubelet's log, if it cannot get
    /// there (its image missing, its container failing).
    pub async fn wait_running(&self, client: &kube::Client, namespace: &str, name: &str) -> Pod {
        const FATAL: [&str; 7] = [
            "ErrImageNeverPull",
            "ErrImagePull",
            "InvalidImageName",
            "CreateContainerConfigError",
            "CreateContainerError",
            "RunContainerError",
            "CrashLoopBackOff",
        ];
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let not_running = |why: &str, status: PodStatus| format!("{why}: {status:?}");
        let running = poll::until_async(
            Instant::now() + POD_RUNNING,
            POLL,
            || async {
                let pod = pods
                    .get(name)
                    .await
                    .unwrap_or_else(|e| panic!("get pod {namespace}/{name}: {e}"));
                let status = pod.status.clone().unwrap_or_default();
                let containers = status.container_statuses.clone().unwrap_or_default();
                let started = !containers.is_empty()
                    && containers
                        .iter()
                        .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
                if status.phase.as_deref() == Some("Running") && started {
                    return Ok(Ok(pod));
                }
                let stuck = containers.iter().find_map(|c| {
                    let waiting = c.state.as_ref()?.waiting.as_ref()?;
                    let reason = waiting.reason.as_deref()?;
                    FATAL
                        .contains(&reason)
                        .then(|| format!("{}: {waiting:?}", c.name))
                });
                let ended = matches!(status.phase.as_deref(), Some("Failed" | "Succeeded"));
                // Stuck or ended: waiting cannot mend it.
                match stuck {
                    Some(stuck) => Err(not_running(&stuck, status)),
                    None if ended => Err(not_running("it ended", status)),
                    None => Ok(Err(not_running("no container stuck", status))),
                }
            },
            |last| format!("waited {POD_RUNNING:?}; {last}"),
        )
        .await;
        running.unwrap_or_else(|e| {
            panic!(
                "pod {namespace}/{name} is not Running: {e}\n{}",
                self.logs()
            )
        })
    }

    /// Stops every process of the node and removes what it made: the
    /// bridge, the veths, runc's cgroups, its directory. Idempotent; also
    /// run by `Drop` and, for [`shared`], at process exit.
    pub fn shutdown(&self) {
        let Some(mut running) = lock(&self.running).take() else {
            return;
        };
        // The kubelet first: it would restart what is stopped below.
        if let Some(kubelet) = running.kubelet.as_mut() {
            kubelet.kill();
        }
        let containers = self.containers();
        let veths = bridge_ports();
        if let Some(containerd) = running.containerd.as_mut() {
            containerd.kill();
        }
        // The namespaces' first process: with it the kernel kills every
        // process in the PID namespace (shims, pause, the containers, in
        // namespaces of their own below it) and `unshare`, its parent,
        // reaps it and exits once all of them are gone.
        // SAFETY: kill(2) on a pid; it touches no memory of ours.
        unsafe { libc::kill(running.init, libc::SIGKILL) };
        let _ = running.namespace.child.wait();
        running.namespace.kill();
        remove_cgroups(&containers, self.k8s_cgroups_existed);
        remove_bridge(&veths);
        remove_kube_chains(&self.kube_chains_before);
        let mounted = fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(self.dir.to_str().unwrap_or("/nonexistent")))
            .map(str::to_string)
            .collect::<Vec<_>>();
        if !mounted.is_empty() {
            loud(&format!(
                "iar-apiserver: the node left mounts in the host's table: {mounted:#?}"
            ));
        }
        let _ = fs::remove_dir_all(&self.dir);
    }

    fn launch(
        lock: MachineLock,
        temp: tempfile::TempDir,
        settings: Settings,
        extra_images: &[PathBuf],
    ) -> Result<(Node, Instant), StartError> {
        let kubelet = binaries::kubelet()?.ok_or_else(|| {
            StartError::Unavailable(format!(
                "{} is unset and `go` is not on PATH, so there is no kubelet",
                binaries::ENV_KUBELET
            ))
        })?;
        let pause = binaries::node_images()?;
        let images = pause.parent().expect("the pause binary is in a directory");
        let dir = temp.path().to_path_buf();
        let layout = Layout::new(&dir);
        layout.create(&settings)?;

        let k8s_cgroups_existed = cgroup_hierarchies()
            .iter()
            .any(|h| h.join("k8s.io").exists());
        let kube_chains_before = kube_chains();
        write(
            &dir.join(CHAINS_BEFORE),
            &format_chains(&kube_chains_before),
        )?;
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--propagation", "private"])
            .args(["--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL"])
            .arg(&pause);
        let mut namespace =
            ServerProcess::spawn("node namespace", command, dir.join("namespace.log"))?;
        let init = match wait_init(&mut namespace, &pause) {
            Ok(init) => init,
            Err(e) => {
                namespace.kill();
                return Err(e);
            }
        };
        // From here on `node` owns the processes: an error drops it, and its
        // shutdown stops and removes everything started so far.
        let node = Node {
            kubelet_root: layout.kubelet_root.clone(),
            socket: layout.socket.clone(),
            dir: dir.clone(),
            running: Mutex::new(Some(Running {
                kubelet: None,
                containerd: None,
                namespace,
                init,
            })),
            k8s_cgroups_existed,
            kube_chains_before,
            startup: Duration::ZERO,
            ready: Duration::ZERO,
            _lock: lock,
            _temp: temp,
        };
        node.setup_namespace(init, &layout)?;
        let mut command = nsenter(init, true);
        command
            .arg("containerd")
            .arg("--config")
            .arg(&layout.containerd_config);
        let containerd = ServerProcess::spawn("containerd", command, dir.join("containerd.log"))?;
        node.set(|r| r.containerd = Some(containerd));
        node.wait_containerd()?;
        let tars = ["pause.tar", "busybox.tar"].map(|image| images.join(image));
        for tar in tars.iter().chain(extra_images) {
            run(nsenter(init, false)
                .arg("ctr")
                .arg("--address")
                .arg(&node.socket)
                .args(["-n", "k8s.io", "images", "import"])
                .arg(tar))?;
        }
        fs::copy(&settings.kubeconfig, &layout.kubeconfig)
            .map_err(StartError::io("copy the kubeconfig"))?;
        layout.write_kubelet_config(&settings, free_port()?)?;
        let mut command = nsenter(init, true);
        command
            .arg(&kubelet)
            .arg(format!("--config={}", layout.kubelet_config.display()))
            .arg(format!("--kubeconfig={}", layout.kubeconfig.display()))
            .arg(format!("--root-dir={KUBELET_ROOT}"))
            .arg(format!("--hostname-override={NAME}"))
            .arg("--v=2");
        let spawned = Instant::now();
        let kubelet = ServerProcess::spawn("kubelet", command, dir.join("kubelet.log"))?;
        node.set(|r| r.kubelet = Some(kubelet));
        Ok((node, spawned))
    }

    /// Changes the running processes.
    fn set(&self, change: impl FnOnce(&mut Running)) {
        if let Some(running) = lock(&self.running).as_mut() {
            change(running);
        }
    }

    /// The mounts of the node's namespace, made before anything runs in it.
    fn setup_namespace(&self, init: libc::pid_t, layout: &Layout) -> Result<(), StartError> {
        // -n: no /run/mount/utab on the host (util-linux writes one there
        // for some mounts, before /run is covered).
        let mut script = String::from(
            "mount -n -t tmpfs -o mode=0755 iar-node-run /run\n\
             mount -n -t tmpfs -o mode=0755 iar-node-var-lib /var/lib\n",
        );
        script.push_str(&format!(
            "mount -n --bind {} /var/log\n\
             mkdir {KUBELET_ROOT}\n\
             mount -n --bind {} {KUBELET_ROOT}\n\
             mount -n --make-rshared {KUBELET_ROOT}\n",
            quoted(&layout.var_log),
            quoted(&layout.kubelet_root),
        ));
        for sysctl in SYSCTLS {
            let path = Path::new("/proc/sys").join(sysctl);
            let Ok(value) = fs::read(&path) else {
                continue;
            };
            let copy = layout.sysctls.join(sysctl.replace('/', "."));
            fs::write(&copy, value).map_err(StartError::io(format!("write {copy:?}")))?;
            script.push_str(&format!(
                "mount -n --bind {} {}\n",
                quoted(&copy),
                quoted(&path)
            ));
        }
        run(nsenter(init, false).args(["sh", "-ec", &script]))
    }

    /// Waits until containerd answers on its socket.
    fn wait_containerd(&self) -> Result<(), StartError> {
        let look = || {
            self.check_running()?;
            let version = Command::new("ctr")
                .arg("--address")
                .arg(&self.socket)
                .arg("version")
                .output();
            Ok(match version {
                Ok(out) if out.status.success() => Ok(()),
                Ok(out) => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
                Err(e) => Err(e.to_string()),
            })
        };
        let log = self.dir.join("containerd.log");
        let timed_out = |last| StartError::not_ready("containerd", CONTAINERD_READY, last, &log);
        poll::until(Instant::now() + CONTAINERD_READY, POLL, look, timed_out)
    }

    /// Waits until the Node object says Ready.
    async fn wait_ready(&self, client: &kube::Client) -> Result<(), StartError> {
        let nodes: Api<NodeObject> = Api::all(client.clone());
        let look = || async {
            self.check_running()?;
            Ok(match nodes.get_opt(NAME).await {
                Ok(Some(node)) => {
                    let conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
                    match conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                    {
                        true => Ok(()),
                        false => Err(format!("{conditions:?}")),
                    }
                }
                Ok(None) => Err(String::from("not registered")),
                Err(e) => Err(e.to_string()),
            })
        };
        let log = self.dir.join("kubelet.log");
        let timed_out = |last| StartError::not_ready("kubelet", NODE_READY, last, &log);
        poll::until_async(Instant::now() + NODE_READY, POLL, look, timed_out).await
    }

    /// `Err` naming the first of the node's processes that has exited.
    fn check_running(&self) -> Result<(), StartError> {
        let mut running = lock(&self.running);
        let Some(running) = running.as_mut() else {
            return Ok(());
        };
        running.namespace.check_running()?;
        for process in [running.containerd.as_mut(), running.kubelet.as_mut()]
            .into_iter()
            .flatten()
        {
            process.check_running()?;
        }
        Ok(())
    }

    /// The ids of containerd's CRI containers (pods' sandboxes and
    /// containers): their cgroups are `k8s.io/<id>`.
    fn containers(&self) -> Vec<String> {
        let output = Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(["--timeout", "10s", "-n", "k8s.io", "containers", "ls", "-q"])
            .output();
        match output {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Deletes the bridge and whatever veths are still on it, now.
pub(crate) fn remove_bridge_now() {
    remove_bridge(&bridge_ports());
}

/// Why this machine cannot run the node, if it cannot.
pub(crate) fn unavailable() -> Option<String> {
    if !cfg!(target_os = "linux") {
        return Some(String::from("it needs Linux"));
    }
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some(String::from(
            "it needs root (containerd, runc and the kubelet create namespaces, mounts and \
             cgroups); run the tests as root",
        ));
    }
    for tool in [
        "unshare",
        "nsenter",
        "mount",
        "ip",
        "gcc",
        "tar",
        "sha256sum",
    ] {
        if find_in_path(tool).is_none() {
            return Some(format!("`{tool}` is not on PATH"));
        }
    }
    let filesystems = fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems
        .lines()
        .any(|l| l.split_whitespace().last() == Some("overlay"))
    {
        return Some(String::from(
            "the kernel has no overlay filesystem (containerd's snapshotter); try `modprobe overlay`",
        ));
    }
    let v2_memory = fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"));
    if !v2_memory && !Path::new("/sys/fs/cgroup/memory").is_dir() {
        return Some(String::from("no memory cgroup controller is mounted"));
    }
    for ns in ["mnt", "pid", "net"] {
        if !Path::new("/proc/self/ns").join(ns).exists() {
            return Some(format!("the kernel has no {ns} namespaces"));
        }
    }
    let missing: Vec<&str> = PACKAGED
        .iter()
        .copied()
        .filter(|f| !Path::new(f).exists())
        .collect();
    if !missing.is_empty() && find_in_path("apt-get").is_none() {
        return Some(format!(
            "{missing:?} are missing and there is no apt-get to install Debian's containerd, \
             runc, containernetworking-plugins, busybox-static and iptables"
        ));
    }
    if std::env::var_os(binaries::ENV_KUBELET).is_none() && find_in_path("go").is_none() {
        return Some(format!(
            "{} is unset and `go` is not on PATH, so there is no kubelet",
            binaries::ENV_KUBELET
        ));
    }
    None
}

fn write(path: &Path, text: &str) -> Result<(), StartError> {
    fs::write(path, text).map_err(StartError::io(format!("write {path:?}")))
}

/// `path` as a TOML basic string.
fn toml_str(path: &Path) -> String {
    serde_json::to_string(&path.to_string_lossy()).expect("a string serializes")
}

/// `path` quoted for `sh`.
fn quoted(path: &Path) -> String {
    format!("'{}'", path.to_string_lossy().replace('\'', r"'\''"))
}

/// The node of the shared API server ([`crate::shared`]), started on first
/// use and stopped at exit. `None` when tests must skip: not root, no Go,
/// a kernel feature missing (loud, and a failure under `CI=true`). Panics
/// if it cannot start.
pub async fn shared() -> Option<&'static Node> {
    static SHARED: OnceLock<Node> = OnceLock::new();
    static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    extern "C" fn stop_shared() {
        if let Some(node) = SHARED.get() {
            node.shutdown();
        }
    }

    let server = crate::shared().await?;
    let _starting = STARTING.lock().await;
    if let Some(node) = SHARED.get() {
        return Some(node);
    }
    match Node::start(server).await {
        Ok(node) => {
            // SAFETY: registers a function with no arguments that touches
            // only the static above; statics are never dropped. Registered
            // after the server's, so it runs first: the node stops while
            // its API server still serves.
            unsafe { libc::atexit(stop_shared) };
            loud(&format!(
                "iar-apiserver: real node `{NAME}` Ready {:.1?} after its kubelet started \
                 ({:.1?} in all); kubelet root {}",
                node.ready_time(),
                node.startup_time(),
                node.kubelet_root().display()
            ));
            Some(SHARED.get_or_init(|| node))
        }
        Err(StartError::Unavailable(what)) => {
            skip_or_fail(&format!("a real-node test: {what}"));
            None
        }
        Err(e) => panic!("the real node did not start: {e}"),
    }
}
