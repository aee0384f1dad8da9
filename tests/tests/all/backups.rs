//! Whole backups through the controller, with the example plugins and
//! hostile ones, on a directory of manifests playing the cluster.

use crate::support::*;
use iar::backup::object::{BackupObject, BackupPhase, Results};
use iar::operations::{Operation, OperationPhase};
use iar::phases::{BackupRequest, PhaseMachine, Settings};
use iar::store::faulty::FaultyStore;
use iar::store::{BackupFile, BackupStore, tarball};
use iar::{Limits, ManifestCluster, Plugin};
use iar_tests::{store_files, wait_until};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-0\n  namespace: shop\n  labels: {app: web}\nspec:\n  containers: [{name: web, image: nginx}]\n  volumes:\n  - name: data\n    persistentVolumeClaim: {claimName: data-web-0}\n";
const PVC: &str = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data-web-0, namespace: shop}\nspec: {volumeName: pv-data-web-0}\nstatus: {phase: Bound}\n";
const PV: &str = "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: pv-data-web-0}\nspec: {capacity: {storage: 1Gi}, csi: {driver: hostpath.csi.k8s.io, volumeHandle: vol-1}}\n";
/// The class pvc-snapshot chooses for the volume's driver, as Velero does.
const CLASS: &str = "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshotClass\nmetadata: {name: csi-snapclass, labels: {velero.io/csi-volumesnapshot-class: \"true\"}}\ndriver: hostpath.csi.k8s.io\ndeletionPolicy: Retain\n";
const CONFIGMAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-config, namespace: shop}\ndata: {a: b}\n";
/// How long a test waits for a backup to reach a state.
const WAIT: Duration = Duration::from_secs(15);
const OTHER_NS: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: skipped, namespace: other}\ndata: {a: b}\n";

/// A cluster of manifests in a fresh directory, the overlay where the
/// objects plugins create go, and the snapshot controller played on it.
struct Cluster {
    dir: tempfile::TempDir,
    overlay: tempfile::TempDir,
    snapshots: iar_tests::snapshots::SnapshotController,
}

impl Cluster {
    fn new() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        for (file, text) in [
            ("pod.yaml", POD),
            ("pvc.yaml", PVC),
            ("pv.yaml", PV),
            ("cm.yaml", CONFIGMAP),
            ("other.yaml", OTHER_NS),
            ("class.yaml", CLASS),
        ] {
            std::fs::write(dir.path().join(file), text).unwrap();
        }
        let overlay = tempfile::tempdir().unwrap();
        let snapshots = iar_tests::snapshots::SnapshotController::start(overlay.path());
        Cluster {
            dir,
            overlay,
            snapshots,
        }
    }

    /// The cluster as a backup reads and writes it.
    fn reader(&self) -> ManifestCluster {
        ManifestCluster::new(vec![self.path()]).with_overlay(self.overlay.path().to_path_buf())
    }

    fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Plays the snapshot controller: the status the VolumeSnapshot that
    /// pvc-snapshot creates for the PVC in `backup` gets once it exists.
    fn snapshot(&self, backup: &str, status: Value) {
        self.snapshots.set(&format!("data-web-0-{backup}"), status);
    }
}

fn controller(plugins: Vec<Plugin>, store: BackupStore, cluster: &Cluster) -> PhaseMachine {
    let settings = Settings {
        sync_period: Duration::from_millis(50),
        ..Settings::default()
    };
    PhaseMachine::new(plugins, store, Arc::new(cluster.reader()), settings)
}

fn request(name: &str, cluster: &Cluster, spec: Value) -> BackupRequest {
    BackupRequest {
        labels: Default::default(),
        name: name.into(),
        namespace: "velero".into(),
        spec,
        sources: vec![cluster.path()],
        annotations: Default::default(),
    }
}

fn shop_only() -> Value {
    json!({"includedNamespaces": ["shop"]})
}

async fn persisted(store: &BackupStore, name: &str) -> (BackupObject, Vec<Operation>, Results) {
    let object = store
        .get_json(name, BackupFile::Metadata)
        .await
        .unwrap()
        .expect("velero-backup.json");
    let ops = store
        .get_json(name, BackupFile::ItemOperations)
        .await
        .unwrap()
        .expect("itemoperations");
    let results = store
        .get_json(name, BackupFile::Results)
        .await
        .unwrap()
        .unwrap_or_default();
    (object, ops, results)
}

async fn contents(store: &BackupStore, name: &str) -> Vec<(String, Vec<u8>)> {
    let bytes = store
        .get(name, BackupFile::Contents)
        .await
        .unwrap()
        .expect("contents");
    tarball::read(&bytes).unwrap()
}

fn entry(entries: &[(String, Vec<u8>)], path: &str) -> Value {
    let (_, data) = entries.iter().find(|(p, _)| p == path).unwrap_or_else(|| {
        panic!(
            "{path} not in {:?}",
            entries.iter().map(|e| &e.0).collect::<Vec<_>>()
        )
    });
    serde_json::from_slice(data).unwrap()
}

