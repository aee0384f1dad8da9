//! Contract 1.1.0: plugins that export `item-block-action` (Velero's
//! ItemBlockAction), beside 1.0.0 plugins, through the boundary and into
//! `form_blocks`.

use crate::support::*;
use iar::backup::blocks::form_blocks;
use iar::plugin::Relation;
use iar::plugin::{Call, Interface, PluginRelation, Target};
use iar::{Item, ItemRef, Limits, NoCluster, Phase};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// A Pod in `shop` that mounts ConfigMap `settings`, loads `env` as
/// environment and names `extra` (and `missing`) in the annotation.
fn web_pod() -> Item {
    item(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop",
            "annotations": {"iar.dev/related-configmaps": "extra, missing"}},
        "spec": {
            "volumes": [{"name": "conf", "configMap": {"name": "settings"}}],
            "containers": [{"name": "app", "envFrom": [{"configMapRef": {"name": "env"}}]}]
        }
    }))
}

fn configmap(name: &str) -> Item {
    item(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "shop"}}))
}

fn cm_ref(name: &str) -> ItemRef {
    ItemRef::new("", "configmaps", "shop", name)
}

/// A 1.1.0 plugin exporting only `item-block-action` (the example
/// config-block), one exporting both (block-hostile, through
/// `export_both!`), the 1.0.0 pod-volumes plugin and the 1.3.0 labels
/// plugin (an item action and a restore action) load on one runtime; each
/// reports its version and interfaces, and each interface answers. Before
/// 1.1.0 the first two were refused (no `item-action@1.0.0` export).
#[test]
fn block_plugins_load_beside_a_1_0_plugin_and_report_their_interfaces() {
    let runtime = runtime();
    let labels = load(&runtime, artifacts::LABELS, &[("labels", "team=a")]);
    let block = load(&runtime, artifacts::CONFIG_BLOCK, &[]);
    let both = load(
        &runtime,
        artifacts::BLOCK_HOSTILE,
        &[("names", "settings,env")],
    );
    assert_eq!(
        (labels.version(), labels.interfaces()),
        (
            "1.3.0",
            vec![Interface::ItemAction, Interface::RestoreItemAction]
        )
    );
    let old = load(&runtime, artifacts::POD_VOLUMES, &[]);
    assert_eq!(
        (old.version(), old.interfaces()),
        ("1.0.0", vec![Interface::ItemAction])
    );
    assert_eq!(
        (block.version(), block.interfaces()),
        ("1.1.0", vec![Interface::ItemBlockAction])
    );
    assert_eq!(
        (both.version(), both.interfaces()),
        (
            "1.1.0",
            vec![Interface::ItemAction, Interface::ItemBlockAction]
        )
    );
    // 1.1.0 plugins import the host at 1.1.0 or 1.0.0; either links.
    assert!(
        block
            .shape()
            .exports
            .contains(&"iar:plugin/item-block-action@1.1.0".to_string()),
        "{:?}",
        block.shape()
    );

    let pod = web_pod();
    let backup = backup(Phase::Backup);
    // The 1.0.0 item action still runs.
    let out = labels
        .instance(Arc::new(NoCluster))
        .execute(&pod, &backup, &never_seen)
        .unwrap();
    assert_eq!(
        out.item.unwrap().into_value()["metadata"]["labels"]["team"],
        "a"
    );

    // Block-only: its selectors, and its relations.
    assert!(
        !block.applies(&pod),
        "no item action, so execute never applies"
    );
    assert!(block.block_applies(&pod));
    assert!(!block.block_applies(&configmap("settings")));
    assert_eq!(
        block.block_applies_to().unwrap().included_resources,
        ["pods"]
    );
    let related = block
        .instance(Arc::new(NoCluster))
        .get_related_items(&pod, &backup)
        .unwrap();
    assert_eq!(
        related,
        ["settings", "env", "extra", "missing"].map(cm_ref).to_vec()
    );

    // Both interfaces on one plugin.
    let mut instance = both.instance(Arc::new(NoCluster));
    let out = instance.execute(&pod, &backup, &never_seen).unwrap();
    assert_eq!(
        out.item.unwrap().into_value()["metadata"]["labels"]["block-hostile"],
        "seen"
    );
    assert_eq!(
        instance.get_related_items(&pod, &backup).unwrap(),
        ["settings", "env"].map(cm_ref).to_vec()
    );
}

