//! Snapshots PersistentVolumeClaims through CSI, as Velero's CSI action
//! does, as an asynchronous operation.
//!
//! For each bound PVC whose PersistentVolume is a CSI volume it creates a
//! VolumeSnapshot of the claim (contract 1.2.0's `create`, so the operator
//! must grant `allowWrite: [volumesnapshots.snapshot.storage.k8s.io]`;
//! it labels the claim with the snapshot, and on restore points the claim
//! at it, item changes granted by `allowMutate: [persistentvolumeclaims]`),
//! named `<pvc>-<backup>`, and returns the operation `<namespace>/<name>`.
//! The name is the same for every try of one backup, so a retried
//! `execute` finds the snapshot it created instead of creating another.
//! The VolumeSnapshotClass is chosen as Velero chooses it: the claim's
//! `velero.io/csi-volume-snapshot-class` annotation, else this plugin's
//! `snapshot-class` setting, else the one class of the volume's driver
//! labelled `velero.io/csi-volumesnapshot-class: "true"` (found with
//! `list`). A claim whose volume is not CSI is left to other actions, and
//! so is one a pod's volume sends to a file-system backup (its opt-in
//! annotation, or `defaultVolumesToFsBackup` without its opt-out), as
//! Velero's CSI action leaves it: a volume is never both. A namespace's
//! pods are listed once per backup, for all its claims.
//!
//! `progress` reads the VolumeSnapshot: the operation has started once it
//! exists and is complete when `status.readyToUse` is true, or has failed
//! when `status.error` is set. The VolumeSnapshot is a post-operation item,
//! so the finalized backup holds it in its ready state. `cancel` deletes
//! it (only the plugin's own: the host refuses any other).
//!
//! On a VolumeSnapshot (finalize backs the post-operation items up, and
//! runs the actions on them), it names the snapshot's bound
//! VolumeSnapshotContent and its VolumeSnapshotClass as additional items, as
//! Velero's CSI action does: a Velero restore with `--features=EnableCSI`
//! rebinds the snapshot to that content.
//!
//! The backed-up claim is labelled `velero.io/volume-snapshot-name` with its
//! snapshot, as Velero's CSI action labels it; on restore (contract 1.3.0)
//! such a claim is restored from that snapshot: `spec.dataSource` names it,
//! the old volume's binding is dropped, and the snapshot is restored first.
//! The name is the one Velero's own VolumeSnapshot restore action gives the
//! restored snapshot (the hex sha256 of `<restore uid>/<snapshot>`, so two
//! restores of one backup do not collide), as Velero's CSI PVC restore
//! action names it; so inside Velero it needs `--features=EnableCSI`, as
//! Velero's own CSI restore does.
//!
//! Config: `snapshot-group` (default `snapshot.storage.k8s.io`),
//! `snapshot-class` (the class for every driver, unless a claim names one).

