//! Velero's plugin framework over iar (`go-sdk/velero/framework`): a
//! plugin written against Velero's own interfaces and types reads the
//! whole Backup or Restore it is called with (contract 1.4.0's `runs`) as
//! Velero's typed fields: labels, annotations, `status.phase`,
//! `status.startTimestamp`, the spec. The guest
//! (`internal/testguests/whole-objects`) annotates each item with what it
//! read; `iar run` hands it the object file as the producer's object.
//!
//! And client-go inside the sandbox (`go-sdk/velero/framework/kube`): a
//! typed clientset built from `kube.Config()` lists, gets, discovers and
//! reads errors through `apierrors` as against an API server, each request
//! a host call under the plugin's grants; what the host does not offer is
//! refused by rule (`internal/testguests/kube-client`).
//!
//! `go-sdk/velero/framework/build-testguests.sh` builds them (Go >= 1.26;
//! Velero v1.18.3, apimachinery and client-go through the Go module proxy;
//! a few minutes the first time, then cached).

use crate::support::iar;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The test guest `name`, built once per test binary.
fn guest(name: &str) -> &'static Path {
    static BUILT: OnceLock<Vec<PathBuf>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .expect("CARGO_TARGET_TMPDIR is target/tmp")
            .join("go-sdk-framework");
        crate::support::run_build_script(
            "go-sdk/velero/framework/build-testguests.sh",
            &out,
            "Go >= 1.26 on PATH and the Go module proxy",
        )
    });
    let file = format!("framework-{name}.wasm");
    built
        .iter()
        .find(|p| p.ends_with(&file))
        .unwrap_or_else(|| panic!("build-testguests.sh built no {file}: {built:?}"))
}

fn whole_objects() -> &'static Path {
    guest("whole-objects")
}

/// Runs the guest on `item` with `extra` arguments: what it read (the
/// `iar.test/seen` annotation of the item it returned).
fn run(dir: &Path, item: &Value, extra: &[&str]) -> Value {
    let item_file = dir.join("item.json");
    std::fs::write(&item_file, item.to_string()).unwrap();
    let mut args = vec![
        "run",
        "--plugin",
        whole_objects().to_str().unwrap(),
        "--item",
        item_file.to_str().unwrap(),
        "--allow-mutate",
        "*",
    ];
    args.extend(extra);
    let out = iar(&args);
    assert!(
        out.status.success(),
        "iar run {extra:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "iar run printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let item = &printed["finalItem"];
    let seen = item["metadata"]["annotations"]["iar.test/seen"]
        .as_str()
        .unwrap_or_else(|| panic!("the guest did not annotate: {item}"));
    serde_json::from_str(seen).unwrap()
}

#[test]
fn a_velero_backup_action_reads_the_whole_backup() {
    let dir = tempfile::tempdir().unwrap();
    let backup = dir.path().join("backup.yaml");
    std::fs::write(
        &backup,
        "apiVersion: velero.io/v1\nkind: Backup\nmetadata:\n  name: nightly\n  namespace: velero\n  uid: 7e57b4c3-0000-4000-8000-000000000001\n  labels: {velero.io/schedule-name: daily, team: payments}\n  annotations: {velero.io/source-cluster-k8s-gitversion: v1.36.3}\nspec:\n  ttl: 720h0m0s\n  includedNamespaces: [shop]\nstatus:\n  phase: InProgress\n  startTimestamp: \"2026-12-07T10:00:00Z\"\n",
    )
    .unwrap();
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "shop"},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}});
    let seen = run(dir.path(), &pod, &["--backup", backup.to_str().unwrap()]);
    assert_eq!(
        seen,
        json!({"name": "nightly", "uid": "7e57b4c3-0000-4000-8000-000000000001",
            "labels": {"velero.io/schedule-name": "daily", "team": "payments"},
            "annotations": {"velero.io/source-cluster-k8s-gitversion": "v1.36.3"},
            "phase": "InProgress", "startTimestamp": "2026-12-07T10:00:00Z",
            "spec": {"ttl": "720h0m0s", "includedNamespaces": ["shop"]}})
    );
    // Without a file, what the host builds from the call: the phase of the
    // pass, no labels, no start time.
    let seen = run(dir.path(), &pod, &["--phase", "finalize"]);
    assert_eq!(seen["phase"], "Finalizing");
    assert_eq!(seen["labels"], Value::Null);
    assert_eq!(seen["startTimestamp"], "");
}

