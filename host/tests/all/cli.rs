//! `iar run` and `iar inspect` as a plugin author uses them: JSON on stdout,
//! exit status 0 only when every call succeeded, one-line errors on stderr.

use crate::support::{KillOnDrop, iar, iar_command, repo, stdout_json, text};
use iar_tests::blocking::wait_for;
use iar_tests::fixtures::noise;
use iar_tests::{artifacts, store_files};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

#[test]
fn run_chains_plugins_on_the_shipped_example_item() {
    let out = iar(&[
        "run",
        "--plugin",
        artifacts::LABELS,
        "--plugin",
        artifacts::POD_VOLUMES,
        "--item",
        "examples/items/pod.yaml",
        "--config",
        "labels=team=payments",
        "--allow-mutate",
        "pods",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let report = stdout_json(&out);
    assert_eq!(report["item"]["resource"], "pods");
    assert_eq!(report["results"][0]["plugin"], "iar_plugin_labels");
    assert_eq!(
        report["results"][0]["output"]["item"]["metadata"]["labels"]["team"],
        "payments"
    );
    assert_eq!(
        report["results"][1]["output"]["additionalItems"][0]["resource"],
        "persistentvolumeclaims"
    );
    assert_eq!(
        report["finalItem"]["metadata"]["labels"]["team"],
        "payments"
    );
}

/// `iar run` of pvc-snapshot with a write grant and an overlay creates
/// the snapshot there (the report lists it); a second run's progress reads
/// it back from the overlay, and reports it complete once the test plays
/// the snapshot controller on its file. Without the grant, the refusal
/// names the rule.
#[test]
fn run_creates_into_the_overlay_and_progress_reads_it_back() {
    let overlay = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--plugin",
            artifacts::PVC_SNAPSHOT,
            "--item",
            "examples/items/pvc.yaml",
            "--cluster",
            "examples/cluster",
            "--overlay",
            overlay.path().to_str().unwrap(),
            "--allow-mutate",
            "persistentvolumeclaims",
        ];
        args.extend_from_slice(extra);
        iar(&args)
    };
    let refused = run(&[]);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("(rule: write-grant)"),
        "{}",
        text(&refused)
    );

    let out = run(&["--allow-write", "volumesnapshots.snapshot.storage.k8s.io"]);
    assert!(out.status.success(), "{}", text(&out));
    let report = stdout_json(&out);
    assert_eq!(
        report["results"][0]["output"]["operationId"], "shop/data-web-0-iar-run",
        "{report}"
    );
    assert_eq!(
        report["results"][0]["created"][0]["name"], "data-web-0-iar-run",
        "{report}"
    );

    let progress = || {
        let out = run(&["--progress", "shop/data-web-0-iar-run"]);
        assert!(out.status.success(), "{}", text(&out));
        stdout_json(&out)["results"][0]["progress"]["completed"].clone()
    };
    assert_eq!(progress(), false);
    let file = overlay
        .path()
        .join("volumesnapshots.snapshot.storage.k8s.io/shop/data-web-0-iar-run.yaml");
    let mut text_now = std::fs::read_to_string(&file).unwrap();
    text_now.push_str("status: {readyToUse: true}\n");
    std::fs::write(&file, text_now).unwrap();
    assert_eq!(progress(), true);
}

