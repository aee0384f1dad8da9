//! Builds every guest component from source, so tests never run stale or
//! checked-in `.wasm` files (the pattern of wasmtime's
//! `crates/test-programs/artifacts/build.rs`).
//!
//! The guests are the crates under `plugins/` and `tests/guests/`; a new
//! directory with a `Cargo.toml` there is picked up without editing this
//! file. They are built with one nested
//! `cargo build --target wasm32-wasip2 --profile guest -p ...` into
//! `<target>/guests`, a target directory of their own (the outer cargo holds
//! the lock on `<target>`). The paths of the built components are written to
//! `$OUT_DIR/artifacts.rs` as `pub const <NAME>: &str` plus `ALL` and
//! `SOURCES`, included by `src/lib.rs`.
//!
//! A guest that no test uses fails the build: every guest's constant must
//! be named in a file under `tests/tests/` (see [`check_every_guest_is_used`]).

use std::collections::BTreeMap;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Directories (relative to the workspace root) whose subdirectories are guests.
const GUEST_DIRS: &[&str] = &["plugins", "tests/guests"];

/// Package-name prefixes dropped from the constant names.
const PREFIXES: &[&str] = &["iar-plugin-", "iar-guest-"];

/// Set for the host build by clippy, coverage and wrappers; they must not
/// leak into the guest build (wrong target, wrong tools, wrong directory).
const HOST_ONLY_ENV: &[&str] = &[
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTFLAGS",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTC_WRAPPER",
    "CARGO_TARGET_DIR",
];

/// The integration tests (relative to `tests/`), whose sources must name
/// every guest.
const TESTS: &str = "tests";

/// Test files (relative to [`TESTS`]) that do not count as using a guest:
/// `artifacts.rs` checks every guest through `ALL`, which says nothing
/// about whether a test exercises it.
const NOT_USES: &[&str] = &["all/artifacts.rs"];

const TARGET: &str = "wasm32-wasip2";
const PROFILE: &str = "guest";

struct Guest {
    /// The package name, `iar-plugin-labels`.
    package: String,
    /// Its directory relative to the workspace root, `plugins/labels`.
    dir: String,
    /// Its `Cargo.toml`, canonical, to match cargo's artifact messages.
    manifest: PathBuf,
    /// The constant naming it in `artifacts.rs`, `LABELS`.
    constant: String,
}

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir
        .parent()
        .expect("tests/ lives in the workspace root")
        .to_path_buf();

    for path in [
        "wit",
        "guest-sdk",
        "plugins",
        "tests/guests",
        "Cargo.toml",
        "Cargo.lock",
        // Its `[target.wasm32-wasip2]` rustflags shape every guest.
        ".cargo/config.toml",
    ] {
        println!("cargo:rerun-if-changed={}", workspace.join(path).display());
    }
    // The tests are read to check that every guest is used.
    println!(
        "cargo:rerun-if-changed={}",
        manifest_dir.join(TESTS).display()
    );
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");

    let guests = discover(&workspace);
    check_every_guest_is_used(&manifest_dir.join(TESTS), &guests);
    let target_dir = guest_target_dir(&workspace);
    let artifacts = build(&workspace, &target_dir, &guests);

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("artifacts.rs");
    fs::write(&out, generate(&guests, &artifacts))
        .unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}

