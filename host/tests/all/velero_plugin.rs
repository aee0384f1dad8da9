//! The `iar` binary as a Velero plugin, driven by Velero's own plugin client
//! (`pkg/plugin/clientmgmt` of Velero v1.18.3, built from the Go module
//! proxy by tools/velero/build.sh with Velero's server): discovery of the plugin
//! directory, go-plugin's handshake and gRPC, the BackupItemAction v2 calls,
//! restartable processes. Each wasm plugin is the action `iar.dev/NAME`.

use crate::support::{cache_dir, iar, server, text};
use iar_tests::artifacts;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Velero's plugin client, built once per machine; `None` (said loudly, a
/// failure under CI) without Go.
fn client() -> Option<PathBuf> {
    // Built with Velero's server, from the same Go module and versions.
    crate::velero::tools().map(|dir| dir.join("velero-client"))
}

/// A Velero plugin directory as `deploy/velero/` lays it out: the `iar`
/// binary, and its wasm plugins (each with its settings) in `iar-plugins/`.
fn plugin_dir(plugins: &[(&str, &str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_iar"), dir.path().join("iar")).unwrap();
    let wasm = dir.path().join("iar-plugins");
    std::fs::create_dir(&wasm).unwrap();
    for (name, artifact, settings) in plugins {
        std::fs::copy(artifact, wasm.join(format!("{name}.wasm"))).unwrap();
        std::fs::write(wasm.join(format!("{name}.yaml")), settings).unwrap();
    }
    dir
}

/// Runs a script of steps through Velero's client; one result per step.
fn drive(client: &Path, dir: &Path, steps: &[Value]) -> Vec<Value> {
    let script = dir.join("script.json");
    std::fs::write(&script, serde_json::to_vec(steps).unwrap()).unwrap();
    let out = Command::new(client)
        .arg(&script)
        .env("CLIENT_PLUGIN_DIR", dir)
        .env("IAR_CACHE_DIR", cache_dir())
        .output()
        .expect("running velero-client");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "velero-client failed:\n{stderr}");
    let results: Vec<Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("velero-client's output: {e}\n{stderr}"));
    assert_eq!(results.len(), steps.len(), "{stderr}");
    results
}

fn pod_item(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}")},
           "spec": {"containers": [{"name": "app", "image": "app:1"}]}})
}

fn velero_backup(phase: &str) -> Value {
    json!({"apiVersion": "velero.io/v1", "kind": "Backup",
           "metadata": {"namespace": "velero", "name": "nightly", "uid": "7d1c1f7e-0000-4000-8000-000000000001"},
           "spec": {"includedNamespaces": ["shop"]},
           "status": {"phase": phase}})
}

fn execute(action: &str, item: Value, phase: &str) -> Value {
    json!({"op": "execute", "action": action, "item": item, "backup": velero_backup(phase)})
}

