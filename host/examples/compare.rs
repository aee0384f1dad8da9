//! The iar rows of `bench/compare.sh`: execute of the bench Pod
//! (`examples/bench/pod.json`) by the `labels` plugin (`labels:
//! team=payments`) through `PluginInstance::execute`, the code path a backup
//! uses, on a reused instance and on a fresh instance per call, against the
//! same mutation done natively in process with the same JSON text round
//! trip; and start-up: loading the plugin from the compile cache plus its
//! first call; and what a fresh instance costs before its call
//! (instantiating and dropping it, calling nothing). Rows are measured in interleaved rounds (native, reused,
//! fresh, native, …) so that machine load hits all of them alike; the ratios
//! are medians of per-round ratios.
//!
//! With `--go labels-go.wasm` (the Go SDK's port, built by go-sdk/build.sh)
//! the Go plugin's reused and fresh calls join the same rounds, with its
//! start-up, size and ratios to the Rust plugin and to Velero's.
//!
//! `cargo run --release -p iar --example compare -- [--velero anchor.json]
//! [--rounds N] [--calls N] [--plugin labels.wasm] [--go labels-go.wasm]
//! [--profile native|work|reused|fresh|on-demand|instantiate]`; with `--velero`, the Velero anchor's figures
//! (`bench/velero`, JSON) are printed in the same table.

use iar::catalog::Catalog;
use iar::{Item, NoCluster, Plugin, Runtime, RuntimeConfig};
use iar_tests::fixtures::{bench_pod, native_label, native_label_text};
use serde_json::Value;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../../tests/bench_setup.rs"]
mod bench_setup;
use bench_setup::{bench_backup, bench_settings};

#[derive(Clone, Copy)]
struct Row {
    median: f64,
    p99: f64,
    per_second: f64,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn row(mut times_us: Vec<f64>, total: Duration) -> Row {
    let n = times_us.len() as f64;
    times_us.sort_by(f64::total_cmp);
    Row {
        median: quantile(&times_us, 0.5),
        p99: quantile(&times_us, 0.99),
        per_second: n / total.as_secs_f64(),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    quantile(&v, 0.5)
}

/// Times `calls` runs of `f`: (per-call µs, total).
fn time(calls: usize, mut f: impl FnMut()) -> (Vec<f64>, Duration) {
    let mut out = Vec::with_capacity(calls);
    let start = Instant::now();
    for _ in 0..calls {
        let t = Instant::now();
        f();
        out.push(t.elapsed().as_secs_f64() * 1e6);
    }
    (out, start.elapsed())
}

struct Args {
    velero: Option<String>,
    rounds: usize,
    calls: usize,
    starts: usize,
    /// Run only this row (`native`, `work`, `reused`, `fresh`, `on-demand`,
    /// `instantiate`) for `--calls` calls
    /// and exit: what `perf record` is pointed at.
    profile: Option<String>,
    /// Another build of the labels plugin (`--plugin path.wasm`): the same
    /// rows for it, e.g. one built without WASI imports.
    plugin: Option<String>,
    /// The Go SDK's labels plugin (`--go labels-go.wasm`, built by
    /// go-sdk/build.sh): its reused and fresh calls in the same rounds, its
    /// start-up, and its ratios to the Rust plugin and to Velero's.
    go: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        velero: None,
        rounds: 20,
        calls: 200,
        starts: 20,
        profile: None,
        plugin: None,
        go: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--velero" => a.velero = Some(value()),
            "--rounds" => a.rounds = value().parse().expect("--rounds N"),
            "--calls" => a.calls = value().parse().expect("--calls N"),
            "--starts" => a.starts = value().parse().expect("--starts N"),
            "--profile" => a.profile = Some(value()),
            "--plugin" => a.plugin = Some(value()),
            "--go" => a.go = Some(value()),
            "--bench" => {} // cargo passes it to examples run as benches
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// This process's resident set, from /proc (0 elsewhere).
fn rss_bytes() -> i64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: i64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as i64
}

fn show(us: f64) -> String {
    if us < 1000.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.2} ms", us / 1000.0)
    }
}

