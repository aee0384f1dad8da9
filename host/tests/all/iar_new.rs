//! `iar new` makes a crate that builds outside this workspace and whose
//! test file passes; the SDK it depends on is a self-contained package
//! (that its copy of the contract is the contract is checked in
//! guest-sdk/tests/contract_copy.rs, by `cargo test -p iar-sdk`).

use crate::support::{iar, repo, text};
use std::path::Path;
use std::process::Command;

/// Variables the outer cargo sets for this test that must not reach a
/// nested build of another crate (as in tests/build.rs).
const OUTER_ENV: &[&str] = &[
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTFLAGS",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTC_WRAPPER",
    "CARGO_TARGET_DIR",
    "CARGO_MANIFEST_DIR",
    "CARGO_PKG_NAME",
    "CARGO_PRIMARY_PACKAGE",
];

fn cargo(dir: &Path, args: &[&str], target: &Path) -> std::process::Output {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target);
    for v in OUTER_ENV.iter().filter(|v| **v != "CARGO_TARGET_DIR") {
        cmd.env_remove(v);
    }
    cmd.output().expect("running cargo")
}

/// Scaffold outside the workspace (a backup and a restore action, as a
/// Velero plugin pair), `iar build` it (cargo, wasm32-wasip2), `iar test` in the new
/// crate: green, restore case included. The target directory is under the workspace's
/// so the dependencies are compiled once across runs.
#[test]
fn a_new_plugin_builds_outside_the_workspace_and_its_tests_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("team-label");
    let out = iar(&["new", "team-label", "--path", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    for f in [
        "Cargo.toml",
        "src/lib.rs",
        "team-label.iar-test.yaml",
        "README.md",
        ".cargo/config.toml",
    ] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("\n[workspace]\n"), "{manifest}");
    assert!(manifest.contains("crate-type = [\"cdylib\"]"), "{manifest}");
    let sdk = repo().join("guest-sdk").canonicalize().unwrap();
    assert!(
        manifest.contains(&format!(
            "iar-sdk = {{ path = {:?} }}",
            sdk.display().to_string()
        )),
        "{manifest}"
    );

    // `iar build` runs cargo for the crate; the test file names the plugin
    // where a plain `cargo build` would put it, so that is where it goes.
    let target = repo().join("target/iar-new-test");
    let expected = dir.join("target/wasm32-wasip2/release/team_label.wasm");
    std::fs::create_dir_all(expected.parent().unwrap()).unwrap();
    let mut build = Command::new(crate::support::iar_bin());
    build
        .args([
            "build",
            dir.to_str().unwrap(),
            "-o",
            expected.to_str().unwrap(),
        ])
        .env("CARGO_TARGET_DIR", &target);
    for v in OUTER_ENV.iter().filter(|v| **v != "CARGO_TARGET_DIR") {
        build.env_remove(v);
    }
    let out = build.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("team_label.wasm: "),
        "{}",
        text(&out)
    );

    let out = iar(&["test", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("5 cases: 5 passed, 0 failed"),
        "{}",
        text(&out)
    );
    // It labels what it handles: conformance runs it with those changes
    // granted, as its deployed settings would.
    let settings = tmp.path().join("settings.yaml");
    std::fs::write(&settings, crate::conformance::EVERY_CHANGE).unwrap();
    let out = iar(&[
        "conformance",
        expected.to_str().unwrap(),
        "--settings",
        settings.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // The scaffold's .cargo/config.toml reached the link: fresh instances
    // start with room for a heap.
    let out = iar(&["inspect", expected.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let shape: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shape["initialMemory"], 2 << 20, "{}", text(&out));
    // A Velero pair: both halves, at contract 1.3.0.
    assert_eq!(shape["contract"], "iar:plugin@1.3.0", "{}", text(&out));
    assert_eq!(
        shape["interfaces"],
        serde_json::json!(["item-action", "restore-item-action"]),
        "{}",
        text(&out)
    );
}

#[test]
fn new_refuses_a_bad_name_or_a_non_empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let out = iar(&[
        "new",
        "Bad Name",
        "--path",
        tmp.path().join("x").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a plugin name"));
    std::fs::write(tmp.path().join("keep"), "").unwrap();
    let out = iar(&["new", "ok", "--path", tmp.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists and is not empty"));
}

#[test]
fn the_sdk_packages_on_its_own() {
    let target = repo().join("target/iar-new-test");
    let out = cargo(
        &repo(),
        &["package", "-p", "iar-sdk", "--list", "--allow-dirty"],
        &target,
    );
    assert!(out.status.success(), "{}", text(&out));
    let list = String::from_utf8_lossy(&out.stdout);
    // Every file of the SDK's copy of the contract, every version
    // directory of it found by listing (guest-sdk/tests/contract_copy.rs
    // checks the copy is the contract).
    let mut wanted = vec!["src/lib.rs".to_string(), "Cargo.toml".to_string()];
    let sdk = repo().join("guest-sdk");
    let mut dirs = vec![sdk.join("wit")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let rel = path.strip_prefix(&sdk).unwrap();
                wanted.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    assert!(
        wanted.iter().any(|f| f.starts_with("wit/v")),
        "no version directory under guest-sdk/wit: {wanted:?}"
    );
    for f in &wanted {
        assert!(list.lines().any(|l| l == f), "{f} not packaged:\n{list}");
    }
}