#[test]
fn a_failing_plugin_exits_non_zero_with_one_line_on_stderr() {
    let out = iar(&[
        "run",
        "--plugin",
        artifacts::HOSTILE,
        "--item",
        "examples/items/pod.yaml",
        "--config",
        "behavior=loop",
        "--deadline",
        "100ms",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        "iar: plugin \"iar_guest_hostile\": execute of pods shop/web-0: ran past its CPU deadline of 100ms and was stopped (rule: cpu-deadline)"
    );
    let report = stdout_json(&out);
    assert_eq!(report["results"][0]["error"]["rule"], "cpu-deadline");
}

#[test]
fn finalize_phase_refuses_operations() {
    let out = iar(&[
        "run",
        "--plugin",
        artifacts::HOSTILE,
        "--item",
        "examples/items/pod.yaml",
        "--config",
        "behavior=operation",
        "--phase",
        "finalize",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let report = stdout_json(&out);
    assert_eq!(
        report["results"][0]["error"]["rule"],
        "no-operation-in-finalize"
    );
    assert!(
        report["results"][0].get("output").is_none(),
        "no operation id is reported as output"
    );
}

#[test]
fn inspect_describes_a_plugin() {
    let out = iar(&["inspect", artifacts::PVC_SNAPSHOT]);
    assert!(out.status.success(), "{}", text(&out));
    let info = stdout_json(&out);
    assert_eq!(info["contract"], "iar:plugin@1.3.0");
    assert_eq!(
        info["appliesTo"]["includedResources"][0],
        "persistentvolumeclaims"
    );
    assert_eq!(
        info["restoreAppliesTo"]["includedResources"],
        serde_json::json!(["persistentvolumeclaims"])
    );
    assert!(info["digest"].as_str().unwrap().starts_with("sha256:"));
    // Both time limits, the ceiling ten deadlines by default, and every
    // other limit in force.
    assert_eq!(info["limits"]["deadline"], "10s");
    assert_eq!(info["limits"]["wallClock"], "1m 40s");
    assert_eq!(info["limits"]["maxReadyWait"], "10m");
    // No settings: reads all but Secrets, writes and changes nothing.
    assert_eq!(
        info["grants"],
        serde_json::json!({"allowRead": ["*"], "allowWrite": [], "allowMutate": []})
    );
    // With its settings, the grants it runs with.
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("pvc-snapshot.yaml");
    std::fs::write(
        &settings,
        "allowWrite: [volumesnapshots.snapshot.storage.k8s.io]\nallowMutate: [persistentvolumeclaims]\nlimits: {deadline: 2s}\n",
    )
    .unwrap();
    let out = iar(&[
        "inspect",
        artifacts::PVC_SNAPSHOT,
        "--settings",
        settings.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let info = stdout_json(&out);
    assert_eq!(
        info["grants"]["allowWrite"],
        serde_json::json!(["volumesnapshots.snapshot.storage.k8s.io"])
    );
    assert_eq!(
        info["grants"]["allowMutate"],
        serde_json::json!(["persistentvolumeclaims"])
    );
    assert_eq!(info["limits"]["wallClock"], "20s");
    // A Rust wasm32-wasip2 guest's shape, well inside the load-time bounds.
    assert_eq!(info["memories"], 1);
    assert!(info["coreInstances"].as_u64().unwrap() <= 16, "{info}");
    assert!(
        info["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i.as_str().unwrap().starts_with("iar:plugin/host@1."))
    );
}

#[test]
fn a_bad_plugin_file_is_a_one_line_error() {
    let out = iar(&["inspect", "examples/items/pod.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "iar: plugin \"pod\": it is not a WebAssembly component (rule: valid-component)"
    );
}

/// `iar run … | head`: a reader that goes away before the report is
/// written ends the command quietly (exit 0, nothing on stderr), as with
/// any Unix tool, instead of a panic in `println!` (exit 101).
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = iar_command(&[
        "run",
        "--plugin",
        artifacts::LABELS,
        "--item",
        "examples/items/pod.yaml",
        "--config",
        "labels=team=payments",
        "--allow-mutate",
        "pods",
    ])
    .stdout(writer)
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(out.stderr.is_empty(), "{}", text(&out));
}

fn read_json(path: &Path) -> Option<Value> {
    // Every store write is atomic (a rename), so a readable file is whole.
    let bytes = std::fs::read(path).ok()?;
    Some(serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{} is torn or not JSON ({e}): {}",
            path.display(),
            String::from_utf8_lossy(&bytes)
        )
    }))
}

/// The items of a backup tarball: its `resources/` JSON entries, each item
/// once (not its `-preferredversion` copy, nor an entry finalize replaced
/// by appending it again).
fn tarball_items(path: &Path) -> u64 {
    let gz = std::fs::read(path).unwrap();
    // Several gzip members: finalize rewrites only the tarball's tail.
    let mut archive = tar::Archive::new(flate2::read::MultiGzDecoder::new(&gz[..]));
    let paths: std::collections::BTreeSet<String> = archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .filter(|path| {
            path.starts_with("resources/")
                && path.ends_with(".json")
                && !path.contains("-preferredversion/")
        })
        .collect();
    paths.len() as u64
}

fn read_gz_json(path: &Path) -> Value {
    let gz = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut text)
        .unwrap_or_else(|e| panic!("{} is not gzip: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: bad JSON: {e}", path.display()))
}

#[test]
fn a_killed_backup_resumes_after_a_real_restart() {
    // The snapshot operation cannot finish until the test "creates" it.
    let (items, plugins) = waiting_backup_fixture();
    let store = tempfile::tempdir().unwrap();
    let (items_dir, plugins_dir, store_dir) = (
        items.path().to_str().unwrap(),
        plugins.path().to_str().unwrap(),
        store.path().to_str().unwrap(),
    );
    let backup_dir = store.path().join("backups/killme");
    let object_file = backup_dir.join("velero-backup.json");
    let operations_file = backup_dir.join("killme-itemoperations.json.gz");
    let phase = || read_json(&object_file).map(|o| o["status"]["phase"].clone());
    let scratch = tempfile::tempdir().unwrap();
    let stderr_file = scratch.path().join("backup.stderr");

    let mut child = KillOnDrop(
        iar_command(&[
            "backup",
            "killme",
            "--items",
            items_dir,
            "--plugins",
            plugins_dir,
            "--store",
            store_dir,
            "--sync-period",
            "100ms",
            "--lease-duration",
            "1s",
            "--config",
            "iar_plugin_labels:labels=x=y",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr_file).unwrap())
        .spawn()
        .expect("spawning iar backup"),
    );
    wait_for_phase(
        "iar backup",
        &mut child,
        phase,
        "WaitingForPluginOperations",
        &stderr_file,
        Duration::from_secs(30),
    );
    // Kill it for real (SIGKILL: no cleanup) once it waits: its operations
    // are persisted by then.
    child.kill().expect("killing iar backup");
    let status = child.wait().unwrap();
    assert!(!status.success(), "killed, not exited: {status}");

    assert_eq!(
        phase(),
        Some(Value::from("WaitingForPluginOperations")),
        "the phase on disk after the kill"
    );
    let before = read_gz_json(&operations_file);
    let ops = before.as_array().expect("an array of operations");
    assert_eq!(ops.len(), 1, "{before}");
    // New, or InProgress once a poll saw the snapshot pvc-snapshot created
    // (it exists, not ready): not ended either way.
    let phase_before = ops[0]["status"]["phase"].as_str().unwrap_or_default();
    assert!(matches!(phase_before, "New" | "InProgress"), "{before}");
    assert_eq!(ops[0]["spec"]["operationID"], "shop/data-web-0-killme");
    let created = ops[0]["status"]["created"].clone();
    assert!(created.is_string(), "{before}");

    // Play the snapshot controller while no iar runs.
    let _snapshots = ready_snapshot(store.path(), "killme");

    wait_for_lease_expiry(&backup_dir, "killme");
    // A resume without the plugins it ran with would fail the pending
    // operation for good: refused, naming the plugins, changing nothing.
    let out = iar(&["resume", "killme", "--store", store_dir]);
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("iar_plugin_pvc_snapshot (sha256:") && err.contains("rule: pinned-plugin-set"),
        "{err}"
    );
    assert_eq!(read_gz_json(&operations_file), before, "nothing changed");
    assert_eq!(phase(), Some(Value::from("WaitingForPluginOperations")));
    let out = iar_command(&[
        "resume",
        "killme",
        "--plugins",
        plugins_dir,
        "--store",
        store_dir,
        "--sync-period",
        "100ms",
        "--config",
        "iar_plugin_labels:labels=x=y",
    ])
    .output()
    .expect("running iar resume");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(phase(), Some(Value::from("Completed")));
    // The snapshot pvc-snapshot created went to the overlay, and the store
    // still has only directories Velero's layout accepts.
    assert!(overlay_of(store.path()).is_dir());
    assert_velero_accepts_layout(store.path());

    let after = read_gz_json(&operations_file);
    assert_eq!(after[0]["status"]["phase"], "Completed", "{after}");
    // The progress counts what finalize added (the snapshot) as the
    // tarball holds it.
    let object = read_json(&object_file).unwrap();
    assert_eq!(
        object["status"]["progress"]["itemsBackedUp"],
        tarball_items(&backup_dir.join("killme.tar.gz")),
        "{}",
        object["status"]["progress"]
    );
    assert_eq!(
        after[0]["status"]["created"], created,
        "the operation keeps its original creation time (its timeout counts from it)"
    );

    let out = iar(&["describe", "killme", "--store", store_dir]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.lines().any(|l| l == "Phase:        Completed"),
        "{shown}"
    );
    let op_line = shown
        .lines()
        .find(|l| l.starts_with("shop/data-web-0-killme"))
        .unwrap_or_else(|| panic!("no operation row: {shown}"));
    assert!(
        op_line.split_whitespace().any(|w| w == "Completed"),
        "{op_line}"
    );

    let out = iar(&["get", "--store", store_dir]);
    assert!(out.status.success(), "{}", text(&out));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("killme") && l.contains("Completed")),
        "{listed}"
    );
}

/// The newest lease generation of a backup in a local store, parsed.
fn lease(backup_dir: &Path, name: &str) -> Option<Value> {
    let prefix = format!("{name}-lease-");
    let mut leases: Vec<PathBuf> = std::fs::read_dir(backup_dir)
        .ok()?
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let f = p.file_name().unwrap().to_string_lossy();
            f.starts_with(&prefix) && f.ends_with(".json")
        })
        .collect();
    leases.sort();
    read_json(leases.last()?)
}

/// Waits, by reading the lease in the store, until it has expired or been
/// released: no fixed sleep.
fn wait_for_lease_expiry(backup_dir: &Path, name: &str) {
    wait_for(
        &format!("the lease of {name} to expire"),
        Duration::from_secs(60),
        || {
            let lease = lease(backup_dir, name);
            let free = lease.as_ref().is_none_or(|l| {
                l["released"] == true
                    || humantime::parse_rfc3339(l["expires"].as_str().unwrap()).unwrap()
                        <= std::time::SystemTime::now()
            });
            if free {
                Ok(())
            } else {
                Err(format!("{lease:?}"))
            }
        },
    )
}

/// Waits until `phase` (a backup's phase on disk) is `want` while `child`
/// (`what`, its stderr in `stderr`) runs; fails at once if it exits first.
fn wait_for_phase(
    what: &str,
    child: &mut std::process::Child,
    phase: impl Fn() -> Option<Value>,
    want: &str,
    stderr: &Path,
    within: Duration,
) {
    let stderr = || std::fs::read_to_string(stderr).unwrap_or_default();
    wait_for(&format!("{what} to reach {want}"), within, || {
        let now = phase();
        if now.as_ref().is_some_and(|p| p == want) {
            return Ok(());
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "{what} exited ({status}) before reaching {want} (phase on disk: {now:?}); stderr:\n{}",
                stderr()
            );
        }
        Err(format!("phase on disk {now:?}; stderr:\n{}", stderr()))
    })
}

