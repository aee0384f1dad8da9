//! The node's files: its directory's layout, containerd's and the
//! kubelet's configuration, written before either starts.

use super::*;

/// What the node takes from its API server.
pub(super) struct Settings {
    pub(super) kubeconfig: PathBuf,
    pub(super) client_ca: PathBuf,
    /// The kubelet's serving certificate and key.
    pub(super) serving: (PathBuf, PathBuf),
    /// Networks the pods reach through the bridge's address.
    pub(super) routes: Vec<&'static str>,
}

/// The files and directories under the node's directory.
pub(super) struct Layout {
    pub(super) dir: PathBuf,
    pub(super) socket: PathBuf,
    pub(super) containerd_config: PathBuf,
    pub(super) cni_conf: PathBuf,
    pub(super) cni_ipam: PathBuf,
    pub(super) var_log: PathBuf,
    pub(super) sysctls: PathBuf,
    pub(super) kubelet_root: PathBuf,
    pub(super) kubelet_config: PathBuf,
    pub(super) kubeconfig: PathBuf,
}

impl Layout {
    pub(super) fn new(dir: &Path) -> Layout {
        Layout {
            dir: dir.to_path_buf(),
            socket: dir.join("containerd.sock"),
            containerd_config: dir.join("containerd.toml"),
            cni_conf: dir.join("cni/net.d"),
            cni_ipam: dir.join("cni/ipam"),
            var_log: dir.join("log"),
            sysctls: dir.join("sysctl"),
            kubelet_root: dir.join("kubelet"),
            kubelet_config: dir.join("kubelet.yaml"),
            kubeconfig: dir.join("kubeconfig"),
        }
    }

    /// The directories and containerd's and CNI's configuration.
    pub(super) fn create(&self, settings: &Settings) -> Result<(), StartError> {
        for d in [
            &self.cni_conf,
            &self.cni_ipam,
            &self.var_log,
            &self.sysctls,
            &self.kubelet_root,
            &self.dir.join("containerd/root"),
            &self.dir.join("containerd/state"),
        ] {
            fs::create_dir_all(d).map_err(StartError::io(format!("create {d:?}")))?;
        }
        let toml = format!(
            r#"version = 2
root = {root}
state = {state}
# Plugins with host paths of their own (opt: /opt/containerd) or no use here.
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = {socket}

[ttrpc]
  address = {ttrpc}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # This machine refuses OOM score changes below the caller's.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = {cni}
"#,
            root = toml_str(&self.dir.join("containerd/root")),
            state = toml_str(&self.dir.join("containerd/state")),
            socket = toml_str(&self.socket),
            ttrpc = toml_str(&self.dir.join("containerd.sock.ttrpc")),
            cni = toml_str(&self.cni_conf),
        );
        write(&self.containerd_config, &toml)?;
        let mut ipam = json!({
            "type": "host-local",
            "ranges": [[{"subnet": SUBNET}]],
            "dataDir": self.cni_ipam,
        });
        if !settings.routes.is_empty() {
            // The bridge's address is the caller's (crate::cluster), and so
            // are its routes: pods reach it, and through it these networks.
            ipam["ranges"] = json!([[{
                "subnet": SUBNET,
                "gateway": crate::cluster::GATEWAY.to_string(),
                "rangeStart": RANGE_START,
            }]]);
            ipam["routes"] = settings
                .routes
                .iter()
                .map(|dst| json!({"dst": dst, "gw": crate::cluster::GATEWAY.to_string()}))
                .collect();
        }
        let cni = json!({
            "cniVersion": "0.4.0",
            "name": "iar-node",
            "plugins": [{
                "type": "bridge",
                "bridge": BRIDGE,
                // The plugin never puts an address on the bridge, adds a
                // route or masquerades, and so never turns ip_forward on:
                // the host's network is unchanged.
                "isGateway": false,
                "ipMasq": false,
                "ipam": ipam,
            }],
        });
        write(
            &self.cni_conf.join("10-iar-node.conflist"),
            &cni.to_string(),
        )
    }

    pub(super) fn write_kubelet_config(
        &self,
        settings: &Settings,
        port: u16,
    ) -> Result<(), StartError> {
        // JSON is YAML; the kubelet reads either.
        let config = json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": port,
            "readOnlyPort": 0,
            "healthzPort": 0,
            // v1.36 refuses cgroup v1 unless told; these machines have it.
            "failCgroupV1": false,
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": false,
            "enforceNodeAllocatable": [],
            "failSwapOn": false,
            "containerRuntimeEndpoint": format!("unix://{}", self.socket.display()),
            "tlsCertFile": settings.serving.0,
            "tlsPrivateKeyFile": settings.serving.1,
            "authentication": {
                "anonymous": {"enabled": false},
                "webhook": {"enabled": true},
                "x509": {"clientCAFile": settings.client_ca},
            },
            "authorization": {"mode": "Webhook"},
            // The two local images are all there is: never collect them, and
            // never evict for a disk that others fill.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "50Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
        });
        write(&self.kubelet_config, &config.to_string())
    }
}