fn error_of(result: &Value) -> &str {
    result["error"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an error, got {result}"))
}

#[test]
fn velero_s_client_lists_and_runs_wasm_plugins_through_iar() {
    let Some(client) = client() else { return };
    let dir = plugin_dir(&[
        (
            "labels",
            artifacts::LABELS,
            "config: {labels: team=payments}\nallowMutate: ['*']\n",
        ),
        (
            "ops",
            artifacts::HOSTILE,
            "config: {behavior: operation, progress: complete}\n",
        ),
        (
            "waiting",
            artifacts::HOSTILE,
            "config: {behavior: operation, progress: retryable}\n",
        ),
        (
            "remember",
            artifacts::HOSTILE,
            "config: {behavior: remember}\nallowMutate: ['*']\n",
        ),
    ]);
    let labels_yaml = dir.path().join("iar-plugins/labels.yaml");
    let results = drive(
        &client,
        dir.path(),
        &[
            json!({"op": "list"}),
            json!({"op": "appliesTo", "action": "iar.dev/labels"}),
            execute("iar.dev/labels", pod_item("web"), "InProgress"),
            execute("iar.dev/remember", pod_item("first"), "InProgress"),
            execute("iar.dev/ops", pod_item("db"), "InProgress"),
            json!({"op": "progress", "action": "iar.dev/ops", "operationID": "op-db",
                   "backup": velero_backup("WaitingForPluginOperations")}),
            // The same operation again in the same backup: refused by rule.
            execute("iar.dev/ops", pod_item("db"), "InProgress"),
            // Velero runs the actions again on post-operation items while
            // Finalizing: no new operation may start there.
            execute("iar.dev/ops", pod_item("cache"), "Finalizing"),
            execute("iar.dev/waiting", pod_item("slow"), "InProgress"),
            json!({"op": "progress", "action": "iar.dev/waiting", "operationID": "op-slow",
                   "backup": velero_backup("WaitingForPluginOperations")}),
            json!({"op": "cancel", "action": "iar.dev/waiting", "operationID": "op-slow",
                   "backup": velero_backup("WaitingForPluginOperations")}),
            // Many calls over one process.
            json!({"op": "repeat", "count": 300,
                   "step": execute("iar.dev/labels", pod_item("many"), "InProgress")}),
            // The same process still holds the instance of the first call.
            execute("iar.dev/remember", pod_item("second"), "InProgress"),
            // An operator replaces the plugin's settings while Velero runs.
            json!({"op": "write", "path": labels_yaml, "text": "config: {labels: team=billing}\nallowMutate: ['*']\n"}),
            execute("iar.dev/labels", pod_item("web"), "InProgress"),
            // A new plugin process (Velero starts one per backup and per
            // operations reconcile) answers progress for an operation another
            // process started.
            json!({"op": "restart"}),
            json!({"op": "progress", "action": "iar.dev/ops", "operationID": "op-db",
                   "backup": velero_backup("WaitingForPluginOperations")}),
            execute("iar.dev/remember", pod_item("third"), "InProgress"),
        ],
    );
    assert_eq!(
        results[0]["names"],
        json!([
            "iar.dev/labels",
            "iar.dev/ops",
            "iar.dev/remember",
            "iar.dev/waiting"
        ])
    );
    assert_eq!(
        results[1]["selector"]["IncludedResources"],
        Value::Null,
        "labels applies to every resource: {}",
        results[1]
    );
    assert_eq!(
        results[2]["item"]["metadata"]["labels"]["team"], "payments",
        "{}",
        results[2]
    );
    assert_eq!(
        results[2]["item"]["spec"],
        pod_item("web")["spec"],
        "the rest of the item is as Velero sent it"
    );
    assert_eq!(
        results[3]["item"]["metadata"]["annotations"]["hostile.iar.test/previous"],
        ""
    );

    let op = &results[4];
    assert_eq!(op["operationID"], "op-db", "{op}");
    assert_eq!(
        op["postOperationItems"],
        json!([{"Group": "", "Resource": "pods", "Namespace": "shop", "Name": "db"}]),
        "{op}"
    );
    assert_eq!(results[5]["progress"]["Completed"], true, "{}", results[5]);
    assert_eq!(results[5]["progress"]["NCompleted"], 1);
    assert_eq!(results[5]["progress"]["OperationUnits"], "steps");
    assert_eq!(results[5]["progress"]["Started"], "2023-11-14T22:13:20Z");
    assert_eq!(
        results[5]["progress"]["Updated"], "0001-01-01T00:00:00Z",
        "no update time is Go's zero time (which Velero skips), not the epoch: {}",
        results[5]
    );

    let duplicate = error_of(&results[6]);
    assert!(
        duplicate.contains("operation-id-unique") && duplicate.contains("\"ops\""),
        "{duplicate}"
    );
    let finalize = error_of(&results[7]);
    assert!(
        finalize.contains("no-operation-in-finalize") && finalize.contains("pods shop/cache"),
        "{finalize}"
    );

    assert_eq!(results[8]["operationID"], "op-slow");
    let waiting = &results[9]["progress"];
    assert_eq!(
        waiting["Completed"], false,
        "a retryable error keeps the operation running: {waiting}"
    );
    assert!(
        waiting["Description"]
            .as_str()
            .unwrap()
            .contains("retrying: not yet"),
        "{waiting}"
    );
    assert_eq!(results[10]["canceled"], true, "{}", results[10]);

    assert_eq!(results[11]["failed"], 0, "{}", results[11]);
    assert_eq!(
        results[11]["last"]["item"]["metadata"]["labels"]["team"],
        "payments"
    );
    assert_eq!(
        results[12]["item"]["metadata"]["annotations"]["hostile.iar.test/previous"], "first",
        "one plugin process served every call so far: {}",
        results[12]
    );
    assert_eq!(
        results[14]["item"]["metadata"]["labels"]["team"], "billing",
        "the new settings took effect without restarting Velero: {}",
        results[14]
    );
    assert_eq!(
        results[16]["progress"]["Completed"], true,
        "{}",
        results[16]
    );
    assert_eq!(
        results[17]["item"]["metadata"]["annotations"]["hostile.iar.test/previous"], "",
        "a restart is a new process: {}",
        results[17]
    );
}

/// Each plugin is listed to Velero under the kinds it exports and no other:
/// `config-block` (item-block-action only) as an ItemBlockAction, never as
/// a BackupItemActionV2 (Velero would call Execute on every item and fail
/// each), a plugin exporting both under both. Velero's client then gets
/// the block action's selector and related items, and a block action that
/// breaks a rule fails that call only.
#[test]
fn block_actions_are_served_as_velero_item_block_actions() {
    let Some(client) = client() else { return };
    let dir = plugin_dir(&[
        (
            "labels",
            artifacts::LABELS,
            "config: {labels: team=payments}\nallowMutate: ['*']\n",
        ),
        ("config-block", artifacts::CONFIG_BLOCK, "{}\n"),
        // Its execute labels the item it is given: an item change.
        (
            "both",
            artifacts::BLOCK_HOSTILE,
            "config: {names: 'a,b'}\nallowMutate: [pods]\n",
        ),
        (
            "trapping",
            artifacts::BLOCK_HOSTILE,
            "config: {related: trap}\n",
        ),
        (
            "nameless",
            artifacts::BLOCK_HOSTILE,
            "config: {related: empty-name}\n",
        ),
    ]);
    let mut pod = pod_item("web");
    pod["spec"]["volumes"] = json!([{"name": "settings", "configMap": {"name": "web-settings"}}]);
    let related = |action: &str| {
        json!({"op": "relatedItems", "action": action, "item": pod.clone(),
               "backup": velero_backup("InProgress")})
    };
    let results = drive(
        &client,
        dir.path(),
        &[
            json!({"op": "listKinds"}),
            json!({"op": "blockAppliesTo", "action": "iar.dev/config-block"}),
            related("iar.dev/config-block"),
            related("iar.dev/both"),
            execute("iar.dev/both", pod_item("db"), "InProgress"),
            // Not a BackupItemActionV2: Velero's registry has no such action.
            execute("iar.dev/config-block", pod_item("db"), "InProgress"),
            related("iar.dev/trapping"),
            related("iar.dev/nameless"),
            // The process serves on after both.
            related("iar.dev/config-block"),
        ],
    );
    assert_eq!(
        results[0]["kinds"],
        json!({
            "BackupItemActionV2": ["iar.dev/both", "iar.dev/labels", "iar.dev/nameless", "iar.dev/trapping"],
            "ItemBlockAction": ["iar.dev/both", "iar.dev/config-block", "iar.dev/nameless", "iar.dev/trapping"],
            "RestoreItemActionV2": ["iar.dev/labels"],
        }),
        "{}",
        results[0]
    );
    assert_eq!(
        results[1]["selector"]["IncludedResources"],
        json!(["pods"]),
        "{}",
        results[1]
    );
    assert_eq!(
        results[2]["relatedItems"],
        json!([{"Group": "", "Resource": "configmaps", "Namespace": "shop", "Name": "web-settings"}]),
        "{}",
        results[2]
    );
    assert_eq!(
        results[3]["relatedItems"],
        json!([
            {"Group": "", "Resource": "configmaps", "Namespace": "shop", "Name": "a"},
            {"Group": "", "Resource": "configmaps", "Namespace": "shop", "Name": "b"},
        ]),
        "{}",
        results[3]
    );
    assert_eq!(
        results[4]["item"]["metadata"]["labels"]["block-hostile"], "seen",
        "{}",
        results[4]
    );
    let not_listed = error_of(&results[5]);
    assert!(not_listed.contains("iar.dev/config-block"), "{not_listed}");
    let trapped = error_of(&results[6]);
    assert!(
        trapped.contains("\"trapping\"") && trapped.contains("pods shop/web"),
        "the error names the plugin and the item: {trapped}"
    );
    let nameless = error_of(&results[7]);
    assert!(
        nameless.contains("\"nameless\"") && nameless.contains("rule"),
        "the error names the plugin and the rule: {nameless}"
    );
    assert_eq!(
        results[8]["relatedItems"], results[2]["relatedItems"],
        "{}",
        results[8]
    );
}

fn config_map_item(name: &str, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "shop", "annotations": annotations},
        "data": {"k": "v"}})
}

