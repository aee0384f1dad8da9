//! `iar new`: scaffolds a plugin crate.

use iar::authoring::scaffold::{self, Sdk};
use iar::authoring::scaffold_go;
use std::path::{Path, PathBuf};
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
    /// With --lang go: the directory of the Go SDK (go-sdk).
    #[arg(long)]
    sdk: Option<String>,
    /// The plugin's language.
    #[arg(long, value_enum, default_value = "rust")]
    lang: Lang,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Lang {
    Rust,
    Go,
}

pub fn new(args: NewArgs) -> anyhow::Result<ExitCode> {
    let dir = args.path.unwrap_or_else(|| PathBuf::from(&args.name));
    if let Lang::Go = args.lang {
        return new_go(&args.name, &dir, args.sdk);
    }
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

fn new_go(name: &str, dir: &Path, sdk: Option<String>) -> anyhow::Result<ExitCode> {
    let sdk = match sdk {
        Some(s) => PathBuf::from(s).canonicalize()?,
        None => scaffold_go::local_sdk().ok_or_else(|| {
            anyhow::anyhow!("this iar was built without a go-sdk beside it: pass --sdk DIR")
        })?,
    };
    for f in scaffold_go::write(name, dir, &sdk)? {
        outln!("created {}", f.display());
    }
    outln!("\nnext: cd {} && iar build && iar test", dir.display());
    Ok(ExitCode::SUCCESS)
}
