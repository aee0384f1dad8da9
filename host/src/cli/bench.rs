//! `iar bench`: how fast a plugin's execute is on one item, on a reused
//! (warm) instance and on a fresh instance per call.

use anyhow::Context;
use iar::catalog::Catalog;
use iar::plugin::SettingsFile;
use iar::{
    BackupRef, ClusterReader, Item, ManifestCluster, NoCluster, Phase, Plugin, Runtime,
    RuntimeConfig,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The plugin's .wasm file.
    plugin: PathBuf,
    /// The item: a YAML or JSON manifest holding one object.
    #[arg(long)]
    item: PathBuf,
    /// Calls per row.
    #[arg(long, default_value_t = 1000)]
    iterations: usize,
    /// A plugin setting, `key=value` (over `NAME.yaml` beside the plugin).
    #[arg(long = "config", value_name = "KEY=VALUE")]
    config: Vec<String>,
    /// A directory (or file) of manifests that `cluster-get` answers from.
    #[arg(long)]
    cluster: Option<PathBuf>,
}

struct Row {
    median: Duration,
    p99: Duration,
    per_second: f64,
}

fn row(mut times: Vec<Duration>, total: Duration) -> Row {
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    Row {
        median: at(0.5),
        p99: at(0.99),
        per_second: times.len() as f64 / total.as_secs_f64(),
    }
}

fn show(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.2} ms", us / 1000.0)
    }
}

/// What `iar new` links plugins with: the 1 MiB shadow stack, data, and a
/// first heap.
const RECOMMENDED_INITIAL_MEMORY: u64 = 2 << 20;

/// Advice for a plugin whose fresh instances must grow memory first.
fn initial_memory_note(initial: u64) -> Option<String> {
    (initial < RECOMMENDED_INITIAL_MEMORY).then(|| {
        format!(
            "note: the plugin starts with {} KiB of linear memory, so a fresh instance grows it \
             on its first call; linking with --initial-memory={RECOMMENDED_INITIAL_MEMORY} \
             avoids that (docs/plugin-guide.md, \"Fresh instances\")",
            initial >> 10
        )
    })
}

pub fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.iterations > 0, "--iterations must be at least 1");
    let name = iar::plugin::name_from_path(&args.plugin);
    let extra = super::run::plugin_config(&args.config, &name)?;
    let mut settings = SettingsFile::read_or_default(&args.plugin.with_extension("yaml"))?
        .into_settings(extra)
        .map_err(anyhow::Error::msg)?;
    // A bench measures calls, not grants: without a settings file that
    // says otherwise, a plugin may change any item it is benched on (but
    // never what decides rights, which needs an exact entry).
    if settings.mutate_grants.is_empty() {
        settings.mutate_grants =
            iar::cluster::mutate::MutateGrants::only(&["*"]).map_err(anyhow::Error::msg)?;
    }
    let runtime = Runtime::new(RuntimeConfig::default()).context("starting the wasm runtime")?;
    let plugin = Plugin::from_file(&runtime, &args.plugin, settings)?;
    let item = Item::from_value(super::run::read_one_object(&args.item)?, Catalog::builtin())
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.item.display()))?;
    anyhow::ensure!(
        plugin.applies(&item),
        "plugin {name:?} does not apply to {}; bench an item it selects",
        item.id
    );
    let cluster: Arc<dyn ClusterReader> = match &args.cluster {
        Some(dir) => Arc::new(ManifestCluster::new(vec![dir.clone()])),
        None => Arc::new(NoCluster),
    };
    let backup = BackupRef {
        object: None,
        name: "iar-bench".into(),
        namespace: "velero".into(),
        uid: "00000000-0000-0000-0000-000000000000".into(),
        spec: serde_json::json!({}),
        phase: Phase::Backup,
    };
    let never = |_: &str| false;

    // Warm: one instance; the first call (instantiation) is not counted.
    let mut instance = plugin.instance(cluster.clone());
    instance.execute(&item, &backup, &never)?;
    let mut warm = Vec::with_capacity(args.iterations);
    let start = Instant::now();
    for _ in 0..args.iterations {
        let t = Instant::now();
        instance.execute(&item, &backup, &never)?;
        warm.push(t.elapsed());
    }
    let warm = row(warm, start.elapsed());

    // Fresh: a new instance per call, as isolation `item` does.
    let mut fresh = Vec::with_capacity(args.iterations);
    let start = Instant::now();
    for _ in 0..args.iterations {
        let t = Instant::now();
        plugin
            .instance(cluster.clone())
            .execute(&item, &backup, &never)?;
        fresh.push(t.elapsed());
    }
    let fresh = row(fresh, start.elapsed());

    outln!(
        "plugin {name}, execute of {}, {} calls per row",
        item.id,
        args.iterations
    );
    outln!(
        "{:<8}{:>12}{:>12}{:>12}",
        "instance",
        "median",
        "p99",
        "calls/s"
    );
    for (label, r) in [("warm", warm), ("fresh", fresh)] {
        outln!(
            "{label:<8}{:>12}{:>12}{:>12.0}",
            show(r.median),
            show(r.p99),
            r.per_second
        );
    }
    outln!("instances: {}", runtime.allocation());
    if let Some(note) = initial_memory_note(plugin.shape().initial_memory) {
        outln!("{note}");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_initial_memory_gets_a_note() {
        let note = initial_memory_note((17 * 64) << 10).unwrap();
        assert!(
            note.starts_with("note: the plugin starts with 1088 KiB"),
            "{note}"
        );
        assert!(note.contains("--initial-memory=2097152"), "{note}");
        assert_eq!(initial_memory_note(2 << 20), None);
        assert_eq!(initial_memory_note(9 << 20), None);
    }
}
