//! Host calls and deadlines: time a plugin spends waiting in `cluster-get`
//! is the host's, not the plugin's, so many workers on a slow or contended
//! cluster never time out an innocent plugin.

use crate::support::*;
use iar::{ClusterReader, ItemRef, Limits, ManifestCluster, Phase};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A cluster that answers every lookup with the same pod after sleeping:
/// a slow API server or a contended cache, through the real host path.
struct SlowCluster {
    delay: Duration,
    pod: Value,
}

impl iar::cluster::ClusterWriter for SlowCluster {}

impl ClusterReader for SlowCluster {
    fn get(&self, _id: &ItemRef) -> Result<Option<Value>, iar::cluster::ClusterError> {
        std::thread::sleep(self.delay);
        Ok(Some(self.pod.clone()))
    }
}

/// Runs `calls` cluster-gets per execute on 8 threads, each with its own
/// instance, and returns how long each execute took.
fn hammer(cluster: Arc<dyn ClusterReader>, deadline: Duration, calls: usize) -> Vec<Duration> {
    let runtime = runtime();
    let limits = Limits {
        deadline,
        ..Limits::default()
    };
    let calls = calls.to_string();
    let plugin = load_with(
        &runtime,
        artifacts::HOSTILE,
        &[("behavior", "cluster-get"), ("cluster-gets", &calls)],
        limits,
    );
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|w| {
                let mut instance = plugin.instance(cluster.clone());
                let calls = calls.clone();
                scope.spawn(move || {
                    (0..3)
                        .map(|i| {
                            let started = Instant::now();
                            let out = instance
                                .execute(
                                    &pod(&format!("web-{w}-{i}")),
                                    &backup(Phase::Backup),
                                    &never_seen,
                                )
                                .unwrap_or_else(|e| panic!("worker {w}, call {i}: {e}"));
                            let item = out
                                .item
                                .expect("cluster-get annotates the item")
                                .into_value();
                            assert_eq!(
                                item["metadata"]["annotations"]["hostile.iar.test/found"],
                                calls.as_str()
                            );
                            started.elapsed()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker"))
            .collect()
    })
}

/// 8 workers, each call waiting 12 × 25 ms = 300 ms in a slow cluster,
/// under a 100 ms deadline: no call times out, because waiting in a host
/// call is not charged to the plugin. (Before host time was excluded,
/// every call here tripped the deadline.)
#[test]
fn slow_host_calls_do_not_count_against_the_deadline() {
    let cluster = Arc::new(SlowCluster {
        delay: Duration::from_millis(25),
        pod: iar_tests::fixtures::pod("shop", "web-0"),
    });
    let deadline = Duration::from_millis(100);
    let took = hammer(cluster, deadline, 12);
    assert_eq!(took.len(), 24);
    assert!(
        took.iter().all(|t| *t > deadline),
        "every call outlived the deadline in wall-clock time: {took:?}"
    );
}

/// 8 workers hammering the real manifest cluster (200 lookups per call)
/// with a tight deadline never trip it.
#[test]
fn workers_hammering_the_manifest_cluster_never_trip_a_deadline() {
    let dir = tempfile::tempdir().unwrap();
    for w in 0..10 {
        for i in 0..3 {
            let name = format!("web-{w}-{i}");
            let pod = iar_tests::fixtures::pod("shop", &name);
            std::fs::write(
                dir.path().join(format!("{name}.json")),
                serde_json::to_string(&pod).unwrap(),
            )
            .unwrap();
        }
    }
    let cluster = Arc::new(ManifestCluster::new(vec![dir.path().to_path_buf()]));
    hammer(cluster, Duration::from_millis(250), 200);
}

/// Host time is excluded, not the deadline lifted: a guest that loops after
/// 100 ms of host calls is still stopped once its own time reaches the
/// deadline.
#[test]
fn the_deadline_still_stops_a_loop() {
    let runtime = runtime();
    let deadline = Duration::from_millis(100);
    let plugin = load_with(
        &runtime,
        artifacts::HOSTILE,
        &[
            ("behavior", "cluster-get"),
            ("cluster-gets", "4"),
            ("then", "loop"),
        ],
        Limits {
            deadline,
            ..Limits::default()
        },
    );
    let cluster = Arc::new(SlowCluster {
        delay: Duration::from_millis(25),
        pod: iar_tests::fixtures::pod("shop", "web-0"),
    });
    let started = Instant::now();
    let err = plugin
        .instance(cluster)
        .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
        .unwrap_err();
    assert_eq!(err.violation, iar::Violation::Deadline(deadline));
    assert!(started.elapsed() < Duration::from_secs(5));
}