/// A plugin built against 1.0.0 alone (imports `host@1.0.0` and
/// `types@1.0.0`, as every plugin built before 1.1.0) loads and runs on the
/// same runtime as a 1.1.0 plugin, in either loading order, and its host
/// calls reach the host.
#[test]
fn a_pure_1_0_plugin_runs_beside_a_1_1_plugin() {
    let runtime = runtime();
    let block = load(&runtime, artifacts::CONFIG_BLOCK, &[]);
    let old = load(&runtime, artifacts::PURE_V1_0, &[]);
    assert_eq!(old.version(), "1.0.0");
    for import in ["iar:plugin/host@1.0.0", "iar:plugin/types@1.0.0"] {
        assert!(
            old.shape().imports.contains(&import.to_string()),
            "{import} in {:?}",
            old.shape().imports
        );
    }
    let mut instance = old.instance(Arc::new(NoCluster));
    let out = instance
        .execute(&pod("web"), &backup(Phase::Backup), &never_seen)
        .unwrap();
    assert_eq!(
        out.item.unwrap().into_value()["metadata"]["labels"]["contract"],
        "1.0.0"
    );
    let logs = instance.take_logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(
        block
            .instance(Arc::new(NoCluster))
            .get_related_items(&web_pod(), &backup(Phase::Backup))
            .unwrap()
            .len(),
        4
    );
}

/// Asking a plugin for an interface it does not export is a typed error
/// (rule plugin-world) naming the plugin and the item, not a panic.
#[test]
fn a_call_to_an_interface_not_exported_is_refused() {
    let runtime = runtime();
    let block = load(&runtime, artifacts::CONFIG_BLOCK, &[]);
    let labels = load(&runtime, artifacts::LABELS, &[]);
    let pod = web_pod();
    let err = block
        .instance(Arc::new(NoCluster))
        .execute(&pod, &backup(Phase::Backup), &never_seen)
        .unwrap_err();
    assert_eq!(err.violation.rule(), "plugin-world");
    assert_eq!(err.plugin, "iar_plugin_config_block");
    let err = labels
        .instance(Arc::new(NoCluster))
        .get_related_items(&pod, &backup(Phase::Backup))
        .unwrap_err();
    assert_eq!(err.violation.rule(), "plugin-world");
    assert!(
        err.to_string()
            .contains("get-related-items of pods shop/web: was asked for item-block-action"),
        "{err}"
    );
}

/// Every hostile answer of `get-related-items` is refused at the boundary
/// with the rule it broke, and the error names the plugin, the call and the
/// item: an identifier with an empty name or resource
/// (invalid-identifier), more identifiers than the limit
/// (output-size), a panic (no-trap), an endless loop (cpu-deadline), the
/// plugin's own error. After each, the same instance answers again.
#[test]
fn hostile_related_items_are_refused_with_the_rule() {
    let runtime = runtime();
    let limits = Limits {
        max_related_items: 5,
        deadline: Duration::from_millis(300),
        ..Limits::default()
    };
    /// Config, the rule broken, a part of the message.
    type Case = (
        &'static [(&'static str, &'static str)],
        &'static str,
        &'static str,
    );
    let cases: [Case; 6] = [
        (
            &[("related", "empty-name")],
            "invalid-identifier",
            "returned get-related-items entry 1 whose name \"\" is empty",
        ),
        (
            &[("related", "empty-resource")],
            "invalid-identifier",
            "entry 0 whose resource \"\" is empty",
        ),
        (
            &[("related", "count"), ("count", "6")],
            "output-size",
            "returned related items of 6, over the limit of 5",
        ),
        (&[("related", "trap")], "no-trap", "told to trap"),
        (&[("related", "loop")], "cpu-deadline", "CPU deadline"),
        (&[("related", "fail")], "plugin-error", "no relations today"),
    ];
    let pod = web_pod();
    for (config, rule, text) in cases {
        let plugin = load_with(&runtime, artifacts::BLOCK_HOSTILE, config, limits.clone());
        let mut instance = plugin.instance(Arc::new(NoCluster));
        let err = instance
            .get_related_items(&pod, &backup(Phase::Backup))
            .unwrap_err();
        assert_eq!(err.violation.rule(), rule, "{config:?}: {err}");
        assert_eq!(err.call, Call::GetRelatedItems);
        assert_eq!(err.target, Target::Item(pod.id.clone()));
        let message = err.to_string();
        assert!(
            message.starts_with(
                "plugin \"iar_guest_block_hostile\": get-related-items of pods shop/web: "
            ),
            "{message}"
        );
        assert!(message.contains(text), "{config:?}: {message}");
        // The item action of the same plugin still answers afterwards.
        instance
            .execute(&pod, &backup(Phase::Backup), &never_seen)
            .unwrap_or_else(|e| panic!("{config:?}: after the refusal: {e}"));
    }
    // At the limit exactly, the answer passes.
    let plugin = load_with(
        &runtime,
        artifacts::BLOCK_HOSTILE,
        &[("related", "count"), ("count", "5")],
        limits,
    );
    let ids = plugin
        .instance(Arc::new(NoCluster))
        .get_related_items(&pod, &backup(Phase::Backup))
        .unwrap();
    assert_eq!(ids.len(), 5);
    host_still_works(&runtime);
}

