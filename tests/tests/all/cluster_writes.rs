//! Contract 1.2.0's cluster calls at the boundary: a hostile guest tries
//! every way past the write rules (grant, call, namespace, object,
//! someone else's object, identifiers, the host-call limit) and the list
//! rules, against the manifest cluster's overlay, where each create would
//! land as a file. Each refusal names its rule, and nothing is written
//! that a rule refused.

use crate::support::*;
use iar::cluster::writes::{BACKUP_UID_LABEL, CREATED_BY_ANNOTATION, WriteGrants};
use iar::{
    BackupRef, ClusterReader, Limits, ManifestCluster, NoCluster, Phase, Plugin, PluginSettings,
    ReadGrants,
};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

/// A base cluster holding one ConfigMap that no plugin created, and an
/// empty overlay.
pub(crate) fn cluster() -> (tempfile::TempDir, tempfile::TempDir, Arc<ManifestCluster>) {
    let base = tempfile::tempdir().unwrap();
    std::fs::write(
        base.path().join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: operators, namespace: shop, labels: {tier: a}}\ndata: {a: b}\n",
    )
    .unwrap();
    std::fs::write(
        base.path().join("cm2.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: second, namespace: shop, labels: {tier: b}}\n",
    )
    .unwrap();
    let overlay = tempfile::tempdir().unwrap();
    let reader = ManifestCluster::new(vec![base.path().to_path_buf()])
        .with_overlay(overlay.path().to_path_buf());
    (base, overlay, Arc::new(reader))
}

/// The hostile guest with `config`, granted to write `writes`.
pub(crate) fn hostile(config: &[(&str, &str)], writes: &[&str]) -> Plugin {
    hostile_with(config, writes, Limits::default())
}

pub(crate) fn hostile_with(config: &[(&str, &str)], writes: &[&str], limits: Limits) -> Plugin {
    let settings = PluginSettings {
        write_grants: WriteGrants::only(writes).unwrap(),
        ..settings(config, limits)
    };
    Plugin::from_file(&runtime(), artifacts::HOSTILE.as_ref(), settings).unwrap()
}

/// config for an identifier in the hostile guest's `id-*` keys.
pub(crate) fn id_config<'a>(
    behavior: &'a str,
    ns: &'a str,
    name: &'a str,
) -> Vec<(&'a str, &'a str)> {
    vec![
        ("behavior", behavior),
        ("id-group", ""),
        ("id-resource", "configmaps"),
        ("id-namespace", ns),
        ("id-name", name),
    ]
}

/// Runs execute on pod `shop/web-0` and returns the annotation `key`.
pub(crate) fn annotation(
    plugin: &Plugin,
    cluster: Arc<dyn iar::ClusterReader>,
    backup: &BackupRef,
    key: &str,
) -> String {
    let mut instance = plugin.instance(cluster);
    let out = instance
        .execute(&pod("web-0"), backup, &never_seen)
        .unwrap_or_else(|e| panic!("execute: {e}"));
    out.item.expect("annotated").into_value()["metadata"]["annotations"][key]
        .as_str()
        .unwrap()
        .to_string()
}

pub(crate) fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in walk(dir) {
        out.push(entry.strip_prefix(dir).unwrap().display().to_string());
    }
    out.sort();
    out
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().is_dir() {
            out.extend(walk(&entry.path()));
        } else {
            out.push(entry.path());
        }
    }
    out
}

