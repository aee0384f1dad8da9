//! A volume manifest read from a store and restored (`iar volume
//! restore`): whoever can write a store can craft one. The input is the
//! manifest's JSON.
//!
//! Properties: the planner never panics; what it accepts has only plain,
//! relative, distinct paths, each under a directory listed before it, and
//! no setuid/setgid/sticky bit without the owner it was set for; and the
//! restore itself (whatever the planner and the chunks say) writes
//! nothing outside its target: beside the target, only the sentinel is
//! there afterwards, unchanged.

#![no_main]

use iar::backup::volumes::{EntryKind, Manifest, RestoreOptions, plan_restore, restore_volume};
use iar_fuzz::{block_on, gzip, memory_store};
use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;
use std::path::Path;

fn check_plan(manifest: &Manifest) {
    let Ok(steps) = plan_restore(manifest, &RestoreOptions::default()) else {
        return;
    };
    let mut kinds: HashMap<Vec<Vec<u8>>, EntryKind> = HashMap::new();
    for step in &steps {
        for c in &step.components {
            assert!(
                !c.is_empty() && c != b"." && c != b".." && !c.contains(&0) && !c.contains(&b'/')
            );
        }
        let (_, parents) = step.components.split_last().expect("a path has a name");
        if !parents.is_empty() {
            assert_eq!(
                kinds.get(parents),
                Some(&EntryKind::Dir),
                "{:?}",
                step.components
            );
        }
        assert_eq!(step.mode & 0o7000, 0, "special bits without an owner");
        assert!(
            kinds.insert(step.components.clone(), step.kind).is_none(),
            "a path twice"
        );
    }
}

/// Everything under `dir`, without following links.
fn listing(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let meta = std::fs::symlink_metadata(&p).unwrap();
        out.push(p.clone());
        if meta.is_dir() {
            listing(&p, out);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(manifest) = serde_json::from_slice::<Manifest>(data) else {
        return;
    };
    check_plan(&manifest);
    let base = tempfile::tempdir().expect("a scratch directory");
    let (target, sentinel) = (base.path().join("target"), base.path().join("sentinel"));
    std::fs::create_dir(&target).unwrap();
    std::fs::write(&sentinel, b"untouched").unwrap();
    let store = memory_store();
    let key = "backups/fuzzed/volumes/manifests/ns/p/v.json.gz";
    block_on(store.put_key(key, gzip(data).into())).unwrap();
    let _ = block_on(restore_volume(
        &store,
        "fuzzed",
        key,
        &target,
        &RestoreOptions::default(),
    ));
    let mut all = Vec::new();
    listing(base.path(), &mut all);
    for p in all {
        assert!(
            p == sentinel || p.starts_with(&target),
            "written outside the target: {p:?}"
        );
    }
    assert_eq!(std::fs::read(&sentinel).unwrap(), b"untouched");
});
