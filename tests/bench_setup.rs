//! The `labels` plugin's settings and the backup for the benchmarks that
//! call it (`host/benches/execute.rs`, `host/examples/compare.rs`,
//! `tests/tests/perf_guard.rs`), so that their ratios measure the same call.
//! Included by `#[path]`: these need iar's types, and the `iar-tests`
//! library (where the plain fixtures live) does not depend on iar, which
//! dev-depends on it.

use iar::{BackupRef, Phase, PluginSettings};
use iar_tests::fixtures::BENCH_LABELS;
use serde_json::json;

/// The `labels` plugin's settings for the benchmarks: [`BENCH_LABELS`].
pub fn bench_settings() -> PluginSettings {
    PluginSettings {
        config: [("labels".to_string(), BENCH_LABELS.to_string())].into(),
        // The labels it sets are item changes, which need the grant.
        mutate_grants: iar::cluster::mutate::MutateGrants::only(&["*"]).unwrap(),
        ..PluginSettings::default()
    }
}

/// The backup every benchmark call belongs to.
pub fn bench_backup() -> BackupRef {
    BackupRef {
        object: None,
        name: "bench".into(),
        namespace: "velero".into(),
        uid: "bench".into(),
        spec: json!({}),
        phase: Phase::Backup,
    }
}
