//! `iar componentize`: a core module into a plugin component (the Go SDK's
//! second build step, after `go build`).

use anyhow::Context;
use iar::authoring::componentize;
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
