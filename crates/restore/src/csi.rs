//! CSI snapshots on restore, as Velero's built-in CSI restore actions
//! (v1.18.3, `pkg/restore/actions/csi/volumesnapshot_action.go` and
//! `volumesnapshotcontent_action.go`) restore them: the backed-up
//! VolumeSnapshot and its bound VolumeSnapshotContent come back as a
//! pre-provisioned pair under a name of their own for this restore (two
//! restores of one backup never collide), bound to the snapshot the
//! driver cut at backup time (its handle), retained when the pair is
//! deleted. A claim restored from the snapshot (pvc-snapshot's restore
//! half, or Velero's CSI PVC action) names the same restored snapshot.

use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

pub const SNAPSHOTS: &str = "volumesnapshots.snapshot.storage.k8s.io";
pub const CONTENTS: &str = "volumesnapshotcontents.snapshot.storage.k8s.io";
/// Velero's annotation on a restored snapshot: the deletion policy of its
/// content.
const DELETION_POLICY_ANNOTATION: &str = "velero.io/csi-vsc-deletion-policy";
/// Velero's: restore a plugin's additional items even where the
/// restore's filters leave them out.
const MUST_INCLUDE_ANNOTATION: &str = "restore.velero.io/must-include-additional-items";

/// The name Velero gives a restored snapshot and its content: the hex
/// sha256 of `<restore uid>/<snapshot's name in the backup>`.
pub fn restored_name(restore_uid: &str, snapshot: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(format!("{restore_uid}/{snapshot}")))
}

fn object_mut<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let map = v.as_object_mut()?;
    if !map.get(key).is_some_and(Value::is_object) {
        map.insert(key.into(), json!({}));
    }
    map.get_mut(key).and_then(Value::as_object_mut)
}

/// A restored VolumeSnapshot: renamed, sourced from the content restored
/// with it (no longer from its claim) and independent of its class.
/// Returns its new name and the backed-up content to restore first (an
/// additional item that the restore's filters do not hold back); an
/// error for a snapshot the backup holds unbound (nothing to restore it
/// from).
pub fn snapshot(
    restored: &mut Value,
    backed_up: &Value,
    restore_uid: &str,
) -> Result<(String, String), String> {
    let name = backed_up["metadata"]["name"].as_str().unwrap_or_default();
    let Some(content) = backed_up["status"]["boundVolumeSnapshotContentName"].as_str() else {
        return Err(format!(
            "VolumeSnapshot {name} is not bound to a VolumeSnapshotContent in the backup: nothing to restore it from"
        ));
    };
    let new_name = restored_name(restore_uid, name);
    if let Some(spec) = object_mut(restored, "spec") {
        spec.remove("volumeSnapshotClassName");
        spec.insert(
            "source".into(),
            json!({"volumeSnapshotContentName": new_name}),
        );
    }
    if let Some(meta) = object_mut(restored, "metadata") {
        meta.insert("name".into(), json!(new_name));
    }
    if let Some(meta) = restored.get_mut("metadata")
        && let Some(annotations) = object_mut(meta, "annotations")
    {
        annotations.insert(DELETION_POLICY_ANNOTATION.into(), json!("Retain"));
        annotations.insert(MUST_INCLUDE_ANNOTATION.into(), json!("true"));
    }
    Ok((new_name, content.to_string()))
}

/// A restored VolumeSnapshotContent: pre-provisioned from the snapshot
/// handle the driver gave it at backup time, named and bound as the
/// restored snapshot it belongs to (in the snapshot's mapped namespace),
/// retained when that snapshot is deleted, with `class` (the restoring
/// cluster's class of its driver, if any) rather than the backed-up one.
/// Returns its new name; an error for a content without a handle.
pub fn content(
    restored: &mut Value,
    backed_up: &Value,
    restore_uid: &str,
    namespace_mapping: &BTreeMap<String, String>,
    class: Option<String>,
) -> Result<String, String> {
    let name = backed_up["metadata"]["name"].as_str().unwrap_or_default();
    let Some(handle) = backed_up["status"]["snapshotHandle"].as_str() else {
        return Err(format!(
            "VolumeSnapshotContent {name} has no snapshot handle in the backup: nothing to restore it from"
        ));
    };
    let reference = &backed_up["spec"]["volumeSnapshotRef"];
    let (Some(snapshot), Some(namespace)) =
        (reference["name"].as_str(), reference["namespace"].as_str())
    else {
        return Err(format!(
            "VolumeSnapshotContent {name} names no VolumeSnapshot in the backup"
        ));
    };
    let namespace = namespace_mapping
        .get(namespace)
        .map_or(namespace, String::as_str);
    let new_name = restored_name(restore_uid, snapshot);
    if let Some(spec) = object_mut(restored, "spec") {
        spec.insert("deletionPolicy".into(), json!("Retain"));
        spec.insert("source".into(), json!({"snapshotHandle": handle}));
        spec.insert(
            "volumeSnapshotRef".into(),
            json!({
                "apiVersion": reference.get("apiVersion").cloned().unwrap_or(json!("snapshot.storage.k8s.io/v1")),
                "kind": "VolumeSnapshot",
                "namespace": namespace,
                "name": new_name,
            }),
        );
        match class {
            Some(class) => spec.insert("volumeSnapshotClassName".into(), json!(class)),
            None => spec.remove("volumeSnapshotClassName"),
        };
    }
    if let Some(meta) = object_mut(restored, "metadata") {
        meta.insert("name".into(), json!(new_name));
    }
    Ok(new_name)
}

