//! The plugin contract as the host sees it: generated bindings per released
//! WIT version, and reading which version a component was built against.
//!
//! Zed's pattern: one `bindgen!` module per released version (`since_v1_0`,
//! `since_v1_1`) and a `latest` alias that the code above the boundary
//! names. 1.1.0 only added an interface, so its `types` and `host` are the
//! 1.0.0 ones (mapped with `with`, no conversions needed): a host call from
//! a 1.1.0 plugin lands in the same `Host` impl, and wasmtime's linker
//! resolves an import of `host@1.1.0` to the `host@1.0.0` it defines
//! (semver-compatible names).

use wasmparser::{Parser, Payload};

/// Bindings for `iar:plugin@1.0.0` (`wit/plugin.wit`).
pub mod since_v1_0 {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "iar:plugin/plugin",
        // cluster-get may stop the call (too many host calls in one call).
        imports: { "iar:plugin/host.cluster-get": trappable },
    });

    pub use self::exports::iar::plugin::item_action as action;
    pub use self::iar::plugin::host;
    pub use self::iar::plugin::types;
}

/// Bindings for `iar:plugin@1.1.0` (`wit/v1.1/plugin.wit`). The world with
/// both exports is generated; each export is looked up on its own
/// (`GuestIndices`), so a component exporting only one of them loads too.
pub mod since_v1_1 {
    wasmtime::component::bindgen!({
        path: "../wit/v1.1",
        world: "iar:plugin/full-plugin",
        with: {
            "iar:plugin/types": super::since_v1_0::types,
            "iar:plugin/host": super::since_v1_0::host,
        },
    });

    pub use self::exports::iar::plugin::item_action as action;
    pub use self::exports::iar::plugin::item_block_action as block_action;
}

/// The newest contract: what code above the boundary names.
pub mod latest {
    pub use super::since_v1_0::{host, types};
    pub use super::since_v1_1::{action, block_action};
}

/// The 1.0.0 bindings under their old name (the sandbox implements
/// `v1::host::Host`).
pub use since_v1_0 as v1;

/// The WIT package every plugin exports from.
pub const PACKAGE: &str = "iar:plugin";
/// The item-action interface (every 1.0.0 plugin exports it).
pub const EXPORT: &str = "item-action";
/// The item-block-action interface (1.1.0 and later, optional).
pub const BLOCK_EXPORT: &str = "item-block-action";
/// Contract versions this host can run, oldest first.
pub const SUPPORTED: &[&str] = &["1.0.0", "1.1.0"];

/// The contract interfaces a component exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Interface {
    ItemAction,
    ItemBlockAction,
}

impl Interface {
    pub fn name(self) -> &'static str {
        match self {
            Interface::ItemAction => EXPORT,
            Interface::ItemBlockAction => BLOCK_EXPORT,
        }
    }
}

impl std::fmt::Display for Interface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A wasm page: custom page sizes are turned off in the engine.
const WASM_PAGE: u64 = 64 << 10;

/// What a component says about itself before it is compiled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ComponentShape {
    /// Top-level imports, as `namespace:package/interface@version`.
    pub imports: Vec<String>,
    /// Top-level exports.
    pub exports: Vec<String>,
    /// The largest initial size, in bytes, of a memory a core module inside
    /// defines: what a fresh instance starts with before the guest grows it
    /// (a Rust guest's allocator grows memory on a fresh instance unless
    /// this leaves room for its heap; see the plugin guide).
    pub initial_memory: u64,
}

impl ComponentShape {
    /// Reads a component's top-level imports and exports. Fails on anything
    /// that is not a component (a core module, garbage).
    pub fn read(bytes: &[u8]) -> Result<Self, String> {
        if !wasmparser::Parser::is_component(bytes) {
            return Err(if wasmparser::Parser::is_core_wasm(bytes) {
                "it is a core wasm module, not a component (build for wasm32-wasip2)".into()
            } else {
                "it is not a WebAssembly component".into()
            });
        }
        let mut shape = ComponentShape::default();
        let mut depth = 0usize;
        for payload in Parser::new(0).parse_all(bytes) {
            match payload.map_err(|e| format!("malformed component: {e}"))? {
                Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
                Payload::End(_) if depth > 0 => depth -= 1,
                Payload::ComponentImportSection(s) if depth == 0 => {
                    for import in s {
                        let import = import.map_err(|e| format!("malformed import: {e}"))?;
                        shape.imports.push(import.name.name.to_string());
                    }
                }
                Payload::ComponentExportSection(s) if depth == 0 => {
                    for export in s {
                        let export = export.map_err(|e| format!("malformed export: {e}"))?;
                        shape.exports.push(export.name.name.to_string());
                    }
                }
                Payload::MemorySection(s) => {
                    for memory in s {
                        let memory = memory.map_err(|e| format!("malformed memory: {e}"))?;
                        let bytes = memory.initial.saturating_mul(WASM_PAGE);
                        shape.initial_memory = shape.initial_memory.max(bytes);
                    }
                }
                _ => {}
            }
        }
        Ok(shape)
    }