fn velero_restore() -> Value {
    json!({"apiVersion": "velero.io/v1", "kind": "Restore",
        "metadata": {"namespace": "velero", "name": "nightly-restore",
            "uid": "00000000-0000-0000-0000-0000000000cc"},
        "spec": {"backupName": "nightly"}, "status": {"phase": "InProgress"}})
}

fn restore_execute(action: &str, item: Value) -> Value {
    json!({"op": "restoreExecute", "action": action, "item": item, "restore": velero_restore()})
}

/// Restore actions through Velero's own client (RestoreItemActionV2):
/// listed under that kind for the plugins that export one (labels, both
/// halves; restore-hostile, a restore action alone, is no
/// BackupItemActionV2), every call of the v2 interface answered (an
/// operation's progress, a skip, a wait with its timeout, readiness), a
/// hostile restore action's item failed with the plugin, item and rule
/// named, the process serving on.
#[test]
fn restore_actions_are_served_as_velero_restore_item_actions() {
    let Some(client) = client() else { return };
    let dir = plugin_dir(&[
        ("labels", artifacts::LABELS, "allowMutate: ['*']\n"),
        (
            "restorer",
            artifacts::RESTORE_HOSTILE,
            "allowMutate: [configmaps]\n",
        ),
        (
            "not-ready",
            artifacts::RESTORE_HOSTILE,
            "config: {ready: 'false'}\n",
        ),
    ]);
    let hostile = |mode: &str| {
        restore_execute(
            "iar.dev/restorer",
            config_map_item(mode, json!({"restore-hostile": mode})),
        )
    };
    let dep = json!([{"Group": "", "Resource": "configmaps", "Namespace": "shop", "Name": "dep"}]);
    let results = drive(
        &client,
        dir.path(),
        &[
            json!({"op": "listKinds"}),
            json!({"op": "restoreAppliesTo", "action": "iar.dev/restorer"}),
            restore_execute("iar.dev/labels", config_map_item("settings", json!({}))),
            hostile("operation"),
            json!({"op": "restoreProgress", "action": "iar.dev/restorer",
                "operationID": "op-operation", "restore": velero_restore()}),
            hostile("skip"),
            hostile("wait"),
            json!({"op": "itemsReady", "action": "iar.dev/restorer",
                "additionalItems": dep, "restore": velero_restore()}),
            json!({"op": "itemsReady", "action": "iar.dev/not-ready",
                "additionalItems": dep, "restore": velero_restore()}),
            hostile("rename"),
            hostile("trap"),
            hostile("bad-additional"),
            // Not a BackupItemActionV2: Velero's registry has no such action.
            execute("iar.dev/restorer", pod_item("db"), "InProgress"),
            hostile("label"),
        ],
    );
    assert_eq!(
        results[0]["kinds"],
        json!({
            "BackupItemActionV2": ["iar.dev/labels"],
            "ItemBlockAction": [],
            "RestoreItemActionV2": ["iar.dev/labels", "iar.dev/not-ready", "iar.dev/restorer"],
        }),
        "{}",
        results[0]
    );
    assert_eq!(
        results[1]["selector"]["IncludedResources"],
        json!(["configmaps"]),
        "{}",
        results[1]
    );
    assert_eq!(
        results[2]["item"]["metadata"]["annotations"]["iar.dev/restored-from"], "nightly",
        "{}",
        results[2]
    );
    assert_eq!(results[3]["operationID"], "op-operation", "{}", results[3]);
    assert_eq!(results[4]["progress"]["Completed"], true, "{}", results[4]);
    assert_eq!(results[5]["skipRestore"], true, "{}", results[5]);
    assert_eq!(
        results[5]["item"]["metadata"]["name"], "skip",
        "Velero always gets the whole item back: {}",
        results[5]
    );
    assert_eq!(results[6]["waitForAdditionalItems"], true, "{}", results[6]);
    assert_eq!(
        results[6]["additionalItemsReadyTimeout"], "10s",
        "{}",
        results[6]
    );
    assert_eq!(results[6]["additionalItems"], dep, "{}", results[6]);
    assert_eq!(results[7]["ready"], true, "{}", results[7]);
    assert_eq!(results[8]["ready"], false, "{}", results[8]);
    for (i, (mode, rule)) in [
        ("rename", "item-identity-unchanged"),
        ("trap", "no-trap"),
        ("bad-additional", "invalid-identifier"),
    ]
    .into_iter()
    .enumerate()
    {
        let e = error_of(&results[9 + i]);
        assert!(
            e.contains("\"restorer\"")
                && e.contains(&format!("configmaps shop/{mode}"))
                && e.contains(rule),
            "{mode}: the error names the plugin, the item and the rule {rule}: {e}"
        );
    }
    assert!(
        error_of(&results[12]).contains("iar.dev/restorer"),
        "{}",
        results[12]
    );
    assert_eq!(
        results[13]["item"]["metadata"]["labels"]["restored"], "yes",
        "the process serves on: {}",
        results[13]
    );
}

