//! The node as a trust boundary, with the real `iar node-agent` against the
//! real API server and kwok: a pod's user plants links in its own volume
//! and gets back exactly that volume; a forged request (another pod's
//! uid, another node's pod) is refused before anything is read.
//!
//! Simulated, as in `node_agent`: the kubelet's directory of each pod's
//! volumes, laid out by the test.

use crate::controller::{create_backup, start_controller, wait_phase};
use crate::node_agent::{Agent, fs_backup_spec};
use crate::pod_hooks::{KwokCluster, kwok_cluster};
use iar::backup::object::BackupPhase;
use iar::backup::volumes::{VolumeBackup as Record, VolumePhase, restore_volume};
use iar::k8s::plugins::PluginRegistry;
use iar::k8s::volume_backup::{PodReference, VolumeBackup, VolumeBackupSpec};
use iar::store::{BackupFile, BackupStore};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

const SECRET: &[u8] = b"projected token of another tenant";

/// A pod on `node` with an emptyDir `scratch`; its directory under
/// `kubelet_root` is made as the kubelet makes it. Returns (uid, dir).
pub(crate) async fn pod_with_scratch(
    kwok: &iar_apiserver::kwok::Kwok,
    client: &Client,
    ns: &str,
    pod: &str,
    node: &str,
    kubelet_root: &Path,
) -> (String, PathBuf) {
    let spec: Pod = serde_json::from_value(json!({
        "metadata": {"name": pod, "labels": {"app": "web"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "registry.example/app:1"}],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }))
    .unwrap();
    let created = Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &spec)
        .await
        .unwrap();
    let uid = created.metadata.uid.unwrap();
    let dir = kubelet_root.join(format!(
        "pods/{uid}/volumes/kubernetes.io~empty-dir/scratch"
    ));
    std::fs::create_dir_all(&dir).unwrap();
    kwok.local_exec(client, ns, pod, &dir, &[]).await;
    kwok.wait_running(client, ns, pod).await;
    (uid, dir)
}

/// Waits until request `name` has ended; its status.
async fn wait_ended(
    api: &Api<VolumeBackup>,
    name: &str,
) -> iar::k8s::volume_backup::VolumeBackupStatus {
    iar_tests::wait_for(name, Duration::from_secs(60), || {
        let api = api.clone();
        async move {
            let r = api.get(name).await.map_err(|e| e.to_string())?;
            let s = r.status.unwrap_or_default();
            match s.phase {
                Some(p) if p.is_terminal() => Ok(s),
                p => Err(format!("{p:?}")),
            }
        }
    })
    .await
}

/// Every data chunk in a local store, inflated.
pub(crate) fn all_chunks(store_dir: &Path) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut stack = vec![store_dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.parent().is_some_and(|d| d.ends_with("volumes/data")) {
                let gz = std::fs::read(&p).unwrap();
                out.push(iar::store::gz::gunzip_at_most(&gz, 8 << 20).unwrap());
            }
        }
    }
    out
}

