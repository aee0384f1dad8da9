//! A cluster that runs workloads the way a user's does: kube-apiserver with
//! service-account tokens, kube-controller-manager (Deployments,
//! ReplicaSets, DaemonSets, service accounts, the root CA ConfigMap, claim
//! binding), kube-scheduler, and one real [`Node`] whose pods reach the
//! API server in-cluster. What `deploy/` installs runs here as it would
//! anywhere: the tests apply its files with kubectl (built from the same
//! module, [`Cluster::kubectl`]).
//!
//! The network, without kube-proxy (which would rewrite the host's
//! iptables) and without touching the host's routes or sysctls:
//!
//! - The node's bridge carries two addresses: [`GATEWAY`] (pods' subnet)
//!   and [`SERVICE_IP`], the first address of the Service network and so
//!   the ClusterIP of the `kubernetes` Service, which the kubelet puts in
//!   every container's environment (`KUBERNETES_SERVICE_HOST`, port 443).
//! - kube-apiserver listens on exactly that address and port. A pod's
//!   in-cluster client dials the ClusterIP and reaches the API server
//!   itself, through the route CNI gives pods via [`GATEWAY`]: a packet for
//!   the host's own address, delivered locally, never forwarded.
//! - Services of the host a pod must reach (the tests' S3 store) listen on
//!   [`GATEWAY`].
//!
//! One cluster or node per machine at a time (the node's lock, taken first
//! and held until the node stops); the bridge goes with the node.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

use crate::binaries;
use crate::error::StartError;
use crate::node::{self, BRIDGE, MachineLock, Node};
use crate::process::ServerProcess;
use crate::{ApiServer, Listen, lock};

/// The bridge's address on the pods' subnet: where host services a pod
/// must reach listen.
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 244, 213, 1);

/// The Service network; its first address is the `kubernetes` Service's.
pub const SERVICE_CIDR: &str = "10.254.213.0/24";

/// The `kubernetes` Service's ClusterIP, where kube-apiserver listens.
pub const SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 254, 213, 1);

/// The bridge's hardware address (locally administered).
const BRIDGE_MAC: &str = "02:1a:72:f4:d5:01";

/// The `kubernetes` Service's port, which kube-apiserver fixes at 443.
const SERVICE_PORT: u16 = 443;

/// A running cluster. Dropping it stops everything: the node (and its
/// bridge) first, the control plane, then the API server.
pub struct Cluster {
    node: Node,
    control_plane: Mutex<Vec<ServerProcess>>,
    server: ApiServer,
    kubectl: PathBuf,
}

impl Cluster {
    /// Starts a cluster whose node has `images` (docker-archive tars)
    /// loaded beside the tests' own. [`StartError::Unavailable`] when this
    /// machine cannot run a node, or address 443 of [`SERVICE_IP`] is
    /// taken: a reason to skip.
    pub async fn start(images: &[&Path]) -> Result<Cluster, StartError> {
        if let Some(missing) = node::unavailable() {
            return Err(StartError::Unavailable(missing));
        }
        let begun = Instant::now();
        let machine = MachineLock::take().await?;
        let images: Vec<PathBuf> = images.iter().map(|p| p.to_path_buf()).collect();
        let (server, control_plane, kubectl) =
            tokio::task::spawn_blocking(move || -> Result<_, StartError> {
                let programs = Programs::find()?;
                // The bridge exists before the API server binds its address,
                // and is removed if anything below fails (the node, which
                // would remove it, does not exist yet).
                let bridge = Bridge::create()?;
                let server = ApiServer::start_listening(
                    &programs.apiserver,
                    &Listen {
                        address: SERVICE_IP,
                        port: Some(SERVICE_PORT),
                        service_cidr: SERVICE_CIDR,
                        service_accounts: true,
                        durable: false,
                    },
                )?;
                let control_plane = start_control_plane(&server, &programs)?;
                bridge.keep();
                Ok((server, control_plane, programs.kubectl))
            })
            .await
            .expect("the startup thread does not panic")?;
        let options = node::Options {
            images,
            routes: vec![SERVICE_CIDR],
        };
        let node = match Node::start_locked(&server, machine, options, begun).await {
            Ok(node) => node,
            Err(e) => {
                // No node owns the bridge yet.
                node::remove_bridge_now();
                return Err(e);
            }
        };
        Ok(Cluster {
            node,
            control_plane: Mutex::new(control_plane),
            server,
            kubectl,
        })
    }

    pub fn server(&self) -> &ApiServer {
        &self.server
    }

    pub fn node(&self) -> &Node {
        &self.node
    }

    /// kubectl, v1.36.3 like the cluster.
    pub fn kubectl_binary(&self) -> &Path {
        &self.kubectl
    }

