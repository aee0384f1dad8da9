//! Contract 1.4.0's `update` and `patch` at the boundary, over the manifest
//! cluster's overlay (which keeps resource versions as an API server
//! does): a plugin changes what it created, at the version it read; a
//! hostile guest tries every way past the rules, and each refusal names
//! its rule and changes nothing.

use crate::cluster_writes::{annotation, cluster, files, hostile, hostile_with, id_config};
use crate::support::*;
use iar::cluster::writes::{BACKUP_UID_LABEL, CREATED_BY_ANNOTATION};
use iar::{BackupRef, ClusterReader, ItemRef, Limits, Phase};
use serde_json::{Value, json};
use std::sync::Arc;

const UPDATED: &str = "hostile.iar.test/updated";
const PATCHED: &str = "hostile.iar.test/patched";

fn with<'a>(
    mut config: Vec<(&'a str, &'a str)>,
    more: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    config.extend_from_slice(more);
    config
}

/// The object an `ok:` answer returned.
fn written(answer: &str) -> Value {
    serde_json::from_str(
        answer
            .strip_prefix("ok:")
            .unwrap_or_else(|| panic!("{answer}")),
    )
    .unwrap()
}

fn made() -> ItemRef {
    ItemRef::new("", "configmaps", "shop", "made")
}