/// A pod's user writes `mount -> ../../../..` (and a link to another
/// pod's token) into its opted-in emptyDir: the agent backs up that
/// emptyDir, links as links, and not one byte of any other volume on the
/// node reaches the store; the restore gives back exactly the pod's own
/// files.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_planted_mount_link_backs_up_only_the_pods_own_volume() {
    let ns = "boundary-links";
    let Some(KwokCluster {
        kwok,
        server,
        admin,
    }) = kwok_cluster(ns, &["kwok-a"]).await
    else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    // Another tenant's projected token, on the same node.
    let victim = root
        .path()
        .join("pods/0000-victim/volumes/kubernetes.io~projected/kube-api-access");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("token"), SECRET).unwrap();
    let (_, dir) = pod_with_scratch(kwok, &admin, ns, "tenant-0", "kwok-a", root.path()).await;
    std::fs::write(dir.join("own.txt"), "mine").unwrap();
    std::os::unix::fs::symlink("../../../..", dir.join("mount")).unwrap();
    std::os::unix::fs::symlink(victim.join("token"), dir.join("token")).unwrap();

    let store_dir = tempfile::tempdir().unwrap();
    let url = store_dir.path().to_str().unwrap();
    let store = BackupStore::open(url).unwrap();
    let agent = Agent::start(server, ns, "kwok-a", root.path(), url);
    let (_, controller) = start_controller(
        admin.clone(),
        ns,
        store.clone(),
        Vec::new(),
        PluginRegistry::new(),
    )
    .await;
    create_backup(&admin, ns, "links", fs_backup_spec(ns)).await;
    let done = wait_phase(&admin, ns, "links", BackupPhase::Completed).await;
    controller.abort();
    let status = done.status.unwrap();
    assert_eq!(status.errors, 0, "{status:?}\n{}", agent.log());
    let records: Vec<Record> = store
        .get_json("links", BackupFile::VolumeBackups)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].phase, VolumePhase::Completed, "{records:?}");
    assert_eq!(records[0].bytes_done, 4, "only own.txt was read");
    assert!(
        all_chunks(store_dir.path())
            .iter()
            .all(|c| c.as_slice() != SECRET)
    );

    // The fence: the same request again once the backup has finished is
    // refused, and nothing more is written for that backup.
    let api = Api::<VolumeBackup>::namespaced(admin.clone(), ns);
    let made = api
        .list(&kube::api::ListParams::default().labels("iar.dev/backup=links"))
        .await
        .unwrap();
    let mut late = made.items[0].clone();
    late.metadata = ObjectMeta {
        name: Some("late".into()),
        labels: late.metadata.labels.clone(),
        ..ObjectMeta::default()
    };
    late.status = None;
    api.create(&PostParams::default(), &late).await.unwrap();
    let ended = wait_ended(&api, "late").await;
    assert_eq!(ended.phase, Some(VolumePhase::Failed), "{ended:?}");
    let message = ended.message.unwrap_or_default();
    assert!(
        message.contains("rule: backup-fence") && message.contains("Completed"),
        "{message}"
    );

    // The resource's status may lag the store's (a status write lost):
    // with the resource saying InProgress again, a late request reads the
    // volume, and the store's record still fences its snapshot off; the
    // snapshot it wrote is forgotten (the fault campaign's seed 1215 found
    // one outliving its deleted backup).
    // The repositories' snapshot files (`restic/<ns>/snapshots/<id>`).
    let snapshots = || -> Vec<String> {
        crate::volume_repository::files(store_dir.path())
            .into_keys()
            .filter(|k| k.contains("/snapshots/"))
            .collect()
    };
    let before = snapshots();
    Api::<iar::k8s::crd::Backup>::namespaced(admin.clone(), ns)
        .patch_status(
            "links",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"phase": "InProgress"}})),
        )
        .await
        .unwrap();
    late.metadata.name = Some("lagging".into());
    api.create(&PostParams::default(), &late).await.unwrap();
    let ended = wait_ended(&api, "lagging").await;
    assert_eq!(ended.phase, Some(VolumePhase::Failed), "{ended:?}");
    let message = ended.message.unwrap_or_default();
    assert!(
        message.contains("rule: backup-fence") && message.contains("Completed in the store"),
        "{message}"
    );
    assert_eq!(snapshots(), before, "the fenced-off snapshot is forgotten");

    let restored = tempfile::tempdir().unwrap();
    restore_volume(
        &store,
        "links",
        records[0].manifest_key.as_deref().unwrap(),
        restored.path(),
        &Default::default(),
    )
    .await
    .unwrap();
    let mut names: Vec<_> = std::fs::read_dir(restored.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["mount", "own.txt", "token"]);
    assert!(
        restored
            .path()
            .join("mount")
            .symlink_metadata()
            .unwrap()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(restored.path().join("own.txt")).unwrap(),
        "mine"
    );
}

