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
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
