//! The example plugins in plugins/ do what their docs say.

use crate::support::*;
use iar::{ItemRef, ManifestCluster, NoCluster, Phase, ReadGrants};
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
        vec![ItemRef {
            group: "".into(),
            resource: "persistentvolumeclaims".into(),
            namespace: "shop".into(),
            name: "data-web-0".into()
        }]
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
        vec![ItemRef {
            group: "".into(),
            resource: "persistentvolumes".into(),
            namespace: "".into(),
            name: "pv-data-web-0".into()
        }]
    );
    let out = instance
        .execute(&pvc("pending", false), &backup(Phase::Backup), &never_seen)
        .unwrap();
    assert!(out.additional_items.is_empty());
}

fn snapshot_manifest(dir: &std::path::Path, ready: Option<bool>) {
    let file = dir.join("snapshot.yaml");
    match ready {
        None => {
            let _ = std::fs::remove_file(file);
        }
        Some(ready) => std::fs::write(
            file,
            format!(
                "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata:\n  name: data-web-0-nightly\n  namespace: shop\n  creationTimestamp: \"2026-11-30T01:00:00Z\"\nstatus:\n  readyToUse: {ready}\n"
            ),
        )
        .unwrap(),
    }
}

#[test]
fn pvc_snapshot_reports_progress_from_cluster_state() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let plugin = load(&runtime, artifacts::PVC_SNAPSHOT, &[]);
    let cluster = Arc::new(ManifestCluster::new(vec![dir.path().to_path_buf()]));
    let mut instance = plugin.instance(cluster);
    let claim = pvc("data-web-0", true);

    let out = instance
        .execute(&claim, &backup(Phase::Backup), &never_seen)
        .unwrap();
    assert_eq!(out.operation_id.as_deref(), Some("shop/data-web-0-nightly"));
    assert_eq!(out.post_operation_items[0].resource, "volumesnapshots");
    assert_eq!(out.post_operation_items[0].name, "data-web-0-nightly");

    let op = out.operation_id.unwrap();
    let progress =
        |i: &mut iar::PluginInstance| i.progress(&op, &claim.id, &backup(Phase::Backup)).unwrap();

    snapshot_manifest(dir.path(), None);
    let p = progress(&mut instance);
    assert!(!p.completed && p.started.is_none());
    assert!(
        p.description.starts_with("waiting for"),
        "{}",
        p.description
    );

    snapshot_manifest(dir.path(), Some(false));
    let p = progress(&mut instance);
    assert!(!p.completed);
    let started = p.started.expect("started once the VolumeSnapshot exists");
    assert_eq!(
        humantime::format_rfc3339(started).to_string(),
        "2026-11-30T01:00:00Z"
    );

    snapshot_manifest(dir.path(), Some(true));
    let p = progress(&mut instance);
    assert!(p.completed && p.error.is_none());
    assert_eq!((p.n_completed, p.n_total), (1, 1));

    // The finalize pass starts nothing, and unbound claims are skipped.
    let out = instance
        .execute(&claim, &backup(Phase::Finalize), &never_seen)
        .unwrap();
    assert_eq!(out.operation_id, None);
    let out = instance
        .execute(&pvc("pending", false), &backup(Phase::Backup), &never_seen)
        .unwrap();
    assert_eq!(out.operation_id, None);
}

#[test]
fn cluster_reads_obey_the_grants() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    snapshot_manifest(dir.path(), Some(true));
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
        err.to_string().ends_with("retryable: reading volumesnapshots.snapshot.storage.k8s.io is not granted to this plugin"),
        "{err}"
    );
}
