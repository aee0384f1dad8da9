//! CSI snapshots on the shared test API server: the external-snapshotter's
//! real snapshot-controller with its CRDs (`iar_apiserver::
//! snapshot_controller`), claims on CSI volumes, and the class Velero
//! would choose for their driver.
//!
//! No CSI driver runs here, so its sidecar (csi-snapshotter) is the one
//! part a test plays ([`cut_snapshot`]): once the real controller has
//! bound a VolumeSnapshot to the VolumeSnapshotContent it made for it, the
//! test writes the content's status as the sidecar does after the driver
//! cut the snapshot, and the real controller carries it to the snapshot
//! that pvc-snapshot's `progress` reads.

use iar::Plugin;
use iar::plugin::PluginSettings;
use iar_tests::wait_for;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::Duration;

/// The CSI driver of the tests' volumes.
pub const DRIVER: &str = "hostpath.csi.k8s.io";
/// The class labelled for [`DRIVER`], as Velero's CSI plugin expects.
pub const CLASS: &str = "csi-snapclass";
/// The write grant pvc-snapshot needs.
pub const SNAPSHOT_GRANT: &str = "volumesnapshots.snapshot.storage.k8s.io";

/// The real snapshot-controller of the shared API server, its CRDs
/// installed, and the labelled class. `false`: the test must skip.
pub async fn snapshots(client: &Client) -> bool {
    if iar_apiserver::snapshot_controller::shared().await.is_none() {
        return false;
    }
    snapshot_class(client).await;
    true
}

/// What a live snapshot test needs first: iar's CRDs, the real
/// snapshot-controller with its CRDs, and the labelled class.
pub async fn ready(client: &Client) {
    crate::controller::install_crds(client).await;
    assert!(snapshots(client).await, "the snapshot-controller runs");
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "snapshot.storage.k8s.io".into(),
        version: "v1".into(),
        api_version: "snapshot.storage.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

pub fn snapshot_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &resource("VolumeSnapshot", "volumesnapshots"),
    )
}

pub fn content_api(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &resource("VolumeSnapshotContent", "volumesnapshotcontents"),
    )
}

/// The class pvc-snapshot chooses for [`DRIVER`], created once.
pub(crate) async fn snapshot_class(client: &Client) {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource("VolumeSnapshotClass", "volumesnapshotclasses"),
    );
    let class: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotClass",
        "metadata": {"name": CLASS, "labels": {"velero.io/csi-volumesnapshot-class": "true"}},
        "driver": DRIVER,
        "deletionPolicy": "Delete",
    }))
    .unwrap();
    match api.create(&PostParams::default(), &class).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create VolumeSnapshotClass: {e}"),
    }
}

/// A PVC bound to a CSI PersistentVolume of [`DRIVER`] (no
/// controller-manager runs to bind them: both are written Bound).
pub async fn csi_claim(client: &Client, ns: &str, name: &str, app: &str) {
    let pv_name = format!("pv-{ns}-{name}");
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": pv_name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": DRIVER, "volumeHandle": format!("vol-{ns}-{name}")},
            "claimRef": {"namespace": ns, "name": name},
            "persistentVolumeReclaimPolicy": "Delete",
        }
    }))
    .unwrap();
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await
        .unwrap_or_else(|e| panic!("create pv {pv_name}: {e}"));
    let api = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns);
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "volumeName": pv_name,
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &pvc)
        .await
        .unwrap_or_else(|e| panic!("create pvc {ns}/{name}: {e}"));
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}})),
    )
    .await
    .unwrap_or_else(|e| panic!("bind pvc {ns}/{name}: {e}"));
}

/// Plays the CSI sidecar for snapshot `ns/name`: waits until pvc-snapshot
/// created it and the real controller bound it to a content, writes the
/// content's status as the sidecar does once the driver cut the snapshot,
/// and waits until the controller made the snapshot ready. Returns the
/// content's name.
pub async fn cut_snapshot(client: &Client, ns: &str, name: &str) -> String {
    let snapshots = snapshot_api(client, ns);
    let content = wait_for(
        &format!("VolumeSnapshot {ns}/{name} bound to a content"),
        Duration::from_secs(60),
        || {
            let snapshots = snapshots.clone();
            async move {
                let vs = snapshots
                    .get_opt(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("not created yet")?;
                vs.data["status"]["boundVolumeSnapshotContentName"]
                    .as_str()
                    .map(String::from)
                    .ok_or_else(|| format!("not bound yet: {}", vs.data["status"]))
            }
        },
    )
    .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    content_api(client)
        .patch_status(
            &content,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "readyToUse": true,
                "snapshotHandle": format!("snap-{name}"),
                "creationTime": now,
                "restoreSize": 1_073_741_824_i64,
            }})),
        )
        .await
        .unwrap_or_else(|e| panic!("the sidecar's status on {content}: {e}"));
    wait_for(
        &format!("VolumeSnapshot {ns}/{name} ready"),
        Duration::from_secs(60),
        || {
            let snapshots = snapshots.clone();
            async move {
                let vs = snapshots.get(name).await.map_err(|e| e.to_string())?;
                (vs.data["status"]["readyToUse"] == Value::Bool(true))
                    .then_some(())
                    .ok_or_else(|| format!("not ready yet: {}", vs.data["status"]))
            }
        },
    )
    .await;
    content
}

