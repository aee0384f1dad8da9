//! Hooks and pod volume backups in real backups, through
//! `PhaseMachine::run_backup`: real `sh` hook processes, a real `--volume-data`
//! directory read into a real local store, and the backup's persisted files.

use crate::support::{post_after_every_pre, stamp, store, write_volume};
use iar::ManifestCluster;
use iar::backup::object::{BackupObject, BackupPhase, Results};
use iar::backup::volumes::{VolumeBackup, VolumePhase, restore_volume};
use iar::phases::{BackupRequest, PhaseMachine, Settings};
use iar::store::{BackupFile, BackupStore};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

struct Env {
    _dirs: [tempfile::TempDir; 3],
    items: PathBuf,
    data: PathBuf,
    store: BackupStore,
}

fn env() -> Env {
    let [items, data] = [(); 2].map(|_| tempfile::tempdir().unwrap());
    let (store_dir, store) = store();
    Env {
        items: items.path().to_path_buf(),
        data: data.path().to_path_buf(),
        store,
        _dirs: [items, data, store_dir],
    }
}

/// A pod mounting `pvc`, opted in to a volume backup by annotation, whose
/// pre hook stamps its start time and writes a marker into the volume, and
/// whose post hook does the same with a second marker. `pre_fails` makes
/// the pre hook exit 3 (the annotations' default onError is Fail).
fn write_pod(items: &Path, name: &str, pvc: &str, pre_fails: bool) {
    write_pod_with_post(items, name, pvc, pre_fails, POST);
}

const POST: &str = "date +%s%N > \"$IAR_VOLUME_DATA/$IAR_POD_NAME.post\"; \
                    echo resumed > \"$IAR_VOLUME_DIR_DATA/post-marker\"";

/// [`write_pod`] with `post` as its post hook's script.
fn write_pod_with_post(items: &Path, name: &str, pvc: &str, pre_fails: bool, post: &str) {
    let pre = if pre_fails {
        "date +%s%N > \"$IAR_VOLUME_DATA/$IAR_POD_NAME.pre\"; exit 3".to_string()
    } else {
        "date +%s%N > \"$IAR_VOLUME_DATA/$IAR_POD_NAME.pre\"; \
         echo quiesced > \"$IAR_VOLUME_DIR_DATA/pre-marker\""
            .to_string()
    };
    let docs = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": name, "namespace": "shop", "annotations": {
            "backup.velero.io/backup-volumes": "data",
            "pre.hook.backup.velero.io/command": serde_json::to_string(&["sh", "-c", &pre]).unwrap(),
            "post.hook.backup.velero.io/command": serde_json::to_string(&["sh", "-c", post]).unwrap(),
         }},
         "spec": {"containers": [{"name": "app", "image": "app"}],
                  "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": pvc}}]}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": pvc, "namespace": "shop"}, "spec": {}}
    ]});
    std::fs::write(items.join(format!("{name}.json")), docs.to_string()).unwrap();
}

async fn backup(e: &Env, name: &str, exec_hooks: bool, workers: usize) -> BackupObject {
    let settings = Settings {
        sync_period: Duration::from_millis(50),
        workers,
        volume_data: Some(e.data.clone()),
        volume_concurrency: 16,
        exec_hooks_locally: exec_hooks,
        ..Settings::default()
    };
    run(e, name, settings, json!({})).await.unwrap()
}

/// One `PhaseMachine::run_backup` of the env's items into its store.
async fn run(
    e: &Env,
    name: &str,
    settings: Settings,
    spec: serde_json::Value,
) -> Result<BackupObject, iar::phases::PhaseError> {
    let c = PhaseMachine::new(
        Vec::new(),
        e.store.clone(),
        Arc::new(ManifestCluster::new(vec![e.items.clone()])),
        settings,
    );
    c.run_backup(BackupRequest {
        labels: Default::default(),
        name: name.into(),
        namespace: "velero".into(),
        spec,
        sources: vec![e.items.clone()],
        annotations: Default::default(),
    })
    .await
}

async fn volumes(store: &BackupStore, name: &str) -> Vec<VolumeBackup> {
    store
        .get_json(name, BackupFile::VolumeBackups)
        .await
        .unwrap()
        .unwrap_or_default()
}

async fn results(store: &BackupStore, name: &str) -> Results {
    store
        .get_json(name, BackupFile::Results)
        .await
        .unwrap()
        .unwrap()
}

