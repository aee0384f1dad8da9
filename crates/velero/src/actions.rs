//! The wasm plugins of one plugin directory, as Velero's BackupItemAction
//! v2 calls them: each `NAME.wasm` is the action `iar.dev/NAME`, with the
//! settings of the `NAME.yaml` beside it (as for `iar backup --plugins`).
//! In a pod, iar's plugin ConfigMaps add theirs (verified, bounded by the
//! grant policy and reloaded as the controller does); a file of the same
//! name wins, since the image is the operator's.
//!
//! Everything here is synchronous and runs wasm: the gRPC services call it
//! on blocking threads. A plugin is loaded on its first call, not when
//! Velero lists the names (it lists every plugin binary when its server
//! starts), and loaded again when its file changes, so a replaced plugin
//! takes effect on the next call without restarting Velero.

use iar_core::catalog::Catalog;
use iar_core::cluster::ClusterReader;
use iar_core::item::{Item, ItemRef};
use iar_core::select::ResourceSelector;
use iar_k8s::plugins::PluginRegistry;
use iar_plugin::contract::{ComponentShape, Interface};
use iar_plugin::plugin::{
    BackupRef, CallError, Phase, Plugin, PluginInstance, PluginSettings, SettingsFile,
};
use iar_plugin::plugin::{ExecuteResult, Progress};
use iar_plugin::runtime::Runtime;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

mod restore;

/// The prefix of every action name iar gives Velero. Velero requires a
/// `<domain>/<name>` name; the domain says which binary serves it.
pub const NAME_PREFIX: &str = "iar.dev/";

/// Why a call was not answered with a result.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The request itself is wrong (a name iar never gave, an item that is
    /// not an object): Velero's side sent something no plugin could take.
    #[error("{0}")]
    BadRequest(String),
    /// A well-formed name of no plugin in the directory.
    #[error("{0}")]
    UnknownAction(String),
    /// The plugin's file could not be loaded.
    #[error("{0}")]
    Load(String),
    /// The call crossed the boundary and broke a rule (or the plugin
    /// returned an error): the message names the plugin, item and rule.
    #[error("{0}")]
    Call(#[from] Box<CallError>),
}

/// One loaded plugin and the idle instances of it, reused across calls as
/// the plugin's isolation allows (the instance decides).
struct Loaded {
    plugin: Plugin,
    origin: Origin,
    idle: Mutex<Vec<PluginInstance>>,
}

/// Where a loaded plugin came from, and what says it is out of date.
#[derive(PartialEq)]
enum Origin {
    /// The plugin file's and its settings file's modification times and
    /// lengths when it was loaded.
    File(Stamp),
    /// The ConfigMap watcher's generation that loaded it: a reload of the
    /// ConfigMap is a new generation.
    ConfigMap(u64),
}

/// The actions of one directory.
pub struct ActionSet {
    dir: PathBuf,
    runtime: Runtime,
    cluster: Arc<dyn ClusterReader>,
    /// Plugin names found when the process started, in name order: what
    /// Velero is told. A plugin added later is listed by the next process.
    names: Vec<String>,
    /// iar's plugin ConfigMaps, when the process runs in a cluster.
    configmaps: Option<Arc<PluginRegistry>>,
    loaded: Mutex<HashMap<String, Arc<Loaded>>>,
    /// Operation ids each plugin returned, per backup uid, with the item
    /// that started them: the boundary's operation-id-unique rule, and the
    /// item named in a later progress error. A Velero backup's calls reach
    /// one plugin process; the operations controller starts another, which
    /// does not know the item (the error says so).
    operations: Mutex<HashMap<(String, String, String), ItemRef>>,
}

type Stamp = [(Option<SystemTime>, u64); 2];

/// What says a file changed, cheaply (one `stat`); a missing file is
/// `(None, 0)`.
fn stamp_of(path: &Path) -> (Option<SystemTime>, u64) {
    std::fs::metadata(path).map_or((None, 0), |m| (m.modified().ok(), m.len()))
}

/// The item an operation names when this process did not start it.
fn unknown_item() -> ItemRef {
    ItemRef::new("", "(started in another plugin process)", "", "")
}

