//! The lease kept between steps, renewed and abandoned. A lease's expiry
//! reads the phase machine's clock (passed to the store), so the takeover
//! test steps a `ManualClock`; the renewal test waits for the keeper's
//! real-time renewal (never a fixed sleep).

use super::super::{PhaseError, PhaseMachine, Settings, Step};

use iar_core::store::BackupStore;
use iar_core::store::lease::{LeaseError, LeaseRecord};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

fn machine(store: &BackupStore, lease: Duration) -> PhaseMachine {
    let settings = Settings {
        lease_duration: lease,
        ..Settings::default()
    };
    PhaseMachine::new(
        Vec::new(),
        store.clone(),
        Arc::new(iar_core::NoCluster),
        settings,
    )
}

fn store() -> (tempfile::TempDir, BackupStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = BackupStore::open(dir.path().to_str().unwrap()).unwrap();
    (dir, store)
}

fn expires(lease: &LeaseRecord) -> SystemTime {
    humantime::parse_rfc3339(&lease.expires).unwrap()
}

/// A step that requeues keeps the lease, renewed past its duration
/// with no step running, so that another replica is refused until the
/// backup ends; the step that ends it gives the lease back.
#[tokio::test]
async fn a_driven_backup_keeps_its_lease_between_steps_until_it_ends() {
    let (_dir, store) = store();
    let lease = Duration::from_millis(600);
    let ours = machine(&store.clone().with_holder_name("a"), lease);
    let theirs = machine(&store.clone().with_holder_name("b"), lease);
    let requeue = || async { Ok(Step::Requeue(Duration::ZERO)) };
    ours.drive("b1", requeue()).await.unwrap();
    let first = expires(&store.current_lease("b1").await.unwrap().unwrap());
    // No step runs, and the keeper renews it: an expiry a whole
    // duration past the first is a renewal made once the first
    // duration had run out.
    let held = iar_tests::wait_for(
        "a renewal past the first duration",
        Duration::from_secs(30),
        || async {
            let held = store.current_lease("b1").await.unwrap().unwrap();
            if expires(&held) >= first + lease {
                Ok(held)
            } else {
                Err(format!("{held:?}"))
            }
        },
    )
    .await;
    assert!(held.holder.starts_with("a: ") && !held.released, "{held:?}");
    assert_eq!(held.generation, 1, "one take, renewed in place");
    match theirs.drive("b1", requeue()).await {
        Err(PhaseError::Lease(LeaseError::Held { holder, .. })) => {
            assert!(holder.starts_with("a: "), "{holder}")
        }
        other => panic!("another replica stepped a driven backup: {other:?}"),
    }
    assert_eq!(ours.tracked_backups().await, ["b1"]);
    // The next step reuses the kept lease (no new generation).
    ours.drive("b1", requeue()).await.unwrap();
    assert_eq!(
        store.current_lease("b1").await.unwrap().unwrap().generation,
        1
    );
    let object = crate::backup::object::BackupObject::new("b1", "ns", "u", serde_json::json!({}));
    ours.drive("b1", async { Ok(Step::Done(Box::new(object))) })
        .await
        .unwrap();
    assert!(store.current_lease("b1").await.unwrap().unwrap().released);
    assert!(ours.tracked_backups().await.is_empty());
}

/// A controller that stops (its kept leases abandoned) renews nothing
/// more: the lease expires and another replica takes the backup over,
/// as after a SIGKILL. Both replicas read one stepped clock: refused
/// while the lease runs, taken over once the clock passes its expiry.
#[tokio::test]
async fn an_abandoned_lease_expires_and_is_taken_over() {
    let (_dir, store) = store();
    let clock = Arc::new(iar_core::clock::ManualClock::new());
    // Long enough that no renewal could come from the keeper's real-time
    // timer during the test: only the stepped clock moves the lease.
    let lease = Duration::from_secs(3600);
    let ours = machine(&store.clone().with_holder_name("a"), lease).with_clock(clock.clone());
    let theirs = machine(&store.clone().with_holder_name("b"), lease).with_clock(clock.clone());
    let requeue = || async { Ok(Step::Requeue(Duration::ZERO)) };
    ours.drive("b2", requeue()).await.unwrap();
    ours.abandon_kept_leases();
    clock.advance(lease - Duration::from_secs(1));
    assert!(
        matches!(
            theirs.drive("b2", requeue()).await,
            Err(PhaseError::Lease(LeaseError::Held { .. }))
        ),
        "refused a second before the abandoned lease expires"
    );
    clock.advance(Duration::from_secs(2));
    theirs.drive("b2", requeue()).await.unwrap();
    let now = store.current_lease("b2").await.unwrap().unwrap();
    assert!(
        now.holder.starts_with("b: ") && now.generation == 2,
        "{now:?}"
    );
    // The first replica, coming back to it, is refused.
    assert!(matches!(
        ours.drive("b2", requeue()).await,
        Err(PhaseError::Lease(LeaseError::Held { .. }))
    ));
    theirs.abandon_kept_leases();
}

