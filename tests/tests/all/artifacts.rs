//! Every guest that `build.rs` built is a valid component that exports what
//! its source says it exports.
//!
//! The old checks compared `ALL` with the constants the same generator
//! wrote, so they could not fail. These read the built files: a stale path,
//! a core module, an invalid binary or a guest built against the wrong WIT
//! world fails here.

use std::collections::BTreeSet;
use std::path::Path;

use iar_tests::artifacts;
use wasmparser::{Parser, Payload, Validator, WasmFeatures};

/// The exports of a command (`fn main`) built for wasm32-wasip2: only
/// `wasi:cli/run`, at whatever 0.2 patch version std links.
const COMMAND_EXPORT: &str = "wasi:cli/run@0.2.";

/// The top-level export names of a component, read with wasmparser.
fn exports(bytes: &[u8]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.expect("validated already") {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) if depth > 0 => depth -= 1,
            Payload::ComponentExportSection(section) if depth == 0 => {
                for export in section {
                    names.insert(export.expect("validated already").name.name.to_string());
                }
            }
            _ => {}
        }
    }
    names
}

/// `key: "value"` inside a `wit_bindgen::generate!({ ... })` call.
fn macro_field<'a>(source: &'a str, key: &str) -> Option<&'a str> {
    let call = &source[source.find("wit_bindgen::generate!")?..];
    let call = &call[..call.find("});")?];
    let rest = &call[call.find(&format!("{key}:"))? + key.len() + 1..];
    let start = rest.find('"')? + 1;
    let end = start + rest[start..].find('"')?;
    Some(&rest[start..end])
}

/// The exports of the world a `generate!` call in `crate_dir/src/lib.rs`
/// names, resolved from its WIT with wit-parser.
fn world_exports(crate_dir: &Path) -> Option<BTreeSet<String>> {
    let source = std::fs::read_to_string(crate_dir.join("src/lib.rs")).ok()?;
    let wit = crate_dir.join(macro_field(&source, "path")?);
    let world = macro_field(&source, "world")?;
    Some(exports_of_world(&wit, world))
}

/// The exports of `world` in the WIT package at `wit`.
fn exports_of_world(wit: &Path, world: &str) -> BTreeSet<String> {
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve
        .push_dir(wit)
        .unwrap_or_else(|e| panic!("{}: {e:?}", wit.display()));
    let world = resolve
        .select_world(&[package], Some(world))
        .unwrap_or_else(|e| panic!("{world} in {}: {e:?}", wit.display()));
    resolve.worlds[world]
        .exports
        .keys()
        .map(|key| resolve.name_world_key(key))
        .collect()
}

/// What a guest's source says its component exports: the world of its own
/// `generate!`, or of the SDK's when it exports through the SDK's macro, or `wasi:cli/run` for a command. None when the source does not say.
fn expected_exports(crate_dir: &Path) -> Option<BTreeSet<String>> {
    if let Some(own) = world_exports(crate_dir) {
        return Some(own);
    }
    let lib = std::fs::read_to_string(crate_dir.join("src/lib.rs")).unwrap_or_default();
    // `iar_sdk::export!`, or the SDK's generated macro used directly (the
    // hostile guest does, to skip the SDK's checks).
    if lib.contains("iar_sdk::export!(") || lib.contains("__export_iar_plugin!(") {
        let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk");
        return Some(world_exports(&sdk).expect("the SDK calls generate! with a path and world"));
    }
    // The SDK's 1.1.0 macros: block relations only, or both interfaces.
    let v1_1 = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit/v1.1");
    if lib.contains("iar_sdk::export_block_action!(") {
        return Some(exports_of_world(&v1_1, "iar:plugin/block-plugin"));
    }
    if lib.contains("iar_sdk::export_both!(") {
        return Some(exports_of_world(&v1_1, "iar:plugin/full-plugin"));
    }
    // The SDK's 1.3.0 macro: the union of one world per key it names.
    if let Some(at) = lib.find("iar_sdk::export_plugin!(") {
        let args = &lib[at..];
        let args = &args[..args.find(')').unwrap_or(args.len())];
        let v1_3 = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit/v1.3");
        let mut all = BTreeSet::new();
        for (key, world) in [
            ("item_action", "iar:plugin/item-action-part"),
            ("block_action", "iar:plugin/block-action-part"),
            ("restore_action", "iar:plugin/restore-plugin"),
        ] {
            if args.contains(&format!("{key} =")) {
                all.extend(exports_of_world(&v1_3, world));
            }
        }
        return (!all.is_empty()).then_some(all);
    }
    if crate_dir.join("src/main.rs").is_file() && lib.is_empty() {
        return Some(BTreeSet::from([format!("{COMMAND_EXPORT}*")]));
    }
    None
}

