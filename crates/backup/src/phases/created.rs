//! The objects a backup's plugins created in the cluster (contract 1.2.0):
//! recorded with the backup when its first pass is stored, and deleted
//! when the backup is deleted or canceled, each only while its uid is the
//! one recorded (a newer object of the same name stays), its labels say
//! it was created for that backup, and its full name agrees
//! ([`full_name_matches`]): a planted record deletes nothing.

use super::errors::PhaseError;
use super::journal::Journal;
use super::record::Run;
use crate::backup::pass::ItemOutcome;
use iar_core::cluster::writes::{self, CreatedObject};
use iar_core::cluster::{ClusterError, ClusterReader};
use iar_core::store::{BackupFile, BackupStore};
use std::sync::Arc;

/// The annotation holding the full name of the backup an object was
/// created for (set by the host at create time).
pub const BACKUP_FULL_NAME_ANNOTATION: &str = writes::BACKUP_NAME_ANNOTATION;
/// A deletion of what a backup created skips an object whose full backup
/// name is not the backup's, or cannot be told from its labels.
pub const GC_FULL_NAME: &str = "gc-full-name";

/// Whether `object` was created for the backup stored as `name`, by its
/// full name: the [`BACKUP_FULL_NAME_ANNOTATION`] when the object has it;
/// without it, the name label decides ([`writes::created_for`]) except for
/// a name shaped like the digest a long name's label holds
/// (`sha256-<40 hex>`): a backup planted under that name, with a copied
/// uid, would otherwise match a long-named backup's objects.
pub fn full_name_matches(object: &serde_json::Value, name: &str) -> Result<(), String> {
    match object["metadata"]["annotations"][BACKUP_FULL_NAME_ANNOTATION].as_str() {
        Some(full) if full == name => Ok(()),
        Some(full) => Err(format!("it was created for backup {full:?}, not {name:?}")),
        None if is_digest_label(name) => Err(format!(
            "backup {name:?} is named like a long name's label digest and the object carries no {BACKUP_FULL_NAME_ANNOTATION} annotation to tell them apart"
        )),
        None => Ok(()),
    }
}