/// A granted create in the item's namespace lands in the overlay,
/// labelled for the backup and annotated with the plugin, is recorded,
/// and is read back by the plugin; a retried create returns the same
/// object and creates nothing more; delete removes it, and a second
/// delete says it is gone.
#[test]
fn a_granted_create_lands_labelled_and_a_retry_creates_nothing_more() {
    let (_base, overlay, reader) = cluster();
    let mut config = id_config("create-id", "shop", "made");
    config.push(("create-times", "3"));
    let plugin = hostile(&config, &["configmaps"]);
    let mut instance = plugin.instance(reader.clone());
    let out = instance
        .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
        .unwrap();
    let created =
        out.item.unwrap().into_value()["metadata"]["annotations"]["hostile.iar.test/created"]
            .as_str()
            .unwrap()
            .to_string();
    let object: Value = serde_json::from_str(created.strip_prefix("ok:").expect(&created)).unwrap();
    assert_eq!(
        object["metadata"]["labels"][BACKUP_UID_LABEL],
        backup(Phase::Backup).uid
    );
    assert_eq!(
        object["metadata"]["annotations"][CREATED_BY_ANNOTATION],
        plugin.name()
    );
    assert!(!object["metadata"]["uid"].as_str().unwrap().is_empty());
    assert_eq!(files(overlay.path()), ["configmaps.core/shop/made.yaml"]);
    let records = instance.take_created();
    assert_eq!(records.len(), 1, "three creates, one object: {records:?}");
    assert_eq!(records[0].id.name, "made");
    assert_eq!(records[0].uid, object["metadata"]["uid"].as_str().unwrap());
    // Deleted by its creator, once.
    let deleter = hostile(&id_config("delete-id", "shop", "made"), &["configmaps"]);
    let b = backup(Phase::Backup);
    assert_eq!(
        annotation(&deleter, reader.clone(), &b, "hostile.iar.test/deleted"),
        "true"
    );
    assert!(files(overlay.path()).is_empty());
    assert_eq!(
        annotation(&deleter, reader, &b, "hostile.iar.test/deleted"),
        "false"
    );
}

/// A hostile case: the guest's config, the write grants, the rule refused.
type HostileCase<'a> = (Vec<(&'a str, &'a str)>, Vec<&'a str>, &'a str);

/// Every rule, from a hostile guest: each refusal names the rule and the
/// overlay stays empty.
#[test]
fn hostile_writes_are_refused_by_rule_and_write_nothing() {
    let (_base, overlay, reader) = cluster();
    let b = backup(Phase::Backup);
    let cases: Vec<HostileCase> = vec![
        // No grant at all, and a grant for another resource.
        (id_config("create-id", "shop", "x"), vec![], "write-grant"),
        (
            id_config("create-id", "shop", "x"),
            vec!["secrets"],
            "write-grant",
        ),
        // Another namespace than the item's.
        (
            id_config("create-id", "kube-system", "x"),
            vec!["configmaps"],
            "write-namespace",
        ),
        // An object that is not the identifier's, or not an object.
        (
            [
                id_config("create-id", "shop", "x"),
                vec![(
                    "object",
                    r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"y"}}"#,
                )],
            ]
            .concat(),
            vec!["configmaps"],
            "write-object",
        ),
        (
            [id_config("create-id", "shop", "x"), vec![("object", "[1]")]].concat(),
            vec!["configmaps"],
            "write-object",
        ),
        (
            [
                id_config("create-id", "shop", "x"),
                vec![("object", r#"{"apiVersion":"apps/v1","kind":"ConfigMap"}"#)],
            ]
            .concat(),
            vec!["configmaps"],
            "write-object",
        ),
        // A name that reaches a path: refused before the grant.
        (
            id_config("create-id", "shop", "../../../../etc/x"),
            vec!["configmaps"],
            "invalid-identifier",
        ),
        (
            id_config("create-id", "../up", "x"),
            vec!["configmaps"],
            "invalid-identifier",
        ),
        // Someone else's object: neither returned nor deleted.
        (
            id_config("create-id", "shop", "operators"),
            vec!["configmaps"],
            "create-conflict",
        ),
        (
            id_config("delete-id", "shop", "operators"),
            vec!["configmaps"],
            "delete-not-own",
        ),
        (
            id_config("delete-id", "shop", "operators"),
            vec![],
            "write-grant",
        ),
    ];
    for (config, writes, rule) in cases {
        let plugin = hostile(&config, &writes);
        let key = if config[0].1 == "delete-id" {
            "hostile.iar.test/deleted"
        } else {
            "hostile.iar.test/created"
        };
        let got = annotation(&plugin, reader.clone(), &b, key);
        assert!(
            got.starts_with("error:") && got.contains(&format!("(rule: {rule})")),
            "{config:?} granted {writes:?}: {got}"
        );
    }
    assert!(
        files(overlay.path()).is_empty(),
        "{:?}",
        files(overlay.path())
    );
    // The base manifest is untouched.
    assert!(
        reader
            .get(&iar::ItemRef::new("", "configmaps", "shop", "operators"))
            .unwrap()
            .is_some()
    );
}

