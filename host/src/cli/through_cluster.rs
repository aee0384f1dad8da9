//! `--cluster` of `iar logs` and `iar describe`: a backup's (or
//! restore's) files read through the controller's DownloadRequests, as
//! Velero's CLI reads them, with no credentials for the bucket.

use super::backup::{cluster_client, tokio_runtime};
use iar::k8s::crd::Backup;
use iar::k8s::downloads::ThroughController;

#[derive(clap::Args, Clone, Debug)]
pub struct ThroughCluster {
    /// Read it through the controller in the cluster the environment
    /// reaches (a DownloadRequest, as Velero's CLI does), with no
    /// credentials for the store.
    #[arg(long)]
    pub(super) cluster: bool,
    /// The controller's namespace, with `--cluster`.
    #[arg(long, default_value = "iar-system", requires = "cluster")]
    pub(super) namespace: String,
}

/// One command's reads: one runtime, one client.
pub(super) struct Reader {
    runtime: tokio::runtime::Runtime,
    through: ThroughController,
}

impl ThroughCluster {
    pub(super) fn connect(&self) -> anyhow::Result<Reader> {
        let runtime = tokio_runtime()?;
        let client = cluster_client(&runtime)?;
        Ok(Reader {
            through: ThroughController::new(client, &self.namespace),
            runtime,
        })
    }
}

impl Reader {
    pub(super) fn namespace(&self) -> &str {
        self.through.namespace()
    }

    /// `kind` of `name`; `None` when the store has no such file.
    pub(super) fn fetch(&self, kind: &str, name: &str) -> anyhow::Result<Option<Vec<u8>>> {
        self.runtime
            .block_on(self.through.fetch(kind, name))
            .map_err(anyhow::Error::msg)
    }

    /// The Restore resource `name`, if there is one.
    pub(super) fn restore(&self, name: &str) -> anyhow::Result<Option<iar::k8s::crd::Restore>> {
        self.runtime
            .block_on(self.through.restore(name))
            .map_err(anyhow::Error::msg)
    }

    /// The Backup resource `name`, if there is one.
    pub(super) fn backup(&self, name: &str) -> anyhow::Result<Option<Backup>> {
        self.runtime
            .block_on(self.through.backup(name))
            .map_err(anyhow::Error::msg)
    }
}
