//! All of the lease handling: taking a backup's store lease, renewing it
//! while work runs, keeping it between steps, giving it back.
//!
//! Backup leases a controller replica keeps between the steps of the
//! backups it drives. A backup waiting for its operations is stepped once
//! per sync period; were its lease given back after each step, any replica
//! could take the next one, and a backup would wander between replicas
//! (its poller's instances and its operations reloaded each time). Kept,
//! the lease says which replica drives the backup from its first step to
//! its last, and the others leave it alone until that replica stops
//! renewing (it died): then the first to find the lease expired takes the
//! backup over.
//!
//! Each kept lease has a keeper task that renews it every third of its
//! duration, steps or no steps, and gives it back when told to. A step
//! runs against the keeper's "lost" signal and is dropped where it stands
//! when the lease goes to another process.

use super::{PhaseError, Step};
use iar_core::store::BackupStore;
use iar_core::store::lease::{Lease, LeaseError};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// One kept lease, seen from the steps.
pub(super) struct Held {
    backup: String,
    /// Set once by the keeper when the lease went to another process (the
    /// reason); the keeper has ended then.
    lost: watch::Receiver<Option<String>>,
    /// Tells the keeper to give the lease back; dropped unsent, the keeper
    /// abandons the lease (it expires).
    give_back: oneshot::Sender<oneshot::Sender<Result<(), LeaseError>>>,
}

impl Held {
    pub(super) fn backup(&self) -> &str {
        &self.backup
    }

    pub(super) fn is_lost(&self) -> bool {
        self.lost.borrow().is_some()
    }

    fn lost_error(&self) -> Option<LeaseError> {
        self.lost.borrow().as_ref().map(|reason| LeaseError::Lost {
            backup: self.backup.clone(),
            reason: reason.clone(),
        })
    }

    /// Runs `work` for as long as the lease stays this process's; a loss
    /// drops it where it stands.
    pub(super) async fn run<T>(
        &self,
        work: impl Future<Output = Result<T, PhaseError>>,
    ) -> Result<T, PhaseError> {
        if let Some(lost) = self.lost_error() {
            return Err(PhaseError::Lease(lost));
        }
        let mut lost = self.lost.clone();
        tokio::select! {
            r = work => r,
            _ = lost.wait_for(Option::is_some) => Err(PhaseError::Lease(
                self.lost_error().expect("waited for the loss"),
            )),
        }
    }

    /// Gives the lease back (released in the store: free at once).
    pub(super) async fn give_back(self) -> Result<(), LeaseError> {
        if let Some(lost) = self.lost_error() {
            return Err(lost);
        }
        let (tx, rx) = oneshot::channel();
        let sent = self.give_back.send(tx);
        let ended = |reason: &str| LeaseError::Lost {
            backup: self.backup.clone(),
            reason: self.lost.borrow().clone().unwrap_or_else(|| reason.into()),
        };
        if sent.is_err() {
            return Err(ended("its keeper ended"));
        }
        rx.await
            .unwrap_or_else(|_| Err(ended("its keeper ended while giving it back")))
    }
}

/// Writes something every write prepared under an older lease generation
/// must conflict with, before the taker does anything (the cluster
/// controller: an annotation on the Backup resource, whose status writes
/// go over the version they read). Called with the backup and the new
/// generation.
pub type TakeoverFence = std::sync::Arc<
    dyn Fn(String, u64) -> futures::future::BoxFuture<'static, Result<(), String>> + Send + Sync,
>;

/// The takeover fence, and the backups whose lease this process took over
/// without fencing (it failed): fenced at their next take, whoever the
/// generation before was.
#[derive(Default)]
pub(super) struct Fencing {
    pub(super) fence: Option<TakeoverFence>,
    unfenced: Mutex<std::collections::HashSet<String>>,
}

