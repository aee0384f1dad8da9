//! `iar build` (a plugin's sources into its component) and `iar
//! componentize` (a core module into a plugin component: the second half
//! of a Go build, for authors who run `go build` themselves).

use anyhow::Context;
use iar::authoring::{build as building, componentize};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct ComponentizeArgs {
    /// The core module (`GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared`).
    core: PathBuf,
    /// The component to write.
    #[arg(short, long)]
    output: PathBuf,
    /// A world of the contract to build against (default: the interfaces
    /// the module imports and exports, at its version).
    #[arg(long)]
    world: Option<String>,
}

pub fn componentize(args: ComponentizeArgs) -> anyhow::Result<ExitCode> {
    let core =
        std::fs::read(&args.core).with_context(|| format!("reading {}", args.core.display()))?;
    let component = componentize::componentize(&core, args.world.as_deref())
        .with_context(|| format!("componentizing {}", args.core.display()))?;
    std::fs::write(&args.output, &component)
        .with_context(|| format!("writing {}", args.output.display()))?;
    outln!("{}: {} bytes", args.output.display(), component.len());
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
pub struct BuildArgs {
    /// The plugin's directory: a Go package (its module's go.mod here or
    /// above) or a Rust crate (Cargo.toml).
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// The component to write (default: NAME.wasm in the directory for
    /// Go, cargo's target directory for Rust).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Go only: a world of the contract to build against (default: the
    /// interfaces the module imports and exports).
    #[arg(long)]
    world: Option<String>,
}

pub fn build(args: BuildArgs) -> anyhow::Result<ExitCode> {
    let built = building::build(&args.dir, args.output.as_deref(), args.world.as_deref())?;
    outln!("{}: {} bytes", built.path.display(), built.bytes);
    Ok(ExitCode::SUCCESS)
}