/// A restore action that stalls or floods, through Velero's own client:
/// one that asks every item's restore to wait ~292 years gets each wait
/// cut to its `maxReadyWait`, and once its waits in one restore add up to
/// `maxReadyWaitPerRun` the next item is refused (rule run-budget) rather
/// than held; one naming hundreds of additional items per item is refused
/// past `maxItemsPerRun`. The next restore (another uid) has its own
/// budget: nothing one restore's action did holds up the one after it.
#[test]
fn a_stalling_or_flooding_restore_action_is_bounded_per_restore() {
    let Some(client) = client() else { return };
    let dir = plugin_dir(&[
        (
            "staller",
            artifacts::RESTORE_HOSTILE,
            "config: {mode: wait-forever, ready: 'false'}
limits: {maxReadyWait: 5s, maxReadyWaitPerRun: 12s}
",
        ),
        (
            "flooder",
            artifacts::RESTORE_HOSTILE,
            "config: {mode: many, count: '600'}
limits: {maxItemsPerRun: 1000}
",
        ),
    ]);
    let next_restore = {
        let mut r = velero_restore();
        r["metadata"]["name"] = json!("next-restore");
        r["metadata"]["uid"] = json!("00000000-0000-0000-0000-0000000000dd");
        r
    };
    let call = |action: &str, name: &str, restore: &Value| {
        json!({"op": "restoreExecute", "action": action,
            "item": config_map_item(name, json!({})), "restore": restore})
    };
    let results = drive(
        &client,
        dir.path(),
        &[
            call("iar.dev/staller", "a", &velero_restore()),
            call("iar.dev/staller", "b", &velero_restore()),
            call("iar.dev/staller", "c", &velero_restore()),
            call("iar.dev/staller", "a", &next_restore),
            call("iar.dev/flooder", "a", &velero_restore()),
            call("iar.dev/flooder", "b", &velero_restore()),
            call("iar.dev/flooder", "a", &next_restore),
        ],
    );
    for r in &results[..2] {
        assert_eq!(r["waitForAdditionalItems"], true, "{r}");
        assert_eq!(
            r["additionalItemsReadyTimeout"], "5s",
            "cut to maxReadyWait: {r}"
        );
    }
    let e = error_of(&results[2]);
    assert!(
        e.contains("\"staller\"")
            && e.contains("configmaps shop/c")
            && e.contains("maxReadyWaitPerRun")
            && e.contains("run-budget"),
        "{e}"
    );
    assert_eq!(
        results[3]["additionalItemsReadyTimeout"], "5s",
        "{}",
        results[3]
    );
    assert_eq!(
        results[4]["additionalItems"].as_array().map(Vec::len),
        Some(600),
        "{}",
        results[4]
    );
    let e = error_of(&results[5]);
    assert!(
        e.contains("\"flooder\"")
            && e.contains("configmaps shop/b")
            && e.contains("maxItemsPerRun")
            && e.contains("run-budget"),
        "{e}"
    );
    assert_eq!(
        results[6]["additionalItems"].as_array().map(Vec::len),
        Some(600),
        "another restore's budget is its own: {}",
        results[6]
    );
}

