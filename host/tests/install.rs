//! The README's "Running iar in a cluster", done as it says, on a real
//! cluster (`iar_apiserver::cluster`: kube-apiserver, kube-controller-manager,
//! kube-scheduler and one real node of a kubelet with containerd and runc):
//! iar's own image built by `tools/images/build.sh` and loaded into the
//! node, `deploy/` applied unchanged with kubectl, the Deployment's and the
//! DaemonSet's pods running with their probes, a plugin registered from a
//! ConfigMap, a Backup of a pod with hooks, an emptyDir and a local
//! persistent volume (a directory of the node, bind-mounted by the kubelet,
//! seen by the node agent through its `HostToContainer` mount), every
//! controller pod deleted while the backup runs, then `iar volume restore`.
//!
//! Its own test binary: the cluster takes the machine's one real node,
//! which the `all` binary's shared node holds until that binary exits.
//! Skipped (loudly; a failure under `CI=true`) where a node cannot run.

use iar_apiserver::cluster::{Cluster, GATEWAY};
use iar_apiserver::{StartError, skip_or_fail};
use iar_tests::artifacts;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const NS: &str = "iar-system";
const BUCKET: &str = "iar-backups";
const ACCESS_KEY: &str = "iar-install-test";
const SECRET_KEY: &str = "iar-install-test-secret";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ lives in the workspace root")
        .to_path_buf()
}

/// Runs a build script that prints what it built; `None` (skipped) where
/// Go is missing.
fn built(script: &str) -> Option<Vec<PathBuf>> {
    if Command::new("go").arg("version").output().is_err() {
        skip_or_fail(&format!(
            "the install test: Go is not installed ({script} needs it)"
        ));
        return None;
    }
    // The images in the test suite's profile (tools/images/build.sh), as
    // tests/apiserver's build script prefetches them.
    let out = Command::new("bash")
        .arg(repo().join(script))
        .env("IAR_IMAGE_PROFILE", "image-test")
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(out.status.success(), "{script} failed");
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(PathBuf::from)
            .collect(),
    )
}

/// versitygw serving `root` (bucket [`BUCKET`] in it) on the bridge's
/// address, where the pods reach it; returns its endpoint.
fn s3_store(versitygw: &Path, root: &Path) -> (iar_tests::s3::Gateway, String) {
    std::fs::create_dir_all(root.join(BUCKET)).unwrap();
    iar_tests::s3::versitygw(versitygw, root, GATEWAY.into(), ACCESS_KEY, SECRET_KEY)
}

/// Polls `f` until it gives `Ok`, panicking with its last error after
/// `within`; every quarter second, as most checks here run kubectl.
fn wait<T>(what: &str, within: Duration, f: impl FnMut() -> Result<T, String>) -> T {
    iar_tests::blocking::wait_for_every(what, within, Duration::from_millis(250), f)
}

/// What one command printed, for assertions and failure messages.
fn output(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The test's view of the cluster: kubectl as its admin, run in the
/// repository (where the README's commands run).
struct Kubectl<'a>(&'a Cluster);

impl Kubectl<'_> {
    fn try_run(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut command = self.0.kubectl();
        command
            .args(args)
            .current_dir(repo())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("running kubectl");
        let mut pipe = child.stdin.take().unwrap();
        if let Some(stdin) = stdin {
            pipe.write_all(stdin).unwrap();
        }
        drop(pipe);
        child.wait_with_output().unwrap()
    }

    /// `kubectl ARGS`; panics, with the cluster's logs, if it fails.
    fn run(&self, args: &[&str]) -> String {
        self.run_with(args, None)
    }

    fn run_with(&self, args: &[&str], stdin: Option<&[u8]>) -> String {
        let out = self.try_run(args, stdin);
        assert!(
            out.status.success(),
            "{}\n{}",
            output(&format!("kubectl {}", args.join(" ")), &out),
            self.0.logs()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn apply(&self, manifest: &Value) -> String {
        let text = serde_json::to_vec(manifest).unwrap();
        self.run_with(&["apply", "-f", "-"], Some(&text))
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        serde_json::from_str(&self.run(&args)).unwrap()
    }
}

/// `iar` with the store's credentials in its environment, as a user on a
/// machine that reaches the bucket runs it.
fn iar_on_store(endpoint: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iar"))
        .args(args)
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_ENDPOINT", endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1")
        .output()
        .expect("running iar")
}

