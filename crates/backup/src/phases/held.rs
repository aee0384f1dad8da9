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

use super::PhaseError;
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

/// Takes the lease and starts its keeper.
pub(super) async fn take(
    store: &BackupStore,
    backup: &str,
    duration: Duration,
) -> Result<Held, LeaseError> {
    let lease = store.acquire_lease(backup, duration).await?;
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
            () = tokio::time::sleep(lease.renew_every()) => match lease.renew().await {
                Ok(()) => {}
                // Transient: retried until the lease expires.
                Err(LeaseError::Store(e)) => {
                    tracing::warn!("renewing a backup lease failed, will retry: {e}");
                }
                Err(gone) => {
                    let reason = match gone {
                        LeaseError::Lost { reason, .. } => reason,
                        other => other.to_string(),
                    };
                    let _ = lost.send(Some(reason));
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

#[cfg(test)]
mod tests {
    use super::super::{PhaseError, PhaseMachine, Settings, Step};

    use iar_core::store::BackupStore;
    use iar_core::store::lease::{LeaseError, LeaseRecord};
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    fn machine(store: &BackupStore, lease: Duration) -> PhaseMachine {
        let settings = Settings {
            lease_duration: lease,
            ..Settings::default()
        };
        PhaseMachine::new(
            Vec::new(),
            store.clone(),
            Arc::new(iar_core::NoCluster),
            settings,
        )
    }

    fn store() -> (tempfile::TempDir, BackupStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = BackupStore::open(dir.path().to_str().unwrap()).unwrap();
        (dir, store)
    }

    fn expires(lease: &LeaseRecord) -> SystemTime {
        humantime::parse_rfc3339(&lease.expires).unwrap()
    }

    /// A step that requeues keeps the lease, renewed past its duration
    /// with no step running, so that another replica is refused until the
    /// backup ends; the step that ends it gives the lease back.
    #[tokio::test]
    async fn a_driven_backup_keeps_its_lease_between_steps_until_it_ends() {
        let (_dir, store) = store();
        let lease = Duration::from_millis(600);
        let ours = machine(&store.clone().with_holder_name("a"), lease);
        let theirs = machine(&store.clone().with_holder_name("b"), lease);
        let requeue = || async { Ok(Step::Requeue(Duration::ZERO)) };
        ours.drive("b1", requeue()).await.unwrap();
        let first = expires(&store.current_lease("b1").await.unwrap().unwrap());
        // No step runs, and the keeper renews it: an expiry a whole
        // duration past the first is a renewal made once the first
        // duration had run out.
        let held = iar_tests::wait_for(
            "a renewal past the first duration",
            Duration::from_secs(30),
            || async {
                let held = store.current_lease("b1").await.unwrap().unwrap();
                if expires(&held) >= first + lease {
                    Ok(held)
                } else {
                    Err(format!("{held:?}"))
                }
            },
        )
        .await;
        assert!(held.holder.starts_with("a: ") && !held.released, "{held:?}");
        assert_eq!(held.generation, 1, "one take, renewed in place");
        match theirs.drive("b1", requeue()).await {
            Err(PhaseError::Lease(LeaseError::Held { holder, .. })) => {
                assert!(holder.starts_with("a: "), "{holder}")
            }
            other => panic!("another replica stepped a driven backup: {other:?}"),
        }
        assert_eq!(ours.tracked_backups().await, ["b1"]);
        // The next step reuses the kept lease (no new generation).
        ours.drive("b1", requeue()).await.unwrap();
        assert_eq!(
            store.current_lease("b1").await.unwrap().unwrap().generation,
            1
        );
        let object =
            crate::backup::object::BackupObject::new("b1", "ns", "u", serde_json::json!({}));
        ours.drive("b1", async { Ok(Step::Done(Box::new(object))) })
            .await
            .unwrap();
        assert!(store.current_lease("b1").await.unwrap().unwrap().released);
        assert!(ours.tracked_backups().await.is_empty());
    }

    /// A controller that stops (its kept leases abandoned) renews nothing
    /// more: the lease expires and another replica takes the backup over,
    /// as after a SIGKILL.
    #[tokio::test]
    async fn an_abandoned_lease_expires_and_is_taken_over() {
        let (_dir, store) = store();
        let lease = Duration::from_millis(400);
        let ours = machine(&store.clone().with_holder_name("a"), lease);
        let theirs = machine(&store.clone().with_holder_name("b"), lease);
        let requeue = || async { Ok(Step::Requeue(Duration::ZERO)) };
        ours.drive("b2", requeue()).await.unwrap();
        ours.abandon_kept_leases();
        // Nothing renews it any more, so it expires (a keeper still
        // renewing would keep it from ever doing so: the wait fails).
        iar_tests::wait_for("the lease to expire", Duration::from_secs(30), || async {
            let now = store.current_lease("b2").await.unwrap().unwrap();
            if expires(&now) < SystemTime::now() {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        })
        .await;
        theirs.drive("b2", requeue()).await.unwrap();
        let now = store.current_lease("b2").await.unwrap().unwrap();
        assert!(
            now.holder.starts_with("b: ") && now.generation == 2,
            "{now:?}"
        );
        // The first replica, coming back to it, is refused.
        assert!(matches!(
            ours.drive("b2", requeue()).await,
            Err(PhaseError::Lease(LeaseError::Held { .. }))
        ));
    }
}