/// The lease handling alone: a step that requeues keeps its lease, one
/// that ends gives it back, and a stopping replica gives back every kept
/// lease at once, naming their backups (so another takes them without
/// waiting for an expiry).
#[tokio::test]
async fn kept_leases_are_given_back_at_once() {
    let parts = crate::phases::test_support::Parts::new();
    let leases = parts.leases();
    let requeue = || async { Ok(Step::Requeue(Duration::ZERO)) };
    leases.drive("a", requeue()).await.unwrap();
    leases.drive("b", requeue()).await.unwrap();
    leases
        .with_lease("c", async { Ok::<_, PhaseError>(()) })
        .await
        .unwrap();
    assert_eq!(
        parts.kept.backups(),
        ["a", "b"],
        "only requeued steps keep theirs"
    );
    assert!(
        parts
            .store
            .current_lease("c")
            .await
            .unwrap()
            .unwrap()
            .released,
        "work under with_lease gives it back"
    );
    let mut names = leases.give_back_kept().await;
    names.sort();
    assert_eq!(names, ["a", "b"]);
    assert!(parts.kept.backups().is_empty());
    for name in ["a", "b"] {
        let lease = parts.store.current_lease(name).await.unwrap().unwrap();
        assert!(lease.released, "{name}: {lease:?}");
        let taken = parts.store.clone().with_holder_name("other");
        taken
            .acquire_lease(name, Duration::from_secs(30))
            .await
            .unwrap();
    }
}

/// A lease lost while kept between steps (its renewal found it expired;
/// another process may have driven the backup meanwhile): when this
/// machine comes back to the backup, the block work it kept for it stops
/// and is forgotten. That work ran under a lease no longer its own (its
/// writes refused), and a resume that waited for it instead recorded none
/// of its volumes: the fault campaign's seed 4013, Completed with no
/// volume records.
#[tokio::test]
async fn a_lease_lost_between_steps_stops_the_block_work_kept_for_it() {
    use crate::backup::block_work::BlockWork;
    let (_dir, store) = store();
    let clock = Arc::new(iar_core::clock::ManualClock::new());
    let lease = Duration::from_millis(600);
    let ours = machine(&store.clone().with_holder_name("a"), lease).with_clock(clock.clone());
    let requeue = || async { Ok(Step::Requeue(Duration::ZERO)) };
    ours.drive("b3", requeue()).await.unwrap();
    let work = Arc::new(BlockWork::new(
        "b3".into(),
        Default::default(),
        Arc::new(crate::backup::hooks::runner::SkippingRunner),
        None,
        None,
        None,
        false,
        tokio::runtime::Handle::current(),
    ));
    ours.live_blocks.insert("uid-3", &work);
    // Past the lease's end by the machine's clock: the keeper's next
    // renewal finds it expired.
    clock.advance(Duration::from_secs(1));
    iar_tests::wait_for("the kept lease lost", Duration::from_secs(30), || async {
        if ours.kept.is_lost("b3") {
            Ok(())
        } else {
            Err("not yet".to_string())
        }
    })
    .await;
    assert!(ours.live_blocks.get("uid-3").is_some());
    ours.drive("b3", requeue()).await.unwrap();
    assert!(
        ours.live_blocks.get("uid-3").is_none(),
        "the block work kept under the lost lease is forgotten"
    );
    let now = store.current_lease("b3").await.unwrap().unwrap();
    assert_eq!(now.generation, 2, "taken anew: {now:?}");
    ours.abandon_kept_leases();
}

