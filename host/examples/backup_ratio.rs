//! The backup ratio of issue 9: a 10,000-item backup through the labels and
//! pod-volumes plugins, and through those and pvc-snapshot, against the
//! same backup with no plugins, at equal item-block workers, in interleaved
//! rounds (the order turning each round) so that machine load hits all
//! alike; the ratios are medians of per-round ratios. The items, plugins
//! and controller are those of `benches/backup.rs` (`backup-10k-items`),
//! which gives the absolute figures. The stores and the cluster go to
//! `$TMPDIR`: on ext4 the files the snapshots make (2,500 a backup, and as
//! many rewritten) cost more each run (inode allocation skips recently
//! deleted inodes), which `bench/compare.sh` avoids with a tmpfs.
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

    // Three sides: none; labels and pod-volumes, which only call the
    // plugins (12,500 calls); and the three, where pvc-snapshot also
    // creates 2,500 VolumeSnapshots and the backup waits for their
    // operations and finalizes them: work a backup without plugins does
    // not do, so its ratio is not the plugins' call cost alone.
    let calls_only: Vec<iar::Plugin> = plugins[..2].to_vec();
    println!(
        "backup of {ITEMS} items ÷ the same with no plugins; {rounds} interleaved rounds; medians"
    );
    println!(
        "{:<9}{:>12}{:>22}{:>14}{:>18}{:>10}",
        "workers", "no plugins", "labels, pod-volumes", "ratio", "three plugins", "ratio"
    );
    for &w in &workers {
        let mut times: [Vec<f64>; 3] = Default::default();
        let mut ratios: [Vec<f64>; 2] = Default::default();
        let sides: [&[iar::Plugin]; 3] = [&[], &calls_only, &plugins];
        for round in 0..rounds {
            // The order turns each round, so no side always follows another.
            let mut took = [0.0; 3];
            for k in 0..3 {
                let side = (round + k) % 3;
                took[side] = backup(sides[side], w).as_secs_f64();
            }
            for side in 0..3 {
                times[side].push(took[side]);
            }
            ratios[0].push(took[1] / took[0]);
            ratios[1].push(took[2] / took[0]);
        }
        let [none, two, three] = times.map(median);
        let [two_ratio, three_ratio] = ratios.map(median);
        println!(
            "{w:<9}{:>9.0} ms{:>19.0} ms{:>13.2}x{:>15.0} ms{:>9.2}x",
            none * 1e3,
            two * 1e3,
            two_ratio,
            three * 1e3,
            three_ratio
        );
    }
}
