//! The example plugins in plugins/ do what their docs say.

use crate::support::*;
use iar::{ItemRef, ManifestCluster, NoCluster, Phase, ReadGrants};
use serde_json::{Value, json};
use std::sync::Arc;

#[test]
fn labels_adds_configured_labels_and_annotations() {
    let runtime = runtime();
    let plugin = load(
        &runtime,
        artifacts::LABELS,
        &[
            ("labels", "team=payments, tier=gold"),
            ("annotations", "backup.example.com/owner=sre"),
        ],
    );
    assert!(plugin.applies(&pod("web-0")));
    let out = plugin
        .instance(Arc::new(NoCluster))
        .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
        .unwrap();
    let item = out.item.unwrap().into_value();
    assert_eq!(item["metadata"]["labels"]["team"], "payments");
    assert_eq!(item["metadata"]["labels"]["tier"], "gold");
    assert_eq!(
        item["metadata"]["labels"]["app"], "web",
        "existing labels kept"
    );
    assert_eq!(
        item["metadata"]["annotations"]["backup.example.com/owner"],
        "sre"
    );
    assert_eq!(
        item["spec"],
        pod("web-0").value()["spec"],
        "nothing else changes"
    );
}

#[test]
fn labels_rejects_malformed_config_and_narrows_by_resource() {
    let runtime = runtime();
    let plugin = load(&runtime, artifacts::LABELS, &[("labels", "oops")]);
    let err = plugin
        .instance(Arc::new(NoCluster))
        .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin \"iar_plugin_labels\": execute of pods shop/web-0: returned an error: failed: config labels: \"oops\" is not key=value"
    );

    let narrowed = load(&runtime, artifacts::LABELS, &[("resources", "pvc")]);
    assert!(!narrowed.applies(&pod("web-0")));
    assert!(narrowed.applies(&pvc("data", true)));
}

#[test]
fn pod_volumes_names_claims_and_bound_volumes() {
    let runtime = runtime();
    let plugin = load(&runtime, artifacts::POD_VOLUMES, &[]);
    let mut instance = plugin.instance(Arc::new(NoCluster));
    let out = instance
        .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
        .unwrap();
    assert_eq!(out.item, None);
    assert_eq!(
        out.additional_items,
        vec![ItemRef::new(
            "",
            "persistentvolumeclaims",
            "shop",
            "data-web-0"
        )]
    );
    let out = instance
        .execute(
            &pvc("data-web-0", true),
            &backup(Phase::Backup),
            &never_seen,
        )
        .unwrap();
    assert_eq!(
        out.additional_items,
        vec![ItemRef::new("", "persistentvolumes", "", "pv-data-web-0")]
    );
    let out = instance
        .execute(&pvc("pending", false), &backup(Phase::Backup), &never_seen)
        .unwrap();
    assert!(out.additional_items.is_empty());
}

/// A cluster for pvc-snapshot: the claim's CSI volume and the class
/// labelled for its driver, in `dir`.
fn csi_cluster(dir: &std::path::Path) {
    std::fs::write(
        dir.join("pv.yaml"),
        "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: pv-data-web-0}\nspec: {csi: {driver: hostpath.csi.k8s.io, volumeHandle: h-1}}\n",
    )
    .unwrap();
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/cluster/volumesnapshotclass.yaml"),
        dir.join("class.yaml"),
    )
    .unwrap();
}

