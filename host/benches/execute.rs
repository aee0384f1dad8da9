//! execute on a realistic 2.5 KB Pod: the same label mutation done by native
//! Rust in process (the baseline), by the wasm plugin on a reused instance,
//! and on a fresh instance per call. Run with `cargo bench -p iar --bench execute`;
//! compare the three in the same run (the machines are shared and noisy).
//! Then the boundary's scan of a returned item on the same Pod: the fast
//! path against the serde path it falls back to and a `Value` parse.

use criterion::{Criterion, criterion_group, criterion_main};
use iar::catalog::Catalog;
use iar::{Item, NoCluster, Plugin, Runtime, RuntimeConfig};
use iar_tests::fixtures::{bench_pod, native_label};
use std::hint::black_box;
use std::sync::Arc;

#[path = "../../tests/bench_setup.rs"]
mod bench_setup;
use bench_setup::{bench_backup, bench_settings};

fn bench(c: &mut Criterion) {
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let plugin = Plugin::from_file(
        &runtime,
        iar_tests::artifacts::LABELS.as_ref(),
        bench_settings(),
    )
    .unwrap();
    let item = Item::from_value(bench_pod(), Catalog::builtin()).unwrap();
    let backup = bench_backup();
    let size = item.value().to_string().len();
    let mut group = c.benchmark_group(format!("execute-pod-{size}B"));
    group.bench_function("native", |b| {
        b.iter(|| black_box(native_label(black_box(item.value()))))
    });
    let mut reused = plugin.instance(Arc::new(NoCluster));
    group.bench_function("wasm-reused-instance", |b| {
        b.iter(|| {
            black_box(
                reused
                    .execute(black_box(&item), &backup, &|_| false)
                    .unwrap(),
            )
        })
    });
    group.bench_function("wasm-fresh-instance", |b| {
        b.iter(|| {
            let mut fresh = plugin.instance(Arc::new(NoCluster));
            black_box(
                fresh
                    .execute(black_box(&item), &backup, &|_| false)
                    .unwrap(),
            )
        })
    });
    group.finish();

    let text: &str = item.json();
    let mut group = c.benchmark_group(format!("scan-pod-{}B", text.len()));
    group.bench_function("scan", |b| {
        b.iter(|| black_box(iar::item_scan::scan(black_box(text)).unwrap()))
    });
    group.bench_function("scan-by-serde", |b| {
        b.iter(|| black_box(iar::item_scan::by_serde(black_box(text)).unwrap()))
    });
    group.bench_function("value-parse", |b| {
        b.iter(|| black_box(black_box(text).parse::<serde_json::Value>().unwrap()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
