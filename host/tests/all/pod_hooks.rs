//! Backup hooks in the pod's container on a real cluster path: iar's
//! `pods/exec` runner → the real kube-apiserver → kwok playing the node's
//! kubelet (the real kubelet protocol), whose `Exec` resource runs the
//! command as a local process in a directory the test owns. That directory
//! stands in for the container's filesystem: the one part no kubelet here
//! can provide.

use crate::controller::{create_backup, install_crds, spec, start_controller, wait_phase};
use crate::support::{client, server, store};
use iar::backup::hooks::{
    ExecHook, HookPhase, HookRunner, HookSource, HookStatus, HookTarget, OnError, ResolvedHook,
};
use iar::backup::object::BackupPhase;
use iar::item::ItemRef;
use iar::k8s::crd::BackupSpec;
use iar::k8s::exec::PodExecRunner;
use iar::k8s::plugins::PluginRegistry;
use iar_apiserver::kwok::Kwok;
use iar_apiserver::{User, create_namespace};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

pub(crate) async fn kwok() -> Option<&'static Kwok> {
    server().await?;
    iar_apiserver::kwok::shared().await
}

/// What a kwok test starts from: the shared API server and kwok, an admin
/// client, iar's CRDs installed, namespace `ns` created and kwok's nodes
/// `nodes` Ready.
pub(crate) struct KwokCluster {
    pub kwok: &'static Kwok,
    pub server: &'static iar_apiserver::ApiServer,
    pub admin: Client,
}

/// `None` when the tests skip (no Go to build kwok with; loud).
pub(crate) async fn kwok_cluster(ns: &str, nodes: &[&str]) -> Option<KwokCluster> {
    let kwok = kwok().await?;
    let server = server().await?;
    let admin = client(server, User::Admin).await;
    install_crds(&admin).await;
    create_namespace(&admin, ns).await;
    for node in nodes {
        kwok.add_node(&admin, node).await;
    }
    Some(KwokCluster {
        kwok,
        server,
        admin,
    })
}

/// Creates pod `name` bound to `node` (no scheduler runs), with two
/// containers and `annotations`.
async fn create_pod(
    client: &Client,
    ns: &str,
    name: &str,
    node: &str,
    annotations: serde_json::Value,
) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}, "annotations": annotations},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "app", "image": "registry.example/app:1"},
                {"name": "sidecar", "image": "registry.example/sidecar:1"},
            ],
        },
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("create pod {ns}/{name}: {e}"));
}

/// A running pod whose execs run in `dir`.
pub(crate) async fn running_pod(
    kwok: &Kwok,
    client: &Client,
    ns: &str,
    name: &str,
    annotations: serde_json::Value,
    dir: &Path,
) {
    create_pod(client, ns, name, "kwok-a", annotations).await;
    kwok.local_exec(client, ns, name, dir, &[]).await;
    kwok.wait_running(client, ns, name).await;
}

fn pods_spec(ns: &str) -> BackupSpec {
    BackupSpec {
        included_resources: Some(vec!["pods".into()]),
        label_selector: Some(LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: None,
        }),
        ..spec(ns)
    }
}

