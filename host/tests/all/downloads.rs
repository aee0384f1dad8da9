//! DownloadRequests, as Velero's CLI reads a backup's log from a laptop
//! without the bucket's credentials: `iar logs NAME --cluster` and `iar
//! describe NAME [--restore] --cluster` through the real controller, the real API
//! server and versitygw's presigned URLs, printing what the store holds;
//! a target iar does not keep, or a name that climbs out of the store,
//! refused by rule in the request's status.

use crate::controller::{
    create_backup, create_config_map, install_crds, start_controller, wait_phase,
};
use crate::support::*;
use crate::velero::{s3_server, s3_store_as, tools};
use iar::backup::object::BackupPhase;
use iar::k8s::crd::{BackupSpec, DownloadRequest, DownloadRequestSpec, DownloadTarget};
use iar::k8s::plugins::PluginRegistry;
use iar_apiserver::{User, create_namespace};
use kube::api::{Api, PostParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn logs_and_describe_through_the_cluster_need_no_store_credentials() {
    let Some(server) = server().await else { return };
    let Some(tools) = tools() else { return };
    let admin = client(server, User::Admin).await;
    install_crds(&admin).await;
    let (ns, app) = ("dl-system", "dl-app");
    create_namespace(&admin, ns).await;
    create_namespace(&admin, app).await;
    create_config_map(&admin, app, "settings", "dl").await;
    let root = tempfile::tempdir().unwrap();
    let (_gateway, endpoint) = s3_server(&tools, root.path());
    let store = s3_store_as(&endpoint, None);
    let (_, controller) =
        start_controller(admin.clone(), ns, store, Vec::new(), PluginRegistry::new()).await;
    let spec = BackupSpec {
        included_namespaces: Some(vec![app.into()]),
        ..BackupSpec::default()
    };
    create_backup(&admin, ns, "dl-nightly", spec).await;
    wait_phase(&admin, ns, "dl-nightly", BackupPhase::Completed).await;

    // Only the API server: no AWS_* in the environment.
    let through = |args: &[&str]| {
        let mut command = iar_command(args);
        command
            .args(["--cluster", "--namespace", ns])
            .env("KUBECONFIG", server.kubeconfig());
        for (key, _) in std::env::vars() {
            if key.starts_with("AWS_") || key == "IAR_STORE" {
                command.env_remove(key);
            }
        }
        tokio::task::block_in_place(|| command.output().unwrap())
    };
    let logs = through(&["logs", "dl-nightly"]);
    assert!(logs.status.success(), "{}", text(&logs));
    let printed = String::from_utf8_lossy(&logs.stdout);
    // The store's own log, line for line (read here with its credentials).
    let stored = s3_store_as(&endpoint, None)
        .get_logs("dl-nightly")
        .await
        .unwrap()
        .unwrap();
    assert!(!stored.is_empty());
    assert_eq!(printed.lines().collect::<Vec<_>>(), stored, "{printed}");

    let described = through(&["describe", "dl-nightly"]);
    assert!(described.status.success(), "{}", text(&described));
    let described = String::from_utf8_lossy(&described.stdout);
    assert!(described.contains("Phase:        Completed"), "{described}");
    assert!(
        described.contains(&format!("Namespaces:   {app}")),
        "{described}"
    );

    // A Restore of it, run by the controller, described and its log read
    // through the cluster as well.
    let restores = Api::<iar::k8s::crd::Restore>::namespaced(admin.clone(), ns);
    let spec = serde_json::json!({"backupName": "dl-nightly",
        "namespaceMapping": {app: "dl-app-restored"}, "includeClusterResources": false});
    crate::restore::create_restore(&restores, "dl-back", spec).await;
    let ended =
        crate::restore::restore_ended(&restores, "dl-back", std::time::Duration::from_secs(120))
            .await;
    assert_eq!(ended.phase.as_deref(), Some("Completed"), "{ended:?}");
    let described = through(&["describe", "dl-back", "--restore"]);
    assert!(described.status.success(), "{}", text(&described));
    let described = String::from_utf8_lossy(&described.stdout);
    for line in [
        "Backup:       dl-nightly",
        "Phase:        Completed",
        "Errors:       0",
    ] {
        assert!(described.contains(line), "{line}: {described}");
    }
    let logs = through(&["logs", "dl-back", "--restore"]);
    assert!(logs.status.success(), "{}", text(&logs));
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("created"),
        "{}",
        text(&logs)
    );

    // A backup that is not there; a kind iar keeps no file for; a name
    // that is no object name: each refused with its reason.
    let missing = through(&["logs", "no-such-backup"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("has no such file"),
        "{}",
        text(&missing)
    );
    let requests = Api::<DownloadRequest>::namespaced(admin.clone(), ns);
    for (kind, name, rule) in [
        ("BackupVolumeInfos", "dl-nightly", "not one iar keeps"),
        ("BackupLog", "../dl-nightly", "rule: download-target"),
        ("RestoreResults", "../dl-back", "rule: download-target"),
    ] {
        let made = requests
            .create(
                &PostParams::default(),
                &DownloadRequest::new(
                    &format!("hostile-{}", kind.to_lowercase()),
                    DownloadRequestSpec {
                        target: DownloadTarget {
                            kind: kind.into(),
                            name: name.into(),
                        },
                    },
                ),
            )
            .await
            .unwrap();
        let status = iar_tests::wait_for(
            "the request answered",
            std::time::Duration::from_secs(30),
            || {
                let requests = requests.clone();
                let made = made.metadata.name.clone().unwrap();
                async move {
                    let got = requests.get(&made).await.map_err(|e| e.to_string())?;
                    got.status
                        .filter(|s| s.phase.is_some())
                        .ok_or_else(|| "not yet".to_string())
                }
            },
        )
        .await;
        assert_eq!(status.phase.as_deref(), Some("Failed"), "{status:?}");
        assert!(status.download_url.is_none());
        assert!(
            status.reason.as_deref().unwrap().contains(rule),
            "{status:?}"
        );
    }
    controller.abort();
}
