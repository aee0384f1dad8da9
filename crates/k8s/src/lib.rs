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
pub mod restores;
pub mod schedules;
pub mod serve;
pub mod sweep;
pub mod version;
pub mod volume_backup;
pub mod volume_requests;
