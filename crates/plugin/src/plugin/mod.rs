//! One loaded plugin, and the boundary: [`instance`] is the only code that
//! calls into a guest, and [`validate`] checks everything that comes back.

mod error;
mod exports;
mod instance;
mod relations;
pub mod restore_scope;
mod run_budget;
pub mod settings;
pub mod validate;

pub use crate::contract::Interface;
pub use crate::sandbox::{GuestLog, plugin_of_line};
pub use error::{
    ActionError, Call, CallError, EngineError, InvalidComponent, LoadError, Target, Violation,
};
pub use instance::{PluginInstance, StdioCounts, lift_budget};
pub use relations::{FnRelation, PluginRelation, Relation};
pub use settings::{LoadCluster, PluginSettings, SettingsError, SettingsFile};
pub use validate::{ExecuteResult, Phase, Progress, RestoreResult};

use crate::contract::{self, ComponentShape, v1};
use crate::limits::Limits;
use crate::runtime::Runtime;
use exports::Exports;
use iar_core::catalog::Catalog;
use iar_core::cluster::{NoCluster, ReadGrants};
use iar_core::select::applies_to::{CompiledSelector, ResourceSelector};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// The rule that keeps an item a plugin may not read from its calls
/// ([`Plugin::may_read`]).
pub const READ_GRANT_RULE: &str = "read-grant";

/// The backup a call belongs to, as the guest sees it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BackupRef {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub spec: serde_json::Value,
    pub phase: Phase,
    /// The whole Backup (contract 1.4.0's `runs.backup`), as its producer
    /// holds it: the bytes Velero's server sent, iar's resource. `None`:
    /// built from the fields above when a plugin asks.
    #[serde(skip)]
    pub object: Option<Arc<str>>,
}

impl BackupRef {
    /// The whole Backup a plugin reads through `runs.backup`: the
    /// producer's, or the least Velero's type needs, from this call's
    /// fields (`status.phase` the Velero phase of the call's phase).
    pub fn object_text(&self) -> Arc<str> {
        if let Some(text) = &self.object {
            return text.clone();
        }
        let phase = match self.phase {
            Phase::Backup => "InProgress",
            Phase::Finalize => "Finalizing",
        };
        minimal_object(
            "Backup",
            &self.name,
            &self.namespace,
            &self.uid,
            &self.spec,
            phase,
        )
    }

    pub(crate) fn to_wit(&self) -> v1::types::Backup {
        v1::types::Backup {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            uid: self.uid.clone(),
            spec: iar_core::item::json_text(&self.spec),
            phase: match self.phase {
                Phase::Backup => v1::types::Phase::Backup,
                Phase::Finalize => v1::types::Phase::Finalize,
            },
        }
    }
}

/// The restore a restore action's call belongs to, as the guest sees it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RestoreRef {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub spec: serde_json::Value,
    /// The whole Restore (contract 1.4.0's `runs.restore`), as its
    /// producer holds it; `None`: built from the fields above.
    #[serde(skip)]
    pub object: Option<Arc<str>>,
}

/// A `velero.io/v1` object of `kind` from a call's name, namespace, uid
/// and spec: what `runs` gives when the producer has no whole object (a
/// test's backup, `iar run` without a file).
fn minimal_object(
    kind: &str,
    name: &str,
    namespace: &str,
    uid: &str,
    spec: &serde_json::Value,
    phase: &str,
) -> Arc<str> {
    let object = serde_json::json!({
        "apiVersion": "velero.io/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": spec,
        "status": {"phase": phase},
    });
    Arc::from(object.to_string())
}

impl RestoreRef {
    /// The whole Restore a plugin reads through `runs.restore` (see
    /// [`BackupRef::object_text`]).
    pub fn object_text(&self) -> Arc<str> {
        match &self.object {
            Some(text) => text.clone(),
            None => minimal_object(
                "Restore",
                &self.name,
                &self.namespace,
                &self.uid,
                &self.spec,
                "InProgress",
            ),
        }
    }