impl ActionSet {
    /// The `*.wasm` files of `dir` and the plugins of `configmaps` (none is
    /// a warning: Velero then gets no action from this binary, which is not
    /// an error for it either).
    pub fn open(
        dir: &Path,
        runtime: Runtime,
        cluster: Arc<dyn ClusterReader>,
        configmaps: Option<Arc<PluginRegistry>>,
    ) -> std::io::Result<ActionSet> {
        // No directory is no plugin files: an install may bring its
        // plugins by ConfigMap only.
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let mut names: Vec<String> = entries
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
            .map(|p| iar_plugin::plugin::name_from_path(p))
            .collect();
        if let Some(registry) = &configmaps {
            for plugin in &registry.current().plugins {
                if names.iter().any(|n| n == plugin.name()) {
                    tracing::warn!(
                        plugin = plugin.name(),
                        "a plugin ConfigMap and {}/{}.wasm share a name: the file is used",
                        dir.display(),
                        plugin.name()
                    );
                } else {
                    names.push(plugin.name().to_string());
                }
            }
        }
        names.sort();
        if names.is_empty() {
            tracing::warn!(
                "no plugins (*.wasm) in {}: this binary serves Velero no action",
                dir.display()
            );
        }
        Ok(ActionSet {
            dir: dir.to_path_buf(),
            runtime,
            cluster,
            names,
            configmaps,
            loaded: Mutex::new(HashMap::new()),
            operations: Mutex::new(HashMap::new()),
        })
    }

    /// The action names Velero registers, `iar.dev/NAME`.
    pub fn action_names(&self) -> Vec<String> {
        self.names
            .iter()
            .map(|n| format!("{NAME_PREFIX}{n}"))
            .collect()
    }

    /// Each action name with every contract interface its plugin exports,
    /// read from the component's exports without compiling it (a file) or
    /// from the loaded plugin (a ConfigMap): what Velero is told, one kind
    /// per interface. A file whose exports cannot be read is listed as a
    /// BackupItemAction only, with an error in the log: left out, Velero's
    /// only word would be "unable to get valid BackupItemActionV2", while
    /// listed, each call gets iar's refusal naming the plugin, the item and
    /// the rule (`valid-component`). A file that reads but exports no
    /// contract interface is left out: it is no item action at all.
    pub fn listed(&self) -> Vec<(String, Interface)> {
        let configmaps = self.configmaps.as_ref().map(|r| r.current());
        let mut listed = Vec::new();
        for name in &self.names {
            let path = self.wasm_path(name);
            let interfaces = if path.is_file() {
                let shape = std::fs::read(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|bytes| ComponentShape::read(&bytes).map_err(|e| e.to_string()))
                    .and_then(|shape| shape.contract().map_err(|e| e.to_string()));
                match shape {
                    Ok(Some((_, interfaces))) => interfaces,
                    Ok(None) => {
                        tracing::error!(plugin = %name, "{} exports no contract interface (rule: plugin-world): not listed to Velero", path.display());
                        continue;
                    }
                    Err(e) => {
                        tracing::error!(plugin = %name, "{}: {e}: listed to Velero as a BackupItemAction, whose every call is refused", path.display());
                        vec![Interface::ItemAction]
                    }
                }
            } else {
                match configmaps.as_ref().and_then(|s| s.get(name)) {
                    Some(plugin) => plugin.interfaces(),
                    None => continue,
                }
            };
            for interface in interfaces {
                listed.push((format!("{NAME_PREFIX}{name}"), interface));
            }
        }
        listed
    }

