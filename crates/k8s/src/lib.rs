//! iar in Kubernetes: the Backup resource, live items, plugins from
//! ConfigMaps, the controller that reconciles Backups and restores
//! Restores.

#![allow(clippy::result_large_err)]

pub use kube::Client;

/// A client from the environment (in-cluster service account, or
/// `KUBECONFIG` / `~/.kube/config`).
pub async fn client() -> Result<kube::Client, kube::Error> {
    iar_core::tls::install_crypto();
    kube::Client::try_default().await
}

/// [`client`], with no read of an answer waiting longer than `patience`
/// for its next bytes (kube's default waits 295 s). For a process that
/// runs no exec (an exec's stream may be silent for as long as its
/// command) and whose watches end sooner than `patience`: a request lost
/// on a connection that a partition left half-open otherwise holds its
/// caller for five minutes.
pub async fn client_reading_within(
    patience: std::time::Duration,
) -> Result<kube::Client, kube::Error> {
    iar_core::tls::install_crypto();
    let mut config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    config.read_timeout = Some(patience);
    kube::Client::try_from(config)
}

pub mod controller;
pub mod crd;
pub mod downloads;
pub mod exec;
pub mod leader;
pub mod live;
pub mod node_agent;
pub mod plugins;
pub mod reach;
pub mod reconcile;
pub mod resource;
pub mod restore_agent;
pub mod restores;
pub mod schedules;
pub mod serve;
pub mod sweep;
pub mod version;
pub mod volume_backup;
pub mod volume_requests;
pub mod volume_restore;
pub mod volume_restorer;
