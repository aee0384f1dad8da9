//! Starts the builds of the tests' real components in the background, so
//! that on a fresh machine they overlap the Rust compile instead of
//! following it: `tools/kubernetes/build.sh` (kube-apiserver, the kubelet,
//! kube-controller-manager, kube-scheduler, kubectl, kwok, the
//! snapshot-controller), `tools/velero/build.sh` (Velero's server and
//! plugin client, its AWS plugin, versitygw) and `tools/restic/build.sh`
//! (restic's CLI) and `tools/toxiproxy/build.sh` (the fault campaign's
//! network faults), with Go; and, as root (the
//! install test that uses them needs a real node, so root),
//! `tools/images/build.sh` (iar's images: a static iar built by a cargo of
//! its own, in a target directory of its own).
//!
//! Nothing here waits or fails the build. Each script checks its cache
//! first (a few milliseconds when the binaries exist) and holds a lock
//! while it builds; a test that needs a binary runs the same script, which
//! waits for that lock and then finds the binary, or builds it itself if
//! the background build failed (and then reports the failure). The
//! builds' progress goes to `OUT_DIR/prefetch-*.log`.
//!
//! Each runs when this script runs: on a fresh clone, and when a `go.mod`
//! or the images' script changes. An edit to iar's sources does not start
//! a new image build (the install test builds it, incrementally, when it
//! runs).
//!
//! `IAR_GO_PREFETCH=0` turns this off (the tests then build on first use).

use std::env;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const SCRIPTS: [(&str, &str); 4] = [
    ("kubernetes", "tools/kubernetes/build.sh"),
    ("velero", "tools/velero/build.sh"),
    ("restic", "tools/restic/build.sh"),
    ("toxiproxy", "tools/toxiproxy/build.sh"),
];

/// Builds iar's images (a cargo build of its own).
const IMAGES: (&str, &str) = ("images", "tools/images/build.sh");

/// Set for this build by cargo, clippy and wrappers: they must not reach
/// the images' own cargo (another target, another target directory, a
/// jobserver whose descriptors close when this script exits).
const CARGO_ONLY_ENV: &[&str] = &[
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTFLAGS",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTC_WRAPPER",
    "CARGO_TARGET_DIR",
    "CARGO_MAKEFLAGS",
    "MAKEFLAGS",
    "MFLAGS",
    "TARGET",
    "HOST",
    "OUT_DIR",
    "PROFILE",
    "OPT_LEVEL",
    "DEBUG",
    "NUM_JOBS",
    "RUSTC",
    "RUSTDOC",
];

fn main() {
    println!("cargo::rerun-if-env-changed=IAR_GO_PREFETCH");
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("../..");
    for (_, script) in SCRIPTS {
        // A new module version means new binaries: start again.
        let module = root.join(script).with_file_name("go.mod");
        println!("cargo::rerun-if-changed={}", module.display());
    }
    println!("cargo::rerun-if-changed={}", root.join(IMAGES.1).display());
    if env::var_os("IAR_GO_PREFETCH").is_some_and(|v| v == "0") {
        return;
    }
    // The binaries are for the machine that runs the tests: only when it
    // is the one building.
    if env::var("TARGET").ok() != env::var("HOST").ok() {
        return;
    }
    let has_go = Command::new("go")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let root_user = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    let scripts = SCRIPTS
        .iter()
        .filter(|_| has_go)
        .chain(Some(&IMAGES).filter(|_| root_user));
    for (name, script) in scripts {
        let Ok(log) = File::create(out.join(format!("prefetch-{name}.log"))) else {
            continue;
        };
        let Ok(log_err) = log.try_clone() else {
            continue;
        };
        let mut command = Command::new("bash");
        for var in CARGO_ONLY_ENV {
            command.env_remove(var);
        }
        // The install test's images (host/tests/install.rs asks for the
        // same profile).
        command.env("IAR_IMAGE_PROFILE", "image-test");
        // Not waited for: the child outlives this script. Its output goes
        // to the log, never to a pipe cargo reads (cargo would wait for it).
        let _ = command
            .arg(root.join(script))
            .current_dir(&root)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn();
    }
}