    /// Whether any core module inside the component defines or imports a
    /// shared memory. Such a memory is never checked against the memory cap
    /// (wasmtime's `ResourceLimiter` is not consulted for shared memories),
    /// so a plugin that declares one is refused at load.
    pub fn declares_shared_memory(bytes: &[u8]) -> Result<bool, String> {
        for payload in Parser::new(0).parse_all(bytes) {
            match payload.map_err(|e| format!("malformed component: {e}"))? {
                Payload::MemorySection(s) => {
                    for memory in s {
                        if memory.map_err(|e| format!("malformed memory: {e}"))?.shared {
                            return Ok(true);
                        }
                    }
                }
                Payload::ImportSection(s) => {
                    for import in s.into_imports() {
                        let import = import.map_err(|e| format!("malformed import: {e}"))?;
                        if let wasmparser::TypeRef::Memory(m) = import.ty
                            && m.shared
                        {
                            return Ok(true);
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(false)
    }

    /// The contract version of the `item-action` export, if there is one.
    pub fn contract_version(&self) -> Option<&str> {
        self.interface_version(Interface::ItemAction)
    }

    /// The version of one contract interface this component exports.
    pub fn interface_version(&self, interface: Interface) -> Option<&str> {
        let prefix = format!("{PACKAGE}/{}@", interface.name());
        self.exports.iter().find_map(|e| e.strip_prefix(&prefix))
    }

    /// The contract interfaces exported and the one version they share.
    /// Err names what is wrong: none exported (`Ok(None)` is never
    /// returned with an empty list), or two at different versions.
    pub fn contract(&self) -> Result<Option<(String, Vec<Interface>)>, String> {
        let mut version: Option<&str> = None;
        let mut found = Vec::new();
        for interface in [Interface::ItemAction, Interface::ItemBlockAction] {
            let Some(v) = self.interface_version(interface) else {
                continue;
            };
            if let Some(seen) = version
                && seen != v
            {
                return Err(format!(
                    "it exports contract interfaces at two versions ({seen} and {v})"
                ));
            }
            version = Some(v);
            found.push(interface);
        }
        Ok(version.map(|v| (v.to_string(), found)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(exports: &[&str]) -> ComponentShape {
        ComponentShape {
            imports: Vec::new(),
            exports: exports.iter().map(|e| e.to_string()).collect(),
            initial_memory: 0,
        }
    }

    /// Which interfaces and version the host reads from a component's
    /// exports: either interface alone, both, none, and a mix of versions
    /// (refused: one component is built against one contract version).
    #[test]
    fn contract_is_read_from_the_exports() {
        use Interface::*;
        /// Exports, and the version and interfaces read (Err: refused).
        type Case = (
            &'static [&'static str],
            Result<Option<(&'static str, Vec<Interface>)>, ()>,
        );
        let cases: [Case; 5] = [
            (
                &["iar:plugin/item-action@1.0.0"],
                Ok(Some(("1.0.0", vec![ItemAction]))),
            ),
            (
                &["iar:plugin/item-block-action@1.1.0"],
                Ok(Some(("1.1.0", vec![ItemBlockAction]))),
            ),
            (
                &[
                    "iar:plugin/item-action@1.1.0",
                    "iar:plugin/item-block-action@1.1.0",
                ],
                Ok(Some(("1.1.0", vec![ItemAction, ItemBlockAction]))),
            ),
            (&["wasi:cli/run@0.2.0"], Ok(None)),
            (
                &[
                    "iar:plugin/item-action@1.0.0",
                    "iar:plugin/item-block-action@1.1.0",
                ],
                Err(()),
            ),
        ];
        for (exports, want) in cases {
            let got = shape(exports).contract().map_err(|_| ());
            let want = want.map(|o| o.map(|(v, i)| (v.to_string(), i)));
            assert_eq!(got, want, "{exports:?}");
        }
    }
}