    fn wasm_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.wasm"))
    }

    /// The plugin, loaded now if it was not, or if its file or its settings
    /// (or its ConfigMap) changed.
    fn plugin(&self, action: &str) -> Result<Arc<Loaded>, Refusal> {
        let name = plugin_name(action)?;
        let path = self.wasm_path(name);
        let (origin, from_configmap) = if path.is_file() {
            let stamp = [stamp_of(&path), stamp_of(&path.with_extension("yaml"))];
            (Origin::File(stamp), None)
        } else {
            let set = self.configmaps.as_ref().map(|r| r.current());
            match set
                .as_ref()
                .and_then(|s| s.get(name).map(|p| (s.generation, p)))
            {
                Some((generation, plugin)) => (Origin::ConfigMap(generation), Some(plugin.clone())),
                None => {
                    return Err(Refusal::UnknownAction(format!(
                        "action {action:?}: there is no {} and no plugin ConfigMap {name:?} (plugins: {:?})",
                        path.display(),
                        self.names
                    )));
                }
            }
        };
        if let Some(loaded) = self.loaded.lock().expect("not poisoned").get(name)
            && loaded.origin == origin
        {
            return Ok(loaded.clone());
        }
        let plugin = match from_configmap {
            Some(plugin) => plugin,
            None => {
                // Loaded outside the lock: compiling takes a while (less with
                // the compile cache), and other plugins' calls need not wait.
                let mut settings = settings_for(&path)?;
                settings.load_cluster = iar_plugin::plugin::LoadCluster(Some(self.cluster.clone()));
                let plugin = Plugin::from_file(&self.runtime, &path, settings)
                    .map_err(|e| Refusal::Load(e.to_string()))?;
                tracing::info!(
                    plugin = name,
                    digest = plugin.digest(),
                    "loaded {}",
                    path.display()
                );
                plugin
            }
        };
        let loaded = Arc::new(Loaded {
            plugin,
            origin,
            idle: Mutex::new(Vec::new()),
        });
        self.loaded
            .lock()
            .expect("not poisoned")
            .insert(name.to_string(), loaded.clone());
        Ok(loaded)
    }

    /// Runs `f` on an idle instance of the plugin (or a new one) and keeps
    /// the instance for the next call. The guest's log lines go to this
    /// process's log, which Velero's server logs.
    fn with_instance<T>(&self, loaded: &Loaded, f: impl FnOnce(&mut PluginInstance) -> T) -> T {
        let idle = loaded.idle.lock().expect("not poisoned").pop();
        let mut instance = idle.unwrap_or_else(|| loaded.plugin.instance(self.cluster.clone()));
        let out = f(&mut instance);
        for log in instance.take_logs() {
            tracing::info!(
                plugin = loaded.plugin.name(),
                level = log.level,
                "{}",
                log.message
            );
        }
        // Velero keeps no record of them for iar (its own delete actions
        // delete a backup's snapshots): said in Velero's log, not kept, so
        // a long-lived process does not accumulate them.
        for created in instance.take_created() {
            tracing::info!(
                plugin = loaded.plugin.name(),
                object = %created.id,
                uid = %created.uid,
                "created for the backup"
            );
        }
        loaded.idle.lock().expect("not poisoned").push(instance);
        out
    }

    /// The plugin's applies-to selector, as it declared it when loaded.
    pub fn applies_to(&self, action: &str) -> Result<ResourceSelector, Refusal> {
        Ok(self.plugin(action)?.plugin.applies_to().clone())
    }

    /// The plugin's item-block-action selector; a plugin that exports no
    /// block action is refused by rule.
    pub fn block_applies_to(&self, action: &str) -> Result<ResourceSelector, Refusal> {
        let loaded = self.plugin(action)?;
        loaded.plugin.block_applies_to().cloned().ok_or_else(|| {
            Refusal::BadRequest(format!(
                "plugin {:?}: does not export {} (rule: plugin-world); Velero asked for it as an ItemBlockAction",
                loaded.plugin.name(),
                Interface::ItemBlockAction
            ))
        })
    }

    /// The items that must share an item block with `item`, by the
    /// plugin's `get-related-items`. An item the plugin's block selector
    /// or read grants do not cover has none.
    pub fn related_items(
        &self,
        action: &str,
        item: &[u8],
        backup: &[u8],
    ) -> Result<Vec<ItemRef>, Refusal> {
        let loaded = self.plugin(action)?;
        let plugin = loaded.plugin.name().to_string();
        let backup = backup_ref(&plugin, backup)?;
        let item = parse_item(&plugin, item)?;
        if !loaded.plugin.block_applies(&item)
            || !loaded
                .plugin
                .may_read(&item, iar_plugin::plugin::Call::GetRelatedItems)
        {
            return Ok(Vec::new());
        }
        self.with_instance(&loaded, |i| i.get_related_items(&item, &backup))
            .map_err(|e| Refusal::Call(Box::new(e)))
    }

    /// Execute on one item. The answer's item is the item's JSON as the
    /// plugin left it (unchanged: as Velero sent it).
    pub fn execute(
        &self,
        action: &str,
        item: &[u8],
        backup: &[u8],
    ) -> Result<(Arc<str>, ExecuteResult), Refusal> {
        let loaded = self.plugin(action)?;
        let plugin = loaded.plugin.name().to_string();
        let backup = backup_ref(&plugin, backup)?;
        let item = parse_item(&plugin, item)?;
        // Velero sends every item the selector matches; the read grants
        // still decide what the plugin is handed (rule `read-grant`). One
        // it may not read goes back as Velero sent it, unseen.
        if !loaded
            .plugin
            .may_read(&item, iar_plugin::plugin::Call::Execute)
        {
            return Ok((item.json().clone(), ExecuteResult::default()));
        }
        let started = |id: &str| self.claim_operation(&backup.uid, &plugin, id, &item.id);
        let out = self
            .with_instance(&loaded, |i| i.execute(&item, &backup, &started))
            .map_err(Box::new)?;
        let json = match &out.item {
            Some(changed) => changed.json().clone(),
            None => item.json().clone(),
        };
        Ok((json, out))
    }

    /// Records that `plugin` started operation `id` in the backup or
    /// restore `uid` for `item`; true when it already had (the boundary's
    /// operation-id-unique rule).
    fn claim_operation(&self, uid: &str, plugin: &str, id: &str, item: &ItemRef) -> bool {
        let key = (uid.to_string(), plugin.to_string(), id.to_string());
        let mut ops = self.operations.lock().expect("not poisoned");
        match ops.entry(key) {
            std::collections::hash_map::Entry::Occupied(_) => true,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(item.clone());
                false
            }
        }
    }

    fn operation_item(&self, uid: &str, plugin: &str, id: &str) -> ItemRef {
        let key = (uid.to_string(), plugin.to_string(), id.to_string());
        self.operations
            .lock()
            .expect("not poisoned")
            .get(&key)
            .cloned()
            .unwrap_or_else(unknown_item)
    }

    /// An operation's progress.
    pub fn progress(&self, action: &str, id: &str, backup: &[u8]) -> Result<Progress, Refusal> {
        let loaded = self.plugin(action)?;
        let plugin = loaded.plugin.name().to_string();
        let backup = backup_ref(&plugin, backup)?;
        let item = self.operation_item(&backup.uid, &plugin, id);
        self.with_instance(&loaded, |i| i.progress(id, &item, &backup))
            .map_err(|e| Refusal::Call(Box::new(e)))
    }

    /// Asks the plugin to stop an operation.
    pub fn cancel(&self, action: &str, id: &str, backup: &[u8]) -> Result<(), Refusal> {
        let loaded = self.plugin(action)?;
        let plugin = loaded.plugin.name().to_string();
        let backup = backup_ref(&plugin, backup)?;
        let item = self.operation_item(&backup.uid, &plugin, id);
        self.with_instance(&loaded, |i| i.cancel(id, &item, &backup))
            .map_err(|e| Refusal::Call(Box::new(e)))
    }
}