use iar_sdk::{
    Backup, Error, Item, ItemAction, Output, Phase, Progress, ResourceId, RestoreInput,
    RestoreItemAction, RestoreOutput, Result, Selector, Timestamp, Value, cluster_get_as, config,
    create, delete, info, json, list,
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

/// The label on a backed-up claim naming its VolumeSnapshot (Velero's CSI
/// action's).
const SNAPSHOT_LABEL: &str = "velero.io/volume-snapshot-name";
/// What the API server and the provisioner set on a bound claim, dropped
/// from a claim restored from a snapshot (as Velero's CSI restore action
/// drops them): the new claim is provisioned afresh.
const BINDING_ANNOTATIONS: [&str; 5] = [
    "pv.kubernetes.io/bind-completed",
    "pv.kubernetes.io/bound-by-controller",
    "volume.beta.kubernetes.io/storage-provisioner",
    "volume.kubernetes.io/storage-provisioner",
    "volume.kubernetes.io/selected-node",
];

/// The claim annotation naming its VolumeSnapshotClass (Velero's).
/// Makes Velero restore a claim's additional items even where the
/// restore's resource filters exclude them (Velero's CSI PVC action sets it).
const MUST_INCLUDE_ANNOTATION: &str = "restore.velero.io/must-include-additional-items";

/// The name Velero's VolumeSnapshot restore action gives a snapshot it
/// restores: the hex sha256 of `<restore uid>/<name in the backup>`.
fn restored_snapshot_name(restore_uid: &str, snapshot: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{restore_uid}/{snapshot}"));
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

const CLASS_ANNOTATION: &str = "velero.io/csi-volume-snapshot-class";
/// The label that makes a class Velero's choice for its driver.
const CLASS_LABEL: &str = "velero.io/csi-volumesnapshot-class";

/// The snapshot of claim `pvc` for backup `backup`: the same name on every
/// try, `<pvc>-<backup>` when that is short enough for a name.
fn snapshot_name(pvc: &str, backup: &str) -> String {
    let name = format!("{pvc}-{backup}");
    if name.len() <= 253 {
        name
    } else {
        iar_sdk::object_name(pvc, &[pvc, backup])
    }
}

/// What one pod says about file-system backup: the claims its volumes
/// mount, and its opt-in and opt-out annotations.
struct PodVolumes {
    pod: String,
    /// (claim, volume)
    claims: Vec<(String, String)>,
    opt_in: Vec<String>,
    opt_out: Vec<String>,
}

impl PodVolumes {
    fn of(pod: &Value) -> PodVolumes {
        let listed = |key: &str| -> Vec<String> {
            pod["metadata"]["annotations"][key]
                .as_str()
                .unwrap_or("")
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect()
        };
        let claims = pod["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| {
                let claim = v["persistentVolumeClaim"]["claimName"].as_str()?;
                Some((claim.to_string(), v["name"].as_str()?.to_string()))
            })
            .collect();
        PodVolumes {
            pod: pod["metadata"]["name"].as_str().unwrap_or("?").to_string(),
            claims,
            opt_in: listed("backup.velero.io/backup-volumes"),
            opt_out: listed("backup.velero.io/backup-volumes-excludes"),
        }
    }
}

/// The pods of one namespace, as this backup first listed them.
type Pods = std::rc::Rc<Vec<PodVolumes>>;

std::thread_local! {
    /// Each namespace's pods, listed once per backup (the key's uid) rather
    /// than once per claim: an instance serves one backup's items, and a
    /// namespace of 250 claims and 250 pods had cost 62,500 pods read, as
    /// Velero's informer-backed client would read them from memory. A pod
    /// created in that namespace later in the backup is not seen by the
    /// claims after it, as with any listing taken once.
    static PODS: std::cell::RefCell<(String, std::collections::HashMap<String, Pods>)> =
        Default::default();
}

fn pods_of(namespace: &str, backup_uid: &str) -> Result<Pods> {
    let cached = PODS.with_borrow(|(uid, by_ns)| {
        (uid == backup_uid)
            .then(|| by_ns.get(namespace).cloned())
            .flatten()
    });
    if let Some(pods) = cached {
        return Ok(pods);
    }
    let listed = list("", "pods", namespace, "").map_err(Error::Retryable)?;
    let pods: Pods = std::rc::Rc::new(listed.iter().map(PodVolumes::of).collect());
    PODS.with_borrow_mut(|(uid, by_ns)| {
        if uid != backup_uid {
            *uid = backup_uid.to_string();
            by_ns.clear();
        }
        by_ns.insert(namespace.to_string(), pods.clone());
    });
    Ok(pods)
}

/// The pod and volume through which claim `namespace/name` gets a
/// file-system backup in this backup, if one does: the pod's opt-in
/// (`backup.velero.io/backup-volumes`) or, with the spec's
/// `defaultVolumesToFsBackup`, any volume not opted out
/// (`backup.velero.io/backup-volumes-excludes`). Velero's CSI action skips
/// such a claim (its volume helper): a volume is never both snapshotted and
/// backed up as files.
fn fs_backed(namespace: &str, name: &str, backup: &Backup) -> Result<Option<(String, String)>> {
    let by_default = backup.spec["defaultVolumesToFsBackup"].as_bool() == Some(true);
    let key = if backup.uid.is_empty() {
        &backup.name
    } else {
        &backup.uid
    };
    for pod in pods_of(namespace, key)?.iter() {
        for (claim, volume) in &pod.claims {
            if claim != name {
                continue;
            }
            let fs = if by_default {
                !pod.opt_out.contains(volume)
            } else {
                pod.opt_in.contains(volume)
            };
            if fs {
                return Ok(Some((pod.pod.clone(), volume.clone())));
            }
        }
    }
    Ok(None)
}

/// The CSI driver of the claim's volume; `None` when it is not a CSI
/// volume.
fn csi_driver(spec: &Value, namespace: &str, name: &str) -> Result<Option<String>> {
    let Some(volume) = spec["volumeName"].as_str() else {
        return Ok(None);
    };
    let pv = cluster_get_as::<Value>(&ResourceId::cluster("", "persistentvolumes", volume))
        .map_err(Error::Retryable)?
        .ok_or_else(|| {
            Error::Failed(format!(
                "{namespace}/{name} is bound to PersistentVolume {volume}, which does not exist"
            ))
        })?;
    Ok(pv["spec"]["csi"]["driver"].as_str().map(String::from))
}

/// The VolumeSnapshotClass for `driver`, chosen as Velero chooses it.
fn snapshot_class(driver: &str, named: Option<&String>) -> Result<String> {
    let group = group();
    let named = named.cloned().or_else(|| config("snapshot-class"));
    if let Some(class) = named {
        let found = cluster_get_as::<Value>(&ResourceId::cluster(
            &group,
            "volumesnapshotclasses",
            &class,
        ))
        .map_err(Error::Retryable)?
        .ok_or_else(|| Error::Failed(format!("VolumeSnapshotClass {class} does not exist")))?;
        if found["driver"].as_str() != Some(driver) {
            return Err(Error::Failed(format!(
                "VolumeSnapshotClass {class} is for driver {}, not the volume's {driver}",
                found["driver"].as_str().unwrap_or("(none)")
            )));
        }
        return Ok(class);
    }
    let labelled = list(
        &group,
        "volumesnapshotclasses",
        "",
        &format!("{CLASS_LABEL}=true"),
    )
    .map_err(Error::Retryable)?;
    let mut classes = labelled
        .iter()
        .filter(|c| c["driver"].as_str() == Some(driver))
        .filter_map(|c| c["metadata"]["name"].as_str());
    match (classes.next(), classes.next()) {
        (Some(class), None) => Ok(class.to_string()),
        (None, _) => Err(Error::Failed(format!(
            "no VolumeSnapshotClass for driver {driver}: label one {CLASS_LABEL}=true, or set this plugin's snapshot-class"
        ))),
        (Some(a), Some(b)) => Err(Error::Failed(format!(
            "more than one VolumeSnapshotClass for driver {driver} is labelled {CLASS_LABEL}=true ({a}, {b}, ...): keep one, or set this plugin's snapshot-class"
        ))),
    }
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
        // Only what is needed is read, in one pass; the rest is skipped.
        #[derive(Deserialize)]
        struct Claim {
            metadata: Metadata,
            #[serde(default)]
            spec: Value,
            #[serde(default)]
            status: Value,
        }
        #[derive(Deserialize)]
        struct Metadata {
            #[serde(default)]
            namespace: String,
            name: String,
            #[serde(default)]
            annotations: std::collections::BTreeMap<String, String>,
        }
        let claim: Claim = item.parse_as()?;
        let bound = claim.status["phase"].as_str() == Some("Bound");
        if backup.phase == Phase::Finalize || !bound {
            return Ok(Output::unchanged());
        }
        let Metadata {
            namespace,
            name,
            annotations,
        } = &claim.metadata;
        if let Some((pod, volume)) = fs_backed(namespace, name, backup)? {
            info!(
                "{namespace}/{name} is backed up as files from pod {pod}'s volume {volume}: not snapshotted"
            );
            return Ok(Output::unchanged());
        }
        let Some(driver) = csi_driver(&claim.spec, namespace, name)? else {
            info!("{namespace}/{name} is not a CSI volume: not snapshotted");
            return Ok(Output::unchanged());
        };
        let class = snapshot_class(&driver, annotations.get(CLASS_ANNOTATION))?;
        let snapshot = snapshot_name(name, &backup.name);
        let group = group();
        let id = ResourceId::namespaced(&group, "volumesnapshots", namespace, &snapshot);
        let mut labels = iar_sdk::serde_json::Map::new();
        if backup.name.len() <= 63 {
            labels.insert("velero.io/backup-name".into(), backup.name.clone().into());
        }
        let object = json!({
            "apiVersion": format!("{group}/v1"),
            "kind": "VolumeSnapshot",
            "metadata": {"name": snapshot, "namespace": namespace, "labels": labels},
            "spec": {
                "source": {"persistentVolumeClaimName": name},
                "volumeSnapshotClassName": class,
            },
        });
        create(&id, &object).map_err(Error::Failed)?;
        info!("snapshot of {namespace}/{name} is {id} (class {class})");
        // The claim as backed up names its snapshot, as Velero's CSI action
        // labels it: what the restore half reads to restore it from there.
        let mut item = item;
        item.set_label(SNAPSHOT_LABEL, &snapshot);
        Ok(Output::item(item).with_operation(format!("{namespace}/{snapshot}"), [id]))
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
        // The host deletes only this plugin's own snapshot of this backup.
        match delete(&id).map_err(Error::Failed)? {
            true => info!("backup gave up on {id}: deleted it"),
            false => info!("backup gave up on {id}: it was already gone"),
        }
        Ok(())
    }
}