/// A renewal the store holds up past the lease's end is a loss: the work
/// running under the lease is dropped there. Before, the keeper waited on
/// the renewal, and the work ran on past the lease (the fault campaign's
/// seed 3906: a first pass whose store was partitioned away created a
/// VolumeSnapshot after another replica had failed and deleted its
/// backup).
#[tokio::test]
async fn a_renewal_held_up_past_the_leases_end_stops_the_work() {
    use iar_core::store::faulty::FaultyStore;
    let dir = tempfile::tempdir().unwrap();
    let local = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let faulty = Arc::new(FaultyStore::new(Arc::new(local)));
    let store = BackupStore::from_object_store(faulty.clone(), "held-up");
    let ours = machine(&store, Duration::from_millis(900));
    let stepped = ours
        .drive("b4", async {
            // From here every write of the lease hangs, as under a
            // partition that the client does not time out first.
            let _held_up = faulty.pause_puts_to("-lease-00000000000000000001.json");
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(Step::Requeue(Duration::ZERO))
        })
        .await;
    match stepped {
        Err(PhaseError::Lease(LeaseError::Lost { reason, .. })) => {
            assert!(reason.contains("renewal had not ended"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

/// A lease taken over (its generation before expired unreleased, another
/// process's) is fenced before the step runs: the fence is called with
/// the new generation. One that fails refuses the take, runs nothing and
/// leaves the lease to expire; the same process fences at its next take
/// although the generation before is its own. A lease given back and
/// taken by another, or taken again by its holder, needs no fence.
#[tokio::test]
async fn a_takeover_fences_before_it_steps() {
    let (_dir, store) = store();
    let clock = Arc::new(iar_core::clock::ManualClock::new());
    let lease = Duration::from_secs(3600);
    let fenced = Arc::new(std::sync::Mutex::new(Vec::new()));
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let fence: super::TakeoverFence = {
        let (fenced, failing) = (fenced.clone(), failing.clone());
        Arc::new(move |name: String, generation: u64| {
            let (fenced, failing) = (fenced.clone(), failing.clone());
            Box::pin(async move {
                if failing.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err("the API server is out of reach".to_string());
                }
                fenced.lock().unwrap().push((name, generation));
                Ok(())
            })
        })
    };
    let ours = machine(&store.clone().with_holder_name("a"), lease).with_clock(clock.clone());
    let theirs = machine(&store.clone().with_holder_name("b"), lease)
        .with_clock(clock.clone())
        .with_takeover_fence(fence);
    let stepped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let step = || {
        let stepped = stepped.clone();
        async move {
            stepped.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
    };
    // Given back, then taken by another: no fence.
    ours.with_lease("b5", step()).await.unwrap();
    theirs.with_lease("b5", step()).await.unwrap();
    assert!(fenced.lock().unwrap().is_empty());
    // Abandoned (a crash) and expired: the taker's fence fails first.
    let requeue = || async { Ok(Step::Requeue(Duration::ZERO)) };
    ours.drive("b5", requeue()).await.unwrap();
    ours.abandon_kept_leases();
    clock.advance(lease + Duration::from_secs(1));
    let before = stepped.load(std::sync::atomic::Ordering::SeqCst);
    let refused = theirs.with_lease("b5", step()).await;
    assert!(
        matches!(&refused, Err(PhaseError::Lease(LeaseError::Lost { reason, .. })) if reason.contains("fenced")),
        "{refused:?}"
    );
    assert_eq!(stepped.load(std::sync::atomic::Ordering::SeqCst), before);
    let left = store.current_lease("b5").await.unwrap().unwrap();
    assert!(left.holder.starts_with("b: ") && !left.released, "{left:?}");
    // Its own generation before, unfenced: fenced now, then it steps.
    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    clock.advance(lease + Duration::from_secs(1));
    theirs.with_lease("b5", step()).await.unwrap();
    let generation = store.current_lease("b5").await.unwrap().unwrap().generation;
    assert_eq!(*fenced.lock().unwrap(), [("b5".to_string(), generation)]);
    // Taken again by the same process once given back: no fence.
    theirs.with_lease("b5", step()).await.unwrap();
    assert_eq!(fenced.lock().unwrap().len(), 1);
}
