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
/// for a 1.0.0 item-action plugin, a 1.1.0 block-only plugin and a 1.1.0
/// plugin exporting both.
#[test]
fn inspect_shows_the_interfaces_and_version() {
    let cases = [
        (
            artifacts::LABELS,
            "iar:plugin@1.0.0",
            json!(["item-action"]),
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
