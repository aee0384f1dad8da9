//! Item blocks' hooks and volume backups: the work set up for a backup,
//! waited for after its pass, and what an interrupted one left.

use crate::backup::block_work::{BlockWork, LedgerEntry};
use crate::backup::hooks::{
    BackupHooks, HookRunner, HookStatus, LocalProcessRunner, SkippingRunner, Verdict, verdict,
};
use crate::backup::object::HookStatusCounts;
use crate::backup::volume_policy::default_volumes_to_fs_backup;
use crate::backup::volumes::{
    LocalDirBackupper, VolumeBackup, VolumeBackupper, VolumeLimits, VolumePhase,
};
use iar_core::cluster::ClusterReader;
use iar_core::store::BackupFile;
use std::sync::Arc;

use super::*;

impl PhaseMachine {
    /// The hooks and volume backups of this backup's blocks, from its spec
    /// and the settings. A hooks section that does not parse is an error
    /// in the results; the backup goes on without spec hooks.
    ///
    /// The volume policy (`spec.resourcePolicy`) is different: one that is
    /// missing or does not parse fails the backup, because going on
    /// without it could back up volumes the policy skips.
    pub(super) async fn block_work(&self, run: &mut Run) -> Result<Arc<BlockWork>, PhaseError> {
        let policies = resource_policies(
            &run.object.spec,
            &run.object.metadata.namespace,
            self.cluster.as_ref(),
        )
        .await
        .map_err(|reason| PhaseError::Invalid {
            name: run.object.metadata.name.clone(),
            reason,
        })?;
        let spec = &run.object.spec;
        let hooks = BackupHooks::from_spec(spec).unwrap_or_else(|e| {
            run.results.errors.add(
                "",
                format!("backup {}: spec hooks: {e}", run.object.metadata.name),
            );
            BackupHooks::default()
        });
        let runner: Arc<dyn HookRunner> = if self.settings.exec_hooks_locally {
            Arc::new(LocalProcessRunner {
                volume_data: self
                    .settings
                    .volume_data
                    .clone()
                    .unwrap_or_else(|| ".".into()),
            })
        } else {
            self.hook_runner
                .clone()
                .unwrap_or_else(|| Arc::new(SkippingRunner))
        };
        let backupper = match &self.settings.volume_data {
            Some(dir) => Some(Arc::new(
                LocalDirBackupper::new(
                    dir.clone(),
                    self.store.clone(),
                    self.settings.volume_concurrency,
                )
                .with_limits(VolumeLimits {
                    timeout: self.settings.fs_backup_timeout,
                    seam: None,
                    fence: None,
                }),
            ) as Arc<dyn VolumeBackupper>),
            None => self.volume_backupper.clone(),
        };
        Ok(Arc::new(
            BlockWork::new(
                run.object.metadata.name.clone(),
                hooks,
                runner,
                backupper,
                self.settings.volume_data.clone(),
                policies,
                default_volumes_to_fs_backup(spec),
                tokio::runtime::Handle::current(),
            )
            .with_ledger(self.store.clone())
            .with_max_hook_timeout(self.settings.max_hook_timeout),
        ))
    }

    /// Writes the latest state of every volume backup started so far (none
    /// started: nothing written).
    pub(super) async fn persist_volume_progress(
        &self,
        name: &str,
        work: &BlockWork,
    ) -> Result<(), PhaseError> {
        let progress = work.progress();
        if !progress.is_empty() {
            self.store
                .put_json(name, BackupFile::VolumeBackups, &progress)
                .await?;
        }
        Ok(())
    }

    /// Waits for every block's volume backups and post hooks, persisting
    /// the volume backups' progress once per sync period and at the end;
    /// records every hook run and every volume backup that did not complete
    /// in the results and the log.
    pub(super) async fn finish_blocks(
        &self,
        run: &mut Run,
        work: &BlockWork,
    ) -> Result<(), PhaseError> {
        let name = run.name().to_string();
        let report = {
            let finished = work.finish();
            tokio::pin!(finished);
            let mut tick = tokio::time::interval(self.settings.sync_period);
            let mut given_up = false;
            loop {
                tokio::select! {
                    report = &mut finished => break report,
                    _ = tick.tick() => {
                        self.persist_volume_progress(&name, work).await?;
                        self.show_volume_progress(run, &work.progress());
                        if !given_up
                            && let Some(probe) = &self.cancel_probe
                            && probe(name.clone()).await
                        {
                            given_up = true;
                            self.journal.line(&name, "the backup was given up: its volume backups are canceled");
                            self.cancel_volume_backups(&name).await;
                        }
                    }
                }
            }
        };
        self.show_volume_progress(run, &report.volumes);
        // The report holds every hook run: it replaces the counts of the
        // pre hooks persisted before the wait.
        run.object.status.hook_status = None;
        self.record_blocks(run, report).await
    }

