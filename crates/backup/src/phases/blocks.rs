//! Item blocks' hooks and volume backups: the work set up for a backup,
//! waited for after its pass, and what an interrupted one left. Shared by
//! the first pass (which waits for them), resume (which waits again or
//! fails them) and cancel.

use super::StatusSink;
use super::errors::PhaseError;
use super::journal::Journal;
use super::live_blocks::LiveBlocks;
use super::record::Run;
use super::{CancelProbe, Settings};
use crate::backup::block_work::{BlockWork, LedgerEntry};
use crate::backup::hooks::{
    BackupHooks, HookRunner, HookStatus, LocalProcessRunner, SkippingRunner, Verdict, verdict,
};
use crate::backup::object::{BackupPhase, HookStatusCounts};
use crate::backup::volume_policy::default_volumes_to_fs_backup;
use crate::backup::volumes::{
    LocalDirBackupper, VolumeBackup, VolumeBackupper, VolumeLimits, VolumePhase,
};
use iar_core::clock::Clock;
use iar_core::cluster::{ClusterError, ClusterReader};
use iar_core::store::{BackupFile, BackupStore};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What a backup's blocks need: where hooks run, where volumes go, and
/// the settings that bound them.
pub(super) struct Blocks<'a> {
    pub(super) store: &'a BackupStore,
    pub(super) cluster: &'a Arc<dyn ClusterReader>,
    pub(super) journal: &'a Journal,
    pub(super) status_sink: Option<&'a StatusSink>,
    pub(super) cancel_probe: Option<&'a CancelProbe>,
    /// Where hooks run unless `exec_hooks_locally`; none: skipped.
    pub(super) hook_runner: Option<&'a Arc<dyn HookRunner>>,
    /// Where volumes go unless `volume_data`; none: a warning.
    pub(super) volume_backupper: Option<&'a Arc<dyn VolumeBackupper>>,
    /// Timestamps of volume records and hook runs.
    pub(super) clock: &'a Arc<dyn Clock>,
    pub(super) exec_hooks_locally: bool,
    pub(super) volume_data: Option<&'a PathBuf>,
    pub(super) volume_concurrency: usize,
    pub(super) repository_password: Option<&'a iar_repository::Password>,
    pub(super) fs_backup_timeout: Duration,
    pub(super) max_hook_timeout: Duration,
    /// How often volume progress is persisted while blocks wait.
    pub(super) sync_period: Duration,
    pub(super) live: &'a LiveBlocks,
}

impl<'a> Blocks<'a> {
    /// The block settings of `settings`, with the rest given.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        settings: &'a Settings,
        store: &'a BackupStore,
        cluster: &'a Arc<dyn ClusterReader>,
        journal: &'a Journal,
        status_sink: Option<&'a StatusSink>,
        cancel_probe: Option<&'a CancelProbe>,
        hook_runner: Option<&'a Arc<dyn HookRunner>>,
        volume_backupper: Option<&'a Arc<dyn VolumeBackupper>>,
        clock: &'a Arc<dyn Clock>,
        live: &'a LiveBlocks,
    ) -> Self {
        Blocks {
            store,
            cluster,
            journal,
            status_sink,
            cancel_probe,
            hook_runner,
            volume_backupper,
            clock,
            exec_hooks_locally: settings.exec_hooks_locally,
            volume_data: settings.volume_data.as_ref(),
            volume_concurrency: settings.volume_concurrency,
            repository_password: settings.repository_password.as_ref(),
            fs_backup_timeout: settings.fs_backup_timeout,
            max_hook_timeout: settings.max_hook_timeout,
            sync_period: settings.sync_period,
            live,
        }
    }
}

