//! Volume repository maintenance: every namespace's repository pruned on
//! the leader's schedule (`--repository-maintenance-period`; Velero runs a
//! full maintenance weekly), so what forgotten snapshots held is given
//! back.
//!
//! Three guards keep a prune from taking a writer's data: restic's
//! exclusive lock on the repository (every writer, iar's or restic's,
//! holds a shared one, so it covers agent work that outlives its
//! backup's phase and a restic run by hand), a pass put off while any
//! backup runs, and rustic's two-phase prune, which only marks unused
//! packs and deletes them a day later unless a newer snapshot uses them
//! again.

use super::PhaseMachine;
use super::errors::PhaseError;
use iar_repository::{Pruned, VolumeRepository};

/// One repository's maintenance.
#[derive(Debug)]
pub struct Maintained {
    pub namespace: String,
    pub outcome: Result<Pruned, String>,
}

/// What a maintenance pass did.
#[derive(Debug)]
pub enum Maintenance {
    Done(Vec<Maintained>),
    /// Put off: this backup is running.
    Deferred {
        running: String,
    },
    /// No repository password is configured: no repository to maintain.
    NoPassword,
}

impl PhaseMachine {
    /// Prunes each namespace's volume repository, unless a backup runs.
    pub async fn maintain_repositories(&self) -> Result<Maintenance, PhaseError> {
        let Some(password) = self.settings.repository_password.clone() else {
            return Ok(Maintenance::NoPassword);
        };
        for name in self.store.list_backups().await? {
            let object: Option<crate::backup::object::BackupObject> = self
                .store
                .get_json(&name, iar_core::store::BackupFile::Metadata)
                .await?;
            if object.is_some_and(|o| o.status.phase.is_running()) {
                return Ok(Maintenance::Deferred { running: name });
            }
        }
        let (store, runtime) = (self.store.clone(), tokio::runtime::Handle::current());
        let done = tokio::task::spawn_blocking(move || {
            let namespaces =
                iar_repository::namespaces(&store, &runtime).map_err(|e| e.to_string())?;
            let mut done = Vec::new();
            for namespace in namespaces {
                let outcome = VolumeRepository::open(&store, &namespace, &password, &runtime)
                    .and_then(|repo| repo.prune(false))
                    .map_err(|e| e.to_string());
                done.push(Maintained { namespace, outcome });
            }
            Ok::<_, String>(done)
        })
        .await;
        match done {
            Ok(Ok(done)) => Ok(Maintenance::Done(done)),
            Ok(Err(why)) => Err(PhaseError::Maintenance(why)),
            Err(e) => Err(PhaseError::Maintenance(format!("it stopped: {e}"))),
        }
    }
}
