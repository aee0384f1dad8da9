//! Contract 1.4.0's imports. `runs`: a plugin asks for the whole Backup or
//! Restore its call belongs to. What it gets is what the producer holds (the bytes
//! Velero's server sent, iar's Backup resource), or, without one, the
//! least Velero's type needs from the call's own fields; a restore's call
//! gets no Backup and a backup's call no Restore; each ask is a host call,
//! counted against the limit. `cluster-catalog`: discovery for clients
//! inside a plugin, from the real API server's discovery or, with no API
//! server, iar's built-in table; the home namespace is the run's.

use crate::support::{artifacts, backup, item, load, load_with, never_seen, pod, runtime, server};
use iar::plugin::{RestoreRef, Violation};
use iar::{Limits, NoCluster, Phase};
use serde_json::{Value, json};
use std::sync::Arc;

fn annotation(item: &iar::Item, key: &str) -> String {
    item.value()["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("no annotation {key} on {}", item.value()))
        .to_string()
}

#[test]
fn a_backup_call_reads_the_whole_backup_its_producer_gave() {
    let rt = runtime();
    let plugin = load(&rt, artifacts::HOSTILE, &[("behavior", "run-object")]);
    let mut instance = plugin.instance(Arc::new(NoCluster));
    // As Velero's server sends it: labels, annotations, status.
    let whole = r#"{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"name":"nightly","namespace":"velero","uid":"u-1","labels":{"velero.io/schedule-name":"daily"},"annotations":{"team":"payments"}},"spec":{"ttl":"720h0m0s"},"status":{"phase":"InProgress","startTimestamp":"2026-12-07T10:00:00Z"}}"#;
    let mut given = backup(Phase::Backup);
    given.object = Some(Arc::from(whole));
    let out = instance
        .execute(&pod("web-0"), &given, &never_seen)
        .expect("runs.backup is answered");
    let item = out.item.expect("annotated");
    // Byte for byte: the host passes the producer's text, never re-encodes it.
    assert_eq!(annotation(&item, "hostile.iar.test/run"), whole);
    assert_eq!(annotation(&item, "hostile.iar.test/run-restore"), "none");
}

#[test]
fn without_a_whole_backup_the_host_builds_one_from_the_call() {
    let rt = runtime();
    let plugin = load(&rt, artifacts::HOSTILE, &[("behavior", "run-object")]);
    let mut instance = plugin.instance(Arc::new(NoCluster));
    for (phase, velero_phase) in [
        (Phase::Backup, "InProgress"),
        (Phase::Finalize, "Finalizing"),
    ] {
        let b = backup(phase);
        let out = instance.execute(&pod("web-0"), &b, &never_seen).unwrap();
        let seen: Value =
            serde_json::from_str(&annotation(&out.item.unwrap(), "hostile.iar.test/run")).unwrap();
        assert_eq!(
            seen,
            json!({"apiVersion": "velero.io/v1", "kind": "Backup",
                "metadata": {"name": b.name, "namespace": b.namespace, "uid": b.uid},
                "spec": b.spec, "status": {"phase": velero_phase}})
        );
    }
}

#[test]
fn asking_for_the_backup_is_a_host_call_within_the_limit() {
    let rt = runtime();
    let limits = Limits {
        max_host_calls: 20,
        ..Limits::default()
    };
    // 20 asks for the backup and the one for the restore: 21.
    let plugin = load_with(
        &rt,
        artifacts::HOSTILE,
        &[("behavior", "run-object"), ("run-gets", "20")],
        limits,
    );
    let err = plugin
        .instance(Arc::new(NoCluster))
        .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
        .unwrap_err();
    assert_eq!(err.violation, Violation::HostCalls { limit: 20 });
    assert!(err.to_string().contains("(rule: host-call-limit)"), "{err}");
}

#[test]
fn a_restore_call_reads_the_whole_restore_and_no_backup() {
    let rt = runtime();
    let plugin = load(&rt, artifacts::RESTORE_HOSTILE, &[("mode", "run-object")]);
    let cm = item(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "shop"}, "data": {"k": "v"}}));
    let whole = r#"{"apiVersion":"velero.io/v1","kind":"Restore","metadata":{"name":"from-nightly","namespace":"velero","uid":"r-1","labels":{"team":"payments"}},"spec":{"backupName":"nightly"},"status":{"phase":"InProgress","startTimestamp":"2026-12-07T11:00:00Z"}}"#;
    let mut restore = RestoreRef {
        object: Some(Arc::from(whole)),
        name: "from-nightly".into(),
        namespace: "velero".into(),
        uid: "r-1".into(),
        spec: json!({"backupName": "nightly"}),
    };
    let mut instance = plugin.instance(Arc::new(NoCluster));
    let out = instance
        .restore_execute(&cm, &cm, &restore, &|_| false)
        .unwrap();
    let restored = out.item.expect("annotated");
    let seen: Value = serde_json::from_str(&annotation(&restored, "run/restore")).unwrap();
    assert_eq!(seen, serde_json::from_str::<Value>(whole).unwrap());
    assert_eq!(annotation(&restored, "run/backup"), "none");
    // Without one: built from the call, InProgress.
    restore.object = None;
    let out = instance
        .restore_execute(&cm, &cm, &restore, &|_| false)
        .unwrap();
    let seen: Value = serde_json::from_str(&annotation(&out.item.unwrap(), "run/restore")).unwrap();
    assert_eq!(seen["metadata"]["uid"], "r-1");
    assert_eq!(seen["spec"], json!({"backupName": "nightly"}));
    assert_eq!(seen["status"]["phase"], "InProgress");
}