#[test]
fn a_velero_restore_action_reads_the_whole_restore() {
    let dir = tempfile::tempdir().unwrap();
    let restore = dir.path().join("restore.yaml");
    std::fs::write(
        &restore,
        "apiVersion: velero.io/v1\nkind: Restore\nmetadata:\n  name: again\n  namespace: velero\n  uid: 7e57b4c3-0000-4000-8000-000000000002\n  labels: {team: payments}\nspec:\n  backupName: nightly\n  namespaceMapping: {shop: shop-copy}\nstatus:\n  phase: InProgress\n  startTimestamp: \"2026-12-07T11:00:00Z\"\n",
    )
    .unwrap();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "shop"}, "data": {"k": "v"}});
    let seen = run(
        dir.path(),
        &cm,
        &["--restore", "--restore-object", restore.to_str().unwrap()],
    );
    assert_eq!(
        seen,
        json!({"name": "again", "uid": "7e57b4c3-0000-4000-8000-000000000002",
            "labels": {"team": "payments"}, "annotations": null,
            "phase": "InProgress", "startTimestamp": "2026-12-07T11:00:00Z",
            "spec": {"backupName": "nightly", "namespaceMapping": {"shop": "shop-copy"}}})
    );
}

/// What the kube-client guest's cluster holds: Velero's
/// ChangeStorageClassAction's ConfigMap in Velero's namespace `home` (and
/// one unlabelled beside it, and a labelled one elsewhere), a
/// StorageClass, a Secret and ServiceAccounts in the workload's namespace
/// `workload`.
fn kube_client_objects(home: &str, workload: &str, storage_class: &str) -> Vec<Value> {
    let labels = json!({"velero.io/plugin-config": "", "velero.io/change-storage-class": "RestoreItemAction"});
    vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "change-storage-class-config", "namespace": home, "labels": labels},
            "data": {"standard": storage_class}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "unrelated", "namespace": home}, "data": {"a": "b"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "elsewhere", "namespace": workload, "labels": labels}}),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": storage_class}, "provisioner": "ebs.csi.aws.com"}),
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": workload}, "data": {"password": "aHVudGVyMg=="}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "builder", "namespace": workload}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": workload}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "other", "namespace": home}}),
    ]
}

/// Runs the kube-client guest through `iar run` on a pod of `workload`,
/// its Backup in `home`, with `cluster` (the arguments naming where
/// reads go) and `env`; returns what it saw.
fn kube_client_seen(
    dir: &Path,
    home: &str,
    workload: &str,
    cluster: &[&str],
    env: &[(&str, &Path)],
) -> Value {
    let backup = dir.join("backup.yaml");
    std::fs::write(
        &backup,
        format!("apiVersion: velero.io/v1\nkind: Backup\nmetadata: {{name: nightly, namespace: {home}}}\nspec: {{}}\n"),
    )
    .unwrap();
    let item = dir.join("pod.json");
    std::fs::write(
        &item,
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": workload},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]}})
        .to_string(),
    )
    .unwrap();
    let mut args = vec![
        "run",
        "--plugin",
        guest("kube-client").to_str().unwrap(),
        "--item",
        item.to_str().unwrap(),
        "--backup",
        backup.to_str().unwrap(),
        "--allow-mutate",
        "*",
        "--allow-write",
        "configmaps",
        "--allow-write",
        "secrets",
        "--config",
        "writes=true",
    ];
    args.extend_from_slice(cluster);
    let out = crate::support::iar_command(&args)
        .envs(env.iter().copied())
        .output()
        .expect("running iar");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    serde_json::from_str(
        printed["finalItem"]["metadata"]["annotations"]["iar.test/client"]
            .as_str()
            .expect("annotated"),
    )
    .unwrap()
}