/// Plays the CSI provisioner for claim `ns/name`, whose data source is a
/// ready VolumeSnapshot: the volume it would provision from that snapshot
/// (a PersistentVolume of [`DRIVER`] whose handle names the snapshot's),
/// bound to the claim as the PV controller binds them. Returns the
/// volume's name.
pub async fn provision_from_snapshot(client: &Client, ns: &str, name: &str) -> String {
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns);
    let claim = claims.get(name).await.unwrap();
    let source = claim
        .spec
        .as_ref()
        .and_then(|s| s.data_source.clone())
        .unwrap_or_else(|| panic!("{ns}/{name} has no data source"));
    let snapshot = snapshot_api(client, ns).get(&source.name).await.unwrap();
    assert_eq!(
        snapshot.data["status"]["readyToUse"], true,
        "a provisioner waits for a ready snapshot: {:?}",
        snapshot.data
    );
    let content = content_api(client)
        .get(
            snapshot.data["status"]["boundVolumeSnapshotContentName"]
                .as_str()
                .unwrap(),
        )
        .await
        .unwrap();
    let handle = content.data["status"]["snapshotHandle"].as_str().unwrap();
    let pv_name = format!("pvc-{}", claim.metadata.uid.as_deref().unwrap());
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": pv_name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": DRIVER, "volumeHandle": format!("vol-from-{handle}")},
            "claimRef": {"namespace": ns, "name": name, "uid": claim.metadata.uid},
            "persistentVolumeReclaimPolicy": "Delete",
        }
    }))
    .unwrap();
    let volumes = Api::<PersistentVolume>::all(client.clone());
    volumes
        .create(&PostParams::default(), &pv)
        .await
        .unwrap_or_else(|e| panic!("create pv {pv_name}: {e}"));
    volumes
        .patch_status(
            &pv_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Bound"}})),
        )
        .await
        .unwrap();
    claims
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"volumeName": pv_name}})),
        )
        .await
        .unwrap_or_else(|e| panic!("bind {ns}/{name} to {pv_name}: {e}"));
    claims
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}})),
        )
        .await
        .unwrap();
    pv_name
}

/// pvc-snapshot with the write grant it needs.
pub fn pvc_snapshot(runtime: &iar::Runtime) -> Plugin {
    let settings = PluginSettings {
        write_grants: iar::cluster::writes::WriteGrants::only(&[SNAPSHOT_GRANT]).unwrap(),
        mutate_grants: iar::cluster::mutate::MutateGrants::only(&["persistentvolumeclaims"])
            .unwrap(),
        ..PluginSettings::default()
    };
    Plugin::from_file(
        runtime,
        std::path::Path::new(iar_tests::artifacts::PVC_SNAPSHOT),
        settings,
    )
    .unwrap_or_else(|e| panic!("loading pvc-snapshot: {e}"))
}

/// pvc-snapshot's settings file beside it in a plugin directory.
pub fn grant_in_dir(plugins: &std::path::Path, name: &str) {
    std::fs::write(
        plugins.join(format!("{name}.yaml")),
        format!("allowWrite: [{SNAPSHOT_GRANT}]\nallowMutate: [persistentvolumeclaims]\n"),
    )
    .unwrap();
}

/// A VolumeSnapshot of claim `pvc`, created as a user would (not through
/// a plugin).
pub async fn create_snapshot(client: &Client, ns: &str, name: &str, pvc: &str) {
    let vs: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"source": {"persistentVolumeClaimName": pvc}, "volumeSnapshotClassName": CLASS},
    }))
    .unwrap();
    snapshot_api(client, ns)
        .create(&PostParams::default(), &vs)
        .await
        .unwrap_or_else(|e| panic!("create volumesnapshot {ns}/{name}: {e}"));
}

/// Waits until snapshot `ns/name` is deleted: gone, or marked deleted and
/// left to the snapshot-controller's finalizers.
pub async fn wait_deleted(client: &Client, ns: &str, name: &str) {
    let snapshots = snapshot_api(client, ns);
    wait_for(
        &format!("VolumeSnapshot {ns}/{name} deleted"),
        Duration::from_secs(60),
        || {
            let snapshots = snapshots.clone();
            async move {
                match snapshots.get_opt(name).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(vs) if vs.metadata.deletion_timestamp.is_some() => Ok(()),
                    Some(vs) => Err(format!("still there: {:?}", vs.metadata.labels)),
                }
            }
        },
    )
    .await
}
