//! Pod volume backups on a real cluster path: the controller creates a
//! `volumebackups.iar.dev` request per volume, the `iar node-agent`
//! process of the pod's node (one per kwok node, each with its own
//! `--kubelet-root`) backs the volume up into the store and reports in the
//! request's status, and the block's post hooks wait for it.
//!
//! Simulated, because no kubelet runs here: the pod volume directories
//! under each kubelet root (`pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount`),
//! which the test lays out itself. The hooks run through the real exec
//! path (kwok), in those directories.

use crate::controller::{create_backup, start_controller, wait_phase, wait_until_done};
use crate::pod_hooks::{KwokCluster, kwok_cluster};
use iar::backup::object::BackupPhase;
use iar::backup::volumes::{VolumeBackup as Record, VolumePhase, restore_volume};
use iar::k8s::crd::BackupSpec;
use iar::k8s::plugins::PluginRegistry;
use iar::k8s::volume_backup::{BACKUP_LABEL, VolumeBackup};
use iar::store::{BackupFile, BackupStore};
use iar_apiserver::kwok::Kwok;
use iar_apiserver::{ApiServer, User};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One `iar node-agent` process, killed when dropped.
pub(crate) struct Agent {
    child: Child,
    log: PathBuf,
}

impl Agent {
    /// Starts an agent authenticated as the admin.
    pub(crate) fn start(
        server: &ApiServer,
        namespace: &str,
        node: &str,
        root: &Path,
        store: &str,
    ) -> Agent {
        Agent::start_as(server, User::Admin, namespace, node, root, store)
    }

    /// Starts an agent authenticated as `user` (its kubeconfig's current
    /// context).
    pub(crate) fn start_as(
        server: &ApiServer,
        user: User,
        namespace: &str,
        node: &str,
        root: &Path,
        store: &str,
    ) -> Agent {
        Agent::start_with(server, user, namespace, node, root, store, |_| {})
    }

    /// Starts an agent as `user`, with what `configure` adds to its
    /// command (flags, environment).
    pub(crate) fn start_with(
        server: &ApiServer,
        user: User,
        namespace: &str,
        node: &str,
        root: &Path,
        store: &str,
        configure: impl FnOnce(&mut Command),
    ) -> Agent {
        let log = root.join(format!("agent-{node}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let mut kubeconfig: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(server.kubeconfig()).unwrap()).unwrap();
        kubeconfig["current-context"] = user.name().into();
        let kubeconfig_path = root.join(format!("kubeconfig-{node}"));
        std::fs::write(&kubeconfig_path, kubeconfig.to_string()).unwrap();
        let mut command = Command::new(crate::support::iar_bin());
        command
            .args(["node-agent", "--namespace", namespace, "--node-name", node])
            .arg("--kubelet-root")
            .arg(root)
            .args(["--store", store])
            .env("KUBECONFIG", &kubeconfig_path)
            .env("IAR_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        configure(&mut command);
        let child = command.spawn().expect("iar node-agent starts");
        Agent { child, log }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of its log, in order.
    pub(crate) fn last_lines(&self, n: usize) -> Vec<String> {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..]
            .iter()
            .map(|l| l.to_string())
            .collect()
    }

    /// The agent's process id (to stop and continue it).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM, as the kubelet stops a pod, and waits up to `within`
    /// for the agent to exit; its status (the test fails, with the agent's
    /// log, if it did not exit).
    pub(crate) async fn terminate(&mut self, within: Duration) -> std::process::ExitStatus {
        // SAFETY: a signal to our own child, by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        iar_tests::wait_for("the agent to exit on SIGTERM", within, || {
            let exited = match self.child.try_wait().unwrap() {
                Some(status) => Ok(status),
                None => Err(format!("still running; its log:\n{}", self.log())),
            };
            std::future::ready(exited)
        })
        .await
    }

    /// Its exit status, if it has exited.
    pub(crate) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A pod on `node` with PVC `claim` bound to PV `pv`, its volume's
/// directory laid out under `kubelet_root` (the simulated part), hooks run
/// in that directory. Returns the directory.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn pod_with_volume(
    kwok: &Kwok,
    client: &Client,
    ns: &str,
    pod: &str,
    node: &str,
    pv: &str,
    kubelet_root: &Path,
    annotations: serde_json::Value,
) -> PathBuf {
    let claim = format!("{pod}-data");
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": pv},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": "csi.example.com", "volumeHandle": pv},
            "claimRef": {"namespace": ns, "name": claim},
        },
    }))
    .unwrap();
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &volume)
        .await
        .unwrap();
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": claim, "labels": {"app": "web"}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "volumeName": pv,
            "storageClassName": "",
        },
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap();
    let spec: Pod = serde_json::from_value(json!({
        "metadata": {"name": pod, "labels": {"app": "web"}, "annotations": annotations},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "registry.example/app:1"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }))
    .unwrap();
    let created = Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &spec)
        .await
        .unwrap();
    let uid = created.metadata.uid.unwrap();
    let dir = kubelet_root.join(format!("pods/{uid}/volumes/kubernetes.io~csi/{pv}/mount"));
    std::fs::create_dir_all(&dir).unwrap();
    kwok.local_exec(client, ns, pod, &dir, &[]).await;
    kwok.wait_running(client, ns, pod).await;
    dir
}

