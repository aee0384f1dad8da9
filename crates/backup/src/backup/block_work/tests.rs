use super::*;
use crate::backup::hooks::{HookRun, HookStatus, OnError, ResolvedHook};
use crate::backup::volumes::VolumePhase;
use iar_core::catalog::Catalog;

/// Plays the hooks: each pre hook ends as `pre` says, each post hook
/// succeeds; every hook run is kept (phase, pod, timeout).
struct Scripted {
    pre: HookStatus,
    ran: Mutex<Vec<(HookPhase, String, Duration)>>,
}

impl Scripted {
    /// How many hooks of `phase` ran.
    fn count(&self, phase: HookPhase) -> usize {
        self.ran
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _, _)| *p == phase)
            .count()
    }
}

#[async_trait::async_trait]
impl HookRunner for Scripted {
    async fn run(&self, target: &HookTarget, hook: &ResolvedHook) -> HookRun {
        self.ran
            .lock()
            .unwrap()
            .push((hook.phase, target.pod.name.clone(), hook.hook.timeout));
        match hook.phase {
            HookPhase::Pre => self.pre.clone().into(),
            HookPhase::Post => HookStatus::Succeeded.into(),
        }
    }
}

pub(super) fn hooked_pod(name: &str, on_error: &str, timeout: &str) -> Item {
    Item::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "annotations": {
                "pre.hook.backup.velero.io/command": "[\"fsfreeze\", \"--freeze\", \"/data\"]",
                "pre.hook.backup.velero.io/on-error": on_error,
                "pre.hook.backup.velero.io/timeout": timeout,
                "post.hook.backup.velero.io/command": "[\"fsfreeze\", \"--unfreeze\", \"/data\"]",
            }},
            "spec": {"containers": [{"name": "db"}]}}),
        Catalog::builtin(),
    )
    .unwrap()
}

/// Block work of backup "b" whose hooks `runner` plays, with no volumes.
fn block_work(runtime: &tokio::runtime::Runtime, runner: &Arc<Scripted>) -> BlockWork {
    BlockWork::new(
        "b".into(),
        BackupHooks::default(),
        runner.clone(),
        None,
        None,
        None,
        false,
        runtime.handle().clone(),
    )
}

/// One block of `pods` through pre hooks, items and post hooks, as the
/// pass drives it: the hooks run and the report.
fn run_block(
    pre: HookStatus,
    pods: &[Item],
    max_hook_timeout: Duration,
) -> (Vec<(HookPhase, String, Duration)>, BlockReport) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let runner = Arc::new(Scripted {
        pre,
        ran: Mutex::new(Vec::new()),
    });
    let work = Arc::new(block_work(&runtime, &runner).with_max_hook_timeout(max_hook_timeout));
    let block = work.pre(pods);
    work.start_volumes(block, pods);
    let report = runtime.block_on(work.finish());
    let ran = runner.ran.lock().unwrap().clone();
    (ran, report)
}

/// As in Velero v1.18: a pre hook that fails or times out with
/// `onError: Continue` is a warning, and the pod's post hook (the
/// unfreeze) still runs; with `onError: Fail` the block fails and the
/// post hook does not run.
#[test]
fn a_continue_pre_hook_that_fails_or_times_out_still_gets_its_post_hook() {
    let failed = HookStatus::Failed {
        exit_code: Some(1),
        stderr_tail: "frozen already".into(),
    };
    for pre in [failed.clone(), HookStatus::TimedOut] {
        let (ran, report) = run_block(
            pre.clone(),
            &[hooked_pod("db-0", "Continue", "3s")],
            DEFAULT_MAX_TIMEOUT,
        );
        let phases: Vec<_> = ran.iter().map(|(p, pod, _)| (*p, pod.as_str())).collect();
        assert_eq!(
            phases,
            [(HookPhase::Pre, "db-0"), (HookPhase::Post, "db-0")],
            "{pre:?}"
        );
        assert_eq!(report.hooks.len(), 2);
        assert_eq!(report.hooks[1].status, HookStatus::Succeeded);
        assert!(matches!(verdict(&report.hooks[0]), Verdict::Warning(_)));
    }
    // A Fail hook that answered with its exit code froze nothing: only
    // the pre hook. One that timed out or never said how it ended may
    // have frozen the pod: its unfreeze runs, though the block failed.
    let lost = HookStatus::Failed {
        exit_code: None,
        stderr_tail: "the exec ended without an exit status".into(),
    };
    for (pre, runs) in [(failed, 1), (HookStatus::TimedOut, 2), (lost, 2)] {
        let (ran, report) = run_block(
            pre.clone(),
            &[hooked_pod("db-0", "Fail", "3s")],
            DEFAULT_MAX_TIMEOUT,
        );
        assert_eq!(ran.len(), runs, "{pre:?}: {ran:?}");
        assert!(matches!(verdict(&report.hooks[0]), Verdict::BlockFailed(_)));
    }
}