/// The example application and the example plugins, pvc-snapshot granted
/// the write it needs: its snapshot operation waits until the test plays
/// the snapshot controller ([`ready_snapshot`]).
fn waiting_backup_fixture() -> (tempfile::TempDir, tempfile::TempDir) {
    let items = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(repo().join("examples/cluster")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, items.path().join(path.file_name().unwrap())).unwrap();
    }
    let plugins = tempfile::tempdir().unwrap();
    for wasm in [
        artifacts::LABELS,
        artifacts::POD_VOLUMES,
        artifacts::PVC_SNAPSHOT,
    ] {
        let wasm = Path::new(wasm);
        std::fs::copy(wasm, plugins.path().join(wasm.file_name().unwrap())).unwrap();
    }
    grant_snapshot_writes(plugins.path());
    // labels labels every item it is given: an item change.
    std::fs::write(
        plugins.path().join("iar_plugin_labels.yaml"),
        "allowMutate: ['*']\n",
    )
    .unwrap();
    (items, plugins)
}

/// pvc-snapshot's settings beside it: the write grant to create snapshots,
/// the mutate grant to label the claims it snapshots.
fn grant_snapshot_writes(plugins: &Path) {
    std::fs::write(
        plugins.join("iar_plugin_pvc_snapshot.yaml"),
        "allowWrite: [volumesnapshots.snapshot.storage.k8s.io]\nallowMutate: [persistentvolumeclaims]\n",
    )
    .unwrap();
}

/// Where `iar` puts a local store's overlay by default: under the prefix
/// Velero keeps for plugins.
fn overlay_of(store: &Path) -> std::path::PathBuf {
    store.join("plugins/iar/cluster-overlay")
}

/// The top-level directories Velero v1.18's backup store accepts
/// (pkg/persistence/object_store_layout.go): any other makes it refuse the
/// whole location ("Backup store contains invalid top-level directories").
const VELERO_TOP_LEVEL: &[&str] = &[
    "backups", "restores", "restic", "metadata", "plugins", "kopia",
];

/// Every top-level entry of a local store is one Velero accepts.
fn assert_velero_accepts_layout(store: &Path) {
    for entry in std::fs::read_dir(store).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            VELERO_TOP_LEVEL.contains(&name.as_str()),
            "{name}/ at the top of {}: Velero would refuse the store",
            store.display()
        );
    }
}

/// Plays the snapshot controller for `iar` processes on `store`: the
/// snapshot pvc-snapshot creates for `backup` in the store's overlay
/// becomes ready once it exists, for as long as the guard lives.
fn ready_snapshot(store: &Path, backup: &str) -> iar_tests::snapshots::SnapshotController {
    let controller = iar_tests::snapshots::SnapshotController::start(&overlay_of(store));
    controller.set(
        &format!("data-web-0-{backup}"),
        serde_json::json!({"readyToUse": true, "creationTime": "2026-11-30T01:00:04Z", "restoreSize": "1Gi"}),
    );
    controller
}

/// The `winner` label every item in the backup's tarball carries.
fn winner_labels(backup_dir: &Path, name: &str) -> Vec<String> {
    let tar_gz = std::fs::read(backup_dir.join(format!("{name}.tar.gz"))).unwrap();
    iar::store::tarball::read(&tar_gz)
        .unwrap()
        .into_iter()
        .filter(|(p, _)| p.starts_with("resources/"))
        .map(|(p, data)| {
            let v: Value = serde_json::from_slice(&data).unwrap();
            v["metadata"]["labels"]["winner"]
                .as_str()
                .unwrap_or_else(|| panic!("{p} has no winner label: {v}"))
                .to_string()
        })
        .collect()
}

/// Two real `iar backup` processes of the same name on one store: exactly
/// one drives it, the other fails saying why, and the data is the winner's.
/// `iar resume` is refused (naming the holder and its expiry) while the
/// winner lives; after the winner is SIGKILLed and its lease expired, resume
/// takes over and finishes. Before, both processes passed the existence
/// check and wrote over each other, and resume ran alongside a live process.
#[test]
fn two_processes_never_drive_one_backup() {
    let (items, plugins) = waiting_backup_fixture();
    let store = tempfile::tempdir().unwrap();
    let (items_dir, plugins_dir, store_dir) = (
        items.path().to_str().unwrap(),
        plugins.path().to_str().unwrap(),
        store.path().to_str().unwrap(),
    );
    let backup_dir = store.path().join("backups/twin");
    let object_file = backup_dir.join("velero-backup.json");
    let phase = || read_json(&object_file).map(|o| o["status"]["phase"].clone());
    let scratch = tempfile::tempdir().unwrap();
    let spawn = |label: &str| {
        let stderr = scratch.path().join(format!("{label}.stderr"));
        let child = iar_command(&[
            "backup",
            "twin",
            "--items",
            items_dir,
            "--plugins",
            plugins_dir,
            "--store",
            store_dir,
            "--sync-period",
            "100ms",
            "--lease-duration",
            "2s",
            "--config",
            &format!("iar_plugin_labels:labels=winner={label}"),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("spawning iar backup");
        (label.to_string(), child, stderr)
    };
    let mut racers = vec![spawn("a"), spawn("b")];

    // The loser exits; the winner waits for its snapshot, for ever.
    let loser = wait_for(
        "one of the two processes to end",
        Duration::from_secs(60),
        || {
            racers
                .iter_mut()
                .position(|(_, c, _)| c.try_wait().unwrap().is_some())
                .ok_or_else(|| "both still run".to_string())
        },
    );
    let loser = racers.remove(loser);
    let (winner_label, mut winner, winner_stderr) = racers.pop().unwrap();
    let (_, mut loser_child, loser_stderr) = loser;
    let status = loser_child.wait().unwrap();
    let said = std::fs::read_to_string(&loser_stderr).unwrap();
    assert_eq!(status.code(), Some(2), "{said}");
    assert!(
        said.contains("iar: backup \"twin\" already exists in")
            || said.contains("iar: backup \"twin\" is being driven by another process (iar pid"),
        "{said}"
    );
    wait_for_phase(
        "the winner",
        &mut winner,
        phase,
        "WaitingForPluginOperations",
        &winner_stderr,
        Duration::from_secs(60),
    );
    let labels = winner_labels(&backup_dir, "twin");
    assert!(!labels.is_empty());
    assert!(labels.iter().all(|l| *l == winner_label), "{labels:?}");
    let object = read_json(&object_file).unwrap();
    assert!(
        object["metadata"]["annotations"]["iar.dev/plugin-config"]
            .as_str()
            .unwrap()
            .contains(&format!("winner={winner_label}")),
        "{object}"
    );

    // A resume while the winner lives is refused, naming it and its expiry.
    // The resumer's own lease is longer than the winner's: on a loaded CI
    // machine a 2 s lease once expired unrenewed mid-resume (the fence then
    // failed the backup, as it must); the test is about the winner's.
    let resume = || {
        iar_command(&[
            "resume",
            "twin",
            "--plugins",
            plugins_dir,
            "--store",
            store_dir,
            "--sync-period",
            "100ms",
            "--lease-duration",
            "10s",
        ])
        .output()
        .expect("running iar resume")
    };
    let out = resume();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        said.contains(&format!(
            "is being driven by another process (iar pid {} on",
            winner.id()
        )) && said.contains("whose lease expires at"),
        "{said}"
    );
    assert_eq!(phase(), Some(Value::from("WaitingForPluginOperations")));
    assert!(
        winner.try_wait().unwrap().is_none(),
        "the winner still runs"
    );

    // The winner dies without cleanup; once its lease expired, resume
    // takes over and finishes with the winner's data.
    winner.kill().expect("killing the winner");
    winner.wait().unwrap();
    wait_for_lease_expiry(&backup_dir, "twin");
    let _snapshots = ready_snapshot(store.path(), "twin");
    let out = resume();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(phase(), Some(Value::from("Completed")));
    let labels = winner_labels(&backup_dir, "twin");
    assert!(labels.iter().all(|l| *l == winner_label), "{labels:?}");
    let lease = lease(&backup_dir, "twin").unwrap();
    assert_eq!(lease["released"], true, "released at the end: {lease}");
}

/// `iar resume` of a backup whose recorded item sources are gone (or were
/// never recorded) is refused with the reason, and the store is left as it
/// was. Before, it ran against an empty cluster: finalize found nothing
/// and the backup ended Completed.
#[test]
fn resume_refuses_a_backup_whose_sources_are_missing() {
    let (_items, plugins) = waiting_backup_fixture();
    let store = tempfile::tempdir().unwrap();
    let gone = tempfile::tempdir().unwrap().path().join("cluster");
    let backup_dir = store.path().join("backups/orphan");
    std::fs::create_dir_all(&backup_dir).unwrap();
    let object_file = backup_dir.join("velero-backup.json");
    let mut object =
        iar::backup::BackupObject::new("orphan", "velero", "uid-1", serde_json::json!({}));
    object.status.phase = iar::backup::BackupPhase::WaitingForPluginOperations;
    for (annotation, want) in [
        (Some(serde_json::json!([gone]).to_string()), "are missing"),
        (Some("[]".to_string()), "annotation is empty"),
        (None, "has no iar.dev/item-sources annotation"),
    ] {
        object.metadata.annotations.remove("iar.dev/item-sources");
        if let Some(a) = annotation {
            object
                .metadata
                .annotations
                .insert("iar.dev/item-sources".into(), a);
        }
        let written = serde_json::to_vec_pretty(&object).unwrap();
        std::fs::write(&object_file, &written).unwrap();
        let out = iar_command(&[
            "resume",
            "orphan",
            "--plugins",
            plugins.path().to_str().unwrap(),
            "--store",
            store.path().to_str().unwrap(),
        ])
        .output()
        .expect("running iar resume");
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            said.starts_with("iar: backup \"orphan\": cannot resume: ") && said.contains(want),
            "{said}"
        );
        if want == "are missing" {
            assert!(said.contains(&gone.display().to_string()), "{said}");
        }
        assert_eq!(std::fs::read(&object_file).unwrap(), written, "untouched");
    }
}

