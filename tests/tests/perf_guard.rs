//! Regression guard on the cost of the sandbox: execute of the bench Pod
//! (`examples/bench/pod.json`) by the `labels` plugin on a reused instance,
//! through `PluginInstance::execute` (the path a backup uses), may take at
//! most 1.6x the same mutation done natively in process with the same JSON
//! text round trip. Measured as a ratio in one run: interleaved rounds
//! (native, wasm, native, wasm, …), the median of per-round ratios of
//! per-round medians, so that load on a shared machine hits both sides
//! alike. The only timing assertion in the test suite.
//!
//! `cargo test -p iar-tests --test perf_guard` (runs in a few seconds).
//! `IAR_PERF_GUARD_MAX` overrides the bound (for a machine known to differ).

use iar::resources::Catalog;
use iar::{BackupRef, Item, NoCluster, Phase, Plugin, PluginSettings, Runtime, RuntimeConfig};
use iar_tests::artifacts;
use iar_tests::fixtures::{BENCH_LABELS, bench_pod, native_label};
use serde_json::json;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROUNDS: usize = 31;
const CALLS: usize = 40;
const MAX_RATIO: f64 = 1.6;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn round(mut f: impl FnMut()) -> Duration {
    median(
        (0..CALLS)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

#[test]
fn reused_instance_execute_is_within_1_6x_of_native() {
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let settings = PluginSettings {
        config: [("labels".to_string(), BENCH_LABELS.to_string())].into(),
        ..PluginSettings::default()
    };
    let plugin = Plugin::from_file(&runtime, artifacts::LABELS.as_ref(), settings).unwrap();
    let item = Item::from_value(bench_pod(), Catalog::builtin()).unwrap();
    let backup = BackupRef {
        name: "bench".into(),
        namespace: "velero".into(),
        uid: "bench".into(),
        spec: json!({}),
        phase: Phase::Backup,
    };
    let mut instance = plugin.instance(Arc::new(NoCluster));
    let never = |_: &str| false;
    // Both do the same work: same output.
    let out = instance.execute(&item, &backup, &never).unwrap();
    assert_eq!(out.item.as_ref(), Some(&native_label(item.value())));

    let mut ratios: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let n = round(|| {
                black_box(native_label(black_box(item.value())));
            });
            let w = round(|| {
                black_box(instance.execute(black_box(&item), &backup, &never).unwrap());
            });
            w.as_secs_f64() / n.as_secs_f64()
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let ratio = ratios[ratios.len() / 2];
    let max = std::env::var("IAR_PERF_GUARD_MAX")
        .ok()
        .map(|v| v.parse::<f64>().expect("IAR_PERF_GUARD_MAX: a number"))
        .unwrap_or(MAX_RATIO);
    eprintln!(
        "reused-instance execute ÷ native: {ratio:.2}x (median of {ROUNDS} rounds; quartiles {:.2}x–{:.2}x; bound {max}x)",
        ratios[ROUNDS / 4],
        ratios[3 * ROUNDS / 4]
    );
    assert!(
        ratio <= max,
        "execute on a reused instance is {ratio:.2}x native (bound {max}x): a change made the sandbox slower"
    );
}