/// Requests the controller never made: one naming the pod with another
/// pod's uid (to read that pod's volume directory), one naming a volume
/// the pod does not have, one for a pod of another node. The agent checks
/// each against the live Pod and fails it with rule `request-mismatch`,
/// having read nothing; it keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forged_request_is_refused_before_anything_is_read() {
    let ns = "boundary-forged";
    let Some(KwokCluster {
        kwok,
        server,
        admin,
    }) = kwok_cluster(ns, &["kwok-a", "kwok-b"]).await
    else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let (_, mine) = pod_with_scratch(kwok, &admin, ns, "attacker", "kwok-a", root.path()).await;
    std::fs::write(mine.join("own.txt"), "mine").unwrap();
    let (victim_uid, theirs) =
        pod_with_scratch(kwok, &admin, ns, "victim", "kwok-a", root.path()).await;
    std::fs::write(theirs.join("secret"), SECRET).unwrap();
    let (_, _elsewhere) = pod_with_scratch(kwok, &admin, ns, "remote", "kwok-b", root.path()).await;

    let store_dir = tempfile::tempdir().unwrap();
    let url = store_dir.path().to_str().unwrap();
    let agent = Agent::start(server, ns, "kwok-a", root.path(), url);
    let api = Api::<VolumeBackup>::namespaced(admin.clone(), ns);
    let forged = |name: &str, pod: &str, uid: &str, volume: &str| VolumeBackup {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("iar.dev/node".to_string(), "kwok-a".to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: VolumeBackupSpec {
            backup_name: "forged".into(),
            backup_uid: String::new(),
            backup_storage_location: url.into(),
            node: "kwok-a".into(),
            pod: PodReference {
                namespace: ns.into(),
                name: pod.into(),
                uid: uid.into(),
            },
            volume: volume.into(),
            pvc: None,
            volume_dir: "scratch".into(),
            cancel: false,
        },
        status: None,
    };
    let cases = [
        forged("other-uid", "attacker", &victim_uid, "scratch"),
        forged("no-such-volume", "attacker", "", "data"),
        forged("other-node", "remote", "", "scratch"),
    ];
    for mut request in cases {
        if request.spec.pod.uid.is_empty() {
            let pod = Api::<Pod>::namespaced(admin.clone(), ns)
                .get(&request.spec.pod.name)
                .await
                .unwrap();
            request.spec.pod.uid = pod.metadata.uid.unwrap();
        }
        api.create(&PostParams::default(), &request).await.unwrap();
    }
    for name in ["other-uid", "no-such-volume", "other-node"] {
        let ended = wait_ended(&api, name).await;
        assert_eq!(ended.phase, Some(VolumePhase::Failed), "{name}: {ended:?}");
        let message = ended.message.unwrap_or_default();
        assert!(
            message.contains("rule: request-mismatch"),
            "{name}: {message}\n{}",
            agent.log()
        );
    }
    assert!(
        all_chunks(store_dir.path()).is_empty(),
        "something was read"
    );

    // It kept serving, and it stops on SIGTERM as the kubelet stops it
    // (iar is PID 1 in its image: without a handler SIGTERM would be
    // ignored and every stop would wait out the grace period).
    let mut agent = agent;
    let exit = agent.terminate(Duration::from_secs(20)).await;
    assert!(exit.success(), "{exit:?}\n{}", agent.log());
}

