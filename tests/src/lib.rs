//! Shared support for iar's integration tests.
//!
//! [`artifacts`] names the guest components that `build.rs` builds from
//! source for `wasm32-wasip2` (profile `guest`): the example plugins under
//! `plugins/` and the test fixtures under `tests/guests/`. Each constant is
//! the absolute path of one `.wasm` component, named after its package
//! without the `iar-plugin-`/`iar-guest-` prefix (`LABELS`, `HOSTILE`, ...);
//! [`artifacts::ALL`] lists them all with their package names and
//! [`artifacts::SOURCES`] with their source directories.

/// Paths of the guest components built by `build.rs`.
pub mod artifacts {
    include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));
}

pub mod fixtures;
