use super::*;
use crate::runtime::{Runtime, RuntimeConfig};
use std::fs::File;
use wasmtime::Config;

/// A component holding nothing but a custom section with the byte `n`:
/// each `n` is another component (another digest), compiled at once.
fn component(n: u8) -> (Vec<u8>, String) {
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    bytes.extend_from_slice(&[0x00, 0x03, 0x01, b'n', n]);
    let digest = hex::encode(Sha256::digest(&bytes));
    (bytes, digest)
}

fn runtime(dir: &Path, max_bytes: u64) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.to_path_buf()),
        cache_max_bytes: max_bytes,
        pooling: false,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

/// (compiles, cache hits) so far.
fn counts(runtime: &Runtime) -> (usize, usize) {
    (runtime.compiles(), runtime.cache_hits())
}

fn entry_path(runtime: &Runtime, digest: &str) -> PathBuf {
    runtime.0.cache.as_ref().unwrap().path(digest)
}

fn set_mtime(path: &Path, at: SystemTime) {
    File::open(path).unwrap().set_modified(at).unwrap();
}

fn ago(now: SystemTime, secs: u64) -> SystemTime {
    now - Duration::from_secs(secs)
}

/// Filled past its bound, the cache keeps what was used last: an entry
/// used again (a hit marks it) outlives older ones, and each new entry
/// pushes out the least recently used.
#[test]
fn the_least_recently_used_entries_go_when_the_cache_is_full() {
    let dir = tempfile::tempdir().unwrap();
    let c: Vec<_> = (0..5).map(component).collect();
    let unbounded = runtime(dir.path(), u64::MAX);
    for (bytes, digest) in &c[..3] {
        unbounded.compile(bytes, digest).unwrap();
    }
    assert_eq!(counts(&unbounded), (3, 0));
    let path = |i: usize| entry_path(&unbounded, &c[i].1);
    let one = std::fs::metadata(path(0)).unwrap().len();
    // Used minutes ago, 0 first, then 1, then 2.
    let now = SystemTime::now();
    for i in 0..3 {
        set_mtime(&path(i), ago(now, 300 - 60 * i as u64));
    }

    // Room for three entries and a half.
    let bounded = runtime(dir.path(), 3 * one + one / 2);
    // 0 is used again: now it is the most recent.
    bounded.compile(&c[0].0, &c[0].1).unwrap();
    assert_eq!(counts(&bounded), (0, 1));
    // A fourth entry: 1, the least recently used, goes.
    bounded.compile(&c[3].0, &c[3].1).unwrap();
    assert_eq!(counts(&bounded), (1, 1));
    let present = || (0..5).filter(|i| path(*i).exists()).collect::<Vec<_>>();
    assert_eq!(present(), [0, 2, 3]);
    // A fifth: then 2.
    bounded.compile(&c[4].0, &c[4].1).unwrap();
    assert_eq!(counts(&bounded), (2, 1));
    assert_eq!(present(), [0, 3, 4]);
    // The evicted one is compiled again; the kept ones load.
    let again = runtime(dir.path(), u64::MAX);
    for i in [0, 3, 4] {
        again.compile(&c[i].0, &c[i].1).unwrap();
    }
    again.compile(&c[1].0, &c[1].1).unwrap();
    assert_eq!(counts(&again), (1, 3));
}

