//! Backups: the first pass over a cluster's items through the plugins
//! ([`backup`]), and the phase machine that drives a backup to its end
//! across restarts and replicas ([`phases`]).

#![allow(clippy::result_large_err)]

pub mod backup;
pub mod phases;
