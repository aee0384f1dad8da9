//! iar's ground floor: Kubernetes items and their names, selectors,
//! manifests, the backup store, async operations and the cluster reader.
//! Nothing here knows wasm, backups' phases or Kubernetes' client exists;
//! every other iar crate builds on this one.

// Errors name the item and the rule by design; they are returned off the
// hot path, so their size is not worth boxing.
#![allow(clippy::result_large_err)]

pub mod catalog;
pub mod clock;
pub mod cluster;
pub mod command;
pub mod duration;
pub mod identifier;
pub mod item;
pub mod item_scan;
pub mod manifests;
pub mod metrics;
pub mod names;
pub mod operations;
pub mod results;
pub mod select;
pub mod spool;
pub mod store;
pub mod tls;
pub mod yaml;

pub use cluster::{ClusterReader, ManifestCluster, NoCluster, ReadGrants};
pub use item::{Item, ItemRef, ItemRefFields};
