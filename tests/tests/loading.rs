//! Loading: what is refused before anything runs, and the compile cache.

mod common;

use common::*;
use iar::{LoadError, Plugin, PluginSettings, Runtime, RuntimeConfig};

fn load_bytes(runtime: &Runtime, bytes: &[u8]) -> Result<Plugin, LoadError> {
    Plugin::from_bytes(runtime, "candidate", bytes, PluginSettings::default())
}

#[test]
fn a_component_of_another_world_is_refused_naming_what_is_missing() {
    let runtime = runtime();
    let bytes = std::fs::read(artifacts::WRONG_WORLD).unwrap();
    let err = load_bytes(&runtime, &bytes).unwrap_err();
    assert!(matches!(err, LoadError::WrongWorld { .. }), "{err}");
    let message = err.to_string();
    assert!(message.starts_with("plugin \"candidate\": does not export iar:plugin/item-action@1.0.0 (rule: plugin-world)"), "{message}");
    assert!(
        message.contains("wasi:cli/run@0.2"),
        "names what it does export: {message}"
    );
}

#[test]
fn an_unsupported_contract_version_is_refused_naming_the_supported_ones() {
    let runtime = runtime();
    let bytes = std::fs::read(artifacts::FUTURE_VERSION).unwrap();
    let err = load_bytes(&runtime, &bytes).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin \"candidate\": built for contract iar:plugin@2.0.0, this host supports iar:plugin@1.0.0 (rule: contract-version)"
    );
}

#[test]
fn garbage_is_refused_before_compiling() {
    let runtime = runtime();
    let cases: [(&str, Vec<u8>, &str); 3] = [
        (
            "text",
            b"#!/bin/sh\necho hi\n".to_vec(),
            "it is not a WebAssembly component",
        ),
        (
            "core module",
            b"\0asm\x01\0\0\0".to_vec(),
            "it is a core wasm module, not a component",
        ),
        (
            "truncated",
            std::fs::read(artifacts::LABELS).unwrap()[..4096].to_vec(),
            "malformed component",
        ),
    ];
    for (what, bytes, expected) in cases {
        let err = load_bytes(&runtime, &bytes).unwrap_err();
        assert!(matches!(err, LoadError::Invalid { .. }), "{what}: {err}");
        assert!(err.to_string().contains(expected), "{what}: {err}");
        assert!(
            err.to_string().ends_with("(rule: valid-component)"),
            "{what}: {err}"
        );
    }
    assert_eq!(
        runtime.compiles(),
        0,
        "nothing invalid reached the compiler"
    );
}

#[test]
fn a_missing_file_names_the_plugin_and_path() {
    let runtime = runtime();
    let err = Plugin::from_file(
        &runtime,
        "/nonexistent/thing.wasm".as_ref(),
        PluginSettings::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("plugin \"thing\": cannot read /nonexistent/thing.wasm: "),
        "{err}"
    );
}

#[test]
fn the_second_load_comes_from_the_cache_without_compiling() {
    let dir = tempfile::tempdir().unwrap();
    let config = || RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        ..RuntimeConfig::default()
    };

    let first = Runtime::new(config()).unwrap();
    let plugin = load(&first, artifacts::LABELS, &[]);
    assert_eq!((first.compiles(), first.cache_hits()), (1, 0));

    // A new runtime (a restart) finds the compiled component on disk.
    let second = Runtime::new(config()).unwrap();
    let again = load(&second, artifacts::LABELS, &[]);
    assert_eq!((second.compiles(), second.cache_hits()), (0, 1));
    assert_eq!(plugin.digest(), again.digest());

    // A corrupt cache entry is recompiled, not trusted.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::write(entry.unwrap().path(), b"not a compiled component").unwrap();
    }
    let third = Runtime::new(config()).unwrap();
    load(&third, artifacts::LABELS, &[]);
    assert_eq!((third.compiles(), third.cache_hits()), (1, 0));
}

#[test]
fn the_contract_version_is_read_from_the_component() {
    let runtime = runtime();
    let plugin = load(&runtime, artifacts::PVC_SNAPSHOT, &[]);
    assert_eq!(plugin.version(), "1.0.0");
    assert!(
        plugin
            .shape()
            .exports
            .contains(&"iar:plugin/item-action@1.0.0".to_string())
    );
    assert!(
        plugin
            .shape()
            .imports
            .contains(&"iar:plugin/host@1.0.0".to_string())
    );
    assert_eq!(
        plugin.applies_to().included_resources,
        ["persistentvolumeclaims"]
    );
}
