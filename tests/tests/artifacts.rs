//! Every guest built by `build.rs` exists and is a component, not a core
//! module.

use iar_tests::artifacts;

/// `\0asm`, then the component-model version (0x0d) and layer (1).
const COMPONENT_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

#[test]
fn every_artifact_is_a_component() {
    assert!(!artifacts::ALL.is_empty(), "no guests were built");
    for (package, path) in artifacts::ALL {
        let bytes = std::fs::read(path).unwrap_or_else(|e| {
            panic!(
                "{package}: cannot read {path}: {e} \
                 (if target/guests was removed, run `cargo clean -p iar-tests`)"
            )
        });
        assert!(
            bytes.starts_with(&COMPONENT_HEADER),
            "{package}: {path} does not start with the component header: {:02x?}",
            &bytes[..bytes.len().min(8)]
        );
    }
}

#[test]
fn the_expected_guests_are_listed() {
    let listed: Vec<&str> = artifacts::ALL.iter().map(|(_, path)| *path).collect();
    for path in [
        artifacts::LABELS,
        artifacts::POD_VOLUMES,
        artifacts::PVC_SNAPSHOT,
        artifacts::HOSTILE,
        artifacts::WRONG_WORLD,
        artifacts::FUTURE_VERSION,
    ] {
        assert!(listed.contains(&path), "{path} is missing from ALL");
        assert!(
            std::path::Path::new(path).is_absolute(),
            "{path} is not absolute"
        );
    }
}
