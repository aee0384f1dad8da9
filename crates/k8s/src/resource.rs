//! The Backup resource itself: whom a stored backup was made for, its
//! status patch, and deleting it once its stored backup is gone.

use super::crd::Backup;
use iar_backup::backup::object::{BackupObject, BackupStatus};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};

pub use iar_backup::backup::object::RESOURCE_UID_ANNOTATION;

/// Writes a status onto its resource (a merge patch of the status
/// subresource: nothing else of the object is touched): a Backup's, a
/// Restore's, a DownloadRequest's. Over `version` (a resourceVersion the
/// caller read) when given: refused with 409 Conflict if anyone wrote the
/// resource since, so that a patch held up on the way (a partition that
/// delays and then delivers it) cannot land over a status a newer lease
/// holder wrote meanwhile, and two leaders of a moment never both start
/// the same Restore.
pub async fn patch_status<K, S>(
    api: &Api<K>,
    name: &str,
    version: Option<&str>,
    status: &S,
) -> Result<(), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: serde::Serialize + ?Sized,
{
    let mut patch = serde_json::json!({ "status": status });
    if let Some(version) = version {
        patch["metadata"] = serde_json::json!({ "resourceVersion": version });
    }
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// The lease generation of the backup's last takeover, on its Backup
/// resource: written by the taker before anything else, so that every
/// status write prepared under an older generation (over the resource
/// version it read) conflicts (the fault campaign's seed 4408: a status
/// patch held on the way landed 9 s after a takeover).
pub const LEASE_GENERATION_ANNOTATION: &str = "iar.dev/lease-generation";

/// The fence of a takeover ([`LEASE_GENERATION_ANNOTATION`]); a resource
/// that is gone needs none. The taker bounds the wait for it.
pub async fn fence(api: &Api<Backup>, name: &str, generation: u64) -> Result<(), String> {
    let patch = serde_json::json!({"metadata": {"annotations": {
        LEASE_GENERATION_ANNOTATION: generation.to_string(),
    }}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(format!("annotating Backup {name}: {e}")),
    }
}

/// The resource version a status made under lease generation
/// `made_under` may be written over, or why it may not be written: a later
/// takeover fenced the resource, or the backup's lease in the store moved
/// on. The resource is read first and the lease checked after, so that a
/// write held up on the way (over the version read) lands over nothing a
/// taker wrote since the check: it conflicts instead.
pub async fn fenced_version(
    api: &Api<Backup>,
    store: &iar_core::store::BackupStore,
    name: &str,
    made_under: u64,
) -> Result<Option<String>, String> {
    let current = api
        .get_status(name)
        .await
        .map_err(|e| format!("reading the resource: {e}"))?;
    let fenced = fenced_generation(&current);
    if fenced > made_under {
        return Err(format!(
            "the backup was taken over since (generation {fenced}, this status's {made_under})"
        ));
    }
    match store.current_lease(name).await {
        Ok(Some(lease)) if lease.generation != made_under => Err(format!(
            "the backup's lease was taken since (generation {}, this status's {made_under})",
            lease.generation
        )),
        Ok(_) => Ok(current.metadata.resource_version),
        Err(e) => Err(format!("its lease could not be read: {e}")),
    }
}

/// The generation a takeover fenced the resource with; 0 if none.
pub fn fenced_generation(backup: &Backup) -> u64 {
    backup
        .annotations()
        .get(LEASE_GENERATION_ANNOTATION)
        .and_then(|g| g.parse().ok())
        .unwrap_or(0)
}

/// Makes the resource's status `target` exactly: a merge patch that also
/// clears what `current` has and `target` does not (a field left by an
/// earlier progress write, which a plain merge patch keeps, so that the
/// status never equals the stored one and every reconcile wrote it
/// again: the fault campaign's lease audit saw eight writes in two
/// seconds).
///
/// Over `version`, the resource version `current` was read at: a replace
/// held on the way conflicts with any write since (a takeover's fence).
pub async fn replace_status(
    api: &Api<Backup>,
    name: &str,
    version: Option<&str>,
    current: Option<&BackupStatus>,
    target: &BackupStatus,
) -> Result<(), kube::Error> {
    let mut status = serde_json::to_value(target).expect("a status serializes");
    if let Some(current) = current {
        let current = serde_json::to_value(current).expect("a status serializes");
        clear_absent(&mut status, &current);
    }
    patch_status(api, name, version, &status).await
}

/// Sets to null, in merge patch `patch`, every key `current` has and
/// `patch` lacks, at every depth of objects both have.
fn clear_absent(patch: &mut serde_json::Value, current: &serde_json::Value) {
    let (Some(patch), Some(current)) = (patch.as_object_mut(), current.as_object()) else {
        return;
    };
    for (key, was) in current {
        match patch.get_mut(key) {
            None => {
                patch.insert(key.clone(), serde_json::Value::Null);
            }
            Some(now) => clear_absent(now, was),
        }
    }
}

/// Whether a stored backup was made for the resource with this uid: it
/// records the uid it was made for; one that records none (made before the
/// annotation existed) is taken to be this resource's.
pub fn made_for(stored: &BackupObject, resource_uid: Option<&str>) -> bool {
    stored
        .metadata
        .annotations
        .get(RESOURCE_UID_ANNOTATION)
        .is_none_or(|uid| resource_uid == Some(uid.as_str()))
}

/// What follows a backup's deletion from the store: it is logged, no
/// longer counted, and the resource it was made for is deleted
/// ([`delete_resource_for`]).
pub async fn deleted(api: &Api<Backup>, object: &BackupObject) -> Result<bool, kube::Error> {
    let m = &object.metadata;
    tracing::info!(backup = %m.name, expiration = ?object.status.expiration, "expired: deleted from the store");
    iar_core::metrics::global().backup_deleted(&format!("{}/{}", m.namespace, m.name));
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

#[cfg(test)]
mod tests {
    use super::clear_absent;
    use serde_json::json;

    #[test]
    fn a_replacing_patch_clears_what_the_target_lacks() {
        let mut patch = json!({"phase": "Completed", "progress": {"totalItems": 3}});
        let current = json!({"phase": "InProgress", "volumeBackups": {"attempted": 1},
            "progress": {"totalItems": 3, "itemsBackedUp": 1}});
        clear_absent(&mut patch, &current);
        assert_eq!(
            patch,
            json!({"phase": "Completed", "volumeBackups": null,
                "progress": {"totalItems": 3, "itemsBackedUp": null}})
        );
    }
}
