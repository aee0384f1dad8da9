use super::*;
use serde_json::json;

pub(super) fn scope(call: WriteCall) -> WriteScope {
    WriteScope {
        plugin: "snap".into(),
        backup_name: "nightly".into(),
        backup_uid: "uid-1".into(),
        call,
    }
}

fn execute(namespace: &str) -> WriteScope {
    scope(WriteCall::Execute {
        namespace: namespace.into(),
        finalize: false,
    })
}

fn id(namespace: &str, name: &str) -> ItemRef {
    ItemRef::new(
        "snapshot.storage.k8s.io",
        "volumesnapshots",
        namespace,
        name,
    )
}

fn grants() -> WriteGrants {
    WriteGrants::only(&["volumesnapshots.snapshot.storage.k8s.io"]).unwrap()
}

fn snapshot(name: &str) -> String {
    json!({
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"source": {"persistentVolumeClaimName": "data"}},
    })
    .to_string()
}

fn rule_of(r: Result<Value, WriteRefused>) -> &'static str {
    r.expect_err("refused").rule
}

/// A write grant is an exact resource name: globs, and what is not a
/// resource name, are refused when the settings are read.
#[test]
fn write_grants_are_exact_resource_names() {
    for bad in ["*", "volumesnapshots.*", "secret?", "a/b", "", "Pods"] {
        assert!(WriteGrants::only(&[bad]).is_err(), "{bad:?} accepted");
    }
    let g = WriteGrants::only(&["configmaps", "volumesnapshots.snapshot.storage.k8s.io"]).unwrap();
    assert!(g.allows(&GroupResource::new("", "configmaps")));
    assert!(g.allows(&GroupResource::new(
        "snapshot.storage.k8s.io",
        "volumesnapshots"
    )));
    assert!(!g.allows(&GroupResource::new("", "secrets")));
    assert!(!g.allows(&GroupResource::new(
        "snapshot.storage.k8s.io",
        "volumesnapshotcontents"
    )));
    assert!(WriteGrants::default().is_empty());
}

/// The host's labels and annotation are set over whatever the plugin
/// wrote, and what the API server owns is left out.
#[test]
fn a_create_is_labelled_for_the_backup_and_stripped_of_server_fields() {
    let object = json!({
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": "s", "uid": "forged", "resourceVersion": "7",
            "ownerReferences": [{"name": "x"}], "finalizers": ["f"],
            "labels": {"app": "web", BACKUP_UID_LABEL: "someone-else", "n": 1},
            "annotations": {CREATED_BY_ANNOTATION: "other-plugin"},
        },
        "status": {"readyToUse": true},
    })
    .to_string();
    let v = prepare_create(
        &execute("shop"),
        &grants(),
        &id("shop", "s"),
        &object,
        1 << 20,
    )
    .unwrap();
    let meta = &v["metadata"];
    assert_eq!(meta["namespace"], "shop", "filled in from the identifier");
    assert_eq!(meta["labels"]["app"], "web");
    assert_eq!(meta["labels"][BACKUP_UID_LABEL], "uid-1");
    assert_eq!(meta["labels"][BACKUP_NAME_LABEL], "nightly");
    assert_eq!(meta["annotations"][CREATED_BY_ANNOTATION], "snap");
    assert!(
        meta["labels"]["n"].is_null(),
        "a non-string label is dropped"
    );
    for owned in ["uid", "resourceVersion", "ownerReferences", "finalizers"] {
        assert!(meta[owned].is_null(), "{owned} kept: {v}");
    }
    assert!(v["status"].is_null());
    // Its result is what the host calls its own.
    let mut created = v.clone();
    created["metadata"]["uid"] = json!("u");
    assert!(is_own(&created, &execute("shop")));
    let other_backup = WriteScope {
        backup_uid: "uid-2".into(),
        ..execute("shop")
    };
    assert!(!is_own(&created, &other_backup));
    let other_plugin = WriteScope {
        plugin: "other".into(),
        ..execute("shop")
    };
    assert!(!is_own(&created, &other_plugin));
}

