//! A restore of a stored backup, from the store and back into it: what
//! `iar restore` and the controller's Restore resources share. The backup
//! is read and checked, its objects restored ([`crate::run`]), and the
//! restore's results, log and record written under `restores/NAME/`.

use crate::engine::{Context, Outcome, run};
use iar_core::item::Item;
use iar_core::store::restores::RestoreFile;
use iar_core::store::{BackupFile, BackupStore, StoreError, tarball};
use serde_json::{Value, json};
use std::time::SystemTime;

/// A backup read for a restore: its objects, and the tarball entries
/// refused on the way (an error of the restore each).
pub struct Loaded {
    pub items: Vec<Item>,
    pub refused: Vec<String>,
    /// Its pod volume backups, whose data goes into the restored pods.
    pub volumes: Vec<crate::pod_volumes::BackedUpVolume>,
}

/// Reads `backup` from `store` for a restore: only a Completed or
/// PartiallyFailed backup is restored, as in Velero. The error says why
/// not, naming the backup.
pub async fn load(store: &BackupStore, backup: &str) -> Result<Loaded, String> {
    let metadata: Option<Value> = store
        .get_json(backup, BackupFile::Metadata)
        .await
        .map_err(|e| format!("backup {backup:?}: {e}"))?;
    let Some(metadata) = metadata else {
        return Err(format!("backup {backup:?} is not in {}", store.url()));
    };
    let phase = metadata["status"]["phase"].as_str().unwrap_or("New");
    if !matches!(phase, "Completed" | "PartiallyFailed") {
        return Err(format!(
            "backup {backup:?} is {phase}; only a Completed or PartiallyFailed backup is restored (as in Velero)"
        ));
    }
    let contents = store
        .get(backup, BackupFile::Contents)
        .await
        .map_err(|e| format!("backup {backup:?}: {e}"))?
        .ok_or_else(|| format!("backup {backup:?} has no contents tarball"))?;
    let entries = tarball::read(&contents)
        .map_err(|e| format!("backup {backup:?}: reading its contents tarball: {e}"))?;
    let (items, refused) = crate::archive::items(entries);
    let volumes = store
        .get_json(backup, BackupFile::VolumeBackups)
        .await
        .map_err(|e| format!("backup {backup:?}: its volume backups: {e}"))?
        .unwrap_or_default();
    Ok(Loaded {
        items,
        refused,
        volumes,
    })
}

/// Restores what [`load`] read. Blocking (see [`crate::run`]).
pub fn restore(cx: Context<'_>, loaded: Loaded) -> Outcome {
    let mut outcome = run(cx, loaded.items, &loaded.volumes);
    outcome.results.errors.velero.extend(loaded.refused);
    outcome
}

/// Velero's Restore status for a restore that ran to its end.
pub fn status(outcome: &Outcome, started: SystemTime, finished: SystemTime) -> Value {
    let mut status = json!({
        "phase": outcome.phase(),
        "startTimestamp": humantime::format_rfc3339_seconds(started).to_string(),
        "completionTimestamp": humantime::format_rfc3339_seconds(finished).to_string(),
        "warnings": outcome.results.warnings.count(),
        "errors": outcome.results.errors.count(),
        "progress": { "totalItems": outcome.selected, "itemsRestored": outcome.restored },
    });
    // Velero's counts are omitted when zero.
    // iar's own (Velero counts its PodVolumeRestores apart).
    if outcome.pod_volumes_completed + outcome.pod_volumes_failed > 0 {
        status["podVolumeRestores"] = json!({
            "completed": outcome.pod_volumes_completed,
            "failed": outcome.pod_volumes_failed,
        });
    }
    if outcome.hooks_attempted > 0 {
        status["hookStatus"] = json!({"hooksAttempted": outcome.hooks_attempted});
        if outcome.hooks_failed > 0 {
            status["hookStatus"]["hooksFailed"] = json!(outcome.hooks_failed);
        }
    }
    status
}

/// Writes the restore's results, log and record (a Velero Restore object
/// with `status`) under `restores/NAME/`; the record last, so a record
/// in the store means the rest is there.
pub async fn save(
    store: &BackupStore,
    restore: &crate::RestoreRef,
    outcome: &Outcome,
    status: &Value,
) -> Result<(), StoreError> {
    let name = &restore.name;
    let results = serde_json::to_vec(&outcome.results).expect("results serialize");
    store
        .put_restore(name, RestoreFile::Results, &results)
        .await?;
    store
        .put_restore(name, RestoreFile::Logs, outcome.log.join("\n").as_bytes())
        .await?;
    let record = json!({
        "apiVersion": "velero.io/v1",
        "kind": "Restore",
        "metadata": { "name": name, "namespace": restore.namespace, "uid": restore.uid },
        "spec": restore.spec,
        "status": status,
    });
    store
        .put_restore(
            name,
            RestoreFile::Object,
            &serde_json::to_vec_pretty(&record).expect("a record serializes"),
        )
        .await
}
