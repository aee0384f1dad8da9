//! `iar new`: the files of a new plugin crate that builds on its own,
//! outside any workspace, with a working action and a test file.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// Where the SDK comes from in the generated `Cargo.toml`.
pub enum Sdk {
    /// A local checkout's `guest-sdk` (absolute path).
    Path(PathBuf),
    /// The published crate, by version requirement.
    Version(String),
}

/// The `guest-sdk` of the checkout this binary was built from, if it is
/// still there.
pub fn local_sdk() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest-sdk");
    dir.join("Cargo.toml")
        .exists()
        .then(|| dir.canonicalize().ok())?
}

/// The lockfile iar's own plugins are built with, if this checkout has one:
/// a new plugin starts from the dependency versions iar is tested with.
pub fn workspace_lock() -> Option<PathBuf> {
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.lock");
    lock.exists().then_some(lock)
}

/// A crate name cargo accepts and a wasm file can be named after.
pub fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !ok {
        bail!(
            "{name:?} is not a plugin name: use lower-case letters, digits, '-' and '_', starting with a letter"
        );
    }
    Ok(())
}

/// Writes the crate into `dir` (which must not exist or be empty).
/// Returns the files written.
pub fn write(name: &str, dir: &Path, sdk: &Sdk) -> anyhow::Result<Vec<PathBuf>> {
    check_name(name)?;
    if dir.exists()
        && std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .next()
            .is_some()
    {
        bail!("{} exists and is not empty", dir.display());
    }
    let wasm = name.replace('-', "_");
    let dependency = match sdk {
        Sdk::Path(p) => format!(
            "# This checkout's SDK. Once iar-sdk is published, use the released\n# version instead: iar-sdk = \"0.1\"\niar-sdk = {{ path = {:?} }}",
            p.display().to_string()
        ),
        Sdk::Version(v) => format!("iar-sdk = {v:?}"),
    };
    let files: Vec<(String, String)> = vec![
        (
            "Cargo.toml".into(),
            CARGO_TOML
                .replace("{name}", name)
                .replace("{dependency}", &dependency),
        ),
        ("src/lib.rs".into(), LIB_RS.replace("{name}", name)),
        (
            format!("{name}.iar-test.yaml"),
            TEST_YAML.replace("{name}", name).replace("{wasm}", &wasm),
        ),
        (
            "README.md".into(),
            README.replace("{name}", name).replace("{wasm}", &wasm),
        ),
        (".cargo/config.toml".into(), CARGO_CONFIG.to_string()),
        (".gitignore".into(), "/target\n".to_string()),
    ];
    let mut written = Vec::new();
    for (rel, text) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    if let Some(lock) = workspace_lock() {
        let path = dir.join("Cargo.lock");
        std::fs::copy(&lock, &path).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

const CARGO_TOML: &str = r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

# A plugin is a WebAssembly component: build it with
# `cargo build --target wasm32-wasip2 --release`.
[lib]
crate-type = ["cdylib"]

[dependencies]
{dependency}

[profile.release]
strip = true
# One optimization unit across the plugin, the SDK and serde_json: about
# 10% faster calls and a smaller component.
lto = "fat"
codegen-units = 1

# Its own workspace, so it builds wherever it is, even inside another one.
[workspace]
"#;

const CARGO_CONFIG: &str = r#"# Start with 2 MiB of linear memory rather than rustc's default (its 1 MiB
# shadow stack plus data): the allocator takes its first heap from what is
# left, so a call on a fresh instance need not grow memory, and iar's
# instance pool reuses a slot without changing its page protections.
# A fresh instance costs about a fifth less (iar's README, Performance).
[target.wasm32-wasip2]
rustflags = ["-C", "link-arg=--initial-memory=2097152"]
"#;

const LIB_RS: &str = r#"//! {name}: a pair of iar item actions, as a Velero plugin ships them. The
//! backup half labels every Pod and ConfigMap it is given, so a restore can
//! tell which backup tool saved them; the restore half takes the label off
//! again, since the restored object is a new one.
//!
//! Config (the plugin's settings file, or `iar run --config key=value`):
//! `label` is the `key=value` to set (default `backed-up-by={name}`).

use iar_sdk::{
    Backup, Error, Item, ItemAction, Output, Phase, RestoreInput, RestoreItemAction,
    RestoreOutput, Result, Selector, config, debug,
};

struct Plugin;

/// The configured label as key and value.
fn label() -> Result<(String, String)> {
    let label = config("label").unwrap_or_else(|| "backed-up-by={name}".into());
    let Some((key, value)) = label.split_once('=') else {
        // A `failed` error fails this item, not the backup, and names it.
        return Err(Error::failed(format!("config label: {label:?} is not key=value")));
    };
    Ok((key.trim().to_string(), value.trim().to_string()))
}

impl ItemAction for Plugin {
    /// Asked once when the plugin is loaded: execute is called only for the
    /// items this selects (resources, namespaces, labels).
    fn applies_to() -> Result<Selector> {
        Ok(Selector::resources(["pods", "configmaps"]))
    }

    /// Called for each selected item. Return the changed item, or
    /// `Output::unchanged()`; the host refuses an item whose kind,
    /// namespace or name changed.
    fn execute(mut item: Item, backup: &Backup) -> Result<Output> {
        let (key, value) = label()?;
        item.set_label(&key, &value);
        // The finalize pass runs on items operations touched; this plugin
        // starts no operations, so it does the same in both phases.
        if backup.phase == Phase::Finalize {
            debug!("finalizing {}", item.name());
        }
        Ok(Output::item(item))
    }
}

impl RestoreItemAction for Plugin {
    /// The items of a restore `execute` below is called for.
    fn applies_to() -> Result<Selector> {
        Ok(Selector::resources(["pods", "configmaps"]))
    }

    /// Called for each selected item of a restore, before it is created:
    /// `input.item` as it will be created (still in its backed-up
    /// namespace, as Velero hands it over: the restore maps it after),
    /// `input.item_from_backup` as it was saved.
    fn execute(input: RestoreInput) -> Result<RestoreOutput> {
        let (key, _) = label()?;
        let mut item = input.item;
        let Some(labels) = item.json_mut()["metadata"]["labels"].as_object_mut() else {
            return Ok(RestoreOutput::unchanged());
        };
        if labels.remove(&key).is_none() {
            return Ok(RestoreOutput::unchanged());
        }
        debug!("restoring {} from {}", item.name(), input.restore.backup_name());
        Ok(RestoreOutput::item(item))
    }
}

// Both halves, at contract 1.3.0: Velero runs the first when it backs up
// and the second when it restores.
iar_sdk::export_plugin!(item_action = Plugin, restore_action = Plugin);
"#;

pub(crate) const TEST_YAML: &str = r#"# Run with `iar test` in this directory, after
# `cargo build --target wasm32-wasip2 --release`.
plugin: target/wasm32-wasip2/release/{wasm}.wasm
# Changing an item is a write: the plugin may change only what its
# settings grant (here, what these cases label), as in its deployed
# settings file.
settings:
  allowMutate: [pods, configmaps]
cases:
  - name: labels a pod
    item:
      apiVersion: v1
      kind: Pod
      metadata: {name: web-0, namespace: shop}
      spec:
        containers: [{name: web, image: nginx}]
    expect:
      pointers:
        /metadata/labels/backed-up-by: {name}
      noOperation: true

  - name: the label comes from config
    config: {label: team=payments}
    item:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: settings, namespace: shop}
    expect:
      item:
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: settings
          namespace: shop
          labels: {team: payments}

  - name: a label that is not key=value fails the item
    config: {label: oops}
    item:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: settings, namespace: shop}
    expect:
      error: {rule: plugin-error, message: "is not key=value"}

  - name: services are left alone
    item:
      apiVersion: v1
      kind: Service
      metadata: {name: web, namespace: shop}
    expect:
      appliesTo: false

  - name: a restore takes the label off again, in the restore's namespace
    item:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: settings
        namespace: shop
        labels: {backed-up-by: {name}, app: web}
    restore:
      spec: {backupName: nightly, namespaceMapping: {shop: shop-copy}}
    expect:
      item:
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: settings
          namespace: shop-copy
          labels: {app: web}
"#;

const README: &str = r#"# {name}

A pair of iar item actions (backup and restore): a Kubernetes backup
plugin that runs as a sandboxed WebAssembly component.

```sh
rustup target add wasm32-wasip2
cargo build --target wasm32-wasip2 --release   # target/wasm32-wasip2/release/{wasm}.wasm
iar test                                       # runs {name}.iar-test.yaml
iar conformance target/wasm32-wasip2/release/{wasm}.wasm
iar run --plugin target/wasm32-wasip2/release/{wasm}.wasm --item pod.yaml
```

`src/lib.rs` is the pair of actions; `{name}.iar-test.yaml` holds their tests (items,
cluster fixtures, expected outputs). See iar's `docs/plugin-guide.md` for the
contract, the limits and what each error means.
"#;