/// Each rule refuses by name.
#[test]
fn every_write_rule_refuses_by_name() {
    let ok = snapshot("s");
    let g = grants();
    // write-grant: another resource, or no grant at all.
    let cm = ItemRef::new("", "configmaps", "shop", "s");
    assert_eq!(
        rule_of(prepare_create(&execute("shop"), &g, &cm, &ok, 1 << 20)),
        rule::GRANT
    );
    assert_eq!(
        rule_of(prepare_create(
            &execute("shop"),
            &WriteGrants::none(),
            &id("shop", "s"),
            &ok,
            1 << 20
        )),
        rule::GRANT
    );
    // write-call / no-create-in-finalize.
    for call in [WriteCall::None, WriteCall::Progress, WriteCall::Cancel] {
        assert_eq!(
            rule_of(prepare_create(
                &scope(call),
                &g,
                &id("shop", "s"),
                &ok,
                1 << 20
            )),
            rule::CALL
        );
    }
    let finalize = scope(WriteCall::Execute {
        namespace: "shop".into(),
        finalize: true,
    });
    assert_eq!(
        rule_of(prepare_create(
            &finalize,
            &g,
            &id("shop", "s"),
            &ok,
            1 << 20
        )),
        rule::FINALIZE
    );
    // write-namespace: another namespace than the item's, or from a
    // cluster-scoped item.
    assert_eq!(
        rule_of(prepare_create(
            &execute("shop"),
            &g,
            &id("kube-system", "s"),
            &ok,
            1 << 20
        )),
        rule::NAMESPACE
    );
    assert_eq!(
        rule_of(prepare_create(
            &execute(""),
            &g,
            &id("shop", "s"),
            &ok,
            1 << 20
        )),
        rule::NAMESPACE
    );
    // write-object: not JSON, not an object, no kind, another group, a
    // name or namespace that is not the identifier's, too big.
    for bad in [
        "{not json".to_string(),
        "[1,2]".to_string(),
        json!({"apiVersion": "snapshot.storage.k8s.io/v1", "metadata": {}}).to_string(),
        json!({"apiVersion": "v1", "kind": "ConfigMap"}).to_string(),
        snapshot("other-name"),
        json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot", "metadata": {"namespace": "kube-system"}}).to_string(),
        json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot", "metadata": "x"}).to_string(),
    ] {
        assert_eq!(
            rule_of(prepare_create(&execute("shop"), &g, &id("shop", "s"), &bad, 1 << 20)),
            rule::OBJECT,
            "{bad}"
        );
    }
    assert_eq!(
        rule_of(prepare_create(
            &execute("shop"),
            &g,
            &id("shop", "s"),
            &ok,
            10
        )),
        rule::OBJECT
    );
    // Deletes: the grant and the call.
    assert_eq!(
        check_delete(&execute("shop"), &WriteGrants::none(), &id("shop", "s"))
            .unwrap_err()
            .rule,
        rule::GRANT
    );
    assert_eq!(
        check_delete(&scope(WriteCall::None), &g, &id("shop", "s"))
            .unwrap_err()
            .rule,
        rule::CALL
    );
    for call in [WriteCall::Progress, WriteCall::Cancel] {
        check_delete(&scope(call), &g, &id("shop", "s")).unwrap();
    }
    // The message names the rule.
    let refused = prepare_create(&finalize, &g, &id("shop", "s"), &ok, 1 << 20).unwrap_err();
    assert!(
        refused
            .to_string()
            .ends_with("(rule: no-create-in-finalize)"),
        "{refused}"
    );
}

/// A cluster-scoped object may be created from any item once its resource
/// is granted (the grant is explicit by construction).
#[test]
fn a_granted_cluster_scoped_resource_may_be_created() {
    let g = WriteGrants::only(&["volumesnapshotcontents.snapshot.storage.k8s.io"]).unwrap();
    let content = ItemRef::new("snapshot.storage.k8s.io", "volumesnapshotcontents", "", "c");
    let object =
        json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent"})
            .to_string();
    let v = prepare_create(&execute("shop"), &g, &content, &object, 1 << 20).unwrap();
    assert_eq!(v["metadata"]["name"], "c");
    assert!(v["metadata"]["namespace"].is_null());
}

/// The per-backup cap holds across calls: the plugin's creates in one
/// backup are counted together, a create that made nothing new is given
/// back, and another backup or plugin has its own count.
#[test]
fn creates_are_capped_per_plugin_per_backup() {
    let mut s = execute("shop");
    s.backup_uid = "cap-test-uid".into();
    claim_create(&s, 2).unwrap();
    claim_create(&s, 2).unwrap();
    let refused = claim_create(&s, 2).unwrap_err();
    assert_eq!(refused.rule, rule::CREATE_LIMIT);
    assert!(
        refused
            .to_string()
            .contains("already created or changed 2 objects"),
        "{refused}"
    );
    refund_create(&s);
    claim_create(&s, 2).unwrap();
    let mut other_backup = s.clone();
    other_backup.backup_uid = "cap-test-other".into();
    claim_create(&other_backup, 2).unwrap();
    let mut other_plugin = s.clone();
    other_plugin.plugin = "another".into();
    claim_create(&other_plugin, 2).unwrap();
}