/// The plugin an action name means. A name outside iar's prefix, or one
/// with a path in it, is refused by rule; a well-formed name with no
/// file behind it is unknown.
pub fn plugin_name(action: &str) -> Result<&str, Refusal> {
    let name = action.strip_prefix(NAME_PREFIX).ok_or_else(|| {
        Refusal::BadRequest(format!(
            "action {action:?} is not one iar serves: its names start with {NAME_PREFIX:?} (rule: velero-action-name)"
        ))
    })?;
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && !name.starts_with('.');
    if !plain {
        return Err(Refusal::BadRequest(format!(
            "action {action:?}: {name:?} is not a plugin file name (letters, digits, '-', '_', '.') (rule: velero-action-name)"
        )));
    }
    Ok(name)
}

/// The operator's settings for a plugin file: `NAME.yaml` beside it.
fn settings_for(path: &Path) -> Result<PluginSettings, Refusal> {
    let name = iar_plugin::plugin::name_from_path(path);
    let sidecar = path.with_extension("yaml");
    SettingsFile::read_or_default(&sidecar)
        .map_err(|e| Refusal::Load(format!("plugin {name:?}: {e:#}")))?
        .into_settings(std::iter::empty())
        .map_err(|e| Refusal::Load(format!("plugin {name:?}: {}: {e}", sidecar.display())))
}

/// The item Velero sends: one JSON object with an identity.
fn parse_item(plugin: &str, bytes: &[u8]) -> Result<Item, Refusal> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        Refusal::BadRequest(format!(
            "plugin {plugin:?}: the item Velero sent is not JSON: {e} (rule: item-is-json-object)"
        ))
    })?;
    Item::from_value(value, Catalog::builtin()).map_err(|e| {
        Refusal::BadRequest(format!(
            "plugin {plugin:?}: the item Velero sent is not a Kubernetes object: {e} (rule: item-is-json-object)"
        ))
    })
}

/// Velero's Backup object as the guest sees it. The phase comes from the
/// backup's status: Velero runs the actions again on post-operation items
/// while the backup is Finalizing, and there the boundary refuses any new
/// operation, as it does in iar's own finalize pass.
pub fn backup_ref(plugin: &str, bytes: &[u8]) -> Result<BackupRef, Refusal> {
    let obj = velero_object(plugin, "backup", bytes)?;
    let field = |ptr: &str| {
        obj.pointer(ptr)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let phase = match field("/status/phase").as_str() {
        "Finalizing" | "FinalizingPartiallyFailed" => Phase::Finalize,
        _ => Phase::Backup,
    };
    Ok(BackupRef {
        // What Velero sent, byte for byte (contract 1.4.0's `runs.backup`).
        object: Some(Arc::from(String::from_utf8_lossy(bytes))),
        name: field("/metadata/name"),
        namespace: field("/metadata/namespace"),
        uid: field("/metadata/uid"),
        spec: obj
            .get("spec")
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default())),
        phase,
    })
}

