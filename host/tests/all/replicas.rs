//! Controller replicas that share the backups: three `iar controller`
//! processes against one kube-apiserver and one store, thirty Backups.
//! Each backup is driven by one replica from its first step to its last
//! (the store lease it keeps says which, and so does the backup's log),
//! the work is spread over the three, and a SIGKILLed replica's backups
//! are finished by the others, with no operation started twice.

use crate::controller::{
    ReplicaScene, create_backup, http_get, lease_holder, spawn_controller, spawn_controller_leased,
    spec, wait_phase,
};
use crate::support::server;
use iar::backup::object::BackupPhase;
use iar::store::BackupStore;
use iar_apiserver::User;
use iar_tests::wait_for;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

const REPLICAS: [&str; 3] = ["a", "b", "c"];
const BACKUPS: usize = 30;

/// Where a replica serves, from its log, once it says so.
pub(crate) fn served_at(log: &Path) -> Option<SocketAddr> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().find(|l| l.contains("serving /healthz"))?;
    line.rsplit(' ').next()?.trim().parse().ok()
}

/// Waits until a replica serves and says it is ready (its plugins loaded:
/// it reconciles from then on).
async fn wait_ready(who: &str, log: &Path) {
    let addr = wait_for(
        &format!("replica {who} serves"),
        Duration::from_secs(60),
        || async { served_at(log).ok_or_else(|| "not yet".to_string()) },
    )
    .await;
    wait_for(
        &format!("replica {who} ready"),
        Duration::from_secs(60),
        || async move {
            match tokio::task::spawn_blocking(move || http_get(addr, "/readyz"))
                .await
                .unwrap()
            {
                (200, _) => Ok(()),
                (code, body) => Err(format!("{code} {body}")),
            }
        },
    )
    .await;
}