/// Finalize creates nothing (its item fails naming the rule), progress
/// creates nothing, and another backup's plugin cannot delete what this
/// backup created.
#[test]
fn finalize_progress_and_other_backups_cannot_write() {
    let (_base, overlay, reader) = cluster();
    let plugin = hostile(&id_config("create-id", "shop", "x"), &["configmaps"]);
    let got = annotation(
        &plugin,
        reader.clone(),
        &backup(Phase::Finalize),
        "hostile.iar.test/created",
    );
    assert!(got.contains("(rule: no-create-in-finalize)"), "{got}");
    assert!(files(overlay.path()).is_empty());

    // Progress: the guest reports what the host answered.
    let progress = hostile(
        &[
            id_config("ok", "shop", "x"),
            vec![("progress", "create-id")],
        ]
        .concat(),
        &["configmaps"],
    );
    let err = progress
        .instance(reader.clone())
        .progress("op", &pod("web-0").id, &backup(Phase::Backup))
        .unwrap_err()
        .to_string();
    assert!(err.contains("(rule: write-call)"), "{err}");
    assert!(files(overlay.path()).is_empty());

    // Created by backup A; backup B (another uid) cannot delete it, nor
    // have it returned as its own.
    let a = backup(Phase::Backup);
    assert!(annotation(&plugin, reader.clone(), &a, "hostile.iar.test/created").starts_with("ok:"));
    let b = BackupRef {
        object: None,
        uid: "99999999-2222-3333-4444-555555555555".into(),
        ..backup(Phase::Backup)
    };
    let deleter = hostile(&id_config("delete-id", "shop", "x"), &["configmaps"]);
    let got = annotation(&deleter, reader.clone(), &b, "hostile.iar.test/deleted");
    assert!(got.contains("(rule: delete-not-own)"), "{got}");
    let got = annotation(&plugin, reader.clone(), &b, "hostile.iar.test/created");
    assert!(got.contains("(rule: create-conflict)"), "{got}");
    assert_eq!(files(overlay.path()), ["configmaps.core/shop/x.yaml"]);
    // Cancel, from backup A, deletes it.
    let canceler = hostile(
        &[id_config("ok", "shop", "x"), vec![("cancel", "delete-id")]].concat(),
        &["configmaps"],
    );
    canceler
        .instance(reader)
        .cancel("op", &pod("web-0").id, &a)
        .unwrap();
    assert!(files(overlay.path()).is_empty());
}

/// A guest that traps right after creating still has its object recorded
/// (the backup must be able to delete it); without a cluster to write,
/// the refusal names the rule.
#[test]
fn a_create_before_a_trap_is_recorded_and_no_cluster_is_read_only() {
    let (_base, overlay, reader) = cluster();
    let plugin = hostile(
        &id_config("create-then-trap", "shop", "trapped"),
        &["configmaps"],
    );
    let mut instance = plugin.instance(reader);
    let err = instance
        .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
        .unwrap_err()
        .to_string();
    assert!(err.contains("panicked after creating"), "{err}");
    let records = instance.take_created();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].id.name, "trapped");
    assert_eq!(files(overlay.path()), ["configmaps.core/shop/trapped.yaml"]);

    let plugin = hostile(&id_config("create-id", "shop", "x"), &["configmaps"]);
    let got = annotation(
        &plugin,
        Arc::new(NoCluster),
        &backup(Phase::Backup),
        "hostile.iar.test/created",
    );
    assert!(got.contains("(rule: cluster-read-only)"), "{got}");
}

