//! Resume alone: a backup a killed process left New or InProgress, loaded
//! as a step loads it; and the item sources `iar resume` checks.

use super::super::Step;
use super::super::errors::{PhaseError, SourcesError};
use super::super::test_support::Parts;
use super::recorded_sources;
use crate::backup::object::{BackupPhase, SOURCES_ANNOTATION, rfc3339};
use crate::backup::volumes::{VolumeBackup, VolumePhase};
use bytes::Bytes;
use iar_core::store::BackupFile;
use std::time::Duration;

fn volume(name: &str, phase: VolumePhase) -> VolumeBackup {
    VolumeBackup {
        backup: "b".into(),
        pod_namespace: "shop".into(),
        pod_name: "web".into(),
        volume: name.into(),
        pvc: None,
        phase,
        bytes_done: 0,
        bytes_total: 0,
        created: None,
        started: None,
        completed: None,
        error: None,
        manifest_key: None,
        files_done: 0,
        skipped: Vec::new(),
        skipped_total: 0,
    }
}

/// Found InProgress with no node agents to wait for (the volume backups
/// died with the process): the backup ends Failed, saying why, at the
/// clock's time; its unfinished volume backup is failed "interrupted by
/// restart" and said in the results, the finished one kept.
#[tokio::test]
async fn an_interrupted_first_pass_fails_the_backup_and_its_unfinished_volumes() {
    let parts = Parts::new();
    parts.put_object("b", BackupPhase::InProgress).await;
    parts
        .store
        .put_json(
            "b",
            BackupFile::VolumeBackups,
            &[
                volume("data", VolumePhase::InProgress),
                volume("logs", VolumePhase::Completed),
            ],
        )
        .await
        .unwrap();
    parts.clock.advance(Duration::from_secs(600));
    let mut run = parts.load("b").await;

    let step = parts.resume().step(&mut run).await.unwrap();
    assert!(matches!(step, Step::Done(_)), "{step:?}");
    let stored = parts.stored("b").await;
    assert_eq!(stored.status.phase, BackupPhase::Failed);
    assert_eq!(
        stored.status.failure_reason,
        "found in phase InProgress by a process taking it over: the one running its first pass ended, or lost the backup's lease, before its items were written"
    );
    assert_eq!(
        stored.status.completion_timestamp,
        Some(rfc3339(parts.now()))
    );
    let volumes: Vec<VolumeBackup> = parts
        .store
        .get_json("b", BackupFile::VolumeBackups)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(volumes[0].phase, VolumePhase::Failed);
    assert_eq!(volumes[0].error.as_deref(), Some("interrupted by restart"));
    assert_eq!(
        volumes[0].completed.map(rfc3339),
        Some(rfc3339(parts.now()))
    );
    assert_eq!(volumes[1].phase, VolumePhase::Completed);
    let results = parts.results("b").await;
    let errors: Vec<&String> = results.errors.all().collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("interrupted by restart"), "{errors:?}");
}

/// A results file that cannot be read is set aside (not overwritten) and
/// the backup goes on with new results, the reason a warning in them.
#[tokio::test]
async fn an_unreadable_results_file_is_set_aside_and_the_backup_goes_on() {
    let parts = Parts::new();
    parts.put_object("b", BackupPhase::New).await;
    parts
        .store
        .put("b", BackupFile::Results, Bytes::from_static(b"{not json"))
        .await
        .unwrap();
    let mut run = parts.load("b").await;
    let warnings: Vec<&String> = run.results.warnings.all().collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(&format!(
            "{} could not be read (",
            BackupFile::Results.key("b")
        )) && warnings[0].contains("continuing with a new one"),
        "{warnings:?}"
    );
    let keys = parts.store.backup_keys("b").await.unwrap();
    assert!(
        keys.iter().any(
            |k| k.contains(&BackupFile::Results.key("b")) && *k != BackupFile::Results.key("b")
        ),
        "the old results kept aside: {keys:?}"
    );
    parts.resume().step(&mut run).await.unwrap();
    assert_eq!(parts.stored("b").await.status.phase, BackupPhase::Failed);
    let results = parts.results("b").await;
    assert_eq!(results.warnings.all().count(), 1, "the warning is kept");
}