impl Fencing {
    /// Fences `lease` of `backup` when it was taken from another process
    /// (or an earlier fence of it failed here). A failure leaves the lease
    /// to expire unreleased (whoever takes it next fences it) and is the
    /// take's error: nothing is done under a lease whose predecessor's
    /// writes may still land.
    async fn takeover(&self, backup: &str, lease: &Lease) -> Result<(), LeaseError> {
        let Some(fence) = &self.fence else {
            return Ok(());
        };
        let owed = self
            .unfenced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(backup);
        if lease.taken_from().is_none() && !owed {
            return Ok(());
        }
        // Bounded by a third of the lease, so that the keeper started
        // after it still renews in time.
        let bound = lease.time_left() / 3;
        let fenced = tokio::time::timeout(bound, fence(backup.to_string(), lease.generation()))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {bound:?}")));
        match fenced {
            Ok(()) => {
                self.unfenced
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(backup);
                Ok(())
            }
            Err(why) => {
                self.unfenced
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(backup.to_string());
                Err(LeaseError::Lost {
                    backup: backup.to_string(),
                    reason: format!(
                        "taken over (generation {}), but what the process before may still write could not be fenced off first: {why}; left to expire",
                        lease.generation()
                    ),
                })
            }
        }
    }
}

/// Takes the lease (fenced, when taken over) and starts its keeper.
pub(super) async fn take(
    store: &BackupStore,
    backup: &str,
    duration: Duration,
    fencing: &Fencing,
) -> Result<Held, LeaseError> {
    let lease = store.acquire_lease(backup, duration).await?;
    fencing.takeover(backup, &lease).await?;
    let (lost_tx, lost) = watch::channel(None);
    let (give_back, asked) = oneshot::channel();
    tokio::spawn(keep(lease, lost_tx, asked));
    Ok(Held {
        backup: backup.to_string(),
        lost,
        give_back,
    })
}

/// Renews `lease` until it is lost (said on `lost`), asked back (released,
/// and the result sent), or abandoned (the asking side dropped: the lease
/// is dropped unreleased and expires).
async fn keep(
    mut lease: Lease,
    lost: watch::Sender<Option<String>>,
    mut asked: oneshot::Receiver<oneshot::Sender<Result<(), LeaseError>>>,
) {
    loop {
        tokio::select! {
            answer = &mut asked => {
                if let Ok(answer) = answer {
                    let _ = answer.send(lease.release().await);
                }
                return;
            }
            // A renewal that has not ended when the lease does (a store
            // out of reach: a request may hang for longer than the lease)
            // is a loss: the work stops where it stands, as the process
            // taking over expects, instead of running on unfenced.
            () = tokio::time::sleep(lease.renew_every()) => match tokio::time::timeout(lease.time_left(), lease.renew()).await {
                Ok(Ok(())) => {}
                // Transient: retried until the lease expires.
                Ok(Err(LeaseError::Store(e))) => {
                    tracing::warn!("renewing a backup lease failed, will retry: {e}");
                }
                Ok(Err(gone)) => {
                    let reason = match gone {
                        LeaseError::Lost { reason, .. } => reason,
                        other => other.to_string(),
                    };
                    let _ = lost.send(Some(reason));
                    return;
                }
                Err(_) => {
                    let _ = lost.send(Some(format!(
                        "its renewal had not ended when it expired (the store out of reach for {:?})",
                        lease.duration()
                    )));
                    return;
                }
            },
        }
    }
}

/// The leases kept between steps, by backup. A step takes its backup's
/// entry out while it runs (kube-runtime never reconciles one object twice
/// at once, and the CLI drives one backup per call) and puts it back.
#[derive(Default)]
pub(super) struct Kept(Mutex<HashMap<String, Held>>);

impl Kept {
    pub(super) fn take(&self, backup: &str) -> Option<Held> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(backup)
    }

    pub(super) fn put(&self, held: Held) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(held.backup.clone(), held);
    }

    /// Lets every kept lease go unreleased (each expires): what a
    /// controller that stops does, so that no keeper renews for it after.
    pub(super) fn abandon_all(&self) {
        drop(self.take_all());
    }

    /// Every kept lease, taken out.
    pub(super) fn take_all(&self) -> Vec<Held> {
        let all = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        all.into_values().collect()
    }

    /// Whether backup `backup`'s kept lease was lost (false when none is
    /// kept).
    #[cfg(test)]
    pub(super) fn is_lost(&self, backup: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(backup)
            .is_some_and(Held::is_lost)
    }

    /// The backups whose leases are kept here, sorted.
    pub(super) fn backups(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }
}

/// The lease handling of the phases and the facade: a view over the store
/// and the leases kept between steps.
#[derive(Clone, Copy)]
pub(super) struct Leases<'a> {
    pub(super) store: &'a BackupStore,
    /// How long a lease lasts unrenewed (`Settings::lease_duration`).
    pub(super) duration: Duration,
    pub(super) kept: &'a Kept,
    /// The block work this machine runs: a backup's stops with its lease.
    pub(super) live: &'a super::live_blocks::LiveBlocks,
    pub(super) fencing: &'a Fencing,
}

