//! Garbage collection in the cluster: the leader sweeps the store every
//! `gc_period` ([`PhaseMachine::collect_garbage`]) and deletes the Backup
//! resource each deleted backup was made for. The data goes first: a
//! resource whose deletion then fails is left with a status and no stored
//! backup, and its next reconcile deletes it ([`Decision::Collected`]).
//!
//! [`PhaseMachine::collect_garbage`]: crate::phases::PhaseMachine::collect_garbage
//! [`Decision::Collected`]: super::reconcile::Decision::Collected

use super::crd::Backup;
use super::reconcile::{Context, made_for};
use crate::backup::object::BackupObject;
use crate::phases::gc::Outcome;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Preconditions};
use std::time::SystemTime;

/// Sweeps every `gc_period`, the first at once, for as long as it runs
/// (the leader runs it beside the reconciler).
pub async fn sweep_forever(ctx: &Context) {
    loop {
        sweep(ctx, SystemTime::now()).await;
        tokio::time::sleep(ctx.controller.settings.gc_period).await;
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
                match deleted(&ctx.api, &object).await {
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
            Outcome::Tidied | Outcome::WouldDelete(_) | Outcome::Kept(_) => {}
        }
    }
}

/// What follows a backup's deletion from the store: it is logged, no
/// longer counted, and the resource it was made for is deleted
/// ([`delete_resource_for`]).
pub async fn deleted(api: &Api<Backup>, object: &BackupObject) -> Result<bool, kube::Error> {
    let m = &object.metadata;
    tracing::info!(backup = %m.name, expiration = ?object.status.expiration, "expired: deleted from the store");
    crate::metrics::global().backup_deleted(&format!("{}/{}", m.namespace, m.name));
    delete_resource_for(api, object).await
}

/// Deletes the Backup resource a deleted backup was made for: same
/// namespace and name, and the uid it recorded (one that recorded none is
/// taken as made for it, as [`made_for`] says). The uid is a precondition
/// of the delete, so a resource recreated meanwhile is left alone.
/// `Ok(false)`: there was none to delete.
pub async fn delete_resource_for(
    api: &Api<Backup>,
    object: &BackupObject,
) -> Result<bool, kube::Error> {
    // A backup `iar backup` wrote, or another controller's, has none here.
    if api.namespace() != Some(object.metadata.namespace.as_str()) {
        return Ok(false);
    }
    let name = &object.metadata.name;
    let Some(resource) = api.get_opt(name).await? else {
        return Ok(false);
    };
    if !made_for(object, resource.uid().as_deref()) {
        return Ok(false);
    }
    delete_with_uid(api, name, resource.uid()).await
}

/// Deletes a resource if it still has `uid`; `Ok(false)` if it is gone
/// or is another object by now.
pub async fn delete_with_uid(
    api: &Api<Backup>,
    name: &str,
    uid: Option<String>,
) -> Result<bool, kube::Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}
