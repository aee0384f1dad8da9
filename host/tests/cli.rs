//! `iar run` and `iar inspect` as a plugin author uses them: JSON on stdout,
//! exit status 0 only when every call succeeded, one-line errors on stderr.

use iar_tests::artifacts;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn iar(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iar"))
        .args(args)
        .current_dir(repo())
        .env(
            "IAR_CACHE_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("iar-component-cache"),
        )
        .output()
        .expect("running iar")
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

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

#[test]
fn run_progress_reads_the_cluster_directory() {
    let out = iar(&[
        "run",
        "--plugin",
        artifacts::PVC_SNAPSHOT,
        "--item",
        "examples/items/pvc.yaml",
        "--cluster",
        "examples/cluster",
        "--progress",
        "shop/data-web-0-demo",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let report = stdout_json(&out);
    assert_eq!(
        report["results"][0]["progress"]["completed"], true,
        "{report}"
    );
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
    assert_eq!(info["contract"], "iar:plugin@1.0.0");
    assert_eq!(
        info["appliesTo"]["includedResources"][0],
        "persistentvolumeclaims"
    );
    assert!(info["digest"].as_str().unwrap().starts_with("sha256:"));
    assert!(
        info["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i == "iar:plugin/host@1.0.0")
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

/// `iar` with the shared compile cache, as [`iar`] runs it, for callers that
/// need the child process itself or other stdio.
fn iar_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_iar"));
    cmd.args(args).current_dir(repo()).env(
        "IAR_CACHE_DIR",
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("iar-component-cache"),
    );
    cmd
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

fn read_gz_json(path: &Path) -> Value {
    let gz = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut text)
        .unwrap_or_else(|e| panic!("{} is not gzip: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: bad JSON: {e}", path.display()))
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_killed_backup_resumes_after_a_real_restart() {
    // The example application without its VolumeSnapshot: the snapshot
    // operation cannot finish until the test "creates" it.
    let items = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(repo().join("examples/cluster")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "volumesnapshot.yaml" {
            std::fs::copy(&path, items.path().join(path.file_name().unwrap())).unwrap();
        }
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

    let mut child = iar_command(&[
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
        "--config",
        "iar_plugin_labels:labels=x=y",
    ])
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(&stderr_file).unwrap())
    .spawn()
    .expect("spawning iar backup");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if phase().is_some_and(|p| p == "WaitingForPluginOperations") {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "iar backup exited ({status}) before reaching WaitingForPluginOperations (phase on disk: {:?}); stderr:\n{}",
                phase(),
                std::fs::read_to_string(&stderr_file).unwrap_or_default()
            );
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "iar backup did not reach WaitingForPluginOperations in 30 s (phase on disk: {:?}); stderr:\n{}",
                phase(),
                std::fs::read_to_string(&stderr_file).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Let it poll a few periods, then kill it for real (SIGKILL: no cleanup).
    std::thread::sleep(std::time::Duration::from_millis(350));
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
    assert_eq!(ops[0]["status"]["phase"], "New", "{before}");
    assert_eq!(ops[0]["spec"]["operationID"], "shop/data-web-0-killme");
    let created = ops[0]["status"]["created"].clone();
    assert!(created.is_string(), "{before}");

    // Play the snapshot controller while no iar runs.
    std::fs::write(
        items.path().join("volumesnapshot.yaml"),
        "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata:\n  name: data-web-0-killme\n  namespace: shop\n  creationTimestamp: \"2026-11-30T01:00:00Z\"\nspec:\n  source:\n    persistentVolumeClaimName: data-web-0\n  volumeSnapshotClassName: csi-snapclass\nstatus:\n  creationTime: \"2026-11-30T01:00:04Z\"\n  readyToUse: true\n  restoreSize: 1Gi\n",
    )
    .unwrap();

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

    let after = read_gz_json(&operations_file);
    assert_eq!(after[0]["status"]["phase"], "Completed", "{after}");
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
