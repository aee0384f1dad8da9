//! The plugin contract as the host sees it: generated bindings per released
//! WIT version, and reading which version a component was built against.
//!
//! Zed's pattern: one `bindgen!` module per released version. When 1.1 or 2.0
//! ships, `v1` stays and gains `From` conversions into the newest types, so a
//! plugin built today keeps loading.

use wasmparser::{Parser, Payload};

/// Bindings for `iar:plugin@1.0.0`.
pub mod v1 {
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

/// The WIT package every plugin exports from.
pub const PACKAGE: &str = "iar:plugin";
/// The interface a plugin must export.
pub const EXPORT: &str = "item-action";
/// Contract versions this host can run.
pub const SUPPORTED: &[&str] = &["1.0.0"];

/// What a component says about itself before it is compiled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ComponentShape {
    /// Top-level imports, as `namespace:package/interface@version`.
    pub imports: Vec<String>,
    /// Top-level exports.
    pub exports: Vec<String>,
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
        let prefix = format!("{PACKAGE}/{EXPORT}@");
        self.exports.iter().find_map(|e| e.strip_prefix(&prefix))
    }
}
