//! The host/guest boundary: the wasm runtime (wasmtime), the sandbox a
//! plugin runs in and its limits, the WIT contract's bindings, and the
//! plugin type every caller uses. Nothing outside this crate knows wasm
//! exists.

// Boundary errors carry the plugin, the item and the rule by design; they are
// returned off the hot path, so their size is not worth boxing.
#![allow(clippy::result_large_err)]

pub mod contract;
pub mod limits;
pub mod plugin;
pub mod runtime;
pub mod sandbox;

pub use limits::{Isolation, Limits};
pub use plugin::{
    BackupRef, CallError, LoadError, Phase, Plugin, PluginInstance, PluginSettings, Violation,
};
pub use runtime::{Allocation, Runtime, RuntimeConfig};
