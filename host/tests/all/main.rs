//! The host crate's integration tests, in one binary (one link, one shared
//! API server), one module per area.
//!
//! Run one area with a filter: `cargo test -p iar --test all controller::`.

mod block_hooks;
mod block_work;
mod cli;
mod cli_contract;
mod cli_mutate;
mod cli_plugin;
mod conformance;
mod controller;
mod csi;
mod downloads;
mod fault_leases;
mod fault_workload;
mod faults;
mod go_sdk;
mod iar_bench;
mod iar_new;
mod iar_test;
mod install_print;
mod live_bench;
mod log_bound;
mod node_agent;
mod node_agent_repository;
mod node_boundary;
mod pod_hooks;
mod pod_volume_restore;
mod polyglot;
mod real_node;
mod replicas;
mod restore;
mod schedules;
mod store_deadline;
mod support;
mod velero;
mod velero_bench;
mod velero_builtins;
mod velero_framework;
mod velero_plugin;
mod volume_repository;