impl Leases<'_> {
    /// Takes the backup's lease now (refused while another live process
    /// holds it).
    pub(super) async fn take(&self, name: &str) -> Result<Held, LeaseError> {
        take(self.store, name, self.duration, self.fencing).await
    }

    /// The backup's lease: the one this process keeps between steps, or
    /// taken now.
    pub(super) async fn kept_or_take(&self, name: &str) -> Result<Held, PhaseError> {
        if let Some(kept) = self.kept.take(name) {
            if !kept.is_lost() {
                return Ok(kept);
            }
            // Lost while kept between steps: another process drove the
            // backup meanwhile, and this machine's block work for it ran
            // under a lease no longer its own (its writes refused). It
            // stops, as after a loss during a step; a resume that waited
            // for it instead would record none of what it did (the fault
            // campaign's seed 4013: Completed with no volume records).
            self.live.abort_backup(name);
        }
        Ok(self.take(name).await?)
    }

    /// Runs `work` under a lease just taken, renewing it every third of
    /// its duration, and gives it back at the end. If the lease is lost
    /// (another process took it over after it expired) `work` is dropped
    /// where it stands and nothing more is written: the other process
    /// drives the backup now.
    pub(super) async fn leased<T>(
        &self,
        lease: Held,
        work: impl Future<Output = Result<T, PhaseError>>,
    ) -> Result<T, PhaseError> {
        let result = lease.run(work).await;
        self.finish(lease, result, false).await
    }

    /// Runs `work` on a backup under its lease (kept or taken here; renewed
    /// while `work` runs, given back after).
    pub(super) async fn with_lease<T>(
        &self,
        name: &str,
        work: impl Future<Output = Result<T, PhaseError>>,
    ) -> Result<T, PhaseError> {
        let lease = self.kept_or_take(name).await?;
        self.leased(lease, work).await
    }

    /// One step under the backup's lease, as [`Leases::with_lease`], except
    /// that a backup that goes on (a requeue) keeps its lease here for its
    /// next step.
    pub(super) async fn drive(
        &self,
        name: &str,
        step: impl Future<Output = Result<Step, PhaseError>>,
    ) -> Result<Step, PhaseError> {
        let lease = self.kept_or_take(name).await?;
        let result = lease.run(step).await;
        let keep = matches!(result, Ok(Step::Requeue(_)));
        self.finish(lease, result, keep).await
    }

    /// After work under `lease`: kept for the next step (`keep`), or given
    /// back. A lost lease is someone else's now, and is dropped; a failed
    /// give-back expires.
    async fn finish<T>(
        &self,
        lease: Held,
        result: Result<T, PhaseError>,
        keep: bool,
    ) -> Result<T, PhaseError> {
        if matches!(result, Err(PhaseError::Lease(_))) {
            // Whoever took the lease drives the backup now, its post hooks
            // included: this machine's block work for it stops, as its
            // process would (two replicas each running a pod's unfreeze
            // is what the ledger and the claims cannot see across
            // processes).
            self.live.abort_backup(lease.backup());
            return result;
        }
        if keep {
            self.kept.put(lease);
            return result;
        }
        match lease.give_back().await {
            Ok(()) => result,
            // Taken over while the work ran (a process paused past its
            // lease that then found the backup ended by its taker): the
            // work's success is not this process's.
            Err(lost @ LeaseError::Lost { .. }) if result.is_ok() => Err(PhaseError::Lease(lost)),
            Err(e) => {
                tracing::warn!("releasing a backup lease failed: {e}");
                result
            }
        }
    }

    /// Gives back every kept lease; returns their backups, for the caller
    /// to forget.
    pub(super) async fn give_back_kept(&self) -> Vec<String> {
        let mut names = Vec::new();
        for held in self.kept.take_all() {
            let name = held.backup().to_string();
            match held.give_back().await {
                Ok(()) => tracing::info!(backup = %name, "gave its lease back"),
                Err(e) => tracing::warn!(backup = %name, "giving its lease back: {e}"),
            }
            names.push(name);
        }
        names
    }
}

#[cfg(test)]
mod tests;
