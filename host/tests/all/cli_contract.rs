//! `iar inspect` and `iar run --related` with contract 1.1.0 plugins
//! (item-block-action): which interfaces and version a plugin exports, and
//! get-related-items from the command line.

use crate::support::{iar, stdout_json};
use iar_tests::artifacts;
use serde_json::json;
use std::path::Path;

/// A Pod that mounts ConfigMap `settings` and names `extra` in the
/// config-block plugin's annotation, written to a temporary file.
fn pod_file(dir: &Path) -> String {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop",
            "annotations": {"iar.dev/related-configmaps": "extra"}},
        "spec": {"volumes": [{"name": "conf", "configMap": {"name": "settings"}}],
            "containers": [{"name": "app"}]}
    });
    let path = dir.join("pod.json");
    std::fs::write(&path, pod.to_string()).unwrap();
    path.display().to_string()
}

/// `iar inspect` names the contract version and the interfaces a plugin
/// exports, with each interface's own applies-to (null when not exported),
/// for a 1.0.0 item-action plugin, a 1.1.0 block-only plugin, a 1.1.0
/// plugin exporting both, a 1.3.0 backup-and-restore plugin and a 1.3.0
/// restore-only one.
#[test]
fn inspect_shows_the_interfaces_and_version() {
    let cases = [
        (
            artifacts::POD_VOLUMES,
            "iar:plugin@1.0.0",
            json!(["item-action"]),
        ),
        (
            artifacts::PVC_SNAPSHOT,
            "iar:plugin@1.3.0",
            json!(["item-action", "restore-item-action"]),
        ),
        (
            artifacts::LABELS,
            "iar:plugin@1.3.0",
            json!(["item-action", "restore-item-action"]),
        ),
        (
            artifacts::RESTORE_HOSTILE,
            "iar:plugin@1.3.0",
            json!(["restore-item-action"]),
        ),
        (
            artifacts::CONFIG_BLOCK,
            "iar:plugin@1.1.0",
            json!(["item-block-action"]),
        ),
        (
            artifacts::BLOCK_HOSTILE,
            "iar:plugin@1.1.0",
            json!(["item-action", "item-block-action"]),
        ),
    ];
    for (path, contract, interfaces) in cases {
        let out = iar(&["inspect", path]);
        assert!(
            out.status.success(),
            "{path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report = stdout_json(&out);
        assert_eq!(report["contract"], contract, "{path}");
        assert_eq!(report["interfaces"], interfaces, "{path}");
        let block = interfaces
            .as_array()
            .unwrap()
            .contains(&json!("item-block-action"));
        let action = interfaces
            .as_array()
            .unwrap()
            .contains(&json!("item-action"));
        assert_eq!(report["appliesTo"].is_object(), action, "{path}: {report}");
        let restore = interfaces
            .as_array()
            .unwrap()
            .contains(&json!("restore-item-action"));
        assert_eq!(
            report["restoreAppliesTo"].is_object(),
            restore,
            "{path}: {report}"
        );
        assert_eq!(
            report["blockAppliesTo"].is_object(),
            block,
            "{path}: {report}"
        );
        if block {
            assert_eq!(
                report["blockAppliesTo"]["includedResources"],
                json!(["pods"])
            );
        }
    }
}

/// `iar run --related` calls get-related-items and prints the identifiers
/// as JSON; a plugin without item-block-action is reported as not applying
/// (with the reason), and the exit status is 0.
#[test]
fn run_related_prints_the_related_identifiers() {
    let dir = tempfile::tempdir().unwrap();
    let item = pod_file(dir.path());
    let out = iar(&[
        "run",
        "--plugin",
        artifacts::CONFIG_BLOCK,
        "--plugin",
        artifacts::LABELS,
        "--item",
        &item,
        "--related",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = stdout_json(&out);
    assert_eq!(report["results"][0]["plugin"], "iar_plugin_config_block");
    assert_eq!(
        report["results"][0]["related"],
        json!([
            {"group": "", "resource": "configmaps", "namespace": "shop", "name": "settings"},
            {"group": "", "resource": "configmaps", "namespace": "shop", "name": "extra"},
        ])
    );
    assert_eq!(report["results"][1]["applies"], false);
    assert_eq!(
        report["results"][1]["reason"],
        "does not export item-block-action"
    );
}

/// A hostile get-related-items answer is refused: exit status 1, the rule in
/// the JSON, and one line on stderr naming the plugin, the call and the item.
#[test]
fn run_related_reports_a_refused_answer_with_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let item = pod_file(dir.path());
    let out = iar(&[
        "run",
        "--plugin",
        artifacts::BLOCK_HOSTILE,
        "--item",
        &item,
        "--related",
        "--config",
        "related=empty-name",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let report = stdout_json(&out);
    assert_eq!(report["results"][0]["error"]["rule"], "invalid-identifier");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(
            "plugin \"iar_guest_block_hostile\": get-related-items of pods shop/web: returned get-related-items entry 1 whose name \"\" is empty (rule: invalid-identifier)"
        ),
        "{stderr}"
    );
}

/// `iar run --restore`: the item as backed up is given to each restore
/// action as Velero would create it (the restore's namespace mapping
/// applied, status and server-set metadata dropped); labels' restore half
/// records the backup; a plugin without a restore action says so; a
/// hostile one is refused by rule, the exit code says it.
#[test]
fn run_restore_calls_restore_actions_on_the_item_as_restored() {
    let dir = tempfile::tempdir().unwrap();
    let item = dir.path().join("cm.json");
    std::fs::write(
        &item,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "shop", "uid": "u-1",
                "resourceVersion": "7"},
            "data": {"k": "v"}, "status": {"x": 1}})
        .to_string(),
    )
    .unwrap();
    let restore = dir.path().join("restore.yaml");
    std::fs::write(
        &restore,
        "apiVersion: velero.io/v1\nkind: Restore\nmetadata: {name: r1, namespace: velero}\nspec:\n  backupName: nightly\n  namespaceMapping: {shop: shop-copy}\n",
    )
    .unwrap();
    let run = |plugins: &[&str], extra: &[&str]| {
        let mut args = vec!["run"];
        for p in plugins {
            args.extend(["--plugin", p]);
        }
        args.extend([
            "--item",
            item.to_str().unwrap(),
            "--restore",
            "--restore-object",
            restore.to_str().unwrap(),
        ]);
        args.extend(extra);
        iar(&args)
    };
    let out = run(
        &[artifacts::LABELS, artifacts::POD_VOLUMES],
        &["--allow-mutate", "configmaps"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = stdout_json(&out);
    assert_eq!(report["phase"], "restore");
    let last = &report["finalItem"];
    assert_eq!(last["metadata"]["namespace"], "shop-copy", "{report}");
    assert_eq!(
        last["metadata"]["annotations"]["iar.dev/restored-from"],
        "nightly"
    );
    assert!(
        last.get("status").is_none() && last["metadata"].get("uid").is_none(),
        "{last}"
    );
    assert_eq!(report["results"][1]["applies"], false, "{report}");
    assert!(
        report["results"][1]["reason"]
            .as_str()
            .unwrap()
            .contains("restore-item-action"),
        "{report}"
    );
    let out = run(&[artifacts::RESTORE_HOSTILE], &["--config", "mode=rename"]);
    assert_eq!(out.status.code(), Some(1));
    let report = stdout_json(&out);
    assert_eq!(
        report["results"][0]["error"]["rule"], "item-identity-unchanged",
        "{report}"
    );
}
