//! Tests against a real kube-apiserver and etcd started by `iar-apiserver`
//! (one server shared by this binary's tests). They prove the harness runs
//! the real thing, RBAC included, and are the base the controller, the
//! ConfigMap plugin source and live item collection build on.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::support::{client, server};
use iar_apiserver::{ApiServer, User, create_namespace};
use iar_tests::wait_for;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Pod, PodSpec, Secret};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, ObjectMeta, PostParams};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn meta(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..ObjectMeta::default()
    }
}

/// The HTTP status of a failed request (`None` if it did not fail with one).
fn status_code<T>(result: &kube::Result<T>) -> Option<u16> {
    match result {
        Err(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}

/// The server is the Kubernetes that tools/kube-apiserver builds, not a
/// stand-in: `/version` reports v1.36.3, the version k8s-openapi's `v1_36`
/// feature describes.
#[tokio::test]
async fn server_is_kubernetes_1_36() {
    let Some(server) = server().await else { return };
    let version = client(server, User::Admin)
        .await
        .apiserver_version()
        .await
        .expect("GET /version");
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "36")
    );
    assert_eq!(version.git_version, "v1.36.3");
}

/// A namespace and a ConfigMap holding arbitrary bytes in `binaryData` (the
/// shape of a plugin ConfigMap) round-trip through etcd: the bytes read back
/// are the bytes written, NUL and non-UTF-8 included, beside `data`.
#[tokio::test]
async fn configmap_binary_data_round_trips() {
    let Some(server) = server().await else { return };
    let client = client(server, User::Admin).await;
    create_namespace(&client, "iar-configmaps").await;

    let bytes: Vec<u8> = (0..=255u8).chain([0, 0xff, 0xfe]).collect();
    let configmap = ConfigMap {
        metadata: meta("plugin", &[("iar.dev/plugin", "")]),
        binary_data: Some(BTreeMap::from([(
            "plugin.wasm".to_string(),
            ByteString(bytes.clone()),
        )])),
        data: Some(BTreeMap::from([("sha256".to_string(), "abc".to_string())])),
        ..ConfigMap::default()
    };
    let api = Api::<ConfigMap>::namespaced(client.clone(), "iar-configmaps");
    api.create(&PostParams::default(), &configmap)
        .await
        .expect("create the ConfigMap");

    let read = api.get("plugin").await.expect("read the ConfigMap back");
    assert!(read.metadata.uid.is_some(), "the server assigns a uid");
    assert_eq!(
        read.binary_data.as_ref().and_then(|d| d.get("plugin.wasm")),
        Some(&ByteString(bytes))
    );
    assert_eq!(
        read.data.as_ref().and_then(|d| d.get("sha256")),
        Some(&"abc".to_string())
    );
    let namespace = Api::<Namespace>::all(client)
        .get("iar-configmaps")
        .await
        .expect("read the namespace back");
    assert_eq!(
        namespace.status.and_then(|s| s.phase).as_deref(),
        Some("Active")
    );
}

/// Listing with a label selector in pages of 3 (`limit` + `continue`)
/// returns every matching pod exactly once, in pages of 3, 3 and 1, and no
/// pod the selector excludes: the server pages for real.
#[tokio::test]
async fn pods_list_by_label_selector_in_pages() {
    let Some(server) = server().await else { return };
    let client = client(server, User::Admin).await;
    create_namespace(&client, "iar-paging").await;
    let api = Api::<Pod>::namespaced(client, "iar-paging");
    let pod = |name: String, app: &str| Pod {
        metadata: meta(&name, &[("app", app)]),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some("example.invalid/never-pulled".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    let mut wanted = BTreeSet::new();
    for i in 0..7 {
        let name = format!("paged-{i}");
        api.create(&PostParams::default(), &pod(name.clone(), "paged"))
            .await
            .expect("create a paged pod");
        wanted.insert(name);
    }
    for i in 0..3 {
        api.create(&PostParams::default(), &pod(format!("other-{i}"), "other"))
            .await
            .expect("create another pod");
    }

    let mut pages = Vec::new();
    let mut seen = BTreeSet::new();
    let mut params = ListParams::default().labels("app=paged").limit(3);
    loop {
        let page = api.list(&params).await.expect("list a page");
        pages.push(page.items.len());
        for pod in &page.items {
            let name = pod.metadata.name.clone().expect("a listed pod has a name");
            assert!(seen.insert(name.clone()), "{name} listed twice");
        }
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(pages, [3, 3, 1]);
    assert_eq!(seen, wanted);
}

/// A placeholder custom resource (the real Backup CRD comes later).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(group = "test.iar.dev", version = "v1", kind = "Probe", namespaced)]
struct ProbeSpec {
    message: String,
    count: u32,
}

/// A CRD generated from a Rust type by kube's derive is accepted and
/// becomes Established; an instance round-trips; and the generated schema
/// is enforced by the server (a string where `count: u32` belongs is
/// rejected with 422).
#[tokio::test]
async fn custom_resource_from_rust_type() {
    let Some(server) = server().await else { return };
    let client = client(server, User::Admin).await;
    create_namespace(&client, "iar-crd").await;

    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.create(&PostParams::default(), &Probe::crd())
        .await
        .expect("create the CRD");
    let established = |crd: &CustomResourceDefinition| {
        crd.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
    };
    wait_for("the CRD Established", Duration::from_secs(30), || async {
        let crd = crds.get(Probe::crd_name()).await.expect("read the CRD");
        if established(&crd) {
            Ok(())
        } else {
            Err(format!("{:?}", crd.status))
        }
    })
    .await;

    let probes = Api::<Probe>::namespaced(client.clone(), "iar-crd");
    let spec = ProbeSpec {
        message: "hello".into(),
        count: 3,
    };
    // The CRD reaches the server's caches a moment after it is written.
    let created = wait_for("create a Probe", Duration::from_secs(10), || {
        let (probes, probe) = (probes.clone(), Probe::new("first", spec.clone()));
        async move {
            probes
                .create(&PostParams::default(), &probe)
                .await
                .map_err(|e| e.to_string())
        }
    })
    .await;
    assert!(created.metadata.uid.is_some());
    assert_eq!(probes.get("first").await.expect("read it back").spec, spec);

    let dynamic =
        Api::<DynamicObject>::namespaced_with(client, "iar-crd", &ApiResource::erase::<Probe>(&()));
    let invalid: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "test.iar.dev/v1",
        "kind": "Probe",
        "metadata": { "name": "invalid" },
        "spec": { "message": "hello", "count": "many" },
    }))
    .expect("a DynamicObject");
    let result = dynamic.create(&PostParams::default(), &invalid).await;
    assert_eq!(status_code(&result), Some(422), "{result:?}");
}