/// `iar backup` with `--workers 2 --volume-data DIR --exec-hooks-locally`:
/// a pod that opts its emptyDir volume in and carries pre and post hook
/// annotations gets both hooks run as real processes (each stamps a file
/// into the volume data directory), its volume backed up (the pre hook's
/// marker in it), and `iar describe` lists the volume backup Completed with
/// its bytes. Before, the flags did not exist and no hook or volume ran.
#[test]
fn backup_runs_hooks_and_volume_backups_and_describe_lists_them() {
    let (items, plugins) = waiting_backup_fixture();
    let hook = |phase: &str| {
        serde_json::to_string(&[
            "sh",
            "-c",
            &format!("date +%s%N > \"$IAR_VOLUME_DIR_SCRATCH/{phase}-marker\""),
        ])
        .unwrap()
    };
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": "shop", "annotations": {
            "backup.velero.io/backup-volumes": "scratch",
            "pre.hook.backup.velero.io/command": hook("pre"),
            "post.hook.backup.velero.io/command": hook("post"),
        }},
        "spec": {"containers": [{"name": "db", "image": "db"}],
                 "volumes": [{"name": "scratch", "emptyDir": {}}]}
    });
    std::fs::write(items.path().join("db.json"), pod.to_string()).unwrap();
    let data = tempfile::tempdir().unwrap();
    // The example web pod opts its html volume in too (its claim is
    // snapshotted instead).
    std::fs::create_dir_all(data.path().join("shop/.pods/web-0/html")).unwrap();
    let volume = data.path().join("shop/.pods/db-0/scratch");
    std::fs::create_dir_all(&volume).unwrap();
    std::fs::write(volume.join("table"), vec![7u8; 100_000]).unwrap();
    let store = tempfile::tempdir().unwrap();
    let store_dir = store.path().to_str().unwrap();
    let _snapshots = ready_snapshot(store.path(), "vols");
    let out = iar(&[
        "backup",
        "vols",
        "--items",
        items.path().to_str().unwrap(),
        "--plugins",
        plugins.path().to_str().unwrap(),
        "--store",
        store_dir,
        "--sync-period",
        "100ms",
        "--workers",
        "2",
        "--volume-data",
        data.path().to_str().unwrap(),
        "--exec-hooks-locally",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(volume.join("pre-marker").exists(), "{}", text(&out));
    assert!(volume.join("post-marker").exists(), "{}", text(&out));
    let described = iar(&["describe", "vols", "--store", store_dir]);
    let shown = String::from_utf8_lossy(&described.stdout);
    assert!(shown.contains("VOLUME BACKUP"), "{shown}");
    // Velero's hookStatus: the pre and post hooks of db-0 and of the
    // example web pod all ran.
    assert!(
        shown.contains("Hooks:        4 attempted, 0 failed"),
        "{shown}"
    );
    let object = read_json(&store.path().join("backups/vols/velero-backup.json")).unwrap();
    assert_eq!(
        object["status"]["hookStatus"],
        serde_json::json!({"hooksAttempted": 4, "hooksFailed": 0})
    );
    let line = shown
        .lines()
        .find(|l| l.starts_with("shop/db-0/scratch"))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(line.contains("Completed"), "{line}");
    let size = (100_000 + std::fs::metadata(volume.join("pre-marker")).unwrap().len()).to_string();
    assert!(line.contains(&format!("{size}/{size}")), "{line}");

    // The volume comes back: what the pre hook wrote before the backup,
    // not what the post hook wrote after it.
    let back = tempfile::tempdir().unwrap();
    let to = back.path().join("scratch");
    let restored = iar(&[
        "volume",
        "restore",
        "vols",
        "shop/db-0/scratch",
        "--to",
        to.to_str().unwrap(),
        "--store",
        store_dir,
    ]);
    assert!(restored.status.success(), "{}", text(&restored));
    assert!(
        String::from_utf8_lossy(&restored.stdout).contains(&format!("2 files, {size} bytes")),
        "{}",
        text(&restored)
    );
    assert_eq!(std::fs::read(to.join("table")).unwrap(), vec![7u8; 100_000]);
    assert_eq!(
        std::fs::read(to.join("pre-marker")).unwrap(),
        std::fs::read(volume.join("pre-marker")).unwrap()
    );
    assert!(!to.join("post-marker").exists());
    // Not into a directory that holds files; not a volume it does not hold.
    let again = iar(&[
        "volume",
        "restore",
        "vols",
        "shop/db-0/scratch",
        "--to",
        to.to_str().unwrap(),
        "--store",
        store_dir,
    ]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not empty"));
    let unknown = iar(&[
        "volume",
        "restore",
        "vols",
        "shop/db-0/nope",
        "--to",
        back.path().join("x").to_str().unwrap(),
        "--store",
        store_dir,
    ]);
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown));
    assert!(
        String::from_utf8_lossy(&unknown.stderr)
            .contains("it has: shop/db-0/scratch, shop/web-0/html"),
        "{}",
        text(&unknown)
    );
    // A chunk changed in the store is found, and named.
    let data_dir = store.path().join("backups/vols/volumes/data");
    for chunk in std::fs::read_dir(&data_dir).unwrap() {
        let chunk = chunk.unwrap().path();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, b"tampered").unwrap();
        std::fs::write(&chunk, gz.finish().unwrap()).unwrap();
    }
    let tampered = iar(&[
        "volume",
        "restore",
        "vols",
        "shop/db-0/scratch",
        "--to",
        back.path().join("y").to_str().unwrap(),
        "--store",
        store_dir,
    ]);
    assert_eq!(tampered.status.code(), Some(2), "{}", text(&tampered));
    assert!(
        String::from_utf8_lossy(&tampered.stderr).contains("digest mismatch"),
        "{}",
        text(&tampered)
    );
}