async fn log_lines(store: &BackupStore, name: &str) -> Vec<String> {
    let bytes = store
        .get(name, BackupFile::Logs)
        .await
        .unwrap()
        .expect("logs");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
        .unwrap();
    text.lines().map(String::from).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_whose_operations_complete_ends_completed() {
    let cluster = Cluster::new();
    cluster.snapshot(
        "nightly",
        json!({"readyToUse": true, "creationTime": "2026-11-30T01:00:04Z"}),
    );
    let (_store_dir, store) = store();
    let c = controller(example_plugins(), store.clone(), &cluster);
    let object = c
        .run_backup(request("nightly", &cluster, shop_only()))
        .await
        .unwrap();
    assert_eq!(object.status.phase, BackupPhase::Completed);

    let (persisted_object, ops, results) = persisted(&store, "nightly").await;
    assert_eq!(persisted_object, object);
    assert_eq!(results.errors.count(), 0, "{results:?}");
    assert_eq!(ops.len(), 1);
    assert!(
        ops.iter()
            .all(|o| o.status.phase == OperationPhase::Completed)
    );
    assert_eq!(ops[0].spec.backup_item_action, "iar_plugin_pvc_snapshot");
    assert_eq!(object.status.backup_item_operations_completed, 1);

    let entries = contents(&store, "nightly").await;
    // The spec's filter kept "other" out; the PV came in as an additional item.
    let paths: Vec<&str> = entries.iter().map(|(p, _)| p.as_str()).collect();
    assert!(
        paths.contains(&"resources/persistentvolumes/cluster/pv-data-web-0.json"),
        "{paths:?}"
    );
    assert!(!paths.iter().any(|p| p.contains("/other/")), "{paths:?}");
    let pod = entry(&entries, "resources/pods/namespaces/shop/web-0.json");
    assert_eq!(pod["metadata"]["labels"]["backed-up-by"], "iar");
    // Finalize appended the post-operation item in its final state.
    let snap = entry(
        &entries,
        "resources/volumesnapshots.snapshot.storage.k8s.io/namespaces/shop/data-web-0-nightly.json",
    );
    assert_eq!(snap["status"]["readyToUse"], true);
    assert_eq!(
        snap["metadata"]["labels"]["backed-up-by"], "iar",
        "finalize ran the actions on it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_a_manifest_plays_the_snapshot_controller() {
    let cluster = Cluster::new();
    let (_store_dir, store) = store();
    let c = Arc::new(controller(example_plugins(), store.clone(), &cluster));
    let task = tokio::spawn({
        let c = c.clone();
        let req = request("nightly", &cluster, shop_only());
        async move { c.run_backup(req).await }
    });
    // Wait until the operation is recorded, then create the snapshot, not ready.
    wait_until("the operation recorded", WAIT, || async { matches!(store.get_json::<Vec<Operation>>("nightly", BackupFile::ItemOperations).await, Ok(Some(ops)) if !ops.is_empty()) }).await;
    cluster.snapshot("nightly", json!({"readyToUse": false}));
    wait_until("the operation InProgress", WAIT, || async {
        let ops: Vec<Operation> = store
            .get_json("nightly", BackupFile::ItemOperations)
            .await
            .unwrap()
            .unwrap();
        ops[0].status.phase == OperationPhase::InProgress
    })
    .await;
    let (object, _, _) = persisted(&store, "nightly").await;
    assert_eq!(object.status.phase, BackupPhase::WaitingForPluginOperations);
    cluster.snapshot("nightly", json!({"readyToUse": true}));
    let object = task.await.unwrap().unwrap();
    assert_eq!(object.status.phase, BackupPhase::Completed);
    let (_, ops, _) = persisted(&store, "nightly").await;
    assert_eq!(ops[0].status.phase, OperationPhase::Completed);
    assert!(ops[0].status.started.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failed_operation_ends_partially_failed() {
    let cluster = Cluster::new();
    cluster.snapshot(
        "nightly",
        json!({"readyToUse": false, "error": {"message": "quota exceeded"}}),
    );
    let (_store_dir, store) = store();
    let c = controller(example_plugins(), store.clone(), &cluster);
    let object = c
        .run_backup(request("nightly", &cluster, shop_only()))
        .await
        .unwrap();
    assert_eq!(object.status.phase, BackupPhase::PartiallyFailed);
    let (_, ops, results) = persisted(&store, "nightly").await;
    assert_eq!(ops[0].status.phase, OperationPhase::Failed);
    assert_eq!(ops[0].status.error, "quota exceeded");
    assert_eq!(object.status.backup_item_operations_failed, 1);
    assert_eq!(object.status.errors, 1);
    let errors: Vec<&String> = results.errors.all().collect();
    assert!(
        errors[0].contains("plugin \"iar_plugin_pvc_snapshot\"")
            && errors[0].contains("quota exceeded"),
        "{errors:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_operation_is_cancelled_once_and_counts_as_an_error() {
    let cluster = Cluster::new();
    let (_store_dir, store) = store();
    // No VolumeSnapshot ever appears: the snapshot operation never ends.
    let c = controller(example_plugins(), store.clone(), &cluster);
    let spec = json!({"includedNamespaces": ["shop"], "itemOperationTimeout": "300ms"});
    let object = c.run_backup(request("slow", &cluster, spec)).await.unwrap();
    assert_eq!(object.status.phase, BackupPhase::PartiallyFailed);
    assert_eq!(object.status.errors, 1, "the timeout counts in the errors");
    assert_eq!(object.status.backup_item_operations_failed, 1);
    let (_, ops, results) = persisted(&store, "slow").await;
    assert_eq!(ops[0].status.phase, OperationPhase::Failed);
    assert!(
        ops[0]
            .status
            .error
            .starts_with("asynchronous action timed out after 300ms"),
        "{}",
        ops[0].status.error
    );
    assert!(ops[0].status.error.ends_with("cancel requested"));
    assert!(results.errors.all().next().unwrap().contains("timed out"));
    let cancels = log_lines(&store, "slow")
        .await
        .iter()
        .filter(|l| l.contains("backup gave up on"))
        .count();
    assert_eq!(cancels, 1, "cancel is called exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_started_in_finalize_fails_the_item() {
    let cluster = Cluster::new();
    let (_store_dir, store) = store();
    let runtime = runtime();
    // Starts an operation in every phase (post-operation item: the pod
    // itself); its progress reports completion at once.
    let hostile = load(
        &runtime,
        artifacts::HOSTILE,
        &[("behavior", "operation"), ("progress", "complete")],
    );
    let c = controller(vec![hostile], store.clone(), &cluster);
    let spec = json!({"includedNamespaces": ["shop"], "includedResources": ["pods"]});
    let object = c.run_backup(request("fin", &cluster, spec)).await.unwrap();
    assert_eq!(object.status.phase, BackupPhase::PartiallyFailed);
    let (_, ops, results) = persisted(&store, "fin").await;
    assert_eq!(
        ops.len(),
        1,
        "the finalize-phase operation was never recorded"
    );
    assert_eq!(ops[0].status.phase, OperationPhase::Completed);
    let errors: Vec<&String> = results.errors.all().collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("(rule: no-operation-in-finalize)"),
        "{errors:?}"
    );
    assert_eq!(object.status.errors, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_without_operations_goes_straight_to_finalizing() {
    let cluster = Cluster::new();
    let (_store_dir, store) = store();
    let runtime = runtime();
    let c = controller(
        vec![load(&runtime, artifacts::LABELS, &[("labels", "x=y")])],
        store.clone(),
        &cluster,
    );
    let object = c
        .run_backup(request("quick", &cluster, json!({})))
        .await
        .unwrap();
    assert_eq!(object.status.phase, BackupPhase::Completed);
    // The pod, claim, volume, ConfigMap, snapshot class and namespace.
    assert_eq!(object.status.progress.items_backed_up, 6);
    let phases: Vec<String> = log_lines(&store, "quick")
        .await
        .iter()
        .filter_map(|l| l.split("phase ").nth(1).map(String::from))
        .collect();
    assert_eq!(phases, ["New", "InProgress", "Finalizing", "Completed"]);
    let (_, ops, _) = persisted(&store, "quick").await;
    assert!(ops.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_found_in_progress_after_a_restart_is_failed() {
    let cluster = Cluster::new();
    let (_store_dir, store) = store();
    let mut object = BackupObject::new("crashed", "velero", "uid-1", json!({}));
    object.status.phase = BackupPhase::InProgress;
    store
        .put_json("crashed", BackupFile::Metadata, &object)
        .await
        .unwrap();
    let c = controller(example_plugins(), store.clone(), &cluster);
    let resumed = c.resume("crashed").await.unwrap();
    assert_eq!(resumed.status.phase, BackupPhase::Failed);
    assert!(
        resumed
            .status
            .failure_reason
            .starts_with("found in phase InProgress by a process taking it over")
    );
    let persisted_object: BackupObject = store
        .get_json("crashed", BackupFile::Metadata)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(persisted_object.status.phase, BackupPhase::Failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_backup_resumes_from_its_persisted_operations() {
    let cluster = Cluster::new();
    let (_store_dir, store) = store();
    let mut c = controller(example_plugins(), store.clone(), &cluster);
    // The dead run's lease must expire before the restart may take over.
    c.settings.lease_duration = Duration::from_millis(300);
    let c = Arc::new(c);
    let req = request("nightly", &cluster, shop_only());
    let running = tokio::spawn({
        let c = c.clone();
        async move { c.run_backup(req).await }
    });
    wait_until("nightly waiting", WAIT, || async { matches!(store.get_json::<BackupObject>("nightly", BackupFile::Metadata).await, Ok(Some(o)) if o.status.phase == BackupPhase::WaitingForPluginOperations) }).await;
    // The process "dies": the task is dropped mid-wait; its map is gone.
    running.abort();
    let _ = running.await;
    let (_, before, _) = persisted(&store, "nightly").await;

    cluster.snapshot("nightly", json!({"readyToUse": true}));
    let fresh = controller(example_plugins(), store.clone(), &cluster);
    wait_for_lease_expiry(&store, "nightly").await;
    let object = fresh.resume("nightly").await.unwrap();
    assert_eq!(object.status.phase, BackupPhase::Completed);
    let (_, after, _) = persisted(&store, "nightly").await;
    assert_eq!(
        after[0].status.created, before[0].status.created,
        "timeouts still count from the original creation"
    );
    assert_eq!(after[0].status.phase, OperationPhase::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalizing_backup_resumes_by_finalizing() {
    let cluster = Cluster::new();
    cluster.snapshot("nightly", json!({"readyToUse": false}));
    let (_store_dir, store) = store();
    let c = controller(example_plugins(), store.clone(), &cluster);
    cluster.snapshot("nightly", json!({"readyToUse": true}));
    c.run_backup(request("nightly", &cluster, shop_only()))
        .await
        .unwrap();
    // Roll the persisted phase back to Finalizing, as if the process died there
    // after the snapshot changed again.
    let mut object: BackupObject = store
        .get_json("nightly", BackupFile::Metadata)
        .await
        .unwrap()
        .unwrap();
    object.status.phase = BackupPhase::Finalizing;
    // Written as the process that died would have: this one gave the
    // lease back, and its fence refuses its own late writes.
    store
        .as_another_process()
        .put_json("nightly", BackupFile::Metadata, &object)
        .await
        .unwrap();
    cluster.snapshot("nightly", json!({"readyToUse": true, "restoreSize": "2Gi"}));
    let before = contents(&store, "nightly").await;
    let raw = |store: BackupStore| async move {
        store
            .get("nightly", BackupFile::Contents)
            .await
            .unwrap()
            .unwrap()
    };
    let raw_before = raw(store.clone()).await;
    // The items finalize does not touch sit in the tarball's first gzip
    // member, which finalize copies without decompressing it.
    let head = tarball::head_member(&raw_before).expect("a split tarball");

    let object = controller(example_plugins(), store.clone(), &cluster)
        .resume("nightly")
        .await
        .unwrap();
    assert_eq!(object.status.phase, BackupPhase::Completed);
    let after = contents(&store, "nightly").await;
    let snap_path =
        "resources/volumesnapshots.snapshot.storage.k8s.io/namespaces/shop/data-web-0-nightly.json";
    // Both copies of it: the plain path and the one under its version.
    let versioned = "resources/volumesnapshots.snapshot.storage.k8s.io/v1-preferredversion/namespaces/shop/data-web-0-nightly.json";
    assert_eq!(entry(&after, snap_path)["status"]["restoreSize"], "2Gi");
    assert_eq!(entry(&after, versioned)["status"]["restoreSize"], "2Gi");
    assert_eq!(raw(store.clone()).await[..head], raw_before[..head]);
    // Every other entry is kept byte for byte, in place.
    assert_eq!(before.len(), after.len());
    for ((p1, d1), (p2, d2)) in before.iter().zip(&after) {
        assert_eq!(p1, p2);
        if p1 != snap_path && p1 != versioned {
            assert_eq!(d1, d2, "{p1} changed");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_loses_nothing_already_persisted_and_reports_the_error() {
    let cluster = Cluster::new();
    let store_dir = tempfile::tempdir().unwrap();
    let local = object_store_local(store_dir.path());
    let faulty = Arc::new(FaultyStore::new(local));
    let store = BackupStore::from_object_store(faulty.clone(), "faulty://test");
    // The probe of conditional creates (2 puts), the lease and the
    // conditional create of the object, New and InProgress (3 writes each),
    // then the store fails: recording Failed fails too, and so does
    // releasing the lease.
    faulty.fail_after(10);
    let mut c = controller(example_plugins(), store.clone(), &cluster);
    c.settings.lease_duration = Duration::from_millis(300);
    let err = c
        .run_backup(request("nightly", &cluster, shop_only()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    let object: BackupObject = store
        .get_json("nightly", BackupFile::Metadata)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        object.status.phase,
        BackupPhase::InProgress,
        "the last good version is intact"
    );
    // A restart, once the dead run's lease has expired, marks it Failed.
    faulty.fail_puts(false);
    let healthy = open_store(store_dir.path());
    wait_for_lease_expiry(&healthy, "nightly").await;
    let resumed = controller(example_plugins(), healthy, &cluster)
        .resume("nightly")
        .await
        .unwrap();
    assert_eq!(resumed.status.phase, BackupPhase::Failed);
}

fn object_store_local(dir: &Path) -> Arc<dyn object_store::ObjectStore> {
    Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_failing_an_item_ends_partially_failed_and_keeps_the_rest() {
    let cluster = Cluster::new();
    let (_store_dir, store) = store();
    let runtime = runtime();
    let limits = Limits {
        deadline: Duration::from_millis(100),
        ..Limits::default()
    };
    let looping = load_with(
        &runtime,
        artifacts::HOSTILE,
        &[("behavior", "loop")],
        limits,
    );
    let labels = load(&runtime, artifacts::LABELS, &[("labels", "x=y")]);
    // The looping plugin applies to everything; every item fails on it.
    let c = controller(vec![labels, looping], store.clone(), &cluster);
    let spec = json!({"includedNamespaces": ["shop"], "includedResources": ["configmaps"]});
    let object = c
        .run_backup(request("loopy", &cluster, spec))
        .await
        .unwrap();
    assert_eq!(object.status.phase, BackupPhase::PartiallyFailed);
    let (_, _, results) = persisted(&store, "loopy").await;
    let errors: Vec<&String> = results.errors.all().collect();
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].contains("(rule: cpu-deadline)")
            && errors[0].contains("configmaps shop/web-config"),
        "{errors:?}"
    );
    assert_eq!(
        results.errors.namespaces["shop"].len(),
        1,
        "filed under the item's namespace"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_backup_of_the_same_name_is_refused() {
    let cluster = Cluster::new();
    let (_store_dir, store) = store();
    let runtime = runtime();
    let c = controller(
        vec![load(&runtime, artifacts::LABELS, &[])],
        store.clone(),
        &cluster,
    );
    c.run_backup(request("once", &cluster, json!({})))
        .await
        .unwrap();
    let before = store.get("once", BackupFile::Contents).await.unwrap();
    let err = c
        .run_backup(request("once", &cluster, json!({})))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("backup \"once\" already exists in "),
        "{err}"
    );
    assert_eq!(
        store.get("once", BackupFile::Contents).await.unwrap(),
        before,
        "the first backup is untouched"
    );
}

/// A backup name the store cannot hold every file of is refused at once,
/// before any lease is taken or anything written, with an error that says
/// why and what the limit is: over Kubernetes' 253 characters, or short
/// enough for Kubernetes but too long for a file name of the backup's
/// (its lease file, `<name>-lease-<20 digits>.json`, over 255 bytes with
/// the local store's staging suffix). The
/// longest name allowed backs up. Before, the lease's create failed with
/// the file system's "File name too long" (the controller retried it every
/// 5 s for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_name_too_long_for_the_store_is_refused_with_the_limit() {
    let cluster = Cluster::new();
    let (store_dir, store) = store();
    let runtime = runtime();
    let c = controller(
        vec![load(&runtime, artifacts::LABELS, &[])],
        store.clone(),
        &cluster,
    );
    for (len, says) in [
        (
            254,
            "254 bytes long, over the 253 Kubernetes allows an object name (rule: name-length)",
        ),
        (
            240,
            "its lease file name (aaaaaaaaaaaaaaaaaaaa…-lease-<generation>.json) would be 272 bytes, over the 250 bytes a store file name may have (255, less the `#<n>` of a local store's staged write); a backup name may have at most 218 bytes (rule: name-length)",
        ),
        (
            209,
            "would have a name of 251 bytes, over the 250 bytes a store file name may have (255, less the `#<n>` of a local store's staged write); a backup name may have at most 208 bytes (rule: name-length)",
        ),
    ] {
        let name = "a".repeat(len);
        let err = c
            .run_backup(request(&name, &cluster, json!({})))
            .await
            .expect_err("refused");
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("invalid backup name \"{name}\": "))
                && message.ends_with(says),
            "{len}: {message}"
        );
        assert!(
            !store_dir.path().join("backups").join(&name).exists(),
            "{len}: nothing is written"
        );
    }
    let longest = "b".repeat(208);
    let object = c
        .run_backup(request(&longest, &cluster, json!({})))
        .await
        .unwrap();
    assert_eq!(object.status.phase, BackupPhase::Completed);
}

/// Any error once a backup is InProgress ends it Failed with the reason in
/// the store, rather than leaving it InProgress for `resume` to guess at:
/// here a store that refuses the contents tarball, and item sources that
/// cannot be read. Before, both returned the error and left InProgress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_after_in_progress_ends_the_backup_failed_with_the_reason() {
    let cluster = Cluster::new();
    let store_dir = tempfile::tempdir().unwrap();
    let faulty = Arc::new(FaultyStore::new(object_store_local(store_dir.path())));
    let store = BackupStore::from_object_store(faulty.clone(), "faulty://test");
    faulty.fail_puts_to("nightly.tar.gz");
    let c = controller(example_plugins(), store.clone(), &cluster);
    let err = c
        .run_backup(request("nightly", &cluster, shop_only()))
        .await
        .unwrap_err();
    let object: BackupObject = store
        .get_json("nightly", BackupFile::Metadata)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(object.status.phase, BackupPhase::Failed, "{err}");
    assert_eq!(object.status.failure_reason, err.to_string());
    assert!(
        object.status.failure_reason.contains("nightly.tar.gz")
            && object.status.failure_reason.contains("injected failure"),
        "{}",
        object.status.failure_reason
    );
    assert!(object.status.completion_timestamp.is_some());
    assert!(
        log_lines(&store, "nightly")
            .await
            .iter()
            .any(|l| l.contains("backup failed: ") && l.contains("nightly.tar.gz")),
        "the log says why"
    );

    let mut req = request("unreadable", &cluster, json!({}));
    req.sources = vec![cluster.path().join("no-such-directory")];
    let err = c.run_backup(req).await.unwrap_err();
    let object: BackupObject = store
        .get_json("unreadable", BackupFile::Metadata)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(object.status.phase, BackupPhase::Failed, "{err}");
    assert!(
        object.status.failure_reason.contains("reading items")
            && object.status.failure_reason.contains("no-such-directory"),
        "{}",
        object.status.failure_reason
    );
    assert_eq!(c.tracked_backups().await, Vec::<String>::new());
}

/// A cluster whose reader panics on one object: host code on a worker
/// thread that panics, as a bug in a cluster client would.
struct PanickingCluster {
    inner: ManifestCluster,
    on: &'static str,
}

impl iar::cluster::ClusterWriter for PanickingCluster {}

impl iar::ClusterReader for PanickingCluster {
    fn get(&self, id: &iar::ItemRef) -> Result<Option<Value>, iar::cluster::ClusterError> {
        if id.name == self.on {
            panic!("cluster reader bug on {id}");
        }
        self.inner.get(id)
    }
}

/// A worker thread that panics (here in the cluster read of an additional
/// item) fails the item it was on, with an error naming it, and the pass
/// ends: the other items are backed up. A panic while forming item blocks
/// is an error too, not the end of the backup. Before, the panicking worker left
/// the item counted busy and the other workers waited for it for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_worker_fails_its_item_and_the_pass_ends() {
    let cluster = Cluster::new();
    cluster.snapshot("panicky", json!({"readyToUse": true}));
    let (_store_dir, store) = store();
    let reader = PanickingCluster {
        inner: ManifestCluster::new(vec![cluster.path()]),
        // The PVC the pod names: not selected by the spec, so read.
        on: "data-web-0",
    };
    let settings = Settings {
        sync_period: Duration::from_millis(50),
        workers: 4,
        ..Settings::default()
    };
    let c = PhaseMachine::new(example_plugins(), store.clone(), Arc::new(reader), settings);
    let spec = json!({"includedNamespaces": ["shop"], "includedResources": ["pods", "configmaps"]});
    let object = tokio::time::timeout(
        Duration::from_secs(60),
        c.run_backup(request("panicky", &cluster, spec)),
    )
    .await
    .expect("the pass ended")
    .unwrap();
    assert_eq!(object.status.phase, BackupPhase::PartiallyFailed);
    let (_, _, results) = persisted(&store, "panicky").await;
    let errors: Vec<&String> = results.errors.all().collect();
    // Two reads of the PVC panic: forming the pod's item block (the PVC is
    // left out of it) and following the pod-volumes plugin's additional
    // item (which fails the pod).
    assert_eq!(errors.len(), 2, "{errors:?}");
    let panicked = |e: &&&String| {
        e.contains("panicked") && e.contains("cluster reader bug") && e.contains("host-panic")
    };
    assert!(
        errors
            .iter()
            .any(|e| panicked(&e) && e.starts_with("item pods shop/web-0")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| panicked(&e) && e.starts_with("item block of pods shop/web-0")),
        "{errors:?}"
    );
    let entries = contents(&store, "panicky").await;
    entry(
        &entries,
        "resources/configmaps/namespaces/shop/web-config.json",
    );
    assert!(
        !entries.iter().any(|(p, _)| p.contains("pods/")),
        "the failed item is not stored"
    );
}

/// A results or log file that cannot be read is set aside, whole, and
/// never overwritten by the shorter one `resume` writes; resume carries on
/// and says so. Before, a corrupt results file made resume fail for good
/// and a corrupt log was silently replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_results_and_logs_are_kept_aside_on_resume() {
    let cluster = Cluster::new();
    cluster.snapshot("nightly", json!({"readyToUse": true}));
    let (store_dir, store) = store();
    controller(example_plugins(), store.clone(), &cluster)
        .run_backup(request("nightly", &cluster, shop_only()))
        .await
        .unwrap();
    let mut object: BackupObject = store
        .get_json("nightly", BackupFile::Metadata)
        .await
        .unwrap()
        .unwrap();
    object.status.phase = BackupPhase::Finalizing;
    // Written as the process that died would have: this one gave the
    // lease back, and its fence refuses its own late writes.
    store
        .as_another_process()
        .put_json("nightly", BackupFile::Metadata, &object)
        .await
        .unwrap();
    let garbage_results = b"\x1f\x8b not really gzip".repeat(50);
    let garbage_logs = b"plain text, no gzip: an old log".repeat(50);
    let dir = store_dir.path().join("backups/nightly");
    std::fs::write(dir.join("nightly-results.gz"), &garbage_results).unwrap();
    std::fs::write(dir.join("nightly-logs.gz"), &garbage_logs).unwrap();

    let object = controller(example_plugins(), store.clone(), &cluster)
        .resume("nightly")
        .await
        .unwrap();
    assert_eq!(object.status.phase, BackupPhase::Completed);
    let kept = |prefix: &str| -> Vec<u8> {
        let found: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(prefix))
            .collect();
        assert_eq!(found.len(), 1, "{prefix}: {found:?}");
        std::fs::read(dir.join(&found[0])).unwrap()
    };
    assert_eq!(kept("nightly-results.gz.corrupt-"), garbage_results);
    assert_eq!(kept("nightly-logs.gz.corrupt-"), garbage_logs);
    let (_, _, results) = persisted(&store, "nightly").await;
    let warnings: Vec<&String> = results.warnings.all().collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("nightly-results.gz could not be read")),
        "{warnings:?}"
    );
    let lines = log_lines(&store, "nightly").await;
    assert!(
        lines
            .iter()
            .any(|l| l.contains("nightly-logs.gz could not be read")),
        "{lines:?}"
    );
}

/// A long-running process forgets each backup when it ends, whatever the
/// outcome: its operations-map entry and its log lines are gone. Before,
/// both grew by one backup for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_forgets_finished_backups() {
    let cluster = Cluster::new();
    let (_store_dir, store) = store();
    let c = controller(example_plugins(), store.clone(), &cluster);
    for i in 0..5 {
        let name = format!("seq-{i}");
        cluster.snapshot(&name, json!({"readyToUse": true}));
        let object = c
            .run_backup(request(&name, &cluster, shop_only()))
            .await
            .unwrap();
        assert_eq!(object.status.phase, BackupPhase::Completed);
        assert_eq!(c.tracked_backups().await, Vec::<String>::new(), "{name}");
    }
    // A refused one and a failed one are forgotten too.
    c.run_backup(request("seq-0", &cluster, shop_only()))
        .await
        .unwrap_err();
    let mut req = request("broken", &cluster, json!({}));
    req.sources = vec![cluster.path().join("missing")];
    c.run_backup(req).await.unwrap_err();
    assert_eq!(c.tracked_backups().await, Vec::<String>::new());
    assert!(c.operations.backups().is_empty());
}

/// Resident set size in pages, from /proc/self/statm.
fn rss_pages() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    statm.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// 1,000 sequential backups in one controller: prints the RSS growth from
/// backup 100 to backup 1,000 and checks nothing is retained per backup.
/// Slow; run it on a quiet machine:
/// `cargo test --release -p iar-tests --test all -- --ignored --nocapture backups::memory_stays_flat`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn memory_stays_flat_over_a_thousand_backups() {
    let cluster = Cluster::new();
    let (_store_dir, store) = store();
    let runtime = runtime();
    let c = controller(
        vec![load(&runtime, artifacts::LABELS, &[("labels", "x=y")])],
        store.clone(),
        &cluster,
    );
    let page = 4096;
    let mut at_100 = 0;
    for i in 0..1000 {
        let object = c
            .run_backup(request(&format!("m-{i}"), &cluster, shop_only()))
            .await
            .unwrap();
        assert_eq!(object.status.phase, BackupPhase::Completed);
        if i == 99 {
            at_100 = rss_pages();
        }
    }
    let at_1000 = rss_pages();
    assert!(c.tracked_backups().await.is_empty());
    let growth = at_1000 as i64 - at_100 as i64;
    eprintln!(
        "RSS after 100 backups: {} KiB, after 1000: {} KiB, growth {} KiB ({:.1} KiB per backup)",
        at_100 * page / 1024,
        at_1000 * page / 1024,
        growth * page as i64 / 1024,
        growth as f64 * page as f64 / 1024.0 / 900.0
    );
}

/// A plugin naming an additional item cannot widen the backup: an item
/// whose namespace or resource the spec excludes, or which is labelled
/// `velero.io/exclude-from-backup=true`, stays out (no plugin sees it
/// either), and the backup's log says which and why. A listed item with
/// the label stays out too. Cluster-scoped additional items (a PVC's PV)
/// still come in, as in Velero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn additional_items_obey_the_backups_filters_and_the_exclude_label() {
    let cluster = Cluster::new();
    let write = |file: &str, text: &str| std::fs::write(cluster.path().join(file), text).unwrap();
    write(
        "secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: topsecret, namespace: kube-system}\ndata: {token: c2VjcmV0}\n",
    );
    write(
        "shop-secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: shop}\ndata: {token: c2VjcmV0}\n",
    );
    write(
        "excluded.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: private, namespace: shop, labels: {velero.io/exclude-from-backup: \"true\"}}\ndata: {a: b}\n",
    );
    let runtime = runtime();
    let (_store_dir, store) = store();
    for (name, namespace, resource, item, spec, why) in [
        (
            "other-namespace",
            "kube-system",
            "secrets",
            "topsecret",
            json!({"includedNamespaces": ["shop"]}),
            "its namespace kube-system is not included",
        ),
        (
            "excluded-resource",
            "shop",
            "secrets",
            "db",
            json!({"includedNamespaces": ["shop"], "excludedResources": ["secrets"]}),
            "its resource secrets is not included",
        ),
        (
            "excluded-label",
            "shop",
            "configmaps",
            "private",
            json!({"includedNamespaces": ["shop"]}),
            "it is labelled velero.io/exclude-from-backup=true",
        ),
    ] {
        let naming = load(
            &runtime,
            artifacts::HOSTILE,
            &[
                ("behavior", "additional-id"),
                ("id-resource", resource),
                ("id-namespace", namespace),
                ("id-name", item),
            ],
        );
        let labels = load(&runtime, artifacts::LABELS, &[("labels", "seen=yes")]);
        let c = controller(vec![naming, labels], store.clone(), &cluster);
        let object = c.run_backup(request(name, &cluster, spec)).await.unwrap();
        assert_eq!(object.status.phase, BackupPhase::Completed, "{name}");
        let (_, _, results) = persisted(&store, name).await;
        assert_eq!(results.errors.count(), 0, "{name}: {results:?}");
        let entries = contents(&store, name).await;
        let paths: Vec<&str> = entries.iter().map(|(p, _)| p.as_str()).collect();
        assert!(
            !paths.iter().any(|p| p.ends_with(&format!("/{item}.json"))),
            "{name}: {paths:?}"
        );
        assert!(
            paths.contains(&"resources/configmaps/namespaces/shop/web-config.json"),
            "{name}: the rest is backed up: {paths:?}"
        );
        let logs = log_lines(&store, name).await;
        let left_out = logs
            .iter()
            .filter(|l| {
                l.contains(&format!("additional item {resource}"))
                    && l.contains("left out of the backup")
            })
            .collect::<Vec<_>>();
        assert_eq!(left_out.len(), 1, "{name}: {logs:#?}");
        assert!(left_out[0].contains(why), "{name}: {}", left_out[0]);
    }
}

/// A plugin that logs its per-call maximum (1,000 lines of 4 KiB) on every
/// item keeps only its first 1,000 and last 100 lines in the backup's log,
/// with one line saying how many were dropped; the backup still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_plugin_keeps_a_bounded_log() {
    let cluster = Cluster::new();
    let (_store_dir, store) = store();
    let runtime = runtime();
    let flood = load(&runtime, artifacts::HOSTILE, &[("behavior", "log-flood")]);
    let c = controller(vec![flood], store.clone(), &cluster);
    let object = c
        .run_backup(request("flooded", &cluster, shop_only()))
        .await
        .unwrap();
    assert_eq!(object.status.phase, BackupPhase::Completed);
    let logs = log_lines(&store, "flooded").await;
    let kept = logs
        .iter()
        .filter(|l| l.contains("plugin iar_guest_hostile: info: flood "))
        .count();
    assert_eq!(kept, 1100, "first 1,000 and last 100");
    let summary: Vec<_> = logs
        .iter()
        .filter(|l| l.contains("(rule: log-bound)"))
        .collect();
    assert_eq!(summary.len(), 1, "{summary:?}");
    // Pod, PVC and ConfigMap in shop: 3,000 lines.
    assert!(
        summary[0].contains("logged 3000 lines") && summary[0].contains("1900 were dropped"),
        "{}",
        summary[0]
    );
}

/// A backup taken over after a restart runs the plugins it started with,
/// name and digest: a different component loaded under the same name (an
/// update, or another ConfigMap that claimed the name) does not inherit its
/// operations. They fail, naming the rule, and the log names both digests;
/// the impostor is never asked for their progress (it would have said
/// "completed").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_over_backup_keeps_its_plugin_set_and_no_impostor_inherits_it() {
    let cluster = Cluster::new();
    let (_store_dir, store) = store();
    let mut c = controller(example_plugins(), store.clone(), &cluster);
    c.settings.lease_duration = Duration::from_millis(300);
    let c = Arc::new(c);
    let req = request("pinned", &cluster, shop_only());
    let running = tokio::spawn({
        let c = c.clone();
        async move { c.run_backup(req).await }
    });
    wait_until("pinned waiting", WAIT, || async { matches!(store.get_json::<BackupObject>("pinned", BackupFile::Metadata).await, Ok(Some(o)) if o.status.phase == BackupPhase::WaitingForPluginOperations) }).await;
    running.abort();
    let _ = running.await;

    let runtime = runtime();
    let impostor = iar::Plugin::from_bytes(
        &runtime,
        "iar_plugin_pvc_snapshot",
        &std::fs::read(artifacts::HOSTILE).unwrap(),
        settings(&[("progress", "complete")], Limits::default()),
    )
    .unwrap();
    let mut plugins = example_plugins();
    plugins.retain(|p| p.name() != "iar_plugin_pvc_snapshot");
    plugins.push(impostor.clone());
    let fresh = controller(plugins, store.clone(), &cluster);
    wait_for_lease_expiry(&store, "pinned").await;
    let object = fresh.resume("pinned").await.unwrap();
    assert_eq!(object.status.phase, BackupPhase::PartiallyFailed);
    let (_, ops, _) = persisted(&store, "pinned").await;
    assert_eq!(ops[0].status.phase, OperationPhase::Failed);
    assert!(
        ops[0].status.error.contains("(rule: pinned-plugin-set)"),
        "{}",
        ops[0].status.error
    );
    let logs = log_lines(&store, "pinned").await;
    assert!(
        logs.iter().any(|l| l.contains("rule: pinned-plugin-set")
            && l.contains(&format!("sha256:{}", impostor.digest()))),
        "{logs:#?}"
    );
}

/// Fencing: a holder whose lease renewal hangs keeps working (its poll
/// loop runs on) past its lease, while another process takes the backup
/// over and finishes it. Every write the first then tries is refused
/// (rule lease-fence): the backup's files stay exactly as the second left
/// them, and the first ends with the refusal. Before, its next poll
/// rewrote the operations, the log and the object over the finished
/// backup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_past_its_lease_writes_nothing_after_a_takeover() {
    let cluster = Cluster::new();
    let store_dir = tempfile::tempdir().unwrap();
    let faulty = Arc::new(FaultyStore::new(object_store_local(store_dir.path())));
    let store = BackupStore::from_object_store(faulty.clone(), "faulty://test");
    let mut c = controller(example_plugins(), store.clone(), &cluster);
    c.settings.lease_duration = Duration::from_millis(600);
    let c = Arc::new(c);
    let req = request("hung", &cluster, shop_only());
    let running = tokio::spawn({
        let c = c.clone();
        async move { c.run_backup(req).await }
    });
    let plain = open_store(store_dir.path());
    wait_until("hung waiting", WAIT, || async { matches!(plain.get_json::<BackupObject>("hung", BackupFile::Metadata).await, Ok(Some(o)) if o.status.phase == BackupPhase::WaitingForPluginOperations) }).await;
    // Its next renewal hangs; its work goes on.
    let hang = faulty.pause_puts_to("hung-lease-00000000000000000001.json");
    wait_for_lease_expiry(&plain, "hung").await;

    cluster.snapshot("hung", json!({"readyToUse": true}));
    let other = controller(example_plugins(), plain.clone(), &cluster);
    let object = other.resume("hung").await.unwrap();
    assert_eq!(object.status.phase, BackupPhase::Completed);
    let finished = store_files(store_dir.path(), "hung");

    // The first sees the snapshot ready too (its memory holds the
    // operation Completed: a round after its lease expired) and tries to
    // write what it found, round after round (a refused write is retried
    // like any store error): nothing it writes lands. Or it has ended
    // already (it did in one loaded run of the whole suite); how it ends
    // is checked below: refused by the fence, having written nothing, which
    // is checked again once it has ended and can write nothing more.
    wait_until(
        "the first to see the snapshot ready, or to end",
        WAIT,
        || async {
            running.is_finished()
                || c.operations.get("hung").await.is_some_and(|ops| {
                    !ops.is_empty()
                        && ops
                            .iter()
                            .all(|o| o.status.phase == OperationPhase::Completed)
                })
        },
    )
    .await;
    assert_eq!(
        store_files(store_dir.path(), "hung"),
        finished,
        "the holder past its lease wrote to the store"
    );
    let logs = log_lines(&plain, "hung").await;
    assert!(
        logs.iter().all(|l| !l.contains("rule: lease-fence")),
        "the refusals are the first's, not in the finished log"
    );
    // Its renewal goes through at last (to its own, older generation,
    // which decides nothing), sees the takeover, and the first stops.
    drop(hang);
    let outcome = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("the first ends once it sees the takeover")
        .unwrap();
    let err = outcome.expect_err("the first cannot finish").to_string();
    assert!(
        err.contains("(rule: lease-fence)") || err.contains("lost its lease"),
        "{err}"
    );
    // What its hung renewal finally wrote is its own generation's lease
    // file, older than the taker's: nothing else changed.
    let mut after = store_files(store_dir.path(), "hung");
    after.remove("hung-lease-00000000000000000001.json");
    let mut expected = finished.clone();
    expected.remove("hung-lease-00000000000000000001.json");
    assert_eq!(after, expected);
    assert_eq!(
        plain
            .current_lease("hung")
            .await
            .unwrap()
            .unwrap()
            .generation,
        2,
        "the taker's generation is still the newest"
    );
}

/// A burst of backups queues for its turn at listing and running plugins:
/// with two turns, six backups started at once never have more than two
/// first passes running, each waiting one says so in its log, and all
/// complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_backups_takes_turns_at_their_passes() {
    let cluster = Cluster::new();
    let (_store_dir, store) = store();
    let runtime = runtime();
    let slow = load(
        &runtime,
        artifacts::HOSTILE,
        &[("behavior", "nap"), ("nap-ms", "150")],
    );
    let settings = Settings {
        sync_period: Duration::from_millis(50),
        concurrent_passes: 2,
        workers: 1,
        ..Settings::default()
    };
    let c = Arc::new(PhaseMachine::new(
        vec![slow],
        store.clone(),
        Arc::new(ManifestCluster::new(vec![cluster.path()])),
        settings,
    ));
    let names: Vec<String> = (0..6).map(|i| format!("burst-{i}")).collect();
    let runs: Vec<_> = names
        .iter()
        .map(|name| {
            let (c, req) = (c.clone(), request(name, &cluster, shop_only()));
            tokio::spawn(async move { c.run_backup(req).await })
        })
        .collect();
    for run in runs {
        let object = run.await.unwrap().unwrap();
        assert_eq!(object.status.phase, BackupPhase::Completed);
    }
    assert_eq!(
        c.concurrent_passes_seen(),
        2,
        "the bound was reached, not passed"
    );
    let mut waited = 0;
    for name in &names {
        let logs = log_lines(&store, name).await;
        waited += usize::from(logs.iter().any(|l| l.contains("waiting for a turn")));
    }
    assert!(waited >= 4, "{waited} of 6 waited for a turn");
}

/// What Velero 1.18 writes and reads, to the letter (issue 20): the format
/// version 1.1.0 in `metadata/version`; every item also under
/// `<version>-preferredversion`, what a restore with
/// `--features=EnableAPIGroupVersions` reads (finalize rewrites both
/// copies); the Namespace object of the namespace it covers, though the
/// spec names the namespace only; the resource list `velero backup describe
/// --details` shows; a creation time; the timeouts in force in the spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_is_laid_out_as_velero_lays_out_format_1_1_0() {
    let cluster = Cluster::new();
    std::fs::write(
        cluster.path().join("ns.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {team: checkout}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: other}\n",
    )
    .unwrap();
    cluster.snapshot(
        "layout",
        json!({"readyToUse": true, "creationTime": "2026-11-30T01:00:04Z"}),
    );
    let (_store_dir, store) = store();
    let c = controller(example_plugins(), store.clone(), &cluster);
    let object = c
        .run_backup(request("layout", &cluster, shop_only()))
        .await
        .unwrap();
    assert_eq!(object.status.phase, BackupPhase::Completed);

    let entries = contents(&store, "layout").await;
    assert_eq!(entry_bytes(&entries, "metadata/version"), b"1.1.0\n");
    // Each item twice, byte for byte, at the plain and the versioned path.
    let plain: Vec<&(String, Vec<u8>)> = entries
        .iter()
        .filter(|(p, _)| p.starts_with("resources/") && !p.contains("-preferredversion/"))
        .collect();
    assert!(
        plain.len() >= 5,
        "{:?}",
        entries.iter().map(|e| &e.0).collect::<Vec<_>>()
    );
    for (path, bytes) in &plain {
        let item: Value = serde_json::from_slice(bytes).unwrap();
        let version = item["apiVersion"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap();
        let (gr, rest) = path["resources/".len()..].split_once('/').unwrap();
        let versioned = format!("resources/{gr}/{version}-preferredversion/{rest}");
        assert_eq!(&entry_bytes(&entries, &versioned), bytes, "{versioned}");
    }
    assert_eq!(
        plain.len() * 2 + 1,
        entries.len(),
        "nothing else in the tarball"
    );
    // The namespace's own object, with its labels; not the other namespace's.
    let ns = entry(&entries, "resources/namespaces/cluster/shop.json");
    assert_eq!(ns["metadata"]["labels"]["team"], "checkout");
    assert!(
        !entries
            .iter()
            .any(|(p, _)| p.ends_with("/cluster/other.json"))
    );
    // Finalize replaced both copies of the post-operation item.
    for path in [
        "resources/volumesnapshots.snapshot.storage.k8s.io/namespaces/shop/data-web-0-layout.json",
        "resources/volumesnapshots.snapshot.storage.k8s.io/v1-preferredversion/namespaces/shop/data-web-0-layout.json",
    ] {
        let snap = entry(&entries, path);
        assert_eq!(snap["status"]["readyToUse"], true, "{path}");
        assert_eq!(snap["metadata"]["labels"]["backed-up-by"], "iar", "{path}");
    }

    let list: std::collections::BTreeMap<String, Vec<String>> = store
        .get_json("layout", BackupFile::ResourceList)
        .await
        .unwrap()
        .expect("the resource list");
    assert_eq!(list["v1/Pod"], ["shop/web-0"]);
    assert_eq!(list["v1/Namespace"], ["shop"]);
    assert_eq!(list["v1/PersistentVolume"], ["pv-data-web-0"]);
    assert_eq!(list["v1/ConfigMap"], ["shop/web-config"]);
    assert_eq!(
        list.values().map(Vec::len).sum::<usize>(),
        plain.len(),
        "one entry per item: {list:?}"
    );

    let (stored, _, _) = persisted(&store, "layout").await;
    let created = stored
        .metadata
        .creation_timestamp
        .expect("creationTimestamp");
    assert!(
        created.starts_with("20") && created.ends_with('Z'),
        "{created}"
    );
    assert_eq!(stored.spec["itemOperationTimeout"], "4h0m0s");
    assert_eq!(stored.spec["ttl"], "720h0m0s");
    assert_eq!(stored.status.format_version, "1.1.0");
}

fn entry_bytes(entries: &[(String, Vec<u8>)], path: &str) -> Vec<u8> {
    entries
        .iter()
        .find(|(p, _)| p == path)
        .map(|(_, d)| d.clone())
        .unwrap_or_else(|| panic!("{path} not in the tarball"))
}

/// What pvc-snapshot created for a backup is recorded with it (once,
/// whatever the retries) and logged; deleting the backup deletes it from
/// the cluster, here the overlay, and a snapshot of another backup stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_plugins_created_is_deleted_with_the_backup() {
    let cluster = Cluster::new();
    cluster.snapshot("kept", json!({"readyToUse": true}));
    cluster.snapshot("other", json!({"readyToUse": true}));
    let (_store_dir, store) = store();
    let c = controller(example_plugins(), store.clone(), &cluster);
    for name in ["kept", "other"] {
        let object = c
            .run_backup(request(name, &cluster, shop_only()))
            .await
            .unwrap();
        assert_eq!(object.status.phase, BackupPhase::Completed, "{name}");
    }
    let created = c.created_objects("kept").await.unwrap();
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(created[0].plugin, "iar_plugin_pvc_snapshot");
    assert_eq!(created[0].id.name, "data-web-0-kept");
    assert!(!created[0].uid.is_empty());
    assert!(
        log_lines(&store, "kept")
            .await
            .iter()
            .any(|l| l.contains("plugin iar_plugin_pvc_snapshot created volumesnapshots.snapshot.storage.k8s.io shop/data-web-0-kept")),
    );
    let snapshot = |name: &str| {
        cluster.overlay.path().join(format!(
            "volumesnapshots.snapshot.storage.k8s.io/shop/data-web-0-{name}.yaml"
        ))
    };
    assert!(snapshot("kept").exists() && snapshot("other").exists());
    // The backup holds the ready snapshot finalize read.
    let entries = contents(&store, "kept").await;
    let stored = entry(
        &entries,
        "resources/volumesnapshots.snapshot.storage.k8s.io/namespaces/shop/data-web-0-kept.json",
    );
    assert_eq!(stored["status"]["readyToUse"], true);

    let outcome = c.delete_backup("kept", false).await.unwrap();
    assert!(
        matches!(outcome, iar::phases::gc::Outcome::Deleted(_)),
        "{outcome:?}"
    );
    assert!(!snapshot("kept").exists(), "deleted with its backup");
    assert!(
        snapshot("other").exists(),
        "another backup's snapshot stays"
    );
}
