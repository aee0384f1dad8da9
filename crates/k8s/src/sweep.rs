//! Garbage collection in the cluster: the leader sweeps the store every
//! `gc_period` ([`PhaseMachine::collect_garbage`]) and deletes the Backup
//! resource each deleted backup was made for. The data goes first: a
//! resource whose deletion then fails is left with a status and no stored
//! backup, and its next reconcile deletes it ([`Decision::Collected`]).
//!
//! [`PhaseMachine::collect_garbage`]: iar_backup::phases::PhaseMachine::collect_garbage
//! [`Decision::Collected`]: super::reconcile::Decision::Collected

use super::crd::Backup;
use super::reconcile::Context;
use super::resource::{RESOURCE_UID_ANNOTATION, delete_with_uid};
use iar_backup::backup::object::BackupObject;
use iar_backup::phases::gc::{Kept, Outcome};
use kube::ResourceExt;
use kube::api::Api;
use std::time::{Duration, SystemTime};

/// The Backup resource a swept backup may delete: the one named by the
/// backup's store directory (never the name its stored object gives
/// itself, which anyone who can write the store can plant), in this
/// controller's namespace, whose uid is the one the stored object records
/// in [`RESOURCE_UID_ANNOTATION`]. A record with no uid, or another's, is
/// refused, named, with rule `gc-resource-uid`; `Ok(None)`: it is not this
/// controller's (another namespace: `iar backup`'s, another
/// controller's).
pub fn resource_of<'a>(
    dir: &str,
    object: &'a BackupObject,
    namespace: &str,
    resource_uid: Option<&str>,
) -> Result<Option<&'a str>, String> {
    if object.metadata.namespace != namespace {
        return Ok(None);
    }
    let refused = |why: String| {
        Err(format!(
            "not deleting Backup resource {namespace}/{dir}: {why} (rule: gc-resource-uid)"
        ))
    };
    if object.metadata.name != dir {
        return refused(format!(
            "the object stored as backup {dir} names itself {:?}",
            object.metadata.name
        ));
    }
    match object.metadata.annotations.get(RESOURCE_UID_ANNOTATION) {
        None => refused(format!(
            "the stored backup records no {RESOURCE_UID_ANNOTATION}"
        )),
        Some(uid) if Some(uid.as_str()) != resource_uid => refused(format!(
            "the stored backup was made for uid {uid}, the resource has {}",
            resource_uid.unwrap_or("none")
        )),
        Some(uid) => Ok(Some(uid)),
    }
}

/// Deletes the Backup resource swept backup `dir` was made for
/// ([`resource_of`]), its uid the delete's precondition. `Ok(false)`:
/// there was none to delete.
async fn delete_resource(
    api: &Api<Backup>,
    dir: &str,
    object: &BackupObject,
) -> Result<bool, String> {
    let namespace = api.namespace().unwrap_or_default().to_string();
    if object.metadata.namespace != namespace {
        return Ok(false);
    }
    let Some(resource) = api.get_opt(dir).await.map_err(|e| e.to_string())? else {
        return Ok(false);
    };
    let uid = resource.uid();
    let Some(uid) = resource_of(dir, object, &namespace, uid.as_deref())? else {
        return Ok(false);
    };
    iar_core::metrics::global().backup_deleted(&format!("{namespace}/{dir}"));
    delete_with_uid(api, dir, Some(uid.to_string()))
        .await
        .map_err(|e| e.to_string())
}

/// Sweeps every `gc_period`, the first at once, for as long as it runs
/// (the leader runs it beside the reconciler).
pub async fn sweep_forever(ctx: &Context) -> std::convert::Infallible {
    let settings = &ctx.controller.settings;
    // The first maintenance one period after this replica leads: a
    // replica that just took over does not prune at once.
    let mut maintain_at = tokio::time::Instant::now() + settings.repository_maintenance_period;
    loop {
        sweep(ctx, SystemTime::now()).await;
        if tokio::time::Instant::now() >= maintain_at {
            maintain_at = match maintain(ctx).await {
                true => tokio::time::Instant::now() + settings.repository_maintenance_period,
                // Put off: tried again at the next sweep.
                false => tokio::time::Instant::now(),
            };
        }
        tokio::time::sleep(
            settings
                .gc_period
                .min(settings.repository_maintenance_period),
        )
        .await;
    }
}

/// One maintenance of the volume repositories; false if put off.
async fn maintain(ctx: &Context) -> bool {
    use iar_backup::phases::maintenance::Maintenance;
    match ctx.controller.maintain_repositories().await {
        Ok(Maintenance::Done(done)) => {
            for m in done {
                match m.outcome {
                    Ok(p) => {
                        tracing::info!(namespace = %m.namespace, packs_removed = p.packs_removed, bytes_unused = p.bytes_unused, "volume repository pruned")
                    }
                    Err(e) => {
                        tracing::error!(namespace = %m.namespace, "volume repository maintenance: {e}")
                    }
                }
            }
            true
        }
        Ok(Maintenance::Deferred { running }) => {
            tracing::info!(backup = %running, "volume repository maintenance put off: a backup is running");
            false
        }
        Ok(Maintenance::NoPassword) => true,
        Err(e) => {
            tracing::error!("{e}");
            true
        }
    }
}

