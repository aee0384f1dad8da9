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

mod export;
mod host;
mod item;
mod output;

pub use host::{cluster_get, config, log};
pub use item::{Backup, Item, Phase, ResourceId};
pub use output::{Error, Output, Progress, Result, Selector, Timestamp};
pub use serde_json::{self, Value, json};

#[doc(hidden)]
pub use export::Exported;

/// Generated bindings for the `iar:plugin@1.0.0` world. Plugin authors do
/// not need them; they are public only for [`export!`].
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "iar:plugin/plugin",
        pub_export_macro: true,
        export_macro_name: "__export_iar_plugin",
        default_bindings_module: "::iar_sdk::bindings",
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

/// Exports a type implementing [`ItemAction`] as the plugin's item action.
/// Call it once per plugin crate.
#[macro_export]
macro_rules! export {
    ($action:ty) => {
        const _: () = {
            type __IarPluginExport = $crate::Exported<$action>;
            $crate::bindings::__export_iar_plugin!(__IarPluginExport with_types_in $crate::bindings);
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
