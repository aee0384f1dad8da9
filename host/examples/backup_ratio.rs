//! The backup ratio of issue 9: a 10,000-item backup through the labels,
//! pod-volumes and pvc-snapshot plugins against the same backup with no
//! plugins, at equal item-block workers, in interleaved rounds (none,
//! three, three, none, …) so that machine load hits both alike; the ratio
//! is the median of per-round ratios. The items, plugins and controller are
//! those of `benches/backup.rs` (`backup-10k-items`), which gives the
//! absolute figures.
//!
//! `cargo run --release -p iar --example backup_ratio -- [--rounds N]
//! [--workers 1,2] [--only three|none|<plugin>,...]`

use iar::backup::object::BackupPhase;
use std::time::{Duration, Instant};

#[path = "../benches/common/mod.rs"]
mod common;
use common::*;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut rounds = 5;
    let mut workers = vec![1, 2];
    // `--only three|none|labels,pod-volumes,...`: back up with those
    // plugins only, timed, for a profiler or to tell the plugins' shares.
    let mut only: Option<Vec<usize>> = None;
    const NAMES: [&str; 3] = ["labels", "pod-volumes", "pvc-snapshot"];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => {
                rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--rounds N")
            }
            "--workers" => {
                workers = args
                    .next()
                    .expect("--workers 1,2")
                    .split(',')
                    .map(|w| w.parse().expect("--workers 1,2"))
                    .collect()
            }
            "--only" => {
                only = Some(match args.next().as_deref() {
                    Some("three") => vec![0, 1, 2],
                    Some("none") => vec![],
                    Some(list) => list
                        .split(',')
                        .map(|n| {
                            NAMES
                                .iter()
                                .position(|known| *known == n)
                                .unwrap_or_else(|| panic!("--only: {n} is not one of {NAMES:?}"))
                        })
                        .collect(),
                    None => panic!("--only three|none|<plugin>,..."),
                })
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let runtime = wasm_runtime();
    let plugins = three_plugins(&runtime);
    let cluster = tempfile::tempdir().unwrap();
    write_cluster(cluster.path());
    let request = request(cluster.path());

    let backup = |plugins: &[iar::Plugin], workers: usize| -> Duration {
        let (_store, controller) = fresh_controller(plugins, cluster.path(), workers, None);
        let start = Instant::now();
        let object = tokio
            .block_on(controller.run_backup(request.clone()))
            .unwrap();
        // Freeing what the backup parsed (its manifest cache) is part of
        // its cost.
        drop(controller);
        let took = start.elapsed();
        assert_eq!(object.status.phase, BackupPhase::Completed);
        assert_eq!(object.status.progress.items_backed_up, ITEMS as u64);
        // pvc-snapshot starts one operation per claim.
        let snapshots = plugins.iter().any(|p| p.name().contains("pvc_snapshot"));
        let operations = if snapshots { PER_KIND } else { 0 };
        assert_eq!(
            object.status.backup_item_operations_completed,
            operations as u64
        );
        took
    };
    if let Some(chosen) = only {
        let side: Vec<iar::Plugin> = chosen.iter().map(|&i| plugins[i].clone()).collect();
        let side = &side[..];
        for &w in &workers {
            for _ in 0..rounds {
                let took = backup(side, w);
                println!("{w} workers: {:.0} ms", took.as_secs_f64() * 1e3);
            }
        }
        return;
    }
    // Warm-up: the page cache, the compiled plugins' first instances.
    backup(&plugins, 1);
    backup(&[], 1);

    println!(
        "backup of {ITEMS} items, three plugins (labels, pod-volumes, pvc-snapshot) ÷ none; {rounds} interleaved rounds"
    );
    println!(
        "{:<10}{:>14}{:>16}{:>10}",
        "workers", "no plugins", "three plugins", "ratio"
    );
    for &w in &workers {
        let (mut none, mut three, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            // Alternate which goes first, so neither always follows the other.
            let (n, t) = if round % 2 == 0 {
                let n = backup(&[], w);
                (n, backup(&plugins, w))
            } else {
                let t = backup(&plugins, w);
                (backup(&[], w), t)
            };
            let (n, t) = (n.as_secs_f64(), t.as_secs_f64());
            none.push(n);
            three.push(t);
            ratio.push(t / n);
        }
        println!(
            "{w:<10}{:>12.0} ms{:>14.0} ms{:>9.2}x",
            median(none) * 1e3,
            median(three) * 1e3,
            median(ratio)
        );
    }
}