/// The workload: namespace `shop`, a local persistent volume (a directory
/// of the node) claimed as `data-db-0`, and pod `db-0` (label `app: web`)
/// that writes its volumes; its pre hook writes a marker and then lingers
/// (the window in which the test deletes iar's controller pods), its post
/// hook writes another.
fn workload(local_dir: &Path) -> Vec<Value> {
    let hooks = json!({
        "pre.hook.backup.velero.io/container": "app",
        "pre.hook.backup.velero.io/command":
            r#"["/bin/sh", "-c", "echo pre > /data/pre-marker && sleep 8"]"#,
        "pre.hook.backup.velero.io/timeout": "60s",
        "post.hook.backup.velero.io/container": "app",
        "post.hook.backup.velero.io/command":
            r#"["/bin/sh", "-c", "echo post > /data/post-marker"]"#,
    });
    let script = "mkdir -p /data/orders /scratch/tmp && \
                  i=0; while [ $i -lt 50 ]; do echo order-$i > /data/orders/$i.txt; i=$((i+1)); done && \
                  echo scratch > /scratch/tmp/note && \
                  touch /tmp/ready && exec sleep 3600";
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
        json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "shop-db-0-data"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "local",
                "local": {"path": local_dir},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{
                    "key": "kubernetes.io/hostname", "operator": "In",
                    "values": [iar_apiserver::node::NAME],
                }]}]}},
            },
        }),
        json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data-db-0", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "local",
                "volumeName": "shop-db-0-data",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }),
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "db-0", "namespace": "shop",
                "labels": {"app": "web"},
                "annotations": hooks,
            },
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "app",
                    "image": iar_apiserver::node::BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", script],
                    "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1},
                    "volumeMounts": [
                        {"name": "data", "mountPath": "/data"},
                        {"name": "scratch", "mountPath": "/scratch"},
                    ],
                }],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}},
                    {"name": "scratch", "emptyDir": {}},
                ],
            },
        }),
        // What step 5 restores into a pod: a volume the test writes, which
        // the container itself never does.
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "cache-0", "namespace": "shop", "labels": {"app": "web", "tier": "cache"}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "app",
                    "image": iar_apiserver::node::BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", "exec sleep 3600"],
                    "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                }],
                "volumes": [{"name": "cache", "emptyDir": {}}],
            },
        }),
    ]
}

/// Waits until the labels plugin's ConfigMap says `want` (its
/// `iar.dev/status` annotation).
fn wait_plugin_status(kubectl: &Kubectl, want: &str) {
    wait(
        &format!("the labels plugin {want}"),
        Duration::from_secs(120),
        || {
            let status = kubectl.run(&[
                "-n",
                NS,
                "get",
                "configmap",
                "labels",
                "-o",
                r"jsonpath={.metadata.annotations.iar\.dev/status}",
            ]);
            if status == want {
                Ok(())
            } else {
                Err(format!("status {status:?}"))
            }
        },
    )
}