#[test]
fn a_hostile_wasm_plugin_fails_its_item_and_the_plugin_process_keeps_serving() {
    let Some(client) = client() else { return };
    let dir = plugin_dir(&[
        (
            "labels",
            artifacts::LABELS,
            "config: {labels: team=payments}\nallowMutate: ['*']\n",
        ),
        (
            "spin",
            artifacts::HOSTILE,
            "config: {behavior: loop}\nlimits: {deadline: 100ms}\n",
        ),
        (
            "sleeper",
            artifacts::HOSTILE,
            "config: {behavior: sleep}\nlimits: {wallClock: 300ms}\n",
        ),
        ("crash", artifacts::HOSTILE, "config: {behavior: panic}\n"),
        (
            "broken",
            artifacts::HOSTILE,
            "config: {behavior: not-object}\n",
        ),
        (
            "renamer",
            artifacts::HOSTILE,
            "config: {behavior: rename}\n",
        ),
        (
            "remember",
            artifacts::HOSTILE,
            "config: {behavior: remember}\nallowMutate: ['*']\n",
        ),
    ]);
    // Not a component at all: listed by its file name, refused when loaded.
    std::fs::write(dir.path().join("iar-plugins/junk.wasm"), b"\0asm junk").unwrap();
    let results = drive(
        &client,
        dir.path(),
        &[
            execute("iar.dev/remember", pod_item("before"), "InProgress"),
            execute("iar.dev/spin", pod_item("a"), "InProgress"),
            execute("iar.dev/sleeper", pod_item("b"), "InProgress"),
            execute("iar.dev/crash", pod_item("c"), "InProgress"),
            execute("iar.dev/broken", pod_item("d"), "InProgress"),
            execute("iar.dev/renamer", pod_item("e"), "InProgress"),
            execute("iar.dev/junk", pod_item("f"), "InProgress"),
            execute("iar.dev/labels", pod_item("after"), "InProgress"),
            execute("iar.dev/remember", pod_item("after"), "InProgress"),
        ],
    );
    for (i, (plugin, rule)) in [
        ("spin", "cpu-deadline"),
        ("sleeper", "wall-clock"),
        ("crash", "no-trap"),
        ("broken", "item-is-json-object"),
        ("renamer", "item-identity-unchanged"),
        ("junk", "valid-component"),
    ]
    .into_iter()
    .enumerate()
    {
        let e = error_of(&results[i + 1]);
        assert!(
            e.contains(&format!("\"{plugin}\"")) && e.contains(rule),
            "{plugin}: the error names the plugin and the rule {rule}: {e}"
        );
    }
    let item_named = error_of(&results[1]);
    assert!(item_named.contains("pods shop/a"), "{item_named}");
    assert_eq!(
        results[7]["item"]["metadata"]["labels"]["team"], "payments",
        "{}",
        results[7]
    );
    assert_eq!(
        results[8]["item"]["metadata"]["annotations"]["hostile.iar.test/previous"], "before",
        "the same plugin process served the calls before and after the hostile ones: {}",
        results[8]
    );
}