    /// `kubectl ARGS` as the cluster's admin (its kubeconfig).
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(&self.kubectl);
        command.env("KUBECONFIG", self.server.kubeconfig());
        command
    }

    /// The process ids of its programs still running (etcd,
    /// kube-apiserver, kube-controller-manager, kube-scheduler; each leads
    /// its group).
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = self.server.pids();
        pids.extend(lock(&self.control_plane).iter().map(ServerProcess::pid));
        pids
    }

    /// The last lines of every control-plane program's log.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for process in lock(&self.control_plane).iter() {
            out.push_str(&format!(
                "last lines of {}'s log:\n{}\n",
                process.program,
                crate::process::log_tail(&process.log)
            ));
        }
        out + &self.node.logs()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.node.shutdown();
        for mut process in lock(&self.control_plane).drain(..) {
            process.kill();
        }
        self.server.shutdown();
    }
}

/// The Kubernetes programs, from the tests' one Go module.
struct Programs {
    apiserver: PathBuf,
    controller_manager: PathBuf,
    scheduler: PathBuf,
    kubectl: PathBuf,
}

impl Programs {
    fn find() -> Result<Programs, StartError> {
        let build = |tool: &str| {
            binaries::kubernetes_tool(tool)?.ok_or_else(|| {
                StartError::Unavailable(format!("`go` is not on PATH, so there is no {tool}"))
            })
        };
        Ok(Programs {
            apiserver: build("kube-apiserver")?,
            controller_manager: build("kube-controller-manager")?,
            scheduler: build("kube-scheduler")?,
            kubectl: build("kubectl")?,
        })
    }
}

/// kube-controller-manager and kube-scheduler as the admin, serving
/// nothing (no port of theirs is needed), without leader election.
fn start_control_plane(
    server: &ApiServer,
    programs: &Programs,
) -> Result<Vec<ServerProcess>, StartError> {
    let kubeconfig = format!("--kubeconfig={}", server.kubeconfig().display());
    let mut controller_manager = Command::new(&programs.controller_manager);
    controller_manager
        .arg(&kubeconfig)
        .arg("--leader-elect=false")
        .arg("--secure-port=0")
        // The CA every pod's kube-root-ca.crt ConfigMap carries.
        .arg(format!("--root-ca-file={}", server.serving_ca().display()))
        .arg(format!(
            "--service-account-private-key-file={}",
            server.service_account_key().display()
        ))
        .arg("--use-service-account-credentials=false")
        // No cloud, no node IPAM: CNI's host-local allocates addresses.
        .arg("--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller");
    let mut scheduler = Command::new(&programs.scheduler);
    scheduler
        .arg(&kubeconfig)
        .arg("--leader-elect=false")
        .arg("--secure-port=0");
    let dir = server.dir();
    let mut started = Vec::new();
    for (name, command) in [
        ("kube-controller-manager", controller_manager),
        ("kube-scheduler", scheduler),
    ] {
        let log = dir.join(format!("{name}.log"));
        match ServerProcess::spawn(name, command, log) {
            Ok(process) => started.push(process),
            Err(e) => {
                for mut process in started {
                    process.kill();
                }
                return Err(e);
            }
        }
    }
    Ok(started)
}

/// The node's bridge, made before the API server so it can listen on
/// [`SERVICE_IP`]; deleted on drop unless [`Bridge::keep`] hands it to
/// the node.
struct Bridge {
    kept: bool,
}

impl Bridge {
    fn create() -> Result<Bridge, StartError> {
        let bridge = Bridge { kept: false };
        let ip = |args: &[&str]| {
            let output = Command::new("ip")
                .args(args)
                .output()
                .map_err(StartError::io(format!("run ip {args:?}")))?;
            if output.status.success() {
                Ok(())
            } else {
                Err(StartError::Io {
                    what: format!("ip {}", args.join(" ")),
                    source: std::io::Error::other(
                        String::from_utf8_lossy(&output.stderr).into_owned(),
                    ),
                })
            }
        };
        // A fixed address: a bridge without one takes its lowest port's,
        // which changes as pods come and go, and pods that cached the old
        // one for GATEWAY cannot connect until they ask again.
        ip(&[
            "link", "add", BRIDGE, "address", BRIDGE_MAC, "type", "bridge",
        ])?;
        ip(&["addr", "add", &format!("{GATEWAY}/24"), "dev", BRIDGE])?;
        ip(&["addr", "add", &format!("{SERVICE_IP}/32"), "dev", BRIDGE])?;
        ip(&["link", "set", BRIDGE, "up"])?;
        Ok(bridge)
    }

    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        if !self.kept {
            node::remove_bridge_now();
        }
    }
}