/// The controller's pods, as `pod/NAME`.
fn controller_pods(kubectl: &Kubectl) -> Vec<String> {
    kubectl
        .run(&[
            "-n",
            NS,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=iar",
            "-o",
            "name",
        ])
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Waits for Backup `name` to end; returns its phase.
fn wait_backup(kubectl: &Kubectl, name: &str) -> String {
    wait(
        &format!("backup {name} to end"),
        Duration::from_secs(300),
        || {
            let phase = kubectl.run(&[
                "-n",
                NS,
                "get",
                "backups.iar.dev",
                name,
                "-o",
                "jsonpath={.status.phase}",
            ]);
            match phase.as_str() {
                "Completed" | "PartiallyFailed" | "Failed" => Ok(phase),
                other => Err(format!("phase {other:?}")),
            }
        },
    )
}

/// The README's Backup, word for word.
const BACKUP: &str = "apiVersion: iar.dev/v1
kind: Backup
metadata: {name: nightly, namespace: iar-system}
spec:
  includedNamespaces: [shop]
  labelSelector: {matchLabels: {app: web}}
  defaultVolumesToFsBackup: true   # or per pod: backup.velero.io/backup-volumes
  itemOperationTimeout: 1h
  ttl: 168h0m0s          # kept a week; unset: --default-backup-ttl (720h)
";

const RESTORE: &str = "apiVersion: iar.dev/v1
kind: Restore
metadata: {name: back, namespace: iar-system}
spec:
  backupName: nightly
  includedNamespaces: [shop]
  labelSelector: {matchLabels: {tier: cache}}
  namespaceMapping: {shop: shop-restored}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iar_installed_from_deploy_backs_up_a_workload_on_a_real_node() {
    let Some(images) = built("tools/images/build.sh") else {
        return;
    };
    let Some(tools) = built("tools/velero/build.sh") else {
        return;
    };
    let firewall_before = iar_apiserver::node::firewall_rules();
    let cluster = match Cluster::start(&[&images[0]]).await {
        Ok(cluster) => cluster,
        Err(StartError::Unavailable(why)) => {
            skip_or_fail(&format!("the install test: {why}"));
            return;
        }
        Err(e) => panic!("the cluster did not start: {e}"),
    };
    let begun = Instant::now();
    let cluster = tokio::task::spawn_blocking(move || {
        install_and_back_up(&cluster, &tools[0], begun);
        cluster
    })
    .await
    .unwrap();
    // Nothing of the cluster stays on the host: its bridge (and the two
    // addresses on it), the kubelet's firewall chains, its processes.
    let pids = cluster.pids();
    drop(cluster);
    assert!(
        !Path::new("/sys/class/net")
            .join(iar_apiserver::node::BRIDGE)
            .exists()
    );
    assert_eq!(
        iar_apiserver::node::firewall_rules(),
        firewall_before,
        "the cluster left firewall rules"
    );
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "{pid} survived"
        );
    }
}