/// The backup's volume holds the pre hook's marker and not the post hook's,
/// the post hook started after its volume backup ended (the hook's own
/// `date`), the volume record is persisted Completed with its bytes, and
/// both hook runs are in the log. Before, a backup ran no hooks and backed
/// up no volumes (no volume-backups file at all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_hook_marker_is_backed_up_and_post_hook_waits_for_the_volume() {
    let e = env();
    write_pod(&e.items, "db-0", "data-db-0", false);
    write_volume(&e.data, "data-db-0", 3 << 20);
    let object = backup(&e, "hooked", true, 2).await;
    assert_eq!(object.status.phase, BackupPhase::Completed);

    let vols = volumes(&e.store, "hooked").await;
    assert_eq!(vols.len(), 1, "{vols:?}");
    let v = &vols[0];
    assert_eq!(v.phase, VolumePhase::Completed, "{v:?}");
    assert!(v.bytes_total >= 3 << 20 && v.bytes_done == v.bytes_total);

    let restored = tempfile::tempdir().unwrap();
    restore_volume(
        &e.store,
        "hooked",
        v.manifest_key.as_deref().unwrap(),
        restored.path(),
        &Default::default(),
    )
    .await
    .unwrap();
    assert!(restored.path().join("pre-marker").exists());
    assert!(!restored.path().join("post-marker").exists());
    assert!(e.data.join("shop/data-db-0/post-marker").exists());

    let post_started = stamp(&e.data, "db-0.post");
    let volume_ended = v.completed.unwrap();
    assert!(
        post_started >= volume_ended,
        "post hook at {post_started:?} before its volume ended at {volume_ended:?}"
    );
    assert!(stamp(&e.data, "db-0.pre") <= v.started.unwrap());

    let logs = e.store.get_logs("hooked").await.unwrap().unwrap();
    let hook_lines = logs.iter().filter(|l| l.contains("hook: ")).count();
    assert_eq!(hook_lines, 2, "{logs:#?}");
}

/// A pod whose pre hook fails (onError Fail) gets no post hook, no volume
/// backup, and its block's items (the pod and its PVC) are failed with the
/// hook named: the backup ends PartiallyFailed, and another pod's block is
/// unaffected. Before, hooks were never run and the backup Completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pre_hook_fails_its_block_and_runs_no_post_hook() {
    let e = env();
    write_pod(&e.items, "bad-0", "data-bad-0", true);
    write_pod(&e.items, "good-0", "data-good-0", false);
    write_volume(&e.data, "data-bad-0", 1000);
    write_volume(&e.data, "data-good-0", 1000);
    let object = backup(&e, "failing", true, 2).await;
    assert_eq!(object.status.phase, BackupPhase::PartiallyFailed);
    assert!(e.data.join("bad-0.pre").exists());
    assert!(!e.data.join("bad-0.post").exists(), "post hook ran");
    assert!(e.data.join("good-0.post").exists());
    let vols = volumes(&e.store, "failing").await;
    assert_eq!(vols.len(), 1, "{vols:?}");
    assert_eq!(vols[0].pod_name, "good-0");
    let r = results(&e.store, "failing").await;
    let errors: Vec<String> = r.errors.all().map(|s| s.to_string()).collect();
    for item in ["pods shop/bad-0", "persistentvolumeclaims shop/data-bad-0"] {
        assert!(
            errors
                .iter()
                .any(|m| m.contains(item) && m.contains("onError Fail")),
            "{item} not failed: {errors:#?}"
        );
    }
    assert!(errors.iter().all(|m| !m.contains("good-0")), "{errors:#?}");
}

/// Without `--exec-hooks-locally` no hook process runs: each hook is a
/// warning saying it was skipped, and the volume is still backed up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_are_skipped_with_a_warning_unless_asked_for() {
    let e = env();
    write_pod(&e.items, "db-0", "data-db-0", false);
    write_volume(&e.data, "data-db-0", 1000);
    let object = backup(&e, "skipped", false, 1).await;
    assert_eq!(object.status.phase, BackupPhase::Completed);
    assert!(!e.data.join("db-0.pre").exists());
    let r = results(&e.store, "skipped").await;
    let warnings: Vec<String> = r.warnings.all().map(|s| s.to_string()).collect();
    assert_eq!(
        warnings.iter().filter(|w| w.contains("skipped")).count(),
        1,
        "the pre hook is skipped; a pod whose pre hooks were skipped gets no post hook: {warnings:#?}"
    );
    assert_eq!(
        volumes(&e.store, "skipped").await[0].phase,
        VolumePhase::Completed
    );
}