/// A plugin that never asks imports nothing of 1.4.0 (the SDK's bindings
/// are linked only where called): it loads on a host without `runs`.
#[test]
fn a_plugin_that_never_asks_imports_no_runs() {
    let rt = runtime();
    let labels = load(&rt, artifacts::LABELS, &[]);
    assert!(
        !labels.shape().imports.iter().any(|i| i.contains("/runs@")),
        "{:?}",
        labels.shape().imports
    );
    let hostile = load(&rt, artifacts::HOSTILE, &[]);
    assert!(
        hostile
            .shape()
            .imports
            .iter()
            .any(|i| i == "iar:plugin/runs@1.4.0"),
        "{:?}",
        hostile.shape().imports
    );
}

/// Pods as discovery lists them, in the hostile guest's row form.
fn pods_row() -> Value {
    json!(["", "v1", "Pod", "pods", true, ALL_VERBS])
}

/// The verbs of a full REST resource, as the API server lists them.
const ALL_VERBS: &str = "create,delete,deletecollection,get,list,patch,update,watch";

/// What the hostile guest's `catalog` mode saw, calling `plugin` on a pod
/// of a backup in namespace `velero` against `cluster`.
fn catalog_seen(plugin: &iar::Plugin, cluster: Arc<dyn iar::ClusterReader>) -> Value {
    let mut b = backup(Phase::Backup);
    b.namespace = "velero".into();
    let out = plugin
        .instance(cluster)
        .execute(&pod("web-0"), &b, &never_seen)
        .expect("the catalog is answered");
    serde_json::from_str(&annotation(&out.item.unwrap(), "hostile.iar.test/catalog")).unwrap()
}

#[test]
fn without_an_api_server_the_catalog_is_iars_table() {
    let rt = runtime();
    let plugin = load(&rt, artifacts::HOSTILE, &[("behavior", "catalog")]);
    let seen = catalog_seen(&plugin, Arc::new(NoCluster));
    let rows = seen["resources"].as_array().expect("resources listed");
    assert_eq!(rows.len(), iar::catalog::Catalog::builtin().iter().count());
    assert!(rows.contains(&pods_row()));
    assert!(rows.contains(&json!([
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        ALL_VERBS
    ])));
    assert_eq!(
        seen["version"],
        "error:there is no API server: the cluster is manifests (rule: no-api-server)"
    );
    assert_eq!(seen["home"], "velero");
}

/// Against the real API server: what its discovery serves, at each
/// group's preferred version, with its verbs and scope, and its
/// `/version`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_an_api_server_the_catalog_is_its_discovery() {
    let Some(server) = server().await else {
        return;
    };
    let client = crate::support::client(server, iar_apiserver::User::Admin).await;
    let expected = client.apiserver_version().await.unwrap();
    let rt = runtime();
    let plugin = load(&rt, artifacts::HOSTILE, &[("behavior", "catalog")]);
    let cluster: Arc<dyn iar::ClusterReader> = Arc::new(iar::k8s::live::LiveCluster::new(
        client,
        tokio::runtime::Handle::current(),
    ));
    let seen = tokio::task::spawn_blocking(move || catalog_seen(&plugin, cluster))
        .await
        .unwrap();
    assert_eq!(seen["version"], expected.git_version.as_str());
    assert_eq!(seen["home"], "velero");
    let rows = seen["resources"].as_array().expect("resources listed");
    let find = |group: &str, resource: &str| {
        rows.iter()
            .find(|r| r[0] == group && r[3] == resource)
            .unwrap_or_else(|| panic!("{resource}.{group} not in {rows:?}"))
            .clone()
    };
    assert_eq!(find("", "pods"), pods_row());
    assert_eq!(find("", "namespaces")[4], false);
    // A read-only resource keeps its verbs.
    let reviews = find("authentication.k8s.io", "tokenreviews");
    assert_eq!(reviews[5], "create");
    // Each group at its preferred version.
    assert_eq!(find("apps", "deployments")[1], "v1");
    assert_eq!(find("autoscaling", "horizontalpodautoscalers")[1], "v2");
    // No subresources.
    assert!(!rows.iter().any(|r| r[3].as_str().unwrap().contains('/')));
}
