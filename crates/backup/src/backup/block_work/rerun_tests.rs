//! Post hooks whose first run's end is not known run a second time, once
//! across machines, said in the backup's log (the fault campaign's seeds
//! 4429 and 4512: pods left frozen).

use super::tests::{entry, hooked_pod, store_of};
use super::*;
use crate::backup::hooks::{HookRun, HookStatus, ResolvedHook};

/// Ends each post hook as the next of `post` says (then succeeds), and
/// counts the runs.
struct Unfreezes {
    post: Mutex<Vec<HookStatus>>,
    runs: Mutex<usize>,
}

impl Unfreezes {
    fn new(post: Vec<HookStatus>) -> Arc<Self> {
        Arc::new(Unfreezes {
            post: Mutex::new(post),
            runs: Mutex::new(0),
        })
    }

    fn runs(&self) -> usize {
        *self.runs.lock().unwrap()
    }
}

#[async_trait::async_trait]
impl crate::backup::hooks::HookRunner for Unfreezes {
    async fn run(&self, _: &HookTarget, hook: &ResolvedHook) -> HookRun {
        assert_eq!(hook.phase, HookPhase::Post, "only owed unfreezes run here");
        *self.runs.lock().unwrap() += 1;
        let mut post = self.post.lock().unwrap();
        if post.is_empty() {
            HookStatus::Succeeded.into()
        } else {
            post.remove(0).into()
        }
    }
}

/// The runtime the waits run on: paused, so the claim's bound (the
/// hook's 30 s and 30 s more) passes as soon as nothing else can run.
fn paused() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

/// Machine `holder`'s block work of backup "b" (uid `u`), over the store
/// in `dir`, which holds the backup as running.
fn machine(
    runtime: &tokio::runtime::Runtime,
    runner: &Arc<Unfreezes>,
    dir: &std::path::Path,
    holder: &str,
) -> Arc<BlockWork> {
    let store = store_of(dir, holder);
    runtime
        .block_on(store.put_json(
            "b",
            BackupFile::Metadata,
            &serde_json::json!({"status": {"phase": "InProgress"}}),
        ))
        .unwrap();
    Arc::new(
        BlockWork::new(
            "b".into(),
            Default::default(),
            runner.clone(),
            None,
            None,
            None,
            false,
            runtime.handle().clone(),
        )
        .with_uid("u", Arc::new(PostClaims::default()))
        .with_ledger(store),
    )
}

fn said_rerun(report: &BlockReport) -> bool {
    report
        .warnings
        .iter()
        .any(|(_, w)| w.contains("shop/db-0") && w.contains("rule: hook-rerun"))
}

/// An unfreeze whose exec ended without its exit status (its stream cut
/// as the API server restarted) or timed out is run a second time, said,
/// and the second run's end is what the claim and the ledger keep: a
/// third machine runs nothing more.
#[test]
fn an_unfreeze_whose_end_was_lost_runs_once_more() {
    for lost in [
        HookStatus::TimedOut,
        HookStatus::Failed {
            exit_code: None,
            stderr_tail: crate::backup::hooks::NO_EXIT_STATUS.into(),
        },
    ] {
        let runtime = paused();
        let runner = Unfreezes::new(vec![lost.clone()]);
        let dir = tempfile::tempdir().unwrap();
        let pods = [hooked_pod("db-0", "Continue", "3s")];
        let ledger = [entry("db-0", "pre", "succeeded")];
        let a = machine(&runtime, &runner, dir.path(), "replica-a");
        let report = runtime.block_on(a.resume(&ledger, Vec::new(), &pods));
        assert_eq!(runner.runs(), 2, "{lost:?}: {report:?}");
        assert!(said_rerun(&report), "{lost:?}: {report:?}");
        assert!(report.errors.is_empty(), "{lost:?}: {report:?}");
        assert_eq!(report.hooks.len(), 1, "the second run replaces the first");
        assert_eq!(report.hooks[0].status, HookStatus::Succeeded);
        let store = store_of(dir.path(), "reader");
        assert!(
            runtime
                .block_on(post_settled(&store, "b", &pod_ref()))
                .unwrap()
        );
        let c = machine(&runtime, &runner, dir.path(), "replica-c");
        let later = runtime.block_on(c.resume(&ledger, Vec::new(), &pods));
        assert_eq!(runner.runs(), 2, "{later:?}");
    }
}

