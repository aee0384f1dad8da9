use super::*;
use serde_json::json;

fn hooks(v: Value) -> RestoreHooks {
    RestoreHooks::from_spec(Some(&v)).unwrap()
}

fn pod(ns: &str, annotations: Value, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": ns, "annotations": annotations, "labels": labels},
        "spec": {
            "containers": [{"name": "db", "image": "postgres"}, {"name": "sidecar", "image": "s"}],
            "initContainers": [{"name": "own", "image": "busybox"}],
        },
    })
}

fn init_names(pod: &Value) -> Vec<&str> {
    pod["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

fn init_spec(names: &[&str]) -> Value {
    let containers: Vec<Value> = names
        .iter()
        .map(|n| json!({"name": n, "image": "busybox", "command": ["true"]}))
        .collect();
    json!({"init": {"initContainers": containers}})
}

/// Init containers from the spec go before the pod's own, after a pod
/// volume restore's restore-wait, from every entry whose namespaces take
/// the pod's namespace after mapping (Velero issue 4720).
#[test]
fn spec_init_containers_go_first_in_the_mapped_namespace() {
    let h = hooks(json!({"resources": [
        {"name": "a", "includedNamespaces": ["prod"], "postHooks": [init_spec(&["a1", "a2"])]},
        {"name": "b", "includedNamespaces": ["shop"], "postHooks": [init_spec(&["b1"])]},
        {"name": "c", "labelSelector": {"matchLabels": {"app": "db"}}, "postHooks": [init_spec(&["c1"])]},
    ]}));
    // Backed up in shop, restored into prod.
    let mut p = pod("shop", json!({}), json!({"app": "db"}));
    p["spec"]["initContainers"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"name": RESTORE_WAIT, "image": "velero"}));
    assert!(h.add_init_containers(&mut p, "prod", "uid").is_empty());
    assert_eq!(init_names(&p), [RESTORE_WAIT, "a1", "a2", "c1", "own"]);
    // Without the label, entry c does not take it.
    let mut p = pod("shop", json!({}), json!({"app": "web"}));
    h.add_init_containers(&mut p, "shop", "uid");
    assert_eq!(init_names(&p), ["b1", "own"]);
}

/// A pod's annotations replace the spec's init hooks; the container's
/// name, when not given, is the same on every run of one restore.
#[test]
fn annotations_replace_the_specs_init_hooks() {
    let h = hooks(json!({"resources": [{"name": "a", "postHooks": [init_spec(&["a1"])]}]}));
    let annotations = json!({
        "init.hook.restore.velero.io/container-image": "alpine",
        "init.hook.restore.velero.io/command": "[\"sh\", \"-c\", \"echo hi\"]",
    });
    let mut first = pod("shop", annotations.clone(), json!({}));
    h.add_init_containers(&mut first, "shop", "uid-1");
    let added = &first["spec"]["initContainers"][0];
    assert_eq!(added["image"], "alpine");
    assert_eq!(added["command"], json!(["sh", "-c", "echo hi"]));
    let name = added["name"].as_str().unwrap();
    assert!(
        name.starts_with("velero-restore-init-") && name.len() == 28,
        "{name}"
    );
    assert_eq!(init_names(&first).len(), 2, "no spec hook beside it");
    let mut again = pod("shop", annotations, json!({}));
    h.add_init_containers(&mut again, "shop", "uid-1");
    assert_eq!(again["spec"]["initContainers"][0]["name"], name);
    // Named, with a plain-text command (the whole text, not split).
    let mut named = pod(
        "shop",
        json!({
            "init.hook.restore.velero.io/container-image": "alpine",
            "init.hook.restore.velero.io/container-name": "prep",
            "init.hook.restore.velero.io/command": "/bin/prep --all",
        }),
        json!({}),
    );
    h.add_init_containers(&mut named, "shop", "uid");
    assert_eq!(
        named["spec"]["initContainers"][0],
        json!({"name": "prep", "image": "alpine", "resources": {}, "command": ["/bin/prep --all"]})
    );
}

