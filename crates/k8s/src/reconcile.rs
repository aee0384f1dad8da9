//! Reconciling `backups.iar.dev` resources: each reconcile is one step of
//! the phase machine ([`PhaseMachine::step`]) under the backup's store lease;
//! polling is a requeue, not a sleeping loop. What to do is decided by
//! [`decide`] from the persisted backup and the resource's status alone,
//! so any replica can take over at any point.
//!
//! Every replica reconciles every Backup. The store lease decides who
//! drives each: the replica that takes it for a backup's first step keeps
//! it until the last ([`PhaseMachine::drive`]); the others find it held
//! and look again soon (`held_retry`), so a backup whose replica died is
//! taken over once its lease expires, and one whose replica stopped and
//! gave it back, at once. A replica takes a new backup only with a start
//! place free ([`PhaseMachine::claim_start`]), so new backups spread over
//! the replicas by how busy each is.
//!
//! Each Backup carries the finalizer [`FINALIZER`]: deleting the resource
//! of an unfinished backup cancels its operations and ends it Failed
//! ([`PhaseMachine::cancel`]) before the resource goes; its data stays.
//!
//! A finished backup's reconcile comes back at its expiration; an expired
//! backup is deleted from the store and its resource with it (the
//! leader's periodic sweep, `super::sweep`, does the same for every backup
//! in the store).

use super::crd::Backup;
use super::resource::{
    RESOURCE_UID_ANNOTATION, delete_with_uid, deleted, made_for, patch_status, replace_status,
};
use iar_backup::backup::expiry;
use iar_backup::backup::object::{BackupObject, BackupPhase, BackupStatus, is_iar_annotation};
use iar_backup::phases::gc::Outcome;
use iar_backup::phases::{BackupRequest, PhaseError, PhaseMachine, Step};
use iar_core::store::lease::LeaseError;
use iar_core::store::{BackupFile, StoreError};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{self, Event, finalizer};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The finalizer iar puts on every Backup it reconciles, so that it hears
/// of a deletion even while it is down: an unfinished backup is cancelled
/// before the resource goes.
pub const FINALIZER: &str = "iar.dev/backup";

/// What one reconcile does, decided from state alone.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// No backup in the store: create it and run its first pass.
    Start,
    /// Persisted and not finished: take the next step.
    Step,
    /// Finished, but the resource does not show it yet: copy the status.
    Mirror(Box<BackupStatus>),
    /// The resource says it ran, but the store has no such backup (another
    /// store, or deleted data): nothing is started again.
    Orphaned,
    /// The resource shows a backup that expired (or was being deleted)
    /// and the store has none: garbage collection deleted its data and
    /// the resource is left over; it is deleted.
    Collected,
    /// Stored, ended and expired, or being deleted: delete it from the
    /// store, then the resource.
    Expire,
    /// Finished and shown.
    Nothing,
}

pub fn decide(
    resource: Option<&BackupStatus>,
    stored: Option<&BackupObject>,
    now: SystemTime,
) -> Decision {
    // A malformed expiration is not expired here; the sweep reports it.
    let gone = |s: &BackupStatus| {
        s.phase == BackupPhase::Deleting
            || (s.phase.is_terminal() && expiry::expired(s, now).unwrap_or(false))
    };
    match stored {
        None => match resource {
            None => Decision::Start,
            Some(s) if s.phase == BackupPhase::New => Decision::Start,
            Some(s) if gone(s) => Decision::Collected,
            Some(_) => Decision::Orphaned,
        },
        Some(o) if gone(&o.status) => Decision::Expire,
        Some(o) if o.status.phase.is_terminal() => {
            if resource == Some(&o.status) {
                Decision::Nothing
            } else {
                Decision::Mirror(Box::new(o.status.clone()))
            }
        }
        Some(_) => Decision::Step,
    }
}