/// A second run whose end is lost too is not run a third time: the
/// backup's error says the unfreeze may not have run.
#[test]
fn an_unfreeze_is_never_run_a_third_time() {
    let runtime = paused();
    let runner = Unfreezes::new(vec![HookStatus::TimedOut, HookStatus::TimedOut]);
    let dir = tempfile::tempdir().unwrap();
    let pods = [hooked_pod("db-0", "Continue", "3s")];
    let ledger = [entry("db-0", "pre", "succeeded")];
    let a = machine(&runtime, &runner, dir.path(), "replica-a");
    let report = runtime.block_on(a.resume(&ledger, Vec::new(), &pods));
    let c = machine(&runtime, &runner, dir.path(), "replica-c");
    let later = runtime.block_on(c.resume(&ledger, Vec::new(), &pods));
    assert_eq!(runner.runs(), 2, "{report:?} {later:?}");
    assert!(said_rerun(&report), "{report:?}");
    // The second run's end (timed out, onError Continue) is a warning of
    // the backup, as the first would have been.
    assert!(
        report.warnings.iter().any(|(_, w)| w.contains("timed out")),
        "{report:?}"
    );
}

/// A claim whose holder crashed between its claim and its exec (the
/// campaign's seed 4429: the replica's process ended) says "started" for
/// ever. Whoever owes the unfreeze next waits the hooks' bound, then runs
/// it, said; of two such machines, one.
#[test]
fn an_unfreeze_claimed_by_a_crashed_machine_is_run_by_the_next() {
    let runtime = paused();
    let runner = Unfreezes::new(Vec::new());
    let dir = tempfile::tempdir().unwrap();
    let crashed = store_of(dir.path(), "replica-crashed");
    runtime
        .block_on(crashed.claim_once(
            "b",
            &["post", "shop", "db-0"],
            &serde_json::json!({"holder": "replica-crashed", "token": "t", "state": "started"}),
        ))
        .unwrap();
    assert!(
        !runtime
            .block_on(post_settled(&crashed, "b", &pod_ref()))
            .unwrap()
    );
    let pods = [hooked_pod("db-0", "Continue", "3s")];
    let ledger = [entry("db-0", "pre", "succeeded")];
    let (a, b) = (
        machine(&runtime, &runner, dir.path(), "replica-a"),
        machine(&runtime, &runner, dir.path(), "replica-b"),
    );
    let (ra, rb) = runtime.block_on(async {
        tokio::join!(
            a.resume(&ledger, Vec::new(), &pods),
            b.resume(&ledger, Vec::new(), &pods)
        )
    });
    assert_eq!(runner.runs(), 1, "{ra:?} {rb:?}");
    let ran = if ra.hooks.is_empty() { &rb } else { &ra };
    assert!(said_rerun(ran), "{ran:?}");
    assert!(
        ran.warnings
            .iter()
            .any(|(_, w)| w.contains("started by replica-crashed")),
        "{ran:?}"
    );
    for r in [&ra, &rb] {
        assert!(r.errors.is_empty(), "{r:?}");
    }
    assert!(
        runtime
            .block_on(post_settled(&crashed, "b", &pod_ref()))
            .unwrap()
    );
}

fn pod_ref() -> ItemRef {
    ItemRef::new("", "pods", "shop", "db-0")
}

/// A run of this very machine claimed the unfreeze (here and in the
/// store) and was stopped before its exec (the campaign's seed 4866: the
/// store slow, the pod left frozen, "already started here"): whoever owes
/// it next on this machine waits the claim's bound, then runs it, said.
#[test]
fn an_unfreeze_this_machine_claimed_and_never_ran_is_run_by_it() {
    let runtime = paused();
    let runner = Unfreezes::new(Vec::new());
    let dir = tempfile::tempdir().unwrap();
    let a = machine(&runtime, &runner, dir.path(), "replica-a");
    assert!(
        a.claims.claim("u", &pod_ref()),
        "the stopped run's claim here"
    );
    runtime
        .block_on(store_of(dir.path(), "replica-a").claim_once(
            "b",
            &["post", "shop", "db-0"],
            &serde_json::json!({"holder": "replica-a", "token": "stopped", "state": "started"}),
        ))
        .unwrap();
    let pods = [hooked_pod("db-0", "Continue", "3s")];
    let ledger = [entry("db-0", "pre", "succeeded")];
    let report = runtime.block_on(a.resume(&ledger, Vec::new(), &pods));
    assert_eq!(runner.runs(), 1, "{report:?}");
    assert!(said_rerun(&report), "{report:?}");
    assert!(report.errors.is_empty(), "{report:?}");
}
