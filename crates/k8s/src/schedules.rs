//! Schedule resources: the leader makes each due Schedule's Backup, as
//! Velero's schedule controller does (`iar_backup::backup::schedule` says
//! when and under what name). Only the leader runs it: backups are named
//! by the time they are made, so two replicas would make two.

use super::crd::{Backup, Schedule, ScheduleStatus};
use iar_backup::backup::object::{BackupPhase, rfc3339};
use iar_backup::backup::schedule::{Cron, Runs, SCHEDULE_NAME_LABEL, backup_name};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use std::time::{Duration, SystemTime};

/// The longest the loop sleeps: a new or changed Schedule is seen within
/// it (cron's unit is a minute).
const LOOK_EVERY: Duration = Duration::from_secs(5);

/// Makes the due backups of the namespace's Schedules, for as long as it
/// runs (the leader's term).
pub async fn schedule_forever(client: kube::Client, namespace: String) -> std::convert::Infallible {
    let schedules = Api::<Schedule>::namespaced(client.clone(), &namespace);
    let backups = Api::<Backup>::namespaced(client, &namespace);
    loop {
        let wait = match tick(&schedules, &backups, SystemTime::now()).await {
            Ok(next) => next,
            Err(e) => {
                tracing::warn!("schedules: {e}");
                LOOK_EVERY
            }
        };
        tokio::time::sleep(wait.clamp(Duration::from_millis(200), LOOK_EVERY)).await;
    }
}

/// One look at every Schedule; how long until the next is due.
async fn tick(
    schedules: &Api<Schedule>,
    backups: &Api<Backup>,
    now: SystemTime,
) -> Result<Duration, kube::Error> {
    let mut wait = LOOK_EVERY;
    for schedule in schedules.list(&ListParams::default()).await? {
        // A paused Schedule is not looked at, as in Velero: it keeps its
        // status, and its next run counts from its last backup.
        if schedule.spec.paused {
            continue;
        }
        let name = schedule.name_any();
        match step(schedules, backups, &schedule, now).await {
            Ok(Some(next)) => {
                wait = wait.min(next.duration_since(now).unwrap_or(Duration::ZERO));
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(schedule = %name, "{e}"),
        }
    }
    Ok(wait)
}

fn parse_time(t: &Option<String>) -> Option<SystemTime> {
    t.as_deref()
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
}

/// Velero's reconcile of one Schedule: validates it, applies
/// `skipImmediately`, and makes its backup when due and none of its
/// backups is still New or InProgress. Returns when it is next due.
async fn step(
    schedules: &Api<Schedule>,
    backups: &Api<Backup>,
    schedule: &Schedule,
    now: SystemTime,
) -> Result<Option<SystemTime>, kube::Error> {
    let name = schedule.name_any();
    let mut status = schedule.status.clone().unwrap_or_default();
    if schedule.spec.skip_immediately == Some(true) {
        schedules
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"skipImmediately": false}})),
            )
            .await?;
        status.last_skipped = Some(rfc3339(now));
    }
    let cron = Cron::parse(&schedule.spec.schedule);
    match &cron {
        Ok(_) => {
            status.phase = Some("Enabled".into());
            status.validation_errors = None;
        }
        Err(e) => {
            status.phase = Some("FailedValidation".into());
            status.validation_errors = Some(vec![e.to_string()]);
        }
    }
    let runs =
        |status: &ScheduleStatus| Runs {
            created: schedule.metadata.creation_timestamp.as_ref().map(|t| {
                SystemTime::UNIX_EPOCH + Duration::from_secs(t.0.as_second().max(0) as u64)
            }),
            last_backup: parse_time(&status.last_backup),
            last_skipped: parse_time(&status.last_skipped),
        };
    let Ok(cron) = cron else {
        write_status(schedules, &name, schedule.status.as_ref(), &status).await?;
        return Ok(None);
    };
    if runs(&status).due(&cron, now) && !running(backups, &name).await? {
        let backup = backup_of(schedule, now);
        match backups.create(&PostParams::default(), &backup).await {
            Ok(_) => {
                tracing::info!(schedule = %name, backup = %backup.name_any(), "the schedule is due: backup made")
            }
            // Made already (a leader that lost the lease after creating
            // it): the run happened.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
        status.last_backup = Some(rfc3339(now));
    }
    write_status(schedules, &name, schedule.status.as_ref(), &status).await?;
    Ok(runs(&status).next(&cron))
}

async fn write_status(
    schedules: &Api<Schedule>,
    name: &str,
    before: Option<&ScheduleStatus>,
    status: &ScheduleStatus,
) -> Result<(), kube::Error> {
    if before == Some(status) {
        return Ok(());
    }
    super::resource::patch_status(schedules, name, None, status).await
}

/// Whether one of the schedule's backups is still New or InProgress:
/// Velero makes no overlapping backup of a schedule.
async fn running(backups: &Api<Backup>, schedule: &str) -> Result<bool, kube::Error> {
    let selector = format!("{SCHEDULE_NAME_LABEL}={schedule}");
    let list = backups
        .list(&ListParams::default().labels(&selector))
        .await?;
    Ok(list.items.iter().any(|b| {
        let phase = b.status.as_ref().map(|s| s.phase).unwrap_or_default();
        matches!(phase, BackupPhase::New | BackupPhase::InProgress)
    }))
}

/// The Backup a schedule makes at `now`, as Velero's `FromSchedule`: the
/// template's spec; the template's labels, or else the Schedule's, and
/// the schedule-name label; the Schedule's annotations; an owner
/// reference to the Schedule when it asks for one.
fn backup_of(schedule: &Schedule, now: SystemTime) -> Backup {
    let name = schedule.name_any();
    let mut spec = schedule.spec.template.clone();
    let mut labels = spec
        .metadata
        .take()
        .and_then(|m| m.labels)
        .unwrap_or_else(|| schedule.labels().clone());
    labels.insert(SCHEDULE_NAME_LABEL.into(), name.clone());
    let annotations = schedule.annotations().clone();
    let owner = (schedule.spec.use_owner_references_in_backup == Some(true)).then(|| {
        vec![OwnerReference {
            api_version: "iar.dev/v1".into(),
            kind: "Schedule".into(),
            name: name.clone(),
            uid: schedule.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: None,
        }]
    });
    let mut backup = Backup::new(&backup_name(&name, now), spec);
    backup.metadata = ObjectMeta {
        name: Some(backup_name(&name, now)),
        namespace: schedule.namespace(),
        labels: Some(labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
        owner_references: owner,
        ..ObjectMeta::default()
    };
    backup
}
