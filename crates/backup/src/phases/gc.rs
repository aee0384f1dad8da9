//! Garbage collection, as Velero's GC controller does it: a sweep over the
//! store deletes each backup whose `status.expiration` has passed and
//! that has ended. A backup still running waits until it ends, however
//! long expired; one stored without an expiration never goes.
//!
//! A deletion holds the backup's store lease, reads the object again
//! under it (another process may have changed it since the sweep looked),
//! writes it back in phase `Deleting`, deletes every other file, then the
//! object, and, once the lease is released, the lease's own files. Any
//! interruption leaves something a later sweep recognises and finishes: a
//! `Deleting` object, or a directory holding only a free lease.

use super::StatusSink;
use super::created::Created;
use super::errors::{GcFailure, PhaseError};
use super::leases::Leases;
use crate::backup::expiry::{self, ExpiryError};
use crate::backup::object::{BackupObject, BackupPhase};
use iar_core::clock::Clock;
use iar_core::store::delete::{KeyRole, key_role};
use iar_core::store::lease::LeaseError;
use iar_core::store::{BackupFile, BackupStore, StoreError};
use std::time::SystemTime;

/// A stored object whose `metadata.name` is not its directory's: what it
/// says of itself is not trusted to name a Backup resource.
pub const GC_FOREIGN_NAME: &str = "gc-foreign-name";

/// What a sweep did with one backup.
#[derive(Debug)]
pub struct Collected {
    pub name: String,
    pub outcome: Outcome,
}

#[derive(Debug)]
pub enum Outcome {
    /// Every file of it is gone. The object as the sweep found it (its
    /// phase before `Deleting`, unless it finished an earlier deletion),
    /// so a caller can say what went and tell which resource it was made
    /// for.
    Deleted(Box<BackupObject>),
    /// `--dry-run`: it would have been deleted.
    WouldDelete(Box<BackupObject>),
    /// No object, and a free lease: what a deletion stopped part way, or
    /// a first pass that never stored its object, left (files, what its
    /// plugins created, leases) is gone now.
    Tidied,
    Kept(Kept),
    /// Named with the reason; the sweep went on with the others.
    Failed(GcFailure),
}

/// Why a backup stays.
#[derive(Clone, Debug, PartialEq)]
pub enum Kept {
    /// Stored before iar had expiry.
    NoExpiration,
    /// Expires at this time (RFC 3339).
    NotYet(String),
    /// Expired or not, a backup that has not ended is never deleted.
    Running(BackupPhase),
    /// No `velero-backup.json`: a backup being created, or files iar did
    /// not write.
    NoObject,
    /// Its hook ledger owes unfreezes and this process runs no hooks
    /// (`iar gc` or `iar delete` without a cluster): a controller, which
    /// runs them first, deletes it.
    UnfreezeOwed,
}

/// What a deletion was asked for: a sweep deletes the backups that have
/// expired; `iar delete` (Velero's `backup delete`) one backup now, expired
/// or not. Neither deletes a backup that is still running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Expired,
    Asked,
}

fn why_kept_for(
    object: &BackupObject,
    now: SystemTime,
    reason: Reason,
) -> Result<Option<Kept>, ExpiryError> {
    match reason {
        Reason::Expired => why_kept(object, now),
        Reason::Asked if object.status.phase.is_running() => {
            Ok(Some(Kept::Running(object.status.phase)))
        }
        Reason::Asked => Ok(None),
    }
}

/// Whether a stored backup goes now. `Deleting` always does: a deletion
/// once begun is finished.
pub fn why_kept(object: &BackupObject, now: SystemTime) -> Result<Option<Kept>, ExpiryError> {
    let status = &object.status;
    if status.phase == BackupPhase::Deleting {
        return Ok(None);
    }
    if status.phase.is_running() {
        return Ok(Some(Kept::Running(status.phase)));
    }
    match expiry::expires_at(status)? {
        None => Ok(Some(Kept::NoExpiration)),
        Some(at) if at > now => Ok(Some(Kept::NotYet(
            status.expiration.clone().unwrap_or_default(),
        ))),
        Some(_) => Ok(None),
    }
}