/// `iar volume restore` names on stderr every entry the backup left out,
/// with its reason, and counts them in its summary; a file it cannot
/// restore (its chunk gone from the store) is named with its rule, the
/// rest is restored, and it exits non-zero. Before, the left-out entries
/// went to stdout (and only the chunk format's), and the first bad file
/// stopped the restore.
#[test]
fn volume_restore_names_what_the_backup_left_out_and_what_it_could_not_restore() {
    use iar::backup::volumes::{
        LocalDirBackupper, VolumeBackupper, VolumePhase, VolumeRequest, data_key,
        put_volume_backups,
    };
    let data = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let vol = data.path().join("shop/.pods/db-0/scratch");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("kept"), b"kept").unwrap();
    std::fs::write(vol.join("lost"), b"lost").unwrap();
    for fifo in ["fifo-a", "fifo-b"] {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            vol.join(fifo),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
    }
    let store = iar::store::BackupStore::open(store_dir.path().to_str().unwrap()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let record = LocalDirBackupper::new(data.path().to_path_buf(), store.clone(), 1)
            .start(VolumeRequest {
                backup: "vols".into(),
                backup_uid: String::new(),
                pod: iar::item::ItemRef::new("", "pods", "shop", "db-0"),
                volume: "scratch".into(),
                pvc: None,
            })
            .await
            .finished()
            .await;
        assert_eq!(record.phase, VolumePhase::Completed, "{record:?}");
        put_volume_backups(&store, "vols", &[record]).await.unwrap();
    });
    let restore = |to: &Path| {
        iar(&[
            "volume",
            "restore",
            "vols",
            "shop/db-0/scratch",
            "--to",
            to.to_str().unwrap(),
            "--store",
            store_dir.path().to_str().unwrap(),
        ])
    };
    let back = tempfile::tempdir().unwrap();
    let out = restore(&back.path().join("a"));
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for fifo in ["fifo-a", "fifo-b"] {
        assert!(
            stderr.lines().any(|l| l.contains("left out by the backup")
                && l.contains(&format!("{fifo:?}"))
                && l.contains("rule: not-a-regular-file")),
            "{}",
            text(&out)
        );
    }
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("the backup left out 2 entries"),
        "{}",
        text(&out)
    );

    let sha = format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(b"lost"));
    std::fs::remove_file(store_dir.path().join(data_key("vols", &sha))).unwrap();
    let to = back.path().join("b");
    let out = restore(&to);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.lines().any(
            |l| l.starts_with("iar: not restored: lost: ") && l.contains("rule: chunk-missing")
        ),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read(to.join("kept")).unwrap(), b"kept");
    assert!(!to.join("lost").exists());
}

/// `iar backup --exec-hooks-locally` started with store credentials in its
/// environment (`AWS_SECRET_ACCESS_KEY`, `AZURE_STORAGE_ACCOUNT_KEY`): the
/// hook, a pod annotation's command, sees neither; it gets `PATH`, `LANG`
/// and its `IAR_*` variables. Before, the hook inherited iar's whole
/// environment and could read the store's keys.
#[test]
fn a_local_hook_does_not_see_the_store_credentials() {
    let items = tempfile::tempdir().unwrap();
    let dump = serde_json::to_string(&["sh", "-c", "env > \"$IAR_VOLUME_DATA/hook-env\""]).unwrap();
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": "shop", "annotations": {
            "pre.hook.backup.velero.io/command": dump,
        }},
        "spec": {"containers": [{"name": "db", "image": "db"}]}
    });
    std::fs::write(items.path().join("db.json"), pod.to_string()).unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let wasm = Path::new(artifacts::LABELS);
    std::fs::copy(wasm, plugins.path().join(wasm.file_name().unwrap())).unwrap();
    let data = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    let secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY";
    let out = iar_command(&[
        "backup",
        "creds",
        "--items",
        items.path().to_str().unwrap(),
        "--plugins",
        plugins.path().to_str().unwrap(),
        "--store",
        store.path().to_str().unwrap(),
        "--volume-data",
        data.path().to_str().unwrap(),
        "--exec-hooks-locally",
    ])
    .env("AWS_SECRET_ACCESS_KEY", secret)
    .env("AZURE_STORAGE_ACCOUNT_KEY", secret)
    .output()
    .expect("running iar backup");
    assert!(out.status.success(), "{}", text(&out));
    let env = std::fs::read_to_string(data.path().join("hook-env")).expect("the hook ran");
    assert!(
        !env.contains(secret),
        "the hook saw the store's key:\n{env}"
    );
    assert!(!env.contains("AWS_") && !env.contains("AZURE_"), "{env}");
    assert!(
        env.contains("IAR_POD_NAME=db-0") && env.contains("LANG=C.UTF-8"),
        "{env}"
    );
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
}