/// A file of `mib` MiB that does not compress (a debug build still reads it
/// for a while), written 16 MiB at a time.
fn big_file(path: &Path, mib: u64) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).unwrap();
    for chunk in 0..mib.div_ceil(16) {
        file.write_all(&iar_tests::fixtures::noise(chunk + 1, 16 << 20))
            .unwrap();
    }
}

/// Waits until one of `requests` is InProgress, at most `within`; returns
/// its name.
async fn wait_in_progress(requests: &Api<VolumeBackup>, within: Duration) -> String {
    iar_tests::wait_for("a request InProgress", within, || {
        let requests = requests.clone();
        async move {
            let list = requests
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .find(|r| r.status.as_ref().and_then(|s| s.phase) == Some(VolumePhase::InProgress))
                .and_then(|r| r.metadata.name)
                .ok_or_else(|| "not yet".to_string())
        }
    })
    .await
}

pub(crate) fn fs_backup_spec(ns: &str) -> BackupSpec {
    BackupSpec {
        included_namespaces: Some(vec![ns.into()]),
        label_selector: Some(LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: None,
        }),
        default_volumes_to_fs_backup: Some(true),
        ..BackupSpec::default()
    }
}

const HOOKS: &str = "pre.hook.backup.velero.io/command";

fn hooks() -> serde_json::Value {
    json!({
        HOOKS: r#"["sh", "-c", "echo quiesced > pre.txt"]"#,
        "post.hook.backup.velero.io/command": r#"["sh", "-c", "echo thawed > post.txt"]"#,
    })
}

