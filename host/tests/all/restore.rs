//! `iar restore`: a backup of the example application restored by iar
//! itself, into a directory of manifests and into the real API server;
//! Velero's order, resets, namespace mapping and labels; objects already
//! there; restore actions run in the sandbox; and what a newcomer or a
//! store writer gets wrong, refused by rule.

use crate::support::*;
use iar_tests::artifacts;
use serde_json::{Value, json};
use std::path::Path;

/// `iar backup NAME` of examples/cluster into `store`, no plugins.
fn back_up_the_shop(store: &Path, name: &str) {
    let out = iar(&[
        "backup",
        name,
        "--items",
        repo().join("examples/cluster").to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
}

fn restore(store: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["restore", "--store", store.to_str().unwrap()];
    all.extend_from_slice(args);
    iar(&all)
}

/// `iar restore [NAME] --from-backup shop ARGS... --to TO`.
fn restore_to(store: &Path, name: Option<&str>, args: &[&str], to: &Path) -> std::process::Output {
    let mut all: Vec<&str> = name.into_iter().collect();
    all.extend(["--from-backup", "shop"]);
    all.extend_from_slice(args);
    all.extend(["--to", to.to_str().unwrap()]);
    restore(store, &all)
}

/// The example application backed up into a fresh local store (kept for
/// as long as the directory lives), and a controller in `ns` over it.
async fn controller_over_the_shop(
    admin: &kube::Client,
    ns: &str,
) -> (tempfile::TempDir, tokio::task::JoinHandle<()>) {
    let store_dir = tempfile::tempdir().unwrap();
    tokio::task::block_in_place(|| back_up_the_shop(store_dir.path(), "shop"));
    let store = iar::store::BackupStore::open(store_dir.path().to_str().unwrap()).unwrap();
    let (_, controller) = crate::controller::start_controller(
        admin.clone(),
        ns,
        store,
        Vec::new(),
        iar::k8s::plugins::PluginRegistry::new(),
    )
    .await;
    (store_dir, controller)
}

/// Creates Restore `name` with `spec` (Velero's RestoreSpec, as written).
pub(crate) async fn create_restore(
    restores: &kube::Api<iar::k8s::crd::Restore>,
    name: &str,
    spec: Value,
) {
    use iar::k8s::crd::{Restore, RestoreResourceSpec};
    let fields = spec.as_object().unwrap().clone();
    restores
        .create(
            &kube::api::PostParams::default(),
            &Restore::new(name, RestoreResourceSpec { fields }),
        )
        .await
        .unwrap_or_else(|e| panic!("creating restore {name}: {e}"));
}

/// Restore `name`'s status once it has ended (any phase past New and
/// InProgress), waited for up to `within`.
pub(crate) async fn restore_ended(
    restores: &kube::Api<iar::k8s::crd::Restore>,
    name: &str,
    within: std::time::Duration,
) -> iar::k8s::crd::RestoreStatus {
    iar_tests::wait_for(&format!("restore {name} to end"), within, || async move {
        let r = restores.get(name).await.map_err(|e| e.to_string())?;
        let status = r.status.clone().unwrap_or_default();
        match status.phase.as_deref() {
            Some("InProgress") | Some("New") | None => Err(format!("{:?}", status.phase)),
            Some(_) => Ok(status),
        }
    })
    .await
}

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    iar::yaml::from_str(&text).unwrap()
}

#[test]
fn a_backup_is_restored_into_a_directory_mapped_reset_and_labelled() {
    let store = tempfile::tempdir().unwrap();
    let to = tempfile::tempdir().unwrap();
    back_up_the_shop(store.path(), "shop");
    let mapped = ["--namespace-mappings", "shop:shop-copy"];
    let out = restore_to(store.path(), Some("first"), &mapped, to.path());
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Completed"), "{stdout}");

    let dir = to.path();
    // The namespace, from the backed-up one, under its new name.
    // Velero creates a namespace as backed up, without the restore's
    // labels every other object gets.
    let ns = yaml(&dir.join("namespaces.core/_cluster/shop-copy.yaml"));
    assert_eq!(ns["metadata"]["name"], "shop-copy", "{ns}");
    assert!(
        ns["metadata"]["labels"]
            .get("velero.io/restore-name")
            .is_none(),
        "{ns}"
    );
    assert!(!dir.join("namespaces.core/_cluster/shop.yaml").exists());
    // Velero's ServiceAction: the cluster gives the address.
    let svc = yaml(&dir.join("services.core/shop-copy/web.yaml"));
    assert_eq!(svc["metadata"]["namespace"], "shop-copy");
    assert!(svc["spec"].get("clusterIP").is_none(), "{svc}");
    // Velero's PodAction: scheduled anew.
    let pod = yaml(&dir.join("pods.core/shop-copy/web-0.yaml"));
    assert!(pod["spec"].get("nodeName").is_none(), "{pod}");
    assert!(pod.get("status").is_none(), "{pod}");
    assert!(pod["metadata"].get("uid").is_some(), "written as created");
    let deployment = yaml(&dir.join("deployments.apps/shop-copy/web.yaml"));
    assert_eq!(
        deployment["metadata"]["labels"]["velero.io/restore-name"],
        "first"
    );
    let original = json!({"data": {"greeting": "hello"}});
    let cm = yaml(&dir.join("configmaps.core/shop-copy/web-config.yaml"));
    assert_eq!(cm["data"], original["data"]);

    // The store keeps the restore as Velero keeps one.
    let results = store.path().join("restores/first/restore-first-results.gz");
    assert!(results.exists());
    let record: Value = serde_json::from_slice(
        &std::fs::read(store.path().join("restores/first/restore-first.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(record["status"]["phase"], "Completed");
    assert_eq!(
        record["status"]["progress"]["itemsRestored"],
        record["status"]["progress"]["totalItems"]
    );

    // `iar describe --restore` and `iar logs --restore` read it back.
    let described = iar(&[
        "describe",
        "first",
        "--restore",
        "--store",
        store.path().to_str().unwrap(),
    ]);
    assert!(described.status.success(), "{}", text(&described));
    let said = String::from_utf8_lossy(&described.stdout);
    for line in [
        "Backup:       shop",
        "Phase:        Completed",
        "Errors:       0",
    ] {
        assert!(said.contains(line), "{line}: {said}");
    }
    let log = iar(&[
        "logs",
        "first",
        "--restore",
        "--store",
        store.path().to_str().unwrap(),
    ]);
    assert!(
        String::from_utf8_lossy(&log.stdout).contains("configmaps shop-copy/web-config: created"),
        "{}",
        text(&log)
    );
    let missing = iar(&[
        "describe",
        "nosuch",
        "--restore",
        "--store",
        store.path().to_str().unwrap(),
    ]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("restore \"nosuch\" not found"));

    // Again: everything is there and the same, so nothing is written and
    // nothing is warned about.
    let again = restore_to(store.path(), Some("second"), &mapped, dir);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("0 warnings"),
        "{}",
        text(&again)
    );

    // One changed in between: left, with Velero's warning.
    let path = dir.join("configmaps.core/shop-copy/web-config.yaml");
    let mut changed = yaml(&path);
    changed["data"] = json!({"changed": "yes"});
    std::fs::write(&path, iar::yaml::to_string(&changed).unwrap()).unwrap();
    let third = restore_to(store.path(), Some("third"), &mapped, dir);
    assert!(third.status.success(), "{}", text(&third));
    let said = String::from_utf8_lossy(&third.stdout);
    assert!(
        said.contains("\"web-config\" already exists. Warning: the in-cluster version is different than the backed-up version"),
        "{said}"
    );
    assert_eq!(yaml(&path)["data"], json!({"changed": "yes"}));
    // Under `update`, replaced by the backed-up one.
    let fourth = restore_to(
        store.path(),
        Some("fourth"),
        &[&mapped[..], &["--existing-resource-policy", "update"]].concat(),
        dir,
    );
    assert!(fourth.status.success(), "{}", text(&fourth));
    assert_eq!(yaml(&path)["data"], original["data"]);
}

#[test]
fn filters_take_only_what_is_asked_and_cluster_objects_follow_velero() {
    let store = tempfile::tempdir().unwrap();
    let to = tempfile::tempdir().unwrap();
    back_up_the_shop(store.path(), "shop");
    let only = [
        "--include-resources",
        "configmaps,services",
        "--include-namespaces",
        "shop",
    ];
    let out = restore_to(store.path(), None, &only, to.path());
    assert!(out.status.success(), "{}", text(&out));
    let files: Vec<String> = iar::cluster::overlay::objects(to.path())
        .into_iter()
        .map(|(id, _)| id.to_string())
        .collect();
    // The namespace is made for what goes into it; no PV (cluster-scoped,
    // and only one namespace asked for), no pod, no deployment.
    assert_eq!(
        files,
        [
            "configmaps shop/web-config",
            "namespaces shop",
            "services shop/web"
        ],
        "{}",
        text(&out)
    );
    // Pods only: each with the claims it mounts (Velero's
    // AddPVCFromPodAction names them as additional items).
    let to = tempfile::tempdir().unwrap();
    let pods = [
        "--include-resources",
        "pods",
        "--include-namespaces",
        "shop",
    ];
    let out = restore_to(store.path(), Some("pods-only"), &pods, to.path());
    assert!(out.status.success(), "{}", text(&out));
    let files: Vec<String> = iar::cluster::overlay::objects(to.path())
        .into_iter()
        .map(|(id, _)| id.to_string())
        .collect();
    assert_eq!(
        files,
        [
            "namespaces shop",
            "persistentvolumeclaims shop/data-web-0",
            "pods shop/web-0"
        ],
        "{}",
        text(&out)
    );
}

#[test]
fn a_restore_action_runs_in_the_sandbox_and_a_hostile_one_is_refused_by_rule() {
    let store = tempfile::tempdir().unwrap();
    back_up_the_shop(store.path(), "shop");
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        artifacts::RESTORE_HOSTILE,
        plugins.path().join("hostile.wasm"),
    )
    .unwrap();

    // "label" without a grant to change labels: refused by rule, the
    // object not written, the rest restored.
    let to = tempfile::tempdir().unwrap();
    // `iar restore NAME` of the shop with the hostile plugin told `mode`.
    let hostile = |name: &str, mode: &str, extra: &[&str], to: &Path| {
        let config = format!("hostile:mode={mode}");
        let mut args = vec![
            "--plugins",
            plugins.path().to_str().unwrap(),
            "--config",
            &config,
        ];
        args.extend_from_slice(extra);
        restore_to(store.path(), Some(name), &args, to)
    };
    let out = hostile("ungranted", "label", &[], to.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("rule: item-change-not-granted"),
        "{}",
        text(&out)
    );
    assert!(
        !to.path()
            .join("configmaps.core/shop/web-config.yaml")
            .exists()
    );
    assert!(to.path().join("services.core/shop/web.yaml").exists());
    // Granted: the action's change is what is written.
    std::fs::write(
        plugins.path().join("hostile.yaml"),
        "allowMutate: [configmaps]\n",
    )
    .unwrap();
    let to = tempfile::tempdir().unwrap();
    let out = hostile("granted", "label", &[], to.path());
    assert!(out.status.success(), "{}", text(&out));
    let cm = yaml(&to.path().join("configmaps.core/shop/web-config.yaml"));
    assert_eq!(cm["metadata"]["labels"]["restored"], "yes");

    // "move": a restore action may not send an object to another
    // namespace; the item is not written anywhere, the error names the
    // plugin and the rule, and the rest of the restore goes on.
    let to = tempfile::tempdir().unwrap();
    let out = hostile("hostile-move", "move", &[], to.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("PartiallyFailed") && said.contains("hostile") && said.contains("rule"),
        "{said}"
    );
    assert!(!to.path().join("configmaps.core/kube-system").exists());
    assert!(
        !to.path()
            .join("configmaps.core/shop/web-config.yaml")
            .exists()
    );
    assert!(
        to.path().join("services.core/shop/web.yaml").exists(),
        "the rest is restored"
    );

    // Each hostile answer: the restore goes on, the config map is written
    // or not as the answer allows, and a refusal names the plugin and
    // its rule.
    for (mode, written, refusal) in [
        ("operation", true, None),
        ("skip", false, None),
        ("trap", false, Some("no-trap")),
        // A secret of a namespace this restore (of `shop` only) leaves out.
        (
            "bring-foreign",
            false,
            Some("additional-item-outside-restore"),
        ),
        ("wait-for-nothing", false, Some("wait-without-items")),
    ] {
        let to = tempfile::tempdir().unwrap();
        let out = hostile(
            &format!("hostile-{mode}"),
            mode,
            &["--include-namespaces", "shop"],
            to.path(),
        );
        let said = String::from_utf8_lossy(&out.stdout);
        match refusal {
            None => assert!(out.status.success(), "{mode}: {}", text(&out)),
            Some(rule) => {
                assert_eq!(out.status.code(), Some(1), "{mode}: {}", text(&out));
                assert!(
                    said.contains("\"hostile\"") && said.contains(&format!("rule: {rule}")),
                    "{mode}: {said}"
                );
            }
        }
        let cm = to.path().join("configmaps.core/shop/web-config.yaml");
        assert_eq!(cm.exists(), written, "{mode}: {said}");
        assert!(
            to.path().join("services.core/shop/web.yaml").exists(),
            "{mode}"
        );
    }
    let log = iar(&[
        "logs",
        "hostile-operation",
        "--restore",
        "--store",
        store.path().to_str().unwrap(),
    ]);
    assert!(
        String::from_utf8_lossy(&log.stdout)
            .contains("operation op-web-config of configmaps shop/web-config completed"),
        "{}",
        text(&log)
    );
}

#[test]
fn a_forged_tarball_entry_is_refused_and_written_nowhere() {
    let store = tempfile::tempdir().unwrap();
    back_up_the_shop(store.path(), "shop");
    // A store writer puts an object for kube-system under shop's path.
    let tarball = store.path().join("backups/shop/shop.tar.gz");
    let entries = iar::store::tarball::read(&std::fs::read(&tarball).unwrap()).unwrap();
    let mut replace = std::collections::BTreeMap::new();
    for (path, body) in &entries {
        if path == "resources/configmaps/namespaces/shop/web-config.json" {
            let mut cm: Value = serde_json::from_slice(body).unwrap();
            cm["metadata"]["namespace"] = json!("kube-system");
            replace.insert(path.clone(), serde_json::to_vec(&cm).unwrap());
        }
    }
    assert_eq!(replace.len(), 1);
    let forged = iar::store::tarball::rewrite(&std::fs::read(&tarball).unwrap(), &replace).unwrap();
    std::fs::write(&tarball, forged).unwrap();
    let to = tempfile::tempdir().unwrap();
    let out = restore_to(store.path(), None, &[], to.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("rule: tarball-identity"),
        "{}",
        text(&out)
    );
    assert!(!to.path().join("configmaps.core/kube-system").exists());
    assert!(
        !to.path()
            .join("configmaps.core/shop/web-config.yaml")
            .exists()
    );
}

#[test]
fn a_newcomers_mistakes_are_refused_before_anything_is_written() {
    let store = tempfile::tempdir().unwrap();
    back_up_the_shop(store.path(), "shop");
    let to = tempfile::tempdir().unwrap();
    let dir = to.path().to_str().unwrap();
    let specs = tempfile::tempdir().unwrap();
    let spec = specs.path().join("spec.yaml");
    std::fs::write(&spec, "backupName: shop\nincludeNamespace: [shop]\n").unwrap();
    for (args, says) in [
        (
            vec!["--from-backup", "nosuch", "--to", dir],
            "\"nosuch\" is not in",
        ),
        (
            vec![
                "--from-backup",
                "shop",
                "--namespace-mappings",
                "shop:../x",
                "--to",
                dir,
            ],
            "kubernetes-name",
        ),
        (
            vec![
                "--from-backup",
                "shop",
                "--namespace-mappings",
                "shop",
                "--to",
                dir,
            ],
            "expected SRC:DST",
        ),
        (
            vec!["--spec", spec.to_str().unwrap(), "--to", dir],
            "did you mean includedNamespaces?",
        ),
        (
            vec![
                "--from-backup",
                "shop",
                "--existing-resource-policy",
                "replace",
                "--to",
                dir,
            ],
            "\"none\" and \"update\"",
        ),
        (vec!["--to", dir], "backupName is required"),
        (
            vec!["Bad_Name", "--from-backup", "shop", "--to", dir],
            "restore-name",
        ),
    ] {
        let out = restore(store.path(), &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert_eq!(
        std::fs::read_dir(to.path()).unwrap().count(),
        0,
        "nothing written"
    );
    // A name taken is said, not overwritten.
    let first = restore_to(store.path(), Some("same"), &[], to.path());
    assert!(first.status.success(), "{}", text(&first));
    let second = restore_to(store.path(), Some("same"), &[], to.path());
    assert_eq!(second.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("already exists"),
        "{}",
        text(&second)
    );
}

/// Where `restored` lacks a field of `backed_up` or holds it with another
/// value (restored ⊇ backed up: the API server adds its defaults).
fn lacking(backed_up: &Value, restored: &Value, path: &str, out: &mut Vec<String>) {
    match (backed_up, restored) {
        (Value::Object(want), Value::Object(got)) => {
            for (k, v) in want {
                match got.get(k) {
                    Some(g) => lacking(v, g, &format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k}: missing")),
                }
            }
        }
        (Value::Array(want), Value::Array(got)) if want.len() == got.len() => {
            for (i, (w, g)) in want.iter().zip(got).enumerate() {
                lacking(w, g, &format!("{path}[{i}]"), out);
            }
        }
        (w, g) if w == g => {}
        (w, g) => out.push(format!("{path}: {w} became {g}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restored_into_the_api_server_reads_back_as_backed_up() {
    use iar_apiserver::User;
    use kube::api::{Api, DynamicObject, PostParams};
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    let store = tempfile::tempdir().unwrap();
    back_up_the_shop(store.path(), "shop");
    let target = "restore-live";
    let live = |name: &str, extra: &[&str]| {
        let mut command = iar_command(&[
            "restore",
            name,
            "--from-backup",
            "shop",
            "--store",
            store.path().to_str().unwrap(),
            "--namespace-mappings",
            &format!("shop:{target}"),
            // Cluster-scoped objects other tests could hold too.
            "--include-cluster-resources=false",
            "--cluster",
        ]);
        command.args(extra).env("KUBECONFIG", server.kubeconfig());
        command.output().unwrap()
    };
    let out = tokio::task::block_in_place(|| live("live-first", &[]));
    assert!(out.status.success(), "{}", text(&out));

    // Each namespaced object of the backup, read back: every field it was
    // backed up with is there with its value, but for what Velero's
    // restore changes on purpose (docs/restores.md).
    let tarball = std::fs::read(store.path().join("backups/shop/shop.tar.gz")).unwrap();
    let (items, refused) =
        iar::restore::archive::items(iar::store::tarball::read(&tarball).unwrap());
    assert!(refused.is_empty(), "{refused:?}");
    let mut compared = 0;
    for item in items.iter().filter(|i| !i.id.namespace.is_empty()) {
        let (group, version) = match item.api_version().split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", item.api_version()),
        };
        let resource = kube::api::ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: item.api_version().into(),
            kind: item.kind().into(),
            plural: item.id.resource.clone(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), target, &resource);
        let got = api
            .get(&item.id.name)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", item.id));
        let got = serde_json::to_value(got).unwrap();
        let mut want = item.value().clone();
        want.as_object_mut().unwrap().remove("status");
        want["metadata"]["namespace"] = json!(target);
        match item.kind() {
            "Service" => {
                let spec = want["spec"].as_object_mut().unwrap();
                spec.remove("clusterIP");
                spec.remove("clusterIPs");
            }
            "Pod" => {
                want["spec"].as_object_mut().unwrap().remove("nodeName");
            }
            _ => {}
        }
        let mut differences = Vec::new();
        lacking(&want, &got, "", &mut differences);
        assert!(
            differences.is_empty(),
            "{}: {differences:#?}\n{got:#}",
            item.id
        );
        assert_eq!(
            got["metadata"]["labels"]["velero.io/restore-name"],
            "live-first"
        );
        compared += 1;
    }
    assert_eq!(
        compared, 5,
        "a deployment, pod, claim, service and config map"
    );

    // Changed in the cluster, then restored under `update`: as backed up.
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(admin.clone(), target);
    let mut cm = maps.get("web-config").await.unwrap();
    cm.data = Some([("greeting".to_string(), "changed".to_string())].into());
    maps.replace("web-config", &PostParams::default(), &cm)
        .await
        .unwrap();
    let left = tokio::task::block_in_place(|| live("live-second", &[]));
    assert!(left.status.success(), "{}", text(&left));
    assert!(
        String::from_utf8_lossy(&left.stdout).contains("already exists. Warning"),
        "{}",
        text(&left)
    );
    assert_eq!(
        maps.get("web-config").await.unwrap().data.unwrap()["greeting"],
        "changed"
    );
    let updated = tokio::task::block_in_place(|| {
        live("live-third", &["--existing-resource-policy", "update"])
    });
    assert!(updated.status.success(), "{}", text(&updated));
    assert_eq!(
        maps.get("web-config").await.unwrap().data.unwrap()["greeting"],
        "hello"
    );
}

/// A Restore resource, restored by the controller's leader as Velero's
/// restore controller restores one: the backup's objects in the mapped
/// namespace with the restore's label, the status Completed with its
/// counts, the record in the store for `iar describe --restore`. A
/// misspelt spec key is FailedValidation naming the key and the one it
/// meant (the API server keeps it: the schema preserves unknown fields),
/// nothing restored; a backup that is not there is Failed with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_controller_restores_a_restore_resource_and_refuses_a_misspelt_one() {
    use iar::k8s::crd::Restore;
    use iar_apiserver::{User, create_namespace};
    use kube::api::Api;
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    crate::controller::install_crds(&admin).await;
    let ns = "restore-system";
    create_namespace(&admin, ns).await;
    let (store_dir, controller) = controller_over_the_shop(&admin, ns).await;
    let restores = Api::<Restore>::namespaced(admin.clone(), ns);
    let target = "restored-by-controller";
    create_restore(
        &restores,
        "from-shop",
        json!({"backupName": "shop", "namespaceMapping": {"shop": target},
               "includeClusterResources": false}),
    )
    .await;
    create_restore(
        &restores,
        "misspelt",
        json!({"backupName": "shop", "includeNamespaces": ["shop"]}),
    )
    .await;
    create_restore(&restores, "no-backup", json!({"backupName": "nope"})).await;

    let done = restore_ended(&restores, "from-shop", std::time::Duration::from_secs(120)).await;
    assert_eq!(done.phase.as_deref(), Some("Completed"), "{done:?}");
    let progress = done.progress.unwrap();
    assert_eq!(progress.items_restored, progress.total_items);
    assert!(progress.items_restored >= 5, "{progress:?}");
    assert_eq!(done.errors, Some(0));
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(admin.clone(), target);
    let cm = maps.get("web-config").await.unwrap();
    assert_eq!(
        cm.metadata.labels.unwrap()["velero.io/restore-name"],
        "from-shop"
    );
    let described = tokio::task::block_in_place(|| {
        iar(&[
            "describe",
            "from-shop",
            "--restore",
            "--store",
            store_dir.path().to_str().unwrap(),
        ])
    });
    assert!(described.status.success(), "{}", text(&described));
    assert!(
        String::from_utf8_lossy(&described.stdout).contains("Completed"),
        "{}",
        text(&described)
    );

    let refused = restore_ended(&restores, "misspelt", std::time::Duration::from_secs(120)).await;
    assert_eq!(refused.phase.as_deref(), Some("FailedValidation"));
    let why = refused.validation_errors.unwrap().join("; ");
    assert!(
        why.contains("includeNamespaces") && why.contains("includedNamespaces"),
        "{why}"
    );
    assert!(
        !store_dir.path().join("restores/misspelt").exists(),
        "a refused restore left a record"
    );

    let failed = restore_ended(&restores, "no-backup", std::time::Duration::from_secs(120)).await;
    assert_eq!(failed.phase.as_deref(), Some("Failed"));
    assert!(
        failed
            .failure_reason
            .as_deref()
            .unwrap_or("")
            .contains("\"nope\""),
        "{failed:?}"
    );
    controller.abort();
}

/// A CSI claim pvc-snapshot snapshotted comes back from its snapshot in
/// iar's own restore, as Velero's CSI restore brings it back: the claim
/// (pvc-snapshot's restore half) names the snapshot under this restore's
/// name for it; the snapshot and its content come back as a
/// pre-provisioned pair under that name (iar's built-in CSI restore),
/// the content holding the backed-up snapshot handle and retained; the
/// real snapshot-controller binds them; the test plays the driver's
/// sidecar and provisioner, and the claim is bound to a volume made from
/// that snapshot. A restore with `restorePVs: false` brings no snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iar_restores_a_csi_claim_from_its_snapshot() {
    use iar_apiserver::{User, create_namespace};
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use kube::api::Api;
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    crate::csi::ready(&admin).await;
    let (source, target) = ("csi-restore-src", "csi-restore-dst");
    create_namespace(&admin, source).await;
    crate::csi::csi_claim(&admin, source, "data", "web").await;
    let (store_dir, store) = crate::support::store();
    let cluster = std::sync::Arc::new(iar::k8s::live::LiveCluster::new(
        admin.clone(),
        tokio::runtime::Handle::current(),
    ));
    let machine = iar::phases::PhaseMachine::new(
        vec![crate::csi::pvc_snapshot(&runtime())],
        store,
        cluster,
        crate::controller::settings(),
    );
    let backup = tokio::spawn(async move {
        machine
            .run_backup(iar::phases::BackupRequest {
                labels: Default::default(),
                name: "csi".into(),
                namespace: "iar".into(),
                spec: json!({"includedNamespaces": [source]}),
                sources: Vec::new(),
                annotations: Default::default(),
            })
            .await
    });
    crate::csi::cut_snapshot(&admin, source, "data-csi").await;
    let backed_up = backup.await.unwrap().unwrap();
    assert_eq!(
        backed_up.status.phase,
        iar::backup::object::BackupPhase::Completed
    );

    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        artifacts::PVC_SNAPSHOT,
        plugins.path().join("pvc-snapshot.wasm"),
    )
    .unwrap();
    crate::csi::grant_in_dir(plugins.path(), "pvc-snapshot");
    let restore = |name: &str, target: &str, extra: &[&str]| {
        let mapping = format!("{source}:{target}");
        let mut args = vec![
            "restore",
            name,
            "--from-backup",
            "csi",
            "--store",
            store_dir.path().to_str().unwrap(),
            "--plugins",
            plugins.path().to_str().unwrap(),
            "--namespace-mappings",
            &mapping,
            "--include-resources",
            "persistentvolumeclaims",
            "--cluster",
        ];
        args.extend_from_slice(extra);
        let mut command = iar_command(&args);
        command.env("KUBECONFIG", server.kubeconfig());
        tokio::task::block_in_place(|| command.output().unwrap())
    };
    let out = restore("csi-back", target, &[]);
    assert!(out.status.success(), "{}", text(&out));

    let claims = Api::<PersistentVolumeClaim>::namespaced(admin.clone(), target);
    let claim = claims.get("data").await.unwrap();
    let spec = claim.spec.as_ref().unwrap();
    let source_ref = spec.data_source.as_ref().expect("a data source");
    assert_eq!(source_ref.kind, "VolumeSnapshot", "{claim:?}");
    let restored = source_ref.name.clone();
    assert_eq!(restored.len(), 64, "a per-restore name: {restored}");
    assert_eq!(spec.volume_name, None, "the old volume's binding is gone");
    let snapshot = crate::csi::snapshot_api(&admin, target)
        .get(&restored)
        .await
        .unwrap_or_else(|e| panic!("the restored snapshot {restored}: {e}\n{}", text(&out)));
    assert_eq!(
        snapshot.data["spec"],
        json!({"source": {"volumeSnapshotContentName": restored}}),
        "{:?}",
        snapshot.data
    );
    let content = crate::csi::content_api(&admin)
        .get(&restored)
        .await
        .unwrap();
    let content_spec = &content.data["spec"];
    assert_eq!(
        content_spec["source"],
        json!({"snapshotHandle": "snap-data-csi"})
    );
    assert_eq!(content_spec["deletionPolicy"], "Retain");
    assert_eq!(content_spec["driver"], crate::csi::DRIVER);
    assert_eq!(content_spec["volumeSnapshotClassName"], crate::csi::CLASS);
    assert_eq!(content_spec["volumeSnapshotRef"]["namespace"], target);
    assert_eq!(content_spec["volumeSnapshotRef"]["name"], restored.as_str());
    // The real controller binds the pair; the driver's part is played.
    crate::csi::cut_snapshot(&admin, target, &restored).await;
    let volume = crate::csi::provision_from_snapshot(&admin, target, "data").await;
    let claim = claims.get("data").await.unwrap();
    assert_eq!(
        claim.spec.unwrap().volume_name.as_deref(),
        Some(volume.as_str())
    );

    // restorePVs: false — the claim still names a snapshot (its action
    // is pvc-snapshot's), but none is restored for it.
    let other = "csi-restore-none";
    let out = restore("csi-none", other, &["--restore-volumes=false"]);
    assert!(out.status.success(), "{}", text(&out));
    let log = iar(&[
        "logs",
        "csi-none",
        "--restore",
        "--store",
        store_dir.path().to_str().unwrap(),
    ]);
    assert!(
        String::from_utf8_lossy(&log.stdout).contains("restorePVs is false; not restored"),
        "{}",
        text(&log)
    );
    let none = crate::csi::snapshot_api(&admin, other)
        .list(&Default::default())
        .await
        .unwrap();
    assert!(none.items.is_empty(), "{:?}", none.items);
    let _ = create_namespace;
}

/// Velero's restore hooks in iar's own restore, reconciled by the
/// controller on the real API server with kwok as the node: the spec's
/// init container goes before the restored pod's own, chosen by the
/// namespace the pod is restored into (Velero issue 4720); its exec hooks
/// wait for the pod to run (the test binds it: no scheduler runs here)
/// and then run through `pods/exec` (kwok's `Exec` runs them as local
/// processes in a directory the test owns, the one part kwok cannot
/// provide); a failed hook is an error of the restore, which ends
/// PartiallyFailed with Velero's `hookStatus` counts, also shown by
/// `iar describe --restore`. The pod's claim comes with it (Velero's
/// AddPVCFromPodAction), its storage class and the pod's image changed as
/// Velero's change-storage-class and change-image-name ConfigMaps in the
/// controller's namespace say.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_controller_runs_restore_hooks_in_the_restored_pod() {
    use iar::k8s::crd::Restore;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, PostParams};
    let ns = "restore-hooks-system";
    let node = "kwok-restore-hooks";
    let target = "restore-hooks-shop";
    let Some(crate::pod_hooks::KwokCluster { kwok, admin, .. }) =
        crate::pod_hooks::kwok_cluster(ns, &[node]).await
    else {
        return;
    };
    let (store_dir, controller) = controller_over_the_shop(&admin, ns).await;
    let spec = json!({
        "backupName": "shop",
        "includedNamespaces": ["shop"],
        "includedResources": ["pods"],
        "namespaceMapping": {"shop": target},
        "hooks": {"resources": [
            // The backed-up namespace: not where the pod is restored.
            {"name": "elsewhere", "includedNamespaces": ["shop"],
             "postHooks": [{"exec": {"command": ["sh", "-c", "echo wrong > elsewhere.txt"]}}]},
            {"name": "warm", "includedNamespaces": [target],
             "labelSelector": {"matchLabels": {"app": "web"}},
             "postHooks": [
                {"init": {"initContainers": [
                    {"name": "prep", "image": "busybox:1.36", "command": ["true"]}
                ]}},
                {"exec": {"command": ["sh", "-c", "echo warmed > warmed.txt"], "waitTimeout": "2m"}},
                {"exec": {"command": ["sh", "-c", "echo broken >&2; exit 3"]}},
                {"exec": {"command": ["sh", "-c", "echo after > after.txt"]}},
             ]},
        ]},
    });
    // The class the backed-up one (csi-standard) is mapped to.
    let fast = "restore-hooks-fast";
    let class: k8s_openapi::api::storage::v1::StorageClass = serde_json::from_value(
        json!({"metadata": {"name": fast}, "provisioner": "hostpath.csi.k8s.io"}),
    )
    .unwrap();
    Api::all(admin.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    let mapping: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "change-storage-class", "labels": {
            "velero.io/plugin-config": "", "velero.io/change-storage-class": "RestoreItemAction"}},
        "data": {"csi-standard": fast},
    }))
    .unwrap();
    Api::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &mapping)
        .await
        .unwrap();
    let images: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "change-image-name", "labels": {
            "velero.io/plugin-config": "", "velero.io/change-image-name": "RestoreItemAction"}},
        "data": {"mirror": "nginx,mirror.example/nginx"},
    }))
    .unwrap();
    Api::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &images)
        .await
        .unwrap();
    let restores = Api::<Restore>::namespaced(admin.clone(), ns);
    create_restore(&restores, "hooked", spec).await;
    // The restored pod appears unscheduled; its execs will run in `dir`.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), target);
    let pod = iar_tests::wait_for(
        "the restored pod",
        std::time::Duration::from_secs(120),
        || {
            let pods = pods.clone();
            async move { pods.get("web-0").await.map_err(|e| e.to_string()) }
        },
    )
    .await;
    let init: Vec<_> = pod
        .spec
        .as_ref()
        .unwrap()
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(init, ["prep"]);
    // Velero's change-image-name ConfigMap rewrote the image.
    let image = pod.spec.as_ref().unwrap().containers[0].image.clone();
    assert_eq!(image.as_deref(), Some("mirror.example/nginx:1.27"));
    let dir = tempfile::tempdir().unwrap();
    kwok.local_exec(&admin, target, "web-0", dir.path(), &[])
        .await;
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web-0"},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    pods.create_subresource::<Value, Value>("binding", "web-0", &PostParams::default(), &binding)
        .await
        .unwrap();
    let done = restore_ended(&restores, "hooked", std::time::Duration::from_secs(180)).await;
    assert_eq!(done.phase.as_deref(), Some("PartiallyFailed"), "{done:?}");
    assert_eq!(done.errors, Some(1), "{done:?}");
    let hooks = done.hook_status.clone().unwrap();
    assert_eq!(
        (hooks.hooks_attempted, hooks.hooks_failed),
        (Some(3), Some(1)),
        "{done:?}"
    );
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).ok();
    assert_eq!(read("warmed.txt").as_deref(), Some("warmed\n"));
    // The failed hook's mode is Continue (Velero's when none is set).
    assert_eq!(read("after.txt").as_deref(), Some("after\n"));
    assert_eq!(read("elsewhere.txt"), None);
    let claim =
        Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(admin.clone(), target)
            .get("data-web-0")
            .await
            .unwrap();
    assert_eq!(
        claim.spec.unwrap().storage_class_name.as_deref(),
        Some(fast)
    );
    let described = tokio::task::block_in_place(|| {
        iar(&[
            "describe",
            "hooked",
            "--restore",
            "--store",
            store_dir.path().to_str().unwrap(),
        ])
    });
    let out = text(&described);
    assert!(out.contains("Hooks:        3 attempted, 1 failed"), "{out}");
    assert!(
        out.contains("hook warm in container web failed to execute"),
        "{out}"
    );
    controller.abort();
}