    /// The backed-up item as Velero hands it to its restore actions:
    /// without `status` or the metadata the API server sets, still in its
    /// backed-up namespace (Velero applies `namespaceMapping` after the
    /// actions: `pkg/restore/restore.go`, `restoreItem`). What `iar run
    /// --restore` and `iar test` restore cases hand a restore action;
    /// [`RestoreRef::mapped`] is the item as then created.
    pub fn as_restored(
        &self,
        from_backup: &iar_core::item::Item,
    ) -> Result<iar_core::item::Item, iar_core::item::ItemError> {
        let mut value = from_backup.value().clone();
        if let Some(meta) = value
            .get_mut("metadata")
            .and_then(serde_json::Value::as_object_mut)
        {
            // Exactly what Velero's restore resets before its actions
            // (pkg/restore/restore.go resetMetadata, v1.18.3): managedFields
            // stay (a server-side applied nodePort is kept by Velero's
            // ServiceAction through them), ownerReferences and generateName
            // go (Velero's own ServiceAction run in iar against its native run,
            // host/tests/all/velero_builtins.rs, found both).
            for field in [
                "generateName",
                "selfLink",
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "ownerReferences",
            ] {
                meta.remove(field);
            }
        }
        if let Some(obj) = value.as_object_mut() {
            obj.remove("status");
        }
        iar_core::item::Item::from_value(value, Catalog::builtin())
    }

    /// `item` in the namespace the restore's `namespaceMapping` maps its
    /// own to: where the restore creates it, and the namespace Velero
    /// chooses restore actions by.
    pub fn mapped(
        &self,
        item: &iar_core::item::Item,
    ) -> Result<iar_core::item::Item, iar_core::item::ItemError> {
        let Some(target) = self
            .spec
            .get("namespaceMapping")
            .and_then(|m| m.get(&item.id.namespace))
            .filter(|_| !item.id.namespace.is_empty())
        else {
            return Ok(item.clone());
        };
        let mut value = item.value().clone();
        if let Some(meta) = value
            .get_mut("metadata")
            .and_then(serde_json::Value::as_object_mut)
        {
            meta.insert("namespace".into(), target.clone());
        }
        iar_core::item::Item::from_value(value, Catalog::builtin())
    }

    pub(crate) fn to_wit(&self) -> contract::latest::restore_action::Restore {
        contract::latest::restore_action::Restore {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            uid: self.uid.clone(),
            spec: iar_core::item::json_text(&self.spec),
        }
    }
}

pub(crate) struct Inner {
    pub(crate) name: String,
    pub(crate) digest: String,
    pub(crate) version: String,
    pub(crate) shape: ComponentShape,
    pub(crate) size: usize,
    pub(crate) exports: Exports,
    pub(crate) settings: PluginSettings,
    pub(crate) config: Arc<BTreeMap<String, String>>,
    pub(crate) grants: Arc<ReadGrants>,
    pub(crate) write_grants: Arc<iar_core::cluster::writes::WriteGrants>,
    pub(crate) runtime: Runtime,
    pub(crate) applies_to: ResourceSelector,
    pub(crate) selector: CompiledSelector,
    /// The item-block-action's applies-to, when the plugin exports it.
    pub(crate) block: Option<(ResourceSelector, CompiledSelector)>,
    /// The restore-item-action's applies-to, when the plugin exports it.
    pub(crate) restore: Option<(ResourceSelector, CompiledSelector)>,
    /// Whether it imports `runs` (1.4.0): only then does a call carry the
    /// whole Backup or Restore.
    pub(crate) reads_runs: bool,
}

/// A loaded, linked plugin whose applies-to selector is known. Cheap to
/// clone; make a [`PluginInstance`] per worker to call it.
#[derive(Clone)]
pub struct Plugin(pub(crate) Arc<Inner>);

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.0.name)
            .field("version", &self.0.version)
            .field("digest", &self.0.digest)
            .finish()
    }
}

