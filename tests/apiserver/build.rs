//! Starts the Go builds of the tests' real components in the background,
//! so that on a fresh machine they overlap the Rust compile instead of
//! following it: `tools/kubernetes/build.sh` (kube-apiserver, the kubelet,
//! kwok, the snapshot-controller) and `tools/velero/build.sh` (Velero's
//! server and plugin client, its AWS plugin, versitygw).
//!
//! Nothing here waits or fails the build. Each script checks its cache
//! first (a few milliseconds when the binaries exist) and holds a lock
//! while it builds; a test that needs a binary runs the same script, which
//! waits for that lock and then finds the binary, or builds it itself if
//! the background build failed (and then reports the failure). The
//! builds' progress goes to `OUT_DIR/go-prefetch-*.log`.
//!
//! `IAR_GO_PREFETCH=0` turns this off (the tests then build on first use).

use std::env;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const SCRIPTS: [(&str, &str); 2] = [
    ("kubernetes", "tools/kubernetes/build.sh"),
    ("velero", "tools/velero/build.sh"),
];

fn main() {
    println!("cargo::rerun-if-env-changed=IAR_GO_PREFETCH");
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("../..");
    for (_, script) in SCRIPTS {
        // A new module version means new binaries: start again.
        let module = root.join(script).with_file_name("go.mod");
        println!("cargo::rerun-if-changed={}", module.display());
    }
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
    if !has_go {
        return;
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    for (name, script) in SCRIPTS {
        let Ok(log) = File::create(out.join(format!("go-prefetch-{name}.log"))) else {
            continue;
        };
        let Ok(log_err) = log.try_clone() else {
            continue;
        };
        // Not waited for: the child outlives this script. Its output goes
        // to the log, never to a pipe cargo reads (cargo would wait for it).
        let _ = Command::new("bash")
            .arg(root.join(script))
            .current_dir(&root)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn();
    }
}