/// The first class (by name) of `driver` among `classes`, as Velero's
/// content action picks one: the restoring cluster's, so that a driver
/// needing the class's credentials finds them.
pub fn class_of_driver(classes: &[Value], driver: &str) -> Option<String> {
    let mut names: Vec<&str> = classes
        .iter()
        .filter(|c| c["driver"] == driver)
        .filter_map(|c| c["metadata"]["name"].as_str())
        .collect();
    names.sort_unstable();
    names.first().map(|n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backed_up_snapshot() -> Value {
        json!({
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": "data-nightly", "namespace": "shop"},
            "spec": {"source": {"persistentVolumeClaimName": "data"}, "volumeSnapshotClassName": "fast"},
            "status": {"boundVolumeSnapshotContentName": "snapcontent-1", "readyToUse": true},
        })
    }

    fn backed_up_content() -> Value {
        json!({
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshotContent",
            "metadata": {"name": "snapcontent-1"},
            "spec": {
                "deletionPolicy": "Delete",
                "driver": "hostpath.csi.k8s.io",
                "source": {"volumeHandle": "vol-1"},
                "volumeSnapshotClassName": "fast",
                "volumeSnapshotRef": {"kind": "VolumeSnapshot", "namespace": "shop", "name": "data-nightly", "uid": "u", "resourceVersion": "9"},
            },
            "status": {"snapshotHandle": "snap-1", "readyToUse": true},
        })
    }

    /// The pair restored as Velero restores it: one name for both, the
    /// snapshot sourced from the content, the content from the handle and
    /// bound to the snapshot in its mapped namespace, both retained.
    #[test]
    fn a_snapshot_and_its_content_come_back_as_a_pre_provisioned_pair() {
        let backed = backed_up_snapshot();
        let mut restored = backed.clone();
        restored.as_object_mut().unwrap().remove("status");
        let (name, content_name) = snapshot(&mut restored, &backed, "restore-uid").unwrap();
        assert_eq!(name, restored_name("restore-uid", "data-nightly"));
        assert_eq!(name.len(), 64);
        assert_eq!(content_name, "snapcontent-1");
        assert_eq!(restored["metadata"]["name"], name.as_str());
        assert_eq!(
            restored["spec"],
            json!({"source": {"volumeSnapshotContentName": name}})
        );
        assert_eq!(
            restored["metadata"]["annotations"][DELETION_POLICY_ANNOTATION],
            "Retain"
        );

        let backed = backed_up_content();
        let mut restored = backed.clone();
        let mapping = BTreeMap::from([("shop".to_string(), "shop-2".to_string())]);
        let content_name = content(
            &mut restored,
            &backed,
            "restore-uid",
            &mapping,
            Some("here".into()),
        )
        .unwrap();
        assert_eq!(content_name, name, "the content shares the snapshot's name");
        let spec = &restored["spec"];
        assert_eq!(spec["source"], json!({"snapshotHandle": "snap-1"}));
        assert_eq!(spec["deletionPolicy"], "Retain");
        assert_eq!(spec["volumeSnapshotClassName"], "here");
        assert_eq!(spec["driver"], "hostpath.csi.k8s.io");
        assert_eq!(
            spec["volumeSnapshotRef"],
            json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot", "namespace": "shop-2", "name": name})
        );
        assert_eq!(restored["metadata"]["name"], name.as_str());
    }

    /// What the backup holds no way back to is an error naming it, never
    /// a snapshot of the new, empty claim.
    #[test]
    fn an_unbound_snapshot_or_a_content_without_a_handle_is_an_error() {
        let mut unbound = backed_up_snapshot();
        unbound.as_object_mut().unwrap().remove("status");
        let e = snapshot(&mut unbound.clone(), &unbound, "u").unwrap_err();
        assert!(e.contains("data-nightly") && e.contains("not bound"), "{e}");
        let mut no_handle = backed_up_content();
        no_handle["status"] = json!({});
        let e = content(
            &mut no_handle.clone(),
            &no_handle,
            "u",
            &BTreeMap::new(),
            None,
        )
        .unwrap_err();
        assert!(e.contains("snapcontent-1") && e.contains("handle"), "{e}");
    }

    #[test]
    fn the_class_is_the_restoring_clusters_first_of_the_driver() {
        let classes = [
            json!({"metadata": {"name": "z"}, "driver": "d"}),
            json!({"metadata": {"name": "b"}, "driver": "d"}),
            json!({"metadata": {"name": "a"}, "driver": "other"}),
        ];
        assert_eq!(class_of_driver(&classes, "d").as_deref(), Some("b"));
        assert_eq!(class_of_driver(&classes, "none"), None);
    }
}