/// Who ends a request, in the real API server: a request the controller
/// failed (its agent silent) stays Failed when the agent comes back and
/// reports its end (the controller may have run the pod's post hooks on
/// that failure: a Completed written after them would be a snapshot whose
/// unfreeze ran before its end, as the fault campaign saw); and an end
/// the agent reported first is not overwritten by the controller's
/// failure, which takes the agent's word instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_first_end_of_a_request_stands() {
    use iar::k8s::volume_backup::VolumeBackupStatus;
    let ns = "boundary-first-end";
    let Some(KwokCluster { admin, .. }) = kwok_cluster(ns, &[]).await else {
        return;
    };
    let api = Api::<VolumeBackup>::namespaced(admin.clone(), ns);
    let request = |name: &str| VolumeBackup {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: VolumeBackupSpec {
            backup_name: "b".into(),
            backup_uid: "u".into(),
            backup_storage_location: "file:///nowhere".into(),
            node: "kwok-a".into(),
            pod: PodReference {
                namespace: ns.into(),
                name: "db-0".into(),
                uid: "p".into(),
            },
            volume: "data".into(),
            pvc: None,
            volume_dir: "data".into(),
            cancel: false,
        },
        status: None,
    };
    let in_progress = VolumeBackupStatus {
        phase: Some(VolumePhase::InProgress),
        ..VolumeBackupStatus::default()
    };
    let completed = VolumeBackupStatus {
        phase: Some(VolumePhase::Completed),
        snapshot_id: Some("restic/ns/snap".into()),
        ..VolumeBackupStatus::default()
    };
    for name in ["failed-first", "completed-first"] {
        api.create(&PostParams::default(), &request(name))
            .await
            .unwrap();
        iar::k8s::node_agent::report_end(&api, name, &in_progress).await;
    }
    // The controller fails a silent request; the agent's late end is
    // dropped.
    let ended = iar::k8s::volume_requests::fail_request(&api, "failed-first", "silent").await;
    assert_eq!(ended, None);
    // Neither a progress report (the agent's heartbeat, which used to put
    // the request back InProgress) nor its end overwrites the failure.
    iar::k8s::node_agent::report_end(&api, "failed-first", &in_progress).await;
    iar::k8s::node_agent::report_end(&api, "failed-first", &completed).await;
    let status = api.get("failed-first").await.unwrap().status.unwrap();
    assert_eq!(status.phase, Some(VolumePhase::Failed), "{status:?}");
    assert_eq!(status.message.as_deref(), Some("silent"));
    assert_eq!(status.snapshot_id, None);
    // The agent's end came first: the controller takes it, writes nothing.
    iar::k8s::node_agent::report_end(&api, "completed-first", &completed).await;
    let ended = iar::k8s::volume_requests::fail_request(&api, "completed-first", "silent").await;
    assert_eq!(ended.and_then(|s| s.phase), Some(VolumePhase::Completed));
    let status = api.get("completed-first").await.unwrap().status.unwrap();
    assert_eq!(status.phase, Some(VolumePhase::Completed), "{status:?}");
}

