//! `iar bench`: how fast a plugin's execute is on one item, on a reused
//! (warm) instance and on a fresh instance per call.

use anyhow::Context;
use iar::resources::Catalog;
use iar::settings_file::SettingsFile;
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

pub fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.iterations > 0, "--iterations must be at least 1");
    let name = iar::plugin::name_from_path(&args.plugin);
    let extra = super::run::plugin_config(&args.config, &name)?;
    let settings = SettingsFile::read_or_default(&args.plugin.with_extension("yaml"))?
        .into_settings(extra)
        .map_err(anyhow::Error::msg)?;
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

    println!(
        "plugin {name}, execute of {}, {} calls per row",
        item.id, args.iterations
    );
    println!(
        "{:<8}{:>12}{:>12}{:>12}",
        "instance", "median", "p99", "calls/s"
    );
    for (label, r) in [("warm", warm), ("fresh", fresh)] {
        println!(
            "{label:<8}{:>12}{:>12}{:>12.0}",
            show(r.median),
            show(r.p99),
            r.per_second
        );
    }
    Ok(ExitCode::SUCCESS)
}