fn main() {
    let args = args();
    let item = Item::from_value(bench_pod(), Catalog::builtin()).unwrap();
    let backup = bench_backup();
    let never = |_: &str| false;
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let path = std::path::Path::new(
        args.plugin
            .as_deref()
            .unwrap_or(iar_tests::artifacts::LABELS),
    );
    let plugin = Plugin::from_file(&runtime, path, bench_settings()).unwrap();
    assert_eq!(runtime.compiles(), 1);

    // Same answer on every path, checked once.
    let mut reused = plugin.instance(Arc::new(NoCluster));
    let out = reused.execute(&item, &backup, &never).unwrap();
    assert_eq!(
        out.item.as_ref().map(|i| i.value()),
        Some(&native_label(item.value()))
    );

    // The same plugin on a runtime that allocates each instance's memory on
    // demand (`RuntimeConfig::pooling: false`; the default pools), for a
    // fresh-instance row without the pool.
    let on_demand_runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        pooling: false,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let on_demand = Plugin::from_file(&on_demand_runtime, path, bench_settings()).unwrap();

    // The Go labels plugin, on a runtime of its own (same cache) so that
    // each runtime's compile count checks its own start-up rows.
    let mut go = args.go.as_ref().map(|go_path| {
        let go_path = std::path::PathBuf::from(go_path);
        let go_runtime = Runtime::new(RuntimeConfig {
            cache_dir: Some(cache.path().to_path_buf()),
            ..RuntimeConfig::default()
        })
        .unwrap();
        let t = Instant::now();
        let go_plugin = Plugin::from_file(&go_runtime, &go_path, bench_settings()).unwrap();
        let compile = t.elapsed();
        assert_eq!(go_runtime.compiles(), 1);
        let mut go_reused = go_plugin.instance(Arc::new(NoCluster));
        let out = go_reused.execute(&item, &backup, &never).unwrap();
        assert_eq!(
            out.item.as_ref().map(|i| i.value()),
            Some(&native_label(item.value())),
            "the Go plugin's answer is the Rust plugin's"
        );
        (go_path, go_runtime, go_plugin, go_reused, compile)
    });

    if let Some(which) = &args.profile {
        let calls = args.calls;
        let (times, _) = match which.as_str() {
            "native" => time(calls, || {
                black_box(native_label(black_box(item.value())));
            }),
            "work" => {
                let text = item.json().clone();
                time(calls, || {
                    black_box(native_label_text(black_box(&text)));
                })
            }
            "reused" => time(calls, || {
                black_box(reused.execute(black_box(&item), &backup, &never).unwrap());
            }),
            "fresh" => time(calls, || {
                let mut fresh = plugin.instance(Arc::new(NoCluster));
                black_box(fresh.execute(black_box(&item), &backup, &never).unwrap());
            }),
            "on-demand" => time(calls, || {
                let mut fresh = on_demand.instance(Arc::new(NoCluster));
                black_box(fresh.execute(black_box(&item), &backup, &never).unwrap());
            }),
            "instantiate" => time(calls, || {
                assert!(plugin.instance(Arc::new(NoCluster)).instantiate_and_drop());
            }),
            other => {
                panic!("--profile native|work|reused|fresh|on-demand|instantiate, not {other}")
            }
        };
        println!("{which}: median {}", show(median(times)));
        return;
    }

    let mut p_all = Vec::new();
    let mut p_total = Duration::ZERO;

    let text = item.json().clone();
    let (mut w_all, mut w_total, mut work_ratio) = (Vec::new(), Duration::ZERO, Vec::new());
    let (mut n_all, mut r_all, mut f_all) = (Vec::new(), Vec::new(), Vec::new());
    let (mut n_total, mut r_total, mut f_total) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (mut reused_ratio, mut fresh_ratio) = (Vec::new(), Vec::new());
    // Instantiate and drop only, and its share of what a fresh call adds.
    let (mut i_all, mut i_total, mut i_share) = (Vec::new(), Duration::ZERO, Vec::new());
    // The Go plugin's reused and fresh calls, and its reused ÷ Rust's.
    let (mut gr_all, mut gr_total, mut gf_all, mut gf_total, mut go_ratio) = (
        Vec::new(),
        Duration::ZERO,
        Vec::new(),
        Duration::ZERO,
        Vec::new(),
    );
    for _ in 0..args.rounds {
        let (n, nt) = time(args.calls, || {
            black_box(native_label(black_box(item.value())));
        });
        let (r, rt) = time(args.calls, || {
            black_box(reused.execute(black_box(&item), &backup, &never).unwrap());
        });
        let (f, ft) = time(args.calls, || {
            let mut fresh = plugin.instance(Arc::new(NoCluster));
            black_box(fresh.execute(black_box(&item), &backup, &never).unwrap());
        });
        let (p, pt) = time(args.calls, || {
            let mut fresh = on_demand.instance(Arc::new(NoCluster));
            black_box(fresh.execute(black_box(&item), &backup, &never).unwrap());
        });
        let (w, wt) = time(args.calls, || {
            black_box(native_label_text(black_box(&text)));
        });
        let (i, it) = time(args.calls, || {
            assert!(plugin.instance(Arc::new(NoCluster)).instantiate_and_drop());
        });
        if let Some((_, _, go_plugin, go_reused, _)) = go.as_mut() {
            let (gr, grt) = time(args.calls, || {
                black_box(
                    go_reused
                        .execute(black_box(&item), &backup, &never)
                        .unwrap(),
                );
            });
            let (gf, gft) = time(args.calls, || {
                let mut fresh = go_plugin.instance(Arc::new(NoCluster));
                black_box(fresh.execute(black_box(&item), &backup, &never).unwrap());
            });
            go_ratio.push(median(gr.clone()) / median(r.clone()));
            gr_all.extend(gr);
            gr_total += grt;
            gf_all.extend(gf);
            gf_total += gft;
        }
        work_ratio.push(median(r.clone()) / median(w.clone()));
        w_all.extend(w);
        w_total += wt;
        p_all.extend(p);
        p_total += pt;
        let (nm, rm, fm) = (median(n.clone()), median(r.clone()), median(f.clone()));
        reused_ratio.push(rm / nm);
        fresh_ratio.push(fm / rm);
        i_share.push(median(i.clone()) / (fm - rm));
        i_all.extend(i);
        i_total += it;
        n_all.extend(n);
        r_all.extend(r);
        f_all.extend(f);
        n_total += nt;
        r_total += rt;
        f_total += ft;
    }
    let native_row = row(n_all, n_total);
    let work_row = row(w_all, w_total);
    let reused_row = row(r_all, r_total);
    let fresh_row = row(f_all, f_total);
    let on_demand_row = row(p_all, p_total);
    let instantiate_row = row(i_all, i_total);

    // Start-up: load from the compile cache (validate, read, link, ask
    // applies-to) plus the first execute on a new instance.
    let mut load_only = Vec::new();
    let (starts, starts_total) = time(args.starts, || {
        let t = Instant::now();
        let p = Plugin::from_file(&runtime, path, bench_settings()).unwrap();
        load_only.push(t.elapsed().as_secs_f64() * 1e6);
        black_box(
            p.instance(Arc::new(NoCluster))
                .execute(&item, &backup, &never),
        )
        .unwrap();
    });
    assert_eq!(
        runtime.compiles(),
        1,
        "start-up rows must load from the cache"
    );
    let start_row = row(starts, starts_total);
    let load_row = row(load_only, starts_total);

    // The Go plugin's rows: calls, and start-up as the Rust plugin's.
    let go_rows = go.as_ref().map(|(go_path, go_runtime, _, _, compile)| {
        let mut load_only = Vec::new();
        let (starts, starts_total) = time(args.starts, || {
            let t = Instant::now();
            let p = Plugin::from_file(go_runtime, go_path, bench_settings()).unwrap();
            load_only.push(t.elapsed().as_secs_f64() * 1e6);
            black_box(
                p.instance(Arc::new(NoCluster))
                    .execute(&item, &backup, &never),
            )
            .unwrap();
        });
        assert_eq!(
            go_runtime.compiles(),
            1,
            "the Go start-up rows must load from the cache"
        );
        let size = |p: &std::path::Path| std::fs::metadata(p).unwrap().len();
        (
            row(gr_all.clone(), gr_total),
            row(gf_all.clone(), gf_total),
            row(load_only, starts_total),
            row(starts, starts_total),
            *compile,
            size(go_path),
            size(path),
        )
    });

    // Memory: resident set growth for 100 plugins loaded from the cache
    // (each load keeps its own copy of the compiled code), then for 100 live
    // instances (each after one execute).
    let rss0 = rss_bytes();
    let loaded: Vec<Plugin> = (0..100)
        .map(|_| Plugin::from_file(&runtime, path, bench_settings()).unwrap())
        .collect();
    let rss1 = rss_bytes();
    let live: Vec<_> = loaded
        .iter()
        .map(|p| {
            let mut i = p.instance(Arc::new(NoCluster));
            i.execute(&item, &backup, &never).unwrap();
            i
        })
        .collect();
    let rss2 = rss_bytes();
    // Idle pool slots keep the pages their instances wrote (up to 2 MiB
    // each, at most 32 idle slots) so the next instance takes no faults.
    drop(live);
    let rss3 = rss_bytes();
    drop(loaded);

    let velero: Option<Value> = args
        .velero
        .as_ref()
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).expect("anchor JSON"));
    let vrow = |key: &str| {
        velero.as_ref().map(|v| Row {
            median: v[key]["median_us"].as_f64().unwrap(),
            p99: v[key]["p99_us"].as_f64().unwrap(),
            per_second: v[key]["per_second"].as_f64().unwrap(),
        })
    };

    println!(
        "execute of the bench Pod ({} bytes), labels plugin (team=payments); {} rounds × {} calls, interleaved",
        item.json().len(),
        args.rounds,
        args.calls
    );
    println!(
        "{:<34}{:>12}{:>12}{:>12}{:>12}",
        "per call", "median", "p99", "calls/s", "÷ reused"
    );
    let line = |label: &str, r: Row| {
        println!(
            "{label:<34}{:>12}{:>12}{:>12.0}{:>11.2}x",
            show(r.median),
            show(r.p99),
            r.per_second,
            r.median / reused_row.median
        );
    };
    line("native Rust, in process", native_row);
    line("native, plugin's JSON work only", work_row);
    line("iar, reused instance", reused_row);
    line("iar, fresh instance", fresh_row);
    line("iar, fresh instance, on demand", on_demand_row);
    line("  instantiate + drop, no call", instantiate_row);
    if let Some((reused, fresh, ..)) = go_rows {
        line("iar, Go SDK labels, reused", reused);
        line("iar, Go SDK labels, fresh", fresh);
    }
    if let Some(v) = vrow("execute") {
        line("Velero plugin (go-plugin gRPC)", v);
    }
    println!(
        "{:<34}{:>12}{:>12}{:>12}{:>12}",
        "start-up", "median", "p99", "per s", ""
    );
    let sline = |label: &str, r: Row| {
        println!(
            "{label:<34}{:>12}{:>12}{:>12.0}",
            show(r.median),
            show(r.p99),
            r.per_second
        );
    };
    sline("iar, load cached component", load_row);
    sline("iar, load cached + first execute", start_row);
    if let Some((_, _, load, start, ..)) = go_rows {
        sline("iar Go, load cached component", load);
        sline("iar Go, load cached + first execute", start);
    }
    if let Some(v) = vrow("startup") {
        sline("Velero, start plugin + 1st execute", v);
    }
    if let Some((.., compile, go_size, rust_size)) = go_rows {
        println!(
            "component size: Rust labels {rust_size} bytes, Go labels {go_size} bytes ({:.1}x); Go compile (first load, no cache) {:.2} s",
            go_size as f64 / rust_size as f64,
            compile.as_secs_f64()
        );
    }
    let mib = |b: i64| b as f64 / (1 << 20) as f64;
    println!(
        "memory (resident set growth): 100 plugins loaded {:.1} MiB ({:.2} MiB each); 100 live instances {:.1} MiB ({:.0} KiB each); still resident once those are dropped {:.1} MiB",
        mib(rss1 - rss0),
        mib(rss1 - rss0) / 100.0,
        mib(rss2 - rss1),
        (rss2 - rss1) as f64 / 1024.0 / 100.0,
        mib(rss3 - rss1)
    );
    println!("ratios (medians of per-round ratios, same run):");
    println!(
        "  reused ÷ native     {:.2}x  (target ≤ 1.3x)",
        median(reused_ratio)
    );
    println!(
        "  reused ÷ native plugin work only  {:.2}x  (the whole cost of sandbox and boundary; goal ≤ 1.1x)",
        median(work_ratio)
    );
    println!(
        "  fresh ÷ reused      {:.2}x  (goal ≤ 1.3x, not reachable: docs/performance.md, \"the floor\")",
        median(fresh_ratio)
    );
    println!(
        "  instantiate + drop ÷ (fresh − reused)  {:.2}  (the share of a fresh call's extra cost spent before the guest runs)",
        median(i_share)
    );
    if let Some(v) = vrow("execute") {
        println!(
            "  Velero ÷ reused     {:.1}x  (target ≥ 10x; medians, Velero measured just before)",
            v.median / reused_row.median
        );
    }
    if let Some(v) = vrow("startup") {
        println!(
            "  Velero start ÷ iar  {:.1}x  (start-up + first execute)",
            v.median / start_row.median
        );
    }
    if let Some((go_reused, ..)) = go_rows {
        println!(
            "  Go reused ÷ Rust reused  {:.2}x  (goal ≤ 3x; medians of per-round ratios)",
            median(go_ratio)
        );
        if let Some(v) = vrow("execute") {
            println!(
                "  Velero ÷ Go reused  {:.1}x  (goal ≥ 10x)",
                v.median / go_reused.median
            );
        }
    }
}