/// Seed 002 on a real cluster path: each pod's volume goes through the
/// agent of its own node; the data in the store holds the file the pre
/// hook wrote into the volume and not the post hook's, which ran after.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_agents_back_up_each_nodes_volumes_between_the_hooks() {
    let ns = "agent-shop";
    let Some(KwokCluster {
        kwok,
        server,
        admin,
    }) = kwok_cluster(ns, &["kwok-a", "kwok-b"]).await
    else {
        return;
    };
    let (root_a, root_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let dir_a = pod_with_volume(
        kwok,
        &admin,
        ns,
        "db-0",
        "kwok-a",
        "pv-agent-a",
        root_a.path(),
        hooks(),
    )
    .await;
    let dir_b = pod_with_volume(
        kwok,
        &admin,
        ns,
        "web-0",
        "kwok-b",
        "pv-agent-b",
        root_b.path(),
        hooks(),
    )
    .await;
    std::fs::write(dir_a.join("table.db"), vec![7u8; 3 << 20]).unwrap();
    std::fs::write(dir_b.join("index.html"), "<h1>shop</h1>").unwrap();

    let store_dir = tempfile::tempdir().unwrap();
    let url = store_dir.path().to_str().unwrap();
    let store = BackupStore::open(url).unwrap();
    let _a = Agent::start(server, ns, "kwok-a", root_a.path(), url);
    let b = Agent::start(server, ns, "kwok-b", root_b.path(), url);
    let (_, controller) = start_controller(
        admin.clone(),
        ns,
        store.clone(),
        Vec::new(),
        PluginRegistry::new(),
    )
    .await;
    create_backup(&admin, ns, "fs", fs_backup_spec(ns)).await;
    let done = wait_phase(&admin, ns, "fs", BackupPhase::Completed).await;
    controller.abort();
    let status = done.status.unwrap();
    assert_eq!(status.errors, 0, "{status:?}\n{}", b.log());

    let records: Vec<Record> = store
        .get_json("fs", BackupFile::VolumeBackups)
        .await
        .unwrap()
        .expect("volume backups recorded");
    assert_eq!(records.len(), 2, "{records:?}");
    for (pod, dir) in [("db-0", &dir_a), ("web-0", &dir_b)] {
        let record = records.iter().find(|r| r.pod_name == pod).unwrap();
        assert_eq!(record.phase, VolumePhase::Completed, "{record:?}");
        let restored = tempfile::tempdir().unwrap();
        restore_volume(
            &store,
            "fs",
            record.manifest_key.as_deref().unwrap(),
            restored.path(),
            &Default::default(),
        )
        .await
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(restored.path().join("pre.txt")).unwrap(),
            "quiesced\n",
            "the pre hook ran before the volume was read"
        );
        assert!(
            !restored.path().join("post.txt").exists(),
            "the post hook ran before the volume backup ended"
        );
        assert!(dir.join("post.txt").exists(), "the post hook of {pod} ran");
    }
    let a = records.iter().find(|r| r.pod_name == "db-0").unwrap();
    assert!(
        a.bytes_done > 3 << 20 && a.bytes_done == a.bytes_total,
        "{a:?}"
    );
    // The Backup resource's status counts them, with their bytes.
    let shown = status
        .volume_backups
        .clone()
        .expect("volume backups on the status");
    assert_eq!(
        (shown.attempted, shown.completed, shown.failed),
        (2, 2, 0),
        "{shown:?}"
    );
    assert_eq!(
        shown.bytes_done,
        records.iter().map(|r| r.bytes_done).sum::<u64>()
    );

    // The requests: one per volume, each done by its own node's agent.
    let requests = Api::<VolumeBackup>::namespaced(admin.clone(), ns)
        .list(&ListParams::default().labels(&format!("{BACKUP_LABEL}=fs")))
        .await
        .unwrap();
    assert_eq!(requests.items.len(), 2);
    for r in &requests.items {
        let s = r.status.as_ref().unwrap();
        assert_eq!(s.phase, Some(VolumePhase::Completed), "{r:?}");
        let expected = if r.spec.pod.name == "db-0" {
            &dir_a
        } else {
            &dir_b
        };
        assert_eq!(s.path.as_deref(), Some(expected.to_str().unwrap()));
        assert!(
            s.snapshot_id.is_some() && s.completion_timestamp.is_some(),
            "{r:?}"
        );
    }
}