/// A Velero object (its Backup, its Restore) as Velero sent it: one JSON
/// object, refused by rule `<what>-is-json-object` otherwise.
fn velero_object(plugin: &str, what: &str, bytes: &[u8]) -> Result<Value, Refusal> {
    let obj: Value = serde_json::from_slice(bytes).map_err(|e| {
        Refusal::BadRequest(format!(
            "plugin {plugin:?}: the {what} Velero sent is not JSON: {e} (rule: {what}-is-json-object)"
        ))
    })?;
    if !obj.is_object() {
        return Err(Refusal::BadRequest(format!(
            "plugin {plugin:?}: the {what} Velero sent is not a JSON object (rule: {what}-is-json-object)"
        )));
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finalizing_backup_is_the_finalize_phase() {
        for (status, phase) in [
            ("InProgress", Phase::Backup),
            ("WaitingForPluginOperations", Phase::Backup),
            ("Finalizing", Phase::Finalize),
            ("FinalizingPartiallyFailed", Phase::Finalize),
        ] {
            let json = format!(
                r#"{{"metadata":{{"name":"b","namespace":"velero","uid":"u"}},"status":{{"phase":"{status}"}}}}"#
            );
            let b = backup_ref("p", json.as_bytes()).unwrap();
            assert_eq!(b.phase, phase, "{status}");
            assert_eq!((b.name.as_str(), b.uid.as_str()), ("b", "u"));
        }
    }

    #[test]
    fn action_names_outside_iar_s_or_with_paths_are_refused_by_rule() {
        assert_eq!(plugin_name("iar.dev/labels").unwrap(), "labels");
        assert_eq!(plugin_name("iar.dev/pvc-snapshot").unwrap(), "pvc-snapshot");
        for bad in [
            "velero.io/labels",
            "iar.dev/",
            "iar.dev/../../etc/passwd",
            "iar.dev/a/b",
            "iar.dev/.hidden",
            "iar.dev/sp ace",
            "labels",
        ] {
            let e = plugin_name(bad).unwrap_err();
            assert!(matches!(e, Refusal::BadRequest(_)), "{bad}");
            assert!(e.to_string().contains("velero-action-name"), "{bad}: {e}");
        }
    }

    /// Velero sends every item a plugin's selector matches; the plugin is
    /// handed only those its read grants allow. The labels plugin (empty
    /// applies-to, default grants) labels a ConfigMap, and a Secret comes
    /// back exactly as Velero sent it, the plugin never called.
    #[test]
    fn a_secret_goes_back_unseen_without_the_secrets_grant() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(iar_tests::artifacts::LABELS, dir.path().join("labels.wasm")).unwrap();
        std::fs::write(
            dir.path().join("labels.yaml"),
            "config: {labels: seen=yes}\nallowMutate: ['*']\n",
        )
        .unwrap();
        let runtime = Runtime::new(iar_plugin::RuntimeConfig {
            cache_dir: None,
            ..iar_plugin::RuntimeConfig::default()
        })
        .unwrap();
        let actions =
            ActionSet::open(dir.path(), runtime, Arc::new(iar_core::NoCluster), None).unwrap();
        let backup = br#"{"metadata":{"name":"b","namespace":"velero","uid":"u"},"spec":{}}"#;
        let secret = br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"db","namespace":"shop"},"data":{"password":"aHVudGVyMg=="}}"#;
        let (json, out) = actions.execute("iar.dev/labels", secret, backup).unwrap();
        assert_eq!(out, ExecuteResult::default());
        assert_eq!(
            serde_json::from_str::<Value>(&json).unwrap(),
            serde_json::from_slice::<Value>(secret).unwrap()
        );
        let configmap = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web","namespace":"shop"}}"#;
        let (json, _) = actions
            .execute("iar.dev/labels", configmap, backup)
            .unwrap();
        let json: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(json["metadata"]["labels"]["seen"], "yes", "{json}");
    }

    #[test]
    fn a_backup_that_is_not_an_object_is_refused_by_rule() {
        for bad in [&b"[1]"[..], b"nope", b"\"x\""] {
            let e = backup_ref("p", bad).unwrap_err().to_string();
            assert!(e.contains("backup-is-json-object"), "{e}");
        }
    }
}