/// The ledger says `continued` for pre hooks that failed only with
/// `onError: Continue`; a restart then owes their post hooks (and says
/// so when it cannot run them), as it does after succeeded ones. An
/// `onError: Fail` failure is `failed` and owes nothing.
#[test]
fn a_restart_owes_post_hooks_after_a_continue_failure() {
    let record = |status: HookStatus, on_error: OnError| HookRecord {
        pod: pod("db-0"),
        hook: ResolvedHook {
            source: crate::backup::hooks::HookSource::Annotation,
            phase: HookPhase::Pre,
            hook: crate::backup::hooks::ExecHook {
                container: "db".into(),
                command: vec!["fsfreeze".into()],
                on_error,
                timeout: Duration::from_secs(3),
            },
        },
        status,
        output: Default::default(),
        started: None,
        ended: None,
    };
    let continued = LedgerEntry::of(
        &pod("db-0"),
        "pre",
        &[record(HookStatus::TimedOut, OnError::Continue)],
    );
    assert_eq!(continued.state, "continued");
    let failed = LedgerEntry::of(
        &pod("db-1"),
        "pre",
        &[record(
            HookStatus::Failed {
                exit_code: Some(1),
                stderr_tail: String::new(),
            },
            OnError::Fail,
        )],
    );
    assert_eq!(failed.state, "failed");
    // Timed out with onError Fail: it may have frozen the pod.
    let unknown = LedgerEntry::of(
        &pod("db-3"),
        "pre",
        &[record(HookStatus::TimedOut, OnError::Fail)],
    );
    assert_eq!(unknown.state, "unknown");
    let ledger = vec![
        continued,
        failed,
        entry("db-2", "pre", "succeeded"),
        unknown,
    ];
    assert_eq!(
        BlockWork::owed_post_hooks(&ledger),
        [pod("db-0"), pod("db-2"), pod("db-3")]
    );
}

/// A pod annotation asking for a longer timeout than
/// `--max-hook-timeout` runs with the cap, and a warning names the
/// pod, the hook and the rule; a timeout under the cap is left alone.
#[test]
fn hook_timeouts_are_capped_with_a_warning() {
    let cap = Duration::from_secs(60);
    let (ran, report) = run_block(
        HookStatus::Succeeded,
        &[
            hooked_pod("greedy-0", "Fail", "2h"),
            hooked_pod("modest-0", "Fail", "30s"),
        ],
        cap,
    );
    let timeouts: Vec<_> = ran
        .iter()
        .filter(|(p, _, _)| *p == HookPhase::Pre)
        .map(|(_, pod, t)| (pod.as_str(), *t))
        .collect();
    assert_eq!(
        timeouts,
        [("greedy-0", cap), ("modest-0", Duration::from_secs(30))]
    );
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    let (ns, w) = &report.warnings[0];
    assert_eq!(ns, "shop");
    assert!(
        w.contains("pre annotation hook of pod shop/greedy-0")
            && w.contains("timeout 2h is over --max-hook-timeout 1m")
            && w.contains("(rule: hook-timeout-cap)"),
        "{w}"
    );
}

fn pod(name: &str) -> ItemRef {
    ItemRef::new("", "pods", "shop", name)
}

pub(super) fn entry(name: &str, phase: &str, state: &str) -> LedgerEntry {
    LedgerEntry {
        pod: pod(name),
        phase: phase.into(),
        state: state.into(),
    }
}