/// Two workers, ten blocks, each with a volume: waiting blocks hold no
/// worker, so every block's pre hook runs while the first blocks' post
/// hooks wait (their gate, [`post_after_every_pre`], opens only then; an
/// overlap of start and end times said the same but depended on the
/// machine's speed), and each post hook starts after its own volume
/// ended. Before, no volume was backed up at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_blocks_on_two_workers_each_post_hook_after_its_own_volume() {
    let e = env();
    let post = post_after_every_pre(10, POST);
    for i in 0..10 {
        write_pod_with_post(
            &e.items,
            &format!("app-{i}"),
            &format!("data-{i}"),
            false,
            &post,
        );
        write_volume(&e.data, &format!("data-{i}"), 2 << 20);
    }
    let object = backup(&e, "ten", true, 2).await;
    assert_eq!(
        object.status.phase,
        BackupPhase::Completed,
        "{:?}",
        results(&e.store, "ten").await
    );
    let vols = volumes(&e.store, "ten").await;
    assert_eq!(vols.len(), 10);
    for v in &vols {
        assert_eq!(v.phase, VolumePhase::Completed);
        let post = stamp(&e.data, &format!("{}.post", v.pod_name));
        assert!(post >= v.completed.unwrap(), "{}", v.pod_name);
    }
}

/// A hostile pod manifest whose claim is `../outside` (and another whose
/// volume name is `../../outside`), opted in to a volume backup, with a
/// directory there for the traversal to reach: its volume backup fails
/// naming the pod, the volume, the claim and the rule, the backup ends
/// PartiallyFailed with that error, nothing outside `--volume-data/shop` is
/// read into the store, and the hook sees no directory for it. Before, the
/// claim was joined to the root as written and the outside file backed up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_name_that_climbs_out_of_the_volume_data_is_refused() {
    let e = env();
    std::fs::create_dir_all(e.data.join("outside")).unwrap();
    std::fs::write(e.data.join("outside/credentials"), b"not yours").unwrap();
    let hook =
        "test -z \"$IAR_VOLUME_DIR_DATA\" && touch \"$IAR_VOLUME_DATA/$IAR_POD_NAME.no-dir\"";
    for (pod, volume) in [
        (
            "climb-0",
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "../outside"}}),
        ),
        ("climb-1", json!({"name": "../../outside", "emptyDir": {}})),
    ] {
        let opt_in = volume["name"].as_str().unwrap().to_string();
        let doc = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "shop", "annotations": {
                "backup.velero.io/backup-volumes": opt_in,
                "pre.hook.backup.velero.io/command": serde_json::to_string(&["sh", "-c", hook]).unwrap(),
            }},
            "spec": {"containers": [{"name": "app", "image": "app"}], "volumes": [volume]}});
        std::fs::write(e.items.join(format!("{pod}.json")), doc.to_string()).unwrap();
    }
    let object = backup(&e, "climb", true, 1).await;
    assert_eq!(object.status.phase, BackupPhase::PartiallyFailed);
    let vols = volumes(&e.store, "climb").await;
    assert_eq!(vols.len(), 2, "{vols:?}");
    for v in &vols {
        assert_eq!(v.phase, VolumePhase::Failed, "{v:?}");
        let error = v.error.as_deref().unwrap();
        assert!(
            error.contains(&format!("of pod shop/{}", v.pod_name))
                && error.contains(&format!("volume {}", v.volume))
                && error.contains("(rule: invalid-identifier)"),
            "{error}"
        );
        assert!(
            e.data.join(format!("{}.no-dir", v.pod_name)).exists(),
            "{}",
            v.pod_name
        );
    }
    assert!(vols.iter().any(|v| {
        v.error
            .as_deref()
            .unwrap()
            .contains("claimName \"../outside\" is not a DNS-1123 subdomain")
    }));
    assert!(vols.iter().any(|v| {
        v.error
            .as_deref()
            .unwrap()
            .contains("volume name \"../../outside\" is not a DNS-1123 label")
    }));
    let r = results(&e.store, "climb").await;
    let errors: Vec<String> = r.errors.all().map(|s| s.to_string()).collect();
    assert!(
        errors.iter().any(|m| m.contains("invalid-identifier")),
        "{errors:#?}"
    );
    let stored = e
        .store
        .count_under("backups/climb/volumes/data")
        .await
        .unwrap();
    assert_eq!(stored, 0, "nothing was read into the store");
}

async fn backup_with_spec(
    e: &Env,
    name: &str,
    spec: serde_json::Value,
) -> Result<BackupObject, iar::phases::PhaseError> {
    let settings = Settings {
        sync_period: Duration::from_millis(50),
        volume_data: Some(e.data.clone()),
        ..Settings::default()
    };
    run(e, name, settings, spec).await
}

/// The failure a backup returned, and its persisted object.
async fn failed(e: &Env, name: &str, spec: serde_json::Value) -> (String, BackupObject) {
    let err = backup_with_spec(e, name, spec)
        .await
        .expect_err("the backup must fail");
    let object: BackupObject = e
        .store
        .get_json(name, BackupFile::Metadata)
        .await
        .unwrap()
        .unwrap();
    (err.to_string(), object)
}

