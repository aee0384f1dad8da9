use anyhow::Context;
use iar::k8s::plugins::configmap::{self, ManifestInput};
use iar::plugin::SettingsFile;
use iar::{Plugin, Runtime, RuntimeConfig};
use std::path::{Path, PathBuf};
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
    /// Install iar into a Velero plugin directory (what the init container
    /// of `velero plugin add IMAGE` runs): this binary as `DIR/iar`, and the
    /// wasm plugins (`*.wasm`, with their `NAME.yaml` settings) in
    /// `DIR/iar-plugins/`, where the plugin process looks for them.
    VeleroInstall(VeleroInstallArgs),
}

#[derive(clap::Args)]
struct VeleroInstallArgs {
    /// Velero's plugin directory, as the init container mounts it.
    #[arg(long, default_value = "/target")]
    to: PathBuf,
    /// The wasm plugins to install with it.
    #[arg(long, default_value = "/iar-plugins")]
    plugins: PathBuf,
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
        PluginCommand::VeleroInstall(args) => velero_install(args),
    }
}

/// Copies `from` to `to` through a temporary file beside it, so that a
/// Velero starting meanwhile never runs half a binary.
fn copy_atomically(from: &Path, to: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = to.with_extension("iar-tmp");
    std::fs::copy(from, &tmp)
        .with_context(|| format!("copying {} to {}", from.display(), tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
    std::fs::rename(&tmp, to).with_context(|| format!("renaming to {}", to.display()))?;
    Ok(())
}

fn velero_install(args: VeleroInstallArgs) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("finding this binary")?;
    std::fs::create_dir_all(&args.to).with_context(|| format!("creating {}", args.to.display()))?;
    copy_atomically(&exe, &args.to.join("iar"), 0o755)?;
    let wasm_dir = args.to.join("iar-plugins");
    std::fs::create_dir_all(&wasm_dir)?;
    let mut installed = Vec::new();
    let entries = std::fs::read_dir(&args.plugins)
        .with_context(|| format!("reading {}", args.plugins.display()))?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        let wanted = path.extension().is_some_and(|e| e == "wasm" || e == "yaml");
        if !wanted || !path.is_file() {
            continue;
        }
        let name = path.file_name().expect("a file has a name");
        // A settings file that would not load is refused here, at install,
        // rather than by Velero's first backup.
        let is_wasm = path.extension().is_some_and(|e| e == "wasm");
        let settings = match is_wasm {
            true => Some(
                SettingsFile::read_or_default(&path.with_extension("yaml"))
                    .and_then(|f| f.into_settings(Vec::new()))
                    .map_err(|e| {
                        let file = path.with_extension("yaml");
                        anyhow::anyhow!("{}: {e}", file.display())
                    })?,
            ),
            false => None,
        };
        // Not executable: Velero runs every executable file of its plugin
        // directory as a plugin.
        copy_atomically(&path, &wasm_dir.join(name), 0o644)?;
        if let Some(settings) = settings {
            let plugin = iar::plugin::name_from_path(&path);
            // What each plugin may do inside Velero, said where it is
            // installed (stderr: stdout lists the names Velero registers).
            eprintln!("iar: iar.dev/{plugin}: {}", settings.grants_summary());
            installed.push(plugin);
        }
    }
    if installed.is_empty() {
        eprintln!(
            "iar: no *.wasm in {}: Velero gets only the plugin ConfigMaps",
            args.plugins.display()
        );
    }
    for name in &installed {
        outln!("{}", format_args!("iar.dev/{name}"));
    }
    Ok(ExitCode::SUCCESS)
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
    out!("{}", iar::yaml::to_string(&cm)?);
    Ok(ExitCode::SUCCESS)
}