/// deploy/node-agent.yaml's ValidatingAdmissionPolicy, in the real API
/// server: an agent authenticated by its pod's service-account token (the
/// token carries the pod's node) writes the status of its own node's
/// requests and is refused another node's, naming the rule. Installed
/// under another namespace than `iar-system` (the other tests' agents use
/// static tokens, no node name), with the policy exactly as shipped: it
/// matches the agent's service account wherever iar is installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_writes_only_its_own_nodes_requests() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use k8s_openapi::api::authentication::v1::{
        BoundObjectReference, TokenRequest, TokenRequestSpec,
    };
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kube::api::{Patch, PatchParams};
    let ns = "own-node";
    let Some(KwokCluster {
        kwok,
        server,
        admin,
    }) = kwok_cluster(ns, &["kwok-a", "kwok-b"]).await
    else {
        return;
    };
    let deploy = crate::support::repo().join("deploy/node-agent.yaml");
    // The policy as shipped (only renamed): installed into another
    // namespace, it must still match the agent's service account there.
    let shipped = std::fs::read_to_string(&deploy)
        .unwrap()
        .replace("name: iar-node-agent-own-node", "name: own-node-test")
        .replace(
            "policyName: iar-node-agent-own-node",
            "policyName: own-node-test",
        );
    let text = shipped.replace("iar-system", ns);
    let moved = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(moved.path(), &text).unwrap();
    crate::controller::apply_rbac(&admin, moved.path()).await;
    for doc in iar::yaml::manifests::<serde_json::Value>(&shipped).unwrap() {
        let created = match doc["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => {
                Api::<ValidatingAdmissionPolicy>::all(admin.clone())
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(doc).unwrap(),
                    )
                    .await
                    .map(|_| ())
            }
            Some("ValidatingAdmissionPolicyBinding") => {
                Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone())
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(doc).unwrap(),
                    )
                    .await
                    .map(|_| ())
            }
            _ => Ok(()),
        };
        match created {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("creating the policy: {e}"),
        }
    }
    // The agent's pod on kwok-a, running as the agent's service account.
    let agent_pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "agent-a"},
        "spec": {
            "nodeName": "kwok-a",
            "serviceAccountName": "iar-node-agent",
            "containers": [{"name": "agent", "image": "iar:0.1.0"}],
        },
    }))
    .unwrap();
    let uid_a = Api::<Pod>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &agent_pod)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    kwok.wait_running(&admin, ns, "agent-a").await;
    let requests = Api::<VolumeBackup>::namespaced(admin.clone(), ns);
    for node in ["kwok-a", "kwok-b"] {
        let request = VolumeBackup {
            metadata: ObjectMeta {
                name: Some(format!("on-{node}")),
                ..ObjectMeta::default()
            },
            spec: VolumeBackupSpec {
                backup_name: "b".into(),
                backup_uid: "u".into(),
                backup_storage_location: "memory://".into(),
                node: node.into(),
                pod: PodReference::default(),
                volume: "v".into(),
                pvc: None,
                volume_dir: "v".into(),
                cancel: false,
            },
            status: None,
        };
        requests
            .create(&PostParams::default(), &request)
            .await
            .unwrap();
    }
    // The token kubelet would mount into the agent's pod on kwok-a.
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request(
            "iar-node-agent",
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    bound_object_ref: Some(BoundObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        name: Some("agent-a".into()),
                        uid: Some(uid_a),
                    }),
                    expiration_seconds: Some(3600),
                    ..TokenRequestSpec::default()
                }),
                ..TokenRequest::default()
            },
        )
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(server.kubeconfig()).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.auth_info.token = Some(token.into());
    let agent = Api::<VolumeBackup>::namespaced(kube::Client::try_from(config).unwrap(), ns);
    let report = Patch::Merge(json!({"status": {"phase": "Failed", "message": "forged"}}));
    // A new policy takes effect once the API server has read it: wait for
    // that with dry runs (admission runs for them; nothing is written).
    let dry = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    iar_tests::wait_for("the policy in force", Duration::from_secs(60), || {
        let (agent, report, dry) = (agent.clone(), report.clone(), dry.clone());
        async move {
            match agent.patch_status("on-kwok-b", &dry, &report).await {
                Err(e) if e.to_string().contains("rule own-node-requests") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    agent
        .patch_status("on-kwok-a", &PatchParams::default(), &report)
        .await
        .expect("its own node's request");
    let refused = agent
        .patch_status("on-kwok-b", &PatchParams::default(), &report)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("rule own-node-requests"),
        "{refused}"
    );
    let untouched = requests.get("on-kwok-b").await.unwrap();
    assert_eq!(untouched.status, None);
}

/// Requests the controller's policy would never make, each under a
/// running Backup: another tenant's Secret volume (under a Backup of
/// that namespace, and under one covering only another namespace), and
/// an emptyDir of a namespace the Backup does not cover. The agent
/// refuses each, naming the request and the rule (`volume-type`,
/// `backup-scope`), and reads nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_for_a_secret_or_an_uncovered_namespace_is_refused() {
    use iar::k8s::crd::BackupSpec;
    use kube::api::{Patch, PatchParams};
    let ns = "boundary-policy";
    let tenant = "boundary-tenant";
    let Some(KwokCluster {
        kwok,
        server,
        admin,
    }) = kwok_cluster(ns, &["kwok-a"]).await
    else {
        return;
    };
    iar_apiserver::create_namespace(&admin, tenant).await;
    let root = tempfile::tempdir().unwrap();
    let victim: Pod = serde_json::from_value(json!({
        "metadata": {"name": "victim"},
        "spec": {
            "nodeName": "kwok-a",
            "containers": [{"name": "app", "image": "registry.example/app:1"}],
            "volumes": [
                {"name": "creds", "secret": {"secretName": "db"}},
                {"name": "scratch", "emptyDir": {}},
            ],
        },
    }))
    .unwrap();
    let victim_uid = Api::<Pod>::namespaced(admin.clone(), tenant)
        .create(&PostParams::default(), &victim)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    kwok.wait_running(&admin, tenant, "victim").await;
    let volumes = root.path().join(format!("pods/{victim_uid}/volumes"));
    for dir in [
        "kubernetes.io~secret/creds",
        "kubernetes.io~empty-dir/scratch",
    ] {
        std::fs::create_dir_all(volumes.join(dir)).unwrap();
        std::fs::write(volumes.join(dir).join("secret"), SECRET).unwrap();
    }
    // Two running Backups: one of the tenant's namespace, one of another.
    let backups = Api::<iar::k8s::crd::Backup>::namespaced(admin.clone(), ns);
    let mut uids = std::collections::HashMap::new();
    for (name, covers) in [("of-tenant", tenant), ("of-elsewhere", "elsewhere")] {
        create_backup(
            &admin,
            ns,
            name,
            BackupSpec {
                included_namespaces: Some(vec![covers.into()]),
                ..BackupSpec::default()
            },
        )
        .await;
        backups
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "InProgress"}})),
            )
            .await
            .unwrap();
        let uid = backups.get(name).await.unwrap().metadata.uid.unwrap();
        uids.insert(name, uid);
    }

    let store_dir = tempfile::tempdir().unwrap();
    let url = store_dir.path().to_str().unwrap();
    let agent = Agent::start(server, ns, "kwok-a", root.path(), url);
    let api = Api::<VolumeBackup>::namespaced(admin.clone(), ns);
    let cases = [
        (
            "secret-of-tenant",
            "of-tenant",
            "creds",
            "rule: volume-type",
        ),
        (
            "secret-of-elsewhere",
            "of-elsewhere",
            "creds",
            "rule: volume-type",
        ),
        (
            "scratch-of-elsewhere",
            "of-elsewhere",
            "scratch",
            "rule: backup-scope",
        ),
    ];
    for (name, backup, volume, _) in cases {
        let request = VolumeBackup {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([("iar.dev/node".to_string(), "kwok-a".to_string())].into()),
                ..ObjectMeta::default()
            },
            spec: VolumeBackupSpec {
                backup_name: backup.into(),
                backup_uid: uids[backup].clone(),
                backup_storage_location: url.into(),
                node: "kwok-a".into(),
                pod: PodReference {
                    namespace: tenant.into(),
                    name: "victim".into(),
                    uid: victim_uid.clone(),
                },
                volume: volume.into(),
                pvc: None,
                volume_dir: volume.into(),
                cancel: false,
            },
            status: None,
        };
        api.create(&PostParams::default(), &request).await.unwrap();
    }
    for (name, _, _, rule) in cases {
        let ended = wait_ended(&api, name).await;
        assert_eq!(ended.phase, Some(VolumePhase::Failed), "{name}: {ended:?}");
        let message = ended.message.unwrap_or_default();
        assert!(
            message.contains(rule) && message.contains(name),
            "{name}: {message}\n{}",
            agent.log()
        );
    }
    assert!(
        all_chunks(store_dir.path()).is_empty(),
        "something was read"
    );
    let mut stack = vec![store_dir.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            assert!(p.is_dir(), "written to the store: {}", p.display());
            stack.push(p);
        }
    }
}
