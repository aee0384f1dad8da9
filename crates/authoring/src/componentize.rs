//! `iar componentize`: a core WebAssembly module that exports iar's
//! contract by the canonical ABI's names (what the Go SDK's
//! `//go:wasmexport iar:plugin/item-action@1.3.0#execute` produces) into a
//! component iar loads.
//!
//! The module carries no component type (Go cannot emit one), so the world
//! is derived from the module itself: every `iar:plugin/<interface>@<v>`
//! it imports or exports, at the one version it uses, unless a world of
//! the contract is named. Its WASI preview-1 imports (Go's runtime: the
//! clock, random, fd_write for panics) go through wasmtime 48's own
//! reactor adapter, so the component imports WASI 0.2 as Rust plugins do.

use std::collections::BTreeSet;
use wit_component::{ComponentEncoder, StringEncoding};
use wit_parser::{PackageId, Resolve};

/// The contract's WIT, one file per version.
const CONTRACTS: [(&str, &str); 5] = [
    ("1.0.0", include_str!("../../../wit/plugin.wit")),
    ("1.1.0", include_str!("../../../wit/v1.1/plugin.wit")),
    ("1.2.0", include_str!("../../../wit/v1.2/plugin.wit")),
    ("1.3.0", include_str!("../../../wit/v1.3/plugin.wit")),
    ("1.4.0", include_str!("../../../wit/v1.4/plugin.wit")),
];

/// Why a module could not become a plugin component.
#[derive(Debug, thiserror::Error)]
pub enum ComponentizeError {
    #[error("not a core WebAssembly module{}", if *.0 { " (it is already a component)" } else { "" })]
    NotCoreModule(bool),
    #[error("reading the module: {0}")]
    Parse(#[from] wasmparser::BinaryReaderError),
    #[error(
        "the module exports no iar:plugin interface (no export named iar:plugin/item-action@VERSION#execute or the like): build it with the SDK's export packages"
    )]
    NoExports,
    #[error("the module uses iar:plugin at more than one version ({0}); one version per plugin")]
    MixedVersions(String),
    #[error("iar:plugin@{0} is not a contract version this iar knows (it knows {known})", known = known_versions())]
    UnknownVersion(String),
    #[error("iar:plugin@{version} has no interface {name:?} (the module {direction} it)")]
    UnknownInterface {
        version: String,
        name: String,
        direction: &'static str,
    },
    #[error("encoding the component: {0:#}")]
    Encode(anyhow::Error),
}

fn known_versions() -> String {
    CONTRACTS.map(|(v, _)| v).join(", ")
}

/// What a module says about itself: the contract interfaces it imports and
/// exports, and their version.
#[derive(Debug, Default, PartialEq)]
pub struct ModuleInterfaces {
    pub version: String,
    pub imports: BTreeSet<String>,
    pub exports: BTreeSet<String>,
}

/// `iar:plugin/NAME@VERSION` (an import's module, or an export's name up
/// to `#`): (NAME, VERSION).
fn contract_interface(name: &str) -> Option<(&str, &str)> {
    name.strip_prefix("iar:plugin/")?.split_once('@')
}

