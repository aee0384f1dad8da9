use anyhow::Context;
use iar::plugin::Interface;
use iar::select::ResourceSelector;
use iar::{Plugin, PluginSettings, Runtime, RuntimeConfig};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct InspectArgs {
    /// The plugin's .wasm file.
    plugin: PathBuf,
}

pub fn inspect(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let runtime = Runtime::new(RuntimeConfig::default()).context("starting the wasm runtime")?;
    let plugin = Plugin::from_file(&runtime, &args.plugin, PluginSettings::default())?;
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
        // The limits in force for it unless its settings say otherwise:
        // the CPU deadline and the wall-clock ceiling above it.
        "limits": {
            "deadline": humantime::format_duration(plugin.limits().deadline).to_string(),
            "wallClock": humantime::format_duration(plugin.limits().wall_clock_ceiling()).to_string(),
            "memoryBytes": plugin.limits().memory_bytes,
        },
        "size": plugin.size(),
        "digest": format!("sha256:{}", plugin.digest()),
    });
    outln!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
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