fn install_and_back_up(cluster: &Cluster, tools: &Path, begun: Instant) {
    let kubectl = Kubectl(cluster);
    let work = tempfile::tempdir().unwrap();
    let (_s3, endpoint) = s3_store(&tools.join("versitygw"), &work.path().join("s3"));

    // 1. Install, as the README says; the store's credentials as the
    // Secret the manifests name.
    kubectl.run(&[
        "apply",
        "-f",
        "deploy/namespace.yaml",
        "-f",
        "deploy/rbac.yaml",
        "-f",
        "deploy/crd.yaml",
    ]);
    kubectl.run(&["apply", "-f", "deploy/grant-policy.yaml"]);
    kubectl.run(&[
        "-n",
        NS,
        "create",
        "secret",
        "generic",
        "iar-store",
        &format!("--from-literal=AWS_ACCESS_KEY_ID={ACCESS_KEY}"),
        &format!("--from-literal=AWS_SECRET_ACCESS_KEY={SECRET_KEY}"),
        "--from-literal=AWS_REGION=us-east-1",
        &format!("--from-literal=AWS_ENDPOINT={endpoint}"),
        "--from-literal=AWS_ALLOW_HTTP=true",
    ]);
    // The volume repositories' password, from a file as the README does.
    let password = work.path().join("repo-password");
    std::fs::write(&password, "install test: a repository password\n").unwrap();
    kubectl.run(&[
        "-n",
        NS,
        "create",
        "secret",
        "generic",
        "iar-repository",
        &format!("--from-file=password={}", password.display()),
    ]);
    kubectl.run(&["apply", "-f", "deploy/deployment.yaml"]);
    kubectl.run(&["apply", "-f", "deploy/node-agent.yaml"]);
    // Available means both replicas passed their readiness probe.
    for what in ["deployment/iar", "daemonset/iar-node-agent"] {
        kubectl.run(&["-n", NS, "rollout", "status", what, "--timeout=240s"]);
    }
    let installed = begun.elapsed();
    eprintln!("install: iar's pods Ready {installed:.1?} after the cluster started");

    // 2. A plugin from a ConfigMap.
    let out = Command::new(env!("CARGO_BIN_EXE_iar"))
        .args(["plugin", "configmap", artifacts::LABELS, "--name", "labels"])
        .args(["--namespace", NS])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        output("iar plugin configmap", &out)
    );
    kubectl.run_with(&["apply", "--server-side", "-f", "-"], Some(&out.stdout));
    wait_plugin_status(&kubectl, "Ready");

    // The workload, its local volume a directory of the node.
    let local = work.path().join("local-volume");
    std::fs::create_dir(&local).unwrap();
    for object in workload(&local) {
        kubectl.apply(&object);
    }
    for pod in ["pod/db-0", "pod/cache-0"] {
        kubectl.run(&[
            "-n",
            "shop",
            "wait",
            pod,
            "--for=condition=Ready",
            "--timeout=120s",
        ]);
    }
    kubectl.run(&[
        "-n",
        "shop",
        "exec",
        "cache-0",
        "--",
        "sh",
        "-c",
        "mkdir -p /cache/pages && echo cached-by-the-test > /cache/pages/note",
    ]);

    // 3. Back up; while the pre hook lingers, every controller pod goes.
    kubectl.run_with(&["apply", "-f", "-"], Some(BACKUP.as_bytes()));
    wait(
        "the pre hook's marker",
        Duration::from_secs(120),
        || match local.join("pre-marker").exists() {
            true => Ok(()),
            false => Err(String::from("not yet")),
        },
    );
    let replicas = controller_pods(&kubectl);
    // Their logs to their end: `kubectl logs` of a deleted pod is gone.
    // Each follower has printed a line (it is attached) before the pods
    // are deleted: an idle replica stops at once on its SIGTERM.
    let followed: Vec<std::thread::JoinHandle<String>> = replicas
        .iter()
        .map(|pod| {
            let mut child = cluster
                .kubectl()
                .args(["-n", NS, "logs", "-f", pod])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let (attached, is_attached) = std::sync::mpsc::channel();
            let stdout = child.stdout.take().unwrap();
            let follower = std::thread::spawn(move || {
                use std::io::BufRead;
                let mut log = String::new();
                for line in std::io::BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                {
                    let _ = attached.send(());
                    log.push_str(&line);
                    log.push('\n');
                }
                let _ = child.wait();
                log
            });
            is_attached
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("kubectl logs -f {pod} printed nothing"));
            follower
        })
        .collect();
    kubectl.run(&[
        "-n",
        NS,
        "delete",
        "pod",
        "-l",
        "app.kubernetes.io/name=iar",
        "--wait=false",
    ]);
    eprintln!("install: deleted {} mid-backup", replicas.join(", "));
    let phase = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_backup(&kubectl, "nightly")
    }))
    .unwrap_or_else(|panic| {
        // What the replicas and the agents said, to find why.
        for app in ["iar", "iar-node-agent"] {
            let logs = kubectl.run(&[
                "-n",
                NS,
                "logs",
                "-l",
                &format!("app.kubernetes.io/name={app}"),
                "--tail=80",
                "--prefix",
            ]);
            eprintln!("install: the logs of {app}:\n{logs}");
        }
        std::panic::resume_unwind(panic)
    });
    let backup = kubectl.json(&["-n", NS, "get", "backups.iar.dev", "nightly"]);
    assert_eq!(phase, "Completed", "{backup:#}\n{}", cluster.logs());
    // Each deleted replica stopped on its SIGTERM; the one driving the
    // backup let its step finish first (the drain) and logged its phases.
    let stopped: Vec<String> = followed.into_iter().map(|f| f.join().unwrap()).collect();
    for log in &stopped {
        assert!(log.contains("stopping: no new steps"), "{log}");
    }
    assert!(
        stopped.iter().any(|log| log
            .lines()
            .any(|l| l.contains("backup=nightly") && l.contains("phase InProgress"))),
        "no deleted replica drove the backup: {stopped:#?}"
    );
    // The deleted pods go (their containers have ended); the Deployment's
    // ReplicaSet has replaced them.
    wait("the deleted pods gone", Duration::from_secs(60), || {
        let now = controller_pods(&kubectl);
        match replicas.iter().find(|old| now.contains(old)) {
            Some(old) => Err(format!("{old} is still there: {now:?}")),
            None if now.len() == 2 => Ok(()),
            None => Err(format!("replicas {now:?}")),
        }
    });

    // Both volumes went through the node agent.
    let requests = kubectl.json(&[
        "-n",
        NS,
        "get",
        "volumebackups.iar.dev",
        "-l",
        "iar.dev/backup=nightly",
    ]);
    let items = requests["items"].as_array().unwrap();
    // Into the namespace's restic repository (deploy's `iar-repository`).
    for r in items {
        let id = r["status"]["snapshotID"].as_str().unwrap_or_default();
        assert!(id.starts_with("restic/shop/snapshots/"), "{r:#}");
    }
    let mut volumes: Vec<(String, String)> = items
        .iter()
        .map(|r| {
            (
                r["spec"]["volume"].as_str().unwrap_or_default().to_string(),
                r["status"]["phase"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    volumes.sort();
    assert_eq!(
        volumes,
        [
            ("cache".into(), "Completed".into()),
            ("data".into(), "Completed".into()),
            ("scratch".into(), "Completed".into())
        ],
        "{requests:#}"
    );

    // 4. Restore the local volume, as the README's last command does.
    let restored = work.path().join("db-data");
    let out = iar_on_store(
        &endpoint,
        &[
            "volume",
            "restore",
            "nightly",
            "shop/db-0/data",
            "--store",
            &format!("s3://{BUCKET}"),
            "--to",
            restored.to_str().unwrap(),
            "--repository-password-file",
            password.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        output("iar volume restore", &out)
    );
    assert_eq!(
        std::fs::read_to_string(restored.join("pre-marker")).unwrap(),
        "pre\n"
    );
    assert!(
        !restored.join("post-marker").exists(),
        "the post hook ran after the volume was read"
    );
    assert!(local.join("post-marker").exists(), "the post hook ran");
    for i in 0..50 {
        assert_eq!(
            std::fs::read_to_string(restored.join(format!("orders/{i}.txt"))).unwrap(),
            format!("order-{i}\n")
        );
    }

    // The successors take the next backup.
    let second = BACKUP.replace("name: nightly,", "name: nightly-2,");
    kubectl.run_with(&["apply", "-f", "-"], Some(second.as_bytes()));
    assert_eq!(wait_backup(&kubectl, "nightly-2"), "Completed");

    // 5. The cache pod restored by the controller into another namespace
    // (deploy/restorer.yaml lets it create what a backup holds): it waits
    // for its volume's data (restore-wait, iar's own image), the node
    // agent writes it into the kubelet's directory of the new pod, and
    // the pod starts on it.
    // The labels plugin's restore action annotates what it restores, and
    // deploy/grant-policy.yaml grants no plugin a change: loaded, it would
    // have the pod refused (rule item-change-not-granted). Disabled first,
    // as an operator would (its ConfigMap's `enabled: "false"`).
    kubectl.run(&[
        "-n",
        NS,
        "patch",
        "configmap",
        "labels",
        "--type",
        "merge",
        "-p",
        r#"{"data": {"enabled": "false"}}"#,
    ]);
    wait_plugin_status(&kubectl, "Disabled");
    kubectl.run(&["apply", "-f", "deploy/restorer.yaml"]);
    kubectl.run_with(&["apply", "-f", "-"], Some(RESTORE.as_bytes()));
    let phase = wait("restore back to end", Duration::from_secs(300), || {
        let r = kubectl.json(&["-n", NS, "get", "restore", "back"]);
        match r["status"]["phase"].as_str() {
            Some("InProgress") | Some("New") | None => Err(format!("{:#}", r["status"])),
            Some(_) => Ok(r["status"].clone()),
        }
    });
    if phase["phase"] != "Completed" {
        let requests = kubectl.json(&["-n", NS, "get", "volumerestores"]);
        let pods = kubectl.json(&["-n", "shop-restored", "get", "pods"]);
        let described = iar_on_store(
            &endpoint,
            &[
                "describe",
                "back",
                "--restore",
                "--store",
                &format!("s3://{BUCKET}"),
            ],
        );
        panic!(
            "restore back: {phase:#}\n{}\nits requests: {requests:#}\nits pods: {pods:#}",
            output("iar describe back --restore", &described)
        );
    }
    assert_eq!(phase["podVolumeRestores"]["completed"], 1, "{phase:#}");
    kubectl.run(&[
        "-n",
        "shop-restored",
        "wait",
        "pod/cache-0",
        "--for=condition=Ready",
        "--timeout=120s",
    ]);
    let note = kubectl.run(&[
        "-n",
        "shop-restored",
        "exec",
        "cache-0",
        "-c",
        "app",
        "--",
        "cat",
        "/cache/pages/note",
    ]);
    assert_eq!(note.trim(), "cached-by-the-test");

    // What `kubectl logs` shows of each (docs/cluster.md, "Logs"): the
    // replicas running now drove the second backup, and the agent read
    // every volume of each and filled the restored pod's.
    let controllers = kubectl.run(&[
        "-n",
        NS,
        "logs",
        "-l",
        "app.kubernetes.io/name=iar",
        "--tail=-1",
    ]);
    let agent = kubectl.run(&["-n", NS, "logs", "daemonset/iar-node-agent"]);
    eprintln!(
        "--- kubectl logs -l app.kubernetes.io/name=iar\n{controllers}\n--- kubectl logs daemonset/iar-node-agent\n{agent}"
    );
    for line in [
        "serving /healthz /readyz /metrics on 10.244.213.",
        "plugin \"labels\" loaded: contract 1.3.0",
    ] {
        assert!(
            controllers.contains(line),
            "no {line:?} in the controllers' logs"
        );
    }
    // The journal's line (`backup="nightly-2"`): written before the
    // status that says Completed, where the status writer's own line
    // (`backup=nightly-2`) follows its patch and may not be in the log yet
    // when the resource already shows it.
    assert!(
        controllers
            .lines()
            .any(|l| l.contains("phase Completed") && l.contains("backup=\"nightly-2\"")),
        "the replicas' logs do not show the backup completing"
    );
    assert!(agent.contains("serving volume backups of this node node=localhost"));
    let ended = agent
        .lines()
        .filter(|l| l.contains("volume backup ended") && l.contains("phase=Completed"))
        .count();
    // Three volumes (db-0's two, cache-0's), two backups.
    assert_eq!(ended, 6, "{agent}");
    assert!(
        agent.contains("volume restored request=back-"),
        "the agent restored cache-0's volume: {agent}"
    );
    let pods = kubectl.json(&["-n", NS, "get", "pods"]);
    let pods = pods["items"].as_array().unwrap();
    // The agent keeps the repository's cache (rustic's, by repository id)
    // on its emptyDir, not nowhere: its root file system is read-only.
    let agent_pod = pods
        .iter()
        .find(|p| p["metadata"]["labels"]["app.kubernetes.io/name"] == "iar-node-agent")
        .expect("the node agent's pod");
    let uid = agent_pod["metadata"]["uid"].as_str().unwrap();
    let cache = cluster.node().kubelet_root().join(format!(
        "pods/{uid}/volumes/kubernetes.io~empty-dir/cache/rustic"
    ));
    let cached = std::fs::read_dir(&cache)
        .unwrap_or_else(|e| panic!("{}: {e}\n{agent}", cache.display()))
        .filter(|e| e.as_ref().is_ok_and(|e| e.path().is_dir()))
        .count();
    assert_eq!(cached, 1, "one repository (shop's) in {}", cache.display());
    // Probes passed throughout: no container was restarted.
    for pod in pods {
        for status in pod["status"]["containerStatuses"].as_array().unwrap() {
            assert_eq!(status["restartCount"], 0, "{pod:#}");
            assert_eq!(status["ready"], true, "{pod:#}");
        }
    }
    eprintln!(
        "install: {installed:.1?} to install, {:.1?} in all",
        begun.elapsed()
    );
}