fn volume(name: &str, phase: VolumePhase) -> VolumeBackup {
    VolumeBackup {
        backup: "b".into(),
        pod_namespace: "shop".into(),
        pod_name: name.into(),
        volume: "data".into(),
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

/// From the ledger alone: a post hook that started and never ended is
/// "interrupted ... not run again"; one never started after succeeded
/// pre hooks is "not run"; a finished post hook, a failed or skipped
/// pre hook say nothing. Unfinished volume backups (and only those) are
/// failed "interrupted by restart".
#[test]
fn a_restart_reports_each_pod_by_its_ledger() {
    let ledger = vec![
        entry("started", "pre", "succeeded"),
        entry("started", "post", "started"),
        entry("never", "pre", "succeeded"),
        entry("done", "pre", "succeeded"),
        entry("done", "post", "succeeded"),
        entry("prefailed", "pre", "failed"),
        entry("skipped", "pre", "skipped"),
    ];
    // Owed: a post hook never started, and one that started and never
    // said how it ended (its claim says who runs it).
    assert_eq!(
        BlockWork::owed_post_hooks(&ledger),
        [pod("started"), pod("never")]
    );
    let mut volumes = vec![
        volume("a", VolumePhase::InProgress),
        volume("b", VolumePhase::New),
        volume("c", VolumePhase::Completed),
    ];
    let restarted =
        std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
    let messages: Vec<String> = interrupted(&mut volumes, restarted)
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert!(
        messages
            .iter()
            .all(|m| m.contains("interrupted by restart"))
    );
    let phases: Vec<_> = volumes.iter().map(|v| v.phase).collect();
    assert_eq!(
        phases,
        [
            VolumePhase::Failed,
            VolumePhase::Failed,
            VolumePhase::Completed
        ]
    );
    assert_eq!(volumes[0].error.as_deref(), Some("interrupted by restart"));
    assert_eq!(volumes[0].completed, Some(restarted), "ended when found");
    assert_eq!(volumes[2].error, None);
}

/// A backup's block ran a pod's post hook, its ledger entry was lost (the
/// store unreachable for the moment), and the same process resumes the
/// backup: the post hook is not run a second time (the fault campaign's
/// finding: the unfreeze ran twice, 11 ms apart). Another backup's claim
/// is its own.
#[test]
fn a_resume_in_the_same_process_does_not_run_a_post_hook_again() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let runner = Arc::new(Scripted {
        pre: HookStatus::Succeeded,
        ran: Mutex::new(Vec::new()),
    });
    let claims = Arc::new(PostClaims::default());
    let work = |uid: &str| Arc::new(block_work(&runtime, &runner).with_uid(uid, claims.clone()));
    let pods = [hooked_pod("db-0", "Continue", "3s")];
    let first = work("u-post-once");
    let block = first.pre(&pods);
    first.start_volumes(block, &pods);
    runtime.block_on(first.finish());
    // The ledger as the store kept it: the pre hook's entry, no post.
    let ledger = [entry("db-0", "pre", "succeeded")];
    let report = runtime.block_on(work("u-post-once").resume(&ledger, Vec::new(), &pods));
    let posts = |ran: &[(HookPhase, String, Duration)]| {
        ran.iter().filter(|(p, _, _)| *p == HookPhase::Post).count()
    };
    assert_eq!(posts(&runner.ran.lock().unwrap()), 1);
    // Said as an error: an owed unfreeze not known to be done fails the
    // backup partially.
    assert!(
        report
            .errors
            .iter()
            .any(|(_, e)| e.contains("already started here")),
        "{:?}",
        report.errors
    );
    // Another backup of the same pod owes its own.
    runtime.block_on(work("u-post-other").resume(&ledger, Vec::new(), &pods));
    assert_eq!(posts(&runner.ran.lock().unwrap()), 2);
}

/// The store in `dir` as machine `holder` opens it (its claims say so).
pub(super) fn store_of(dir: &std::path::Path, holder: &str) -> BackupStore {
    let fs = object_store::local::LocalFileSystem::new_with_prefix(dir).unwrap();
    BackupStore::from_object_store(Arc::new(fs), "file://claims").with_holder_name(holder)
}

/// A store whose puts can be made to fail, and the backup store on it.
fn faulty_ledger() -> (
    tempfile::TempDir,
    Arc<iar_core::store::faulty::FaultyStore>,
    BackupStore,
) {
    let dir = tempfile::tempdir().unwrap();
    let fs = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let faulty = Arc::new(iar_core::store::faulty::FaultyStore::new(Arc::new(fs)));
    let store = BackupStore::from_object_store(faulty.clone(), "faulty://ledger");
    (dir, faulty, store)
}

/// A freeze the hook ledger cannot record as started is not run: a process
/// that took the backup over would not know an unfreeze is owed. The pod's
/// post hooks are not run either, and the backup carries an error naming
/// the rule (its volumes are backed up unfrozen).
#[test]
fn a_pre_hook_the_ledger_cannot_record_is_not_run() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let runner = Arc::new(Scripted {
        pre: HookStatus::Succeeded,
        ran: Mutex::new(Vec::new()),
    });
    let (_dir, faulty, store) = faulty_ledger();
    faulty.fail_puts(true);
    let work = Arc::new(
        block_work(&runtime, &runner)
            .with_uid("u-unrecorded", Arc::default())
            .with_ledger(store),
    );
    let pods = [hooked_pod("db-0", "Fail", "3s")];
    let block = work.pre(&pods);
    assert!(block.failed.is_empty(), "{:?}", block.failed);
    work.start_volumes(block, &pods);
    let report = runtime.block_on(work.finish());
    assert_eq!(runner.ran.lock().unwrap().len(), 0, "no hook may run");
    assert!(
        report.errors.iter().any(|(ns, e)| ns == "shop"
            && e.contains("pre hooks of pod")
            && e.contains("rule: hook-ledger")),
        "{:?}",
        report.errors
    );
}