/// Why a reconcile failed; kube-runtime retries after [`error_policy`].
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("backup {name}: reading the store: {source}")]
    Store {
        name: String,
        #[source]
        source: StoreError,
    },
    #[error(transparent)]
    Backup(#[from] PhaseError),
    #[error("backup {name}: writing its status: {source}")]
    Status {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("backup {name}: expired; deleting its Backup resource: {source}")]
    Delete {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("backup {name}: {what} the finalizer {FINALIZER}: {source}")]
    Finalizer {
        name: String,
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    /// What the finalizer helper says cannot happen (an object without a
    /// name, a finalizer path it cannot build).
    #[error("backup {name}: {reason}")]
    FinalizerHelper { name: String, reason: String },
}

impl ReconcileError {
    /// The finalizer helper's error, with the reconcile's own errors as
    /// they were (not wrapped in "failed to apply object").
    fn from_finalizer(name: &str, e: finalizer::Error<ReconcileError>) -> Self {
        use finalizer::Error as E;
        let (what, source) = match e {
            E::ApplyFailed(e) | E::CleanupFailed(e) => return e,
            E::AddFinalizer(source) => ("adding", source),
            E::RemoveFinalizer(source) => ("removing", source),
            e @ (E::UnnamedObject | E::InvalidFinalizer) => {
                return ReconcileError::FinalizerHelper {
                    name: name.to_string(),
                    reason: e.to_string(),
                };
            }
        };
        ReconcileError::Finalizer {
            name: name.to_string(),
            what,
            source,
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    pub controller: Arc<PhaseMachine>,
    pub api: Api<Backup>,
    /// When each waiting backup was last polled: a reconcile triggered by
    /// a status change does not poll again before the sync period is up.
    last_poll: Mutex<HashMap<String, Instant>>,
}

impl Context {
    pub fn new(controller: Arc<PhaseMachine>, api: Api<Backup>) -> Self {
        Context {
            controller,
            api,
            last_poll: Mutex::new(HashMap::new()),
        }
    }

    fn not_before(&self, name: &str) -> Option<Duration> {
        let last = self.last_poll.lock().unwrap_or_else(|p| p.into_inner());
        let period = self.controller.settings.sync_period;
        last.get(name)
            .map(|t| period.saturating_sub(t.elapsed()))
            .filter(|d| !d.is_zero())
    }

    fn polled(&self, name: &str, done: bool) {
        let mut last = self.last_poll.lock().unwrap_or_else(|p| p.into_inner());
        if done {
            last.remove(name);
        } else {
            last.insert(name.to_string(), Instant::now());
        }
    }
}

/// One reconcile: a Backup without the finalizer gets it first (and is
/// reconciled again by that change); a deleted one is cleaned up.
pub async fn reconcile(backup: Arc<Backup>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let name = backup.name_any();
    let outcome = finalizer(&ctx.api, FINALIZER, backup, |event| async {
        match event {
            Event::Apply(backup) => apply(backup, &ctx).await,
            Event::Cleanup(backup) => cleanup(backup, &ctx).await,
        }
    })
    .await;
    finalizer_outcome(&name, outcome)
}

/// The finalizer helper's result. A resource that is already gone when
/// its finalizer is removed (another replica removed it, or the delete
/// completed meanwhile) is the end that was wanted, not an error: nothing
/// is left to reconcile.
fn finalizer_outcome(
    name: &str,
    outcome: Result<Action, finalizer::Error<ReconcileError>>,
) -> Result<Action, ReconcileError> {
    match outcome {
        Err(finalizer::Error::RemoveFinalizer(kube::Error::Api(status))) if status.code == 404 => {
            tracing::debug!(backup = %name, "the resource was gone when its finalizer was removed");
            Ok(Action::await_change())
        }
        outcome => outcome.map_err(|e| ReconcileError::from_finalizer(name, e)),
    }
}

/// A deleted Backup: if its backup is unfinished (and was made for this
/// resource, not for an earlier one of the same name), its operations are
/// cancelled and it ends Failed, under its lease; the finalizer is removed
/// only when that is persisted. Its data stays in the store either way.
async fn cleanup(backup: Arc<Backup>, ctx: &Context) -> Result<Action, ReconcileError> {
    let name = backup.name_any();
    let c = &ctx.controller;
    let mut stored = read_stored(c, &name).await?;
    let uid = backup.uid();
    if stored.is_none() {
        // Not in the store yet, or being created now: a first pass holds
        // the backup's lease while it creates it. While a live lease
        // stands, the cleanup waits (a Held error keeps the finalizer and
        // it is tried again); reading again, a backup created meanwhile
        // is cancelled too
        // (the fault campaign's seed 2031: a resource deleted as its first
        // pass began was gone, its backup still running).
        // Read, not taken: taking it would leave lease files for a
        // backup that never was.
        let lease = c
            .store
            .current_lease(&name)
            .await
            .map_err(|source| ReconcileError::Store {
                name: name.clone(),
                source,
            })?;
        if let Some(lease) = lease {
            let live = !lease.released
                && humantime::parse_rfc3339(&lease.expires).is_ok_and(|at| at > SystemTime::now());
            if live {
                return Err(ReconcileError::Backup(PhaseError::Lease(
                    LeaseError::Held {
                        backup: name.clone(),
                        holder: lease.holder,
                        expires: lease.expires,
                    },
                )));
            }
        }
        stored = read_stored(c, &name).await?;
    }
    if let Some(o) = stored.filter(|o| o.status.phase.is_running() && made_for(o, uid.as_deref())) {
        // An error keeps the finalizer: the cleanup is tried again (a
        // lease another process holds included).
        end_deleted(
            c,
            &name,
            &backup.namespace().unwrap_or_default(),
            o.status.phase,
        )
        .await?;
    }
    ctx.polled(&name, true);
    Ok(Action::await_change())
}

/// Ends a running backup whose Backup resource was deleted: its volume
/// backups and operations cancelled, Failed with the reason, under its
/// lease (a lease another process holds is [`LeaseError::Held`]: that
/// process sees the resource gone itself). What it wrote is kept.
pub(super) async fn end_deleted(
    c: &PhaseMachine,
    name: &str,
    namespace: &str,
    phase: BackupPhase,
) -> Result<(), PhaseError> {
    let reason = format!(
        "the Backup resource {namespace}/{name} was deleted while the backup was {phase}: its operations were cancelled; what it wrote is kept"
    );
    // Its volume backups stop first, and without the lease: the process
    // running the backup may be waiting for them (holding the lease), and
    // would otherwise wait for the whole volume.
    c.cancel_volume_backups(name).await;
    let canceled = c.with_lease(name, c.cancel(name, &reason)).await;
    c.release(name).await;
    canceled.map(|_| ())
}

/// [`patch_status`] as a reconcile's error, naming the Backup.
async fn write_status(
    ctx: &Context,
    name: &str,
    status: &BackupStatus,
) -> Result<(), ReconcileError> {
    patch_status(&ctx.api, name, None, status)
        .await
        .map_err(|source| ReconcileError::Status {
            name: name.to_string(),
            source,
        })
}

async fn read_stored(c: &PhaseMachine, name: &str) -> Result<Option<BackupObject>, ReconcileError> {
    c.store
        .get_json(name, BackupFile::Metadata)
        .await
        .map_err(|source| ReconcileError::Store {
            name: name.to_string(),
            source,
        })
}

async fn apply(backup: Arc<Backup>, ctx: &Context) -> Result<Action, ReconcileError> {
    let name = backup.name_any();
    let c = &ctx.controller;
    let stored = read_stored(c, &name).await?;
    let now = SystemTime::now();
    let mut decision = decide(backup.status.as_ref(), stored.as_ref(), now);
    // No backup in the store and a status that never left New: started
    // already, finished and collected (its status writes lost, the fault
    // campaign's seed 1029 froze the pod a second time), or never. One
    // whose status stayed running while the store's ended (a status
    // write lost to an API server restart) and whose backup then expired
    // and was collected is that resource's leftover too: without this it
    // stayed InProgress for good (seed 1404).
    if matches!(decision, Decision::Start | Decision::Orphaned)
        && let Some(uid) = backup.uid()
        && c.store
            .was_collected(&uid)
            .await
            .map_err(|source| ReconcileError::Store {
                name: name.clone(),
                source,
            })?
    {
        decision = Decision::Collected;
    }
    match decision {
        Decision::Start => {
            let request = BackupRequest {
                labels: backup.labels().clone(),
                name: name.clone(),
                namespace: backup.namespace().unwrap_or_default(),
                spec: backup.spec.to_value(),
                // Items come from the live cluster.
                sources: Vec::new(),
                annotations: recorded_annotations(&backup),
            };
            // A request that can never run (a name too long for the store,
            // a spec that does not parse) ends Failed on the resource at
            // once, with the reason: there is no backup in the store to
            // fail, and a retry every few seconds would fail the same way.
            if let Err(e) = c.validate(&request) {
                tracing::warn!(backup = %name, "refused: {e}");
                let status = BackupStatus {
                    phase: BackupPhase::Failed,
                    failure_reason: e.to_string(),
                    completion_timestamp: Some(iar_backup::backup::object::rfc3339(now)),
                    ..BackupStatus::default()
                };
                write_status(ctx, &name, &status).await?;
                return Ok(Action::await_change());
            }
            // Every replica sees the new Backup; one busy with as many
            // first passes as it may run leaves it to the others (and
            // looks again shortly, in case there are none).
            let Some(_claim) = c.claim_start() else {
                return Ok(Action::requeue(busy_retry(&name)));
            };
            let stepped = c
                .drive(&name, async {
                    // Read afresh under the lease, not from the watch's
                    // cache: a Backup deleted while this reconcile waited
                    // (for the store, for a start slot) is not started
                    // (the fault campaign's seed 4218: a first pass that
                    // ran its pod's hooks ten seconds after its resource
                    // was deleted, the store out of reach meanwhile).
                    if withdrawn(&ctx.api, &name, backup.uid()).await {
                        return Err(PhaseError::Withdrawn(name.clone()));
                    }
                    c.start(request).await?;
                    c.step(&name).await
                })
                .await;
            after_step(ctx, &name, stepped).await
        }
        Decision::Step => {
            if let Some(wait) = ctx.not_before(&name) {
                return Ok(Action::requeue(wait));
            }
            let stepped = c.drive(&name, c.step(&name)).await;
            after_step(ctx, &name, stepped).await
        }
        Decision::Mirror(status) => {
            // Under the backup's lease, as every other write of it (a
            // replica that lost the backup writes nothing of it), and in
            // full: the status becomes the stored one, not a merge of it
            // that differs again at the next reconcile.
            let mut written = None;
            let leased = c
                .with_lease(&name, async {
                    written = Some(
                        replace_status(
                            &ctx.api,
                            &name,
                            backup.metadata.resource_version.as_deref(),
                            backup.status.as_ref(),
                            &status,
                        )
                        .await,
                    );
                    Ok(())
                })
                .await;
            match (leased, written) {
                (Ok(()), Some(Ok(()))) => Ok(until_expiry(c, &status, now)),
                // Written since it was read (a takeover's fence, another
                // status): the next reconcile reads it again.
                (Ok(()), Some(Err(kube::Error::Api(e)))) if e.code == 409 => {
                    Ok(Action::requeue(Duration::from_secs(1)))
                }
                (Ok(()), Some(Err(source))) => Err(ReconcileError::Status {
                    name: name.clone(),
                    source,
                }),
                // Driven by another process: it writes the status.
                (Err(PhaseError::Lease(LeaseError::Held { .. })), _) => {
                    Ok(Action::requeue(held_retry(c)))
                }
                (Err(e), _) => Err(e.into()),
                (Ok(()), None) => Ok(Action::await_change()),
            }
        }
        Decision::Orphaned => {
            tracing::warn!(backup = %name, "the resource has a status but the store has no such backup; leaving it");
            Ok(Action::await_change())
        }
        Decision::Collected => {
            tracing::info!(backup = %name, "expired and no longer in the store: deleting the resource");
            delete_with_uid(&ctx.api, &name, backup.uid())
                .await
                .map_err(|source| ReconcileError::Delete {
                    name: name.clone(),
                    source,
                })?;
            Ok(Action::await_change())
        }
        Decision::Expire => match stored {
            Some(o) if made_for(&o, backup.uid().as_deref()) => expire(ctx, &name, now).await,
            // An earlier resource's backup: the sweep deletes it.
            _ => Ok(Action::await_change()),
        },
        Decision::Nothing => {
            Ok(stored.map_or_else(Action::await_change, |o| until_expiry(c, &o.status, now)))
        }
    }
}

/// When a replica looks again at a backup another one drives: within a
/// third of a lease duration (to take it over once the lease expires), and
/// within a sync period (at least a second), so that a lease given back by
/// a replica that stopped is taken up at once even when leases are long.
fn held_retry(c: &PhaseMachine) -> Duration {
    (c.settings.lease_duration / 3).min(c.settings.sync_period.max(Duration::from_secs(1)))
}

/// When a busy replica looks at a new backup again: soon, and spread by
/// the name so that backups refused together do not come back together.
/// The spread is only a requeue delay in this process, never written or
/// compared with another process's, so `DefaultHasher` (not stable across
/// Rust releases) is enough.
fn busy_retry(name: &str) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    Duration::from_millis(500 + h.finish() % 500)
}

/// A finished backup comes back at its expiration (at the latest after a
/// gc period, so that no requeue is years long).
fn until_expiry(c: &PhaseMachine, status: &BackupStatus, now: SystemTime) -> Action {
    match expiry::expires_at(status) {
        Ok(Some(at)) => Action::requeue(
            at.duration_since(now)
                .unwrap_or_default()
                .min(c.settings.gc_period),
        ),
        _ => Action::await_change(),
    }
}

/// Deletes an expired backup from the store, then its resource.
async fn expire(ctx: &Context, name: &str, now: SystemTime) -> Result<Action, ReconcileError> {
    let c = &ctx.controller;
    match c.collect(name, now, false).await {
        Ok(Outcome::Deleted(object)) => {
            deleted(&ctx.api, &object)
                .await
                .map_err(|source| ReconcileError::Delete {
                    name: name.into(),
                    source,
                })?;
            Ok(Action::await_change())
        }
        // Changed since it was read (or a clock between them): look again.
        Ok(_) => Ok(Action::requeue(c.settings.sync_period)),
        // The sweep (or another process) is deleting it now.
        Err(PhaseError::Lease(LeaseError::Held { .. })) => {
            Ok(Action::requeue(c.settings.lease_duration / 3))
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether Backup `name` (of uid `uid`) is gone or being deleted, read
/// from the API server now. An answer it cannot give is not a deletion:
/// the first pass goes on, as it would have before this read.
async fn withdrawn(api: &Api<Backup>, name: &str, uid: Option<String>) -> bool {
    match api.get_opt(name).await {
        Ok(Some(b)) => b.metadata.deletion_timestamp.is_some() || b.uid() != uid,
        Ok(None) => true,
        Err(e) => {
            tracing::debug!(backup = %name, "reading the resource before its first pass: {e}");
            false
        }
    }
}

async fn after_step(
    ctx: &Context,
    name: &str,
    stepped: Result<Step, PhaseError>,
) -> Result<Action, ReconcileError> {
    let c = &ctx.controller;
    match stepped {
        Ok(Step::Requeue(after)) => {
            ctx.polled(name, false);
            Ok(Action::requeue(after))
        }
        Ok(Step::Done(object)) => {
            ctx.polled(name, true);
            // The terminal status at once, but only as the lease's holder
            // may: over the resource version read while this process still
            // held the lease, and not once another took it (run 30's seed
            // 5374: written after the release, unconditionally, it landed 7 s
            // after another replica had taken the backup). A taker fences
            // the resource before any step, so this write, held up past the
            // release, conflicts rather than lands.
            let version = match c.store.fence_generation(name) {
                Some(made_under) => {
                    super::resource::fenced_version(&ctx.api, &c.store, name, made_under).await
                }
                // No lease of this process on it: nothing to fence by.
                None => Ok(None),
            };
            c.release(name).await;
            let version = match version {
                Ok(version) => version,
                // Taken over (its holder writes it), or not readable now:
                // the next reconcile mirrors the stored status, under the
                // lease.
                Err(why) => {
                    tracing::debug!(backup = %name, "status {} not written: {why}", object.status.phase);
                    return Ok(Action::requeue(Duration::from_secs(1)));
                }
            };
            match patch_status(&ctx.api, name, version.as_deref(), &object.status).await {
                Ok(()) => Ok(Action::await_change()),
                // Written since it was read (a takeover's fence): the next
                // reconcile mirrors the stored status under the lease.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    Ok(Action::requeue(Duration::from_secs(1)))
                }
                Err(source) => Err(ReconcileError::Status {
                    name: name.to_string(),
                    source,
                }),
            }
        }
        Err(PhaseError::Withdrawn(_)) => {
            tracing::info!(backup = %name, "not started: its Backup resource was deleted first");
            c.release(name).await;
            Ok(Action::await_change())
        }
        // Another replica drives it (or one that died, whose lease in
        // the store has not expired yet): look again, to take it over
        // once that replica is gone.
        Err(PhaseError::Lease(LeaseError::Held { .. })) => {
            c.release(name).await;
            Ok(Action::requeue(held_retry(c)))
        }
        Err(e) => {
            ctx.polled(name, true);
            c.release(name).await;
            Err(e.into())
        }
    }
}

pub fn error_policy(backup: Arc<Backup>, error: &ReconcileError, _ctx: Arc<Context>) -> Action {
    tracing::error!(backup = %backup.name_any(), "reconcile failed: {error}");
    Action::requeue(Duration::from_secs(5))
}

/// The Backup resource's annotations as its stored object keeps them (what
/// a plugin reading the whole Backup sees, as Velero sends them), and the
/// resource's uid. None of iar's own (`iar.dev/`): the stored object's
/// `iar.dev/plugin-config` and `iar.dev/item-sources` are what `iar resume`
/// acts on, which a user's annotation must not set.
fn recorded_annotations(backup: &Backup) -> BTreeMap<String, String> {
    let mut annotations: BTreeMap<String, String> = backup
        .annotations()
        .iter()
        .filter(|(key, _)| !is_iar_annotation(key))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    if let Some(uid) = backup.uid() {
        annotations.insert(RESOURCE_UID_ANNOTATION.to_string(), uid);
    }
    annotations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn stored(phase: BackupPhase) -> BackupObject {
        let mut o = BackupObject::new("b", "iar", "u", serde_json::json!({}));
        o.status.phase = phase;
        o
    }

    /// What a step does in each persisted phase (the CLI and the
    /// controller share it).
    #[test]
    fn each_phase_has_one_plan() {
        use BackupPhase::*;
        use iar_backup::phases::{Plan, plan};
        let table = [
            (New, Plan::FailInterrupted),
            (InProgress, Plan::FailInterrupted),
            (WaitingForPluginOperations, Plan::Poll),
            (WaitingForPluginOperationsPartiallyFailed, Plan::Poll),
            (Finalizing, Plan::Finalize),
            (FinalizingPartiallyFailed, Plan::Finalize),
            (Completed, Plan::Nothing),
            (PartiallyFailed, Plan::Nothing),
            (Failed, Plan::Nothing),
            (Deleting, Plan::Nothing),
        ];
        for (phase, expected) in table {
            assert_eq!(plan(phase), expected, "{phase}");
        }
    }

    /// A Backup's own labels and annotations reach the stored object (and
    /// a plugin reading the whole Backup); an `iar.dev/` annotation set by
    /// the user, which would steer `iar resume`, does not.
    #[test]
    fn the_resources_labels_and_annotations_are_kept_but_not_iars_own() {
        let backup: Backup = serde_json::from_value(serde_json::json!({
            "apiVersion": "iar.dev/v1", "kind": "Backup",
            "metadata": {"name": "b", "namespace": "iar", "uid": "uid-1",
                "labels": {"team": "payments"},
                "annotations": {"note": "before the release",
                    "iar.dev/plugin-config": "{\"evil\":{\"labels\":\"x=y\"}}",
                    "iar.dev/item-sources": "[\"/etc\"]"}},
            "spec": {}
        }))
        .unwrap();
        let kept = recorded_annotations(&backup);
        assert_eq!(
            kept,
            BTreeMap::from([
                ("note".to_string(), "before the release".to_string()),
                (RESOURCE_UID_ANNOTATION.to_string(), "uid-1".to_string()),
            ])
        );
    }

    #[test]
    fn a_deleted_resource_cancels_only_the_backup_made_for_it() {
        let mut o = stored(BackupPhase::WaitingForPluginOperations);
        assert!(made_for(&o, Some("uid-1")), "no record: taken as its own");
        o.metadata
            .annotations
            .insert(RESOURCE_UID_ANNOTATION.into(), "uid-1".into());
        assert!(made_for(&o, Some("uid-1")));
        assert!(!made_for(&o, Some("uid-2")), "an earlier resource's backup");
        assert!(!made_for(&o, None));
    }

    #[test]
    fn a_new_resource_starts_a_backup() {
        assert_eq!(decide(None, None, now()), Decision::Start);
        let new = BackupStatus::default();
        assert_eq!(decide(Some(&new), None, now()), Decision::Start);
    }

    #[test]
    fn every_unfinished_persisted_phase_is_stepped() {
        for phase in [
            BackupPhase::New,
            BackupPhase::InProgress,
            BackupPhase::WaitingForPluginOperations,
            BackupPhase::WaitingForPluginOperationsPartiallyFailed,
            BackupPhase::Finalizing,
            BackupPhase::FinalizingPartiallyFailed,
        ] {
            // Whatever the resource shows: the store decides.
            assert_eq!(
                decide(None, Some(&stored(phase)), now()),
                Decision::Step,
                "{phase}"
            );
            let shown = stored(BackupPhase::Completed).status;
            assert_eq!(
                decide(Some(&shown), Some(&stored(phase)), now()),
                Decision::Step
            );
        }
    }

    #[test]
    fn a_finished_backup_is_mirrored_once() {
        let done = stored(BackupPhase::PartiallyFailed);
        let stale = stored(BackupPhase::WaitingForPluginOperations).status;
        assert_eq!(
            decide(Some(&stale), Some(&done), now()),
            Decision::Mirror(Box::new(done.status.clone()))
        );
        assert_eq!(
            decide(Some(&done.status), Some(&done), now()),
            Decision::Nothing
        );
    }

    #[test]
    fn a_resource_that_ran_elsewhere_is_not_started_again() {
        let ran = stored(BackupPhase::Completed).status;
        assert_eq!(decide(Some(&ran), None, now()), Decision::Orphaned);
        let waiting = stored(BackupPhase::WaitingForPluginOperations).status;
        assert_eq!(decide(Some(&waiting), None, now()), Decision::Orphaned);
    }

    fn expiring(phase: BackupPhase, at: SystemTime) -> BackupObject {
        let mut o = stored(phase);
        o.status.expiration = Some(iar_backup::backup::object::rfc3339(at));
        o
    }

    /// An ended backup past its expiration is deleted (data, then the
    /// resource); one not yet expired, still running, or without an
    /// expiration is not.
    #[test]
    fn an_expired_backup_that_ended_is_expired() {
        let hour = Duration::from_secs(3600);
        let past = now() - hour;
        for phase in [
            BackupPhase::Completed,
            BackupPhase::PartiallyFailed,
            BackupPhase::Failed,
        ] {
            let o = expiring(phase, past);
            assert_eq!(decide(Some(&o.status), Some(&o), now()), Decision::Expire);
            assert_eq!(decide(None, Some(&o), now()), Decision::Expire);
            let fresh = expiring(phase, now() + hour);
            assert_eq!(
                decide(Some(&fresh.status), Some(&fresh), now()),
                Decision::Nothing
            );
        }
        let running = expiring(BackupPhase::WaitingForPluginOperations, past);
        assert_eq!(decide(None, Some(&running), now()), Decision::Step);
        let legacy = stored(BackupPhase::Completed);
        assert_eq!(
            decide(Some(&legacy.status), Some(&legacy), now()),
            Decision::Nothing
        );
        // A deletion once begun is finished, expired or not.
        let deleting = expiring(BackupPhase::Deleting, now() + hour);
        assert_eq!(decide(None, Some(&deleting), now()), Decision::Expire);
    }

    /// The data went (the sweep) and the resource stayed (its deletion
    /// failed, or the sweep ran elsewhere): the resource goes. A resource
    /// whose backup is not in the store for any other reason stays.
    #[test]
    fn a_resource_whose_expired_data_went_is_deleted() {
        let hour = Duration::from_secs(3600);
        let expired = expiring(BackupPhase::Completed, now() - hour).status;
        assert_eq!(decide(Some(&expired), None, now()), Decision::Collected);
        let deleting = expiring(BackupPhase::Deleting, now() + hour).status;
        assert_eq!(decide(Some(&deleting), None, now()), Decision::Collected);
        let fresh = expiring(BackupPhase::Completed, now() + hour).status;
        assert_eq!(decide(Some(&fresh), None, now()), Decision::Orphaned);
        let running = expiring(BackupPhase::InProgress, now() - hour).status;
        assert_eq!(decide(Some(&running), None, now()), Decision::Orphaned);
    }

    /// A resource gone by the time its finalizer is removed ends the
    /// reconcile quietly; any other failure to remove it is an error that
    /// names the backup (seen once in four runs of a delete mid-backup).
    #[test]
    fn a_resource_already_gone_when_its_finalizer_goes_is_success() {
        let api_error = |code: u16| {
            let status = kube::core::Status {
                code,
                message: "backups.iar.dev \"b\" not found".into(),
                ..Default::default()
            };
            finalizer::Error::<ReconcileError>::RemoveFinalizer(kube::Error::Api(Box::new(status)))
        };
        assert_eq!(
            finalizer_outcome("b", Err(api_error(404))).unwrap(),
            Action::await_change()
        );
        let err = finalizer_outcome("b", Err(api_error(500))).unwrap_err();
        assert!(
            err.to_string().contains("backup b: removing the finalizer"),
            "{err}"
        );
    }
}
