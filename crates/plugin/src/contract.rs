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
        path: "../../wit",
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
        path: "../../wit/v1.1",
        world: "iar:plugin/full-plugin",
        with: {
            "iar:plugin/types": super::since_v1_0::types,
            "iar:plugin/host": super::since_v1_0::host,
        },
    });

    pub use self::exports::iar::plugin::item_action as action;
    pub use self::exports::iar::plugin::item_block_action as block_action;
}

/// Bindings for `iar:plugin@1.2.0` (`wit/v1.2/plugin.wit`): the
/// `cluster-write` and `cluster-list` imports it adds, alone (world
/// `cluster-writer`). Its
/// exports are 1.1.0's: wasmtime finds `item-action@1.2.0` when asked for
/// `@1.1.0` (semver-compatible names), so `since_v1_1`'s indices load a
/// 1.2.0 component's exports too.
pub mod since_v1_2 {
    wasmtime::component::bindgen!({
        path: "../../wit/v1.2",
        world: "iar:plugin/cluster-writer",
        with: {
            "iar:plugin/types": super::since_v1_0::types,
        },
        // Both count against the host-call limit and may stop the call.
        imports: {
            "iar:plugin/cluster-write.create": trappable,
            "iar:plugin/cluster-write.delete": trappable,
            "iar:plugin/cluster-list.list": trappable,
        },
    });

    pub use self::iar::plugin::{cluster_list, cluster_write};
}

/// Bindings for `iar:plugin@1.3.0` (`wit/v1.3/plugin.wit`): the
/// `restore-item-action` export it adds (world `restore-plugin`). Its other
/// interfaces are 1.2.0's, found by the older modules' indices as 1.2.0's
/// are by 1.1.0's.
pub mod since_v1_3 {
    wasmtime::component::bindgen!({
        path: "../../wit/v1.3",
        world: "iar:plugin/restore-plugin",
        with: {
            "iar:plugin/types": super::since_v1_0::types,
            "iar:plugin/host": super::since_v1_0::host,
        },
    });

    pub use self::exports::iar::plugin::restore_item_action as restore_action;
}

/// Bindings for `iar:plugin@1.4.0` (`wit/v1.4/plugin.wit`): the `runs`
/// and `cluster-catalog` imports it adds and `cluster-write` with its
/// `update` and `patch` (world `additions`). Its exports are 1.3.0's, found
/// by the older modules' indices. The host defines `cluster-write` only
/// here: a linker holds one instance per semver-compatible name, and a
/// 1.2.0 writer's `create` and `delete` are found in this one.
pub mod since_v1_4 {
    wasmtime::component::bindgen!({
        path: "../../wit/v1.4",
        world: "iar:plugin/additions",
        with: {
            "iar:plugin/types": super::since_v1_0::types,
        },
        // Each counts against the host-call limit and may stop the call.
        imports: {
            "iar:plugin/runs.backup": trappable,
            "iar:plugin/runs.restore": trappable,
            "iar:plugin/cluster-catalog.resources": trappable,
            "iar:plugin/cluster-catalog.server-version": trappable,
            "iar:plugin/cluster-catalog.home-namespace": trappable,
            "iar:plugin/cluster-write.create": trappable,
            "iar:plugin/cluster-write.delete": trappable,
            "iar:plugin/cluster-write.update": trappable,
            "iar:plugin/cluster-write.patch": trappable,
        },
    });

    pub use self::iar::plugin::{cluster_catalog, cluster_write, runs};
}

/// The newest contract: what code above the boundary names.
pub mod latest {
    pub use super::since_v1_0::{host, types};
    pub use super::since_v1_1::{action, block_action};
    pub use super::since_v1_2::cluster_list;
    pub use super::since_v1_3::restore_action;
    pub use super::since_v1_4::{cluster_catalog, cluster_write, runs};
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
/// The interface a plugin reads its whole Backup or Restore through (1.4.0
/// and later, an import).
pub const RUNS_IMPORT: &str = "runs";
/// The restore-item-action interface (1.3.0 and later, optional).
pub const RESTORE_EXPORT: &str = "restore-item-action";
/// Contract versions this host can run, oldest first.
pub const SUPPORTED: &[&str] = &["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"];

/// The contract interfaces a component exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Interface {
    ItemAction,
    ItemBlockAction,
    RestoreItemAction,
}