impl RestoreItemAction for PvcSnapshot {
    fn applies_to() -> Result<Selector> {
        Ok(Selector::resources(["persistentvolumeclaims"]))
    }

    /// A claim whose backup snapshotted it is restored from that snapshot,
    /// as Velero's CSI restore action does: `spec.dataSource` (and
    /// `dataSourceRef`) name the VolumeSnapshot, the binding to the old
    /// volume is dropped, and the snapshot is restored first (an additional
    /// item, named in the backup's namespace). Any other claim is left as
    /// it is.
    fn execute(input: RestoreInput) -> Result<RestoreOutput> {
        let Some(snapshot) = input
            .item_from_backup
            .label(SNAPSHOT_LABEL)
            .map(str::to_string)
        else {
            return Ok(RestoreOutput::unchanged());
        };
        let group = group();
        let restored = restored_snapshot_name(&input.restore.uid, &snapshot);
        let source = json!({"apiGroup": group, "kind": "VolumeSnapshot", "name": restored});
        let backed_up_in = input.item_from_backup.namespace().to_string();
        let mut item = input.item;
        let claim = item.json_mut();
        if let Some(spec) = claim["spec"].as_object_mut() {
            spec.remove("volumeName");
            spec.insert("dataSource".into(), source.clone());
            spec.insert("dataSourceRef".into(), source);
        }
        if let Some(annotations) = claim["metadata"]["annotations"].as_object_mut() {
            for a in BINDING_ANNOTATIONS {
                annotations.remove(a);
            }
        }
        // The snapshot is restored even where the restore's filters leave
        // snapshots out (Velero reads and removes this annotation).
        if !claim["metadata"]["annotations"].is_object() {
            claim["metadata"]["annotations"] = json!({});
        }
        claim["metadata"]["annotations"][MUST_INCLUDE_ANNOTATION] = Value::from("true");
        info!(
            "{}/{} is restored from VolumeSnapshot {snapshot} (restored as {restored})",
            item.namespace(),
            item.name()
        );
        let vs = ResourceId::namespaced(&group, "volumesnapshots", &backed_up_in, &snapshot);
        Ok(RestoreOutput::item(item).with_additional_items([vs]))
    }
}

iar_sdk::export_plugin!(item_action = PvcSnapshot, restore_action = PvcSnapshot);