#[test]
fn a_plugin_file_broken_while_velero_runs_is_refused_by_rule() {
    let Some(client) = client() else { return };
    let dir = plugin_dir(&[("labels", artifacts::LABELS, "")]);
    // Listed when Velero started, emptied by the time it is called. (Names
    // iar never listed do not reach it: Velero's client refuses them, and
    // the name rule is unit-tested in velero_plugin/actions.rs.)
    std::fs::copy(artifacts::LABELS, dir.path().join("iar-plugins/gone.wasm")).unwrap();
    let gone = dir.path().join("iar-plugins/gone.wasm");
    let results = drive(
        &client,
        dir.path(),
        &[
            json!({"op": "list"}),
            json!({"op": "write", "path": gone, "text": ""}),
            execute("iar.dev/gone", pod_item("x"), "InProgress"),
            execute("iar.dev/unlisted", pod_item("x"), "InProgress"),
        ],
    );
    assert_eq!(
        results[0]["names"],
        json!(["iar.dev/gone", "iar.dev/labels"])
    );
    let e = error_of(&results[2]);
    assert!(
        e.contains("\"gone\"") && e.contains("valid-component"),
        "{e}"
    );
    let e = error_of(&results[3]);
    assert!(e.contains("iar.dev/unlisted"), "{e}");
}