/// The garbage collector's reconciler: the store, the lease it deletes
/// under, what the backups' plugins created.
pub(super) struct Gc<'a> {
    pub(super) store: &'a BackupStore,
    pub(super) leases: Leases<'a>,
    pub(super) created: Created<'a>,
    /// Told that a backup is `Deleting`.
    pub(super) status_sink: Option<&'a StatusSink>,
    /// "Now" for a deletion asked for ([`Gc::delete_backup`]).
    pub(super) clock: &'a dyn Clock,
    /// For the volume snapshots a backup holds in its namespaces'
    /// repositories.
    pub(super) repository_password: Option<&'a iar_repository::Password>,
    /// Runs the unfreezes a backup still owes before it goes.
    pub(super) blocks: super::blocks::Blocks<'a>,
}

impl Gc<'_> {
    /// One sweep over every backup in the store. Only listing the store
    /// can fail the sweep; each backup's own error is its outcome.
    pub async fn collect_garbage(
        &self,
        now: SystemTime,
        dry_run: bool,
    ) -> Result<Vec<Collected>, StoreError> {
        let mut collected = Vec::new();
        for name in self.store.list_backups().await? {
            let outcome = match self.collect(&name, now, dry_run).await {
                Ok(outcome) => outcome,
                Err(source) => Outcome::Failed(GcFailure {
                    name: name.clone(),
                    source,
                }),
            };
            collected.push(Collected { name, outcome });
        }
        Ok(collected)
    }

    /// Deletes one backup if it has expired (or finishes its deletion).
    pub async fn collect(
        &self,
        name: &str,
        now: SystemTime,
        dry_run: bool,
    ) -> Result<Outcome, PhaseError> {
        self.delete_for(name, now, dry_run, Reason::Expired).await
    }

    /// Deletes one backup now, expired or not, in the same crash-safe order
    /// as a sweep (`iar delete`, Velero's `backup delete`). A backup still
    /// running is kept ([`Kept::Running`]); a missing one is
    /// [`Kept::NoObject`].
    pub async fn delete_backup(&self, name: &str, dry_run: bool) -> Result<Outcome, PhaseError> {
        self.delete_for(name, self.clock.system_now(), dry_run, Reason::Asked)
            .await
    }

    async fn delete_for(
        &self,
        name: &str,
        now: SystemTime,
        dry_run: bool,
        reason: Reason,
    ) -> Result<Outcome, PhaseError> {
        // A first look without the lease: taking it writes to the store,
        // and most backups in a sweep stay.
        // No object: what an interrupted deletion left is finished, by a
        // sweep or by a deletion asked for (the backup half deleted is
        // still listed, and its name is what an operator asks to delete);
        // otherwise the backup is not there.
        let Some(object) = self.stored(name).await? else {
            return if dry_run {
                Ok(Outcome::Kept(Kept::NoObject))
            } else {
                self.tidy(name).await
            };
        };
        if let Some(kept) =
            why_kept_for(&object, now, reason).map_err(|e| PhaseError::invalid(name, e))?
        {
            if !dry_run && object.status.phase == BackupPhase::Failed {
                self.unfreeze_failed(name, &object).await?;
            }
            return Ok(Outcome::Kept(kept));
        }
        if dry_run {
            return Ok(Outcome::WouldDelete(Box::new(object)));
        }
        let (outcome, generation) = self
            .leases
            .with_lease(name, async {
                let generation = self.store.current_lease(name).await?.map(|l| l.generation);
                Ok::<_, PhaseError>((self.delete_files(name, now, reason).await?, generation))
            })
            .await?;
        // The lease was released above; its files go last, so that until
        // the object is gone no other process could take the backup.
        if let (Outcome::Deleted(_), Some(generation)) = (&outcome, generation)
            && let Err(e) = self.store.delete_leases_through(name, generation).await
        {
            tracing::warn!(backup = %name, "deleted, but its lease files stay until the next sweep: {e}");
        }
        Ok(outcome)
    }

    /// A Failed backup whose hook ledger still owes unfreezes has them
    /// run by the sweep, once each (claimed), under the backup's lease: a
    /// step's error (the API server out of reach as it read the pods
    /// owed their post hooks) ended it Failed before its blocks' post
    /// hooks ran, and the pods stayed frozen until its deletion, 30 days
    /// later by default (the fault campaign's seeds 3668, 3670, 3671 and
    /// 3837). The ledger is read first without the lease: most Failed
    /// backups owe nothing, and a lease is a store write.
    async fn unfreeze_failed(&self, name: &str, object: &BackupObject) -> Result<(), PhaseError> {
        let ledger: Vec<crate::backup::block_work::LedgerEntry> = self
            .store
            .get_json(name, BackupFile::HookLedger)
            .await?
            .unwrap_or_default();
        // Only what is owed, unsettled, to a pod that still exists: each
        // sweep would otherwise take the lease again for a pod gone.
        let mut runnable = false;
        for pod in crate::backup::block_work::BlockWork::owed_post_hooks(&ledger) {
            if !crate::backup::block_work::post_settled(self.store, name, &pod).await?
                && matches!(self.created.cluster.get_item_async(&pod).await, Ok(Some(_)))
            {
                runnable = true;
                break;
            }
        }
        if !runnable {
            return Ok(());
        }
        let ran = self
            .leases
            .with_lease(name, async {
                self.blocks.unfreeze_before_deletion(object).await.map(drop)
            })
            .await;
        match ran {
            // Another process holds it: it runs them, or this sweep's next.
            Err(PhaseError::Lease(LeaseError::Held { .. })) => Ok(()),
            other => other,
        }
    }

    async fn stored(&self, name: &str) -> Result<Option<BackupObject>, PhaseError> {
        Ok(self.store.get_json(name, BackupFile::Metadata).await?)
    }

    /// Under the lease: the object read again and judged again, marked
    /// `Deleting`, every other file deleted, the object last.
    async fn delete_files(
        &self,
        name: &str,
        now: SystemTime,
        reason: Reason,
    ) -> Result<Outcome, PhaseError> {
        let Some(found) = self.stored(name).await? else {
            return Ok(Outcome::Kept(Kept::NoObject));
        };
        if let Some(kept) =
            why_kept_for(&found, now, reason).map_err(|e| PhaseError::invalid(name, e))?
        {
            return Ok(Outcome::Kept(kept));
        }
        // Before anything changes: what its plugins created must be
        // reachable (a controller's backup, deleted from the command line).
        self.created.check_reachable(name, &found).await?;
        // Before anything changes: the unfreezes it owes run first (once,
        // claimed), or it stays for a process that can run them.
        if !self.blocks.unfreeze_before_deletion(&found).await? {
            tracing::warn!(backup = %name, "not deleted: its hook ledger owes unfreezes and this process runs no hooks; a controller deletes it (rule: hook-ledger)");
            return Ok(Outcome::Kept(Kept::UnfreezeOwed));
        }
        // Refused before anything changes when its volume snapshots could
        // not be forgotten.
        let snapshots = self.snapshot_namespaces(name).await?;
        if found.status.phase != BackupPhase::Deleting {
            let mut deleting = found.clone();
            deleting.status.phase = BackupPhase::Deleting;
            self.store
                .put_json(name, BackupFile::Metadata, &deleting)
                .await?;
            // The sink writes the status of the Backup resource the record
            // names; a record naming another than its own directory was
            // not written by iar for it, and tells no resource anything.
            if found.metadata.name != name {
                tracing::warn!(backup = %name, named = %found.metadata.name, rule = GC_FOREIGN_NAME,
                    "backup {name}'s stored object names backup {:?}: no Backup resource is told it is Deleting (rule: {GC_FOREIGN_NAME})", found.metadata.name);
            } else if let Some(sink) = self.status_sink {
                sink(&deleting);
            }
        }
        tracing::info!(backup = %name, expiration = ?found.status.expiration, ?reason, "deleting a backup");
        // Its resource's uid is recorded as collected before anything
        // goes: a controller that finds that resource (its status lost,
        // still New) and no backup must not start it again.
        if let Some(uid) = found
            .metadata
            .annotations
            .get(crate::backup::object::RESOURCE_UID_ANNOTATION)
        {
            self.store.put_collected(uid).await?;
        }
        // What its plugins created goes first: its record is among the
        // files deleted below.
        // Against the store's name for it and its uid: the labels the
        // host stamped when its plugins created them.
        self.created.delete(name, Some(&found.metadata.uid)).await?;
        // Its volume snapshots next, while its records still name them; a
        // forgotten snapshot's data goes at the repository's next prune.
        if let Some((namespaces, password)) = snapshots {
            self.forget_volume_snapshots(name, found.work_uid(), namespaces, password)
                .await?;
        }
        let keys = self.store.backup_keys(name).await?;
        for key in keys.iter().filter(|k| key_role(name, k) == KeyRole::Data) {
            self.store.delete_key(key).await?;
        }
        self.store
            .delete_key(&BackupFile::Metadata.key(name))
            .await?;
        Ok(Outcome::Deleted(Box::new(found)))
    }

    /// The namespaces whose repositories hold backup `name`'s volume
    /// snapshots, with the password to open them; `None` if there are
    /// none. Without a password, refused by rule: a deletion checks this
    /// before it changes anything, so the backup is kept whole.
    async fn snapshot_namespaces(
        &self,
        name: &str,
    ) -> Result<Option<(Vec<String>, iar_repository::Password)>, PhaseError> {
        use crate::backup::volumes::{get_volume_backups, parse_snapshot_key};
        let failed = |why: String| PhaseError::VolumeData {
            name: name.to_string(),
            why,
        };
        let records = get_volume_backups(self.store, name)
            .await
            .map_err(failed)?
            .unwrap_or_default();
        let mut namespaces: Vec<String> = records
            .iter()
            .filter_map(|r| r.manifest_key.as_deref().and_then(parse_snapshot_key))
            .map(|(ns, _)| ns.to_string())
            .collect();
        // A volume that did not complete may still have left a snapshot
        // (an agent killed after writing it, before reporting it): its
        // namespace's repository is searched too, by the backup's uid,
        // when there is a password to open it (the fault campaign found
        // such snapshots outliving their backup).
        if self.repository_password.is_some() {
            namespaces.extend(
                records
                    .iter()
                    .filter(|r| r.phase != crate::backup::volumes::VolumePhase::Completed)
                    .map(|r| r.pod_namespace.clone()),
            );
        }
        namespaces.sort();
        namespaces.dedup();
        // With a password every repository is searched too (see
        // `forget_volume_snapshots`); without one, only those named.
        if namespaces.is_empty() && self.repository_password.is_none() {
            return Ok(None);
        }
        let password = self.repository_password.cloned().ok_or_else(|| {
            failed(format!(
                "they are in the repositories of {} and no repository password was given (rule: repository-password)",
                namespaces.join(", ")
            ))
        })?;
        // Each repository opened now: a wrong password is refused while
        // the backup is still whole, not after what its plugins created
        // is gone.
        let (store, runtime, checked) = (
            self.store.clone(),
            tokio::runtime::Handle::current(),
            (namespaces.clone(), password.clone()),
        );
        tokio::task::spawn_blocking(move || {
            let (namespaces, password) = checked;
            for ns in namespaces {
                match iar_repository::VolumeRepository::open(&store, &ns, &password, &runtime) {
                    Ok(_) | Err(iar_repository::RepositoryError::Missing { .. }) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok(())
        })
        .await
        .map_err(|e| failed(e.to_string()))?
        .map_err(failed)?;
        Ok(Some((namespaces, password)))
    }

    /// Forgets backup `name`'s snapshots in the repositories of
    /// `namespaces` ([`Gc::snapshot_namespaces`]). Idempotent: a deletion
    /// that stopped after this step finds nothing more to forget.
    async fn forget_volume_snapshots(
        &self,
        name: &str,
        uid: &str,
        namespaces: Vec<String>,
        password: iar_repository::Password,
    ) -> Result<(), PhaseError> {
        let failed = |why: String| PhaseError::VolumeData {
            name: name.to_string(),
            why,
        };
        let (store, backup, uid, runtime) = (
            self.store.clone(),
            name.to_string(),
            uid.to_string(),
            tokio::runtime::Handle::current(),
        );
        tokio::task::spawn_blocking(move || {
            // Every repository, not only the ones its records name: an
            // agent killed after writing a snapshot and before reporting
            // it, or a controller that failed the backup before it
            // persisted its volume records, leaves a snapshot no record
            // names, and only its uid tag says whose it is (the fault
            // campaign found both). One that the password does not open
            // is not iar's to touch.
            let all = iar_repository::namespaces(&store, &runtime).map_err(|e| e.to_string())?;
            let searched: Vec<String> = all.into_iter().filter(|ns| !namespaces.contains(ns)).collect();
            let named = namespaces.len();
            for (i, ns) in namespaces.into_iter().chain(searched).enumerate() {
                let opened = iar_repository::VolumeRepository::open(&store, &ns, &password, &runtime);
                let repo = match opened {
                    Err(iar_repository::RepositoryError::Missing { .. }) => continue,
                    Err(e @ iar_repository::RepositoryError::WrongPassword { .. }) if i >= named => {
                        tracing::warn!(backup = %backup, "not searched for the backup's snapshots: {e}");
                        continue;
                    }
                    r => r.map_err(|e| e.to_string())?,
                };
                let forgotten = repo.forget(&backup, &uid).map_err(|e| e.to_string())?;
                tracing::info!(backup = %backup, repository = %repo.location(), forgotten, "forgot the backup's volume snapshots");
            }
            Ok::<_, String>(())
        })
        .await
        .map_err(|e| failed(e.to_string()))?
        .map_err(failed)
    }

    /// A backup directory with no object, whose lease is free (taking it
    /// proves that no process works on it): a deletion stopped before its
    /// last steps, or a first pass that never stored its object (cut off
    /// from the store) and ended. What it holds goes: the objects its
    /// plugins created first ([`super::created`], by name, the uid being
    /// unknown), then its files, its leases last. Only iar's own files of
    /// that backup are tidied: a directory holding anything else, or a
    /// hook ledger (its unfreezes are owed, and a controller's block work
    /// runs them: `still_stored`), is left.
    async fn tidy(&self, name: &str) -> Result<Outcome, PhaseError> {
        let keys = self.store.backup_keys(name).await?;
        // Hook claims a late run wrote after the files went are left over
        // too (the fault campaign's seeds 1212 and 1220).
        let claims = format!("backups/{name}/{name}-claims/");
        // Not the hook ledger: its unfreezes may be owed.
        let own_files: Vec<String> = [
            BackupFile::Contents,
            BackupFile::ItemOperations,
            BackupFile::Results,
            BackupFile::Logs,
            BackupFile::VolumeBackups,
            BackupFile::VolumeProgress,
            BackupFile::PluginSet,
            BackupFile::ResourceList,
            BackupFile::CreatedObjects,
        ]
        .iter()
        .map(|f| f.key(name))
        .collect();
        let leftover = |k: &String| {
            matches!(key_role(name, k), KeyRole::Lease(_))
                || k.starts_with(&claims)
                || own_files.contains(k)
        };
        if keys.is_empty() || !keys.iter().all(leftover) {
            return Ok(Outcome::Kept(Kept::NoObject));
        }
        let taken = self
            .leases
            .with_lease(name, async {
                // Created since the listing: a new backup of that name.
                if self.stored(name).await?.is_some() {
                    return Ok(None);
                }
                // Under the lease: what its plugins created, then its
                // files (the record of those objects among them). Its
                // origin unknown, a process with no live cluster tidies
                // only if every recorded object is in its own (manifest)
                // cluster: one it cannot see may be in a controller's, and
                // its record must not go before it does.
                if !self.created.cluster.is_live() {
                    for object in self.created.list(name).await? {
                        if !matches!(self.created.cluster.get_async(&object.id).await, Ok(Some(_))) {
                            tracing::warn!(backup = %name, object = %object.id, "not tidied: its plugins created objects this process cannot reach; iar delete {name} --cluster (or the controller's sweep) deletes them");
                            return Ok(None);
                        }
                    }
                }
                self.created.delete(name, None).await?;
                // The tarball first: with it, a process taking the
                // backup over resumes the wait for its volumes from the
                // records beside it, and a tidy cut short after those
                // records went would leave a backup that completes with
                // no volumes at all. Without it, the taker fails it.
                let mut keys = self.store.backup_keys(name).await?;
                let contents = BackupFile::Contents.key(name);
                keys.sort_by_key(|k| *k != contents);
                for key in keys {
                    if key.starts_with(&claims) || own_files.contains(&key) {
                        self.store.delete_key(&key).await?;
                    }
                }
                Ok::<_, PhaseError>(self.store.current_lease(name).await?.map(|l| l.generation))
            })
            .await;
        match taken {
            Ok(Some(generation)) => {
                self.store.delete_leases_through(name, generation).await?;
                Ok(Outcome::Tidied)
            }
            Ok(None) | Err(PhaseError::Lease(LeaseError::Held { .. })) => {
                Ok(Outcome::Kept(Kept::NoObject))
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests;