/// Every crate directly under one of [`GUEST_DIRS`], sorted by directory.
fn discover(workspace: &Path) -> Vec<Guest> {
    let mut guests = Vec::new();
    for parent in GUEST_DIRS {
        let parent_path = workspace.join(parent);
        let entries = fs::read_dir(&parent_path)
            .unwrap_or_else(|e| panic!("listing guests in {}: {e}", parent_path.display()));
        let mut dirs: Vec<PathBuf> = entries
            .map(|entry| entry.expect("reading a directory entry").path())
            .filter(|path| path.join("Cargo.toml").is_file())
            .collect();
        dirs.sort();
        for dir in dirs {
            let manifest = dir.join("Cargo.toml");
            let text = fs::read_to_string(&manifest)
                .unwrap_or_else(|e| panic!("reading {}: {e}", manifest.display()));
            let package = package_name(&text)
                .unwrap_or_else(|| panic!("{} has no [package] name", manifest.display()));
            let dir_name = dir.file_name().expect("a directory name").to_string_lossy();
            guests.push(Guest {
                constant: constant_name(&package),
                dir: format!("{parent}/{dir_name}"),
                manifest: manifest
                    .canonicalize()
                    .unwrap_or_else(|e| panic!("{}: {e}", manifest.display())),
                package,
            });
        }
    }

    let mut seen = BTreeMap::new();
    for guest in &guests {
        if let Some(other) = seen.insert(guest.constant.as_str(), guest.package.as_str()) {
            panic!(
                "guests {other} and {} would both be named {} in artifacts.rs; rename one",
                guest.package, guest.constant
            );
        }
    }
    guests
}

/// Panics, failing the build, when a guest's constant is named by no test
/// under `tests_dir` (outside [`NOT_USES`]): a guest nobody runs is dead
/// weight that still costs build time, or a test someone forgot to write.
/// A test uses a guest by naming its constant, as `artifacts::HOSTILE` or
/// in `use iar_tests::artifacts::{HOSTILE, ...}`; comments do not count.
fn check_every_guest_is_used(tests_dir: &Path, guests: &[Guest]) {
    let mut words = std::collections::BTreeSet::new();
    let mut files = vec![tests_dir.to_path_buf()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            let entries =
                fs::read_dir(&path).unwrap_or_else(|e| panic!("listing {}: {e}", path.display()));
            files.extend(entries.map(|e| e.expect("reading a directory entry").path()));
            continue;
        }
        let relative = path.strip_prefix(tests_dir).ok().and_then(|p| p.to_str());
        if path.extension().is_none_or(|e| e != "rs")
            || relative.is_some_and(|r| NOT_USES.contains(&r))
        {
            continue;
        }
        let text =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        for line in text.lines() {
            // Drop `//` comments (doc comments included). A `//` inside a
            // string ends the line early too, which can only miss a use.
            let code = line.split("//").next().unwrap_or("");
            words.extend(
                code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|w| !w.is_empty())
                    .map(str::to_string),
            );
        }
    }
    let unused: Vec<String> = guests
        .iter()
        .filter(|g| !words.contains(&g.constant))
        .map(|g| format!("{} ({}, artifacts::{})", g.package, g.dir, g.constant))
        .collect();
    assert!(
        unused.is_empty(),
        "no test under tests/tests/ uses these guests: {}. Every guest built for the \
         tests must be run by one: name its constant in a test (not only in a comment, \
         and not only in artifacts.rs), or delete the crate.",
        unused.join(", ")
    );
}

/// `name` in the `[package]` table of a `Cargo.toml`. A line scan is enough
/// for the manifests in this repository and needs no TOML parser.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            if key.trim() == "name" {
                let value = value.trim().trim_matches('"');
                return Some(value.to_string());
            }
        }
    }
    None
}

/// `iar-plugin-pod-volumes` → `POD_VOLUMES`.
fn constant_name(package: &str) -> String {
    let short = PREFIXES
        .iter()
        .find_map(|prefix| package.strip_prefix(prefix))
        .unwrap_or(package);
    let name: String = short
        .chars()
        .map(|c| match c {
            '-' => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect();
    let valid = name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    assert!(
        valid,
        "guest package {package:?} does not make a Rust constant name ({name:?})"
    );
    name
}

/// `$CARGO_TARGET_DIR/guests`, or `<workspace>/target/guests`.
fn guest_target_dir(workspace: &Path) -> PathBuf {
    let base = match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            // Cargo resolves a relative one against its working directory,
            // which a build script cannot know; the workspace root is the
            // usual one.
            if dir.is_absolute() {
                dir
            } else {
                workspace.join(dir)
            }
        }
        _ => workspace.join("target"),
    };
    base.join("guests")
}

