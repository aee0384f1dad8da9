//! Loading: what is refused before anything runs, and the compile cache.

use crate::support::*;
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
    assert!(message.starts_with("plugin \"candidate\": does not export iar:plugin/item-action@1.0.0 or @1.1.0 or @1.2.0 or @1.3.0 or @1.4.0 or iar:plugin/item-block-action@1.1.0 or @1.2.0 or @1.3.0 or @1.4.0 or iar:plugin/restore-item-action@1.3.0 or @1.4.0 (rule: plugin-world)"), "{message}");
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
        "plugin \"candidate\": built for contract iar:plugin@2.0.0, this host supports iar:plugin@1.0.0, iar:plugin@1.1.0, iar:plugin@1.2.0, iar:plugin@1.3.0, iar:plugin@1.4.0 (rule: contract-version)"
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
    assert_eq!(plugin.version(), "1.3.0");
    for export in [
        "iar:plugin/item-action@1.3.0",
        "iar:plugin/restore-item-action@1.3.0",
    ] {
        assert!(
            plugin.shape().exports.contains(&export.to_string()),
            "{export} in {:?}",
            plugin.shape().exports
        );
    }
    // Built with iar-sdk, whose bindings make wit-component import `host`
    // at the newest compatible version; the contract version is the one of
    // the exports. item_blocks_contract.rs loads a plugin that imports
    // host@1.0.0 exactly.
    assert!(
        plugin
            .shape()
            .imports
            .iter()
            .any(|i| i.starts_with("iar:plugin/host@1.")),
        "{:?}",
        plugin.shape().imports
    );
    assert_eq!(
        plugin.applies_to().included_resources,
        [
            "persistentvolumeclaims",
            "volumesnapshots.snapshot.storage.k8s.io"
        ]
    );
    // It creates its snapshots and lists classes: cluster-write and
    // cluster-list imports, beside 1.3.0 exports. A plugin that writes
    // nothing imports neither. wit-component merges semver-compatible
    // imports into the newest version the SDK's bindings name: iar-sdk
    // binds 1.4.0's `update` and `patch`, so pvc-snapshot's `create` and
    // `delete` arrive as cluster-write@1.4.0 (the functions it calls only),
    // which the host's one definition of cluster-write serves.
    for import in [
        "iar:plugin/cluster-write@1.4.0",
        "iar:plugin/cluster-list@1.2.0",
    ] {
        assert!(
            plugin.shape().imports.iter().any(|i| i == import),
            "{import} in {:?}",
            plugin.shape().imports
        );
    }
    let labels = load(&runtime, artifacts::LABELS, &[]);
    assert!(
        !labels
            .shape()
            .imports
            .iter()
            .any(|i| i.contains("cluster-write") || i.contains("cluster-list")),
        "{:?}",
        labels.shape().imports
    );
}

/// The cache entry a runtime wrote for a component of this digest.
fn cache_entry(dir: &std::path::Path, digest: &str) -> std::path::PathBuf {
    let mut found = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("{digest}-"))
        });
    let path = found.next().expect("a cache entry for the digest");
    assert!(found.next().is_none(), "one entry per digest");
    path
}

/// The labels plugin still does its job: it was not swapped for another.
fn labels_runs_as_labels(runtime: &Runtime) {
    let labels = load(runtime, artifacts::LABELS, &[("labels", "checked=yes")]);
    let out = labels
        .instance(std::sync::Arc::new(iar::NoCluster))
        .execute(&pod("web-0"), &backup(iar::Phase::Backup), &never_seen)
        .expect("labels runs");
    let item = out.item.expect("labels changes the item").into_value();
    assert_eq!(item["metadata"]["labels"]["checked"], "yes");
}

/// A cache directory others can write to is not used at all: the runtime
/// says why, compiles every plugin, and writes nothing there (a file placed
/// there by another user would be native code this process runs).
#[cfg(unix)]
#[test]
fn a_world_writable_cache_dir_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    for _ in 0..2 {
        let runtime = runtime_with_cache(dir.path());
        assert_eq!(runtime.cache_dir(), None);
        let reason = runtime.cache_refused().expect("the refusal is reported");
        assert!(reason.contains("writable by group or others"), "{reason}");
        load(&runtime, artifacts::LABELS, &[]);
        assert_eq!((runtime.compiles(), runtime.cache_hits()), (1, 0));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A missing cache directory is created for the owner only, and entries
/// are written owner-only too.
#[cfg(unix)]
#[test]
fn the_cache_is_created_and_written_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("a/cache");
    let runtime = runtime_with_cache(&dir);
    assert_eq!(runtime.cache_dir(), Some(dir.as_path()));
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    let plugin = load(&runtime, artifacts::LABELS, &[]);
    assert_eq!(mode(&cache_entry(&dir, plugin.digest())), 0o600);
}