/// What the kube-client guest sees wherever its cluster is; `live`: an
/// API server, which answers `/version`.
fn assert_kube_client_saw(seen: &Value, home: &str, live: bool) {
    let refused = |message: &str, how: &str| {
        let mut v = json!({"error": message, "notFound": false, "forbidden": false,
            "refused": false, "bad": false});
        v[how] = true.into();
        v
    };
    assert_eq!(seen["namespace"], home);
    assert_eq!(
        seen["configmaps"],
        json!([format!("change-storage-class-config={}", seen_class(seen))])
    );
    assert_eq!(seen["storageclass"], "ebs.csi.aws.com");
    assert_eq!(
        seen["missing"],
        refused("configmaps \"missing\" not found", "notFound")
    );
    assert_eq!(
        seen["secret"],
        refused(
            "reading secrets is not granted to this plugin (rule: read-grant)",
            "forbidden"
        )
    );
    assert_eq!(
        seen["watch"],
        refused(
            "watch is not offered to plugins: a plugin call is bounded; poll with get or list (rule: no-watch)",
            "refused"
        )
    );
    assert_eq!(
        seen["log"],
        refused(
            "subresource log of pods: plugins reach objects only (rule: no-subresource)",
            "refused"
        )
    );
    // An update of Velero's namespace from an item of another: forbidden
    // by rule, whatever the grant.
    assert_eq!(seen["update"]["forbidden"], true, "{}", seen["update"]);
    assert!(
        seen["update"]["error"]
            .as_str()
            .is_some_and(|e| e.ends_with("(rule: write-namespace)")),
        "{}",
        seen["update"]
    );
    assert_kube_client_wrote(&seen["writes"]);
    assert_eq!(seen["groups"], json!(["apps=v1", "storage.k8s.io=v1"]));
    match live {
        true => assert_eq!(seen["version"], "ok", "{seen}"),
        false => assert!(seen["version"]["error"].is_string(), "{seen}"),
    }
    // controller-runtime's client with Velero's scheme (Velero's
    // SecretAction's), its REST mapper built from discovery over the same
    // transport.
    assert_eq!(seen["controller-runtime"], json!(["builder", "default"]));
}

/// What the kube-client guest's writes got, through client-go and
/// controller-runtime, granted `configmaps`: its own ConfigMap updated at
/// the version read (a stale version `IsConflict`, `RetryOnConflict`
/// succeeding), merge and JSON patches applied, controller-runtime's
/// `MergeFrom` patch applied; a name generated from `generateName`; its
/// own Secret read back without a read grant for Secrets; a strategic
/// merge patch
/// `IsUnsupportedMediaType` (rule `patch-type`); a patch of a ConfigMap it
/// did not create `IsForbidden` (rule `update-not-own`).
fn assert_kube_client_wrote(writes: &Value) {
    assert_eq!(
        writes["update"],
        json!({"data": {"step": "2"}, "versionChanged": true}),
        "{writes}"
    );
    assert_eq!(writes["stale"]["conflict"], true, "{writes}");
    assert_eq!(writes["retried"], "ok", "{writes}");
    assert_eq!(writes["merge"], json!({"step": "3", "merged": "yes"}));
    assert_eq!(
        writes["json"],
        json!({"step": "3", "merged": "yes", "json": "yes"})
    );
    let rule = |what: &str, flag: &str, rule: &str| {
        assert_eq!(writes[what][flag], true, "{what}: {writes}");
        assert!(
            writes[what]["error"]
                .as_str()
                .is_some_and(|e| e.ends_with(&format!("(rule: {rule})"))),
            "{what}: {writes}"
        );
    };
    assert_eq!(writes["generated"], true, "{writes}");
    assert_eq!(writes["readOwn"], "t", "{writes}");
    rule("strategic", "unsupported", "patch-type");
    rule("foreign", "forbidden", "update-not-own");
    assert_eq!(
        writes["controller-runtime"],
        json!({"step": "3", "merged": "yes", "json": "yes", "runtime": "yes"}),
        "{writes}"
    );
}

