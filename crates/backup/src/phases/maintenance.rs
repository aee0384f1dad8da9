//! Volume repository maintenance: every namespace's repository pruned on
//! the leader's schedule (`--repository-maintenance-period`; Velero runs a
//! full maintenance weekly), so what forgotten snapshots held is given
//! back; first, the snapshots no stored backup owns are forgotten.
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
    /// The snapshots forgotten first because no stored backup owns them.
    pub orphans: Vec<String>,
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
            // Whose snapshots a stored backup owns: its uid and its
            // resource's, read after the snapshots were listed (a backup's
            // object is stored before any snapshot of it is written, so
            // one that started since is found). A backup that cannot be
            // read owns whatever names it: nothing is forgotten on doubt.
            // Only a backup found is remembered: one found missing is read
            // again for the next snapshot naming it.
            let found: std::cell::RefCell<std::collections::HashMap<String, Vec<String>>> =
                Default::default();
            let owns = |backup: &str, uid: &str| {
                if let Some(uids) = found.borrow().get(backup) {
                    return uids.iter().any(|u: &String| u == uid);
                }
                let read = runtime.block_on(store.get_json::<crate::backup::object::BackupObject>(
                    backup,
                    iar_core::store::BackupFile::Metadata,
                ));
                match read {
                    Ok(Some(o)) => {
                        let uids = vec![o.metadata.uid.clone(), o.work_uid().to_string()];
                        let owned = uids.iter().any(|u| u == uid);
                        found.borrow_mut().insert(backup.to_string(), uids);
                        owned
                    }
                    Ok(None) => false,
                    Err(_) => true,
                }
            };
            for namespace in namespaces {
                let mut orphans = Vec::new();
                // A snapshot whose backup is gone, or is another backup
                // now, is forgotten before the prune, which then gives its
                // data back.
                let outcome = VolumeRepository::open(&store, &namespace, &password, &runtime)
                    .and_then(|repo| {
                        orphans = repo.forget_orphans(owns)?;
                        if !orphans.is_empty() {
                            tracing::warn!(repository = %repo.location(), ?orphans, "forgot snapshots whose backup is gone");
                        }
                        repo.prune(false)
                    })
                    .map_err(|e| e.to_string());
                done.push(Maintained {
                    namespace,
                    orphans,
                    outcome,
                });
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
