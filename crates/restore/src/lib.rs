//! Restores by iar: a backup's objects back into a cluster, a live API
//! server or a directory of manifests, in Velero's order and with
//! Velero's resets, the restore actions of iar's plugins run in the
//! sandbox. `iar restore` drives it; docs/restores.md says what it does
//! and where it differs from Velero's restore.

pub mod archive;
mod engine;
pub mod order;
pub mod prepare;
pub mod results;
pub mod spec;

pub use engine::{Context, Outcome, run};

/// A uid for a restore that is not a resource (the command line's): made
/// from its name and start time, shaped as the API server's.
pub fn new_uid(name: &str, at: std::time::SystemTime) -> String {
    use sha2::{Digest, Sha256};
    let since = at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let h = hex::encode(&Sha256::digest(format!("{name}@{since}").as_bytes())[..16]);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}
