//! Pod volume data back into restored pods, on the real API server with
//! the real node agent: a Restore of a backup whose pods' volumes were
//! backed up file by file creates each pod waiting for its data (the
//! `restore-wait` init container), and once the pod is on a node that
//! node's agent writes the volume's snapshot into the pod's volume where
//! the kubelet mounts it, then the file the wait ends on.
//!
//! Simulated, because no kubelet runs here: the scheduler's binding (the
//! test binds), and the pod volume directories under the kubelet root,
//! which the test lays out as the kubelet would.

use crate::controller::{create_backup, start_controller, wait_phase};
use crate::node_agent::{Agent, fs_backup_spec};
use crate::node_boundary::pod_with_scratch;
use crate::restore::{create_restore, restore_ended};
use iar::backup::object::BackupPhase;
use iar::backup::volumes::VolumePhase;
use iar::k8s::crd::Restore;
use iar::k8s::plugins::PluginRegistry;
use iar::k8s::volume_backup::PodReference;
use iar::k8s::volume_restore::{VolumeRestore, VolumeRestoreSpec};
use iar::store::BackupStore;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

const EMPTY_DIR: &str = "kubernetes.io~empty-dir";

fn volume_dir(root: &Path, uid: &str) -> PathBuf {
    root.join(format!("pods/{uid}/volumes/{EMPTY_DIR}/scratch"))
}

/// Binds restored pod `name` to `node`, as the scheduler would, and lays
/// out its volume's directory as the kubelet would; the directory.
async fn schedule(client: &Client, ns: &str, name: &str, node: &str, root: &Path) -> PathBuf {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = iar_tests::wait_for(
        &format!("restored pod {ns}/{name}"),
        Duration::from_secs(120),
        || {
            let pods = pods.clone();
            async move { pods.get(name).await.map_err(|e| e.to_string()) }
        },
    )
    .await;
    let dir = volume_dir(root, pod.metadata.uid.as_deref().unwrap());
    std::fs::create_dir_all(&dir).unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    pods.create_subresource::<Value, Value>("binding", name, &PostParams::default(), &binding)
        .await
        .unwrap();
    dir
}

