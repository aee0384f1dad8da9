//! `iar conformance`: generic checks any plugin must pass.

use anyhow::Context;
use iar::authoring::conformance;
use iar::plugin::SettingsFile;
use iar::{Runtime, RuntimeConfig};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub struct ConformanceArgs {
    /// The plugin's .wasm file.
    plugin: PathBuf,
    /// Its settings file (`NAME.yaml` format); default: `NAME.yaml` beside it.
    #[arg(long)]
    settings: Option<PathBuf>,
    /// A plugin setting, `key=value`, over the settings file.
    #[arg(long = "config", value_name = "KEY=VALUE")]
    config: Vec<String>,
    /// CPU deadline of each call (a looping plugin costs this per item).
    #[arg(long, value_parser = iar::duration::parse_non_negative)]
    deadline: Option<Duration>,
    /// `text` (default) or `json`.
    #[arg(long, default_value = "text")]
    format: String,
}

pub fn conformance(args: ConformanceArgs) -> anyhow::Result<ExitCode> {
    let name = iar::plugin::name_from_path(&args.plugin);
    let sidecar = args
        .settings
        .clone()
        .unwrap_or_else(|| args.plugin.with_extension("yaml"));
    let extra = super::run::plugin_config(&args.config, &name)?;
    let mut settings = SettingsFile::read_or_default(&sidecar)?
        .into_settings(extra)
        .map_err(anyhow::Error::msg)?;
    if let Some(d) = args.deadline {
        settings.limits.deadline = d;
    }
    let bytes = std::fs::read(&args.plugin)
        .with_context(|| format!("reading {}", args.plugin.display()))?;
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let report = conformance::check(&runtime, &name, &bytes, settings)?;
    match args.format.as_str() {
        "json" => outln!("{}", serde_json::to_string_pretty(&report)?),
        "text" => out!("{}", conformance::text(&report)),
        other => anyhow::bail!("--format {other:?}: use text or json"),
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