fn names(blocks: &iar::backup::blocks::Blocks) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = blocks
        .blocks
        .iter()
        .map(|b| {
            let mut ids: Vec<String> = b.items.iter().map(|i| i.id.to_string()).collect();
            ids.sort();
            ids
        })
        .collect();
    out.sort();
    out
}

/// The plugin changes the blocks: the backup collected the Pod and an
/// unrelated ConfigMap (say, by label), and the ConfigMaps the Pod reads are
/// only in the cluster. Without the plugin the Pod is a block of its own;
/// with the config-block plugin as a `Relation`, `form_blocks` reads
/// `settings`, `env` and `extra` from the cluster into the Pod's block,
/// leaves the unrelated ConfigMap alone, and warns about `missing` (named,
/// but in neither the backup nor the cluster).
#[test]
fn a_block_plugin_changes_the_blocks() {
    let runtime = runtime();
    let plugin = load(&runtime, artifacts::CONFIG_BLOCK, &[]);
    let dir = tempfile::tempdir().unwrap();
    for name in ["settings", "env", "extra", "unrelated"] {
        let text = serde_json::to_string(configmap(name).value()).unwrap();
        std::fs::write(dir.path().join(format!("{name}.yaml")), text).unwrap();
    }
    let cluster = iar::ManifestCluster::new(vec![dir.path().to_path_buf()]);
    let items = vec![web_pod(), configmap("unrelated")];
    let without = form_blocks(items.clone(), &cluster, &[]);
    assert_eq!(
        names(&without),
        vec![vec!["configmaps shop/unrelated"], vec!["pods shop/web"]]
    );

    let relation = PluginRelation::new(plugin, Arc::new(NoCluster), backup(Phase::Backup)).unwrap();
    let with = form_blocks(items, &cluster, &[&relation as &dyn Relation]);
    assert_eq!(
        names(&with),
        vec![
            vec![
                "configmaps shop/env",
                "configmaps shop/extra",
                "configmaps shop/settings",
                "pods shop/web",
            ],
            vec!["configmaps shop/unrelated"],
        ]
    );
    assert!(with.errors.is_empty(), "{:?}", with.errors);
    assert_eq!(with.warnings.len(), 1, "{:?}", with.warnings);
    assert!(
        with.warnings[0].contains("configmaps shop/missing"),
        "{:?}",
        with.warnings
    );
    // form_blocks runs the plugin on one thread: one instance served it all.
    assert_eq!(relation.idle_instances(), 1);
}

/// A plugin that exports no item-block-action gives no relation; a failing
/// one becomes a block-forming error that names the plugin, the item and
/// the rule, and the block is formed without it.
#[test]
fn relation_errors_name_the_plugin_and_the_rule() {
    let runtime = runtime();
    let labels = load(&runtime, artifacts::LABELS, &[]);
    assert!(PluginRelation::new(labels, Arc::new(NoCluster), backup(Phase::Backup)).is_none());

    let hostile = load(
        &runtime,
        artifacts::BLOCK_HOSTILE,
        &[("related", "empty-name")],
    );
    let relation =
        PluginRelation::new(hostile, Arc::new(NoCluster), backup(Phase::Backup)).unwrap();
    let blocks = form_blocks(
        vec![web_pod(), configmap("ok")],
        &NoCluster,
        &[&relation as &dyn Relation],
    );
    assert_eq!(
        blocks.blocks.len(),
        2,
        "nothing joined: {:?}",
        names(&blocks)
    );
    assert_eq!(blocks.errors.len(), 1, "{:?}", blocks.errors);
    let e = &blocks.errors[0];
    for part in [
        "iar_guest_block_hostile",
        "pods shop/web",
        "rule: invalid-identifier",
    ] {
        assert!(e.contains(part), "{part:?} in {e}");
    }
}

/// The adapter is shared by parallel workers (`Relation` is `Send + Sync`):
/// eight threads ask at once and every one gets the full answer; the pool
/// never holds more instances than callers that ran at once.
#[test]
fn one_relation_serves_parallel_workers() {
    let runtime = runtime();
    let plugin = load(&runtime, artifacts::CONFIG_BLOCK, &[]);
    let relation = PluginRelation::new(plugin, Arc::new(NoCluster), backup(Phase::Backup)).unwrap();
    let pod = web_pod();
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..5 {
                    let related = relation.related(&pod).unwrap();
                    assert_eq!(related.len(), 4);
                }
            });
        }
    });
    let idle = relation.idle_instances();
    assert!((1..=8).contains(&idle), "{idle}");
}