/// The replicas named in a backup's log as driving it, in order.
async fn drivers(store: &BackupStore, name: &str) -> Vec<String> {
    let lines = store.get_logs(name).await.unwrap().unwrap_or_default();
    lines
        .iter()
        .filter_map(|l| l.split("driven by ").nth(1))
        .map(|rest| rest.split(':').next().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_thirty_backups_and_finish_a_killed_ones() {
    let Some(server) = server().await else { return };
    let admin = crate::support::client(server, User::Admin).await;
    crate::csi::ready(&admin).await;
    let (system, shop) = ("ctl-share", "ctl-share-shop");
    let scene = ReplicaScene::new(&admin, system, shop).await;
    let (store_dir, plugins) = (&scene.store, &scene.plugins);
    let (log, logs) = (|who: &str| scene.log(who), || scene.logs(&REPLICAS));
    let mut running: BTreeMap<&str, _> = REPLICAS
        .iter()
        .map(|&who| {
            let p = spawn_controller(
                server.kubeconfig(),
                system,
                store_dir,
                plugins,
                who,
                &log(who),
            );
            (who, p)
        })
        .collect();
    // All three ready (their plugins loaded: they reconcile from then on)
    // and one of them leading, before any backup exists.
    for who in REPLICAS {
        wait_ready(who, &log(who)).await;
    }
    let leader = wait_for("a leader", Duration::from_secs(30), || {
        lease_holder(&admin, system)
    })
    .await;

    let names: Vec<String> = (0..BACKUPS).map(|i| format!("share-{i:02}")).collect();
    for name in &names {
        create_backup(&admin, system, name, spec(shop)).await;
    }
    // Each waits for its snapshot: every backup's first pass has run.
    for name in &names {
        wait_phase(
            &admin,
            system,
            name,
            BackupPhase::WaitingForPluginOperations,
        )
        .await;
    }
    let store = BackupStore::open(store_dir.to_str().unwrap()).unwrap();
    let mut first: BTreeMap<String, String> = BTreeMap::new();
    for name in &names {
        let driven = drivers(&store, name).await;
        assert_eq!(driven.len(), 1, "{name}: driven by {driven:?}\n{}", logs());
        // The lease it keeps while it waits says the same.
        let lease = store.current_lease(name).await.unwrap().unwrap();
        assert!(!lease.released, "{name}: its lease is kept while it waits");
        assert!(
            lease.holder.starts_with(&format!("{}: ", driven[0])),
            "{name}: lease {lease:?}, log {driven:?}"
        );
        first.insert(name.clone(), driven[0].clone());
    }
    let mut drove: BTreeMap<&str, usize> = REPLICAS.iter().map(|&w| (w, 0)).collect();
    for who in first.values() {
        *drove.get_mut(who.as_str()).expect("one of the three") += 1;
    }
    eprintln!("backups each replica took: {drove:?} (leader: {leader})");
    for (who, n) in &drove {
        assert!(*n > 0, "replica {who} drove none: {drove:?}\n{}", logs());
    }

    // The replica with the most is killed (SIGKILL: its leases are not
    // given back; they expire).
    let victim = *drove.iter().max_by_key(|(_, n)| **n).unwrap().0;
    drop(running.remove(victim));
    for name in &names {
        crate::csi::cut_snapshot(&admin, shop, &format!("data-web-{name}")).await;
    }
    for name in &names {
        let done = wait_phase(&admin, system, name, BackupPhase::Completed).await;
        let status = done.status.clone().unwrap();
        assert_eq!(
            (
                status.backup_item_operations_attempted,
                status.backup_item_operations_completed
            ),
            (1, 1),
            "{name}: one operation, started once\n{}",
            logs()
        );
        let driven = drivers(&store, name).await;
        // A takeover fences the resource before anything else: every
        // status write the victim prepared conflicts with it.
        let fenced = iar::k8s::resource::fenced_generation(&done);
        if first[name] == victim {
            assert_eq!(driven.len(), 2, "{name}: {driven:?}\n{}", logs());
            assert_ne!(driven[1], victim, "{name}: taken over by a survivor");
            assert!(fenced >= 2, "{name}: taken over unfenced ({fenced})");
        } else {
            assert_eq!(driven, [first[name].clone()], "{name}: no second driver");
            assert_eq!(fenced, 0, "{name}: fenced, never taken over");
        }
        // The resource shows Completed as soon as the phase is persisted
        // (the status writer); the driver releases the lease when its
        // step returns, a moment later (longer on a loaded machine).
        wait_for(
            &format!("{name}: its lease released"),
            Duration::from_secs(30),
            || async {
                match store.current_lease(name).await.unwrap().unwrap().released {
                    true => Ok(()),
                    false => Err(String::from("held")),
                }
            },
        )
        .await;
    }
    // One snapshot per backup: none was created twice, by the survivors
    // included.
    let snapshots = crate::csi::snapshot_api(&admin, shop)
        .list(&Default::default())
        .await
        .unwrap();
    let taken: Vec<_> = snapshots
        .items
        .iter()
        .filter_map(|s| s.metadata.name.as_deref())
        .filter(|n| n.starts_with("data-web-share-"))
        .collect();
    assert_eq!(taken.len(), BACKUPS, "{taken:?}");
    let survivors: Vec<_> = running.keys().collect();
    eprintln!("killed {victim}; its backups finished by {survivors:?}");
}

/// A replica stopped as Kubernetes stops a pod (SIGTERM) gives back the
/// leases of the backups it drives before it exits, so another replica
/// takes them at once: with backup leases of two minutes, the other
/// replica drives the backup within seconds, and finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_replica_gives_its_backups_to_another_at_once() {
    let Some(server) = server().await else { return };
    let admin = crate::support::client(server, User::Admin).await;
    crate::csi::ready(&admin).await;
    let (system, shop) = ("ctl-stop", "ctl-stop-shop");
    let scene = ReplicaScene::new(&admin, system, shop).await;
    let (store_dir, plugins) = (&scene.store, &scene.plugins);
    let (log, logs) = (|who: &str| scene.log(who), || scene.logs(&["a", "b"]));
    let spawn = |who: &str| {
        spawn_controller_leased(
            server.kubeconfig(),
            system,
            store_dir,
            plugins,
            who,
            &log(who),
            "120s",
        )
    };
    let mut a = spawn("a");
    wait_ready("a", &log("a")).await;
    create_backup(&admin, system, "handed", spec(shop)).await;
    wait_phase(
        &admin,
        system,
        "handed",
        BackupPhase::WaitingForPluginOperations,
    )
    .await;
    let _b = spawn("b");
    wait_ready("b", &log("b")).await;
    let store = BackupStore::open(store_dir.to_str().unwrap()).unwrap();
    assert_eq!(drivers(&store, "handed").await, ["a"]);

    let held = store.current_lease("handed").await.unwrap().unwrap();
    assert!(held.holder.starts_with("a: ") && !held.released, "{held:?}");
    let exit = a.terminate();
    assert!(
        exit.success(),
        "a stopped replica exits 0: {exit:?}\n{}",
        logs()
    );
    // Given back, not left to expire: either still released, or already
    // taken by b under a newer generation (b may win the race with this read).
    let lease = store.current_lease("handed").await.unwrap().unwrap();
    let given_back =
        lease.released || (lease.holder.starts_with("b: ") && lease.generation > held.generation);
    assert!(given_back, "given back on SIGTERM: {lease:?}\n{}", logs());
    assert!(
        std::fs::read_to_string(log("a"))
            .unwrap_or_default()
            .contains("gave its lease back"),
        "{}",
        logs()
    );
    // Far sooner than the two-minute lease would have expired.
    wait_for("b drives the backup", Duration::from_secs(30), || {
        let store = store.clone();
        async move {
            let lease = store
                .current_lease("handed")
                .await
                .map_err(|e| e.to_string())?;
            match lease {
                Some(l) if l.holder.starts_with("b: ") && !l.released => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    crate::csi::cut_snapshot(&admin, shop, "data-web-handed").await;
    let done = wait_phase(&admin, system, "handed", BackupPhase::Completed).await;
    assert_eq!(done.status.unwrap().backup_item_operations_completed, 1);
    assert_eq!(drivers(&store, "handed").await, ["a", "b"], "{}", logs());
}