impl Interface {
    /// Every interface, in the order they were added.
    pub const ALL: [Interface; 3] = [
        Interface::ItemAction,
        Interface::ItemBlockAction,
        Interface::RestoreItemAction,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Interface::ItemAction => EXPORT,
            Interface::ItemBlockAction => BLOCK_EXPORT,
            Interface::RestoreItemAction => RESTORE_EXPORT,
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
    /// Core instances the component creates (module instantiations, at
    /// any depth), memories and tables its core modules define, and the
    /// largest initial size of any table: what one instance takes from the
    /// instance pool and from memory outside its linear memories.
    pub core_instances: u32,
    pub memories: u32,
    pub tables: u32,
    pub table_elements: u64,
}

/// What one component may hold, checked at load (rule
/// `component-limits`). A Rust guest built for wasm32-wasip2 has three core
/// instances (its module, wit-component's shim and fixup), one memory and
/// two tables; the bounds leave room for other toolchains while keeping
/// one component from taking the pool's slots.
pub const MAX_CORE_INSTANCES: u32 = 16;
pub const MAX_MEMORIES: u32 = 4;
pub const MAX_TABLES: u32 = 8;
/// Elements a guest's table may grow to.
pub const MAX_TABLE_ELEMENTS: usize = 100_000;

/// Why a component's shape cannot be read, or is refused.
#[derive(Debug, thiserror::Error)]
pub enum ShapeError {
    #[error("it is a core wasm module, not a component (build for wasm32-wasip2)")]
    CoreModule,
    #[error("it is not a WebAssembly component")]
    NotAComponent,
    /// `what`: component, import, export, memory, table or instance.
    #[error("malformed {what}: {source}")]
    Malformed {
        what: &'static str,
        #[source]
        source: wasmparser::BinaryReaderError,
    },
    #[error("it exports contract interfaces at two versions ({0} and {1})")]
    TwoVersions(String, String),
    #[error("declares {n} {what}, over the limit of {max}")]
    TooMany {
        what: &'static str,
        n: u32,
        max: u32,
    },
    #[error("declares a table of {n} elements, over the limit of {max}")]
    TableTooLarge { n: u64, max: u64 },
}

/// `ShapeError::Malformed` of `what`.
fn malformed(what: &'static str) -> impl Fn(wasmparser::BinaryReaderError) -> ShapeError {
    move |source| ShapeError::Malformed { what, source }
}

impl ComponentShape {
    /// Reads a component's top-level imports and exports. Fails on anything
    /// that is not a component (a core module, garbage).
    pub fn read(bytes: &[u8]) -> Result<Self, ShapeError> {
        if !wasmparser::Parser::is_component(bytes) {
            return Err(if wasmparser::Parser::is_core_wasm(bytes) {
                ShapeError::CoreModule
            } else {
                ShapeError::NotAComponent
            });
        }
        let mut shape = ComponentShape::default();
        let mut depth = 0usize;
        for payload in Parser::new(0).parse_all(bytes) {
            match payload.map_err(malformed("component"))? {
                Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
                Payload::End(_) if depth > 0 => depth -= 1,
                Payload::ComponentImportSection(s) if depth == 0 => {
                    for import in s {
                        let import = import.map_err(malformed("import"))?;
                        shape.imports.push(import.name.name.to_string());
                    }
                }
                Payload::ComponentExportSection(s) if depth == 0 => {
                    for export in s {
                        let export = export.map_err(malformed("export"))?;
                        shape.exports.push(export.name.name.to_string());
                    }
                }
                Payload::MemorySection(s) => {
                    for memory in s {
                        let memory = memory.map_err(malformed("memory"))?;
                        let bytes = memory.initial.saturating_mul(WASM_PAGE);
                        shape.initial_memory = shape.initial_memory.max(bytes);
                        shape.memories = shape.memories.saturating_add(1);
                    }
                }
                Payload::TableSection(s) => {
                    for table in s {
                        let table = table.map_err(malformed("table"))?;
                        shape.tables = shape.tables.saturating_add(1);
                        shape.table_elements = shape.table_elements.max(table.ty.initial);
                    }
                }
                Payload::InstanceSection(s) => {
                    for instance in s {
                        let instance = instance.map_err(malformed("instance"))?;
                        if matches!(instance, wasmparser::Instance::Instantiate { .. }) {
                            shape.core_instances = shape.core_instances.saturating_add(1);
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(shape)
    }

    /// Refuses a component that would hold more than one plugin instance
    /// may: more core instances, memories or tables than the bounds above,
    /// or a table larger than a guest may grow one to. Checked before
    /// compiling, so such a component costs no compile and no pool slot.
    pub fn check_limits(&self) -> Result<(), ShapeError> {
        for (what, n, max) in [
            ("core instances", self.core_instances, MAX_CORE_INSTANCES),
            ("memories", self.memories, MAX_MEMORIES),
            ("tables", self.tables, MAX_TABLES),
        ] {
            if n > max {
                return Err(ShapeError::TooMany { what, n, max });
            }
        }
        let max_elements = MAX_TABLE_ELEMENTS as u64;
        if self.table_elements > max_elements {
            return Err(ShapeError::TableTooLarge {
                n: self.table_elements,
                max: max_elements,
            });
        }
        Ok(())
    }

    /// Whether any core module inside the component defines or imports a
    /// shared memory. Such a memory is never checked against the memory cap
    /// (wasmtime's `ResourceLimiter` is not consulted for shared memories),
    /// so a plugin that declares one is refused at load.
    pub fn declares_shared_memory(bytes: &[u8]) -> Result<bool, ShapeError> {
        for payload in Parser::new(0).parse_all(bytes) {
            match payload.map_err(malformed("component"))? {
                Payload::MemorySection(s) => {
                    for memory in s {
                        if memory.map_err(malformed("memory"))?.shared {
                            return Ok(true);
                        }
                    }
                }
                Payload::ImportSection(s) => {
                    for import in s.into_imports() {
                        let import = import.map_err(malformed("import"))?;
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
    pub fn contract(&self) -> Result<Option<(String, Vec<Interface>)>, ShapeError> {
        let mut version: Option<&str> = None;
        let mut found = Vec::new();
        for interface in Interface::ALL {
            let Some(v) = self.interface_version(interface) else {
                continue;
            };
            if let Some(seen) = version
                && seen != v
            {
                return Err(ShapeError::TwoVersions(seen.to_string(), v.to_string()));
            }
            version = Some(v);
            found.push(interface);
        }
        Ok(version.map(|v| (v.to_string(), found)))
    }
}

#[cfg(test)]
mod tests {
    /// Unsigned LEB128, as wasm writes sizes and counts.
    fn leb(mut n: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn section(id: u8, content: &[u8], out: &mut Vec<u8>) {
        out.push(id);
        leb(content.len() as u64, out);
        out.extend_from_slice(content);
    }

    /// A core module defining `memories` one-page memories and `tables`
    /// funcref tables of `elements` elements each.
    fn core_module(memories: u64, tables: u64, elements: u64) -> Vec<u8> {
        let mut m = b"\0asm\x01\0\0\0".to_vec();
        let mut t = Vec::new();
        leb(tables, &mut t);
        for _ in 0..tables {
            t.extend_from_slice(&[0x70, 0x00]);
            leb(elements, &mut t);
        }
        section(4, &t, &mut m);
        let mut mem = Vec::new();
        leb(memories, &mut mem);
        for _ in 0..memories {
            mem.extend_from_slice(&[0x00, 0x01]);
        }
        section(5, &mem, &mut m);
        m
    }

    /// A component holding `module` and instantiating it `instances`
    /// times: a hostile shape, written byte by byte.
    pub(crate) fn component(module: &[u8], instances: u64) -> Vec<u8> {
        let mut c = b"\0asm\x0d\0\x01\0".to_vec();
        section(1, module, &mut c);
        if instances > 0 {
            let mut i = Vec::new();
            leb(instances, &mut i);
            for _ in 0..instances {
                // instantiate core module 0 with no arguments
                i.extend_from_slice(&[0x00, 0x00, 0x00]);
            }
            section(2, &i, &mut c);
        }
        c
    }

    /// A component that would take many pool slots or hold tables outside
    /// the memory cap is refused by its shape, naming what it declares.
    #[test]
    fn components_over_the_per_component_limits_are_refused() {
        let ok = ComponentShape::read(&component(&core_module(1, 2, 10), 3)).unwrap();
        assert_eq!((ok.core_instances, ok.memories, ok.tables), (3, 1, 2));
        ok.check_limits().unwrap();
        for (bytes, what) in [
            (component(&core_module(1, 1, 1), 200), "200 core instances"),
            (component(&core_module(5, 1, 1), 1), "5 memories"),
            (component(&core_module(1, 9, 1), 1), "9 tables"),
            (
                component(&core_module(1, 1, 1_000_000), 1),
                "table of 1000000 elements",
            ),
        ] {
            let shape = ComponentShape::read(&bytes).unwrap();
            let err = shape.check_limits().unwrap_err().to_string();
            assert!(err.contains(what), "{err}");
        }
        // Loading refuses it with the rule's name, before compiling.
        let runtime = crate::runtime::Runtime::new(crate::runtime::RuntimeConfig {
            cache_dir: None,
            ..Default::default()
        })
        .unwrap();
        let err = crate::plugin::Plugin::from_bytes(
            &runtime,
            "many-instances",
            &component(&core_module(1, 1, 1), 200),
            Default::default(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "plugin \"many-instances\": declares 200 core instances, over the limit of 16 (rule: component-limits)"
        );
        assert_eq!(runtime.compiles(), 0);
    }
    use super::*;

    fn shape(exports: &[&str]) -> ComponentShape {
        ComponentShape {
            imports: Vec::new(),
            exports: exports.iter().map(|e| e.to_string()).collect(),
            ..ComponentShape::default()
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