/// A plugin updates the object it created and patches it (merge and JSON
/// patch), each write at the version read; a stale version is a conflict;
/// the host's labels survive a patch that removes them; status, kind and
/// the patch types the host does not apply are refused by rule.
#[test]
fn an_own_object_is_updated_and_patched_at_the_version_it_was_read() {
    let (_base, overlay, reader) = cluster();
    let cluster: Arc<dyn ClusterReader> = reader.clone();
    let b = backup(Phase::Backup);
    let run = |config: Vec<(&str, &str)>, key: &str| {
        annotation(&hostile(&config, &["configmaps"]), cluster.clone(), &b, key)
    };
    // Created (version 1), then updated from what create returned.
    let updated = written(&run(id_config("update-id", "shop", "made"), UPDATED));
    assert_eq!(updated["data"], json!({"step": "updated"}));
    assert_eq!(updated["metadata"]["labels"]["hostile"], "updated");
    assert_eq!(updated["metadata"]["labels"][BACKUP_UID_LABEL], b.uid);
    assert_eq!(updated["metadata"]["resourceVersion"], "2");
    let stored = reader.get(&made()).unwrap().expect("in the overlay");
    assert_eq!(stored["data"], json!({"step": "updated"}));
    assert_eq!(files(overlay.path()), ["configmaps.core/shop/made.yaml"]);

    // The version create returned is gone: a conflict, nothing written.
    let stale = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "made", "namespace": "shop", "resourceVersion": "1"},
        "data": {"step": "stale"}})
    .to_string();
    let got = run(
        with(
            id_config("update-id", "shop", "made"),
            &[("update-object", &stale)],
        ),
        UPDATED,
    );
    assert!(got.starts_with("conflict:"), "{got}");
    assert_eq!(
        reader.get(&made()).unwrap().unwrap()["data"]["step"],
        "updated"
    );

    // A merge patch without a version applies to the object as it is, and
    // cannot take the host's marks off.
    let merge = r#"{"data": {"more": "x"}, "metadata": {"labels": {"iar.dev/backup-uid": null, "hostile": null}, "annotations": {"iar.dev/created-by": "someone"}}}"#;
    let patched = written(&run(
        with(id_config("patch-id", "shop", "made"), &[("patch", merge)]),
        PATCHED,
    ));
    assert_eq!(patched["data"], json!({"step": "updated", "more": "x"}));
    assert_eq!(patched["metadata"]["resourceVersion"], "3");
    assert_eq!(patched["metadata"]["labels"][BACKUP_UID_LABEL], b.uid);
    assert!(patched["metadata"]["labels"].get("hostile").is_none());
    assert_eq!(
        patched["metadata"]["annotations"][CREATED_BY_ANNOTATION],
        updated["metadata"]["annotations"][CREATED_BY_ANNOTATION]
    );

    // A JSON patch whose test holds applies; a failing test is invalid.
    let json_patch = r#"[{"op": "test", "path": "/data/more", "value": "x"}, {"op": "replace", "path": "/data/more", "value": "y"}]"#;
    let patched = written(&run(
        with(
            id_config("patch-id", "shop", "made"),
            &[("patch-type", "json"), ("patch", json_patch)],
        ),
        PATCHED,
    ));
    assert_eq!(patched["data"]["more"], "y");
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[
                ("patch-type", "json"),
                (
                    "patch",
                    r#"[{"op": "test", "path": "/data/more", "value": "x"}]"#,
                ),
            ],
            "invalid:",
        ),
        // A merge patch naming a version that is gone.
        (
            &[(
                "patch",
                r#"{"metadata": {"resourceVersion": "2"}, "data": {"more": "z"}}"#,
            )],
            "conflict:",
        ),
        // What a plugin may not change.
        (
            &[
                ("patch-type", "json"),
                (
                    "patch",
                    r#"[{"op": "replace", "path": "/kind", "value": "Secret"}]"#,
                ),
            ],
            "(rule: write-identity)",
        ),
        (
            &[("patch", r#"{"metadata": {"name": "elsewhere"}}"#)],
            "(rule: write-identity)",
        ),
        (
            &[
                ("patch-type", "strategic"),
                ("patch", r#"{"data": {"more": "z"}}"#),
            ],
            "(rule: patch-type)",
        ),
    ];
    for (more, want) in cases {
        let got = run(with(id_config("patch-id", "shop", "made"), more), PATCHED);
        assert!(
            got.contains(want) && !got.starts_with("ok:"),
            "{more:?}: {got}"
        );
    }
    let stored = reader.get(&made()).unwrap().unwrap();
    assert_eq!(stored["data"], json!({"step": "updated", "more": "y"}));
    assert_eq!(stored["kind"], "ConfigMap");
    assert_eq!(stored["metadata"]["resourceVersion"], "4");
}

/// A hostile change: the guest's config, its write grants, the phase, what
/// the answer must say.
type ChangeCase<'a> = (Vec<(&'a str, &'a str)>, Vec<&'a str>, Phase, &'a str);

/// Every rule of update and patch, from a hostile guest: an object the
/// plugin did not create (the operator's manifest), no grant, another
/// namespace, no version, another name, finalize, a name that reaches a
/// path, an object that is not there. Each answer names its rule (or says
/// not-found), and nothing is written anywhere.
#[test]
fn hostile_changes_are_refused_by_rule_and_change_nothing() {
    let (_base, overlay, reader) = cluster();
    let cluster: Arc<dyn ClusterReader> = reader.clone();
    let object = |name: &str, version: Option<&str>| {
        let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "shop"}, "data": {"a": "changed"}});
        if let Some(v) = version {
            o["metadata"]["resourceVersion"] = json!(v);
        }
        o.to_string()
    };
    let operators = object("operators", Some("1"));
    let unversioned = object("made", None);
    let renamed = object("other", Some("1"));
    let ghost = object("ghost", Some("1"));
    let drop_labels = r#"{"metadata": {"labels": null}}"#;
    let cases: Vec<ChangeCase> = vec![
        // The operator's ConfigMap: neither updated nor patched.
        (
            with(
                id_config("update-id", "shop", "operators"),
                &[("update-object", &operators)],
            ),
            vec!["configmaps"],
            Phase::Backup,
            "(rule: update-not-own)",
        ),
        (
            with(
                id_config("patch-id", "shop", "operators"),
                &[("patch", drop_labels)],
            ),
            vec!["configmaps"],
            Phase::Backup,
            "(rule: update-not-own)",
        ),
        (
            with(
                id_config("patch-id", "shop", "operators"),
                &[("patch", drop_labels)],
            ),
            vec!["secrets"],
            Phase::Backup,
            "(rule: write-grant)",
        ),
        (
            with(
                id_config("patch-id", "kube-system", "x"),
                &[("patch", "{}")],
            ),
            vec!["configmaps"],
            Phase::Backup,
            "(rule: write-namespace)",
        ),
        (
            with(
                id_config("update-id", "shop", "made"),
                &[("update-object", &unversioned)],
            ),
            vec!["configmaps"],
            Phase::Backup,
            "(rule: update-resource-version)",
        ),
        (
            with(
                id_config("update-id", "shop", "made"),
                &[("update-object", &renamed)],
            ),
            vec!["configmaps"],
            Phase::Backup,
            "(rule: write-identity)",
        ),
        (
            with(
                id_config("update-id", "shop", "operators"),
                &[("update-object", &operators)],
            ),
            vec!["configmaps"],
            Phase::Finalize,
            "(rule: no-update-in-finalize)",
        ),
        (
            with(
                id_config("patch-id", "shop", "../../etc/x"),
                &[("patch", "{}")],
            ),
            vec!["configmaps"],
            Phase::Backup,
            "(rule: invalid-identifier)",
        ),
        (
            with(
                id_config("update-id", "shop", "ghost"),
                &[("update-object", &ghost)],
            ),
            vec!["configmaps"],
            Phase::Backup,
            "not-found:",
        ),
    ];
    for (config, writes, phase, want) in cases {
        let key = if config[0].1 == "update-id" {
            UPDATED
        } else {
            PATCHED
        };
        let got = annotation(
            &hostile(&config, &writes),
            cluster.clone(),
            &backup(phase),
            key,
        );
        assert!(
            got.contains(want) && !got.starts_with("ok:"),
            "{config:?} granted {writes:?} in {phase:?}: {got}"
        );
    }
    assert!(
        files(overlay.path()).is_empty(),
        "{:?}",
        files(overlay.path())
    );
    let operators = reader
        .get(&ItemRef::new("", "configmaps", "shop", "operators"))
        .unwrap()
        .unwrap();
    assert_eq!(operators["data"], json!({"a": "b"}));
    assert_eq!(operators["metadata"]["labels"], json!({"tier": "a"}));
}