/// A pre entry still `started` (its outcome never written) owes the pod's
/// post hooks: the freeze may have happened, and is undone.
#[test]
fn a_pre_hook_started_and_never_recorded_owes_its_post_hook() {
    let ledger = [entry("db-0", "pre", "started")];
    assert_eq!(BlockWork::owed_post_hooks(&ledger), vec![pod("db-0")]);
}

/// The step waiting for a block failed (its future dropped) while the
/// block's volume wait and post hooks went on; the report is not lost: a
/// later `finish` of the same work (a resume by the same machine) holds
/// the post hook that ran, and the same report again when asked twice.
#[test]
fn a_dropped_wait_loses_nothing_the_block_did() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let runner = Arc::new(Scripted {
        pre: HookStatus::Succeeded,
        ran: Mutex::new(Vec::new()),
    });
    let work = Arc::new(block_work(&runtime, &runner).with_uid("u-dropped-wait", Arc::default()));
    let pods = [hooked_pod("db-0", "Continue", "3s")];
    let block = work.pre(&pods);
    work.start_volumes(block, &pods);
    // A wait given up at once, as a failed step gives it up.
    runtime.block_on(async {
        let _ = tokio::time::timeout(Duration::ZERO, work.finish()).await;
    });
    let report = runtime.block_on(work.finish());
    let phases: Vec<HookPhase> = report.hooks.iter().map(|r| r.hook.phase).collect();
    assert_eq!(phases, [HookPhase::Pre, HookPhase::Post]);
    let again = runtime.block_on(work.finish());
    assert_eq!(again.hooks.len(), 2);
}

/// Two machines drive the same backup, one after the other's lease
/// expired, and both find its pod's unfreeze owed (neither knows whether
/// the other has run it: the ledger is whole-file, last writer wins). Its
/// claim in the store is created once: exactly one machine runs the post
/// hook, and the other waits for the claim to say how it ended (the fault
/// campaign's seeds 1001 and 1016: an unfreeze run twice, by two
/// replicas, 2 s apart).
#[test]
fn two_machines_owing_one_unfreeze_run_it_once() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let runner = Arc::new(Scripted {
        pre: HookStatus::Succeeded,
        ran: Mutex::new(Vec::new()),
    });
    let dir = tempfile::tempdir().unwrap();
    let store = |holder: &str| store_of(dir.path(), holder);
    // Each machine its own process-wide claims, as two replicas have.
    let machine = |holder: &str| {
        Arc::new(
            block_work(&runtime, &runner)
                .with_uid("u-two", Arc::new(PostClaims::default()))
                .with_ledger(store(holder)),
        )
    };
    // The backup as the store holds it while it runs.
    runtime
        .block_on(store("writer").put_json(
            "b",
            BackupFile::Metadata,
            &serde_json::json!({"status": {"phase": "InProgress"}}),
        ))
        .unwrap();
    let (a, b) = (machine("replica-a"), machine("replica-b"));
    let pods = [hooked_pod("db-0", "Continue", "3s")];
    let ledger = [entry("db-0", "pre", "succeeded")];
    let (ra, rb) = runtime.block_on(async {
        tokio::join!(
            a.resume(&ledger, Vec::new(), &pods),
            b.resume(&ledger, Vec::new(), &pods)
        )
    });
    let posts = runner.count(HookPhase::Post);
    assert_eq!(posts, 1, "{ra:?} {rb:?}");
    // The one that did not run it says who did, and fails nothing.
    let waited = [&ra, &rb]
        .into_iter()
        .find(|r| r.hooks.is_empty())
        .expect("one ran no hook");
    assert!(waited.errors.is_empty(), "{:?}", waited.errors);
    assert!(
        waited
            .warnings
            .iter()
            .any(|(_, w)| w.contains("shop/db-0") && w.contains("run by replica-")),
        "{:?}",
        waited.warnings
    );
    // A third comer, later, finds the claim ended and runs nothing either.
    let rc = runtime.block_on(machine("replica-c").resume(&ledger, Vec::new(), &pods));
    assert!(rc.hooks.is_empty() && rc.errors.is_empty(), "{rc:?}");
    // Nor does one that comes once the backup is being deleted: a claim
    // made then would outlive the deletion.
    runtime
        .block_on(store("writer").put_json(
            "b",
            BackupFile::Metadata,
            &serde_json::json!({"status": {"phase": "Deleting"}}),
        ))
        .unwrap();
    let rd = runtime.block_on(
        block_work(&runtime, &runner)
            .with_uid("u-late", Arc::new(PostClaims::default()))
            .with_ledger(store("replica-d"))
            .resume(&ledger, Vec::new(), &pods),
    );
    assert!(rd.hooks.is_empty(), "{rd:?}");
    assert!(
        rd.errors.iter().any(|(_, e)| e.contains("being deleted")),
        "{rd:?}"
    );
}