/// An agent killed mid-volume leaves its request Failed with a reason
/// (the controller stops waiting once the agent has said nothing for its
/// silence limit, and writes that into the request), never InProgress for
/// ever; and an agent that starts again fails what it was doing instead
/// of leaving it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_agent_fails_its_volume_backup_with_a_reason() {
    let ns = "agent-killed";
    let Some(KwokCluster {
        kwok,
        server,
        admin,
    }) = kwok_cluster(ns, &["kwok-c"]).await
    else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let dir = pod_with_volume(
        kwok,
        &admin,
        ns,
        "big-0",
        "kwok-c",
        "pv-agent-c",
        root.path(),
        json!({}),
    )
    .await;
    // Large enough that a debug build is still reading it when killed.
    big_file(&dir.join("big.bin"), 96);

    let store_dir = tempfile::tempdir().unwrap();
    let url = store_dir.path().to_str().unwrap();
    let store = BackupStore::open(url).unwrap();
    let mut agent = Agent::start(server, ns, "kwok-c", root.path(), url);
    let (_, controller) = start_controller(
        admin.clone(),
        ns,
        store.clone(),
        Vec::new(),
        PluginRegistry::new(),
    )
    .await;
    create_backup(&admin, ns, "killed", fs_backup_spec(ns)).await;
    let requests = Api::<VolumeBackup>::namespaced(admin.clone(), ns);
    let name = wait_in_progress(&requests, Duration::from_secs(60)).await;
    agent.kill();

    let done = wait_phase(&admin, ns, "killed", BackupPhase::PartiallyFailed).await;
    controller.abort();
    assert!(done.status.unwrap().errors >= 1);
    let request = requests.get(&name).await.unwrap();
    let status = request.status.clone().unwrap();
    assert_eq!(status.phase, Some(VolumePhase::Failed), "{:?}", agent.log());
    let message = status.message.unwrap();
    assert!(
        message.contains("node agent on kwok-c reported nothing"),
        "{message}"
    );
    let records: Vec<Record> = store
        .get_json("killed", BackupFile::VolumeBackups)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(records[0].phase, VolumePhase::Failed);
    assert!(
        records[0]
            .error
            .as_deref()
            .unwrap()
            .contains("reported nothing")
    );

    // A request left InProgress by an agent that died (here: written so by
    // hand) is failed by the next agent of its node when it starts.
    let mut orphan = request.clone();
    orphan.metadata = kube::api::ObjectMeta {
        name: Some("orphan".into()),
        labels: request.metadata.labels.clone(),
        ..Default::default()
    };
    orphan.status = None;
    requests
        .create(&PostParams::default(), &orphan)
        .await
        .unwrap();
    requests
        .patch_status(
            "orphan",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"phase": "InProgress"}})),
        )
        .await
        .unwrap();
    let again = Agent::start(server, ns, "kwok-c", root.path(), url);
    let message = iar_tests::wait_for("the orphan failed", Duration::from_secs(60), || {
        let requests = requests.clone();
        async move {
            let r = requests.get("orphan").await.map_err(|e| e.to_string())?;
            let s = r.status.unwrap_or_default();
            match s.phase {
                Some(VolumePhase::Failed) => Ok(s.message.unwrap_or_default()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert!(
        message.contains("restarted while this volume backup ran"),
        "{message}\n{}",
        again.log()
    );
}

/// The controller SIGKILLed while a block waits for its volume backup: a
/// new controller finds the items written, follows the same request (the
/// agent kept working), runs the owed post hook exactly once, and the
/// backup completes; the volume backup is not failed for the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_controller_finishes_the_wait_and_runs_the_post_hook_once() {
    let ns = "agent-restart";
    let Some(KwokCluster {
        kwok,
        server,
        admin,
    }) = kwok_cluster(ns, &["kwok-d"]).await
    else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("kubelet");
    let annotations = json!({
        HOOKS: r#"["sh", "-c", "echo quiesced > pre.txt"]"#,
        "post.hook.backup.velero.io/command": r#"["sh", "-c", "echo ran >> post.log"]"#,
    });
    let dir = pod_with_volume(
        kwok,
        &admin,
        ns,
        "slow-0",
        "kwok-d",
        "pv-agent-d",
        &root,
        annotations,
    )
    .await;
    big_file(&dir.join("big.bin"), 96);

    let store_path = work.path().join("store");
    let url = store_path.to_str().unwrap();
    let _agent = Agent::start(server, ns, "kwok-d", &root, url);
    let plugins = work.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let log = |who: &str| work.path().join(format!("controller-{who}.log"));
    let first = crate::controller::spawn_controller(
        server.kubeconfig(),
        ns,
        &store_path,
        &plugins,
        "first",
        &log("first"),
    );
    create_backup(&admin, ns, "resumed", fs_backup_spec(ns)).await;
    let requests = Api::<VolumeBackup>::namespaced(admin.clone(), ns);
    wait_in_progress(&requests, Duration::from_secs(90)).await;
    drop(first); // SIGKILL, mid-wait.
    assert!(
        !dir.join("post.log").exists(),
        "the post hook ran before the volume backup ended"
    );

    let _second = crate::controller::spawn_controller(
        server.kubeconfig(),
        ns,
        &store_path,
        &plugins,
        "second",
        &log("second"),
    );
    let done = wait_phase(&admin, ns, "resumed", BackupPhase::Completed).await;
    let second_log = std::fs::read_to_string(log("second")).unwrap();
    assert_eq!(
        done.status.as_ref().unwrap().errors,
        0,
        "{done:?}\n{second_log}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("post.log")).unwrap(),
        "ran\n",
        "the owed post hook ran exactly once"
    );
    let store = BackupStore::open(url).unwrap();
    let records: Vec<Record> = store
        .get_json("resumed", BackupFile::VolumeBackups)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].phase, VolumePhase::Completed, "{records:?}");
    let restored = tempfile::tempdir().unwrap();
    restore_volume(
        &store,
        "resumed",
        records[0].manifest_key.as_deref().unwrap(),
        restored.path(),
        &Default::default(),
    )
    .await
    .unwrap();
    assert!(restored.path().join("pre.txt").exists());
    assert!(!restored.path().join("post.log").exists());
    let logs = store.get_logs("resumed").await.unwrap().unwrap().join("\n");
    assert!(
        logs.contains("resumed after a restart with its items written"),
        "{logs}"
    );
}

/// Seed 002 across nodes: each block's post hook waits for its own
/// block's volume backup and no other. A pod with a small volume on one
/// node runs its post hook while a 384 MiB volume on another node is still
/// being read; and a pod whose pre hook fails with `onError: Fail` gets no
/// volume backup request and no post hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_post_hook_waits_for_its_own_blocks_volumes_only() {
    let ns = "agent-order";
    let Some(KwokCluster {
        kwok,
        server,
        admin,
    }) = kwok_cluster(ns, &["kwok-e", "kwok-f"]).await
    else {
        return;
    };
    let (root_e, root_f) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // Nanoseconds since the epoch, by the same clock the agent stamps with.
    let timed = json!({
        "post.hook.backup.velero.io/command": r#"["sh", "-c", "date +%s%N > post.time"]"#,
    });
    let fast = pod_with_volume(
        kwok,
        &admin,
        ns,
        "fast-0",
        "kwok-e",
        "pv-order-fast",
        root_e.path(),
        timed.clone(),
    )
    .await;
    let slow = pod_with_volume(
        kwok,
        &admin,
        ns,
        "slow-0",
        "kwok-f",
        "pv-order-slow",
        root_f.path(),
        timed,
    )
    .await;
    let strict = pod_with_volume(
        kwok,
        &admin,
        ns,
        "strict-0",
        "kwok-e",
        "pv-order-strict",
        root_e.path(),
        json!({
            HOOKS: r#"["sh", "-c", "exit 3"]"#,
            "pre.hook.backup.velero.io/on-error": "Fail",
            "post.hook.backup.velero.io/command": r#"["sh", "-c", "touch post-ran"]"#,
        }),
    )
    .await;
    std::fs::write(fast.join("small.txt"), "small").unwrap();
    // Several times what the agent reads in the second the fast block's
    // post hook takes to follow its volume (a warm page cache reads 96 MiB
    // in 0.6 s here, which once let the slow volume end first).
    big_file(&slow.join("big.bin"), 384);
    std::fs::write(strict.join("rows.db"), "rows").unwrap();

    let store_dir = tempfile::tempdir().unwrap();
    let url = store_dir.path().to_str().unwrap();
    let store = BackupStore::open(url).unwrap();
    let _e = Agent::start(server, ns, "kwok-e", root_e.path(), url);
    let _f = Agent::start(server, ns, "kwok-f", root_f.path(), url);
    let (_, controller) = start_controller(
        admin.clone(),
        ns,
        store.clone(),
        Vec::new(),
        PluginRegistry::new(),
    )
    .await;
    create_backup(&admin, ns, "order", fs_backup_spec(ns)).await;
    let done = wait_phase(&admin, ns, "order", BackupPhase::PartiallyFailed).await;
    controller.abort();
    assert!(done.status.unwrap().errors >= 1);

    let records: Vec<Record> = store
        .get_json("order", BackupFile::VolumeBackups)
        .await
        .unwrap()
        .unwrap();
    let pods: Vec<&str> = records.iter().map(|r| r.pod_name.as_str()).collect();
    assert!(
        !pods.contains(&"strict-0"),
        "a failed block's volume was backed up: {pods:?}"
    );
    assert!(
        !strict.join("post-ran").exists(),
        "a failed block ran its post hook"
    );
    let slow_record = records.iter().find(|r| r.pod_name == "slow-0").unwrap();
    let fast_record = records.iter().find(|r| r.pod_name == "fast-0").unwrap();
    assert_eq!(slow_record.phase, VolumePhase::Completed);
    assert_eq!(fast_record.phase, VolumePhase::Completed);
    let nanos =
        |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let post_time = |dir: &Path| -> u128 {
        std::fs::read_to_string(dir.join("post.time"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let (fast_post, slow_post) = (post_time(&fast), post_time(&slow));
    let slow_done = nanos(slow_record.completed.unwrap());
    let fast_done = nanos(fast_record.completed.unwrap());
    assert!(
        fast_done <= fast_post,
        "fast-0's post hook ran before its volume backup ended"
    );
    assert!(
        slow_done <= slow_post,
        "slow-0's post hook ran before its volume backup ended"
    );
    assert!(
        fast_post < slow_done,
        "fast-0's post hook waited for slow-0's volume on another node: fast done {fast_done}, fast post {fast_post}, slow started {:?}, slow done {slow_done}",
        slow_record.started.map(nanos)
    );
}

/// A Backup resource deleted while a block waits for its volume backup:
/// the controller asks the node agent to stop (`spec.cancel` on the
/// request) at once, the request ends instead of running on for a backup
/// that is gone, the pod's post hook still runs (its pre hook quiesced the
/// application, which must not stay so), and the backup does not end
/// Completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_the_backup_mid_wait_cancels_its_volume_backups() {
    let ns = "agent-cancel";
    let Some(KwokCluster {
        kwok,
        server,
        admin,
    }) = kwok_cluster(ns, &["kwok-e"]).await
    else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("kubelet");
    let annotations = json!({
        HOOKS: r#"["sh", "-c", "echo quiesced > pre.txt"]"#,
        "post.hook.backup.velero.io/command": r#"["sh", "-c", "echo ran >> post.log"]"#,
    });
    let dir = pod_with_volume(
        kwok,
        &admin,
        ns,
        "doomed-0",
        "kwok-e",
        "pv-agent-e",
        &root,
        annotations,
    )
    .await;
    // Long enough to be read still when the deletion's cancel arrives, on
    // a fast machine too (192 MiB once completed first).
    big_file(&dir.join("big.bin"), 640);

    let store_path = work.path().join("store");
    let url = store_path.to_str().unwrap();
    let _agent = Agent::start(server, ns, "kwok-e", &root, url);
    let plugins = work.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let log = work.path().join("controller.log");
    let _controller = crate::controller::spawn_controller(
        server.kubeconfig(),
        ns,
        &store_path,
        &plugins,
        "only",
        &log,
    );
    create_backup(&admin, ns, "doomed", fs_backup_spec(ns)).await;
    let requests = Api::<VolumeBackup>::namespaced(admin.clone(), ns);
    let name = wait_in_progress(&requests, Duration::from_secs(90)).await;
    Api::<iar::k8s::crd::Backup>::namespaced(admin.clone(), ns)
        .delete("doomed", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let controller_log = || std::fs::read_to_string(&log).unwrap_or_default();
    iar_tests::wait_for(
        "the request canceled and ended",
        Duration::from_secs(90),
        || {
            let requests = requests.clone();
            let name = name.clone();
            async move {
                let r = requests.get(&name).await.map_err(|e| e.to_string())?;
                let phase = r.status.as_ref().and_then(|s| s.phase);
                (r.spec.cancel && phase.is_some_and(VolumePhase::is_terminal))
                    .then_some(())
                    .ok_or_else(|| format!("cancel {}, phase {phase:?}", r.spec.cancel))
            }
        },
    )
    .await;
    let store = BackupStore::open(url).unwrap();
    let ended = iar_tests::wait_for("the backup ended", Duration::from_secs(60), || {
        let store = store.clone();
        async move {
            let object = store
                .get_json::<iar::backup::object::BackupObject>("doomed", BackupFile::Metadata)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no backup object")?;
            object
                .status
                .phase
                .is_terminal()
                .then_some(object.status.phase)
                .ok_or_else(|| format!("phase {}", object.status.phase))
        }
    })
    .await;
    // Its volume backup did not complete: the backup cannot have.
    assert_ne!(ended, BackupPhase::Completed, "{}", controller_log());
    let records: Vec<Record> = store
        .get_json("doomed", BackupFile::VolumeBackups)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(records[0].phase, VolumePhase::Completed, "{records:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("post.log")).unwrap_or_default(),
        "ran\n",
        "the post hook resumed the application once\n{}",
        controller_log()
    );
}

/// The agent's connections to the API server turned into black holes
/// while it reads a volume (what it sends and receives on them dropped,
/// none ever closed: a lost NAT or conntrack entry), new connections
/// passing. It still ends that volume backup, within its read patience
/// rather than kube's 295 s, and serves the next backups: its watch, dead
/// with its connection, is found out and started again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_whose_connections_go_dead_serves_again() {
    let ns = "agent-blackhole";
    let Some(KwokCluster {
        kwok,
        server,
        admin,
    }) = kwok_cluster(ns, &["kwok-h"]).await
    else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let dir = pod_with_volume(
        kwok,
        &admin,
        ns,
        "big-0",
        "kwok-h",
        "pv-agent-hole",
        root.path(),
        json!({}),
    )
    .await;
    big_file(&dir.join("big.bin"), 96);
    let store_dir = tempfile::tempdir().unwrap();
    let url = store_dir.path().to_str().unwrap();
    let store = BackupStore::open(url).unwrap();
    // The agent reaches the API server through the hop.
    let hole = iar_tests::blackhole::Blackhole::start(api_addr(server));
    let kubeconfig_path = kubeconfig_through(server, &hole, root.path());
    let agent = Agent::start_with(server, User::Admin, ns, "kwok-h", root.path(), url, |c| {
        c.env("KUBECONFIG", &kubeconfig_path);
    });
    let (_, controller) = start_controller(
        admin.clone(),
        ns,
        store.clone(),
        Vec::new(),
        PluginRegistry::new(),
    )
    .await;
    create_backup(&admin, ns, "cut", fs_backup_spec(ns)).await;
    let requests = Api::<VolumeBackup>::namespaced(admin.clone(), ns);
    let cut = wait_in_progress(&requests, Duration::from_secs(60)).await;
    hole.swallow_open_connections();

    // Its end: the agent's to say, or found already said by the
    // controller (which fails a silent agent's request). Each request
    // lost on a dead connection costs the read patience (20 s), and the
    // agent's pool may hold a few such connections; kube's default would
    // hold each for 295 s.
    let ended = format!("request={cut}");
    iar_tests::wait_for(
        "the agent to end the volume backup its connections died under",
        Duration::from_secs(150),
        || {
            let log = agent.log();
            let done = log
                .lines()
                .any(|l| l.contains("volume backup ended") && l.contains(&ended));
            std::future::ready(if done { Ok(()) } else { Err(log) })
        },
    )
    .await;
    wait_terminal(&admin, ns, "cut").await;

    // It serves again: a backup created now completes, or one of the
    // next few does (a request may still meet a dead pooled connection
    // and be failed as untaken by the controller meanwhile).
    let mut phases = Vec::new();
    for i in 0..4 {
        let name = format!("after-{i}");
        create_backup(&admin, ns, &name, fs_backup_spec(ns)).await;
        let phase = wait_terminal(&admin, ns, &name).await;
        phases.push(phase);
        if phase == BackupPhase::Completed {
            break;
        }
    }
    controller.abort();
    assert_eq!(
        phases.last(),
        Some(&BackupPhase::Completed),
        "{phases:?}; the agent's log:\n{}",
        agent.log()
    );
}

/// An agent started while the API server cannot be reached (every
/// connection closed as soon as it is made, as during an outage or a
/// restart): it waits for it, and serves once it is back, where it used
/// to exit on its first list (the fault campaign's seeds 3614 and 3620:
/// an agent started into an API partition, gone for the rest of the
/// seed; a kubelet would have restarted it after a crash-loop backoff of
/// up to five minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_started_while_the_api_server_is_away_waits_for_it() {
    let ns = "agent-early";
    let Some(KwokCluster {
        kwok,
        server,
        admin,
    }) = kwok_cluster(ns, &["kwok-early"]).await
    else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    pod_with_volume(
        kwok,
        &admin,
        ns,
        "db-0",
        "kwok-early",
        "pv-agent-early",
        root.path(),
        json!({}),
    )
    .await;
    let store_dir = tempfile::tempdir().unwrap();
    let url = store_dir.path().to_str().unwrap();
    let store = BackupStore::open(url).unwrap();
    let hole = iar_tests::blackhole::Blackhole::start_refusing(api_addr(server));
    let kubeconfig_path = kubeconfig_through(server, &hole, root.path());
    let mut agent = Agent::start_with(
        server,
        User::Admin,
        ns,
        "kwok-early",
        root.path(),
        url,
        |c| {
            c.env("KUBECONFIG", &kubeconfig_path);
        },
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(agent.exited(), None, "{}", agent.log());
    hole.pass();

    let (_, controller) = start_controller(
        admin.clone(),
        ns,
        store.clone(),
        Vec::new(),
        PluginRegistry::new(),
    )
    .await;
    create_backup(&admin, ns, "later", fs_backup_spec(ns)).await;
    let phase = wait_terminal(&admin, ns, "later").await;
    controller.abort();
    assert_eq!(phase, BackupPhase::Completed, "{}", agent.log());
    assert!(
        agent
            .log()
            .contains("the API server was not reached, trying again"),
        "{}",
        agent.log()
    );
}

/// Where `server` listens.
fn api_addr(server: &ApiServer) -> std::net::SocketAddr {
    let kubeconfig: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(server.kubeconfig()).unwrap()).unwrap();
    kubeconfig["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .trim_start_matches("https://")
        .parse()
        .unwrap()
}

/// An admin kubeconfig for `server` through `hole`, written under `dir`.
fn kubeconfig_through(
    server: &ApiServer,
    hole: &iar_tests::blackhole::Blackhole,
    dir: &Path,
) -> PathBuf {
    crate::support::admin_kubeconfig_via(server, dir, "kubeconfig-through-hop", |_| hole.addr())
}

/// The phase Backup `name` ended in ([`wait_until_done`]).
async fn wait_terminal(admin: &Client, ns: &str, name: &str) -> BackupPhase {
    wait_until_done(admin, ns, name)
        .await
        .status
        .expect("ended, so it has a status")
        .phase
}
