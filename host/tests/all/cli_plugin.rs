//! `iar plugin configmap`: the binary's output, as a user gets it, applied
//! to a real API server (`iar-apiserver`) and loaded by the watcher.

use crate::support::{client, iar, runtime, server, stdout_json};
use iar::k8s::plugins::configmap;
use iar::k8s::plugins::{PluginRegistry, watch};
use iar_tests::{artifacts, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use std::time::Duration;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_manifest_carries_the_component_its_digest_and_settings() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("labels.yaml");
    std::fs::write(&settings, "config: {labels: team=a}\n").unwrap();
    let out = iar(&[
        "plugin",
        "configmap",
        artifacts::LABELS,
        "--name",
        "labels",
        "--settings",
        settings.to_str().unwrap(),
        "--order",
        "-2",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let cm: ConfigMap = iar::yaml::from_slice(&out.stdout).expect("a ConfigMap");
    assert_eq!(cm.metadata.namespace.as_deref(), Some("iar-system"));
    assert!(cm.metadata.labels.unwrap().contains_key(configmap::LABEL));
    let component = std::fs::read(artifacts::LABELS).unwrap();
    assert_eq!(cm.binary_data.unwrap()[configmap::KEY_WASM].0, component);
    let data = cm.data.unwrap();
    assert_eq!(data[configmap::KEY_ORDER], "-2");
    assert_eq!(data[configmap::KEY_SETTINGS], "config: {labels: team=a}\n");
    let inspect = stdout_json(&iar(&["inspect", artifacts::LABELS]));
    assert_eq!(
        format!("sha256:{}", data[configmap::KEY_SHA256]),
        inspect["digest"]
    );
}

#[test]
fn what_would_not_fit_or_not_load_is_refused_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.wasm");
    std::fs::write(&big, vec![0u8; configmap::CONFIGMAP_LIMIT + 1]).unwrap();
    let out = iar(&[
        "plugin",
        "configmap",
        big.to_str().unwrap(),
        "--name",
        "big",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--reference") && stderr.contains("configmap-size"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let out = iar(&[
        "plugin",
        "configmap",
        artifacts::WRONG_WORLD,
        "--name",
        "ww",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("rule: plugin-world"),
        "{}",
        text(&out.stderr)
    );

    let out = iar(&[
        "plugin",
        "configmap",
        artifacts::LABELS,
        "--name",
        "labels",
        "--reference",
        "/plugins/labels.wasm",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let cm: ConfigMap = iar::yaml::from_slice(&out.stdout).unwrap();
    assert!(cm.binary_data.is_none());
    assert_eq!(
        cm.data.unwrap()[configmap::KEY_REFERENCE],
        "/plugins/labels.wasm"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_manifest_applied_server_side_loads_ready() {
    let Some(server) = server().await else {
        return;
    };
    let client = client(server, iar_apiserver::User::Admin).await;
    let namespace = "cli-plugin";
    iar_apiserver::create_namespace(&client, namespace).await;
    let out = iar(&[
        "plugin",
        "configmap",
        artifacts::POD_VOLUMES,
        "--name",
        "pod-volumes",
        "--namespace",
        namespace,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let cm: ConfigMap = iar::yaml::from_slice(&out.stdout).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    api.patch(
        "pod-volumes",
        &PatchParams::apply("kubectl"),
        &Patch::Apply(&cm),
    )
    .await
    .expect("server-side apply");

    let registry = PluginRegistry::new();
    let task = tokio::spawn(watch(client, namespace.into(), runtime(), registry.clone()));
    let mut rx = registry.subscribe();
    let loaded = tokio::time::timeout(Duration::from_secs(60), async {
        while registry.current().get("pod-volumes").is_none() {
            rx.changed().await.unwrap();
        }
    })
    .await;
    assert!(loaded.is_ok(), "pod-volumes did not load");
    wait_for("a Ready status", Duration::from_secs(60), || async {
        let annotations = api.get("pod-volumes").await.unwrap().metadata.annotations;
        match annotations.and_then(|a| a.get("iar.dev/status").cloned()) {
            Some(status) if status == "Ready" => Ok(()),
            status => Err(format!("status {status:?}")),
        }
    })
    .await;
    task.abort();
}

/// `iar controller --grant-policy` with a misspelt key does not start: it
/// names the file and the key before connecting anywhere.
#[test]
fn the_controller_refuses_a_misspelt_grant_policy() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "maxLimits: {deadlines: 1m}\n").unwrap();
    let out = iar(&[
        "controller",
        "--store",
        dir.path().to_str().unwrap(),
        "--grant-policy",
        policy.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("policy.yaml"), "{stderr}");
    assert!(stderr.contains("deadlines"), "{stderr}");
    assert!(stderr.contains("rule: grant-policy"), "{stderr}");
}

/// `iar plugin velero-install` says what each plugin may do inside Velero
/// (stderr; stdout stays the names Velero registers), and refuses a
/// settings file that would not load rather than leave it to Velero's
/// first backup.
#[test]
fn velero_install_shows_each_plugin_s_grants_and_refuses_bad_settings() {
    let image = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    std::fs::copy(artifacts::LABELS, image.path().join("labels.wasm")).unwrap();
    std::fs::write(image.path().join("labels.yaml"), "allowMutate: [\"*\"]\n").unwrap();
    let install = || {
        iar(&[
            "plugin",
            "velero-install",
            "--to",
            target.path().to_str().unwrap(),
            "--plugins",
            image.path().to_str().unwrap(),
        ])
    };
    let out = install();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "iar.dev/labels\n");
    assert!(
        text(&out.stderr).contains("iar.dev/labels: reads [*], creates [], changes [*]"),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(
        image.path().join("labels.yaml"),
        "allowMutate: [\"pods/x\"]\n",
    )
    .unwrap();
    let out = install();
    assert!(!out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("labels.yaml") && text(&out.stderr).contains("pods/x"),
        "{}",
        text(&out.stderr)
    );
}