/// `sha256-` and 40 lowercase hex digits: what `names::label_value` makes
/// of a name that is not a label value.
fn is_digest_label(name: &str) -> bool {
    name.strip_prefix("sha256-").is_some_and(|hex| {
        hex.len() == 40
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// What recording and deleting created objects needs.
#[derive(Clone, Copy)]
pub(super) struct Created<'a> {
    pub(super) store: &'a BackupStore,
    pub(super) cluster: &'a Arc<dyn ClusterReader>,
    pub(super) journal: &'a Journal,
}

impl Created<'_> {
    /// Records what the first pass's plugins created, in the order they
    /// created it, with a line each in the backup's log.
    pub(super) async fn record(
        &self,
        run: &Run,
        outcomes: &[ItemOutcome],
    ) -> Result<(), PhaseError> {
        let mut created: Vec<&CreatedObject> = Vec::new();
        // One record per object: a retried execute gets its object back.
        for object in outcomes.iter().flat_map(|o| &o.created) {
            if !created.contains(&object) {
                created.push(object);
            }
        }
        if created.is_empty() {
            return Ok(());
        }
        for object in &created {
            self.journal.line(
                run.name(),
                format!(
                    "plugin {} created {} (uid {})",
                    object.plugin, object.id, object.uid
                ),
            );
        }
        self.store
            .put_json(run.name(), BackupFile::CreatedObjects, &created)
            .await?;
        Ok(())
    }

    /// What a stored backup's plugins created; empty when they created
    /// nothing.
    pub(super) async fn list(&self, name: &str) -> Result<Vec<CreatedObject>, PhaseError> {
        Ok(self
            .store
            .get_json(name, BackupFile::CreatedObjects)
            .await?
            .unwrap_or_default())
    }

    /// Refuses the deletion of a controller's backup (one that records its
    /// Backup resource's uid) whose plugins created objects, by a process
    /// whose cluster is manifests: they are in the controller's cluster,
    /// where this process would find nothing and call them gone.
    pub(super) async fn check_reachable(
        &self,
        name: &str,
        object: &crate::backup::object::BackupObject,
    ) -> Result<(), PhaseError> {
        let controllers = object
            .metadata
            .annotations
            .contains_key(crate::backup::object::RESOURCE_UID_ANNOTATION);
        if !controllers || self.cluster.is_live() {
            return Ok(());
        }
        let created = self.list(name).await?;
        match created.first() {
            None => Ok(()),
            Some(first) => Err(PhaseError::CreatedUnreachable {
                name: name.to_string(),
                count: created.len(),
                first: first.id.clone(),
            }),
        }
    }

    /// Deletes what the backup stored as `name` (uid `uid`) had its
    /// plugins create. The record is a file in the store, so it is not
    /// trusted: each object is read first and deleted only if its labels
    /// say it was created for this backup, name and uid
    /// ([`writes::created_for`]), and it is still the object recorded (its
    /// uid), which the delete then carries as its precondition (the API
    /// server checks it; the overlay compares it). One that is not is left
    /// and said so (rule `gc-not-owner`), and the others still go. An
    /// object already gone is fine. A cluster that cannot be written
    /// (`iar delete` with no cluster) leaves them, said in the log; any
    /// other failure is an error, so that the deletion is tried again and
    /// nothing is leaked quietly.
    ///
    /// `uid` is `None` for a backup whose object was never stored (a first
    /// pass cut off from the store, or a deletion's leftovers): its uid is
    /// unknown, so an object goes only if it is still the one recorded and
    /// is labelled with this backup's name, and none is searched for by
    /// label. Such a directory is tidied only when no process holds its
    /// lease, so the name is no live backup's.
    pub(super) async fn delete(&self, name: &str, uid: Option<&str>) -> Result<(), PhaseError> {
        let owned = |found: &serde_json::Value| match uid {
            Some(uid) => writes::created_for(found, name, uid),
            None => {
                found["metadata"]["labels"][writes::BACKUP_NAME_LABEL].as_str()
                    == Some(iar_core::names::label_value(name).as_str())
            }
        };
        let failed = |what: &'static str, object: &CreatedObject, source: ClusterError| {
            PhaseError::CreatedObject {
                name: name.to_string(),
                what,
                object: object.id.clone(),
                plugin: object.plugin.clone(),
                source,
            }
        };
        for object in self.list(name).await? {
            match self.cluster.get_async(&object.id).await {
                Ok(Some(found)) if writes::uid_of(&found) != object.uid => {
                    self.journal.line(
                        name,
                        format!(
                            "{} (created by plugin {}) was already gone (another object of that name stays)",
                            object.id, object.plugin
                        ),
                    );
                    continue;
                }
                Ok(Some(found)) if let Err(why) = full_name_matches(&found, name) => {
                    let refusal = format!(
                        "not deleting {} (listed as created by plugin {}): {why} (rule: {GC_FULL_NAME})",
                        object.id, object.plugin,
                    );
                    tracing::warn!(backup = %name, object = %object.id, rule = GC_FULL_NAME, "{refusal}");
                    self.journal.line(name, format!("warning: {refusal}"));
                    continue;
                }
                Ok(Some(found)) if !owned(&found) => {
                    let refusal = format!(
                        "not deleting {} (listed as created by plugin {}): it is not labelled {}={} and {}={} (rule: {})",
                        object.id,
                        object.plugin,
                        writes::BACKUP_NAME_LABEL,
                        iar_core::names::label_value(name),
                        writes::BACKUP_UID_LABEL,
                        uid.unwrap_or("(the backup's, never stored)"),
                        writes::rule::GC_NOT_OWNER
                    );
                    tracing::warn!(backup = %name, object = %object.id, rule = writes::rule::GC_NOT_OWNER, "{refusal}");
                    self.journal.line(name, format!("warning: {refusal}"));
                    continue;
                }
                // Not found (or no cluster to read): the delete says which.
                Ok(_) => {}
                Err(e) => return Err(failed("reading", &object, e)),
            }
            match self.cluster.delete_async(&object.id, &object.uid).await {
                Ok(deleted) => self.journal.line(
                    name,
                    if deleted {
                        format!(
                            "deleted {} (created by plugin {})",
                            object.id, object.plugin
                        )
                    } else {
                        format!(
                            "{} (created by plugin {}) was already gone",
                            object.id, object.plugin
                        )
                    },
                ),
                Err(ClusterError::ReadOnly) => {
                    tracing::warn!(backup = %name, object = %object.id, plugin = %object.plugin,
                        "this process has no cluster to delete it from: it stays (labelled iar.dev/backup-uid)");
                }
                Err(e) => return Err(failed("deleting", &object, e)),
            }
        }
        match uid {
            Some(uid) => self.delete_unrecorded(name, uid).await,
            None => Ok(()),
        }
    }

    /// The objects the backup's plugins created that its record lacks (a
    /// pass stopped after a create and before the record: the fault
    /// campaign's seed 1802 left a VolumeSnapshot so), found by the
    /// backup's uid label in each resource its pinned plugins could write,
    /// and deleted under the same checks as the recorded ones. A cluster
    /// that cannot list (no cluster) searches nothing.
    async fn delete_unrecorded(&self, name: &str, uid: &str) -> Result<(), PhaseError> {
        if uid.is_empty() {
            return Ok(());
        }
        let grants = super::plugin_set::recorded_write_grants(self.store, name).await?;
        // A label value always (a uid that is not one is digested).
        let Ok(selector) = format!(
            "{}={}",
            writes::BACKUP_UID_LABEL,
            iar_core::names::label_value(uid)
        )
        .parse::<iar_core::select::labels::LabelSelector>() else {
            return Ok(());
        };
        for grant in grants {
            let (resource, group) = grant.split_once('.').unwrap_or((grant.as_str(), ""));
            let gr = iar_core::catalog::GroupResource {
                group: group.to_string(),
                resource: resource.to_string(),
            };
            let (cluster, listed_gr, selector) =
                (self.cluster.clone(), gr.clone(), selector.clone());
            let listed = tokio::task::spawn_blocking(move || {
                cluster.list_within(
                    &listed_gr,
                    "",
                    &selector,
                    1000,
                    std::time::Duration::from_secs(60),
                )
            })
            .await
            .map_err(|e| PhaseError::Panicked {
                name: name.to_string(),
                what: "listing what its plugins created",
                source: e,
            })?;
            let objects = match listed {
                Ok(objects) => objects,
                Err(ClusterError::CannotList | ClusterError::ReadOnly) => continue,
                Err(source) => {
                    return Err(PhaseError::CreatedObject {
                        name: name.to_string(),
                        what: "listing",
                        object: iar_core::item::ItemRef::new(gr.group, gr.resource, "", ""),
                        plugin: "(its plugins)".into(),
                        source,
                    });
                }
            };
            for text in objects {
                let Ok(object) = serde_json::from_str::<serde_json::Value>(&text) else {
                    continue;
                };
                if !writes::created_for(&object, name, uid)
                    || full_name_matches(&object, name).is_err()
                {
                    continue;
                }
                let id = iar_core::item::ItemRef::new(
                    gr.group.clone(),
                    gr.resource.clone(),
                    object["metadata"]["namespace"].as_str().unwrap_or_default(),
                    object["metadata"]["name"].as_str().unwrap_or_default(),
                );
                let object_uid = writes::uid_of(&object);
                match self.cluster.delete_async(&id, &object_uid).await {
                    Ok(true) => self.journal.line(
                        name,
                        format!("deleted {id} (labelled for this backup, not in its record)"),
                    ),
                    Ok(false) | Err(ClusterError::ReadOnly) => {}
                    Err(source) => {
                        return Err(PhaseError::CreatedObject {
                            name: name.to_string(),
                            what: "deleting",
                            object: id,
                            plugin: "(its plugins)".into(),
                            source,
                        });
                    }
                }
            }
        }
        Ok(())
    }
}
