use anyhow::Context;
use iar::plugin::Interface;
use iar::plugin::SettingsFile;
use iar::select::ResourceSelector;
use iar::{Plugin, PluginSettings, Runtime, RuntimeConfig};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct InspectArgs {
    /// The plugin's .wasm file.
    plugin: PathBuf,
    /// Its settings file (default: NAME.yaml beside it, as `iar backup`
    /// reads it): the grants and limits shown are the ones in force.
    #[arg(long, value_name = "FILE")]
    settings: Option<PathBuf>,
}

pub fn inspect(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let runtime = Runtime::new(RuntimeConfig::default()).context("starting the wasm runtime")?;
    // The sidecar of NAME.wasm is NAME.yaml; a file that is itself NAME.yaml
    // (not a component, which loading says) has none.
    let sidecar = match &args.settings {
        Some(path) => Some(path.clone()),
        None => Some(args.plugin.with_extension("yaml")).filter(|s| *s != args.plugin),
    };
    let settings: PluginSettings = match sidecar {
        Some(path) => SettingsFile::read_or_default(&path)?
            .into_settings(Vec::new())
            .map_err(anyhow::Error::msg)?,
        None => PluginSettings::default(),
    };
    let plugin = Plugin::from_file(&runtime, &args.plugin, settings)?;
    let s = plugin.settings();
    let out = serde_json::json!({
        "name": plugin.name(),
        "contract": format!("{}@{}", iar::contract::PACKAGE, plugin.version()),
        "interfaces": plugin.interfaces(),
        "imports": plugin.shape().imports,
        "exports": plugin.shape().exports,
        // Each interface's own applies-to; null when it is not exported.
        "appliesTo": plugin.exports(Interface::ItemAction).then(|| selector(plugin.applies_to())),
        "blockAppliesTo": plugin.block_applies_to().map(selector),
        "restoreAppliesTo": plugin.restore_applies_to().map(selector),
        "initialMemory": plugin.shape().initial_memory,
        "coreInstances": plugin.shape().core_instances,
        "memories": plugin.shape().memories,
        "tables": plugin.shape().tables,
        // What it may read, create and change: an item it returns
        // changed is a write (allowMutate), as its creates are.
        "grants": {
            "allowRead": s.grants.patterns().collect::<Vec<_>>(),
            "allowWrite": s.write_grants.entries().collect::<Vec<_>>(),
            "allowMutate": s.mutate_grants.entries().collect::<Vec<_>>(),
        },
        // Every limit in force, the wall-clock ceiling as it applies.
        "limits": limits(plugin.limits())?,
        "size": plugin.size(),
        "digest": format!("sha256:{}", plugin.digest()),
    });
    outln!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}

fn limits(l: &iar::Limits) -> anyhow::Result<serde_json::Value> {
    let mut v = serde_json::to_value(l)?;
    v["wallClock"] = humantime::format_duration(l.wall_clock_ceiling())
        .to_string()
        .into();
    Ok(v)
}

fn selector(sel: &ResourceSelector) -> serde_json::Value {
    serde_json::json!({
        "includedNamespaces": sel.included_namespaces,
        "excludedNamespaces": sel.excluded_namespaces,
        "includedResources": sel.included_resources,
        "excludedResources": sel.excluded_resources,
        "labelSelector": sel.label_selector,
    })
}
