//! Running the `iar` binary the way a user does, shared by the CLI tests.

// Each test binary includes this module and uses only part of it.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn iar(args: &[&str]) -> Output {
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

pub fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