/// A real `iar backup` killed (SIGKILL) while a block waits for its slow
/// volume backup, after the pod's pre hook ran, then `iar resume`: the
/// backup ends Failed (its items were never written), the volume backup
/// left InProgress is failed "interrupted by restart" in the store, and
/// the pod's post hook (its unfreeze) runs exactly once, by the resume:
/// a freeze is undone whatever becomes of the backup (the hook appends a
/// line to a file per run). Before, there was no hook ledger and resume
/// said nothing of volumes or hooks; then the unfreeze was reported and
/// left undone, the fault campaign's frozen pods.
#[test]
fn a_backup_killed_while_blocks_wait_for_volumes_runs_its_post_hook_once() {
    let (items, plugins) = waiting_backup_fixture();
    let post = "echo ran >> \"$IAR_VOLUME_DATA/db-0.post-runs\"";
    let pre = "date +%s%N > \"$IAR_VOLUME_DATA/db-0.pre\"";
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": "shop", "annotations": {
            "backup.velero.io/backup-volumes": "scratch",
            "pre.hook.backup.velero.io/command": serde_json::to_string(&["sh", "-c", pre]).unwrap(),
            "post.hook.backup.velero.io/command": serde_json::to_string(&["sh", "-c", post]).unwrap(),
        }},
        "spec": {"containers": [{"name": "db", "image": "db"}],
                 "volumes": [{"name": "scratch", "emptyDir": {}}]}
    });
    std::fs::write(items.path().join("db.json"), pod.to_string()).unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("shop/.pods/web-0/html")).unwrap();
    let volume = data.path().join("shop/.pods/db-0/scratch");
    std::fs::create_dir_all(&volume).unwrap();
    // Incompressible and large: seconds of reading, hashing and gzip in a
    // debug build, the window in which the process is killed.
    std::fs::write(volume.join("big"), noise(0x9e37_79b9_7f4a_7c15, 96 << 20)).unwrap();
    let store = tempfile::tempdir().unwrap();
    let store_dir = store.path().to_str().unwrap();
    let backup_dir = store.path().join("backups/killvol");
    let volumes_file = backup_dir.join("killvol-volumebackups.json.gz");
    let progress_file = backup_dir.join("killvol-volumeprogress.json.gz");
    let common = [
        "--plugins",
        plugins.path().to_str().unwrap(),
        "--store",
        store_dir,
        "--sync-period",
        "100ms",
        "--lease-duration",
        "1s",
        "--volume-data",
        data.path().to_str().unwrap(),
        "--volume-concurrency",
        "1",
        "--exec-hooks-locally",
    ];
    let mut args = vec![
        "backup",
        "killvol",
        "--items",
        items.path().to_str().unwrap(),
    ];
    args.extend(common);
    let mut child = iar_command(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawning iar backup");
    let db_in_progress = || {
        progress_file.exists()
            && read_gz_json(&progress_file)
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["podName"] == "db-0" && v["phase"] == "InProgress")
    };
    wait_for(
        "db-0's volume backup in progress",
        Duration::from_secs(60),
        || {
            if db_in_progress() {
                return Ok(());
            }
            assert!(
                child.try_wait().unwrap().is_none(),
                "iar backup ended before db-0's volume backup was seen in progress"
            );
            Err("not in progress".to_string())
        },
    );
    child.kill().expect("killing iar backup");
    child.wait().unwrap();
    assert!(data.path().join("db-0.pre").exists(), "the pre hook ran");
    assert!(
        !data.path().join("db-0.post-runs").exists(),
        "the volume ended before the kill: make it bigger"
    );

    wait_for_lease_expiry(&backup_dir, "killvol");
    let mut args = vec!["resume", "killvol"];
    args.extend(common);
    let out = iar(&args);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(data.path().join("db-0.post-runs")).unwrap_or_default(),
        "ran\n",
        "the post hook runs once, after the restart: {}\n{}",
        text(&out),
        String::from_utf8_lossy(&iar(&["describe", "killvol", "--store", store_dir]).stdout)
    );
    let vols = read_gz_json(&volumes_file);
    let db = vols
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["podName"] == "db-0")
        .unwrap();
    assert_eq!(db["phase"], "Failed", "{vols}");
    assert_eq!(db["error"], "interrupted by restart", "{vols}");
    let described = iar(&["describe", "killvol", "--store", store_dir]);
    let shown = String::from_utf8_lossy(&described.stdout);
    assert!(
        !shown.contains("post hooks of pod shop/db-0: not run"),
        "{shown}"
    );
    assert!(
        shown.contains("volume backup volume scratch of pod shop/db-0: interrupted by restart"),
        "{shown}"
    );
}

/// `iar backup --ttl` records the ttl (as Go writes it) and the expiration;
/// `iar get` and `iar describe` show the expiration. `iar gc --dry-run`
/// lists the expired backup and deletes nothing; `iar gc` deletes every
/// file of it, keeps the backup with the default ttl, and reports a backup
/// it cannot read with its name (exit 1) while still deleting the others.
#[test]
fn gc_deletes_the_expired_backups_iar_backup_made() {
    let items = tempfile::tempdir().unwrap();
    std::fs::write(
        items.path().join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: shop\ndata:\n  a: b\n",
    )
    .unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let wasm = Path::new(artifacts::LABELS);
    std::fs::copy(wasm, plugins.path().join(wasm.file_name().unwrap())).unwrap();
    let store = tempfile::tempdir().unwrap();
    let store_dir = store.path().to_str().unwrap();
    let backup = |name: &str, ttl: Option<&str>| {
        let mut args = vec![
            "backup",
            name,
            "--items",
            items.path().to_str().unwrap(),
            "--plugins",
            plugins.path().to_str().unwrap(),
            "--store",
            store_dir,
        ];
        args.extend(ttl.map(|t| ["--ttl", t]).into_iter().flatten());
        let out = iar(&args);
        assert!(out.status.success(), "{}", text(&out));
    };
    backup("short", Some("1ms"));
    backup("broken", Some("1ms"));
    backup("long", None);
    let object = |name: &str| {
        read_json(
            &store
                .path()
                .join(format!("backups/{name}/velero-backup.json")),
        )
        .unwrap_or_else(|| panic!("{name} is not stored"))
    };
    let (short, long) = (object("short"), object("long"));
    assert_eq!(short["spec"]["ttl"], "1ms");
    assert_eq!(long["spec"]["ttl"], "720h0m0s");
    let long_expires = long["status"]["expiration"].as_str().unwrap().to_string();
    let short_expires = short["status"]["expiration"].as_str().unwrap().to_string();

    let listed = iar(&["get", "--store", store_dir]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.lines().next().unwrap().ends_with("EXPIRES"),
        "{listed}"
    );
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("long ") && l.ends_with(&long_expires)),
        "{listed}"
    );
    let described = iar(&["describe", "long", "--store", store_dir]);
    let described = String::from_utf8_lossy(&described.stdout);
    assert!(
        described
            .lines()
            .any(|l| l.starts_with(&format!("Expires:      {long_expires} (in 29d"))),
        "{described}"
    );

    // An object that cannot be read: that backup fails, the others go on.
    let broken_file = store.path().join("backups/broken/velero-backup.json");
    let broken = std::fs::read(&broken_file).unwrap();
    std::fs::write(&broken_file, "{").unwrap();

    let dry = iar(&["gc", "--store", store_dir, "--dry-run"]);
    assert_eq!(dry.status.code(), Some(1), "{}", text(&dry));
    let shown = String::from_utf8_lossy(&dry.stdout);
    assert!(
        shown
            .lines()
            .any(|l| l == format!("would delete short (Completed, expired {short_expires})")),
        "{shown}"
    );
    assert!(store.path().join("backups/short/short.tar.gz").is_file());

    let swept = iar(&["gc", "--store", store_dir]);
    assert_eq!(swept.status.code(), Some(1), "{}", text(&swept));
    let lines: Vec<String> = String::from_utf8_lossy(&swept.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines[0].starts_with("failed broken: deleting expired backup \"broken\": ")
            && lines[0].contains("velero-backup.json is corrupt"),
        "{lines:#?}"
    );
    assert_eq!(
        lines[1],
        format!("deleted short (Completed, expired {short_expires})")
    );
    assert_eq!(lines[2], "1 deleted, 1 failed, 1 kept");
    assert!(!store.path().join("backups/short").exists());
    assert!(store.path().join("backups/long/long.tar.gz").is_file());

    // Readable again, it goes at the next sweep; nothing else does.
    std::fs::write(&broken_file, broken).unwrap();
    let swept = iar(&["gc", "--store", store_dir]);
    assert!(swept.status.success(), "{}", text(&swept));
    let shown = String::from_utf8_lossy(&swept.stdout);
    assert!(shown.starts_with("deleted broken (Completed, "), "{shown}");
    assert!(shown.ends_with("1 deleted, 0 failed, 1 kept\n"), "{shown}");
    let left: Vec<_> = std::fs::read_dir(store.path().join("backups"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["long"]);
}

fn phase_of(store: &Path, name: &str) -> Option<String> {
    let text = std::fs::read(store.join("backups").join(name).join("velero-backup.json")).ok()?;
    let object: Value = serde_json::from_slice(&text).ok()?;
    object["status"]["phase"].as_str().map(String::from)
}