    /// The volume backups' counts and bytes on the backup's status, told
    /// to the status sink when they changed (at most once a sync period
    /// while blocks wait); persisted with the next phase change.
    fn show_volume_progress(
        &self,
        run: &mut Run,
        volumes: &[crate::backup::volumes::VolumeBackup],
    ) {
        if volumes.is_empty() {
            return;
        }
        let counts = crate::backup::object::VolumeBackupCounts {
            attempted: volumes.len() as u64,
            completed: volumes
                .iter()
                .filter(|v| v.phase == crate::backup::volumes::VolumePhase::Completed)
                .count() as u64,
            failed: volumes
                .iter()
                .filter(|v| {
                    v.phase.is_terminal()
                        && v.phase != crate::backup::volumes::VolumePhase::Completed
                })
                .count() as u64,
            bytes_done: volumes.iter().map(|v| v.bytes_done).sum(),
            bytes_total: volumes.iter().map(|v| v.bytes_total).sum(),
        };
        if run.object.status.volume_backups.as_ref() == Some(&counts) {
            return;
        }
        run.object.status.volume_backups = Some(counts);
        if let Some(sink) = &self.status_sink {
            sink(&run.object);
        }
    }

    /// Records every hook run and every volume backup that did not
    /// complete in the results and the log, the hook counts in the status,
    /// and the volume backups' final records.
    async fn record_blocks(
        &self,
        run: &mut Run,
        report: crate::backup::block_work::BlockReport,
    ) -> Result<(), PhaseError> {
        let name = run.name().to_string();
        let ran = report
            .hooks
            .iter()
            .filter(|r| !matches!(r.status, HookStatus::Skipped { .. }));
        let (attempted, failed) = ran.fold((0, 0), |(a, f), r| {
            (a + 1, f + u64::from(r.status != HookStatus::Succeeded))
        });
        // Added to what is there: a resumed backup's status already counts
        // the hooks run before the restart.
        if attempted > 0 {
            let before = run.object.status.hook_status.take().unwrap_or_default();
            run.object.status.hook_status = Some(HookStatusCounts {
                hooks_attempted: before.hooks_attempted + attempted,
                hooks_failed: before.hooks_failed + failed,
            });
        }
        for record in &report.hooks {
            let ns = record.pod.namespace.as_str();
            // Escaped: what a hook printed is the pod's, not iar's.
            for (stream, text) in record.output.log_lines() {
                self.journal.line(
                    &name,
                    format!("hook {stream} of pod {}/{}: {text}", ns, record.pod.name),
                );
            }
            match verdict(record) {
                Verdict::Ok => self.journal.line(&name, format!("hook: {record}")),
                Verdict::Warning(m) => {
                    self.journal.line(&name, format!("warning: hook: {m}"));
                    run.results.warnings.add(ns, m);
                }
                Verdict::BlockFailed(m) => {
                    self.journal.line(&name, format!("error: hook: {m}"));
                    run.results.errors.add(ns, m);
                }
            }
        }
        for (ns, w) in report.warnings {
            self.journal.line(&name, format!("warning: {w}"));
            run.results.warnings.add(&ns, w);
        }
        for v in &report.volumes {
            self.journal.line(
                &name,
                format!(
                    "volume backup: {}: {:?}, {}/{} bytes",
                    v.describe(),
                    v.phase,
                    v.bytes_done,
                    v.bytes_total
                ),
            );
            if v.phase != VolumePhase::Completed {
                run.results.errors.add(
                    &v.pod_namespace,
                    format!(
                        "volume backup {}: {:?}: {}",
                        v.describe(),
                        v.phase,
                        v.error.as_deref().unwrap_or("no reason given")
                    ),
                );
            }
        }
        if !report.volumes.is_empty() {
            self.store
                .put_json(&name, BackupFile::VolumeBackups, &report.volumes)
                .await?;
        }
        Ok(())
    }

    /// Whether a backup found InProgress after a restart can go on: its
    /// items and operations were written (the tarball exists), and its
    /// volume backups are not this process's own work (the node agents'
    /// requests outlive the controller; a `--volume-data` backup died with
    /// the process that ran it).
    pub(super) async fn blocks_resumable(&self, run: &Run) -> Result<bool, PhaseError> {
        if run.object.status.phase != BackupPhase::InProgress
            || self.settings.volume_data.is_some()
            || self.volume_backupper.is_none()
        {
            return Ok(false);
        }
        let tarball = BackupFile::Contents.key(run.name());
        Ok(self.store.exists_key(&tarball).await?)
    }

