//! `iar build`: a plugin's source directory into the component iar loads,
//! with the language's own toolchain. A Go module (`go.mod`) is built as
//! a WASI reactor (`GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared`)
//! and then [`componentize`]d; a Rust crate (`Cargo.toml`) with
//! `cargo build --release --target wasm32-wasip2`, which already gives a
//! component. iar only runs the toolchains; what they fetch and cache is
//! theirs.

use crate::componentize::componentize;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Language {
    Go,
    Rust,
}

/// What was built, and where it is.
#[derive(Debug)]
pub struct Built {
    pub language: Language,
    pub path: PathBuf,
    pub bytes: u64,
}

/// The plugin's language, from the manifest in `dir`: `Cargo.toml`, or
/// `go.mod` (or Go files in a package of a module above it).
pub fn language(dir: &Path) -> anyhow::Result<Language> {
    let go = dir.join("go.mod").is_file() || (has_go_files(dir) && go_module_above(dir).is_some());
    match (go, dir.join("Cargo.toml").is_file()) {
        (true, false) => Ok(Language::Go),
        (false, true) => Ok(Language::Rust),
        (true, true) => bail!(
            "{} holds both a Go package and Cargo.toml: build the Go module or the crate from a directory of its own",
            dir.display()
        ),
        (false, false) => bail!(
            "{} holds no Cargo.toml, no go.mod and no Go package of a module: iar build takes a Go package or a Rust crate (iar new makes either)",
            dir.display()
        ),
    }
}

fn has_go_files(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "go"))
    })
}

/// The nearest `go.mod` at or above `dir`.
fn go_module_above(dir: &Path) -> Option<PathBuf> {
    let dir = std::path::absolute(dir).ok()?;
    dir.ancestors()
        .map(|d| d.join("go.mod"))
        .find(|m| m.is_file())
}

/// Builds the plugin in `dir` into `output` (default: `<name>.wasm` in
/// `dir` for Go, cargo's own path for Rust). `world` is as for
/// [`componentize`] (Go only).
pub fn build(dir: &Path, output: Option<&Path>, world: Option<&str>) -> anyhow::Result<Built> {
    let language = language(dir)?;
    let path = match language {
        Language::Go => build_go(dir, output, world)?,
        Language::Rust => {
            if world.is_some() {
                bail!("--world is for a Go module: a Rust plugin's world is its SDK's");
            }
            build_rust(dir, output)?
        }
    };
    let bytes = std::fs::metadata(&path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    Ok(Built {
        language,
        path,
        bytes,
    })
}

/// The module path's last element: `example.com/team/labels` is `labels`.
fn go_module_name(go_mod: &str) -> Option<String> {
    go_mod.lines().find_map(|line| {
        let path = line.trim().strip_prefix("module")?.trim();
        let path = path.trim_matches('"');
        let name = path.rsplit('/').next()?;
        (!name.is_empty()).then(|| name.to_string())
    })
}

fn build_go(dir: &Path, output: Option<&Path>, world: Option<&str>) -> anyhow::Result<PathBuf> {
    // A module's root is named by its module path, a package below it by
    // its directory.
    let name = if dir.join("go.mod").is_file() {
        let go_mod = std::fs::read_to_string(dir.join("go.mod"))
            .with_context(|| format!("reading {}", dir.join("go.mod").display()))?;
        go_module_name(&go_mod)
            .with_context(|| format!("{}: no module line", dir.join("go.mod").display()))?
    } else {
        absolute(dir)?
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .context("the package's directory has no name")?
    };
    let output = match output {
        Some(o) => o.to_path_buf(),
        None => dir.join(format!("{name}.wasm")),
    };
    let core = output.with_extension("core.wasm");
    // Stripped: the symbol table and DWARF are a third of the module, and
    // a panic still names its function and line without them.
    let status = Command::new("go")
        .args([
            "build",
            "-buildmode=c-shared",
            "-trimpath",
            "-ldflags=-s -w",
        ])
        .arg("-o")
        .arg(absolute(&core)?)
        .arg(".")
        .current_dir(dir)
        .env("GOOS", "wasip1")
        .env("GOARCH", "wasm")
        .stdin(Stdio::null())
        .status()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                anyhow::anyhow!("go is not on PATH: a Go plugin needs Go 1.24 or newer")
            }
            _ => anyhow::Error::new(e).context("running go build"),
        })?;
    if !status.success() {
        bail!(
            "go build failed in {} ({status}): its messages are above",
            dir.display()
        );
    }
    let module = std::fs::read(&core).with_context(|| format!("reading {}", core.display()))?;
    let _ = std::fs::remove_file(&core);
    let component = componentize(&module, world).with_context(|| {
        format!(
            "componentizing the module go build made in {}",
            dir.display()
        )
    })?;
    std::fs::write(&output, component).with_context(|| format!("writing {}", output.display()))?;
    Ok(output)
}

