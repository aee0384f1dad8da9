//! Snapshots PersistentVolumeClaims as an asynchronous operation.
//!
//! For each bound PVC it starts an operation named
//! `<namespace>/<pvc>-<backup>`: the VolumeSnapshot of that name (created by
//! the CSI snapshot machinery, or by hand when trying iar on manifests) is
//! the snapshot of this PVC for this backup. `progress` reads the
//! VolumeSnapshot through `cluster-get`: the operation has started once it
//! exists and is complete when `status.readyToUse` is true, or has failed
//! when `status.error` is set. The VolumeSnapshot is a post-operation item,
//! so the finalized backup holds it in its ready state.
//!
//! On a VolumeSnapshot (finalize backs the post-operation items up, and
//! runs the actions on them), it names the snapshot's bound
//! VolumeSnapshotContent and its VolumeSnapshotClass as additional items, as
//! Velero's CSI action does: a Velero restore with `--features=EnableCSI`
//! rebinds the snapshot to that content.
//!
//! Config: `snapshot-group` (default `snapshot.storage.k8s.io`).

use iar_sdk::{
    Backup, Error, Item, ItemAction, Output, Phase, Progress, ResourceId, Result, Selector,
    Timestamp, Value, cluster_get_as, config, info, warn,
};
use serde::Deserialize;

struct PvcSnapshot;

/// The fields of a VolumeSnapshot `progress` reads, as `Value`s so that a
/// field of an unexpected type reads as absent; the rest is skipped.
#[derive(Deserialize)]
struct Snapshot {
    metadata: Option<SnapshotMetadata>,
    status: Option<SnapshotStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotMetadata {
    #[serde(default)]
    creation_timestamp: Value,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotStatus {
    #[serde(default)]
    ready_to_use: Value,
    #[serde(default)]
    error: Value,
    #[serde(default)]
    creation_time: Value,
}

fn group() -> String {
    config("snapshot-group").unwrap_or_else(|| "snapshot.storage.k8s.io".into())
}

/// A VolumeSnapshot's bound content and its class, as additional items
/// (Velero's CSI action backs both up with the snapshot); none until the
/// snapshot is bound.
fn snapshot_parts(item: &Item) -> Result<Output> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Vs {
        #[serde(default)]
        spec: Value,
        #[serde(default)]
        status: Value,
    }
    let vs: Vs = item.parse_as()?;
    let group = group();
    let mut parts = Vec::new();
    if let Some(content) = vs.status["boundVolumeSnapshotContentName"].as_str() {
        parts.push(ResourceId::cluster(
            &group,
            "volumesnapshotcontents",
            content,
        ));
    }
    if let Some(class) = vs.spec["volumeSnapshotClassName"].as_str() {
        parts.push(ResourceId::cluster(&group, "volumesnapshotclasses", class));
    }
    Ok(Output::unchanged().with_additional_items(parts))
}

fn snapshot_id(operation_id: &str) -> Result<ResourceId> {
    let (namespace, name) = operation_id
        .split_once('/')
        .filter(|(ns, n)| !ns.is_empty() && !n.is_empty())
        .ok_or_else(|| {
            Error::UnknownOperation(format!("{operation_id:?} is not namespace/name"))
        })?;
    let group = group();
    Ok(ResourceId::namespaced(
        &group,
        "volumesnapshots",
        namespace,
        name,
    ))
}

impl ItemAction for PvcSnapshot {
    fn applies_to() -> Result<Selector> {
        Ok(Selector::resources([
            "persistentvolumeclaims".to_string(),
            format!("volumesnapshots.{}", group()),
        ]))
    }

    fn execute(item: Item, backup: &Backup) -> Result<Output> {
        if item.kind() == "VolumeSnapshot" {
            return snapshot_parts(&item);
        }
        // A finalize pass must not start operations; nothing to do there.
        // Only the name and the status phase are read, in one pass; the rest
        // is skipped, not parsed.
        #[derive(serde::Deserialize)]
        struct Claim {
            metadata: Metadata,
            status: Option<Status>,
        }
        #[derive(serde::Deserialize)]
        struct Metadata {
            #[serde(default)]
            namespace: String,
            name: String,
        }
        #[derive(serde::Deserialize)]
        struct Status {
            phase: Option<String>,
        }
        let claim: Claim = item.parse_as()?;
        let bound = claim.status.and_then(|s| s.phase).as_deref() == Some("Bound");
        if backup.phase == Phase::Finalize || !bound {
            return Ok(Output::unchanged());
        }
        let Metadata { namespace, name } = &claim.metadata;
        let operation_id = format!("{namespace}/{name}-{}", backup.name);
        let snapshot = snapshot_id(&operation_id)?;
        info!("snapshot of {namespace} {name} is {snapshot}");
        Ok(Output::unchanged().with_operation(operation_id, [snapshot]))
    }

    fn progress(operation_id: &str, _backup: &Backup) -> Result<Progress> {
        let id = snapshot_id(operation_id)?;
        let snapshot = cluster_get_as::<Snapshot>(&id).map_err(Error::Retryable)?;
        let Some(snapshot) = snapshot else {
            return Ok(Progress {
                n_total: 1,
                operation_units: "snapshots".into(),
                description: format!("waiting for {id} to be created"),
                ..Progress::default()
            });
        };
        let status = snapshot.status.unwrap_or_default();
        let ts = |v: &Value| v.as_str().and_then(Timestamp::parse_rfc3339);
        let ready = status.ready_to_use.as_bool() == Some(true);
        let error = status.error["message"].as_str().map(String::from);
        Ok(Progress {
            completed: ready || error.is_some(),
            n_completed: i64::from(ready),
            n_total: 1,
            operation_units: "snapshots".into(),
            description: match (&error, ready) {
                (Some(e), _) => format!("snapshot failed: {e}"),
                (None, true) => "snapshot ready".into(),
                (None, false) => "snapshot in progress".into(),
            },
            started: snapshot.metadata.and_then(|m| ts(&m.creation_timestamp)),
            updated: ts(&status.creation_time),
            error,
        })
    }

    fn cancel(operation_id: &str, _backup: &Backup) -> Result<()> {
        let id = snapshot_id(operation_id)?;
        // Read-only by contract: the snapshot controller owns the object. The
        // host marks the operation Canceled; this plugin only reports it.
        warn!("backup gave up on {id}; its VolumeSnapshot is left to the snapshot controller");
        Ok(())
    }
}

iar_sdk::export!(PvcSnapshot);