/// A first pass retried on another machine, whose ledger read missed the
/// first attempt's entry, does not freeze the pod again: the pre hooks'
/// claim in the store is created once (the fault campaign's seed 1029:
/// two freezes and two unfreezes of one backup). The second machine owes
/// the unfreeze, as after any freeze it did not see end.
#[test]
fn a_retried_first_pass_never_freezes_a_pod_twice() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let runner = Arc::new(Scripted {
        pre: HookStatus::Succeeded,
        ran: Mutex::new(Vec::new()),
    });
    let dir = tempfile::tempdir().unwrap();
    let machine = |holder: &str| {
        let store = store_of(dir.path(), holder);
        block_work(&runtime, &runner)
            .with_uid("u-pre", Arc::new(PostClaims::default()))
            .with_ledger(store)
    };
    let pods = [hooked_pod("db-0", "Fail", "3s")];
    let first = machine("replica-a").pre(&pods);
    let again = machine("replica-b").pre(&pods);
    let pres = runner.count(HookPhase::Pre);
    assert_eq!(pres, 1);
    assert_eq!(first.pods[0].pre.len(), 1, "the first ran it");
    assert!(
        again.pods[0].pre.is_empty(),
        "the second did not, and owes the unfreeze"
    );
    assert!(again.failed.is_empty());
}

/// A first pass whose store never took the backup's object (out of reach
/// after the pre hook ran) still unfreezes the pod: its hook ledger is
/// there, so the backup is not gone (the campaign's seed 3107 left a pod
/// frozen, its backup Failed). With neither object nor ledger (a deletion
/// took both), the post hook is not run, as before.
#[test]
fn a_backup_whose_object_was_never_written_still_unfreezes() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for (ledger_kept, unfreezes) in [(true, 1), (false, 0)] {
        let runner = Arc::new(Scripted {
            pre: HookStatus::Succeeded,
            ran: Mutex::new(Vec::new()),
        });
        let dir = tempfile::tempdir().unwrap();
        let store = store_of(dir.path(), "replica-a");
        let work = Arc::new(
            block_work(&runtime, &runner)
                .with_uid("u-unwritten", Arc::default())
                .with_ledger(store.clone()),
        );
        let pods = [hooked_pod("db-0", "Fail", "3s")];
        let block = work.pre(&pods);
        assert!(block.failed.is_empty(), "{:?}", block.failed);
        if !ledger_kept {
            let gone = dir.path().join("backups/b/b-hooks.json.gz");
            std::fs::remove_file(&gone).unwrap();
        }
        work.start_volumes(block, &pods);
        let report = runtime.block_on(work.finish());
        let posts = runner.count(HookPhase::Post);
        assert_eq!(
            posts, unfreezes,
            "ledger kept: {ledger_kept}: {:?}",
            report.errors
        );
    }
}