/// The plugin name for a file: its stem (`labels.wasm` → `labels`).
pub fn name_from_path(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

impl Plugin {
    /// Loads a plugin from a file, named after the file's stem.
    pub fn from_file(
        runtime: &Runtime,
        path: &Path,
        settings: PluginSettings,
    ) -> Result<Plugin, LoadError> {
        let name = name_from_path(path);
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            plugin: name.clone(),
            path: path.display().to_string(),
            source,
        })?;
        Plugin::from_bytes(runtime, &name, &bytes, settings)
    }

    /// Loads a plugin: validates the bytes, checks the world and contract
    /// version, compiles (or loads from the cache), links, and asks the
    /// plugin what it applies to.
    pub fn from_bytes(
        runtime: &Runtime,
        name: &str,
        bytes: &[u8],
        settings: PluginSettings,
    ) -> Result<Plugin, LoadError> {
        let plugin = name.to_string();
        let invalid = |reason| LoadError::Invalid {
            plugin: plugin.clone(),
            reason,
        };
        let shape = ComponentShape::read(bytes).map_err(|e| invalid(InvalidComponent::Shape(e)))?;
        if ComponentShape::declares_shared_memory(bytes)
            .map_err(|e| invalid(InvalidComponent::Shape(e)))?
        {
            return Err(LoadError::SharedMemory {
                plugin: plugin.clone(),
            });
        }
        shape
            .check_limits()
            .map_err(|reason| LoadError::ComponentLimits {
                plugin: plugin.clone(),
                reason,
            })?;
        check_image(&plugin, &shape, settings.limits.memory_bytes)?;
        let (version, interfaces) = check_version(&plugin, &shape)?;
        // Validate before compiling: a precise error, and no compiler time
        // spent on garbage.
        wasmparser::Validator::new_with_features(crate::runtime::validator_features())
            .validate_all(bytes)
            .map_err(|e| invalid(InvalidComponent::Validation(e)))?;
        let digest = hex::encode(Sha256::digest(bytes));
        let component = runtime
            .compile(bytes, &digest)
            .map_err(|e| LoadError::Compile {
                plugin: plugin.clone(),
                reason: EngineError::from_anyhow(e),
            })?;
        let pre = runtime
            .linker()
            .instantiate_pre(&component)
            .map_err(|e| LoadError::Link {
                plugin: plugin.clone(),
                reason: EngineError::from_wasmtime(e),
            })?;
        let exports = Exports::new(pre, &version, &interfaces).map_err(|e| LoadError::Link {
            plugin: plugin.clone(),
            reason: EngineError::from_wasmtime(e),
        })?;
        let config = Arc::new(settings.config.clone());
        let grants = Arc::new(settings.grants.clone());
        let write_grants = Arc::new(settings.write_grants.clone());
        let reads_runs = shape.imports.iter().any(|import| {
            import
                .strip_prefix(contract::PACKAGE)
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|rest| rest.split('@').next() == Some(contract::RUNS_IMPORT))
        });
        let load_cluster = settings
            .load_cluster
            .0
            .clone()
            .unwrap_or_else(|| Arc::new(NoCluster));
        let mut inner = Inner {
            name: plugin.clone(),
            digest,
            version,
            shape,
            size: bytes.len(),
            exports,
            settings,
            config,
            grants,
            write_grants,
            runtime: runtime.clone(),
            applies_to: ResourceSelector::default(),
            selector: CompiledSelector::compile(&ResourceSelector::default(), Catalog::builtin())
                .expect("the empty selector compiles"),
            block: None,
            restore: None,
            reads_runs,
        };
        // applies-to is asked once per load (of each exported interface), on
        // a throwaway instance under the plugin's own limits, reading the
        // cluster the settings name (none by default).
        let partial = Plugin(Arc::new(inner));
        let mut instance = partial.instance(load_cluster);
        let action = match partial.exports(Interface::ItemAction) {
            true => Some(instance.applies_to()?),
            false => None,
        };
        let block = match partial.exports(Interface::ItemBlockAction) {
            true => Some(instance.block_applies_to()?),
            false => None,
        };
        let restore = match partial.exports(Interface::RestoreItemAction) {
            true => Some(instance.restore_applies_to()?),
            false => None,
        };
        drop(instance);
        inner = Arc::into_inner(partial.0).expect("no other reference to a plugin being loaded");
        let compile = |sel: &ResourceSelector, call: Call| {
            CompiledSelector::compile(sel, Catalog::builtin()).map_err(|e| CallError {
                plugin: plugin.clone(),
                call,
                target: Target::None,
                violation: Violation::InvalidSelector(e.to_string()),
                stderr: String::new(),
            })
        };
        if let Some(applies_to) = action {
            inner.selector = compile(&applies_to, Call::AppliesTo)?;
            inner.applies_to = applies_to;
        }
        if let Some(sel) = block {
            let compiled = compile(&sel, Call::BlockAppliesTo)?;
            inner.block = Some((sel, compiled));
        }
        if let Some(sel) = restore {
            let compiled = compile(&sel, Call::RestoreAppliesTo)?;
            inner.restore = Some((sel, compiled));
        }
        Ok(Plugin(Arc::new(inner)))
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The contract version the component was built against.
    pub fn version(&self) -> &str {
        &self.0.version
    }

    /// The contract interfaces the component exports, in contract order.
    pub fn interfaces(&self) -> Vec<Interface> {
        self.0.exports.interfaces()
    }

    /// Whether the component exports a contract interface.
    pub fn exports(&self, interface: Interface) -> bool {
        self.0.exports.has(interface)
    }

    /// sha256 of the component bytes.
    pub fn digest(&self) -> &str {
        &self.0.digest
    }

    pub fn size(&self) -> usize {
        self.0.size
    }

    pub fn shape(&self) -> &ComponentShape {
        &self.0.shape
    }

    /// The settings it was loaded with: limits, config and its grants.
    pub fn settings(&self) -> &PluginSettings {
        &self.0.settings
    }

    pub fn limits(&self) -> &Limits {
        &self.0.settings.limits
    }

    /// What the plugin's item action said it applies to (the empty
    /// selector for a plugin that exports no item action; [`Plugin::applies`]
    /// is false for every item then).
    pub fn applies_to(&self) -> &ResourceSelector {
        &self.0.applies_to
    }

    /// What the plugin's item-block action said it applies to, when it
    /// exports one.
    pub fn block_applies_to(&self) -> Option<&ResourceSelector> {
        self.0.block.as_ref().map(|(sel, _)| sel)
    }

    /// What the plugin's restore-item-action said it applies to, when it
    /// exports one.
    pub fn restore_applies_to(&self) -> Option<&ResourceSelector> {
        self.0.restore.as_ref().map(|(sel, _)| sel)
    }

    /// Whether the restore action's `execute` is to be called for an item
    /// of a restore: its restore selector matches, and its read grants
    /// allow the item (a restore hands over the backed-up object as a
    /// backup does: no Secret without the `secrets` grant).
    pub fn restore_applies(&self, item: &iar_core::item::Item) -> bool {
        self.0.restore.as_ref().is_some_and(|(_, compiled)| {
            compiled.matches(
                &item.id.group,
                &item.id.resource,
                &item.id.namespace,
                || item.labels(),
            )
        }) && self.may_read(item, Call::RestoreExecute)
    }

    /// Whether `get-related-items` is to be called for an item: its
    /// item-block selector matches, and its read grants allow the item
    /// ([`Plugin::may_read`]).
    pub fn block_applies(&self, item: &iar_core::item::Item) -> bool {
        self.0.block.as_ref().is_some_and(|(_, compiled)| {
            compiled.matches(
                &item.id.group,
                &item.id.resource,
                &item.id.namespace,
                || item.labels(),
            )
        }) && self.may_read(item, Call::GetRelatedItems)
    }

    /// Whether the plugin's item action applies to an item (`execute` is to
    /// be called for it): its selector matches, and its read grants allow
    /// the item ([`Plugin::may_read`]). False for every item when it
    /// exports none.
    pub fn applies(&self, item: &iar_core::item::Item) -> bool {
        self.exports(Interface::ItemAction)
            && self.0.selector.matches(
                &item.id.group,
                &item.id.resource,
                &item.id.namespace,
                || item.labels(),
            )
            && self.may_read(item, Call::Execute)
    }

    /// Whether the plugin's read grants allow it to be handed `item`: an
    /// item given to a call is a read as much as a `cluster-get` is, so a
    /// plugin without the exact `secrets` grant is never given a Secret
    /// (a glob, even `*`, does not grant them; see [`ReadGrants`]), and one
    /// granted only some resources is given only those. An item refused
    /// is not passed to the plugin, and is backed up as the other plugins
    /// leave it (rule `read-grant`, at debug: it is the operator's grant
    /// working, not a fault).
    pub fn may_read(&self, item: &iar_core::item::Item, call: Call) -> bool {
        let allowed = self.0.grants.allows(&item.id.group_resource());
        if !allowed {
            tracing::debug!(
                plugin = %self.0.name,
                item = %item.id,
                %call,
                rule = READ_GRANT_RULE,
                "not passed to the plugin: its read grants do not allow {}",
                item.id.group_resource()
            );
        }
        allowed
    }

    /// A new instance for one worker. The wasm instance itself is created on
    /// the first call, and again after a call that trapped.
    pub fn instance(&self, cluster: Arc<dyn iar_core::cluster::ClusterReader>) -> PluginInstance {
        PluginInstance::new(self.clone(), cluster)
    }
}