/// RBAC is really enforced: the restricted user's token is denied a Secret
/// (403) while its Role grants it ConfigMaps in one namespace, and the same
/// grant does not reach another namespace.
#[tokio::test]
async fn rbac_denies_what_the_role_does_not_grant() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    create_namespace(&admin, "iar-rbac").await;
    create_namespace(&admin, "iar-rbac-other").await;
    for namespace in ["iar-rbac", "iar-rbac-other"] {
        Api::<ConfigMap>::namespaced(admin.clone(), namespace)
            .create(
                &PostParams::default(),
                &ConfigMap {
                    metadata: meta("settings", &[]),
                    ..ConfigMap::default()
                },
            )
            .await
            .expect("create a ConfigMap");
    }
    Api::<Secret>::namespaced(admin.clone(), "iar-rbac")
        .create(
            &PostParams::default(),
            &Secret {
                metadata: meta("token", &[]),
                string_data: Some(BTreeMap::from([("key".into(), "value".into())])),
                ..Secret::default()
            },
        )
        .await
        .expect("create a Secret");
    Api::<Role>::namespaced(admin.clone(), "iar-rbac")
        .create(
            &PostParams::default(),
            &Role {
                metadata: meta("read-configmaps", &[]),
                rules: Some(vec![PolicyRule {
                    api_groups: Some(vec![String::new()]),
                    resources: Some(vec!["configmaps".into()]),
                    verbs: vec!["get".into(), "list".into()],
                    ..PolicyRule::default()
                }]),
            },
        )
        .await
        .expect("create the Role");
    Api::<RoleBinding>::namespaced(admin.clone(), "iar-rbac")
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: meta("restricted-reads-configmaps", &[]),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "Role".into(),
                    name: "read-configmaps".into(),
                },
                subjects: Some(vec![Subject {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "User".into(),
                    name: User::Restricted.name().into(),
                    ..Subject::default()
                }]),
            },
        )
        .await
        .expect("create the RoleBinding");

    let restricted = client(server, User::Restricted).await;
    let configmaps = Api::<ConfigMap>::namespaced(restricted.clone(), "iar-rbac");
    // Granted: allowed once the binding reaches the authorizer's cache.
    let read = wait_for(
        "restricted get ConfigMap",
        Duration::from_secs(10),
        || async { configmaps.get("settings").await.map_err(|e| e.to_string()) },
    )
    .await;
    assert_eq!(read.metadata.name.as_deref(), Some("settings"));
    let listed = configmaps
        .list(&ListParams::default())
        .await
        .expect("restricted list ConfigMaps");
    assert_eq!(listed.items.len(), 1);

    let secret = Api::<Secret>::namespaced(restricted.clone(), "iar-rbac")
        .get("token")
        .await;
    assert_eq!(status_code(&secret), Some(403), "{secret:?}");
    let elsewhere = Api::<ConfigMap>::namespaced(restricted, "iar-rbac-other")
        .get("settings")
        .await;
    assert_eq!(status_code(&elsewhere), Some(403), "{elsewhere:?}");
    // The admin (system:masters) reads the same Secret.
    Api::<Secret>::namespaced(admin, "iar-rbac")
        .get("token")
        .await
        .expect("admin reads the Secret");
}

/// A server the test owns is torn down on drop: both process groups are
/// gone (no orphans) and its directory is removed.
#[tokio::test]
async fn dropping_a_server_leaves_no_processes() {
    let server = match ApiServer::start().await {
        Ok(Some(server)) => server,
        // No kube-apiserver: `shared` says so, loudly, and this test skips.
        Ok(None) => {
            assert!(server().await.is_none());
            return;
        }
        Err(e) => panic!("start an owned API server: {e}"),
    };
    let pids = server.pids();
    let dir = server.dir().to_path_buf();
    assert_eq!(pids.len(), 2, "etcd and kube-apiserver");
    for pid in &pids {
        assert!(alive(*pid), "{pid} runs before the drop");
    }
    client(&server, User::Admin)
        .await
        .apiserver_version()
        .await
        .expect("the owned server answers");

    drop(server);
    for pid in &pids {
        assert!(!alive(*pid), "process {pid} survived the drop");
    }
    assert!(!dir.exists(), "{dir:?} survived the drop");
}

/// Whether a process (not a reaped zombie) with this pid exists.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}