/// One sweep; what it did is logged per backup.
pub async fn sweep(ctx: &Context, now: SystemTime) {
    let swept = match ctx.controller.collect_garbage(now, false).await {
        Ok(swept) => swept,
        Err(e) => {
            tracing::error!("garbage collection: listing the store: {e}; trying again next period");
            return;
        }
    };
    for collected in swept {
        let name = &collected.name;
        match collected.outcome {
            Outcome::Deleted(object) => {
                tracing::info!(backup = %name, expiration = ?object.status.expiration, "expired: deleted from the store");
                match delete_resource(&ctx.api, name, &object).await {
                    Ok(true) => {
                        tracing::info!(backup = %name, "expired: its Backup resource deleted")
                    }
                    Ok(false) => {}
                    // Its next reconcile finds it without data and retries.
                    Err(e) => {
                        tracing::warn!(backup = %name, "expired, but deleting its Backup resource failed: {e}")
                    }
                }
            }
            Outcome::Failed(reason) => {
                tracing::error!(backup = %name, "garbage collection: {reason}")
            }
            Outcome::Kept(Kept::Running(_)) => end_if_orphaned(ctx, name).await,
            Outcome::Tidied | Outcome::WouldDelete(_) | Outcome::Kept(_) => {}
        }
    }
}

/// Every replica's own check, every `period`, for as long as it runs: a
/// running backup whose lease it keeps between steps and whose Backup
/// resource is gone is ended ([`end_if_orphaned`]). kube-runtime never
/// reconciles a resource that is gone, and the leader's sweep leaves a
/// backup whose lease a live replica keeps (the fault campaign's seed
/// 3829: a resource deleted within a second of its creation, its cleanup
/// before the first pass took the lease; that pass then kept the lease
/// for a next step that never came).
pub async fn end_kept_orphans_forever(ctx: &Context, period: Duration) -> std::convert::Infallible {
    loop {
        tokio::time::sleep(period).await;
        end_kept_orphans(ctx).await;
    }
}

/// One pass of [`end_kept_orphans_forever`].
pub async fn end_kept_orphans(ctx: &Context) {
    for name in ctx.controller.kept_backups() {
        end_if_orphaned(ctx, &name).await;
    }
}

/// A running backup of this controller's whose Backup resource is gone
/// (or is another one of that name now) is ended, as the resource's
/// cleanup would have ended it; one another process drives is left to it
/// (the lease is refused). The cleanup misses a backup whose first pass
/// took its lease just after the cleanup looked for one (the fault
/// campaign's seed 3413: a resource deleted as its backup started, its
/// driver then losing the lease to a store fault, the backup left
/// WaitingForPluginOperations with no resource to step it).
async fn end_if_orphaned(ctx: &Context, name: &str) {
    let c = &ctx.controller;
    let Ok(Some(object)) = c
        .store
        .get_json::<BackupObject>(name, iar_core::store::BackupFile::Metadata)
        .await
    else {
        return;
    };
    let phase = object.status.phase;
    if !phase.is_running() {
        return;
    }
    let namespace = ctx.api.namespace().unwrap_or_default();
    let Some(made_for) = object.metadata.annotations.get(RESOURCE_UID_ANNOTATION) else {
        return;
    };
    if object.metadata.namespace != namespace || object.metadata.name != name {
        return;
    }
    match ctx.api.get_opt(name).await {
        Ok(Some(resource)) if resource.uid().as_deref() == Some(made_for.as_str()) => return,
        Ok(_) => {}
        // Not known to be gone: left for the next pass.
        Err(_) => return,
    }
    match super::reconcile::end_deleted(c, name, namespace, phase).await {
        Ok(()) => {
            tracing::warn!(backup = %name, "its Backup resource is gone and no reconcile will step it: ended Failed")
        }
        Err(iar_backup::phases::PhaseError::Lease(iar_core::store::lease::LeaseError::Held {
            ..
        })) => {}
        Err(e) => tracing::warn!(backup = %name, "its Backup resource is gone; ending it: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(name: &str, uid: Option<&str>) -> BackupObject {
        let mut object = BackupObject::new(name, "iar-system", "store-uid", serde_json::json!({}));
        if let Some(uid) = uid {
            object
                .metadata
                .annotations
                .insert(RESOURCE_UID_ANNOTATION.into(), uid.into());
        }
        object
    }

    /// A record planted in the store under any directory, naming another
    /// Backup resource or carrying no uid or another's, deletes no
    /// resource; the record iar wrote for its resource does.
    #[test]
    fn a_planted_record_deletes_no_other_backup_resource() {
        let ns = "iar-system";
        let own = stored("nightly", Some("r-1"));
        assert_eq!(
            resource_of("nightly", &own, ns, Some("r-1")),
            Ok(Some("r-1"))
        );
        // Its name is another resource's.
        let named = stored("victim", Some("r-victim"));
        let refused = resource_of("planted", &named, ns, Some("r-victim")).unwrap_err();
        assert!(refused.contains("rule: gc-resource-uid"), "{refused}");
        assert!(refused.contains("iar-system/planted"), "{refused}");
        // Under the victim's own name, but no uid or another uid.
        let refused =
            resource_of("victim", &stored("victim", None), ns, Some("r-victim")).unwrap_err();
        assert!(
            refused.contains("records no iar.dev/resource-uid"),
            "{refused}"
        );
        let refused = resource_of(
            "victim",
            &stored("victim", Some("r-old")),
            ns,
            Some("r-victim"),
        )
        .unwrap_err();
        assert!(refused.contains("made for uid r-old"), "{refused}");
        // Another namespace's: not this controller's.
        let mut elsewhere = stored("victim", Some("r-victim"));
        elsewhere.metadata.namespace = "velero".into();
        assert_eq!(
            resource_of("victim", &elsewhere, ns, Some("r-victim")),
            Ok(None)
        );
    }
}