/// The plugin creates the claim's snapshot in the overlay, labelled for
/// the backup, and reports progress from it as the snapshot controller
/// (played here by editing the file) moves it on; finalize and unbound
/// claims create nothing; cancel deletes the snapshot.
#[test]
fn pvc_snapshot_creates_its_snapshot_and_reports_progress_from_it() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let overlay = tempfile::tempdir().unwrap();
    csi_cluster(dir.path());
    let plugin = pvc_snapshot(&runtime);
    let cluster = Arc::new(
        ManifestCluster::new(vec![dir.path().to_path_buf()])
            .with_overlay(overlay.path().to_path_buf()),
    );
    let mut instance = plugin.instance(cluster);
    let claim = pvc("data-web-0", true);

    let out = instance
        .execute(&claim, &backup(Phase::Backup), &never_seen)
        .unwrap();
    assert_eq!(out.operation_id.as_deref(), Some("shop/data-web-0-nightly"));
    assert_eq!(out.post_operation_items[0].resource, "volumesnapshots");
    assert_eq!(out.post_operation_items[0].name, "data-web-0-nightly");
    let file = overlay
        .path()
        .join("volumesnapshots.snapshot.storage.k8s.io/shop/data-web-0-nightly.yaml");
    let created: Value = iar::yaml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(
        created["spec"]["source"]["persistentVolumeClaimName"],
        "data-web-0"
    );
    assert_eq!(created["spec"]["volumeSnapshotClassName"], "csi-snapclass");
    assert_eq!(
        created["metadata"]["labels"]["velero.io/backup-name"],
        "nightly"
    );
    assert_eq!(
        created["metadata"]["labels"]["iar.dev/backup-uid"],
        backup(Phase::Backup).uid
    );
    let first = instance.take_created();
    assert_eq!(first.len(), 1);

    // A retried execute finds the same snapshot (recorded again, the same
    // uid): nothing more is created.
    let again = instance
        .execute(&claim, &backup(Phase::Backup), &never_seen)
        .unwrap();
    assert_eq!(again.operation_id, out.operation_id);
    assert_eq!(instance.take_created(), first);
    assert_eq!(
        iar_tests::snapshots::snapshot_files(overlay.path()).len(),
        1
    );

    let op = out.operation_id.unwrap();
    let progress =
        |i: &mut iar::PluginInstance| i.progress(&op, &claim.id, &backup(Phase::Backup)).unwrap();
    let p = progress(&mut instance);
    assert!(!p.completed);
    assert!(
        p.started.is_some(),
        "started once the VolumeSnapshot exists"
    );

    let controller = iar_tests::snapshots::SnapshotController::start(overlay.path());
    controller.set("data-web-0-nightly", json!({"readyToUse": true}));
    iar_tests::blocking::wait_until(
        "the snapshot to become ready",
        std::time::Duration::from_secs(10),
        || progress(&mut instance).completed,
    );
    drop(controller);
    let p = progress(&mut instance);
    assert!(p.completed && p.error.is_none());
    assert_eq!((p.n_completed, p.n_total), (1, 1));

    // The finalize pass starts and creates nothing, and unbound claims are
    // skipped.
    let out = instance
        .execute(&claim, &backup(Phase::Finalize), &never_seen)
        .unwrap();
    assert_eq!(out.operation_id, None);
    let out = instance
        .execute(&pvc("pending", false), &backup(Phase::Backup), &never_seen)
        .unwrap();
    assert_eq!(out.operation_id, None);
    assert!(instance.take_created().is_empty());

    // Cancel deletes it.
    instance
        .cancel(&op, &claim.id, &backup(Phase::Backup))
        .unwrap();
    assert!(!file.exists());
}

/// Without the write grant the claim fails, and the error names the rule
/// and the grant to give; nothing is created.
#[test]
fn pvc_snapshot_without_the_write_grant_is_refused_by_rule() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let overlay = tempfile::tempdir().unwrap();
    csi_cluster(dir.path());
    let plugin = load(&runtime, artifacts::PVC_SNAPSHOT, &[]);
    let cluster = Arc::new(
        ManifestCluster::new(vec![dir.path().to_path_buf()])
            .with_overlay(overlay.path().to_path_buf()),
    );
    let err = plugin
        .instance(cluster)
        .execute(
            &pvc("data-web-0", true),
            &backup(Phase::Backup),
            &never_seen,
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("volumesnapshots.snapshot.storage.k8s.io is not in this plugin's allowWrite (rule: write-grant)"),
        "{err}"
    );
    assert!(err.contains("iar_plugin_pvc_snapshot"), "{err}");
    assert!(iar_tests::snapshots::snapshot_files(overlay.path()).is_empty());
}

#[test]
fn cluster_reads_obey_the_grants() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("snapshot.yaml"),
        "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata: {name: data-web-0-nightly, namespace: shop}\nstatus: {readyToUse: true}\n",
    )
    .unwrap();
    let mut settings = settings(&[], iar::Limits::default());
    settings.grants = ReadGrants::only(&["pods"]).unwrap();
    let plugin =
        iar::Plugin::from_file(&runtime, artifacts::PVC_SNAPSHOT.as_ref(), settings).unwrap();
    let mut instance = plugin.instance(Arc::new(ManifestCluster::new(vec![
        dir.path().to_path_buf(),
    ])));
    let err = instance
        .progress(
            "shop/data-web-0-nightly",
            &pvc("data-web-0", true).id,
            &backup(Phase::Backup),
        )
        .unwrap_err();
    assert!(err.is_retryable());
    assert!(
        err.to_string().ends_with("retryable: reading volumesnapshots.snapshot.storage.k8s.io is not granted to this plugin (rule: read-grant)"),
        "{err}"
    );
}
