//! `iar conformance` on real components: every example plugin passes, and
//! each hostile behaviour is flagged by the check that owns it, with the
//! smallest generated item that shows it.

use crate::support::{iar, stdout_json};
use iar_tests::artifacts;
use serde_json::Value;

/// Settings granting every item change, rights included.
pub const EVERY_CHANGE: &str = "allowMutate: ['*', serviceaccounts, secrets, \
    roles.rbac.authorization.k8s.io, rolebindings.rbac.authorization.k8s.io, \
    clusterroles.rbac.authorization.k8s.io, clusterrolebindings.rbac.authorization.k8s.io, \
    mutatingwebhookconfigurations.admissionregistration.k8s.io, \
    validatingwebhookconfigurations.admissionregistration.k8s.io]\n";

fn conformance(plugin: &str, config: &[&str]) -> (Option<i32>, Value) {
    // The example plugins label whatever they handle, ServiceAccounts and
    // Secrets of the generated items included: every item change granted
    // (the item-change rules have tests of their own, in cli_mutate).
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.yaml");
    std::fs::write(&settings, EVERY_CHANGE).unwrap();
    let mut args = vec![
        "conformance",
        plugin,
        "--format",
        "json",
        "--settings",
        settings.to_str().unwrap(),
    ];
    for c in config {
        args.extend(["--config", c]);
    }
    let out = iar(&args);
    (out.status.code(), stdout_json(&out))
}

/// The names of the checks that failed.
fn failed(report: &Value) -> Vec<String> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["passed"] == false)
        .map(|c| c["check"].as_str().unwrap().to_string())
        .collect()
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report}"))
}

/// `iar conformance` of pvc-snapshot with its settings: the write grant
/// it needs to create its snapshots, and the mutate grant to label claims.
fn pvc_snapshot_conformance() -> (Option<i32>, Value) {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.yaml");
    std::fs::write(
        &settings,
        "allowWrite: [volumesnapshots.snapshot.storage.k8s.io]\nallowMutate: [persistentvolumeclaims]\n",
    )
    .unwrap();
    let out = iar(&[
        "conformance",
        artifacts::PVC_SNAPSHOT,
        "--format",
        "json",
        "--settings",
        settings.to_str().unwrap(),
    ]);
    (out.status.code(), stdout_json(&out))
}

#[test]
fn every_example_plugin_conforms() {
    for plugin in [
        artifacts::LABELS,
        artifacts::POD_VOLUMES,
        artifacts::CONFIG_BLOCK,
    ] {
        let (code, report) = conformance(plugin, &[]);
        assert_eq!(code, Some(0), "{plugin}: {report:#}");
        assert!(failed(&report).is_empty(), "{report:#}");
        assert!(report["selected"].as_u64().unwrap() > 0, "{report:#}");
    }
    // pvc-snapshot creates its snapshots and starts operations, so
    // cancel-twice (which deletes it, then finds it gone) really ran, and
    // the retries of `deterministic` found the snapshot they created.
    let (code, report) = pvc_snapshot_conformance();
    assert_eq!(code, Some(0), "{report:#}");
    assert!(failed(&report).is_empty(), "{report:#}");
    assert!(
        check(&report, "cancel-twice")["detail"].is_null(),
        "{report:#}"
    );
}

/// The hostile guest answers progress and cancel for any id, so the two
/// unknown-operation checks flag it whatever its behaviour; each behaviour
/// adds exactly the check that owns it.
#[test]
fn each_hostile_behaviour_is_flagged_by_its_check() {
    let unknown = ["progress-unknown-operation", "cancel-unknown-operation"];
    let cases: [(&str, Option<&str>, &str); 5] = [
        ("behavior=ok", None, ""),
        (
            "behavior=rename",
            Some("execute-accepted"),
            "(rule: item-identity-unchanged)",
        ),
        (
            "behavior=panic",
            Some("execute-accepted"),
            "(rule: no-trap)",
        ),
        (
            "behavior=operation",
            Some("finalize-no-operation"),
            "(rule: no-operation-in-finalize)",
        ),
        (
            "behavior=remember",
            Some("deterministic"),
            "\"hostile.iar.test/previous\"",
        ),
    ];
    for (config, owner, evidence) in cases {
        let (code, report) = conformance(artifacts::HOSTILE, &[config]);
        assert_eq!(code, Some(1), "{config}: {report:#}");
        let mut want: Vec<String> = owner.into_iter().map(String::from).collect();
        want.extend(unknown.iter().map(|s| s.to_string()));
        let mut got = failed(&report);
        got.sort();
        want.sort();
        assert_eq!(got, want, "{config}: {report:#}");
        if let Some(owner) = owner {
            let c = check(&report, owner);
            assert!(
                c["detail"].as_str().unwrap().contains(evidence),
                "{config}: {c:#}"
            );
            // The smallest generated item the plugin selects shows it.
            assert_eq!(c["item"]["kind"], "ServiceAccount", "{config}: {c:#}");
        }
    }
    let (_, report) = conformance(artifacts::HOSTILE, &["behavior=ok"]);
    assert_eq!(
        check(&report, "progress-unknown-operation")["detail"]
            .as_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap(),
        "progress of operation \"iar-conformance-unknown-operation\", which it never started, must answer unknown-operation"
    );
}

