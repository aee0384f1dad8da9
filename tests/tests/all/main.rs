//! The iar-tests crate's integration tests, in one binary (one link, one
//! shared API server), one module per area. `perf_guard` is its own binary
//! (`tests/tests/perf_guard.rs`): it runs alone, in release.
//!
//! Run one area with a filter: `cargo test -p iar-tests --test all backups::`.

mod apiserver;
mod apiserver_plugins;
mod apiserver_plugins_access;
mod artifacts;
mod backups;
mod blocks;
mod cluster_changes;
mod cluster_writes;
mod concurrency;
mod contract_v1_4;
mod examples;
mod host_calls;
mod hostile;
mod isolation;
mod item_blocks_contract;
mod loading;
mod node;
mod restore_actions;
mod support;