impl Blocks<'_> {
    /// The hooks and volume backups of this backup's blocks, from its spec
    /// and the settings. A hooks section that does not parse is an error
    /// in the results; the backup goes on without spec hooks.
    ///
    /// The volume policy (`spec.resourcePolicy`) is different: one that is
    /// missing or does not parse fails the backup, because going on
    /// without it could back up volumes the policy skips.
    pub(super) async fn block_work(&self, run: &mut Run) -> Result<Arc<BlockWork>, PhaseError> {
        let work = self.new_block_work(run, false).await?;
        self.live.insert(run.object.work_uid(), &work);
        Ok(work)
    }

    /// [`Blocks::block_work`], not yet shared with the machine's live
    /// blocks; `deletion`: the work of the backup's deletion
    /// ([`BlockWork::for_deletion`]).
    async fn new_block_work(
        &self,
        run: &mut Run,
        deletion: bool,
    ) -> Result<Arc<BlockWork>, PhaseError> {
        let policies = resource_policies(
            &run.object.spec,
            &run.object.metadata.namespace,
            self.cluster.as_ref(),
        )
        .await
        .map_err(|e| PhaseError::invalid(&run.object.metadata.name, e))?;
        let spec = &run.object.spec;
        let hooks = BackupHooks::from_spec(spec).unwrap_or_else(|e| {
            run.results.errors.add(
                "",
                format!("backup {}: spec hooks: {e}", run.object.metadata.name),
            );
            BackupHooks::default()
        });
        let runner: Arc<dyn HookRunner> = if self.exec_hooks_locally {
            Arc::new(LocalProcessRunner {
                volume_data: self.volume_data.cloned().unwrap_or_else(|| ".".into()),
            })
        } else {
            self.hook_runner
                .cloned()
                .unwrap_or_else(|| Arc::new(SkippingRunner))
        };
        let backupper = match self.volume_data {
            Some(dir) => Some(Arc::new(
                LocalDirBackupper::new(dir.clone(), self.store.clone(), self.volume_concurrency)
                    .with_limits(VolumeLimits {
                        timeout: self.fs_backup_timeout,
                        seam: None,
                        fence: None,
                        clock: self.clock.clone(),
                        repository: self.repository_password.cloned(),
                    }),
            ) as Arc<dyn VolumeBackupper>),
            None => self.volume_backupper.cloned(),
        };
        let work = BlockWork::new(
            run.object.metadata.name.clone(),
            hooks,
            runner,
            backupper,
            self.volume_data.cloned(),
            policies,
            default_volumes_to_fs_backup(spec),
            tokio::runtime::Handle::current(),
        )
        .with_ledger(self.store.clone())
        .with_uid(run.object.work_uid(), self.live.claims())
        .with_max_hook_timeout(self.max_hook_timeout)
        .with_clock(self.clock.clone());
        let work = Arc::new(if deletion {
            work.for_deletion()
        } else {
            work.with_driver_check(driver_check(self.store, run.name()))
        });
        // What an earlier attempt of this backup froze (a retried first
        // pass) is in its ledger: carried on, so that no pod is frozen
        // twice (the campaign's seed 1 saw two pre and two post hooks).
        let earlier: Option<Vec<LedgerEntry>> = self
            .store
            .get_json(run.name(), BackupFile::HookLedger)
            .await?;
        if let Some(earlier) = earlier {
            work.continue_ledger(earlier).await;
        }
        Ok(work)
    }

    /// Runs, once, the unfreezes backup `object` still owes, before its
    /// deletion takes the ledger and the claims: a backup that ended (or
    /// expired) while one of its blocks still waited, on a machine that
    /// then lost it or skipped the hook because the backup was being
    /// deleted, left its pod frozen for good (the fault campaign's seeds
    /// 1004, 1404, 1411: short TTLs and API server faults). `Ok(false)`:
    /// unfreezes are owed, the backup is a controller's and this process
    /// runs no hooks (`iar gc` with no cluster): it is kept for a
    /// controller to delete. Each owed
    /// unfreeze of a live pod must end up claimed in the store (run here,
    /// or by whoever claimed it), or the deletion stops, to be tried
    /// again. The sweep runs it for a Failed backup too
    /// ([`super::gc`]): a step's error can end one before its blocks'
    /// post hooks ran.
    pub(super) async fn unfreeze_before_deletion(
        &self,
        object: &crate::backup::object::BackupObject,
    ) -> Result<bool, PhaseError> {
        let name = object.metadata.name.clone();
        let ledger = self.hook_ledger(&name).await?;
        // An owed unfreeze whose claim says how it ended was run (its end
        // may be missing from the ledger: a write lost); one claimed and
        // never ended is run again ([`crate::backup::block_work::post_settled`]).
        let mut unclaimed = Vec::new();
        for pod in BlockWork::owed_post_hooks(&ledger) {
            if !crate::backup::block_work::post_settled(self.store, &name, &pod).await? {
                unclaimed.push(pod);
            }
        }
        if unclaimed.is_empty() {
            return Ok(true);
        }
        if !self.exec_hooks_locally && self.hook_runner.is_none() {
            // A controller's backup waits for a controller; one `iar
            // backup` wrote goes, said: its hooks were local processes,
            // and `iar resume` is what runs them.
            let controllers = object
                .metadata
                .annotations
                .contains_key(crate::backup::object::RESOURCE_UID_ANNOTATION);
            // Owed only to pods that are gone (their node with them): no
            // freeze is left to undo, and nothing waits for a controller
            // (the campaign's seed 4740: a claim its crashed holder never
            // ended, its pod gone with its node). Known only where the
            // cluster is read.
            if controllers && self.cluster.is_live() {
                let live = self.owed_pods(&name, &ledger).await?;
                if !live.iter().any(|p| unclaimed.contains(&p.id)) {
                    tracing::warn!(backup = %name, pods = ?unclaimed, "deleted with post hooks owed to pods that are gone");
                    return Ok(true);
                }
            }
            if !controllers {
                tracing::warn!(backup = %name, "deleted with post hooks owed by its hook ledger (rule: hook-ledger)");
            }
            return Ok(!controllers);
        }
        let pods = self.owed_pods(&name, &ledger).await?;
        let mut run = Run {
            object: object.clone(),
            results: Default::default(),
        };
        let work = self.new_block_work(&mut run, true).await?;
        let mut report = crate::backup::block_work::BlockReport::default();
        work.run_owed_posts(&ledger, &pods, &mut report).await;
        for record in &report.hooks {
            tracing::info!(backup = %name, pod = %record.pod.path(), status = ?record.status, phase = %object.status.phase, "an unfreeze the ended backup owed ran");
        }
        let mut said = Vec::new();
        for (_, e) in report.errors.iter().chain(&report.warnings) {
            tracing::warn!(backup = %name, "running the unfreezes it owed: {e}");
            said.push(format!(
                "{} warning: running the unfreezes it owed: {e}",
                crate::backup::object::rfc3339(self.clock.system_now())
            ));
        }
        self.append_to_log(&name, said).await;
        for pod in pods
            .iter()
            .filter(|p| work.has_hooks(p, crate::backup::hooks::HookPhase::Post))
        {
            let what = ["post", pod.id.namespace.as_str(), pod.id.name.as_str()];
            if self.store.read_claim(&name, &what).await?.is_none() {
                return Err(PhaseError::UnfreezeOwed {
                    name,
                    why: format!(
                        "the post hooks of pod {} are owed and were not run",
                        pod.id.path()
                    ),
                });
            }
        }
        Ok(true)
    }

    /// Adds `lines` to the ended backup `name`'s stored log, so that what
    /// its deletion or the sweep did for it (a second unfreeze) is read
    /// where the backup's own run is. Under the backup's lease: no run of
    /// it rewrites the log meanwhile. A log that cannot be written keeps
    /// the lines in the host log only.
    async fn append_to_log(&self, name: &str, lines: Vec<String>) {
        if lines.is_empty() {
            return;
        }
        let mut log = match self.store.get_logs(name).await {
            Ok(log) => log.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(backup = %name, "its log was not added to: {e}");
                return;
            }
        };
        log.extend(lines);
        if let Err(e) = self.store.put_logs(name, &log).await {
            tracing::warn!(backup = %name, "its log was not added to: {e}");
        }
    }

    /// Asks the node agents to stop every unfinished volume backup of
    /// `name` (no lease needed: it only marks the requests); a failure to
    /// ask is logged, and whoever cancels goes on.
    pub(super) async fn cancel_volume_backups(&self, name: &str) {
        if let Some(backupper) = self.volume_backupper
            && let Err(e) = backupper.cancel_backup(name).await
        {
            tracing::warn!(backup = %name, "{e}");
        }
    }

    /// Records every volume backup the pass started, with the store's
    /// retries, failing the step if it cannot: this write is the one a
    /// restart that finds the tarball relies on to know the volumes
    /// exist. Best effort here (as [`Blocks::persist_volume_progress`]
    /// is) let a store fault drop it while the tarball landed: a process
    /// that took the backup over then waited for no volume and completed
    /// it with no volume records at all (the fault campaign's seeds 1222,
    /// 1230 and 1321). Written before the tarball, no other machine has
    /// final records yet for it to land over.
    pub(super) async fn record_started_volumes(
        &self,
        name: &str,
        work: &BlockWork,
    ) -> Result<(), PhaseError> {
        let started = work.progress();
        if started.is_empty() {
            return Ok(());
        }
        self.store
            .put_json(name, BackupFile::VolumeProgress, &started)
            .await?;
        Ok(())
    }

    /// Writes the latest state of every volume backup started so far (none
    /// started: nothing written).
    /// Best effort, and bounded: a progress write is for the eyes, and
    /// one still retried (the store's retries last minutes) after this
    /// machine lost the backup could land over the final records another
    /// wrote. It never fails the step.
    pub(super) async fn persist_volume_progress(
        &self,
        name: &str,
        work: &BlockWork,
    ) -> Result<(), PhaseError> {
        let progress = work.progress();
        if progress.is_empty() {
            return Ok(());
        }
        let bound = self
            .sync_period
            .clamp(Duration::from_secs(1), Duration::from_secs(10));
        let write = self
            .store
            .put_json(name, BackupFile::VolumeProgress, &progress);
        match tokio::time::timeout(bound, write).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(backup = %name, "volume progress not written: {e}"),
            Err(_) => {
                tracing::warn!(backup = %name, "volume progress not written within {bound:?}")
            }
        }
        Ok(())
    }

    /// Waits for every block's volume backups and post hooks, persisting
    /// the volume backups' progress once per sync period and at the end;
    /// records every hook run and every volume backup that did not complete
    /// in the results and the log.
    /// `resumed`: the work was found by a later step, which checks that
    /// every volume the stored pods chose has a record
    /// ([`Blocks::unstarted_volumes`]); the first pass started them itself.
    pub(super) async fn finish_blocks(
        &self,
        run: &mut Run,
        work: &BlockWork,
        resumed: bool,
    ) -> Result<(), PhaseError> {
        let name = run.name().to_string();
        let report = {
            let finished = work.finish();
            tokio::pin!(finished);
            let mut tick = tokio::time::interval(self.sync_period);
            let mut given_up = false;
            loop {
                tokio::select! {
                    report = &mut finished => break report,
                    _ = tick.tick() => {
                        self.persist_volume_progress(&name, work).await?;
                        self.show_volume_progress(run, &work.progress());
                        if !given_up
                            && let Some(probe) = self.cancel_probe
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
        let mut report = report;
        unfollowed_volumes(&mut report, work.progress(), self.clock.system_now());
        // Before the blocks are recorded every unfreeze still owed runs
        // (once: claimed in the store): a block whose wait found the
        // backup driven elsewhere left its own.
        let ledger = work.ledger_entries().await;
        if !BlockWork::owed_post_hooks(&ledger).is_empty() {
            let pods = self.owed_pods(&name, &ledger).await?;
            work.run_owed_posts(&ledger, &pods, &mut report).await;
        }
        if resumed {
            let unstarted = self.unstarted_volumes(&name, work, &report.volumes).await?;
            report.errors.extend(unstarted);
        }
        self.show_volume_progress(run, &report.volumes);
        // The report holds every hook run: it replaces the counts of the
        // pre hooks persisted before the wait.
        run.object.status.hook_status = None;
        self.record_blocks(run, report).await?;
        self.live.remove(run.object.work_uid());
        Ok(())
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
        if let Some(sink) = self.status_sink {
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
        for (ns, e) in report.errors {
            self.journal.line(&name, format!("error: {e}"));
            run.results.errors.add(&ns, e);
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
            // What a Completed volume left out is the backup's warning:
            // a restore of it will lack these entries.
            for w in v.skipped_warnings() {
                self.journal.line(&name, format!("warning: {w}"));
                run.results.warnings.add(&v.pod_namespace, w);
            }
            if v.phase != VolumePhase::Completed {
                let m = format!(
                    "volume backup {}: {:?}: {}",
                    v.describe(),
                    v.phase,
                    v.reason()
                );
                self.journal.line(&name, format!("error: {m}"));
                run.results.errors.add(&v.pod_namespace, m);
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
            || self.volume_data.is_some()
            || self.volume_backupper.is_none()
        {
            return Ok(false);
        }
        let tarball = BackupFile::Contents.key(run.name());
        Ok(self.store.exists_key(&tarball).await?)
    }

    /// Resumes the wait of a backup whose items were written: follows its
    /// unfinished volume backups again, runs each owed post hook once,
    /// records it all as [`Blocks::finish_blocks`] does.
    pub(super) async fn resume_blocks(&self, run: &mut Run) -> Result<(), PhaseError> {
        let name = run.name().to_string();
        if let Some(work) = self.live.get(run.object.work_uid()) {
            if work.has_all_blocks() {
                self.journal.line(
                    &name,
                    "resumed by the process that runs its blocks: waiting for them as they go on",
                );
                return self.finish_blocks(run, &work, true).await;
            }
            // Work of an attempt of this machine that did not start every
            // block (a pass cut short, a resume by the records): its
            // report is not the backup's (the fault campaign's seeds 4955
            // and 4960 recorded such an empty one). The records decide.
            work.abort();
            self.live.remove(run.object.work_uid());
        }
        let ledger = self.hook_ledger(&name).await?;
        let volumes = self.volume_records(&name).await?;
        let pods = self.owed_pods(&name, &ledger).await?;
        let unfinished = volumes.iter().filter(|v| !v.phase.is_terminal()).count();
        self.journal.line(
            &name,
            format!(
                "resumed after a restart with its items written: waiting again for {unfinished} volume backups, {} pods' post hooks owed",
                pods.len()
            ),
        );
        let work = self.block_work(run).await?;
        let unrecorded = self
            .unrecorded_freezes(&work, &name, &ledger, &volumes)
            .await?;
        let mut report = work.resume(&ledger, volumes, &pods).await;
        report.errors.extend(unrecorded);
        let unstarted = self
            .unstarted_volumes(&name, &work, &report.volumes)
            .await?;
        report.errors.extend(unstarted);
        self.record_blocks(run, report).await
    }

    /// Every volume the stored pods chose for a file-system backup that
    /// has no record, as the backup's errors: a resume knows only the
    /// records, and a first pass whose step ended after its tarball may
    /// have started none, or lost them, and said so only in a log that
    /// went with it (the fault campaign's seeds 4955 and 4960: Completed,
    /// a pod's volume neither backed up nor reported). The stored pods,
    /// claims and volumes are read from the tarball.
    async fn unstarted_volumes(
        &self,
        name: &str,
        work: &BlockWork,
        recorded: &[VolumeBackup],
    ) -> Result<Vec<(String, String)>, PhaseError> {
        let Some(contents) = self.store.get(name, BackupFile::Contents).await? else {
            return Ok(Vec::new());
        };
        let items = super::record::blocking(name, "reading the tarball", move || {
            let wanted = [
                "resources/pods/namespaces/",
                "resources/persistentvolumeclaims/namespaces/",
                "resources/persistentvolumes/cluster/",
            ];
            Ok(iar_core::store::tarball::read(&contents)?
                .into_iter()
                .filter(|(path, _)| wanted.iter().any(|w| path.starts_with(w)))
                .filter_map(|(_, data)| {
                    let value = serde_json::from_slice(&data).ok()?;
                    iar_core::item::Item::from_value(value, iar_core::catalog::Catalog::builtin())
                        .ok()
                })
                .collect::<Vec<_>>())
        })
        .await?;
        let mut out = Vec::new();
        for (pod, volume) in work.chosen_fs_volumes(&items) {
            let has_record = recorded.iter().any(|v| {
                v.pod_namespace == pod.namespace && v.pod_name == pod.name && v.volume == volume
            });
            if !has_record {
                let m = format!(
                    "volume {volume} of pod {}: chosen for a file-system backup, but no backup of it was started or recorded; it is not in this backup (rule: volume-unrecorded)",
                    pod.path()
                );
                out.push((pod.namespace.clone(), m));
            }
        }
        Ok(out)
    }

    /// The pods whose volumes were backed up while the ledger holds no
    /// entry for their pre hooks: the freeze was not run, or not recorded
    /// (the first pass refuses one it cannot record, and its error died
    /// with the pass when its step failed after the items: the fault
    /// campaign's seed 1015, a Completed backup whose freeze never ran).
    /// Each is an error of the backup: its volume may be backed up
    /// unfrozen.
    async fn unrecorded_freezes(
        &self,
        work: &BlockWork,
        name: &str,
        ledger: &[LedgerEntry],
        volumes: &[VolumeBackup],
    ) -> Result<Vec<(String, String)>, PhaseError> {
        let mut pods: Vec<iar_core::item::ItemRef> = volumes
            .iter()
            .map(|v| {
                iar_core::item::ItemRef::new(
                    "",
                    "pods",
                    v.pod_namespace.clone(),
                    v.pod_name.clone(),
                )
            })
            .collect();
        pods.sort_by_key(|a| a.path());
        pods.dedup();
        let mut out = Vec::new();
        for pod in pods {
            if ledger.iter().any(|e| e.phase == "pre" && e.pod == pod) {
                continue;
            }
            let item = match self.cluster.get_item_async(&pod).await {
                Ok(Some(item)) => item,
                Ok(None) => continue,
                Err(source) => {
                    return Err(PhaseError::Items {
                        name: name.to_string(),
                        source,
                    });
                }
            };
            if work.has_hooks(&item, crate::backup::hooks::HookPhase::Pre) {
                out.push((
                    pod.namespace.clone(),
                    format!(
                        "pre hooks of pod {}: no record of them in the hook ledger (not run, or not recorded by an earlier attempt): its volumes may be backed up unfrozen (rule: hook-ledger)",
                        pod.path()
                    ),
                ));
            }
        }
        Ok(out)
    }

    /// Backup `name`'s hook ledger as stored (none: empty).
    async fn hook_ledger(&self, name: &str) -> Result<Vec<LedgerEntry>, PhaseError> {
        Ok(self
            .store
            .get_json(name, BackupFile::HookLedger)
            .await?
            .unwrap_or_default())
    }

    /// Backup `name`'s volume records: as its blocks ended, or else as
    /// their last progress said.
    async fn volume_records(&self, name: &str) -> Result<Vec<VolumeBackup>, PhaseError> {
        if let Some(ended) = self.store.get_json(name, BackupFile::VolumeBackups).await? {
            return Ok(ended);
        }
        Ok(self
            .store
            .get_json(name, BackupFile::VolumeProgress)
            .await?
            .unwrap_or_default())
    }

    /// The live pods whose post hooks `ledger` says are owed. A pod that
    /// cannot be read now is not a pod that is gone: the step fails and is
    /// tried again, its unfreeze still owed (the fault campaign's seed 753
    /// took an API server out of reach for a deleted pod, and completed
    /// with the freeze in place).
    async fn owed_pods(
        &self,
        name: &str,
        ledger: &[LedgerEntry],
    ) -> Result<Vec<iar_core::item::Item>, PhaseError> {
        let mut pods = Vec::new();
        for pod in BlockWork::owed_post_hooks(ledger) {
            match self.cluster.get_item_async(&pod).await {
                Ok(Some(item)) => pods.push(item),
                Ok(None) => {}
                Err(source) => {
                    return Err(PhaseError::Items {
                        name: name.to_string(),
                        source,
                    });
                }
            }
        }
        Ok(pods)
    }

    /// Ends the blocks of a backup that cannot go on (its first pass was
    /// interrupted, or it is canceled): fails the volume backups a killed
    /// process left unfinished, and runs the post hooks still owed, once
    /// ([`BlockWork::run_owed_posts`]): a freeze is undone whatever
    /// becomes of the backup (the fault campaign found pods left frozen by
    /// backups failed or canceled after their pre hooks). A machine that
    /// still runs the blocks itself waits for them instead.
    pub(super) async fn interrupted_blocks(&self, run: &mut Run) -> Result<(), PhaseError> {
        if let Some(work) = self.live.get(run.object.work_uid()) {
            return self.finish_blocks(run, &work, false).await;
        }
        let name = run.name().to_string();
        let ledger = self.hook_ledger(&name).await?;
        let mut volumes = self.volume_records(&name).await?;
        let pods = self.owed_pods(&name, &ledger).await?;
        let messages =
            crate::backup::block_work::interrupted(&mut volumes, self.clock.system_now());
        if !volumes.is_empty() {
            self.store
                .put_json(&name, BackupFile::VolumeBackups, &volumes)
                .await?;
        }
        for (ns, m) in messages {
            self.journal.line(&name, format!("error: {m}"));
            run.results.errors.add(&ns, m);
        }
        if BlockWork::owed_post_hooks(&ledger).is_empty() {
            return Ok(());
        }
        // The volume backups its blocks started end before the unfreeze,
        // those no record names included (the process that started them
        // stopped before it recorded them: the fault campaign's seed
        // 3706 ran the unfreeze 2.5 s before its agent's request ended).
        if let Some(backupper) = self.volume_backupper
            && let Err(why) = backupper.end_backup(&name).await
        {
            return Err(PhaseError::VolumeData { name, why });
        }
        let work = self.block_work(run).await?;
        work.continue_ledger(ledger.clone()).await;
        let mut report = crate::backup::block_work::BlockReport::default();
        work.run_owed_posts(&ledger, &pods, &mut report).await;
        self.record_blocks(run, report).await
    }
}

/// Every volume backup this machine started ends in the report: one whose
/// wait ended before it did (a block's wait stopped) is failed here, with
/// the report's error, rather than left as its last progress said (the
/// fault campaign's seed 1017: a Completed backup whose volume record
/// stayed InProgress).
fn unfollowed_volumes(
    report: &mut crate::backup::block_work::BlockReport,
    started: Vec<VolumeBackup>,
    now: std::time::SystemTime,
) {
    for mut v in started {
        let followed = report.volumes.iter().any(|r| {
            r.pod_namespace == v.pod_namespace && r.pod_name == v.pod_name && r.volume == v.volume
        });
        if followed {
            continue;
        }
        if !v.phase.is_terminal() {
            v.phase = VolumePhase::Failed;
            v.error = Some("its wait ended before the volume backup did".into());
            v.completed = Some(now);
        }
        report.volumes.push(v);
    }
}

/// Whether this machine still holds backup `name`'s lease in the store:
/// another holder means the backup was taken over; a store that cannot be
/// read leaves it unknown, and the post hooks to whoever can.
fn driver_check(store: &BackupStore, name: &str) -> crate::backup::block_work::DriverCheck {
    let (store, name) = (store.clone(), name.to_string());
    Arc::new(move || {
        let (store, name) = (store.clone(), name.clone());
        Box::pin(async move {
            match store.current_lease(&name).await {
                Ok(Some(lease)) if lease.holder != store.holder() => {
                    // A backup that has ended is driven by nobody: its
                    // lease's holder (a reconcile writing its status, a
                    // sweep) runs no blocks, so the unfreeze is this
                    // block's, claimed once (the fault campaign's seeds
                    // 1617, 1710, 1733: a first pass failed after its
                    // freeze, and the freeze was left).
                    let ended = store
                        .get_json::<crate::backup::object::BackupObject>(
                            &name,
                            BackupFile::Metadata,
                        )
                        .await
                        .ok()
                        .flatten()
                        .is_some_and(|o| o.status.phase.is_terminal());
                    if ended {
                        return Ok(());
                    }
                    Err(format!("the backup was taken over by {}", lease.holder))
                }
                Ok(_) => Ok(()),
                Err(e) => Err(format!(
                    "whether this replica still drives the backup cannot be read: {e}"
                )),
            }
        })
    })
}

/// Why a backup's `spec.resourcePolicy` cannot be used (the backup then
/// fails: going on without it could back up volumes it skips).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("resourcePolicy.{field} must be a string")]
    NotAString { field: &'static str },
    #[error("resourcePolicy.kind is {kind:?}; only a configmap is supported")]
    Kind { kind: String },
    #[error("resourcePolicy: reading configmap {namespace}/{name}: {source}")]
    Read {
        namespace: String,
        name: String,
        #[source]
        source: ClusterError,
    },
    #[error("resourcePolicy: configmap {namespace}/{name} does not exist")]
    Missing { namespace: String, name: String },
    #[error(
        "resourcePolicy: configmap {namespace}/{name} must hold exactly one data key, the policy"
    )]
    NotOneKey { namespace: String, name: String },
    #[error("resourcePolicy: configmap {namespace}/{name}: data.{key} is not a string")]
    NotText {
        namespace: String,
        name: String,
        key: String,
    },
    #[error("configmap {namespace}/{name}, data.{key}: {source}")]
    Parse {
        namespace: String,
        name: String,
        key: String,
        #[source]
        source: crate::backup::volume_policy::PolicyError,
    },
}

/// The backup's volume policy: Velero's `spec.resourcePolicy` names a
/// ConfigMap (`kind: configmap`) in the backup's namespace whose one data
/// value is the policy document. `Ok(None)` when the spec names none.
pub async fn resource_policies(
    spec: &serde_json::Value,
    backup_namespace: &str,
    cluster: &dyn ClusterReader,
) -> Result<Option<crate::backup::volume_policy::ResourcePolicies>, PolicyError> {
    let Some(reference) = spec.get("resourcePolicy").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let field = |field: &'static str| {
        reference
            .get(field)
            .and_then(|v| v.as_str())
            .ok_or(PolicyError::NotAString { field })
    };
    let kind = field("kind")?;
    if !kind.eq_ignore_ascii_case("configmap") {
        return Err(PolicyError::Kind { kind: kind.into() });
    }
    let name = field("name")?;
    let (namespace, name) = (backup_namespace.to_string(), name.to_string());
    let id = iar_core::item::ItemRef::new("", "configmaps", &namespace, &name);
    let config_map = match cluster.get_async(&id).await {
        Ok(Some(found)) => found,
        Ok(None) => return Err(PolicyError::Missing { namespace, name }),
        Err(source) => {
            return Err(PolicyError::Read {
                namespace,
                name,
                source,
            });
        }
    };
    let Some(data) = config_map
        .get("data")
        .and_then(|d| d.as_object())
        .filter(|d| d.len() == 1)
    else {
        return Err(PolicyError::NotOneKey { namespace, name });
    };
    let (key, document) = data.iter().next().expect("one key, checked above");
    let Some(document) = document.as_str() else {
        return Err(PolicyError::NotText {
            namespace,
            name,
            key: key.clone(),
        });
    };
    crate::backup::volume_policy::ResourcePolicies::parse(document)
        .map(Some)
        .map_err(|source| PolicyError::Parse {
            namespace,
            name,
            key: key.clone(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block whose backup another process holds leaves the unfreeze to
    /// it while the backup runs; once the backup has ended (a first pass
    /// failed after its freeze, then a reconcile or a sweep took the
    /// lease), nobody else runs blocks, and the unfreeze is the block's.
    #[tokio::test]
    async fn an_ended_backup_leaves_its_unfreeze_to_the_block() {
        let dir = tempfile::tempdir().unwrap();
        let mine = BackupStore::open(dir.path().to_str().unwrap())
            .unwrap()
            .with_holder_name("mine");
        let theirs = mine.clone().with_holder_name("theirs");
        let mut object =
            crate::backup::object::BackupObject::new("b", "velero", "uid", serde_json::json!({}));
        object.status.phase = BackupPhase::InProgress;
        mine.put_json("b", BackupFile::Metadata, &object)
            .await
            .unwrap();
        let _held = theirs
            .acquire_lease("b", Duration::from_secs(60))
            .await
            .unwrap();
        let check = driver_check(&mine, "b");
        let refused = check().await.unwrap_err();
        assert!(refused.contains("taken over"), "{refused}");
        object.status.phase = BackupPhase::Failed;
        theirs
            .put_json("b", BackupFile::Metadata, &object)
            .await
            .unwrap();
        check()
            .await
            .expect("an ended backup's unfreeze is the block's");
    }

    /// Pod `pod`'s volume `data` record, in `phase`.
    fn volume(pod: &str, phase: VolumePhase) -> VolumeBackup {
        let request = crate::backup::volumes::VolumeRequest {
            backup: "b".into(),
            backup_uid: String::new(),
            pod: iar_core::item::ItemRef::new("", "pods", "shop", pod),
            volume: "data".into(),
            pvc: None,
        };
        VolumeBackup {
            phase,
            ..request.record_at(std::time::SystemTime::UNIX_EPOCH)
        }
    }

    /// A volume whose wait ended before it did is failed in the report, so
    /// the backup cannot be Completed with it InProgress; one followed to
    /// its end is left as it ended.
    #[test]
    fn a_volume_not_followed_to_its_end_is_failed_in_the_report() {
        let mut report = crate::backup::block_work::BlockReport {
            volumes: vec![volume("db-0", VolumePhase::Completed)],
            ..Default::default()
        };
        let started = vec![
            volume("db-0", VolumePhase::InProgress),
            volume("db-1", VolumePhase::InProgress),
        ];
        unfollowed_volumes(&mut report, started, std::time::SystemTime::UNIX_EPOCH);
        let phases: Vec<_> = report
            .volumes
            .iter()
            .map(|v| (v.pod_name.as_str(), v.phase))
            .collect();
        assert_eq!(
            phases,
            [
                ("db-0", VolumePhase::Completed),
                ("db-1", VolumePhase::Failed)
            ]
        );
        assert!(
            report.volumes[1]
                .error
                .as_deref()
                .unwrap()
                .contains("wait ended")
        );
    }
}