/// Builds all guests with one nested cargo; returns each package's `.wasm`.
fn build(workspace: &Path, target_dir: &Path, guests: &[Guest]) -> BTreeMap<String, PathBuf> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace)
        .arg("build")
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .args(["--target", TARGET, "--profile", PROFILE])
        .arg("--target-dir")
        .arg(target_dir)
        .arg("--message-format=json-render-diagnostics");
    for guest in guests {
        cmd.args(["-p", &guest.package]);
    }
    for var in HOST_ONLY_ENV {
        cmd.env_remove(var);
    }
    // Compiler output goes to our stderr, which cargo shows when we fail;
    // stdout carries cargo's JSON messages.
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());

    let hint = format!(
        "\n  command: {cmd:?}\n  \
         If the {TARGET} target is missing, install it with: rustup target add {TARGET}"
    );
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("could not run cargo to build the guests: {e}{hint}"));

    let by_manifest: BTreeMap<&Path, &str> = guests
        .iter()
        .map(|g| (g.manifest.as_path(), g.package.as_str()))
        .collect();
    let mut artifacts: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let stdout = child.stdout.take().expect("piped stdout");
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("reading cargo's output");
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(manifest) = message["manifest_path"].as_str() else {
            continue;
        };
        let manifest = Path::new(manifest)
            .canonicalize()
            .unwrap_or_else(|_| PathBuf::from(manifest));
        let Some(package) = by_manifest.get(manifest.as_path()) else {
            continue; // a dependency (iar-sdk, serde, ...)
        };
        let wasm = message["filenames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str())
            .filter(|f| f.ends_with(".wasm"))
            .map(PathBuf::from);
        artifacts
            .entry(package.to_string())
            .or_default()
            .extend(wasm);
    }

    let status = child.wait().expect("waiting for cargo");
    if !status.success() {
        panic!(
            "building the guest components failed ({status}); the compiler's \
             messages are above.{hint}"
        );
    }

    guests
        .iter()
        .map(|guest| {
            let files = artifacts.remove(&guest.package).unwrap_or_default();
            let [file] = <[PathBuf; 1]>::try_from(files).unwrap_or_else(|files| {
                panic!(
                    "guest {} ({}) must build exactly one .wasm component, built {files:?}{hint}",
                    guest.package, guest.dir
                )
            });
            assert!(
                file.is_file(),
                "cargo reported {} but it does not exist",
                file.display()
            );
            (guest.package.clone(), file)
        })
        .collect()
}

/// The text of `artifacts.rs`.
fn generate(guests: &[Guest], artifacts: &BTreeMap<String, PathBuf>) -> String {
    let mut out = String::from("// @generated by tests/build.rs; do not edit.\n\n");
    for guest in guests {
        let path = artifacts[&guest.package].to_str().unwrap_or_else(|| {
            panic!("the path of {} is not UTF-8", guest.package);
        });
        writeln!(
            out,
            "/// The `{}` component (`{}`), built for {TARGET}.\n\
             pub const {}: &str = {path:?};\n",
            guest.package, guest.dir, guest.constant
        )
        .unwrap();
    }
    out.push_str("/// Every guest component, as (package name, path to its `.wasm`).\n");
    out.push_str("pub const ALL: &[(&str, &str)] = &[\n");
    for guest in guests {
        writeln!(out, "    ({:?}, {}),", guest.package, guest.constant).unwrap();
    }
    out.push_str("];\n\n");
    out.push_str("/// Every guest, as (package name, absolute path of its source directory).\n");
    out.push_str("pub const SOURCES: &[(&str, &str)] = &[\n");
    for guest in guests {
        let dir = guest.manifest.parent().expect("a manifest's directory");
        let dir = dir.to_str().unwrap_or_else(|| {
            panic!("the directory of {} is not UTF-8", guest.package);
        });
        writeln!(out, "    ({:?}, {dir:?}),", guest.package).unwrap();
    }
    out.push_str("];\n");
    out
}