/// The item sources a backup was started with: each refusal typed and
/// said; sources all present are returned.
#[tokio::test]
async fn recorded_sources_must_be_recorded_and_present() {
    let parts = Parts::new();
    let mut object = parts.put_object("b", BackupPhase::Finalizing).await;
    let refusal = |object: &crate::backup::object::BackupObject| match recorded_sources(object) {
        Err(PhaseError::Sources { source, .. }) => source,
        other => panic!("{other:?}"),
    };
    assert!(matches!(refusal(&object), SourcesError::NoAnnotation));
    let annotate = |object: &mut crate::backup::object::BackupObject, value: &str| {
        object
            .metadata
            .annotations
            .insert(SOURCES_ANNOTATION.into(), value.into());
    };
    annotate(&mut object, "not json");
    assert!(matches!(refusal(&object), SourcesError::NotPaths(_)));
    annotate(&mut object, "[]");
    assert!(matches!(refusal(&object), SourcesError::Empty));
    let here = tempfile::tempdir().unwrap();
    let gone = here.path().join("gone.yaml");
    let listed = serde_json::to_string(&[here.path(), gone.as_path()]).unwrap();
    annotate(&mut object, &listed);
    let err = recorded_sources(&object).unwrap_err();
    assert!(
        err.to_string().ends_with(&format!(
            "cannot resume: the item sources it was started with are missing ({}); refusing to run it against an empty cluster",
            gone.display()
        )),
        "{err}"
    );
    let listed = serde_json::to_string(&[here.path()]).unwrap();
    annotate(&mut object, &listed);
    assert_eq!(recorded_sources(&object).unwrap(), [here.path()]);
}

/// What a process taking over a backup does, said in order: the hooks it
/// runs and the volume backups it ends.
#[derive(Default)]
struct Recorder {
    said: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl crate::backup::hooks::HookRunner for Recorder {
    async fn run(
        &self,
        target: &crate::backup::hooks::HookTarget,
        hook: &crate::backup::hooks::ResolvedHook,
    ) -> crate::backup::hooks::HookRun {
        self.said
            .lock()
            .unwrap()
            .push(format!("{:?} {}", hook.phase, target.pod.name));
        crate::backup::hooks::HookStatus::Succeeded.into()
    }
}

#[async_trait::async_trait]
impl crate::backup::volumes::VolumeBackupper for Recorder {
    async fn start(
        &self,
        request: crate::backup::volumes::VolumeRequest,
    ) -> crate::backup::volumes::VolumeHandle {
        panic!("nothing is started on a takeover: {request:?}")
    }

    async fn end_backup(&self, backup: &str) -> Result<(), String> {
        self.said.lock().unwrap().push(format!("end {backup}"));
        Ok(())
    }
}

/// A first pass cut off after its pod's freeze and its volume backup's
/// request, before it recorded that request (the tarball is not written):
/// the process taking it over fails it, and ends the backup's volume
/// backups before it runs the unfreeze it owes. Before, it ran the
/// unfreeze at once, while the agent still read the volume under a
/// request no record named (the fault campaign's seed 3706: 2.5 s before
/// Parts over `cluster` whose hooks and volume backups a [`Recorder`]
/// runs and records.
fn recording(
    cluster: std::sync::Arc<dyn iar_core::cluster::ClusterReader>,
) -> (std::sync::Arc<Recorder>, Parts) {
    let recorder = std::sync::Arc::new(Recorder::default());
    let parts = Parts::with_machine(cluster, |m| {
        m.with_hook_runner(recorder.clone())
            .with_volume_backupper(recorder.clone())
    });
    (recorder, parts)
}

/// the request ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_ends_the_volume_backups_before_the_unfreeze_it_owes() {
    let items = tempfile::tempdir().unwrap();
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": "shop", "annotations": {
            "pre.hook.backup.velero.io/command": "[\"fsfreeze\", \"--freeze\", \"/data\"]",
            "post.hook.backup.velero.io/command": "[\"fsfreeze\", \"--unfreeze\", \"/data\"]",
        }},
        "spec": {"containers": [{"name": "db"}]}});
    std::fs::write(items.path().join("pod.json"), pod.to_string()).unwrap();
    let cluster = std::sync::Arc::new(iar_core::ManifestCluster::new(vec![
        items.path().to_path_buf(),
    ]));
    let (recorder, parts) = recording(cluster);
    parts.put_object("b", BackupPhase::InProgress).await;
    let frozen = crate::backup::block_work::LedgerEntry {
        pod: iar_core::item::ItemRef::new("", "pods", "shop", "db-0"),
        phase: "pre".into(),
        state: "succeeded".into(),
    };
    parts
        .store
        .put_json("b", BackupFile::HookLedger, &[frozen])
        .await
        .unwrap();
    let mut run = parts.load("b").await;

    let step = parts.resume().step(&mut run).await.unwrap();
    assert!(matches!(step, Step::Done(_)), "{step:?}");
    assert_eq!(parts.stored("b").await.status.phase, BackupPhase::Failed);
    assert_eq!(*recorder.said.lock().unwrap(), ["end b", "Post db-0"]);
}