#[test]
fn every_guest_is_a_valid_component_with_the_exports_its_source_declares() {
    assert!(!artifacts::ALL.is_empty(), "no guests were built");
    assert_eq!(artifacts::ALL.len(), artifacts::SOURCES.len());
    for ((package, path), (source_package, dir)) in artifacts::ALL.iter().zip(artifacts::SOURCES) {
        assert_eq!(package, source_package);
        let bytes = std::fs::read(path).unwrap_or_else(|e| {
            panic!(
                "{package}: cannot read {path}: {e} \
                 (if target/guests was removed, run `cargo clean -p iar-tests`)"
            )
        });
        assert!(
            Parser::is_component(&bytes),
            "{package}: {path} is not a component"
        );
        Validator::new_with_features(WasmFeatures::all())
            .validate_all(&bytes)
            .unwrap_or_else(|e| panic!("{package}: {path} is not a valid component: {e}"));

        let actual = exports(&bytes);
        let expected = expected_exports(Path::new(dir)).unwrap_or_else(|| {
            panic!(
                "{package} ({dir}): cannot tell from its source what it should export; \
                 teach expected_exports in tests/tests/all/artifacts.rs"
            )
        });
        if expected.iter().any(|e| e.starts_with(COMMAND_EXPORT)) {
            assert!(
                actual.len() == 1 && actual.iter().all(|a| a.starts_with(COMMAND_EXPORT)),
                "{package}: a command must export only {COMMAND_EXPORT}*, exports {actual:?}"
            );
        } else {
            assert_eq!(
                actual, expected,
                "{package}: exports differ from its WIT world"
            );
        }
    }
}

/// The expectations are not vacuous: the plugins and the fixtures built
/// against another world or version expect different exports.
#[test]
fn expected_exports_tell_the_guests_apart() {
    let expected: Vec<(String, BTreeSet<String>)> = artifacts::SOURCES
        .iter()
        .filter_map(|(package, dir)| Some((package.to_string(), expected_exports(Path::new(dir))?)))
        .collect();
    let of = |package: &str| {
        expected
            .iter()
            .find(|(p, _)| p == package)
            .map(|(_, e)| e.clone())
            .unwrap_or_else(|| panic!("{package} has no expectation"))
    };
    let plugin = of("iar-plugin-labels");
    assert!(
        plugin
            .iter()
            .any(|e| e.starts_with("iar:plugin/item-action@1.")),
        "{plugin:?}"
    );
    assert_ne!(of("iar-guest-future-version"), plugin);
    assert_ne!(of("iar-guest-wrong-world"), plugin);
}

/// The workspace's `.cargo/config.toml` reaches the guest build: every guest
/// starts with the 2 MiB of linear memory it sets (rustc alone gives 1 MiB
/// of shadow stack plus data), so a fresh instance's first call finds its
/// heap without growing memory. Read through the host's own
/// `ComponentShape`, which `iar inspect` prints as `initialMemory`.
#[test]
fn every_guest_starts_with_the_configured_initial_memory() {
    for (package, path) in artifacts::ALL {
        let bytes = std::fs::read(path).unwrap();
        let shape = iar::contract::ComponentShape::read(&bytes)
            .unwrap_or_else(|e| panic!("{package}: {e}"));
        assert_eq!(
            shape.initial_memory,
            2 << 20,
            "{package}: initial memory (is RUSTFLAGS overriding .cargo/config.toml?)"
        );
    }
}
