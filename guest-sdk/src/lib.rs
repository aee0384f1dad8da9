//! `iar-sdk`: write an iar item-action plugin as a small Rust crate.
//!
//! A plugin implements [`ItemAction`] and calls [`export!`] once. Build it
//! with `cargo build --release --target wasm32-wasip2`; the `.wasm` file in
//! `target/wasm32-wasip2/release/` is the plugin.
//!
//! ```ignore
//! use iar_sdk::{Backup, Item, ItemAction, Output, Result, Selector};
//!
//! struct Team;
//!
//! impl ItemAction for Team {
//!     fn applies_to() -> Result<Selector> {
//!         Ok(Selector::resources(["pods"]))
//!     }
//!     fn execute(mut item: Item, _backup: &Backup) -> Result<Output> {
//!         item.set_label("team", "payments");
//!         Ok(Output::item(item))
//!     }
//! }
//!
//! iar_sdk::export!(Team);
//! ```
//!
//! `progress` and `cancel` have defaults that answer "this plugin starts no
//! operations", so a plugin that only mutates items implements two functions.
//!
//! # Creating what an operation tracks (contract 1.2.0)
//!
//! [`create`] creates an object in the cluster (a VolumeSnapshot, as
//! Velero's CSI action does) and [`delete`] deletes one this plugin
//! created. Both need the operator's write grant (`allowWrite` in the
//! plugin's settings); name the object deterministically (the item and
//! the backup, or [`object_name`]), so that a retried `execute` finds the
//! object it already created. [`list`] finds objects by their labels.
//! [`update`] and [`patch`] (contract 1.4.0) change an object this plugin
//! created, at the version it read: a change made in between is a
//! [`WriteError::Conflict`], never overwritten.
//!
//! # Item blocks (contract 1.1.0)
//!
//! A plugin may also (or only) say which items must be backed up in the same
//! item block as another, Velero's ItemBlockAction: implement
//! [`ItemBlockAction`] and export it with [`export_block_action!`] (block
//! relations only) or [`export_both!`] (an item action and block relations,
//! on one type). [`export!`] alone builds a 1.0.0 plugin, as before.
//!
//! ```ignore
//! use iar_sdk::{Backup, Item, ItemBlockAction, ResourceId, Result, Selector};
//!
//! struct SettingsOfPods;
//!
//! impl ItemBlockAction for SettingsOfPods {
//!     fn applies_to() -> Result<Selector> {
//!         Ok(Selector::resources(["pods"]))
//!     }
//!     fn get_related_items(item: Item, _backup: &Backup) -> Result<Vec<ResourceId>> {
//!         Ok(item.annotation("example.com/settings").into_iter()
//!             .map(|name| ResourceId::namespaced("", "configmaps", item.namespace(), name))
//!             .collect())
//!     }
//! }
//!
//! iar_sdk::export_block_action!(SettingsOfPods);
//! ```

mod cluster;
mod export;
mod host;
mod item;
mod output;
mod restore;
mod runs;
mod skim;

pub use cluster::{PatchType, WriteError, create, delete, list, object_name, patch, update};
pub use host::{cluster_get, cluster_get_as, config, log};
pub use item::{Backup, Item, Phase, ResourceId};
pub use output::{Error, Output, Progress, Result, Selector, Timestamp};
pub use restore::{Restore, RestoreInput, RestoreItemAction, RestoreOutput};
pub use runs::{backup_object, restore_object};
pub use serde_json::{self, Value, json};

#[doc(hidden)]
pub use export::{Exported, ExportedBlock};
#[doc(hidden)]
pub use restore::ExportedRestore;

/// Generated bindings for the `iar:plugin@1.0.0` world. Plugin authors do
/// not need them; they are public only for [`export!`].
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "iar:plugin/plugin",
        pub_export_macro: true,
        export_macro_name: "__export_iar_plugin",
        default_bindings_module: "::iar_sdk::bindings",
    });
}

/// Generated bindings for the `iar:plugin@1.1.0` world `block-plugin`
/// (item-block-action only). Its `types` and `host` are the 1.0.0 ones
/// (unchanged in 1.1.0), so every SDK type serves both versions. Public
/// only for [`export_block_action!`].
#[doc(hidden)]
pub mod bindings_block {
    wit_bindgen::generate!({
        path: "wit/v1.1",
        world: "iar:plugin/block-plugin",
        with: {
            "iar:plugin/types@1.1.0": crate::bindings::iar::plugin::types,
            "iar:plugin/host@1.1.0": crate::bindings::iar::plugin::host,
        },
        pub_export_macro: true,
        export_macro_name: "__export_iar_block_plugin",
        default_bindings_module: "::iar_sdk::bindings_block",
    });
}