/// Reads the contract interfaces a core module imports and exports.
pub fn interfaces(core: &[u8]) -> Result<ModuleInterfaces, ComponentizeError> {
    if !wasmparser::Parser::is_core_wasm(core) {
        return Err(ComponentizeError::NotCoreModule(
            wasmparser::Parser::is_component(core),
        ));
    }
    let mut versions = BTreeSet::new();
    let mut found = ModuleInterfaces::default();
    for payload in wasmparser::Parser::new(0).parse_all(core) {
        match payload? {
            wasmparser::Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    if let Some((name, version)) = contract_interface(import?.module) {
                        found.imports.insert(name.to_string());
                        versions.insert(version.to_string());
                    }
                }
            }
            wasmparser::Payload::ExportSection(reader) => {
                for export in reader {
                    let export = export?;
                    let Some((interface, _)) = export.name.split_once('#') else {
                        continue;
                    };
                    if let Some((name, version)) = contract_interface(interface) {
                        found.exports.insert(name.to_string());
                        versions.insert(version.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    if found.exports.is_empty() {
        return Err(ComponentizeError::NoExports);
    }
    if versions.len() > 1 {
        return Err(ComponentizeError::MixedVersions(
            versions.into_iter().collect::<Vec<_>>().join(", "),
        ));
    }
    found.version = versions.pop_first().unwrap_or_default();
    Ok(found)
}

/// The contract of `version`, parsed.
fn contract(version: &str) -> Result<(Resolve, PackageId), ComponentizeError> {
    let (_, wit) = CONTRACTS
        .iter()
        .find(|(v, _)| *v == version)
        .ok_or_else(|| ComponentizeError::UnknownVersion(version.to_string()))?;
    let mut resolve = Resolve::default();
    let package = resolve
        .push_source(&format!("iar-plugin-{version}.wit"), wit)
        .map_err(ComponentizeError::Encode)?;
    Ok((resolve, package))
}

/// The WIT of a world importing and exporting exactly the module's
/// interfaces (a package of its own, beside the contract's).
fn derived_world(found: &ModuleInterfaces) -> String {
    let v = &found.version;
    let mut wit = String::from("package iar:componentize;\n\nworld plugin {\n");
    for name in &found.imports {
        wit.push_str(&format!("    import iar:plugin/{name}@{v};\n"));
    }
    for name in &found.exports {
        wit.push_str(&format!("    export iar:plugin/{name}@{v};\n"));
    }
    wit.push_str("}\n");
    wit
}

/// Turns a core module into a plugin component. `world` names a world of
/// the contract at the module's version (`plugin`, `backup-restore-plugin`,
/// ...); `None` derives it from the module's own imports and exports.
pub fn componentize(core: &[u8], world: Option<&str>) -> Result<Vec<u8>, ComponentizeError> {
    let found = interfaces(core)?;
    let (mut resolve, contract_package) = contract(&found.version)?;
    let interface_names: BTreeSet<&str> = resolve.packages[contract_package]
        .interfaces
        .keys()
        .map(String::as_str)
        .collect();
    for (set, direction) in [(&found.imports, "imports"), (&found.exports, "exports")] {
        if let Some(name) = set.iter().find(|n| !interface_names.contains(n.as_str())) {
            return Err(ComponentizeError::UnknownInterface {
                version: found.version.clone(),
                name: name.clone(),
                direction,
            });
        }
    }
    let world = match world {
        Some(name) => resolve
            .select_world(&[contract_package], Some(name))
            .map_err(ComponentizeError::Encode)?,
        None => {
            let package = resolve
                .push_source("derived.wit", &derived_world(&found))
                .map_err(ComponentizeError::Encode)?;
            resolve
                .select_world(&[package], Some("plugin"))
                .map_err(ComponentizeError::Encode)?
        }
    };
    let mut module = core.to_vec();
    wit_component::embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)
        .map_err(ComponentizeError::Encode)?;
    ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .and_then(|e| {
            e.adapter(
                wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
                wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
            )
        })
        .and_then(|mut e| e.encode())
        .map_err(ComponentizeError::Encode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_world_holds_the_modules_interfaces_at_its_version() {
        let found = ModuleInterfaces {
            version: "1.3.0".into(),
            imports: ["host".to_string(), "cluster-write".into()].into(),
            exports: ["item-action".to_string()].into(),
        };
        let wit = derived_world(&found);
        assert!(
            wit.contains("import iar:plugin/cluster-write@1.3.0;"),
            "{wit}"
        );
        assert!(
            wit.contains("export iar:plugin/item-action@1.3.0;"),
            "{wit}"
        );
        let (mut resolve, _) = contract("1.3.0").unwrap();
        resolve.push_source("derived.wit", &wit).unwrap();
    }

    #[test]
    fn every_known_version_parses() {
        for (v, _) in CONTRACTS {
            contract(v).unwrap();
        }
        assert!(matches!(
            contract("2.0.0"),
            Err(ComponentizeError::UnknownVersion(_))
        ));
    }

    #[test]
    fn a_component_or_garbage_is_refused() {
        let err = interfaces(b"not wasm").unwrap_err();
        assert!(
            matches!(err, ComponentizeError::NotCoreModule(false)),
            "{err}"
        );
        // The smallest component: magic, component version and layer.
        let component = b"\0asm\x0d\0\x01\0";
        let err = interfaces(component).unwrap_err();
        assert!(err.to_string().contains("already a component"), "{err}");
    }

    #[test]
    fn a_module_without_contract_exports_is_refused() {
        let empty = b"\0asm\x01\0\0\0";
        assert!(matches!(
            interfaces(empty),
            Err(ComponentizeError::NoExports)
        ));
    }
}
