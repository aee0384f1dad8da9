//! `iar install --print`: every manifest of `deploy/` for one namespace,
//! image and store, consistent with each other, and accepted by the real
//! API server as printed (a server-side dry run of each, in a namespace
//! that is not `iar-system`).

use crate::support::{client, iar, server, text};
use iar_apiserver::User;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_prints_one_consistent_install_the_api_server_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let credentials = dir.path().join("store.env");
    std::fs::write(
        &credentials,
        "# MinIO\nAWS_ACCESS_KEY_ID=minio\nAWS_SECRET_ACCESS_KEY=minio123\nAWS_ENDPOINT=http://minio:9000\nAWS_ALLOW_HTTP=true\n",
    )
    .unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, "correct horse\n").unwrap();
    let ns = "backup-tools";
    let out = iar(&[
        "install",
        "--print",
        "--namespace",
        ns,
        "--image",
        "registry.example/iar:1.2",
        "--store",
        "s3://team-backups",
        "--store-credentials",
        credentials.to_str().unwrap(),
        "--repository-password-file",
        password.to_str().unwrap(),
        "--restores",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let printed = String::from_utf8(out.stdout).unwrap();
    for default in ["iar-system", "iar:0.1.0", "s3://iar-backups"] {
        assert!(!printed.contains(default), "{default} left in:\n{printed}");
    }
    let docs: Vec<Value> = iar::yaml::manifests::<Value>(&printed)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect();
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    for kind in [
        "Namespace",
        "CustomResourceDefinition",
        "Secret",
        "Deployment",
        "DaemonSet",
        "ValidatingAdmissionPolicy",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing: {kinds:?}");
    }
    // Every workload runs the image given, against the store given, in the
    // namespace given; the Secrets carry what the files said.
    for doc in &docs {
        if let Some(namespace) = doc["metadata"]["namespace"].as_str() {
            assert_eq!(namespace, ns, "{doc}");
        }
        if matches!(doc["kind"].as_str(), Some("Deployment" | "DaemonSet")) {
            let container = &doc["spec"]["template"]["spec"]["containers"][0];
            assert_eq!(container["image"], "registry.example/iar:1.2");
            let args = container["args"].to_string();
            assert!(args.contains(&format!("--namespace={ns}")), "{args}");
            let store = container["env"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == "IAR_STORE")
                .unwrap();
            assert_eq!(store["value"], "s3://team-backups");
        }
        if doc["kind"] == "Secret" {
            match doc["metadata"]["name"].as_str() {
                Some("iar-store") => {
                    assert_eq!(doc["stringData"]["AWS_ALLOW_HTTP"], "true");
                    assert_eq!(doc["stringData"]["AWS_ACCESS_KEY_ID"], "minio");
                }
                Some("iar-repository") => {
                    assert_eq!(doc["stringData"]["password"], "correct horse")
                }
                other => panic!("an unexpected Secret {other:?}"),
            }
        }
    }

    // `--restores` binds the controller's account, in its namespace, to
    // what restoring anything takes; without it nothing does.
    let restorer = docs
        .iter()
        .find(|d| d["metadata"]["name"] == "iar-restorer")
        .expect("--restores prints the restorer binding");
    assert_eq!(restorer["subjects"][0]["namespace"], ns);
    assert_eq!(restorer["roleRef"]["name"], "cluster-admin");
    let plain = iar(&["install", "--print", "--store", "s3://team-backups"]);
    assert!(plain.status.success(), "{}", text(&plain));
    assert!(!String::from_utf8_lossy(&plain.stdout).contains("iar-restorer"));

    // The real API server takes every object as printed: the namespace is
    // made, each other object applied server-side as a dry run.
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    iar_apiserver::create_namespace(&admin, ns).await;
    for doc in docs.iter().filter(|d| d["kind"] != "Namespace") {
        let (group, version) = match doc["apiVersion"].as_str().unwrap().split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", doc["apiVersion"].as_str().unwrap()),
        };
        let gvk = GroupVersionKind::gvk(group, version, doc["kind"].as_str().unwrap());
        let (resource, caps) = kube::discovery::pinned_kind(&admin, &gvk)
            .await
            .unwrap_or_else(|e| panic!("{gvk:?}: {e}"));
        let api: Api<DynamicObject> = match caps.scope {
            kube::discovery::Scope::Namespaced => {
                Api::namespaced_with(admin.clone(), ns, &resource)
            }
            kube::discovery::Scope::Cluster => Api::all_with(admin.clone(), &resource),
        };
        let name = doc["metadata"]["name"].as_str().unwrap();
        api.patch(
            name,
            &PatchParams::apply("iar-install-test").dry_run().force(),
            &Patch::Apply(doc),
        )
        .await
        .unwrap_or_else(|e| panic!("{} {name}: {e}", gvk.kind));
    }
}

/// A namespace that is no DNS label, and a store that is a local path
/// (no replica or agent could share it), are refused by name.
#[test]
fn install_refuses_what_no_cluster_could_run() {
    let out = iar(&[
        "install",
        "--print",
        "--store",
        "s3://b",
        "--namespace",
        "Backup_Tools",
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a namespace name"));
    let out = iar(&["install", "--print", "--store", "backups"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a URL"));
}