#[test]
fn an_invalid_applies_to_is_its_own_check() {
    let (code, report) = conformance(artifacts::HOSTILE, &["applies-to=invalid-labels"]);
    assert_eq!(code, Some(1), "{report:#}");
    assert_eq!(failed(&report), ["applies-to-valid"]);
    let detail = check(&report, "applies-to-valid")["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(detail.ends_with("(rule: valid-selector)"), "{detail}");
}

#[test]
fn text_output_names_the_check_and_prints_the_item() {
    let out = iar(&[
        "conformance",
        artifacts::HOSTILE,
        "--config",
        "behavior=rename",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("FAIL execute-accepted: plugin \"iar_guest_hostile\": execute of serviceaccounts shop/web: changed the item's name from \"web\" to \"web-renamed\" (rule: item-identity-unchanged)\n     item:\n       {\n         \"apiVersion\": \"v1\",\n         \"kind\": \"ServiceAccount\""), "{s}");
    assert!(s.contains("ok   applies-to-stable\n"), "{s}");
    assert!(s.ends_with("8 checks: 5 passed, 3 failed\n"), "{s}");
}

/// A plugin exporting both interfaces gets both sets of checks, and
/// get-related-items is asked only for what its own selector (pods) takes.
#[test]
fn block_actions_are_checked_on_the_items_they_select() {
    let (code, report) = conformance(artifacts::BLOCK_HOSTILE, &[]);
    assert_eq!(code, Some(0), "{report:#}");
    assert!(
        report["checks"].as_array().unwrap().len() == 10,
        "{report:#}"
    );
    for (config, rule) in [
        ("related=empty-name", "(rule: invalid-identifier)"),
        ("related=trap", "(rule: no-trap)"),
    ] {
        let (code, report) = conformance(artifacts::BLOCK_HOSTILE, &[config]);
        assert_eq!(code, Some(1), "{config}: {report:#}");
        assert_eq!(failed(&report), ["related-items-accepted"], "{config}");
        let c = check(&report, "related-items-accepted");
        assert!(c["detail"].as_str().unwrap().contains(rule), "{c:#}");
        assert_eq!(c["item"]["kind"], "Pod", "{c:#}");
    }
}

/// A restore action gets checks of its own (contract 1.3.0): labels'
/// restore half passes them beside its backup half's; a restore action
/// that renames items fails restore-execute-accepted naming the rule, and
/// one that answers a made-up operation's progress as known fails
/// restore-progress-unknown-operation.
#[test]
fn restore_actions_are_checked_on_the_items_they_select() {
    let (code, report) = conformance(artifacts::LABELS, &["labels=a=b"]);
    assert_eq!(code, Some(0), "{report:#}");
    for name in [
        "execute-accepted",
        "restore-execute-accepted",
        "restore-deterministic",
        "restore-progress-unknown-operation",
    ] {
        assert_eq!(check(&report, name)["passed"], true, "{name}: {report:#}");
    }
    let (code, report) = conformance(artifacts::RESTORE_HOSTILE, &["mode=rename"]);
    assert_eq!(code, Some(1), "{report:#}");
    assert_eq!(failed(&report), ["restore-execute-accepted"], "{report:#}");
    let c = check(&report, "restore-execute-accepted");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("(rule: item-identity-unchanged)"),
        "{c:#}"
    );
    assert_eq!(c["item"]["kind"], "ConfigMap", "{c:#}");
}