/// Exec hooks: the annotation's replaces the spec's; the container is the
/// first one when none is named; Velero's defaults for what it cannot
/// read, each a warning.
#[test]
fn exec_hooks_from_annotations_and_the_spec() {
    let h = hooks(json!({"resources": [{"name": "reindex", "postHooks": [
        {"exec": {"command": ["reindex"], "onError": "Fail", "waitTimeout": "2m", "execTimeout": "1m", "waitForReady": true}},
        {"exec": {"container": "sidecar", "command": ["notify"]}},
    ]}]}));
    let (spec_hooks, warnings) = h.exec_hooks(&pod("shop", json!({}), json!({})));
    assert!(warnings.is_empty());
    assert_eq!(spec_hooks.len(), 2);
    assert_eq!(spec_hooks[0].container, "db");
    assert_eq!(spec_hooks[0].on_error, OnError::Fail);
    assert_eq!(spec_hooks[0].wait_timeout, Duration::from_secs(120));
    assert_eq!(spec_hooks[0].exec_timeout, Duration::from_secs(60));
    assert!(spec_hooks[0].wait_for_ready);
    assert_eq!(spec_hooks[1].container, "sidecar");
    assert_eq!(spec_hooks[1].on_error, OnError::Continue);
    assert_eq!(spec_hooks[1].name, "reindex");

    let annotated = pod(
        "shop",
        json!({
            "post.hook.restore.velero.io/command": "[\"touch\", \"/data/restored\"]",
            "post.hook.restore.velero.io/container": "sidecar",
            "post.hook.restore.velero.io/on-error": "Sometimes",
            "post.hook.restore.velero.io/exec-timeout": "ten seconds",
            "post.hook.restore.velero.io/wait-for-ready": "T",
        }),
        json!({}),
    );
    let (from_annotation, warnings) = h.exec_hooks(&annotated);
    assert_eq!(
        from_annotation,
        [ExecHook {
            name: FROM_ANNOTATION.into(),
            container: "sidecar".into(),
            command: vec!["touch".into(), "/data/restored".into()],
            on_error: OnError::Continue,
            exec_timeout: Duration::ZERO,
            wait_timeout: Duration::ZERO,
            wait_for_ready: true,
        }]
    );
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("on-error \"Sometimes\""),
        "{warnings:?}"
    );
    assert!(
        warnings[1].contains("exec-timeout \"ten seconds\"") && warnings[1].contains("db-0"),
        "{warnings:?}"
    );
}

/// What iar would misread is refused before anything is restored, by
/// the path of the field.
#[test]
fn a_hook_spec_iar_would_misread_is_refused_by_name() {
    let refused = |v: Value| RestoreHooks::from_spec(Some(&v)).unwrap_err();
    let e =
        refused(json!({"resources": [{"name": "a", "postHooks": [{"exec": {"comand": ["x"]}}]}]}));
    assert!(
        e.contains("\"comand\"") && e.contains("did you mean command?"),
        "{e}"
    );
    let e =
        refused(json!({"resources": [{"name": "a", "postHooks": [{"exec": {"command": []}}]}]}));
    assert!(
        e.contains("resources[0] (a).postHooks[0].exec.command"),
        "{e}"
    );
    let e = refused(
        json!({"resources": [{"name": "a", "postHooks": [{"exec": {"command": ["x"], "onError": "fail"}}]}]}),
    );
    assert!(e.contains("onError"), "{e}");
    let e = refused(
        json!({"resources": [{"name": "a", "postHooks": [{"exec": {"command": ["x"], "waitTimeout": "soon"}}]}]}),
    );
    assert!(e.contains("waitTimeout"), "{e}");
    let e = refused(json!({"resources": [{"name": "a", "postHooks": [
        {"init": {"initContainers": [{"name": "x", "image": "busybox"}]}}
    ]}]}));
    assert!(
        e.contains("initContainers[0].command") && e.contains("restore-hook-init-container"),
        "{e}"
    );
    let e = refused(json!({"resources": [{"name": "a", "postHooks": [
        {"exec": {"command": ["x"]}, "init": {"initContainers": []}}
    ]}]}));
    assert!(e.contains("exactly one of exec and init"), "{e}");
    let e = refused(json!({"resources": [{"postHooks": []}]}));
    assert!(e.contains("resources[0].name: required"), "{e}");
    let e =
        refused(json!({"resources": [{"name": "a", "labelSelector": {"matchLabels": {"a": 1}}}]}));
    assert!(e.contains("(a)"), "{e}");
    // Velero's restore hooks take pods whatever resources the entry names.
    let h = hooks(
        json!({"resources": [{"name": "a", "includedResources": ["deployments"],
        "postHooks": [{"exec": {"command": ["x"]}}]}]}),
    );
    assert_eq!(h.exec_hooks(&pod("shop", json!({}), json!({}))).0.len(), 1);
}
