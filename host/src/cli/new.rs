//! `iar new`: scaffolds a plugin crate.

use iar::authoring::scaffold::{self, Sdk};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct NewArgs {
    /// The plugin's name (also its crate and .wasm name).
    name: String,
    /// Where to create it (default: ./NAME).
    #[arg(long)]
    path: Option<PathBuf>,
    /// The iar-sdk dependency: a local path to its crate, or a version
    /// requirement of the published crate; default: this checkout's SDK.
    #[arg(long)]
    sdk: Option<String>,
}

pub fn new(args: NewArgs) -> anyhow::Result<ExitCode> {
    let dir = args.path.unwrap_or_else(|| PathBuf::from(&args.name));
    let sdk = match args.sdk {
        Some(s) if PathBuf::from(&s).join("Cargo.toml").exists() => {
            Sdk::Path(PathBuf::from(&s).canonicalize()?)
        }
        Some(version) => Sdk::Version(version),
        None => match scaffold::local_sdk() {
            Some(p) => Sdk::Path(p),
            None => Sdk::Version("0.1".into()),
        },
    };
    let files = scaffold::write(&args.name, &dir, &sdk)?;
    for f in files {
        outln!("created {}", f.display());
    }
    outln!(
        "\nnext: cd {} && cargo build --target wasm32-wasip2 --release && iar test",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