/// A directory shared with other files (`~/.cache/iar` holds build
/// caches and locks): eviction removes entries only, oldest first (the
/// ones named the old way, unused since, among them), and temporary files
/// left by a dead writer; nothing else, and nothing a symlink points to.
#[test]
fn eviction_removes_only_entries_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let now = SystemTime::now();
    let write = |name: &str, len: usize, at: SystemTime| {
        std::fs::write(d.join(name), vec![0u8; len]).unwrap();
        set_mtime(&d.join(name), at);
    };
    let engine = "e".repeat(64);
    let entries: Vec<String> = (0..6)
        .map(|i| format!("{}-{engine}.cwasm", format!("{i:x}").repeat(64)))
        .collect();
    for (i, name) in entries.iter().enumerate() {
        write(name, 1000, ago(now, 600 - 60 * i as u64));
    }
    let old_way = format!("{}-{}.cwasm", "a".repeat(64), "b".repeat(16));
    write(&old_way, 1000, ago(now, 7200));
    let foreign = [
        "node.lock".to_string(),
        "notes.cwasm".into(),
        format!("{}.cwasm", "c".repeat(64)),
        format!("{}-{}.cwasm", "C".repeat(64), "D".repeat(64)),
        format!("{}-{engine}.cwasm.bak", "d".repeat(64)),
    ];
    for name in &foreign {
        write(name, 5000, ago(now, 9000));
    }
    // A directory and a symlink named like entries.
    let dir_like = format!("{}-{engine}.cwasm", "7".repeat(64));
    std::fs::create_dir(d.join(&dir_like)).unwrap();
    let link = format!("{}-{engine}.cwasm", "8".repeat(64));
    std::os::unix::fs::symlink(d.join("node.lock"), d.join(&link)).unwrap();
    let stale_temp = format!("{TEMP_PREFIX}dead.tmp");
    let live_temp = format!("{TEMP_PREFIX}live.tmp");
    write(&stale_temp, 1000, ago(now, 2 * 3600));
    write(&live_temp, 1000, ago(now, 60));

    let evicted = evict(d, 3000, now);
    assert_eq!(
        evicted,
        Evicted {
            removed: 4,
            removed_bytes: 4000,
            kept_bytes: 3000
        }
    );
    let exists = |name: &str| d.join(name).symlink_metadata().is_ok();
    assert!(!exists(&old_way));
    for (i, name) in entries.iter().enumerate() {
        assert_eq!(exists(name), i >= 3, "entry {i}");
    }
    for name in foreign.iter().chain([&dir_like, &link, &live_temp]) {
        assert!(exists(name), "{name} is not an entry");
    }
    assert!(!exists(&stale_temp));
    // Within the bound: nothing more goes.
    assert_eq!(evict(d, 3000, now).removed, 0);
}

/// Processes sharing the directory evict at once: each takes a file
/// another removed first as gone, every file is removed once, and exactly
/// the most recent entries within the bound are left.
#[test]
fn concurrent_evictions_tolerate_files_vanishing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let now = SystemTime::now();
    let names: Vec<String> = (0..60u32)
        .map(|i| format!("{:064x}-{}.cwasm", i, "f".repeat(64)))
        .collect();
    for (i, name) in names.iter().enumerate() {
        std::fs::write(d.join(name), [0u8; 100]).unwrap();
        set_mtime(&d.join(name), ago(now, 1000 - i as u64));
    }
    let removed: usize = std::thread::scope(|s| {
        let evictions: Vec<_> = (0..8).map(|_| s.spawn(|| evict(d, 1000, now))).collect();
        evictions
            .into_iter()
            .map(|e| e.join().unwrap().removed)
            .sum()
    });
    assert_eq!(removed, 50);
    for (i, name) in names.iter().enumerate() {
        assert_eq!(d.join(name).exists(), i >= 50, "entry {i}");
    }
    // Marking an entry used after another process evicted it is no error.
    touch(&d.join(&names[0]), now);
}

/// An entry named as before (its engine key a `DefaultHasher` of the
/// compatibility hash) is never loaded, even a whole one for this very
/// engine: the component is compiled, and the old file, unused, is the
/// first to go.
#[test]
fn an_entry_keyed_the_old_way_is_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, digest) = component(7);
    let first = runtime(dir.path(), u64::MAX);
    first.compile(&bytes, &digest).unwrap();
    let new_way = entry_path(&first, &digest);
    let one = std::fs::metadata(&new_way).unwrap().len();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    first.engine().precompile_compatibility_hash().hash(&mut h);
    let old_way = dir
        .path()
        .join(format!("{digest}-{:016x}.cwasm", h.finish()));
    std::fs::rename(&new_way, &old_way).unwrap();
    set_mtime(&old_way, ago(SystemTime::now(), 3600));

    let second = runtime(dir.path(), one + one / 2);
    second.compile(&bytes, &digest).unwrap();
    assert_eq!(counts(&second), (1, 0));
    assert!(new_way.exists());
    assert!(
        !old_way.exists(),
        "evicted: over the bound and least recently used"
    );
}

