use super::super::tests::scope;
use super::super::{BACKUP_UID_LABEL, CREATED_BY_ANNOTATION, WriteCall, WriteGrants, WriteScope};
use super::*;
use serde_json::json;

fn execute(namespace: &str, finalize: bool) -> WriteScope {
    scope(WriteCall::Execute {
        namespace: namespace.into(),
        finalize,
    })
}

fn id() -> ItemRef {
    ItemRef::new("", "configmaps", "shop", "state")
}

fn grants() -> WriteGrants {
    WriteGrants::only(&["configmaps"]).unwrap()
}

/// The object as the cluster holds it: the host's marks, a status, owner
/// references and finalizers the plugin may not touch.
fn current() -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "state", "namespace": "shop", "uid": "u-9", "resourceVersion": "41",
            "labels": {"iar.dev/backup-uid": "uid-1", "iar.dev/backup-name": "nightly", "app": "a"},
            "annotations": {"iar.dev/created-by": "snap", "iar.dev/backup-name": "nightly"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "p-1"}],
            "finalizers": ["keep"],
        },
        "data": {"step": "1"},
        "status": {"seen": true},
    })
}

fn rule_of<T: std::fmt::Debug>(r: Result<T, WriteRefused>) -> &'static str {
    r.expect_err("refused").rule
}

#[test]
fn a_change_is_checked_for_grant_call_finalize_namespace_and_size() {
    let ok = check_change(
        "updating",
        &execute("shop", false),
        &grants(),
        &id(),
        10,
        100,
    );
    assert_eq!(ok, Ok(()));
    for call in [WriteCall::Progress, WriteCall::Cancel] {
        assert_eq!(
            check_change("updating", &scope(call), &grants(), &id(), 10, 100),
            Ok(())
        );
    }
    let refused = |scope: &WriteScope, grants: &WriteGrants, len| {
        rule_of(check_change("patching", scope, grants, &id(), len, 100))
    };
    assert_eq!(refused(&scope(WriteCall::None), &grants(), 10), rule::CALL);
    assert_eq!(
        refused(&execute("shop", false), &WriteGrants::none(), 10),
        rule::GRANT
    );
    assert_eq!(
        refused(&execute("shop", true), &grants(), 10),
        rule::UPDATE_FINALIZE
    );
    assert_eq!(
        refused(&execute("other", false), &grants(), 10),
        rule::NAMESPACE
    );
    assert_eq!(
        refused(&execute("shop", false), &grants(), 101),
        rule::OBJECT
    );
}

#[test]
fn an_update_names_the_version_it_read_and_the_identifiers_object() {
    let with = |v: Value| parse_update(&id(), &v.to_string());
    let good = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"resourceVersion": "41"}, "data": {}});
    let parsed = with(good.clone()).expect("accepted");
    assert_eq!(parsed["metadata"]["name"], "state", "the name is filled in");
    assert_eq!(parsed["metadata"]["namespace"], "shop");
    let mut no_version = good.clone();
    no_version["metadata"] = json!({});
    assert_eq!(rule_of(with(no_version)), rule::RESOURCE_VERSION);
    let mut renamed = good.clone();
    renamed["metadata"]["name"] = json!("other");
    assert_eq!(rule_of(with(renamed)), rule::IDENTITY);
    let mut moved = good.clone();
    moved["metadata"]["namespace"] = json!("kube-system");
    assert_eq!(rule_of(with(moved)), rule::IDENTITY);
    let mut regrouped = good.clone();
    regrouped["apiVersion"] = json!("apps/v1");
    assert_eq!(rule_of(with(regrouped)), rule::IDENTITY);
    assert_eq!(rule_of(parse_update(&id(), "[1]")), rule::OBJECT);
    assert_eq!(rule_of(parse_update(&id(), "{")), rule::OBJECT);
}

#[test]
fn what_is_written_keeps_status_ownership_and_the_hosts_marks() {
    let s = execute("shop", false);
    // A plugin that drops the host's marks, sets its own status, owner
    // references and finalizers, and changes its data and a label.
    let wanted = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "state", "resourceVersion": "41",
            "labels": {"app": "b", "iar.dev/backup-uid": "someone-else"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "n-1"}],
            "finalizers": ["never-goes"],
        },
        "data": {"step": "2"},
        "status": {"seen": false},
    });
    let out = rebase("updating", &s, &id(), &current(), wanted).expect("rebased");
    assert_eq!(out["data"], json!({"step": "2"}));
    assert_eq!(out["status"], json!({"seen": true}), "status as read");
    let meta = &out["metadata"];
    assert_eq!(
        meta["ownerReferences"],
        current()["metadata"]["ownerReferences"]
    );
    assert_eq!(meta["finalizers"], json!(["keep"]));
    assert_eq!(meta["uid"], "u-9");
    assert_eq!(meta["labels"]["app"], "b");
    assert_eq!(meta["labels"][BACKUP_UID_LABEL], "uid-1", "marks set again");
    assert_eq!(meta["annotations"][CREATED_BY_ANNOTATION], "snap");
    assert_eq!(meta["resourceVersion"], "41");

    let mut rekinded = current();
    rekinded["kind"] = json!("Secret");
    assert_eq!(
        rule_of(rebase("updating", &s, &id(), &current(), rekinded)),
        rule::IDENTITY
    );
    let mut reuid = current();
    reuid["metadata"]["uid"] = json!("u-other");
    assert_eq!(
        rule_of(rebase("updating", &s, &id(), &current(), reuid)),
        rule::IDENTITY
    );
}

#[test]
fn merge_and_json_patches_apply_and_a_strategic_merge_is_refused() {
    let merged = apply_patch(
        &id(),
        &current(),
        PatchKind::Merge,
        r#"{"data": {"step": "3", "new": "x"}, "metadata": {"labels": {"app": null}}}"#,
    )
    .expect("applies");
    assert_eq!(merged["data"], json!({"step": "3", "new": "x"}));
    assert!(merged["metadata"]["labels"].get("app").is_none());

    let patched = apply_patch(
        &id(),
        &current(),
        PatchKind::Json,
        r#"[{"op": "test", "path": "/data/step", "value": "1"},
            {"op": "replace", "path": "/data/step", "value": "4"}]"#,
    )
    .expect("applies");
    assert_eq!(patched["data"]["step"], "4");

    let failed_test = apply_patch(
        &id(),
        &current(),
        PatchKind::Json,
        r#"[{"op": "test", "path": "/data/step", "value": "9"}]"#,
    );
    assert!(
        matches!(failed_test, Err(ChangeError::Invalid(_))),
        "{failed_test:?}"
    );
    for (kind, body) in [
        (PatchKind::Merge, "[1]"),
        (PatchKind::Merge, "{"),
        (PatchKind::Json, r#"{"op": "add"}"#),
        (
            PatchKind::Json,
            r#"[{"op": "remove", "path": "/nope/deeper"}]"#,
        ),
    ] {
        let r = apply_patch(&id(), &current(), kind, body);
        assert!(
            matches!(r, Err(ChangeError::Invalid(_))),
            "{kind:?} {body}: {r:?}"
        );
    }
    match apply_patch(&id(), &current(), PatchKind::StrategicMerge, "{}") {
        Err(ChangeError::Refused(r)) => assert_eq!(r.rule, rule::PATCH_TYPE),
        other => panic!("not refused: {other:?}"),
    }
}