/// Creates count against the host-call limit like cluster-get does: a
/// guest creating in a loop is stopped by rule.
#[test]
fn creates_count_against_the_host_call_limit() {
    let (_base, _overlay, reader) = cluster();
    let mut config = id_config("create-id", "shop", "x");
    config.push(("create-times", "50"));
    let limits = Limits {
        max_host_calls: 10,
        ..Limits::default()
    };
    let plugin = hostile_with(&config, &["configmaps"], limits);
    let err = plugin
        .instance(reader)
        .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
        .unwrap_err()
        .to_string();
    assert!(err.contains("(rule: host-call-limit)"), "{err}");
}

/// `list` reads under the read grant, matches labels, refuses a bad
/// selector by rule, and refuses a list over its bound instead of cutting.
#[test]
fn list_follows_the_read_grant_and_its_bounds() {
    let (base, _overlay, reader) = cluster();
    let b = backup(Phase::Backup);
    let list = |selector: &str, grants: Option<&[&str]>| {
        let mut config = id_config("list-id", "shop", "");
        config.push(("selector", selector));
        let mut settings = settings(&config, Limits::default());
        if let Some(g) = grants {
            settings.grants = ReadGrants::only(g).unwrap();
        }
        let plugin = Plugin::from_file(&runtime(), artifacts::HOSTILE.as_ref(), settings).unwrap();
        annotation(&plugin, reader.clone(), &b, "hostile.iar.test/listed")
    };
    assert_eq!(list("", None), "operators,second");
    assert_eq!(list("tier=b", None), "second");
    assert_eq!(list("tier in (a,b),tier!=a", None), "second");
    assert!(list("tier in (", None).contains("(rule: label-selector)"));
    assert!(list("", Some(&["pods"])).contains("is not granted"));
    for i in 0..1001 {
        std::fs::write(
            base.path().join(format!("many-{i}.yaml")),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: many-{i}, namespace: shop, labels: {{many: x}}}}\n"),
        )
        .unwrap();
    }
    let over = list("many=x", None);
    assert!(over.contains("more than 1000 objects match"), "{over}");
}

/// A plugin built against 1.2.0 itself (its exports at 1.2.0, with
/// wit-bindgen directly, not the SDK) loads as a 1.2.0 plugin and writes
/// through the same rules: without the grant its item fails naming the
/// rule, with it the object lands, labelled for the backup.
#[test]
fn a_plugin_exporting_1_2_0_loads_and_writes_by_the_same_rules() {
    let (_base, overlay, reader) = cluster();
    let load = |writes: &[&str]| {
        let settings = PluginSettings {
            write_grants: WriteGrants::only(writes).unwrap(),
            ..PluginSettings::default()
        };
        Plugin::from_file(&runtime(), artifacts::WRITER_V1_2.as_ref(), settings).unwrap()
    };
    let refused = load(&[]);
    assert_eq!(refused.version(), "1.2.0");
    assert!(
        refused
            .shape()
            .exports
            .contains(&"iar:plugin/item-action@1.2.0".to_string()),
        "{:?}",
        refused.shape().exports
    );
    let err = refused
        .instance(reader.clone())
        .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
        .unwrap_err()
        .to_string();
    assert!(err.contains("(rule: write-grant)"), "{err}");
    assert!(files(overlay.path()).is_empty());

    let granted = load(&["configmaps"]);
    let mut instance = granted.instance(reader);
    instance
        .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
        .unwrap();
    assert_eq!(
        files(overlay.path()),
        ["configmaps.core/shop/web-0-marker.yaml"]
    );
    let created = instance.take_created();
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].plugin, granted.name());
}