/// A backup whose items were written (the tarball holds a pod whose
/// volume is chosen for a file-system backup) but which has no record of
/// that volume's backup: the first pass that wrote the tarball started
/// none, or lost its record, and its step ended. The process resuming it
/// fails it partially, naming the volume, instead of completing it without
/// that volume (the fault campaign's seeds 4955 and 4960: Completed with
/// no volume records).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_fails_a_volume_chosen_but_never_recorded() {
    let (_, parts) = recording(std::sync::Arc::new(iar_core::cluster::NoCluster));
    parts.put_object("b", BackupPhase::InProgress).await;
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": "shop",
            "annotations": {"backup.velero.io/backup-volumes": "data"}},
        "spec": {"containers": [{"name": "db"}],
            "volumes": [{"name": "data", "emptyDir": {}}, {"name": "cache", "emptyDir": {}}]}});
    let contents = iar_core::store::tarball::build(vec![(
        "resources/pods/namespaces/shop/db-0.json".to_string(),
        pod.to_string().into_bytes(),
    )])
    .unwrap();
    parts
        .store
        .put("b", BackupFile::Contents, Bytes::from(contents))
        .await
        .unwrap();
    let mut run = parts.load("b").await;

    let step = parts.resume().step(&mut run).await.unwrap();
    assert!(!matches!(step, Step::Done(_)), "it goes on: {step:?}");
    let results = parts.results("b").await;
    let errors: Vec<_> = results.errors.all().cloned().collect();
    assert_eq!(
        errors,
        [
            "volume data of pod shop/db-0: chosen for a file-system backup, but no backup of it was started or recorded; it is not in this backup (rule: volume-unrecorded)"
        ],
        "the opted-in volume only"
    );
    assert!(
        matches!(
            parts.stored("b").await.status.phase,
            BackupPhase::FinalizingPartiallyFailed
                | BackupPhase::WaitingForPluginOperationsPartiallyFailed
                | BackupPhase::PartiallyFailed
        ),
        "{:?}",
        parts.stored("b").await.status.phase
    );
}

/// Block work this machine kept from an attempt that did not start every
/// block (here: none) is not taken for the blocks' work: a resume follows
/// the stored records instead of recording that attempt's empty report
/// (the fault campaign's seeds 4955 and 4960).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_does_not_trust_work_that_never_started_its_blocks() {
    let (recorder, parts) = recording(std::sync::Arc::new(iar_core::cluster::NoCluster));
    let object = parts.put_object("b", BackupPhase::InProgress).await;
    let contents = iar_core::store::tarball::build(Vec::<(String, Vec<u8>)>::new()).unwrap();
    parts
        .store
        .put("b", BackupFile::Contents, Bytes::from(contents))
        .await
        .unwrap();
    parts
        .store
        .put_json(
            "b",
            BackupFile::VolumeBackups,
            &[volume("data", VolumePhase::Completed)],
        )
        .await
        .unwrap();
    let stale = std::sync::Arc::new(crate::backup::block_work::BlockWork::new(
        "b".into(),
        Default::default(),
        recorder.clone(),
        None,
        None,
        None,
        false,
        tokio::runtime::Handle::current(),
    ));
    parts.live_blocks.insert(object.work_uid(), &stale);
    let mut run = parts.load("b").await;

    parts.resume().step(&mut run).await.unwrap();
    let recorded: Vec<VolumeBackup> = parts
        .store
        .get_json("b", BackupFile::VolumeBackups)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].phase, VolumePhase::Completed);
    assert!(
        !parts
            .live_blocks
            .get(object.work_uid())
            .is_some_and(|w| std::sync::Arc::ptr_eq(&w, &stale)),
        "the stale work is gone"
    );
    // The resume followed the records (the stored volume is the report's),
    // not the stale work's empty report.
    let log = parts.store.get_logs("b").await.unwrap().unwrap_or_default();
    assert!(
        log.iter()
            .any(|l| l.contains("resumed after a restart with its items written")),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("volume backup: ") && l.contains("Completed")),
        "{log:#?}"
    );
}
