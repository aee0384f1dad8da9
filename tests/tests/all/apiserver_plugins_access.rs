//! The plugin ConfigMap watch when its identity may not read ConfigMaps,
//! against a real kube-apiserver (`iar-apiserver`): it says what to grant,
//! backs off, and loads once the access is granted.

use crate::support::*;
use iar::k8s::plugins::configmap::{self, ManifestInput};
use iar::k8s::plugins::status::ANNOTATION_STATUS;
use iar::k8s::plugins::{MAX_RETRY_DELAY, PluginRegistry, WatchFailure, WatchOptions, watch_with};
use iar_apiserver::User;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::time::Duration;

/// Generous: the machines that run these tests are often busy compiling.
const WITHIN: Duration = Duration::from_secs(60);

/// Binds a Role with what iar needs in `namespace` (deploy/rbac.yaml's
/// rules for ConfigMaps and Events) to `user`.
async fn grant_plugin_access(admin: &kube::Client, namespace: &str, user: User) {
    let rule = |groups: &[&str], resource: &str, verbs: &[&str]| PolicyRule {
        api_groups: Some(groups.iter().map(|g| g.to_string()).collect()),
        resources: Some(vec![resource.into()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    };
    let meta = |name: &str| ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        ..ObjectMeta::default()
    };
    Api::<Role>::namespaced(admin.clone(), namespace)
        .create(
            &PostParams::default(),
            &Role {
                metadata: meta("iar-plugins"),
                rules: Some(vec![
                    rule(&[""], "configmaps", &["get", "list", "watch", "patch"]),
                    rule(&["", "events.k8s.io"], "events", &["create", "patch"]),
                ]),
            },
        )
        .await
        .expect("create the Role");
    Api::<RoleBinding>::namespaced(admin.clone(), namespace)
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: meta("iar-plugins"),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "Role".into(),
                    name: "iar-plugins".into(),
                },
                subjects: Some(vec![Subject {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "User".into(),
                    name: user.name().into(),
                    ..Subject::default()
                }]),
            },
        )
        .await
        .expect("create the RoleBinding");
}

/// A watch whose identity may not list ConfigMaps says so, with the rule
/// to grant, and tries again after a growing delay: kube's watcher starts
/// each refused list again with an event of its own, which must not reset
/// the backoff (with `default_backoff()` alone it does, and a refused list
/// is retried every second for ever). Nothing is published meanwhile.
/// Once a Role grants the access, the next attempt lists and loads the
/// plugin, its status is written, and the failures are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_watch_says_what_to_grant_backs_off_and_loads_once_granted() {
    let Some(server) = server().await else {
        return;
    };
    let namespace = "plugins-refused";
    let admin = client(server, User::Admin).await;
    iar_apiserver::create_namespace(&admin, namespace).await;
    let component = std::fs::read(artifacts::LABELS).expect("the labels component");
    let cm = configmap::manifest(ManifestInput {
        name: "labels".into(),
        namespace: namespace.into(),
        component,
        ..ManifestInput::default()
    })
    .expect("a valid manifest");
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), namespace);
    configmaps
        .patch(
            "labels",
            &PatchParams::apply("iar-test"),
            &Patch::Apply(&cm),
        )
        .await
        .expect("apply the plugin ConfigMap");

    let restricted = client(server, User::Restricted).await;
    let registry = PluginRegistry::new();
    let mut failures = registry.watch_failures();
    let watching = {
        let registry = registry.clone();
        tokio::spawn(async move {
            let result = watch_with(
                restricted,
                namespace.into(),
                runtime(),
                registry,
                WatchOptions::default(),
            )
            .await;
            panic!("the watcher returned: {result:?}");
        })
    };
    let _abort = AbortOnDrop(watching);

    // The plugin watch's failures as they come, by attempt, to the third.
    let mut seen: BTreeMap<u32, WatchFailure> = BTreeMap::new();
    let three = tokio::time::timeout(WITHIN, async {
        loop {
            for f in failures.borrow_and_update().iter() {
                if f.label == configmap::LABEL {
                    seen.entry(f.attempt).or_insert_with(|| f.clone());
                }
            }
            if seen.keys().any(|attempt| *attempt >= 3) {
                return;
            }
            failures.changed().await.expect("the registry is kept");
        }
    })
    .await;
    assert!(
        three.is_ok(),
        "no third failure within {WITHIN:?}: {seen:#?}"
    );
    assert!(!registry.is_synced(), "synced without a list");
    assert_eq!(registry.current().generation, 0);
    let mut last = Duration::ZERO;
    for (attempt, f) in &seen {
        for part in [
            format!(
                "cannot list the ConfigMaps labelled {} in namespace \"{namespace}\"",
                configmap::LABEL
            ),
            "User \"restricted\" cannot list resource \"configmaps\"".into(),
            "verbs [get, list, watch, patch]".into(),
            "(rule: plugin-configmap-access)".into(),
            format!("failure {attempt} in a row, retried in "),
        ] {
            assert!(f.message.contains(&part), "{part:?} not in {}", f.message);
        }
        // kube's default: 800 ms, doubled at each failure, plus up to as
        // much again of jitter; capped.
        let floor =
            (Duration::from_millis(800) * 2u32.pow((attempt - 1).min(6))).min(MAX_RETRY_DELAY);
        assert!(
            f.retry_in >= floor && f.retry_in <= MAX_RETRY_DELAY,
            "attempt {attempt}: {:?}, not in {floor:?}..={MAX_RETRY_DELAY:?}",
            f.retry_in
        );
        assert!(f.retry_in > last, "the delay does not grow: {seen:#?}");
        last = f.retry_in;
    }

    grant_plugin_access(&admin, namespace, User::Restricted).await;
    let mut generations = registry.subscribe();
    let loaded = tokio::time::timeout(WITHIN, async {
        while !(registry.is_synced() && registry.current().get("labels").is_some()) {
            generations.changed().await.expect("the registry is kept");
        }
    })
    .await;
    assert!(
        loaded.is_ok(),
        "labels not loaded within {WITHIN:?} of the grant; failures {:#?}",
        *failures.borrow()
    );
    // The status is written with the access granted (patch).
    iar_tests::wait_for("a Ready status on labels", WITHIN, || async {
        let status = configmaps
            .get("labels")
            .await
            .map_err(|e| e.to_string())?
            .metadata
            .annotations
            .and_then(|mut a| a.remove(ANNOTATION_STATUS));
        match status.as_deref() {
            Some("Ready") => Ok(()),
            other => Err(format!("status {other:?}")),
        }
    })
    .await;
    let cleared = tokio::time::timeout(WITHIN, async {
        // The `Ref` it returns is a read lock on the registry's failures.
        failures.wait_for(|all| all.is_empty()).await.map(drop)
    })
    .await;
    assert!(
        cleared.is_ok(),
        "failures still recorded: {:#?}",
        *failures.borrow()
    );
}

/// Stops the watcher when the test ends, passed or not.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