/// What a damaged or foreign entry meets: iar's checksum refuses a
/// truncated file and a flipped byte (wasmtime does not check its native
/// code); wasmtime refuses what is sealed whole but is not its own
/// (garbage, a truncated artifact, code compiled by an engine configured
/// otherwise). Each time the component is compiled, the entry replaced,
/// and the next start loads it.
#[test]
fn a_damaged_or_foreign_entry_is_not_trusted_and_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, digest) = component(9);
    let first = runtime(dir.path(), u64::MAX);
    first.compile(&bytes, &digest).unwrap();
    let path = entry_path(&first, &digest);
    let good = std::fs::read(&path).unwrap();
    let native = entry::open(&good, &digest).unwrap().to_vec();
    // The runtime's engine settings but one: no epoch interruption (so
    // its code would never stop at a deadline).
    let mut other = Config::new();
    other
        .wasm_component_model(true)
        .max_wasm_stack(RuntimeConfig::default().max_wasm_stack)
        .wasm_features(crate::runtime::DISABLED_FEATURES, false)
        .cranelift_opt_level(wasmtime::OptLevel::Speed);
    let other = Engine::new(&other).unwrap();
    let foreign = Component::new(&other, &bytes).unwrap().serialize().unwrap();

    let mut flipped = good.clone();
    let at = good.len() - native.len() / 2;
    flipped[at] ^= 0x01;
    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        ("truncated", good[..good.len() / 2].to_vec(), None),
        ("one byte flipped", flipped, None),
        (
            "sealed garbage",
            entry::seal(b"not a compiled component", &digest).unwrap(),
            Some("failed to parse precompiled artifact as an ELF"),
        ),
        (
            "sealed, truncated artifact",
            entry::seal(&native[..native.len() / 2], &digest).unwrap(),
            Some(""),
        ),
        (
            "another engine's artifact",
            entry::seal(&foreign, &digest).unwrap(),
            Some("without epoch interruption"),
        ),
    ];
    for (case, file, wasmtime_says) in cases {
        // Which check refuses it.
        match (entry::open(&file, &digest), wasmtime_says) {
            (Err(_), None) => {}
            (Ok(native), Some(says)) => {
                // SAFETY: wasmtime parses and checks the artifact before
                // running anything; this one is refused there.
                let err = unsafe { Component::deserialize(first.engine(), native) }
                    .err()
                    .unwrap_or_else(|| panic!("{case}: wasmtime accepted it"));
                assert!(format!("{err:#}").contains(says), "{case}: {err:#}");
            }
            (opened, _) => panic!("{case}: iar's check said {:?}", opened.map(|_| ())),
        }
        std::fs::write(&path, &file).unwrap();
        let after = runtime(dir.path(), u64::MAX);
        after.compile(&bytes, &digest).unwrap();
        assert_eq!(counts(&after), (1, 0), "{case}");
        let next = runtime(dir.path(), u64::MAX);
        next.compile(&bytes, &digest).unwrap();
        assert_eq!(counts(&next), (0, 1), "{case}: the entry was replaced");
    }
}

/// Names are sha256s in hex: the same for engines configured alike,
/// another for an engine configured otherwise, even where wasmtime would
/// load the other's code (it accepts any optimisation level; the key does
/// not, so an unoptimised artifact is never run by an optimising engine).
#[test]
fn entries_are_named_by_sha256() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (runtime(dir.path(), 1), runtime(dir.path(), 1));
    let key = engine_key(a.engine());
    assert!(is_hex(&key, 64), "{key}");
    assert_eq!(key, engine_key(b.engine()));
    let mut other = Config::new();
    other.cranelift_opt_level(wasmtime::OptLevel::None);
    assert_ne!(key, engine_key(&Engine::new(&other).unwrap()));
    let (_, digest) = component(1);
    let path = entry_path(&a, &digest);
    let name = path.file_name().unwrap().to_str().unwrap();
    assert_eq!(name, format!("{digest}-{key}.cwasm"));
    assert!(is_entry_name(name));
    assert!(is_entry_name(&format!("{digest}-{}.cwasm", "0".repeat(16))));
    assert!(!is_entry_name(&format!("{digest}.cwasm")));
    assert!(!is_entry_name(&format!(
        "{digest}-{}.cwasm",
        "0".repeat(15)
    )));
}

#[test]
fn the_bound_reads_as_a_size() {
    assert_eq!(cache_max_bytes_from(None), Ok(1 << 30));
    assert_eq!(cache_max_bytes_from(Some("512MiB")), Ok(512 << 20));
    assert_eq!(cache_max_bytes_from(Some("0")), Ok(0));
    let err = cache_max_bytes_from(Some("lots")).unwrap_err().to_string();
    assert!(err.starts_with("IAR_CACHE_MAX_BYTES: "), "{err}");
}

/// An entry opens only for the digest it was sealed for, whole.
#[test]
fn cache_entries_check_digest_and_checksum() {
    let digest = "ab".repeat(32);
    let other = "cd".repeat(32);
    let sealed = entry::seal(b"native code", &digest).unwrap();
    assert_eq!(entry::open(&sealed, &digest).unwrap(), b"native code");
    let err = entry::open(&sealed, &other).unwrap_err().to_string();
    assert!(err.contains("compiled from component abab"), "{err}");
    for at in [0, 20, 60, sealed.len() - 1] {
        let mut bad = sealed.clone();
        bad[at] ^= 0x80;
        assert!(entry::open(&bad, &digest).is_err(), "byte {at}");
    }
    assert!(entry::open(&sealed[..sealed.len() - 1], &digest).is_err());
    assert!(entry::open(&sealed[..10], &digest).is_err());
}