/// Updates and patches count against `maxCreatesPerBackup` with creates:
/// a plugin cannot rewrite its objects without bound.
#[test]
fn changes_count_against_the_plugins_writes_in_a_backup() {
    let (_base, _overlay, reader) = cluster();
    let cluster: Arc<dyn ClusterReader> = reader.clone();
    let b = BackupRef {
        uid: "66666666-2222-3333-4444-555555555555".into(),
        ..backup(Phase::Backup)
    };
    let limits = Limits {
        max_creates_per_backup: 3,
        ..Limits::default()
    };
    let run = |config: Vec<(&str, &str)>, key: &str| {
        annotation(
            &hostile_with(&config, &["configmaps"], limits.clone()),
            cluster.clone(),
            &b,
            key,
        )
    };
    // A create and an update: two.
    assert!(run(id_config("update-id", "shop", "capped"), UPDATED).starts_with("ok:"));
    let patch = with(
        id_config("patch-id", "shop", "capped"),
        &[("patch", r#"{"data": {"n": "3"}}"#)],
    );
    assert!(
        run(patch.clone(), PATCHED).starts_with("ok:"),
        "the third write"
    );
    let got = run(patch, PATCHED);
    assert!(got.contains("(rule: create-limit)"), "{got}");
}

/// Contract 1.4.0's read-own: a Secret the plugin created is read back
/// without a read grant for Secrets; a Secret it did not create, and one
/// that does not exist, get one and the same refusal, as does its own
/// Secret once its write grant is gone.
#[test]
fn a_plugin_reads_back_what_it_created_and_nothing_else_ungranted() {
    let base = tempfile::tempdir().unwrap();
    std::fs::write(
        base.path().join("secret.yaml"),
        "apiVersion: v1\nkind: Secret\nmetadata: {name: foreign, namespace: shop}\ndata: {k: dg==}\n",
    )
    .unwrap();
    let overlay = tempfile::tempdir().unwrap();
    let cluster: Arc<dyn ClusterReader> = Arc::new(
        iar::ManifestCluster::new(vec![base.path().to_path_buf()])
            .with_overlay(overlay.path().to_path_buf()),
    );
    let b = backup(Phase::Backup);
    let secret = |behavior: &'static str, name: &'static str| {
        with(
            vec![
                ("behavior", behavior),
                ("id-group", ""),
                ("id-resource", "secrets"),
                ("id-namespace", "shop"),
                ("id-name", name),
            ],
            &[("kind", "Secret")],
        )
    };
    let run = |config: Vec<(&str, &str)>, writes: &[&str], key: &str| {
        annotation(&hostile(&config, writes), cluster.clone(), &b, key)
    };
    let created = run(
        secret("create-id", "mine"),
        &["secrets"],
        "hostile.iar.test/created",
    );
    assert!(created.starts_with("ok:"), "{created}");
    let got = run(
        secret("get-id", "mine"),
        &["secrets"],
        "hostile.iar.test/got",
    );
    let got: Value = serde_json::from_str(got.strip_prefix("found:").expect(&got)).unwrap();
    assert_eq!(got["metadata"]["name"], "mine");
    let refusal = "error:reading secrets is not granted to this plugin (rule: read-grant)";
    for (name, writes) in [
        ("foreign", &["secrets"][..]),
        ("absent", &["secrets"][..]),
        ("mine", &[][..]),
        ("mine", &["configmaps"][..]),
    ] {
        let got = run(secret("get-id", name), writes, "hostile.iar.test/got");
        assert_eq!(got, refusal, "{name} granted {writes:?}");
    }
}

/// Contract 1.4.0's `generateName`: a create with no name is named by the
/// host from the prefix (as the API server names it), recorded and
/// returned; no prefix is refused by rule, and a prefix that would make a
/// name reaching another path is refused as any such name is.
#[test]
fn a_create_without_a_name_is_named_from_its_generate_name() {
    let (_base, overlay, reader) = cluster();
    let cluster: Arc<dyn ClusterReader> = reader.clone();
    let b = backup(Phase::Backup);
    let object = |meta: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}).to_string()
    };
    let run = |object: &str| {
        let config = with(id_config("create-id", "shop", ""), &[("object", object)]);
        annotation(
            &hostile(&config, &["configmaps"]),
            cluster.clone(),
            &b,
            "hostile.iar.test/created",
        )
    };
    let mut names = Vec::new();
    for _ in 0..2 {
        let made = written(&run(&object(json!({"generateName": "gen-"}))));
        let name = made["metadata"]["name"].as_str().unwrap().to_string();
        assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
        assert_eq!(made["metadata"]["labels"][BACKUP_UID_LABEL], b.uid);
        names.push(format!("configmaps.core/shop/{name}.yaml"));
    }
    names.sort();
    assert_eq!(files(overlay.path()), names, "two objects, two names");
    for (meta, rule) in [
        (json!({}), "generate-name"),
        (json!({"generateName": ""}), "generate-name"),
        (
            json!({"generateName": "../../etc/x-"}),
            "invalid-identifier",
        ),
    ] {
        let got = run(&object(meta.clone()));
        assert!(
            got.starts_with("error:") && got.ends_with(&format!("(rule: {rule})")),
            "{meta}: {got}"
        );
    }
    assert_eq!(files(overlay.path()).len(), 2);
}
