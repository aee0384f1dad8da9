//! The real node of `iar_apiserver::node`, owned by a test: the host's
//! sysctls stay as they were while its kubelet runs, and dropping it leaves
//! nothing on the host — no process (containers included), mount, bridge,
//! cgroup or file. (host/tests/all/real_node.rs uses the shared node.)

use crate::support::{client, server};
use iar_apiserver::node::{BRIDGE, Node};
use iar_apiserver::{StartError, User, create_namespace, skip_or_fail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::path::Path;

const SYSCTLS: [&str; 4] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
];

fn sysctls() -> Vec<String> {
    SYSCTLS
        .iter()
        .map(|s| std::fs::read_to_string(Path::new("/proc/sys").join(s)).unwrap())
        .collect()
}

/// The processes whose cgroup path names `id` (a container's).
fn in_cgroup(id: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c.contains(id))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_node_leaves_nothing_on_the_host() {
    let Some(server) = server().await else {
        return;
    };
    let host = sysctls();
    let rules = iar_apiserver::node::firewall_rules();
    let node = match Node::start(server).await {
        Ok(node) => node,
        Err(StartError::Unavailable(what)) => {
            skip_or_fail(&format!("a real-node test: {what}"));
            return;
        }
        Err(e) => panic!("the real node did not start: {e}"),
    };
    let admin = client(server, User::Admin).await;
    create_namespace(&admin, "node-drop").await;
    let mut pod = node.busybox_pod("sleeper", "echo hi > /scratch/f; exec sleep 3600");
    pod["spec"]["volumes"] = json!([{"name": "scratch", "emptyDir": {}}]);
    pod["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "scratch", "mountPath": "/scratch"}]);
    let pod: Pod = serde_json::from_value(pod).unwrap();
    Api::<Pod>::namespaced(admin.clone(), "node-drop")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    let running = node.wait_running(&admin, "node-drop", "sleeper").await;
    let id = running.status.unwrap().container_statuses.unwrap()[0]
        .container_id
        .clone()
        .unwrap();
    let id = id.strip_prefix("containerd://").unwrap().to_string();
    let container = in_cgroup(&id);
    assert!(!container.is_empty(), "the container's `sleep` runs");
    assert_eq!(sysctls(), host, "the kubelet changed the host's sysctls");
    let dir = node.dir().to_path_buf();
    let bridge = Path::new("/sys/class/net").join(BRIDGE);
    assert!(bridge.exists());
    let mountinfo = || std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo().contains(dir.to_str().unwrap()),
        "the node's mounts reached the host's table"
    );

    drop(node);
    assert!(in_cgroup(&id).is_empty(), "the container survived");
    for pid in container {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "{pid} survived"
        );
    }
    assert!(!bridge.exists(), "the bridge survived");
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let cgroup = hierarchy.path().join("k8s.io").join(&id);
        assert!(!cgroup.exists(), "{cgroup:?} survived");
    }
    assert!(!mountinfo().contains(dir.to_str().unwrap()));
    assert!(!dir.exists(), "{dir:?} survived");
    assert_eq!(sysctls(), host);
    // The kubelet makes chains of its own (KUBE-FIREWALL, the canaries).
    assert_eq!(
        iar_apiserver::node::firewall_rules(),
        rules,
        "the node left firewall rules"
    );
}
