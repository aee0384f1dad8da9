//! Argument parsing and output only.

mod inspect;
mod run;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "iar",
    version,
    about = "The item action runtime: Kubernetes backup item actions as sandboxed WebAssembly components"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run plugins on one item, without a cluster, and print what they return.
    Run(run::RunArgs),
    /// Show what a plugin is: name, contract version, imports, exports, applies-to, size, digest.
    Inspect(inspect::InspectArgs),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("IAR_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Inspect(args) => inspect::inspect(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("iar: {}", one_line(&format!("{e:#}")));
            ExitCode::from(2)
        }
    }
}

/// Errors go to stderr on one line.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