/// One flipped byte anywhere in an entry (here in the native code, which
/// wasmtime itself does not check) makes it a miss: the component is
/// recompiled, never run from the damaged file, and works.
#[test]
fn a_cache_entry_with_one_byte_flipped_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let first = runtime_with_cache(dir.path());
    let plugin = load(&first, artifacts::LABELS, &[]);
    let entry = cache_entry(dir.path(), plugin.digest());
    let mut bytes = std::fs::read(&entry).unwrap();
    for at in [bytes.len() / 2, bytes.len() - 1] {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x01;
        std::fs::write(&entry, &flipped).unwrap();
        let runtime = runtime_with_cache(dir.path());
        labels_runs_as_labels(&runtime);
        assert_eq!(
            (runtime.compiles(), runtime.cache_hits()),
            (1, 0),
            "byte {at} of {} flipped",
            bytes.len()
        );
    }
    // Truncated: also a miss.
    bytes.truncate(bytes.len() - 100);
    std::fs::write(&entry, &bytes).unwrap();
    let runtime = runtime_with_cache(dir.path());
    labels_runs_as_labels(&runtime);
    assert_eq!((runtime.compiles(), runtime.cache_hits()), (1, 0));
    // The recompiled entry replaced the damaged one: the next start hits.
    let runtime = runtime_with_cache(dir.path());
    labels_runs_as_labels(&runtime);
    assert_eq!((runtime.compiles(), runtime.cache_hits()), (0, 1));
}

/// An entry copied over from another component's digest (a whole, valid
/// entry, so its own checksum holds) is refused because it records the
/// digest it was compiled from: labels is recompiled and runs as labels,
/// not as the component whose code was swapped in.
#[test]
fn a_cache_entry_copied_from_another_component_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let first = runtime_with_cache(dir.path());
    let labels = load(&first, artifacts::LABELS, &[]);
    let hostile = load(&first, artifacts::HOSTILE, &[]);
    std::fs::copy(
        cache_entry(dir.path(), hostile.digest()),
        cache_entry(dir.path(), labels.digest()),
    )
    .unwrap();
    let runtime = runtime_with_cache(dir.path());
    labels_runs_as_labels(&runtime);
    assert_eq!((runtime.compiles(), runtime.cache_hits()), (1, 0));
}

/// The real hostile plugin with one more core module section appended:
/// `module`, a core module of under 128 bytes written byte by byte.
fn hostile_with_module(module: &[u8]) -> Vec<u8> {
    let mut bytes = std::fs::read(artifacts::HOSTILE).unwrap();
    bytes.push(0x01); // component section: core module
    bytes.push(u8::try_from(module.len()).expect("a one-byte section size"));
    bytes.extend_from_slice(module);
    bytes
}

/// A component whose core module declares a shared memory is refused at
/// load with its own rule: the memory cap is never consulted for shared
/// memories. The component is the real hostile plugin with one extra core
/// module section appended (rustc cannot emit a shared memory for
/// wasm32-wasip2 components, so the module is written here byte by byte:
/// one memory of 1 page, max 1, flags 0x03 = has-max | shared).
#[test]
fn a_component_with_a_shared_memory_is_refused() {
    let bytes = hostile_with_module(b"\0asm\x01\0\0\0\x05\x04\x01\x03\x01\x01");
    let runtime = runtime();
    let err = load_bytes(&runtime, &bytes).unwrap_err();
    assert!(matches!(err, LoadError::SharedMemory { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "plugin \"candidate\": declares a shared memory, which the memory cap cannot bound (rule: shared-memory)"
    );
    // The same component without the extra module loads.
    let plain = std::fs::read(artifacts::HOSTILE).unwrap();
    load_bytes(&runtime, &plain).expect("the hostile plugin itself loads");
}

/// A component whose image (the memory its core modules start with) is
/// larger than its memory cap is refused at load by rule `memory-cap`,
/// before compiling, and nothing is allocated for it: a hostile module
/// declaring a 4 GiB memory, and the real hostile plugin (2 MiB of
/// initial memory) given a 1 MiB cap. The same plugin under its default
/// cap loads.
#[test]
fn an_image_larger_than_its_memory_cap_is_refused_at_load() {
    // One memory of 65,536 pages (4 GiB), no maximum.
    let bytes = hostile_with_module(b"\0asm\x01\0\0\0\x05\x05\x01\x00\x80\x80\x04");
    let runtime = runtime();
    let err = load_bytes(&runtime, &bytes).unwrap_err();
    assert!(matches!(err, LoadError::ImageOverCap { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "plugin \"candidate\": its image starts with 4294967296 bytes of linear memory (its data), over its memory cap of 67108864 bytes, so no instance of it can start (rule: memory-cap); give it limits.memoryBytes for its image and its heap"
    );
    assert_eq!(runtime.compiles(), 0, "refused before compiling");

    let plain = std::fs::read(artifacts::HOSTILE).unwrap();
    let mut settings = PluginSettings::default();
    settings.limits.memory_bytes = 1 << 20;
    let err = Plugin::from_bytes(&runtime, "candidate", &plain, settings).unwrap_err();
    assert!(
        err.to_string().contains(
            "its image starts with 2097152 bytes of linear memory (its data), over its memory cap of 1048576 bytes"
        ),
        "{err}"
    );
    load_bytes(&runtime, &plain).expect("under the default cap it loads");
}