/// In a cluster, the plugin process serves iar's plugin ConfigMaps too
/// (`IAR_PLUGIN_NAMESPACE`, else Velero's `VELERO_NAMESPACE`), verified and
/// bounded by the grant policy as the controller does: a ConfigMap asking
/// more than the policy allows is not served, and says why in its status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_configmaps_are_served_to_velero_within_the_grant_policy() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    let Some(server) = server().await else { return };
    let Some(velero_client) = client() else {
        return;
    };
    let admin = crate::support::client(server, iar_apiserver::User::Admin).await;
    let namespace = "velero-cm";
    iar_apiserver::create_namespace(&admin, namespace).await;
    let work = tempfile::tempdir().unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), namespace);
    for (name, artifact, settings) in [
        (
            "cm-labels",
            artifacts::LABELS,
            // Items are reads: it is handed the pod only because it may
            // read pods (rule read-grant).
            "config: {labels: from=configmap}\nallowRead: [configmaps, pods]\nallowMutate: [pods]\n",
        ),
        ("greedy", artifacts::HOSTILE, "allowRead: [secrets]\n"),
    ] {
        let settings_file = work.path().join(format!("{name}.yaml"));
        std::fs::write(&settings_file, settings).unwrap();
        let out = iar(&[
            "plugin",
            "configmap",
            artifact,
            "--name",
            name,
            "--namespace",
            namespace,
            "--settings",
            settings_file.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out));
        let cm: ConfigMap = iar::yaml::from_slice(&out.stdout).unwrap();
        configmaps
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }
    let policy = work.path().join("policy.yaml");
    std::fs::write(&policy, "readable: [configmaps, pods]\nmutable: [pods]\n").unwrap();

    let dir = plugin_dir(&[(
        "labels",
        artifacts::LABELS,
        "config: {labels: from=file}\nallowMutate: ['*']\n",
    )]);
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        serde_json::to_vec(&[
            json!({"op": "list"}),
            execute("iar.dev/cm-labels", pod_item("web"), "InProgress"),
            execute("iar.dev/labels", pod_item("web"), "InProgress"),
        ])
        .unwrap(),
    )
    .unwrap();
    let out = Command::new(&velero_client)
        .arg(&script)
        .env("CLIENT_PLUGIN_DIR", dir.path())
        .env("IAR_CACHE_DIR", cache_dir())
        .env("KUBECONFIG", server.kubeconfig())
        .env("IAR_PLUGIN_NAMESPACE", namespace)
        .env("IAR_GRANT_POLICY", &policy)
        .env("CLIENT_LOG_LEVEL", "debug")
        .env("IAR_LOG", "info")
        .output()
        .expect("running velero-client");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "velero-client failed:\n{stderr}");
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        results[0]["names"],
        json!(["iar.dev/cm-labels", "iar.dev/labels"]),
        "the ConfigMap granting Secrets is not served: {stderr}"
    );
    assert_eq!(
        results[1]["item"]["metadata"]["labels"]["from"], "configmap",
        "{}",
        results[1]
    );
    assert_eq!(results[2]["item"]["metadata"]["labels"]["from"], "file");
    let greedy = configmaps.get("greedy").await.unwrap();
    let status = serde_json::to_string(&greedy.metadata.annotations).unwrap();
    assert!(status.contains("GrantRefused"), "{status}");
}