/// The controller runs a pod's pre and post hooks in its container: the
/// pre hook's file is there before the post hook reads it, the backup
/// counts both in `status.hookStatus`, and what they printed is in the
/// backup's log. Before, the controller recorded every hook as skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_controller_runs_hooks_in_the_pods_container() {
    let ns = "exec-shop";
    let Some(KwokCluster { kwok, admin, .. }) = kwok_cluster(ns, &["kwok-a"]).await else {
        return;
    };
    let container = tempfile::tempdir().unwrap();
    running_pod(
        kwok,
        &admin,
        ns,
        "db-0",
        json!({
            "pre.hook.backup.velero.io/container": "app",
            "pre.hook.backup.velero.io/command":
                r#"["sh", "-c", "echo quiesced > pre.txt; echo said-pre; echo note-pre >&2"]"#,
            "post.hook.backup.velero.io/container": "app",
            "post.hook.backup.velero.io/command":
                r#"["sh", "-c", "cat pre.txt > post.txt; echo thawed >> post.txt"]"#,
        }),
        container.path(),
    )
    .await;

    let (_store_dir, store) = store();
    let (_, controller) = start_controller(
        admin.clone(),
        ns,
        store.clone(),
        Vec::new(),
        PluginRegistry::new(),
    )
    .await;
    create_backup(&admin, ns, "hooked", pods_spec(ns)).await;
    let done = wait_phase(&admin, ns, "hooked", BackupPhase::Completed).await;
    controller.abort();
    let status = done.status.unwrap();
    let hooks = status.hook_status.expect("hooks ran");
    assert_eq!(
        (hooks.hooks_attempted, hooks.hooks_failed),
        (2, 0),
        "{}",
        kwok.log()
    );
    assert_eq!(
        std::fs::read_to_string(container.path().join("post.txt")).unwrap(),
        "quiesced\nthawed\n",
        "the post hook ran after the pre hook, in the same container"
    );
    let log = store.get_logs("hooked").await.unwrap().unwrap().join("\n");
    assert!(log.contains("said-pre"), "{log}");
    assert!(log.contains("note-pre"), "{log}");
    assert!(!log.contains("skipped"), "{log}");
}

pub(crate) fn hook(
    container: &str,
    command: &[&str],
    on_error: OnError,
    timeout: Duration,
) -> ResolvedHook {
    ResolvedHook {
        source: HookSource::Annotation,
        phase: HookPhase::Pre,
        hook: ExecHook {
            container: container.into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            on_error,
            timeout,
        },
    }
}

pub(crate) fn target(ns: &str, pod: &str) -> HookTarget {
    HookTarget {
        pod: ItemRef::new("", "pods", ns, pod),
        ..HookTarget::default()
    }
}

/// Velero's checks before an exec, and how one ends, each through the real
/// exec path: a container the pod does not have and a pod that is not
/// Running are refused without an exec; a hook past its timeout is
/// TimedOut; a non-zero exit is a failure that keeps the hook's stderr;
/// stdout comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exec_hooks_are_checked_and_bounded_as_velero_does() {
    let ns = "exec-rules";
    let Some(KwokCluster { kwok, admin, .. }) = kwok_cluster(ns, &["kwok-a"]).await else {
        return;
    };
    let container = tempfile::tempdir().unwrap();
    running_pod(kwok, &admin, ns, "app-0", json!({}), container.path()).await;
    // Bound to a node no kubelet (no kwok) serves: it stays Pending.
    create_pod(&admin, ns, "pending-0", "no-kubelet", json!({})).await;
    let runner = PodExecRunner::new(admin.clone());
    let ten = Duration::from_secs(10);

    let ok = runner
        .run(
            &target(ns, "app-0"),
            &hook("sidecar", &["sh", "-c", "echo hi; pwd"], OnError::Fail, ten),
        )
        .await;
    assert_eq!(ok.status, HookStatus::Succeeded, "{}", kwok.log());
    let here = container.path().canonicalize().unwrap();
    assert_eq!(ok.output.stdout, format!("hi\n{}\n", here.display()));

    let missing = runner
        .run(
            &target(ns, "app-0"),
            &hook("db", &["true"], OnError::Fail, ten),
        )
        .await;
    let HookStatus::Failed {
        exit_code: None,
        stderr_tail,
    } = missing.status
    else {
        panic!("ran in a container the pod does not have: {missing:?}");
    };
    assert!(
        stderr_tail.contains("no such container: \"db\""),
        "{stderr_tail}"
    );

    let pending = runner
        .run(
            &target(ns, "pending-0"),
            &hook("app", &["true"], OnError::Fail, ten),
        )
        .await;
    assert_eq!(
        pending.status,
        HookStatus::Failed {
            exit_code: None,
            stderr_tail: "pod is not running (phase Pending)".into()
        }
    );

    let gone = runner
        .run(
            &target(ns, "no-such-pod"),
            &hook("app", &["true"], OnError::Fail, ten),
        )
        .await;
    assert_eq!(
        gone.status,
        HookStatus::Failed {
            exit_code: None,
            stderr_tail: "pod not found".into()
        }
    );

    let slow = runner
        .run(
            &target(ns, "app-0"),
            &hook(
                "app",
                &["sleep", "30"],
                OnError::Fail,
                Duration::from_secs(1),
            ),
        )
        .await;
    assert_eq!(slow.status, HookStatus::TimedOut);

    let failing = runner
        .run(
            &target(ns, "app-0"),
            &hook(
                "app",
                &["sh", "-c", "echo disk-full >&2; exit 3"],
                OnError::Continue,
                ten,
            ),
        )
        .await;
    let HookStatus::Failed {
        exit_code,
        stderr_tail,
    } = failing.status
    else {
        panic!("a non-zero exit is a failure: {failing:?}");
    };
    assert!(stderr_tail.contains("disk-full"), "{stderr_tail}");
    // A kubelet sends the code as the status's ExitCode cause; kwok v0.8.0
    // sends an internal error whose message names it instead.
    assert!(
        exit_code == Some(3) || stderr_tail.contains("exit status 3"),
        "{exit_code:?} {stderr_tail}"
    );
}