/// The VolumeRestore `name`'s status once it has ended.
async fn request_ended(
    api: &Api<VolumeRestore>,
    name: &str,
) -> iar::k8s::volume_restore::VolumeRestoreStatus {
    iar_tests::wait_for(
        &format!("volume restore {name} to end"),
        Duration::from_secs(120),
        || async move {
            let r = api.get(name).await.map_err(|e| e.to_string())?;
            r.status
                .filter(|s| s.phase.is_some_and(|p| p.is_terminal()))
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await
}

/// The same backup restored into another namespace: each pod waits for its
/// volume's data, the node agent writes it byte for byte (a symlink as a
/// symlink), then the file the wait ends on, and `iar restore-wait` ends
/// on it. A pod whose backed-up data plants `.velero` as a symlink out of
/// its volume gets its data but no done file there, and its volume fails
/// with rule `volume-root-symlink` (nothing written where the link
/// points). A request forged for a pod that does not wait for the restore
/// (the backed-up pod itself) is refused with rule `request-mismatch`, its
/// volume untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restore_fills_each_pods_volume_before_it_starts() {
    let (ns, target, node) = ("pvr-system", "pvr-restored", "kwok-pvr");
    let Some(crate::pod_hooks::KwokCluster {
        kwok,
        server,
        admin,
    }) = crate::pod_hooks::kwok_cluster(ns, &[node]).await
    else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let (_, web) = pod_with_scratch(kwok, &admin, ns, "web-0", node, root.path()).await;
    std::fs::write(web.join("index.html"), "<h1>shop</h1>\n").unwrap();
    std::fs::write(web.join("big.bin"), iar_tests::fixtures::noise(7, 1 << 20)).unwrap();
    std::fs::create_dir_all(web.join("sub/dir")).unwrap();
    std::fs::write(web.join("sub/dir/a.txt"), "a\n").unwrap();
    std::os::unix::fs::symlink("index.html", web.join("latest")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let (_, evil) = pod_with_scratch(kwok, &admin, ns, "evil-0", node, root.path()).await;
    std::fs::write(evil.join("page.html"), "evil\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), evil.join(".velero")).unwrap();

    let store_dir = tempfile::tempdir().unwrap();
    let url = store_dir.path().to_str().unwrap();
    let store = BackupStore::open(url).unwrap();
    let agent = Agent::start(server, ns, node, root.path(), url);
    let (_, controller) = start_controller(
        admin.clone(),
        ns,
        store.clone(),
        Vec::new(),
        PluginRegistry::new(),
    )
    .await;
    create_backup(&admin, ns, "vols", fs_backup_spec(ns)).await;
    let backed_up = wait_phase(&admin, ns, "vols", BackupPhase::Completed).await;
    assert_eq!(
        backed_up.status.as_ref().unwrap().errors,
        0,
        "{backed_up:?}\n{}",
        agent.log()
    );
    // Changed since: what the restore writes is the backup's.
    std::fs::write(web.join("index.html"), "changed\n").unwrap();

    let restores = Api::<Restore>::namespaced(admin.clone(), ns);
    create_restore(
        &restores,
        "back",
        json!({"backupName": "vols", "includedNamespaces": [ns], "includedResources": ["pods"],
               "namespaceMapping": {ns: target}}),
    )
    .await;
    let restored_pods: Api<Pod> = Api::namespaced(admin.clone(), target);
    let waiting = iar_tests::wait_for("the restored pod", Duration::from_secs(120), || {
        let pods = restored_pods.clone();
        async move { pods.get("web-0").await.map_err(|e| e.to_string()) }
    })
    .await;
    let restore_uid = restores.get("back").await.unwrap().metadata.uid.unwrap();
    let init = &waiting
        .spec
        .as_ref()
        .unwrap()
        .init_containers
        .as_ref()
        .unwrap()[0];
    assert_eq!(init.name, "restore-wait");
    assert_eq!(init.image.as_deref(), Some("iar:test"));
    assert_eq!(
        init.command.as_deref().unwrap(),
        [
            "/usr/local/bin/iar",
            "restore-wait",
            restore_uid.as_str(),
            "/restores/scratch"
        ]
    );

    // A forged request while the restore runs: the backed-up pod, which
    // waits for nothing, as the target.
    let requests = Api::<VolumeRestore>::namespaced(admin.clone(), ns);
    let source_uid = Api::<Pod>::namespaced(admin.clone(), ns)
        .get("web-0")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let mut forged = VolumeRestore::new(
        "forged",
        VolumeRestoreSpec {
            restore_name: "back".into(),
            restore_uid: restore_uid.clone(),
            backup_name: "vols".into(),
            backup_storage_location: store.url().to_string(),
            node: node.into(),
            pod: PodReference {
                namespace: ns.into(),
                name: "web-0".into(),
                uid: source_uid,
            },
            volume: "scratch".into(),
            source_namespace: ns.into(),
            source_pod: "web-0".into(),
        },
    );
    forged.metadata.labels = Some(
        [(
            iar::k8s::volume_backup::NODE_LABEL.to_string(),
            iar::k8s::volume_backup::node_label(node),
        )]
        .into(),
    );
    requests
        .create(&PostParams::default(), &forged)
        .await
        .unwrap();
    let refused = request_ended(&requests, "forged").await;
    assert_eq!(refused.phase, Some(VolumePhase::Failed), "{refused:?}");
    let why = refused.message.clone().unwrap_or_default();
    assert!(why.contains("rule: request-mismatch"), "{why}");
    assert_eq!(
        std::fs::read_to_string(web.join("index.html")).unwrap(),
        "changed\n"
    );

    let restored_web = schedule(&admin, target, "web-0", node, root.path()).await;
    let restored_evil = schedule(&admin, target, "evil-0", node, root.path()).await;
    let done = restore_ended(&restores, "back", Duration::from_secs(180)).await;
    assert_eq!(
        done.phase.as_deref(),
        Some("PartiallyFailed"),
        "{done:?}\n{}",
        agent.log()
    );
    let counts = done.pod_volume_restores.clone().expect("pod volume counts");
    assert_eq!((counts.completed, counts.failed), (1, 1), "{done:?}");
    let described = tokio::task::block_in_place(|| {
        crate::support::iar(&["describe", "back", "--restore", "--store", url])
    });
    let out = crate::support::text(&described);
    assert!(out.contains("Pod volumes:  1 restored, 1 failed"), "{out}");
    assert!(out.contains("rule: volume-root-symlink"), "{out}");

    let read = |d: &Path, f: &str| std::fs::read(d.join(f)).unwrap_or_default();
    assert_eq!(read(&restored_web, "index.html"), b"<h1>shop</h1>\n");
    assert_eq!(
        read(&restored_web, "big.bin"),
        iar_tests::fixtures::noise(7, 1 << 20)
    );
    assert_eq!(read(&restored_web, "sub/dir/a.txt"), b"a\n");
    assert_eq!(
        std::fs::read_link(restored_web.join("latest")).unwrap(),
        Path::new("index.html")
    );
    let done_file = restored_web.join(format!(".velero/{restore_uid}"));
    assert!(done_file.is_file(), "{}", agent.log());
    // What the init container runs ends on it.
    let waited = std::process::Command::new(crate::support::iar_bin())
        .args(["restore-wait", &restore_uid])
        .arg(&restored_web)
        .output()
        .unwrap();
    assert!(waited.status.success(), "{waited:?}");

    // The planted link came back as a link, and nothing went through it.
    assert_eq!(read(&restored_evil, "page.html"), b"evil\n");
    assert!(
        std::fs::read_dir(outside.path()).unwrap().next().is_none(),
        "written through the planted .velero link"
    );
    let evil_requests = requests
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| r.spec.pod.namespace == target && r.spec.pod.name == "evil-0")
        .collect::<Vec<_>>();
    assert_eq!(evil_requests.len(), 1);
    // Each request goes with its Restore.
    let owner = &evil_requests[0].metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Restore", restore_uid.as_str())
    );
    let status = evil_requests[0].status.clone().unwrap();
    assert_eq!(status.phase, Some(VolumePhase::Failed), "{status:?}");
    assert!(
        status
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("rule: volume-root-symlink"),
        "{status:?}"
    );
    controller.abort();
}