/// The storage class the ConfigMap maps `standard` to, as listed.
fn seen_class(seen: &Value) -> String {
    seen["configmaps"][0]
        .as_str()
        .and_then(|s| s.split_once('='))
        .map_or(String::new(), |(_, c)| c.to_string())
}

/// client-go's typed clientset and controller-runtime's client from
/// Velero's `client.Factory` (iar's `clientfactory`), against a cluster of
/// manifests: Velero's ChangeStorageClassAction's own calls (its ConfigMap
/// by label in Velero's namespace, a cluster-scoped StorageClass)
/// answered; a missing object `IsNotFound`; a Secret not granted
/// `IsForbidden`, naming rule `read-grant`; a watch, a subresource and an
/// update refused (405) naming their rules; discovery's groups at their
/// preferred versions; no `/version` without an API server; and
/// controller-runtime's client listing through its discovery mapper.
#[test]
fn client_go_inside_the_sandbox_answers_from_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster");
    std::fs::create_dir(&cluster).unwrap();
    let docs: Vec<String> = kube_client_objects("velero", "shop", "fast")
        .iter()
        .map(|o| serde_json::to_string(o).unwrap())
        .collect();
    std::fs::write(cluster.join("objects.yaml"), docs.join("\n---\n")).unwrap();
    let overlay = dir.path().join("overlay");
    let seen = kube_client_seen(
        dir.path(),
        "velero",
        "shop",
        &[
            "--cluster",
            cluster.to_str().unwrap(),
            "--overlay",
            overlay.to_str().unwrap(),
        ],
        &[],
    );
    assert_kube_client_saw(&seen, "velero", false);
    assert_eq!(seen_class(&seen), "fast");
    // What the writes left: one object, the plugin's, labelled for the
    // backup; the operator's ConfigMap untouched.
    let written =
        std::fs::read_to_string(overlay.join("configmaps.core/shop/kc-state.yaml")).unwrap();
    let written: Value = iar::yaml::from_str(&written).unwrap();
    assert_eq!(written["data"]["runtime"], "yes");
    assert!(written["metadata"]["labels"]["iar.dev/backup-uid"].is_string());
    assert!(!overlay.join("configmaps.core/shop/elsewhere.yaml").exists());
}

/// The same guest, the same calls, against a real kube-apiserver through
/// `iar run --live-cluster` (its KUBECONFIG): the same answers, and
/// `/version` answered, in the initializer as well (which the load's
/// applies-to runs, as Velero's first call does).
#[tokio::test(flavor = "multi_thread")]
async fn client_go_inside_the_sandbox_reads_a_live_api_server() {
    let (home, workload) = ("velero-kc", "shop-kc");
    let objects = kube_client_objects(home, workload, "fast-kc");
    let Some(kubeconfig) = crate::support::seeded_server(&[home, workload], &objects).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().to_path_buf();
    let seen = tokio::task::spawn_blocking(move || {
        kube_client_seen(
            &dir_path,
            home,
            workload,
            // Its initializer asks /version, at the load's applies-to
            // too: the load reads the live cluster.
            &["--live-cluster", "--config", "versionAtInit=true"],
            &[("KUBECONFIG", &kubeconfig)],
        )
    })
    .await
    .unwrap();
    assert_kube_client_saw(&seen, home, true);
    assert_eq!(seen_class(&seen), "fast-kc");
}