/// `onError` decides what a failed pre hook means for the backup, on the
/// real exec path: `Fail` fails the pod's block (the backup is
/// PartiallyFailed) and its post hook does not run; `Continue` warns and,
/// as in Velero v1.18, the pod's post hook still runs (a freeze that
/// failed or overran may still have frozen: the unfreeze must run).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_pre_hook_fails_the_block_or_warns_and_keeps_the_post_hook() {
    let ns = "exec-failing";
    let Some(KwokCluster { kwok, admin, .. }) = kwok_cluster(ns, &["kwok-a"]).await else {
        return;
    };
    let failing = |on_error: &str| {
        json!({
            "pre.hook.backup.velero.io/command": r#"["sh", "-c", "echo no-quiesce >&2; exit 3"]"#,
            "pre.hook.backup.velero.io/on-error": on_error,
            "post.hook.backup.velero.io/command": r#"["sh", "-c", "touch post-ran"]"#,
        })
    };
    let (fail_dir, continue_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    running_pod(
        kwok,
        &admin,
        ns,
        "strict-0",
        failing("Fail"),
        fail_dir.path(),
    )
    .await;
    running_pod(
        kwok,
        &admin,
        ns,
        "lenient-0",
        failing("Continue"),
        continue_dir.path(),
    )
    .await;

    let (_store_dir, store) = store();
    let (_, controller) = start_controller(
        admin.clone(),
        ns,
        store.clone(),
        Vec::new(),
        PluginRegistry::new(),
    )
    .await;
    create_backup(&admin, ns, "failing", pods_spec(ns)).await;
    let done = wait_phase(&admin, ns, "failing", BackupPhase::PartiallyFailed).await;
    controller.abort();
    let status = done.status.unwrap();
    let hooks = status.hook_status.clone().expect("hooks ran");
    assert_eq!((hooks.hooks_attempted, hooks.hooks_failed), (3, 2));
    assert!(status.errors >= 1, "{status:?}");
    assert!(status.warnings >= 1, "{status:?}");
    assert!(!fail_dir.path().join("post-ran").exists());
    assert!(continue_dir.path().join("post-ran").exists());
    let log = store.get_logs("failing").await.unwrap().unwrap().join("\n");
    assert!(log.contains("no-quiesce"), "{log}");
    assert!(log.contains("strict-0"), "{log}");
}
