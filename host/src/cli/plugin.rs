use anyhow::Context;
use iar::k8s::plugins::configmap::{self, ManifestInput};
use iar::{Plugin, Runtime, RuntimeConfig};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct PluginArgs {
    #[command(subcommand)]
    command: PluginCommand,
}

#[derive(clap::Subcommand)]
enum PluginCommand {
    /// Print a ready-to-apply plugin ConfigMap (YAML): the `iar.dev/plugin`
    /// label, the component's sha256, the component inline in binaryData
    /// (or --reference), and its settings. Above 256 KiB apply it with
    /// `kubectl apply --server-side`.
    Configmap(ConfigMapArgs),
}

#[derive(clap::Args)]
struct ConfigMapArgs {
    /// The plugin's .wasm file.
    plugin: PathBuf,
    /// The ConfigMap's name, which is the plugin's name.
    #[arg(long)]
    name: String,
    #[arg(long, default_value = "iar-system")]
    namespace: String,
    /// A settings document (config, limits, allowRead), as NAME.yaml beside a plugin file.
    #[arg(long)]
    settings: Option<PathBuf>,
    /// Plugins run in ascending order, then by name.
    #[arg(long, allow_negative_numbers = true)]
    order: Option<i64>,
    /// An absolute path on a volume mounted into iar, or an https:// URL,
    /// holding the same bytes; the component is then not inlined.
    #[arg(long)]
    reference: Option<String>,
}

pub fn plugin(args: PluginArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        PluginCommand::Configmap(args) => configmap(args),
    }
}

fn configmap(args: ConfigMapArgs) -> anyhow::Result<ExitCode> {
    let component = std::fs::read(&args.plugin)
        .with_context(|| format!("reading {}", args.plugin.display()))?;
    let settings = match &args.settings {
        Some(path) => Some(
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        ),
        None => None,
    };
    let cm = configmap::manifest(ManifestInput {
        name: args.name.clone(),
        namespace: args.namespace,
        component: component.clone(),
        settings,
        order: args.order,
        reference: args.reference,
    })?;
    // Refuse here what the cluster would refuse: a component that does not
    // load (wrong world, a failing applies-to) with these settings.
    let spec = configmap::parse(&cm)?;
    let runtime = Runtime::new(RuntimeConfig::default()).context("starting the wasm runtime")?;
    Plugin::from_bytes(&runtime, &spec.name, &component, spec.settings)?;
    out!("{}", serde_yaml::to_string(&cm)?);
    Ok(ExitCode::SUCCESS)
}
