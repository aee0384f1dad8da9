//! Schedule resources with the real controller on the real API server, as
//! Velero's schedule controller runs them: due backups made from the
//! template under Velero's names and labels, none while one is still
//! running, none while paused, a bad expression refused in the status,
//! `skipImmediately` applied once.

use crate::controller::{install_crds, start_controller};
use crate::support::{client, server, store};
use iar::backup::object::BackupPhase;
use iar::k8s::crd::{Backup, BackupSpec, Schedule, ScheduleSpec, SpecMetadata};
use iar::k8s::plugins::PluginRegistry;
use iar_apiserver::{User, create_namespace};
use iar_tests::wait_for;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::time::Duration;

fn schedule(name: &str, cron: &str, owned: bool) -> Schedule {
    let mut s = Schedule::new(
        name,
        ScheduleSpec {
            template: BackupSpec {
                included_namespaces: Some(vec!["sched-app".into()]),
                included_resources: Some(vec!["configmaps".into()]),
                metadata: Some(SpecMetadata {
                    labels: Some([("team".to_string(), "payments".to_string())].into()),
                }),
                ..BackupSpec::default()
            },
            schedule: cron.into(),
            use_owner_references_in_backup: Some(owned),
            ..ScheduleSpec::default()
        },
    );
    s.metadata.annotations = Some([("owner".to_string(), "ops".to_string())].into());
    s
}

/// The backups of schedule `name`, by Velero's label.
async fn backups_of(api: &Api<Backup>, name: &str) -> Vec<Backup> {
    api.list(&ListParams::default().labels(&format!("velero.io/schedule-name={name}")))
        .await
        .unwrap()
        .items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn schedules_make_their_backups_as_velero_does() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    install_crds(&admin).await;
    let ns = "sched-system";
    create_namespace(&admin, ns).await;
    create_namespace(&admin, "sched-app").await;
    let (_store_dir, store) = store();
    let (_, controller) =
        start_controller(admin.clone(), ns, store, Vec::new(), PluginRegistry::new()).await;
    let schedules = Api::<Schedule>::namespaced(admin.clone(), ns);
    let backups = Api::<Backup>::namespaced(admin.clone(), ns);

    // Every 2 s: the first run is 2 s after its creation, named
    // `<schedule>-<UTC yyyyMMddHHmmss>`, with the template's spec and
    // labels, the schedule-name label, the Schedule's annotations and an
    // owner reference to it.
    schedules
        .create(
            &PostParams::default(),
            &schedule("often", "@every 2s", true),
        )
        .await
        .unwrap();
    let made = wait_for(
        "the first scheduled backup",
        Duration::from_secs(60),
        || {
            let backups = backups.clone();
            async move {
                backups_of(&backups, "often")
                    .await
                    .into_iter()
                    .next()
                    .ok_or("none yet".to_string())
            }
        },
    )
    .await;
    let name = made.metadata.name.clone().unwrap();
    let stamp = name.strip_prefix("often-").unwrap();
    assert!(
        stamp.len() == 14 && stamp.chars().all(|c| c.is_ascii_digit()),
        "{name}"
    );
    let labels = made.metadata.labels.clone().unwrap();
    assert_eq!(labels["team"], "payments");
    assert_eq!(made.metadata.annotations.clone().unwrap()["owner"], "ops");
    assert_eq!(
        made.spec.included_namespaces,
        Some(vec!["sched-app".to_string()])
    );
    let owner = &made.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Schedule", "often")
    );
    // The status is written right after the backup is made.
    let status = wait_for("the schedule's lastBackup", Duration::from_secs(30), || {
        let schedules = schedules.clone();
        async move {
            let s = schedules.get("often").await.map_err(|e| e.to_string())?;
            let status = s.status.unwrap_or_default();
            status
                .last_backup
                .is_some()
                .then_some(status.clone())
                .ok_or(format!("{status:?}"))
        }
    })
    .await;
    assert_eq!(status.phase.as_deref(), Some("Enabled"));
    // The backup runs to its end, and the next ones come, never two at
    // once (each waits for the one before to leave New and InProgress).
    wait_for("three scheduled backups", Duration::from_secs(90), || {
        let backups = backups.clone();
        async move {
            let made = backups_of(&backups, "often").await;
            let running = made
                .iter()
                .filter(|b| {
                    let phase = b.status.as_ref().map(|s| s.phase).unwrap_or_default();
                    matches!(phase, BackupPhase::New | BackupPhase::InProgress)
                })
                .count();
            assert!(running <= 1, "{running} running at once");
            (made.len() >= 3)
                .then_some(())
                .ok_or(format!("{}", made.len()))
        }
    })
    .await;

    // Paused: no more backups.
    schedules
        .patch(
            "often",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = backups_of(&backups, "often").await.len();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(backups_of(&backups, "often").await.len(), before, "paused");

    // A bad expression is refused in the status, with Velero's words.
    schedules
        .create(
            &PostParams::default(),
            &schedule("broken", "0 0 1 * * *", false),
        )
        .await
        .unwrap();
    let status = wait_for("the bad schedule refused", Duration::from_secs(30), || {
        let schedules = schedules.clone();
        async move {
            let s = schedules.get("broken").await.map_err(|e| e.to_string())?;
            let status = s.status.unwrap_or_default();
            (status.phase.as_deref() == Some("FailedValidation"))
                .then_some(status.clone())
                .ok_or(format!("{status:?}"))
        }
    })
    .await;
    assert!(
        status.validation_errors.unwrap()[0].starts_with("invalid schedule"),
        "Velero's message"
    );

    // skipImmediately: applied once (lastSkipped), then set back to false.
    let mut skipping = schedule("daily", "@daily", false);
    skipping.spec.skip_immediately = Some(true);
    schedules
        .create(&PostParams::default(), &skipping)
        .await
        .unwrap();
    wait_for("skipImmediately applied", Duration::from_secs(30), || {
        let schedules = schedules.clone();
        async move {
            let s = schedules.get("daily").await.map_err(|e| e.to_string())?;
            let skipped = s.status.and_then(|s| s.last_skipped).is_some();
            (skipped && s.spec.skip_immediately == Some(false))
                .then_some(())
                .ok_or(format!("{:?}", s.spec.skip_immediately))
        }
    })
    .await;
    assert!(backups_of(&backups, "daily").await.is_empty());
    controller.abort();
}