/// Generated bindings for the `iar:plugin@1.1.0` world `action-plugin`
/// (item-action at 1.1.0). [`export_both!`] exports through this and
/// [`bindings_block`]; wit-component unites the two into the `full-plugin`
/// world. (Generating `full-plugin` here would define the item-block-action
/// export macro a second time: wit-bindgen names it after the interface;
/// and world macros are named after the world, hence `action-plugin`, not
/// `plugin`, which 1.0.0's bindings above already use.)
#[doc(hidden)]
pub mod bindings_v1_1 {
    wit_bindgen::generate!({
        path: "wit/v1.1",
        world: "iar:plugin/action-plugin",
        with: {
            "iar:plugin/types@1.1.0": crate::bindings::iar::plugin::types,
            "iar:plugin/host@1.1.0": crate::bindings::iar::plugin::host,
        },
        pub_export_macro: true,
        export_macro_name: "__export_iar_plugin_v1_1",
        default_bindings_module: "::iar_sdk::bindings_v1_1",
    });
}

/// Generated bindings for `iar:plugin@1.2.0`'s `cluster-write` and
/// `cluster-list` imports (world `cluster-writer`), beside the exports of
/// any version: a plugin that calls [`create`], [`delete`] or [`list`]
/// imports them; one that does not imports neither.
#[doc(hidden)]
pub mod bindings_v1_2 {
    wit_bindgen::generate!({
        path: "wit/v1.2",
        world: "iar:plugin/cluster-writer",
        with: {
            "iar:plugin/types@1.2.0": crate::bindings::iar::plugin::types,
        },
        default_bindings_module: "::iar_sdk::bindings_v1_2",
    });
}

/// Generated bindings for `iar:plugin@1.4.0`'s `runs`, `cluster-catalog`
/// and `cluster-write` imports (world `additions`), beside the exports of
/// any version: a plugin imports only the functions it calls (one that
/// never calls [`backup_object`] or [`restore_object`] imports no `runs`;
/// one that never calls [`update`] or [`patch`] needs no 1.4.0 host to
/// write).
#[doc(hidden)]
pub mod bindings_v1_4 {
    wit_bindgen::generate!({
        path: "wit/v1.4",
        world: "iar:plugin/additions",
        with: {
            "iar:plugin/types@1.4.0": crate::bindings::iar::plugin::types,
        },
        default_bindings_module: "::iar_sdk::bindings_v1_4",
    });
}

/// Generated bindings for `iar:plugin@1.3.0`, one world per exported
/// interface (`item-action-part`, `block-action-part`, `restore-plugin`), so that
/// [`export_plugin!`] exports any combination of them, all at 1.3.0 (the
/// host refuses a component whose interfaces are at two versions). Their
/// `types` and `host` are the 1.0.0 ones.
#[doc(hidden)]
pub mod bindings_v1_3_action {
    wit_bindgen::generate!({
        path: "wit/v1.3",
        world: "iar:plugin/item-action-part",
        with: {
            "iar:plugin/types@1.3.0": crate::bindings::iar::plugin::types,
            "iar:plugin/host@1.3.0": crate::bindings::iar::plugin::host,
        },
        pub_export_macro: true,
        export_macro_name: "__export_iar_action_v1_3",
        default_bindings_module: "::iar_sdk::bindings_v1_3_action",
    });
}

#[doc(hidden)]
pub mod bindings_v1_3_block {
    wit_bindgen::generate!({
        path: "wit/v1.3",
        world: "iar:plugin/block-action-part",
        with: {
            "iar:plugin/types@1.3.0": crate::bindings::iar::plugin::types,
            "iar:plugin/host@1.3.0": crate::bindings::iar::plugin::host,
        },
        pub_export_macro: true,
        export_macro_name: "__export_iar_block_v1_3",
        default_bindings_module: "::iar_sdk::bindings_v1_3_block",
    });
}

#[doc(hidden)]
pub mod bindings_v1_3_restore {
    wit_bindgen::generate!({
        path: "wit/v1.3",
        world: "iar:plugin/restore-plugin",
        with: {
            "iar:plugin/types@1.3.0": crate::bindings::iar::plugin::types,
            "iar:plugin/host@1.3.0": crate::bindings::iar::plugin::host,
        },
        pub_export_macro: true,
        export_macro_name: "__export_iar_restore_v1_3",
        default_bindings_module: "::iar_sdk::bindings_v1_3_restore",
    });
}

/// Severity of a log line sent to the host.
pub use bindings::iar::plugin::host::Level;

/// The item action a plugin implements.
pub trait ItemAction {
    /// Which items this action applies to. Called once when the plugin is
    /// loaded; `execute` is only called for items that match.
    fn applies_to() -> Result<Selector>;

    /// Runs the action on one item. Return [`Output::unchanged`] to keep the
    /// item as it is, or [`Output::item`] with the changed item.
    fn execute(item: Item, backup: &Backup) -> Result<Output>;

    /// Progress of an operation this plugin started. Called on whatever
    /// instance is at hand, possibly after a host restart: derive the answer
    /// from the operation id and the cluster, not from memory.
    fn progress(operation_id: &str, _backup: &Backup) -> Result<Progress> {
        Err(Error::UnknownOperation(format!(
            "this plugin starts no operations (asked for {operation_id:?})"
        )))
    }

