//! iar, the item action runtime: runs Kubernetes backup item actions
//! (Velero's BackupItemAction v2) as sandboxed WebAssembly components.
//!
//! Data flows one way: sources (files, a cluster) → [`plugin`] (the
//! host/guest boundary) → results. Nothing outside [`plugin`], [`engine`]
//! and [`sandbox`] knows wasm exists.

// Boundary errors carry the plugin, the item and the rule by design; they are
// returned off the hot path, so their size is not worth boxing.
#![allow(clippy::result_large_err)]

pub mod authoring;
pub mod backup;
pub mod cluster;
pub mod contract;
pub mod controller;
pub mod engine;
pub mod item;
pub mod item_scan;
pub mod k8s;
pub mod labels;
pub mod limits;
pub mod manifests;
pub mod metrics;
pub mod operations;
pub mod plugin;
pub mod resources;
pub mod sandbox;
pub mod selector;
pub mod settings_file;
pub mod store;

pub use cluster::{ClusterReader, ManifestCluster, NoCluster, ReadGrants};
pub use engine::{Allocation, Runtime, RuntimeConfig};
pub use item::{Item, ItemRef};
pub use limits::{Isolation, Limits};
pub use plugin::{
    BackupRef, CallError, LoadError, Phase, Plugin, PluginInstance, PluginSettings, Violation,
};
