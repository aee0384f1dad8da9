//! Tools for plugin authors: declarative tests of a plugin (`iar test`),
//! generic conformance checks (`iar conformance`), and the clusters they
//! run against. Everything runs through the real engine and boundary.

#![allow(clippy::result_large_err)]

pub mod build;
pub mod componentize;
pub mod conformance;
pub mod diff;
mod expect;
pub mod generate;
pub mod report;
mod restore_case;
pub mod runner;
pub mod scaffold;
pub mod scaffold_go;
mod steps;
pub mod stubs;
pub mod testfile;