/// A plugin whose image (the data its memories start with) does not fit
/// its memory cap is refused at load, not at each call; one that leaves
/// less than a quarter of the cap for its heap is loaded with a warning,
/// as a Go plugin linking Velero's packages does (its type data and
/// function tables are most of its image).
fn check_image(plugin: &str, shape: &ComponentShape, cap: usize) -> Result<(), LoadError> {
    let cap64 = cap as u64;
    if shape.initial_memory > cap64 {
        return Err(LoadError::ImageOverCap {
            plugin: plugin.to_string(),
            initial: shape.initial_memory,
            cap,
        });
    }
    if shape.initial_memory > cap64 / 4 * 3 {
        tracing::warn!(
            plugin,
            image = shape.initial_memory,
            cap,
            "its image takes {} MiB of its {} MiB memory cap, leaving {} MiB for its heap: \
             a call that needs more fails by rule memory-cap (limits.memoryBytes)",
            shape.initial_memory >> 20,
            cap >> 20,
            (cap64 - shape.initial_memory) >> 20
        );
    }
    Ok(())
}

fn check_version(
    plugin: &str,
    shape: &ComponentShape,
) -> Result<(String, Vec<Interface>), LoadError> {
    let supported = contract::SUPPORTED
        .iter()
        .map(|v| format!("{}@{v}", contract::PACKAGE))
        .collect::<Vec<_>>()
        .join(", ");
    let invalid = |e| LoadError::Invalid {
        plugin: plugin.to_string(),
        reason: InvalidComponent::Shape(e),
    };
    match shape.contract().map_err(invalid)? {
        Some((v, interfaces)) if contract::SUPPORTED.contains(&v.as_str()) => {
            // item-block-action exists from 1.1.0 on; a 1.0.0 export of it
            // is not a contract this host knows.
            if v == "1.0.0" && interfaces.contains(&Interface::ItemBlockAction) {
                return Err(LoadError::UnsupportedVersion {
                    plugin: plugin.to_string(),
                    found: format!("{v} with item-block-action (added in 1.1.0)"),
                    supported,
                });
            }
            // restore-item-action exists from 1.3.0 on.
            if ["1.0.0", "1.1.0", "1.2.0"].contains(&v.as_str())
                && interfaces.contains(&Interface::RestoreItemAction)
            {
                return Err(LoadError::UnsupportedVersion {
                    plugin: plugin.to_string(),
                    found: format!("{v} with restore-item-action (added in 1.3.0)"),
                    supported,
                });
            }
            Ok((v, interfaces))
        }
        Some((v, _)) => Err(LoadError::UnsupportedVersion {
            plugin: plugin.to_string(),
            found: v,
            supported,
        }),
        None => Err(LoadError::WrongWorld {
            plugin: plugin.to_string(),
            expected: format!(
                "{}/{}@{} or {}/{}@{} or {}/{}@{}",
                contract::PACKAGE,
                contract::EXPORT,
                contract::SUPPORTED.join(" or @"),
                contract::PACKAGE,
                contract::BLOCK_EXPORT,
                contract::SUPPORTED[1..].join(" or @"),
                contract::PACKAGE,
                contract::RESTORE_EXPORT,
                contract::SUPPORTED[3..].join(" or @"),
            ),
            found: shape.exports.join(", "),
        }),
    }
}
