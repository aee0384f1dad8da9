//! `iar test`: runs a plugin's `*.iar-test.yaml` files.

use iar::authoring::{report, runner};
use iar::{Runtime, RuntimeConfig};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct TestArgs {
    /// Test files, or directories searched for `*.iar-test.yaml` (default: `.`).
    paths: Vec<PathBuf>,
    /// Only cases whose name contains this.
    #[arg(long)]
    filter: Option<String>,
    /// Run a single-plugin file against this plugin instead of the one it names.
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// `text` (default) or `json` on stdout.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Also write the results as JUnit XML to this file.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Text,
    Json,
}

/// Exit 0 when every case passed, 1 when one failed; load errors are
/// returned (exit 2).
pub fn test(args: TestArgs) -> anyhow::Result<ExitCode> {
    let paths = match args.paths.is_empty() {
        true => vec![PathBuf::from(".")],
        false => args.paths,
    };
    let files = runner::discover(&paths)?;
    if files.is_empty() {
        anyhow::bail!("no *.iar-test.yaml files in {paths:?}");
    }
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let opts = runner::Options {
        filter: args.filter,
        plugin: args.plugin,
    };
    let reports = files
        .iter()
        .map(|f| runner::run_file(&runtime, f, &opts))
        .collect::<anyhow::Result<Vec<_>>>()?;
    match args.format {
        Format::Text => out!("{}", report::text(&reports)),
        Format::Json => outln!("{}", serde_json::to_string_pretty(&report::json(&reports))?),
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, report::junit(&reports)?)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    let (passed, failed) = report::counts(&reports);
    if passed + failed == 0 {
        anyhow::bail!("no case matched the filter");
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