    /// Resumes the wait of a backup whose items were written: follows its
    /// unfinished volume backups again, runs each owed post hook once,
    /// records it all as [`PhaseMachine::finish_blocks`] does.
    pub(super) async fn resume_blocks(&self, run: &mut Run) -> Result<(), PhaseError> {
        let name = run.name().to_string();
        let ledger: Vec<LedgerEntry> = self
            .store
            .get_json(&name, BackupFile::HookLedger)
            .await?
            .unwrap_or_default();
        let volumes: Vec<VolumeBackup> = self
            .store
            .get_json(&name, BackupFile::VolumeBackups)
            .await?
            .unwrap_or_default();
        let mut pods = Vec::new();
        for pod in BlockWork::owed_post_hooks(&ledger) {
            match self.cluster.get_item_async(&pod).await {
                Ok(Some(item)) => pods.push(item),
                Ok(None) => {}
                Err(e) => run.results.warnings.add(
                    &pod.namespace,
                    format!("reading pod {pod} for its post hooks: {e}"),
                ),
            }
        }
        let unfinished = volumes.iter().filter(|v| !v.phase.is_terminal()).count();
        self.journal.line(
            &name,
            format!(
                "resumed after a restart with its items written: waiting again for {unfinished} volume backups, {} pods' post hooks owed",
                pods.len()
            ),
        );
        let work = self.block_work(run).await?;
        let report = work.resume(&ledger, volumes, &pods).await;
        self.record_blocks(run, report).await
    }

    /// Fails the volume backups a killed process left unfinished and
    /// reports the post hooks it interrupted or never reached, from the
    /// hook ledger; runs none of them.
    pub(super) async fn interrupted_blocks(&self, run: &mut Run) -> Result<(), PhaseError> {
        let name = run.name().to_string();
        let ledger: Vec<LedgerEntry> = self
            .store
            .get_json(&name, BackupFile::HookLedger)
            .await?
            .unwrap_or_default();
        let mut volumes: Vec<VolumeBackup> = self
            .store
            .get_json(&name, BackupFile::VolumeBackups)
            .await?
            .unwrap_or_default();
        let messages = crate::backup::block_work::interrupted(&ledger, &mut volumes);
        if !volumes.is_empty() {
            self.store
                .put_json(&name, BackupFile::VolumeBackups, &volumes)
                .await?;
        }
        for (ns, m) in messages {
            self.journal.line(&name, format!("error: {m}"));
            run.results.errors.add(&ns, m);
        }
        Ok(())
    }
}

/// The backup's volume policy: Velero's `spec.resourcePolicy` names a
/// ConfigMap (`kind: configmap`) in the backup's namespace whose one data
/// value is the policy document. `Ok(None)` when the spec names none.
pub async fn resource_policies(
    spec: &serde_json::Value,
    backup_namespace: &str,
    cluster: &dyn ClusterReader,
) -> Result<Option<crate::backup::volume_policy::ResourcePolicies>, String> {
    let Some(reference) = spec.get("resourcePolicy").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let field = |f: &str| {
        reference
            .get(f)
            .and_then(|v| v.as_str())
            .ok_or_else(|| format!("resourcePolicy.{f} must be a string"))
    };
    let kind = field("kind")?;
    if !kind.eq_ignore_ascii_case("configmap") {
        return Err(format!(
            "resourcePolicy.kind is {kind:?}; only a configmap is supported"
        ));
    }
    let name = field("name")?;
    let id = iar_core::item::ItemRef::new("", "configmaps", backup_namespace, name);
    let config_map = cluster
        .get_async(&id)
        .await
        .map_err(|e| format!("resourcePolicy: reading configmap {backup_namespace}/{name}: {e}"))?
        .ok_or_else(|| {
            format!("resourcePolicy: configmap {backup_namespace}/{name} does not exist")
        })?;
    let data = config_map
        .get("data")
        .and_then(|d| d.as_object())
        .filter(|d| d.len() == 1)
        .ok_or_else(|| {
            format!("resourcePolicy: configmap {backup_namespace}/{name} must hold exactly one data key, the policy")
        })?;
    let (key, document) = data.iter().next().expect("one key, checked above");
    let document = document.as_str().ok_or_else(|| {
        format!("resourcePolicy: configmap {backup_namespace}/{name}: data.{key} is not a string")
    })?;
    crate::backup::volume_policy::ResourcePolicies::parse(document)
        .map(Some)
        .map_err(|e| format!("configmap {backup_namespace}/{name}, data.{key}: {e}"))
}