fn build_rust(dir: &Path, output: Option<&Path>) -> anyhow::Result<PathBuf> {
    let manifest = absolute(&dir.join("Cargo.toml"))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--message-format=json-render-diagnostics",
            "--manifest-path",
        ])
        .arg(&manifest)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| anyhow::Error::new(e).context("running cargo build"))?;
    if !out.status.success() {
        bail!(
            "cargo build failed for {} ({}): its messages are above (rustup target add wasm32-wasip2 gives the target)",
            manifest.display(),
            out.status
        );
    }
    let built =
        rust_artifact(&String::from_utf8_lossy(&out.stdout), &manifest).with_context(|| {
            format!(
                "cargo built no wasm library for {}: a plugin crate has crate-type = [\"cdylib\"]",
                manifest.display()
            )
        })?;
    match output {
        Some(o) => {
            std::fs::copy(&built, o)
                .with_context(|| format!("copying {} to {}", built.display(), o.display()))?;
            Ok(o.to_path_buf())
        }
        None => Ok(built),
    }
}

/// The `.wasm` of the crate at `manifest`, from cargo's JSON messages.
fn rust_artifact(messages: &str, manifest: &Path) -> Option<PathBuf> {
    messages.lines().find_map(|line| {
        let m: serde_json::Value = serde_json::from_str(line).ok()?;
        if m["reason"] != "compiler-artifact"
            || Path::new(m["manifest_path"].as_str()?) != manifest
            || !m["target"]["kind"]
                .as_array()?
                .iter()
                .any(|k| k == "cdylib")
        {
            return None;
        }
        m["filenames"]
            .as_array()?
            .iter()
            .filter_map(|f| f.as_str())
            .find(|f| f.ends_with(".wasm"))
            .map(PathBuf::from)
    })
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_name_is_the_paths_last_element() {
        assert_eq!(
            go_module_name("// x\nmodule example.com/team/labels\n\ngo 1.24\n").as_deref(),
            Some("labels")
        );
        assert_eq!(
            go_module_name("module \"labels\"\n").as_deref(),
            Some("labels")
        );
        assert_eq!(go_module_name("go 1.24\n"), None);
    }

    #[test]
    fn a_directory_is_go_or_rust_and_never_both_or_neither() {
        let dir = tempfile::tempdir().unwrap();
        let e = language(dir.path()).unwrap_err().to_string();
        assert!(e.contains("no Cargo.toml, no go.mod"), "{e}");
        std::fs::write(dir.path().join("go.mod"), "module x\n").unwrap();
        assert_eq!(language(dir.path()).unwrap(), Language::Go);
        // A package below the module's root is Go too; a directory of
        // nothing below it is nothing.
        let package = dir.path().join("examples/labels");
        std::fs::create_dir_all(&package).unwrap();
        assert!(language(&package).is_err());
        std::fs::write(package.join("main.go"), "package main\n").unwrap();
        assert_eq!(language(&package).unwrap(), Language::Go);
        std::fs::write(dir.path().join("Cargo.toml"), "").unwrap();
        let e = language(dir.path()).unwrap_err().to_string();
        assert!(e.contains("both"), "{e}");
    }

    #[test]
    fn cargos_artifact_is_the_cdylib_of_that_manifest() {
        let messages = [
            r#"{"reason":"compiler-artifact","manifest_path":"/w/dep/Cargo.toml","target":{"kind":["cdylib"]},"filenames":["/t/dep.wasm"]}"#,
            r#"{"reason":"compiler-artifact","manifest_path":"/w/p/Cargo.toml","target":{"kind":["lib"]},"filenames":["/t/libp.rlib"]}"#,
            r#"{"reason":"compiler-artifact","manifest_path":"/w/p/Cargo.toml","target":{"kind":["cdylib"]},"filenames":["/t/p.wasm"]}"#,
            r#"{"reason":"build-finished","success":true}"#,
        ]
        .join("\n");
        assert_eq!(
            rust_artifact(&messages, Path::new("/w/p/Cargo.toml")),
            Some(PathBuf::from("/t/p.wasm"))
        );
        assert_eq!(rust_artifact(&messages, Path::new("/w/q/Cargo.toml")), None);
    }
}
