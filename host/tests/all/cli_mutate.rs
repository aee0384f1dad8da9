//! Item changes are writes: `iar run --restore` refuses, by rule, a
//! restore action that turns a restored object into a way to take the
//! cluster (a ClusterRoleBinding to cluster-admin, a privileged host pod,
//! a webhook calling the attacker), whatever general grant it holds; a
//! plain label change passes with a grant and is refused without. And what
//! a restore action asks of the restore is held to it: additional items
//! within the Restore's filters, waits with items and bounded.

use crate::support::{iar, stdout_json};
use iar_tests::artifacts;
use serde_json::{Value, json};

/// Runs restore-hostile in `mode` on `item` as restored, with `--allow-mutate`
/// for each of `grants`; the exit code and the report.
fn restore(mode: &str, resources: &str, item: Value, grants: &[&str]) -> (Option<i32>, Value) {
    restore_with(
        mode,
        resources,
        item,
        grants,
        json!({"backupName": "nightly"}),
    )
}

/// [`restore`] under a Restore with `spec`.
fn restore_with(
    mode: &str,
    resources: &str,
    item: Value,
    grants: &[&str],
    spec: Value,
) -> (Option<i32>, Value) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("item.json");
    std::fs::write(&path, item.to_string()).unwrap();
    let restore = dir.path().join("restore.json");
    std::fs::write(
        &restore,
        json!({"apiVersion": "velero.io/v1", "kind": "Restore",
            "metadata": {"name": "r1", "namespace": "velero"}, "spec": spec})
        .to_string(),
    )
    .unwrap();
    let mode = format!("mode={mode}");
    let resources = format!("resources={resources}");
    let mut args = vec![
        "run",
        "--plugin",
        artifacts::RESTORE_HOSTILE,
        "--item",
        path.to_str().unwrap(),
        "--restore",
        "--restore-object",
        restore.to_str().unwrap(),
        "--config",
        &mode,
        "--config",
        &resources,
    ];
    for g in grants {
        args.extend(["--allow-mutate", g]);
    }
    let out = iar(&args);
    (out.status.code(), stdout_json(&out))
}

fn refused_by(report: &Value, rule: &str, path: &str) {
    let error = &report["results"][0]["error"];
    assert_eq!(error["rule"], rule, "{report:#}");
    let message = error.to_string();
    assert!(message.contains(path), "{path}: {report:#}");
    assert!(
        message.contains("restore_hostile"),
        "names the plugin: {report:#}"
    );
}

#[test]
fn rights_changes_on_restore_are_refused_even_under_a_glob() {
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "viewers"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "Group", "name": "viewers", "apiGroup": "rbac.authorization.k8s.io"}]});
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]}});
    let webhook = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration", "metadata": {"name": "defaults"},
        "webhooks": [{"name": "defaults.example.com", "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {"service": {"name": "defaults", "namespace": "platform"}}}]});
    let cases = [
        (
            "escalate-binding",
            "clusterrolebindings.rbac.authorization.k8s.io",
            binding,
            ".roleRef.name",
        ),
        ("privileged-pod", "pods", pod, ".spec"),
        (
            "hijack-webhook",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io",
            webhook,
            ".webhooks[0].clientConfig",
        ),
    ];
    for (mode, resources, item, path) in cases {
        for grants in [&[][..], &["*"]] {
            let (code, report) = restore(mode, resources, item.clone(), grants);
            assert_eq!(code, Some(1), "{mode} {grants:?}: {report:#}");
            refused_by(&report, "rights-change-not-granted", path);
            assert!(
                report["finalItem"].is_null() || report["finalItem"] == item,
                "{report:#}"
            );
        }
    }
    // Named exactly, the binding change is the operator's choice.
    let (code, report) = restore(
        "escalate-binding",
        "clusterrolebindings.rbac.authorization.k8s.io",
        cases_binding(),
        &["clusterrolebindings.rbac.authorization.k8s.io"],
    );
    assert_eq!(code, Some(0), "{report:#}");
}

fn cases_binding() -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "viewers"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}})
}

#[test]
fn a_label_change_on_restore_needs_a_mutate_grant() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "shop"}, "data": {"k": "v"}});
    let (code, report) = restore("label", "configmaps", cm.clone(), &[]);
    assert_eq!(code, Some(1), "{report:#}");
    refused_by(&report, "item-change-not-granted", ".metadata.labels");
    for grant in ["configmaps", "*"] {
        let (code, report) = restore("label", "configmaps", cm.clone(), &[grant]);
        assert_eq!(code, Some(0), "{grant}: {report:#}");
        assert_eq!(report["finalItem"]["metadata"]["labels"]["restored"], "yes");
    }
}

fn settings_cm() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "shop"}, "data": {"k": "v"}})
}

#[test]
fn additional_items_stay_within_the_restore() {
    let one_namespace = json!({"backupName": "nightly", "includedNamespaces": ["shop"]});
    // A ClusterRoleBinding on a restore of one namespace, and another
    // namespace's Secret: refused, naming the item and the rule.
    for (mode, named) in [
        ("bring-binding", "attacker-admin"),
        ("bring-foreign", "payments/stolen"),
    ] {
        let (code, report) = restore_with(
            mode,
            "configmaps",
            settings_cm(),
            &[],
            one_namespace.clone(),
        );
        assert_eq!(code, Some(1), "{mode}: {report:#}");
        refused_by(&report, "additional-item-outside-restore", named);
    }
    // A restore that takes cluster resources takes the binding, as
    // Velero would; one of every namespace takes the Secret.
    let with_cluster = json!({"backupName": "nightly", "includedNamespaces": ["shop"],
        "includeClusterResources": true});
    let (code, report) = restore_with(
        "bring-binding",
        "configmaps",
        settings_cm(),
        &[],
        with_cluster,
    );
    assert_eq!(code, Some(0), "{report:#}");
    let (code, report) = restore("bring-foreign", "configmaps", settings_cm(), &[]);
    assert_eq!(code, Some(0), "{report:#}");
}

#[test]
fn a_restore_action_cannot_stall_the_restore() {
    let (code, report) = restore("wait-for-nothing", "configmaps", settings_cm(), &[]);
    assert_eq!(code, Some(1), "{report:#}");
    refused_by(&report, "wait-without-items", "restore_hostile");
    // ~292 years asked; the wait the restore is told is the bound.
    let (code, report) = restore("wait-forever", "configmaps", settings_cm(), &[]);
    assert_eq!(code, Some(0), "{report:#}");
    let output = &report["results"][0]["output"];
    assert_eq!(output["waitForAdditionalItems"], true, "{report:#}");
    assert_eq!(
        output["additionalItemsReadyTimeout"],
        json!({"secs": 600, "nanos": 0}),
        "{report:#}"
    );
}

#[test]
fn a_restore_action_sees_the_backed_up_namespace_and_the_restore_maps_it() {
    let spec = json!({"backupName": "nightly", "namespaceMapping": {"shop": "shop-copy"}});
    let (code, report) = restore_with("label", "configmaps", settings_cm(), &["configmaps"], spec);
    assert_eq!(code, Some(0), "{report:#}");
    // What the plugin returned is in the backed-up namespace (it may not
    // move the item); the item as created is in the mapped one.
    let output = &report["results"][0]["output"]["item"];
    assert_eq!(output["metadata"]["namespace"], "shop", "{report:#}");
    assert_eq!(report["finalItem"]["metadata"]["namespace"], "shop-copy");
    assert_eq!(report["item"]["namespace"], "shop-copy");
}
