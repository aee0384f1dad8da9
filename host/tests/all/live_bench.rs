//! The controller against many live objects (issue 21): an `iar
//! controller` process backs up `IAR_BENCH_OBJECTS` objects (100,000 by
//! default) across twenty namespaces, ConfigMaps, Secrets and
//! ServiceAccounts, once with no plugins and once through the three example
//! plugins, in one run against one kube-apiserver. It prints objects/s, API
//! requests per object (the controller's `iar_cluster_requests_total`) and
//! the process's peak resident set (`VmHWM`).
//!
//! `cargo test --release -p iar --test all live_bench:: -- --ignored --nocapture`

use crate::controller::{create_backup, http_get, install_crds, spawn_controller};
use crate::replicas::served_at;
use crate::support::{client, server};
use iar::backup::object::BackupPhase;
use iar::k8s::crd::{Backup, BackupSpec};
use iar_apiserver::{User, create_namespace};
use iar_tests::{artifacts, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

const NAMESPACES: usize = 20;

fn objects() -> usize {
    std::env::var("IAR_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

/// Creates the objects (those an earlier run made are kept: a conflict is
/// no error): of every ten, eight ConfigMaps, one Secret, one
/// ServiceAccount; 32 requests in flight.
async fn populate(admin: &Client, total: usize) -> Vec<String> {
    let namespaces: Vec<String> = (0..NAMESPACES)
        .map(|i| format!("bench-live-{i:02}"))
        .collect();
    for ns in &namespaces {
        create_namespace(admin, ns).await;
    }
    let started = Instant::now();
    let objects = (0..total).map(|i| {
        let (admin, ns) = (admin.clone(), namespaces[i % NAMESPACES].clone());
        async move {
            let name = format!("obj-{i:06}");
            let pp = PostParams::default();
            let r = match i % 10 {
                8 => {
                    let s: Secret = serde_json::from_value(json!({
                        "metadata": {"name": name}, "stringData": {"k": "v".repeat(64)}}))
                    .unwrap();
                    Api::<Secret>::namespaced(admin, &ns)
                        .create(&pp, &s)
                        .await
                        .map(|_| ())
                }
                9 => {
                    let sa: ServiceAccount =
                        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
                    Api::<ServiceAccount>::namespaced(admin, &ns)
                        .create(&pp, &sa)
                        .await
                        .map(|_| ())
                }
                _ => {
                    let cm: ConfigMap = serde_json::from_value(json!({
                        "metadata": {"name": name, "labels": {"app": "bench"}},
                        "data": {"payload": "x".repeat(512)}}))
                    .unwrap();
                    Api::<ConfigMap>::namespaced(admin, &ns)
                        .create(&pp, &cm)
                        .await
                        .map(|_| ())
                }
            };
            match r {
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                r => r,
            }
        }
    });
    crate::support::in_flight(32, objects).await;
    eprintln!("created {total} objects in {:.1?}", started.elapsed());
    namespaces
}

/// The peak resident set of a process, from `/proc`.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kib / 1024.0
}

fn requests(metrics: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("iar_cluster_requests_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: minutes, prints figures"]
async fn live_backup_of_many_objects_by_the_controller() {
    let Some(server) = server().await else { return };
    let admin = client(server, User::Admin).await;
    install_crds(&admin).await;
    crate::csi::ready(&admin).await;
    let total = objects();
    let namespaces = populate(&admin, total).await;
    let work = tempfile::tempdir().unwrap();
    let none = work.path().join("none");
    let three = work.path().join("three");
    std::fs::create_dir(&none).unwrap();
    std::fs::create_dir(&three).unwrap();
    for p in [
        artifacts::LABELS,
        artifacts::POD_VOLUMES,
        artifacts::PVC_SNAPSHOT,
    ] {
        let p = Path::new(p);
        std::fs::copy(p, three.join(p.file_name().unwrap())).unwrap();
    }
    crate::csi::grant_in_dir(&three, "iar_plugin_pvc_snapshot");
    let mut rows = Vec::new();
    for (run, plugins) in [("no plugins", &none), ("three plugins", &three)] {
        let system = format!("bench-ctl-{}", run.replace(' ', "-"));
        create_namespace(&admin, &system).await;
        let log = work.path().join(format!("{system}.log"));
        let controller = spawn_controller(
            server.kubeconfig(),
            &system,
            &work.path().join(format!("store-{system}")),
            plugins,
            "bench",
            &log,
        );
        let addr = wait_for("the controller serves", Duration::from_secs(60), || async {
            served_at(&log).ok_or_else(|| "not yet".to_string())
        })
        .await;
        let spec = BackupSpec {
            included_namespaces: Some(namespaces.clone()),
            ..BackupSpec::default()
        };
        let before = requests(
            &tokio::task::spawn_blocking(move || http_get(addr, "/metrics").1)
                .await
                .unwrap(),
        );
        let started = Instant::now();
        create_backup(&admin, &system, "many", spec).await;
        let api = Api::<Backup>::namespaced(admin.clone(), &system);
        let done = wait_for("the backup ends", Duration::from_secs(1800), || {
            let api = api.clone();
            async move {
                let b = api.get("many").await.map_err(|e| e.to_string())?;
                match b.status.as_ref().map(|s| s.phase) {
                    Some(p) if p.is_terminal() => Ok(b),
                    p => Err(format!("{p:?}")),
                }
            }
        })
        .await;
        let wall = started.elapsed();
        let status = done.status.unwrap();
        assert_eq!(status.phase, BackupPhase::Completed, "{status:?}");
        let items = status.progress.items_backed_up;
        assert!(items as usize >= total, "{items} of {total}");
        let after = requests(
            &tokio::task::spawn_blocking(move || http_get(addr, "/metrics").1)
                .await
                .unwrap(),
        );
        let rss = peak_rss_mib(controller.pid());
        rows.push((run, items, wall, after - before, rss));
        drop(controller);
    }
    eprintln!(
        "| run | objects | wall (s) | objects/s | API requests | per object | peak RSS (MiB) |"
    );
    eprintln!("|---|---|---|---|---|---|---|");
    for (run, items, wall, req, rss) in &rows {
        eprintln!(
            "| {run} | {items} | {:.1} | {:.0} | {req} | {:.4} | {rss:.0} |",
            wall.as_secs_f64(),
            *items as f64 / wall.as_secs_f64(),
            *req as f64 / *items as f64,
        );
    }
    eprintln!(
        "three plugins / no plugins, wall: {:.2}x",
        rows[1].2.as_secs_f64() / rows[0].2.as_secs_f64()
    );
}