/// The backup's `resourcePolicy` ConfigMap decides before the pod's opt-in
/// annotation: a policy that skips the `slow` storage class leaves the
/// opted-in `slow` volume without a volume backup, while the `fast` one is
/// backed up. A policy that is named but missing, or does not parse, fails
/// the backup with the reason (never a backup that ignores it). Before,
/// `spec.resourcePolicy` was not read at all, so both volumes were backed up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resource_policy_decides_before_the_opt_in() {
    let e = env();
    for (pod, pvc, class) in [("a-0", "data-a-0", "slow"), ("b-0", "data-b-0", "fast")] {
        let docs = json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": pod, "namespace": "shop",
                          "annotations": {"backup.velero.io/backup-volumes": "data"}},
             "spec": {"containers": [{"name": "app", "image": "app"}],
                      "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": pvc}}]}},
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": pvc, "namespace": "shop"},
             "spec": {"storageClassName": class}}
        ]});
        std::fs::write(e.items.join(format!("{pod}.json")), docs.to_string()).unwrap();
        write_volume(&e.data, pvc, 4096);
    }
    let policy = "version: v1\nvolumePolicies:\n- conditions:\n    storageClass: [slow]\n  action:\n    type: skip\n";
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "volume-policy", "namespace": "velero"},
        "data": {"policy.yaml": policy}});
    std::fs::write(e.items.join("policy.json"), config_map.to_string()).unwrap();

    let spec = json!({"includedNamespaces": ["shop"],
        "resourcePolicy": {"kind": "configmap", "name": "volume-policy"}});
    let object = backup_with_spec(&e, "policed", spec).await.unwrap();
    assert_eq!(object.status.phase, BackupPhase::Completed);
    let backed_up: Vec<String> = volumes(&e.store, "policed")
        .await
        .iter()
        .map(|v| format!("{}/{:?}", v.pod_name, v.phase))
        .collect();
    assert_eq!(backed_up, ["b-0/Completed"]);

    let missing = json!({"includedNamespaces": ["shop"],
        "resourcePolicy": {"kind": "configmap", "name": "no-such-policy"}});
    let (err, object) = failed(&e, "missing-policy", missing).await;
    assert_eq!(object.status.phase, BackupPhase::Failed);
    for reason in [&err, &object.status.failure_reason] {
        assert!(
            reason.contains("configmap velero/no-such-policy does not exist"),
            "{reason}"
        );
    }

    let garbage = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "garbage", "namespace": "velero"},
        "data": {"policy.yaml": "version: v2\n"}});
    std::fs::write(e.items.join("garbage.json"), garbage.to_string()).unwrap();
    let bad = json!({"includedNamespaces": ["shop"],
        "resourcePolicy": {"kind": "configmap", "name": "garbage"}});
    let (err, object) = failed(&e, "bad-policy", bad).await;
    assert_eq!(object.status.phase, BackupPhase::Failed);
    for reason in [&err, &object.status.failure_reason] {
        assert!(
            reason.contains("configmap velero/garbage, data.policy.yaml: resource policy: version"),
            "{reason}"
        );
    }
}

/// The volume backups a pass started are recorded before its tarball, and
/// a store that refuses that record fails the step: the tarball is not
/// written, and the backup does not complete. A process that takes over a
/// backup whose tarball it finds waits for the volumes this record names;
/// before, the record was best effort, a store fault dropped it while the
/// tarball landed, and the backup completed with no volume records at all
/// (the fault campaign's seeds 1222, 1230 and 1321).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_whose_volume_record_is_refused_writes_no_tarball() {
    let mut e = env();
    let faulty = Arc::new(iar_core::store::faulty::FaultyStore::new(Arc::new(
        object_store::local::LocalFileSystem::new_with_prefix(e._dirs[2].path()).unwrap(),
    )));
    e.store = BackupStore::from_object_store(faulty.clone(), "faulty://volumes");
    faulty.fail_puts_to(&BackupFile::VolumeProgress.key("unrecorded"));
    write_pod(&e.items, "db-0", "data-db-0", false);
    write_volume(&e.data, "data-db-0", 1000);
    let settings = Settings {
        sync_period: Duration::from_millis(50),
        volume_data: Some(e.data.clone()),
        exec_hooks_locally: true,
        ..Settings::default()
    };
    let ended = run(&e, "unrecorded", settings, json!({})).await;
    if let Ok(object) = &ended {
        assert_ne!(object.status.phase, BackupPhase::Completed, "{object:?}");
    }
    assert!(
        !e.store
            .exists_key(&BackupFile::Contents.key("unrecorded"))
            .await
            .unwrap(),
        "the tarball was written without the record of its volumes ({ended:?})"
    );
    // The freeze is undone all the same, once its volume backup ends.
    let post = e.data.join("db-0.post");
    for _ in 0..300 {
        if post.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(post.exists(), "the pod was left frozen");
}