    /// Stops an operation this plugin started. Called once, on timeout.
    fn cancel(operation_id: &str, _backup: &Backup) -> Result<()> {
        Err(Error::UnknownOperation(format!(
            "this plugin starts no operations (asked to cancel {operation_id:?})"
        )))
    }
}

/// Item-block relations (contract 1.1.0, Velero's ItemBlockAction): which
/// items must be backed up in the same item block as a given one.
pub trait ItemBlockAction {
    /// Which items `get_related_items` is called for. Called once when the
    /// plugin is loaded.
    fn applies_to() -> Result<Selector>;

    /// The items that must be in the same block as `item`. The host skips
    /// (with a warning) an item that does not exist, and refuses the whole
    /// answer when an identifier has an empty resource or name or when the
    /// list is over its limit on related items.
    fn get_related_items(item: Item, backup: &Backup) -> Result<Vec<ResourceId>>;
}

/// Exports a type implementing [`ItemAction`] as the plugin's item action
/// (contract 1.0.0). Call it once per plugin crate, and only one of
/// `export!`, [`export_block_action!`] and [`export_both!`].
#[macro_export]
macro_rules! export {
    ($action:ty) => {
        const _: () = {
            type __IarPluginExport = $crate::Exported<$action>;
            $crate::bindings::__export_iar_plugin!(__IarPluginExport with_types_in $crate::bindings);
        };
    };
}

/// Exports a type implementing [`ItemBlockAction`] as the plugin's only
/// interface (contract 1.1.0, world `block-plugin`).
#[macro_export]
macro_rules! export_block_action {
    ($action:ty) => {
        const _: () = {
            type __IarBlockExport = $crate::ExportedBlock<$action>;
            $crate::bindings_block::__export_iar_block_plugin!(__IarBlockExport with_types_in $crate::bindings_block);
        };
    };
}

/// Exports a type implementing both [`ItemAction`] and [`ItemBlockAction`]
/// (contract 1.1.0, world `full-plugin`).
#[macro_export]
macro_rules! export_both {
    ($action:ty) => {
        const _: () = {
            type __IarActionExport = $crate::Exported<$action>;
            $crate::bindings_v1_1::__export_iar_plugin_v1_1!(__IarActionExport with_types_in $crate::bindings_v1_1);
            type __IarBlockExport = $crate::ExportedBlock<$action>;
            $crate::bindings_block::__export_iar_block_plugin!(__IarBlockExport with_types_in $crate::bindings_block);
        };
    };
}

/// Exports any combination of a backup item action, a block action and a
/// restore action (contract 1.3.0), each implemented by a type of the
/// plugin's, the same type or different ones:
///
/// ```ignore
/// iar_sdk::export_plugin!(item_action = Labels, restore_action = Labels);
/// ```
///
/// Use it instead of, not beside, [`export!`], [`export_block_action!`]
/// and [`export_both!`].
#[macro_export]
macro_rules! export_plugin {
    ($($kind:ident = $t:ty),+ $(,)?) => {
        $( $crate::__iar_export_part!($kind $t); )+
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __iar_export_part {
    (item_action $t:ty) => {
        const _: () = {
            type __IarActionExport = $crate::Exported<$t>;
            $crate::bindings_v1_3_action::__export_iar_action_v1_3!(__IarActionExport with_types_in $crate::bindings_v1_3_action);
        };
    };
    (block_action $t:ty) => {
        const _: () = {
            type __IarBlockExport = $crate::ExportedBlock<$t>;
            $crate::bindings_v1_3_block::__export_iar_block_v1_3!(__IarBlockExport with_types_in $crate::bindings_v1_3_block);
        };
    };
    (restore_action $t:ty) => {
        const _: () = {
            type __IarRestoreExport = $crate::ExportedRestore<$t>;
            $crate::bindings_v1_3_restore::__export_iar_restore_v1_3!(__IarRestoreExport with_types_in $crate::bindings_v1_3_restore);
        };
    };
}

/// Logs at trace level through the host log: `trace!("saw {}", name)`.
#[macro_export]
macro_rules! trace { ($($t:tt)*) => { $crate::log($crate::Level::Trace, &::std::format!($($t)*)) }; }
/// Logs at debug level through the host log.
#[macro_export]
macro_rules! debug { ($($t:tt)*) => { $crate::log($crate::Level::Debug, &::std::format!($($t)*)) }; }
/// Logs at info level through the host log.
#[macro_export]
macro_rules! info { ($($t:tt)*) => { $crate::log($crate::Level::Info, &::std::format!($($t)*)) }; }
/// Logs at warn level through the host log.
#[macro_export]
macro_rules! warn { ($($t:tt)*) => { $crate::log($crate::Level::Warn, &::std::format!($($t)*)) }; }
/// Logs at error level through the host log.
#[macro_export]
macro_rules! error { ($($t:tt)*) => { $crate::log($crate::Level::Error, &::std::format!($($t)*)) }; }