/// Fencing: an `iar backup` process is paused (SIGSTOP) while it waits on
/// an operation, past its lease; another process takes the backup over and
/// finishes it; the first is resumed (SIGCONT). It writes nothing: every
/// file of the backup is byte for byte what the second left, and it ends
/// saying it lost its lease. On resuming, its overdue renewal and its
/// overdue poll race: the renewal, noticing the takeover, often wins even
/// without fencing, so this test alone does not prove the fence; the one
/// in tests/tests/all/backups.rs (`a_holder_past_its_lease_writes_nothing_after_a_takeover`),
/// whose renewal hangs, fails without it. Here the whole process is real.
#[test]
fn a_paused_holder_resumed_after_a_takeover_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, plugins, store) = (
        dir.path().join("cluster"),
        dir.path().join("plugins"),
        dir.path().join("store"),
    );
    std::fs::create_dir_all(&cluster).unwrap();
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(
        repo().join("examples/cluster/shop.yaml"),
        cluster.join("shop.yaml"),
    )
    .unwrap();
    std::fs::copy(
        repo().join("examples/cluster/volumesnapshotclass.yaml"),
        cluster.join("volumesnapshotclass.yaml"),
    )
    .unwrap();
    std::fs::copy(
        artifacts::PVC_SNAPSHOT,
        plugins.join("iar_plugin_pvc_snapshot.wasm"),
    )
    .unwrap();
    grant_snapshot_writes(&plugins);
    let common = |cmd: &mut Command| {
        cmd.args(["--plugins", plugins.to_str().unwrap()])
            .args(["--store", store.to_str().unwrap()])
            .args(["--lease-duration", "1500ms", "--sync-period", "100ms"]);
    };
    let mut first = iar_command(&["backup", "fenced", "--items", cluster.to_str().unwrap()]);
    common(&mut first);
    let mut first = first
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(
        "the first to reach WaitingForPluginOperations",
        Duration::from_secs(120),
        || match phase_of(&store, "fenced") {
            Some(p) if p == "WaitingForPluginOperations" => Ok(()),
            p => {
                if let Some(status) = first.try_wait().unwrap() {
                    panic!("the first exited ({status}) in phase {p:?}");
                }
                Err(format!("phase {p:?}"))
            }
        },
    );
    let pid = first.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    // Past its lease: the store now says anyone may take it over. Read
    // from the store after the stop, so no renewal can follow.
    wait_for_lease_expiry(&store.join("backups/fenced"), "fenced");
    let _snapshots = ready_snapshot(&store, "fenced");
    let mut second = iar_command(&["resume", "fenced"]);
    common(&mut second);
    let out = second.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(phase_of(&store, "fenced").as_deref(), Some("Completed"));
    let finished = store_files(&store, "fenced");

    assert!(
        Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = first.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the first must not end well: {stderr}"
    );
    assert!(stderr.contains("lease"), "{stderr}");
    assert_eq!(
        store_files(&store, "fenced"),
        finished,
        "the resumed holder wrote to the store: {stderr}"
    );
}

/// Velero's `backup logs` and `backup delete` have iar equivalents, and a
/// backup with no plugins is a normal backup (issue 20): `iar backup`
/// without `--plugins` backs the items up; `iar logs` prints the stored
/// log; `iar delete` removes one backup, unexpired, leaving the others, and
/// refuses one that does not exist; an empty plugin directory is a warning.
#[test]
fn logs_and_delete_work_on_a_backup_taken_without_plugins() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, store) = (dir.path().join("cluster"), dir.path().join("store"));
    std::fs::create_dir_all(&cluster).unwrap();
    std::fs::write(
        cluster.join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-config, namespace: shop}\ndata: {a: b}\n",
    )
    .unwrap();
    let (cluster_s, store_s) = (cluster.to_str().unwrap(), store.to_str().unwrap());
    for name in ["plain", "kept"] {
        let out = iar(&["backup", "--items", cluster_s, "--store", store_s, name]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let contents = iar::store::tarball::read(
        &std::fs::read(store.join("backups/plain/plain.tar.gz")).unwrap(),
    )
    .unwrap();
    assert!(
        contents
            .iter()
            .any(|(p, _)| p == "resources/configmaps/namespaces/shop/web-config.json"),
        "{:?}",
        contents.iter().map(|e| &e.0).collect::<Vec<_>>()
    );

    let empty = dir.path().join("no-plugins");
    std::fs::create_dir_all(&empty).unwrap();
    let out = iar(&[
        "backup",
        "--items",
        cluster_s,
        "--store",
        store_s,
        "--plugins",
        empty.to_str().unwrap(),
        "empty-dir",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no plugins (*.wasm) in"),
        "{}",
        text(&out)
    );

    let logs = iar(&["logs", "plain", "--store", store_s]);
    assert!(logs.status.success(), "{}", text(&logs));
    let shown = String::from_utf8_lossy(&logs.stdout);
    assert!(shown.contains("1 items selected by the spec"), "{shown}");
    assert!(
        shown.lines().last().unwrap().contains("phase Completed"),
        "{shown}"
    );
    let missing = iar(&["logs", "nope", "--store", store_s]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("has no log"));

    let dry = iar(&["delete", "plain", "--dry-run", "--store", store_s]);
    assert!(dry.status.success(), "{}", text(&dry));
    assert_eq!(
        String::from_utf8_lossy(&dry.stdout),
        "would delete plain (Completed)\n"
    );
    assert!(store.join("backups/plain/plain.tar.gz").is_file());
    let deleted = iar(&["delete", "plain", "--store", store_s]);
    assert!(deleted.status.success(), "{}", text(&deleted));
    assert_eq!(
        String::from_utf8_lossy(&deleted.stdout),
        "deleted plain (Completed)\n"
    );
    assert!(!store.join("backups/plain").exists());
    assert!(store.join("backups/kept/kept.tar.gz").is_file());
    let again = iar(&["delete", "plain", "--store", store_s]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(String::from_utf8_lossy(&again.stdout).contains("no backup plain"));
}

/// A misspelt filter in `--spec` (`includeNamespaces`) is refused by name,
/// with the key it meant, before the backup exists: nothing is written, so
/// the name stays free for the corrected run (ignoring the key would have
/// backed up every namespace).
#[test]
fn a_misspelt_spec_key_is_refused_before_the_backup_exists() {
    let store = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, "includeNamespaces: [shop]\n").unwrap();
    let backup = || {
        iar(&[
            "backup",
            "nightly",
            "--items",
            "examples/items",
            "--spec",
            spec.to_str().unwrap(),
            "--store",
            store.path().to_str().unwrap(),
        ])
    };
    let out = backup();
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"includeNamespaces\"") && err.contains("did you mean includedNamespaces?"),
        "{err}"
    );
    assert!(
        !store.path().join("backups/nightly").exists(),
        "nothing written for a refused spec"
    );
    std::fs::write(&spec, "includedNamespaces: [shop]\n").unwrap();
    let out = backup();
    assert!(out.status.success(), "{}", text(&out));
}

/// A mistyped `--items` path, or an item file that does not parse, is
/// refused before the backup exists, so the name stays free; `--items DIR
/// NAME` takes NAME for the name; "already exists" says how to delete.
#[test]
fn bad_items_are_refused_before_the_backup_exists() {
    let store = tempfile::tempdir().unwrap();
    let store_dir = store.path().to_str().unwrap();
    let bad = tempfile::tempdir().unwrap();
    std::fs::write(bad.path().join("x.yaml"), "kind: [\n").unwrap();
    for items in ["/nonexistent/items", bad.path().to_str().unwrap()] {
        let out = iar(&["backup", "nightly", "--items", items, "--store", store_dir]);
        assert!(!out.status.success(), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no backup was created"), "{err}");
        assert!(!store.path().join("backups/nightly").exists(), "{items}");
    }
    // The name after --items is the name.
    let backup = || {
        iar(&[
            "backup",
            "--items",
            "examples/items",
            "nightly",
            "--store",
            store_dir,
        ])
    };
    let out = backup();
    assert!(out.status.success(), "{}", text(&out));
    let out = backup();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("iar delete nightly --store"), "{err}");
}

