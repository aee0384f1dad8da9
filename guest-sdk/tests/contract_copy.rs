//! The SDK carries its own copy of the contract (`guest-sdk/wit/`) so that
//! the package builds outside this workspace. The copy must be the
//! repository's `wit/` exactly: every file of every version directory,
//! found by listing both trees (a new `wit/v1.3/` is covered without
//! editing this test), compared byte for byte.
//!
//! This file is not packaged (`include` in Cargo.toml names `src/**` and
//! `wit/**`): it needs the repository around the crate.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Every file under `root`, as paths relative to it, in every
/// subdirectory.
fn files(root: &Path) -> BTreeSet<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<PathBuf>) {
        let entries =
            std::fs::read_dir(dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
                .path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(path.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

/// How the copy at `copy` (shown as `copy_name`) differs from the contract
/// at `contract` (shown as `contract_name`): one line per file, naming it
/// and saying how to fix it. Empty when they are the same.
fn differences(contract: &Path, contract_name: &str, copy: &Path, copy_name: &str) -> Vec<String> {
    let (want, have) = (files(contract), files(copy));
    let mut out = Vec::new();
    for rel in &want {
        let rel = rel.display();
        let fix = format!("cp {contract_name}/{rel} {copy_name}/{rel}");
        match std::fs::read(copy.join(rel.to_string())) {
            Err(_) => out.push(format!("{copy_name}/{rel} is missing: copy it ({fix})")),
            Ok(bytes) if bytes != std::fs::read(contract.join(rel.to_string())).unwrap() => out
                .push(format!(
                    "{copy_name}/{rel} differs from {contract_name}/{rel}: copy it again ({fix})"
                )),
            Ok(_) => {}
        }
    }
    for rel in have.difference(&want) {
        out.push(format!(
            "{copy_name}/{} is not in {contract_name}/: remove it, or add it to the contract",
            rel.display()
        ));
    }
    out
}

fn repo() -> PathBuf {
    // The directory cargo runs the test from, not the one it was built
    // in: a build shared between checkouts (CI's cache) keeps the binary
    // of another path while these files are unchanged.
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
        .join("..")
}

/// The versioned directories of a contract tree (`v1.1`, `v1.2`, ...), by
/// listing it.
fn version_dirs(root: &Path) -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn the_sdk_wit_is_the_contract() {
    let contract = repo().join("wit");
    // The listing sees the versioned directories (the newest contract is
    // at the top, older ones each in their own), and each holds WIT.
    let versions = version_dirs(&contract);
    assert!(!versions.is_empty(), "no version directory under wit/");
    for v in &versions {
        assert!(
            files(&contract.join(v))
                .iter()
                .any(|f| f.extension().is_some_and(|e| e == "wit")),
            "wit/{v} holds no .wit file"
        );
    }
    let diff = differences(
        &contract,
        "wit",
        &repo().join("guest-sdk/wit"),
        "guest-sdk/wit",
    );
    assert!(diff.is_empty(), "{}", diff.join("\n"));
}

/// A fresh directory, removed at drop (std only: the SDK takes no
/// dev-dependency for it).
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "iar-sdk-contract-copy-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A contract tree with `plugin.wit` at the top and `versions` below it.
fn tree(root: &Path, versions: &[&str]) {
    std::fs::create_dir_all(root).unwrap();
    std::fs::write(root.join("plugin.wit"), "package iar:plugin@1.3.0;\n").unwrap();
    for v in versions {
        std::fs::create_dir_all(root.join(v)).unwrap();
        std::fs::write(root.join(v).join("plugin.wit"), format!("// {v}\n")).unwrap();
    }
}

/// A version directory the check never heard of (`v1.3`) is compared like
/// the others: missing from the copy, different in it, or only in the
/// copy, each is reported naming the file.
#[test]
fn a_new_version_directory_is_checked_and_a_mismatch_names_the_file() {
    let tmp = Scratch::new();
    let (contract, copy) = (tmp.0.join("wit"), tmp.0.join("copy"));
    tree(&contract, &["v1.1", "v1.2", "v1.3"]);
    tree(&copy, &["v1.1", "v1.2", "v1.3"]);
    assert_eq!(version_dirs(&contract), ["v1.1", "v1.2", "v1.3"]);
    assert_eq!(
        differences(&contract, "wit", &copy, "guest-sdk/wit"),
        Vec::<String>::new()
    );

    // One byte off (a line ending) in the new version's file.
    std::fs::write(copy.join("v1.3/plugin.wit"), "// v1.3\r\n").unwrap();
    assert_eq!(
        differences(&contract, "wit", &copy, "guest-sdk/wit"),
        [
            "guest-sdk/wit/v1.3/plugin.wit differs from wit/v1.3/plugin.wit: copy it again \
          (cp wit/v1.3/plugin.wit guest-sdk/wit/v1.3/plugin.wit)"
        ]
    );

    // Not copied at all.
    std::fs::remove_dir_all(copy.join("v1.3")).unwrap();
    assert_eq!(
        differences(&contract, "wit", &copy, "guest-sdk/wit"),
        ["guest-sdk/wit/v1.3/plugin.wit is missing: copy it \
          (cp wit/v1.3/plugin.wit guest-sdk/wit/v1.3/plugin.wit)"]
    );

    // Only in the copy: a stale file, or a version the contract dropped.
    std::fs::remove_dir_all(contract.join("v1.3")).unwrap();
    std::fs::create_dir_all(copy.join("v1.1/deps")).unwrap();
    std::fs::write(copy.join("v1.1/deps/old.wit"), "").unwrap();
    assert_eq!(
        differences(&contract, "wit", &copy, "guest-sdk/wit"),
        ["guest-sdk/wit/v1.1/deps/old.wit is not in wit/: remove it, or add it to the contract"]
    );
}