/// The Go SDK's ports (`go-sdk/examples`, built by go-sdk/build.sh) served
/// by `iar` beside the Rust plugins they port, with the same settings:
/// Velero's client lists each under the same kinds and gets the same
/// answer from each for every call — a backup execute, a restore execute,
/// an ItemBlockAction's applies-to and related items.
#[test]
fn go_plugins_are_served_like_the_rust_ones() {
    let Some(client) = client() else { return };
    let go = crate::go_sdk::go;
    let labels = "config: {labels: team=payments}\nallowMutate: ['*']\n";
    let dir = plugin_dir(&[
        ("labels", artifacts::LABELS, labels),
        ("labels-go", go("labels-go"), labels),
        ("config-block", artifacts::CONFIG_BLOCK, "{}\n"),
        ("config-block-go", go("config-block-go"), "{}\n"),
    ]);
    let mut pod = pod_item("web");
    pod["spec"]["volumes"] = json!([{"name": "settings", "configMap": {"name": "web-settings"}}]);
    let steps = |labels: &str, block: &str| {
        vec![
            json!({"op": "appliesTo", "action": labels}),
            execute(labels, pod.clone(), "InProgress"),
            restore_execute(labels, config_map_item("settings", json!({}))),
            json!({"op": "blockAppliesTo", "action": block}),
            json!({"op": "relatedItems", "action": block, "item": pod.clone(),
                   "backup": velero_backup("InProgress")}),
        ]
    };
    let rust_steps = steps("iar.dev/labels", "iar.dev/config-block");
    let go_steps = steps("iar.dev/labels-go", "iar.dev/config-block-go");
    let mut all = vec![json!({"op": "listKinds"})];
    all.extend(rust_steps.iter().cloned());
    all.extend(go_steps.iter().cloned());
    let results = drive(&client, dir.path(), &all);
    assert_eq!(
        results[0]["kinds"],
        json!({
            "BackupItemActionV2": ["iar.dev/labels", "iar.dev/labels-go"],
            "ItemBlockAction": ["iar.dev/config-block", "iar.dev/config-block-go"],
            "RestoreItemActionV2": ["iar.dev/labels", "iar.dev/labels-go"],
        }),
        "{}",
        results[0]
    );
    let (rust, go) = results[1..].split_at(rust_steps.len());
    for (step, (r, g)) in rust_steps.iter().zip(rust.iter().zip(go)) {
        assert_eq!(g, r, "Go (left) and Rust (right) differ at {step}");
    }
    // What both did, through Velero's client.
    assert_eq!(
        go[1]["item"]["metadata"]["labels"]["team"], "payments",
        "{}",
        go[1]
    );
    assert_eq!(
        go[2]["item"]["metadata"]["annotations"]["iar.dev/restored-from"], "nightly",
        "{}",
        go[2]
    );
    assert!(
        go[4].to_string().contains("web-settings"),
        "the Pod's ConfigMap is related: {}",
        go[4]
    );
}