/// A backup name Velero could not sync into a Backup resource (`Nightly`,
/// `a_b`), or that is not one store key (`a/b`), is refused by rule before
/// anything is written.
#[test]
fn a_backup_name_velero_cannot_sync_is_refused() {
    let store = tempfile::tempdir().unwrap();
    for name in ["Nightly", "a_b", "a/b"] {
        let out = iar(&[
            "backup",
            name,
            "--items",
            "examples/items",
            "--store",
            store.path().to_str().unwrap(),
        ]);
        assert!(!out.status.success(), "{name}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("rule: backup-name"), "{name}: {err}");
    }
    assert!(!store.path().join("backups").exists());
}

/// A relative `--volume-data` works as an absolute one: the hooks, run
/// inside it, find their volume through `$IAR_VOLUME_DIR_*` (it pointed
/// nowhere from there), and the volume backed up holds the pre hook's
/// marker.
#[test]
fn a_relative_volume_data_reaches_the_hooks() {
    let work = tempfile::tempdir().unwrap();
    let items = work.path().join("items");
    std::fs::create_dir_all(&items).unwrap();
    std::fs::create_dir_all(work.path().join("data/shop/db-data")).unwrap();
    let pre = "echo quiesced > \"$IAR_VOLUME_DIR_DATA/pre-marker\"";
    let docs = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "db-0", "namespace": "shop", "annotations": {
            "backup.velero.io/backup-volumes": "data",
            "pre.hook.backup.velero.io/command": serde_json::to_string(&["sh", "-c", pre]).unwrap(),
         }},
         "spec": {"containers": [{"name": "db", "image": "db"}],
                  "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "db-data"}}]}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "db-data", "namespace": "shop"}, "spec": {}}
    ]});
    std::fs::write(items.join("db.json"), docs.to_string()).unwrap();
    let out = iar_command(&[
        "backup",
        "rel",
        "--items",
        "items",
        "--store",
        "store",
        "--volume-data",
        "data",
        "--exec-hooks-locally",
    ])
    .current_dir(work.path())
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Completed: 0 errors, 0 warnings"),
        "{}",
        text(&out)
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("data/shop/db-data/pre-marker")).unwrap(),
        "quiesced\n"
    );
}

/// `describe` and `get` as Velero's: the spec's scope and how far off the
/// expiry is in the text, and `-o json|yaml` printing the Backup (and a
/// BackupList of them) as stored.
#[test]
fn describe_and_get_print_as_velero_does() {
    let store = tempfile::tempdir().unwrap();
    let store_dir = store.path().to_str().unwrap();
    let spec = store.path().join("spec.yaml");
    std::fs::write(&spec, "includedNamespaces: [shop]\nttl: 720h\n").unwrap();
    let out = iar(&[
        "backup",
        "scoped",
        "--items",
        "examples/items",
        "--spec",
        spec.to_str().unwrap(),
        "--store",
        store_dir,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let out = iar(&["describe", "scoped", "--store", store_dir]);
    let described = String::from_utf8_lossy(&out.stdout);
    assert!(described.contains("Namespaces:   shop"), "{described}");
    assert!(described.contains("(in 29d 23h)"), "{described}");
    let out = iar(&["describe", "scoped", "--store", store_dir, "-o", "json"]);
    let backup = stdout_json(&out);
    assert_eq!(backup["metadata"]["name"], "scoped", "{backup}");
    assert_eq!(
        backup["spec"]["includedNamespaces"],
        serde_json::json!(["shop"])
    );
    let out = iar(&["get", "--store", store_dir, "-o", "yaml"]);
    assert!(out.status.success(), "{}", text(&out));
    let list: serde_json::Value = iar::yaml::from_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "BackupList");
    assert_eq!(list["items"][0]["metadata"]["name"], "scoped", "{list}");
}

/// `iar schedule` for a CronJob: the first run is due at once and named
/// as Velero names it; once that backup is in the store the next is not
/// due (exit 3, saying when); a bad expression is refused with Velero's
/// words.
#[test]
fn schedule_says_which_backup_is_due() {
    let store = tempfile::tempdir().unwrap();
    let store_dir = store.path().to_str().unwrap();
    let schedule =
        |name: &str, cron: &str| iar(&["schedule", name, "--schedule", cron, "--store", store_dir]);
    let out = schedule("nightly", "@daily");
    assert!(out.status.success(), "{}", text(&out));
    let name = String::from_utf8(out.stdout.clone())
        .unwrap()
        .trim()
        .to_string();
    let stamp = name.strip_prefix("nightly-").unwrap();
    assert!(
        stamp.len() == 14 && stamp.bytes().all(|b| b.is_ascii_digit()),
        "{name}"
    );
    let out = iar(&[
        "backup",
        &name,
        "--items",
        "examples/items",
        "--store",
        store_dir,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let out = schedule("nightly", "@daily");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not due; next run at"));
    // Another schedule's backups are not this one's.
    let out = schedule("weekly", "@weekly");
    assert!(out.status.success(), "{}", text(&out));
    let out = schedule("nightly", "0 0 1 * * *");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid schedule"));
}

/// `--config PLUGIN:KEY=VALUE` for a plugin that is not there is refused,
/// naming the plugins that are (it was dropped without a word).
#[test]
fn a_config_for_a_plugin_that_is_not_there_is_refused() {
    let out = iar(&[
        "run",
        "--plugin",
        artifacts::LABELS,
        "--item",
        "examples/items/pod.yaml",
        "--config",
        "labels:labels=team=a",
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no plugin named \"labels\"") && err.contains("iar_plugin_labels"),
        "{err}"
    );
    let out = iar(&[
        "run",
        "--plugin",
        artifacts::LABELS,
        "--item",
        "examples/items/pod.yaml",
        "--allow-mutate",
        "pods",
        "--config",
        "iar_plugin_labels:labels=team=a",
    ]);
    assert!(out.status.success(), "{}", text(&out));
}

/// An item's error is in the backup's log (`iar logs`) and on stderr at
/// ERROR, not only in `iar describe`.
#[test]
fn item_errors_reach_the_log_and_stderr() {
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(artifacts::LABELS, plugins.path().join("labels.wasm")).unwrap();
    let store = tempfile::tempdir().unwrap();
    let store_dir = store.path().to_str().unwrap();
    let out = iar(&[
        "backup",
        "errs",
        "--items",
        "examples/items/pod.yaml",
        "--plugins",
        plugins.path().to_str().unwrap(),
        "--store",
        store_dir,
        "--config",
        "labels:labels=a=b",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("ERROR") && l.contains("item-change-not-granted")),
        "{stderr}"
    );
    let out = iar(&["logs", "errs", "--store", store_dir]);
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        log.lines().any(
            |l| l.contains("error: plugin \"labels\"") && l.contains("item-change-not-granted")
        ),
        "{log}"
    );
}

/// A read of a mistyped local store is refused (it was created, and listed
/// as empty); `file://relative` says how to write a relative store.
#[test]
fn a_mistyped_store_is_refused_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo");
    for command in [&["get"][..], &["describe", "nightly"], &["logs", "nightly"]] {
        let mut args = command.to_vec();
        args.extend(["--store", missing.to_str().unwrap()]);
        let out = iar(&args);
        assert!(!out.status.success(), "{command:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no such directory"), "{command:?}: {err}");
        assert!(!missing.exists(), "{command:?} created the store");
    }
    let out = iar(&["get", "--store", "file://relative/store"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("file:///path/to/store"), "{err}");
}
