//! A pod's user, and whoever can write a backup store, against the volume
//! walk and the restore: each test is an attack that worked before the
//! handle-based walk and restore.

use super::test_setup::{SECRET, Setup, setup};
use super::walk::{self, Event};
use super::*;
use sha2::Digest;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::Arc;
use std::time::Duration;

fn request(backup: &str, ns: &str, pvc: &str) -> VolumeRequest {
    VolumeRequest {
        backup: backup.into(),
        backup_uid: String::new(),
        pod: ItemRef::new("", "pods", ns, "p"),
        volume: "v".into(),
        pvc: Some(pvc.into()),
    }
}

/// Every chunk a backup stored, inflated (read off the local store's
/// directory).
async fn stored_chunks(s: &Setup, backup: &str) -> Vec<Vec<u8>> {
    let dir = s.store_dir.join(format!("backups/{backup}/volumes/data"));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .map(|e| gunzip_chunk(&std::fs::read(e.unwrap().path()).unwrap()).unwrap())
        .collect()
}

async fn manifest_of(store: &BackupStore, done: &VolumeBackup) -> Manifest {
    get_json_gz(store, done.manifest_key.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap()
}

async fn back_up(s: &Setup, backup: &str, pvc: &str, limits: VolumeLimits) -> VolumeBackup {
    LocalDirBackupper::new(s.data.clone(), s.store.clone(), 1)
        .with_limits(limits)
        .start(request(backup, "ns", pvc))
        .await
        .finished()
        .await
}

/// Symlinks inside a volume (to a file and a directory outside it, and
/// an absolute one) are backed up as links; what they point to is never
/// read.
#[tokio::test]
async fn links_out_of_a_volume_are_kept_as_links_and_never_read() {
    let s = setup();
    let vol = s.data.join("ns/pvc");
    std::fs::create_dir_all(&vol).unwrap();
    std::os::unix::fs::symlink("../../other-tenant/token", vol.join("file-link")).unwrap();
    std::os::unix::fs::symlink("../../other-tenant", vol.join("mount")).unwrap();
    std::os::unix::fs::symlink(&s.outside, vol.join("absolute")).unwrap();
    let done = back_up(&s, "b1", "pvc", VolumeLimits::default()).await;
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    let m = manifest_of(&s.store, &done).await;
    assert!(
        m.entries.iter().all(|e| e.kind == EntryKind::Symlink),
        "{m:?}"
    );
    assert_eq!(m.entries.len(), 3);
    assert_eq!(done.bytes_done, 0);
    assert!(stored_chunks(&s, "b1").await.is_empty());
}

/// A volume root that is itself a symlink (`ns/pvc -> ../other-tenant`)
/// is refused, not followed.
#[tokio::test]
async fn a_symlinked_volume_root_is_refused() {
    let s = setup();
    std::fs::create_dir_all(s.data.join("ns")).unwrap();
    std::os::unix::fs::symlink(&s.outside, s.data.join("ns/pvc")).unwrap();
    let done = back_up(&s, "b2", "pvc", VolumeLimits::default()).await;
    assert_eq!(done.phase, VolumePhase::Failed);
    let e = done.error.unwrap();
    assert!(e.contains("rule: volume-root-symlink"), "{e}");
    assert!(e.contains("volume v (pvc pvc) of pod ns/p"), "{e}");
    assert!(stored_chunks(&s, "b2").await.is_empty());
}

/// Swaps the file named `victim` for `with` when the walk reaches it,
/// after it was listed and before it is opened: the race a pod's user
/// runs against the agent.
fn swap(victim: PathBuf, with: impl Fn(&Path) + Send + Sync + 'static) -> walk::Seam {
    Arc::new(move |path: &[u8]| {
        if path == b"victim" {
            std::fs::remove_file(&victim).unwrap();
            with(&victim);
        }
    })
}

/// A file swapped for a symlink to another tenant's token between listing
/// and reading is not read through the link: it is recorded as changed.
#[tokio::test]
async fn a_file_swapped_for_a_symlink_is_not_read_through_it() {
    let s = setup();
    let vol = s.data.join("ns/pvc");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("victim"), b"harmless").unwrap();
    let token = s.outside.join("token");
    let limits = VolumeLimits {
        seam: Some(swap(vol.join("victim"), move |p| {
            std::os::unix::fs::symlink(&token, p).unwrap()
        })),
        ..VolumeLimits::default()
    };
    let done = back_up(&s, "b3", "pvc", limits).await;
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    let m = manifest_of(&s.store, &done).await;
    assert!(m.entries.is_empty(), "{:?}", m.entries);
    assert_eq!(m.skipped.len(), 1);
    assert!(
        m.skipped[0].reason.contains("rule: volume-changed"),
        "{:?}",
        m.skipped
    );
    assert!(stored_chunks(&s, "b3").await.iter().all(|c| c != SECRET));
}

/// A file swapped for a FIFO between listing and reading does not block
/// the walk (an `open` for reading would wait for a writer for ever): it
/// is recorded, not read, and the backup completes. A FIFO present from
/// the start is recorded the same way.
#[tokio::test]
async fn a_fifo_never_blocks_the_walk() {
    let s = setup();
    let vol = s.data.join("ns/pvc");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("victim"), b"harmless").unwrap();
    let mkfifo = |p: &Path| {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            p,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap()
    };
    mkfifo(&vol.join("already-a-fifo"));
    let limits = VolumeLimits {
        seam: Some(swap(vol.join("victim"), move |p| mkfifo(p))),
        ..VolumeLimits::default()
    };
    // A guard against a hang (which was the bug), not a speed assertion.
    let done = tokio::time::timeout(Duration::from_secs(120), back_up(&s, "b4", "pvc", limits))
        .await
        .expect("the walk blocked on a FIFO");
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    let m = manifest_of(&s.store, &done).await;
    let reasons: Vec<_> = m
        .skipped
        .iter()
        .map(|s| (s.path.as_str(), s.reason.as_str()))
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[0].0 == "already-a-fifo" && reasons[0].1.contains("rule: not-a-regular-file"));
    assert!(reasons[1].0 == "victim" && reasons[1].1.contains("rule: volume-changed"));
}

/// Two names that differ only by one invalid UTF-8 byte (`l\xfe`, a
/// symlink, and `l\xff`, a directory with a file) stay two entries, and
/// the restore recreates both exactly. Before, both became `l\u{fffd}`.
#[tokio::test]
async fn names_that_are_not_utf8_stay_distinct() {
    let s = setup();
    let vol = s.data.join("ns/pvc");
    std::fs::create_dir_all(&vol).unwrap();
    let fe = vol.join(std::ffi::OsStr::from_bytes(b"l\xfe"));
    let ff = vol.join(std::ffi::OsStr::from_bytes(b"l\xff"));
    std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(b"../t\xfe"), &fe).unwrap();
    std::fs::create_dir(&ff).unwrap();
    std::fs::write(ff.join("f"), b"data").unwrap();
    let done = back_up(&s, "b5", "pvc", VolumeLimits::default()).await;
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    let m = manifest_of(&s.store, &done).await;
    let paths: Vec<_> = m.entries.iter().map(|e| e.path_bytes().unwrap()).collect();
    assert_eq!(
        paths,
        [b"l\xfe".to_vec(), b"l\xff".to_vec(), b"l\xff/f".to_vec()]
    );
    let out = tempfile::tempdir().unwrap();
    restore_volume(
        &s.store,
        "b5",
        done.manifest_key.as_deref().unwrap(),
        out.path(),
        &RestoreOptions::default(),
    )
    .await
    .unwrap();
    let fe = out.path().join(std::ffi::OsStr::from_bytes(b"l\xfe"));
    let ff = out.path().join(std::ffi::OsStr::from_bytes(b"l\xff"));
    assert_eq!(
        std::fs::read_link(fe).unwrap().as_os_str().as_bytes(),
        b"../t\xfe"
    );
    assert_eq!(std::fs::read(ff.join("f")).unwrap(), b"data");
}

/// A sparse file of 8 EiB (tmpfs allows it) is stored as its data and
/// its holes: a few bytes read and stored, not exabytes of zeros, and the
/// restore gives back a sparse file of the same length and data.
#[tokio::test]
async fn a_sparse_file_of_exabytes_is_stored_as_holes() {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let store = BackupStore::open(store_dir.path().to_str().unwrap()).unwrap();
    let vol = base.path().join("ns/pvc");
    std::fs::create_dir_all(&vol).unwrap();
    let f = std::fs::File::create(vol.join("huge")).unwrap();
    // As large as this file system allows, up to 8 EiB.
    let len = [8u64 << 60, 1 << 50, 1 << 44, 1 << 40]
        .into_iter()
        .find(|&l| f.set_len(l).is_ok())
        .unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"head", 0).unwrap();
    f.write_all_at(b"middle", len / 2).unwrap();
    drop(f);
    let done = LocalDirBackupper::new(base.path().to_path_buf(), store.clone(), 1)
        .start(request("b6", "ns", "pvc"))
        .await
        .finished()
        .await;
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    assert!(done.bytes_done < 1 << 24, "read {} bytes", done.bytes_done);
    let m: Manifest = get_json_gz(&store, done.manifest_key.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    let e = &m.entries[0];
    assert_eq!((e.size, e.extents.len()), (len, 2), "{e:?}");
    let out = tempfile::tempdir_in(base.path()).unwrap();
    restore_volume(
        &store,
        "b6",
        done.manifest_key.as_deref().unwrap(),
        out.path(),
        &RestoreOptions::default(),
    )
    .await
    .unwrap();
    let back = std::fs::File::open(out.path().join("huge")).unwrap();
    let meta = back.metadata().unwrap();
    assert_eq!(meta.len(), len);
    assert!(meta.blocks() * 512 < 1 << 24, "{} blocks", meta.blocks());
    let mut buf = [0u8; 6];
    back.read_exact_at(&mut buf, len / 2).unwrap();
    assert_eq!(&buf, b"middle");
}

/// A read that never ends (here: held in the walk by the seam, as a hung
/// network file system would) fails the volume at `--fs-backup-timeout`
/// with the rule named, and frees its permit: the next volume, waiting
/// for the only permit, completes.
#[tokio::test]
async fn a_volume_that_never_ends_fails_at_its_timeout_and_frees_its_permit() {
    let s = setup();
    for pvc in ["stuck", "fine"] {
        std::fs::create_dir_all(s.data.join("ns").join(pvc)).unwrap();
        std::fs::write(s.data.join("ns").join(pvc).join("victim"), b"x").unwrap();
    }
    let (release, held) = std::sync::mpsc::channel::<()>();
    let held = std::sync::Mutex::new(held);
    let hang: walk::Seam = Arc::new(move |path: &[u8]| {
        if path == b"victim" {
            // Until the test ends (the sender is dropped).
            let _ = held.lock().unwrap().recv();
        }
    });
    let b = LocalDirBackupper::new(s.data.clone(), s.store.clone(), 1).with_limits(VolumeLimits {
        timeout: Duration::from_millis(300),
        seam: Some(hang),
        ..VolumeLimits::default()
    });
    let stuck = b.start(request("b7", "ns", "stuck")).await;
    let stuck = stuck.finished().await;
    assert_eq!(stuck.phase, VolumePhase::Failed);
    assert!(
        stuck
            .error
            .as_deref()
            .unwrap()
            .contains("rule: fs-backup-timeout"),
        "{stuck:?}"
    );
    drop(release);
    let fine = b.start(request("b7", "ns", "fine")).await.finished().await;
    assert_eq!(fine.phase, VolumePhase::Completed, "{:?}", fine.error);
}

/// Writes `m` as the manifest of backup `b` and restores it into a fresh
/// directory inside a parent that also holds `outside/`.
async fn restore_crafted(
    s: &Setup,
    m: &Manifest,
    chunks: &[&[u8]],
    options: &RestoreOptions,
) -> (Result<Manifest, String>, tempfile::TempDir) {
    for c in chunks {
        let sha = hex::encode(sha2::Sha256::digest(c));
        s.store
            .put_key(&data_key("crafted", &sha), gzip(c).into())
            .await
            .unwrap();
    }
    put_json_gz(&s.store, "backups/crafted/m.json.gz", m)
        .await
        .unwrap();
    let to = tempfile::tempdir_in(&s.data).unwrap();
    let r = restore_volume(
        &s.store,
        "crafted",
        "backups/crafted/m.json.gz",
        to.path(),
        options,
    )
    .await;
    (r, to)
}

fn manifest(entries: Vec<ManifestEntry>) -> Manifest {
    Manifest {
        backup: "crafted".into(),
        pod_namespace: "ns".into(),
        pod_name: "p".into(),
        volume: "v".into(),
        pvc: None,
        entries,
        skipped: Vec::new(),
    }
}

fn dir(path: &str) -> ManifestEntry {
    ManifestEntry {
        path: path.into(),
        kind: EntryKind::Dir,
        mode: 0o755,
        ..ManifestEntry::default()
    }
}

fn link(path: &str, target: &str) -> ManifestEntry {
    ManifestEntry {
        path: path.into(),
        kind: EntryKind::Symlink,
        mode: 0o777,
        target: Some(target.into()),
        ..ManifestEntry::default()
    }
}

fn file(path: &str, content: &[u8], mode: u32) -> ManifestEntry {
    let sha = hex::encode(sha2::Sha256::digest(content));
    ManifestEntry {
        path: path.into(),
        kind: EntryKind::File,
        mode,
        size: content.len() as u64,
        digest: sha.clone(),
        chunks: if content.is_empty() {
            vec![]
        } else {
            vec![sha]
        },
        ..ManifestEntry::default()
    }
}

/// Crafted stores (every digest correct) that wrote outside `--to`
/// before: each is refused with its rule before anything is written.
#[tokio::test]
async fn a_crafted_manifest_cannot_write_outside_the_target() {
    let s = setup();
    let outside = s.outside.to_str().unwrap().to_string();
    let cases: Vec<(Vec<ManifestEntry>, &str)> = vec![
        // A link to outside, then a file "under" it.
        (
            vec![link("d", &outside), file("d/planted", b"x", 0o644)],
            "path-under-symlink",
        ),
        (vec![dir("a"), dir("a")], "duplicate-path"),
        (vec![file("../planted", b"x", 0o644)], "unsafe-path"),
        (vec![file("/planted", b"x", 0o644)], "unsafe-path"),
        (vec![file("a//b", b"x", 0o644)], "unsafe-path"),
        (
            vec![file("nodir/planted", b"x", 0o644)],
            "parent-not-listed",
        ),
        (
            vec![file("f", b"x", 0o644), file("f/planted", b"x", 0o644)],
            "path-under-file",
        ),
        // A 1 EiB file claimed with one chunk: refused before any
        // allocation (before, the restore aborted allocating it).
        (
            vec![ManifestEntry {
                size: 1 << 60,
                ..file("big", b"x", 0o644)
            }],
            "manifest-inconsistent",
        ),
        (
            vec![ManifestEntry {
                chunks: vec!["../../../escape".into()],
                ..file("k", b"x", 0o644)
            }],
            "manifest-inconsistent",
        ),
    ];
    for (entries, rule) in cases {
        let (r, to) = restore_crafted(
            &s,
            &manifest(entries.clone()),
            &[b"x"],
            &RestoreOptions::default(),
        )
        .await;
        let e = r.unwrap_err();
        assert!(e.contains(&format!("rule: {rule}")), "{entries:?}: {e}");
        assert_eq!(
            std::fs::read_dir(to.path()).unwrap().count(),
            0,
            "{entries:?} wrote something"
        );
        assert_eq!(
            std::fs::read_dir(&s.outside).unwrap().count(),
            1,
            "{entries:?} wrote outside"
        );
    }
    assert!(!s.data.join("planted").exists());
}

/// A link already in the target (`--to` not as empty as it looked, or
/// made by a racing user) is never written through.
#[tokio::test]
async fn a_link_found_in_the_target_is_not_followed() {
    let s = setup();
    let m = manifest(vec![dir("d"), file("d/planted", b"x", 0o644)]);
    for c in [b"x".as_slice()] {
        let sha = hex::encode(sha2::Sha256::digest(c));
        s.store
            .put_key(&data_key("crafted", &sha), gzip(c).into())
            .await
            .unwrap();
    }
    put_json_gz(&s.store, "backups/crafted/m.json.gz", &m)
        .await
        .unwrap();
    let to = tempfile::tempdir_in(&s.data).unwrap();
    std::os::unix::fs::symlink(&s.outside, to.path().join("d")).unwrap();
    let e = restore_volume(
        &s.store,
        "crafted",
        "backups/crafted/m.json.gz",
        to.path(),
        &RestoreOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(
        e.contains("rule: target-exists") || e.contains("rule: path-under-symlink"),
        "{e}"
    );
    assert!(!s.outside.join("planted").exists());
}

/// A chunk that inflates past the chunk size (a gzip bomb) is refused.
#[tokio::test]
async fn a_gzip_bomb_chunk_is_refused() {
    let s = setup();
    let zeros = vec![0u8; CHUNK * 4];
    let sha = hex::encode(sha2::Sha256::digest(&zeros));
    s.store
        .put_key(&data_key("crafted", &sha), gzip(&zeros).into())
        .await
        .unwrap();
    let entry = ManifestEntry {
        path: "f".into(),
        kind: EntryKind::File,
        mode: 0o644,
        size: CHUNK as u64,
        digest: sha.clone(),
        chunks: vec![sha],
        ..ManifestEntry::default()
    };
    let (r, _to) =
        restore_crafted(&s, &manifest(vec![entry]), &[], &RestoreOptions::default()).await;
    let e = r.unwrap_err();
    assert!(e.contains("rule: decompressed-size"), "{e}");
}

/// Setuid, setgid and sticky bits are dropped unless owners are restored
/// too; with `--preserve-owner` (root) owner and bits come back.
#[tokio::test]
async fn setuid_bits_need_their_owner() {
    let s = setup();
    let mut f = file("tool", b"#!/bin/sh\n", 0o6755);
    (f.uid, f.gid) = (Some(1234), Some(5678));
    let m = manifest(vec![f]);
    let (r, to) = restore_crafted(&s, &m, &[b"#!/bin/sh\n"], &RestoreOptions::default()).await;
    r.unwrap();
    let meta = std::fs::metadata(to.path().join("tool")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
    if rustix::process::geteuid().is_root() {
        let (r, to) = restore_crafted(
            &s,
            &m,
            &[],
            &RestoreOptions {
                preserve_owner: true,
                ..RestoreOptions::default()
            },
        )
        .await;
        r.unwrap();
        let meta = std::fs::metadata(to.path().join("tool")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o6755);
        assert_eq!((meta.uid(), meta.gid()), (1234, 5678));
    }
}

/// The walk itself, driven directly: a directory swapped for a symlink
/// after it was listed is not descended into.
#[test]
fn a_directory_swapped_for_a_link_is_not_descended() {
    let s = setup();
    let vol = s.data.join("ns/pvc");
    std::fs::create_dir_all(vol.join("sub")).unwrap();
    std::fs::write(vol.join("sub/victim"), b"x").unwrap();
    let root = VolumeRoot::new(&s.data, &["ns", "pvc"]).open().unwrap();
    let (sub, outside) = (vol.join("sub"), s.outside.clone());
    let mut events = Vec::new();
    let mut swapped = false;
    walk::walk(&root, None, &mut |e| {
        if let Event::Entry(d) = &e
            && d.path == "sub"
            && !swapped
        {
            std::fs::remove_dir_all(&sub).unwrap();
            std::os::unix::fs::symlink(&outside, &sub).unwrap();
            swapped = true;
        }
        events.push(e);
        true
    })
    .unwrap_or_else(|_| panic!("walk failed"));
    let read_token = events
        .iter()
        .any(|e| matches!(e, Event::FileStart(f) if f.path.ends_with("token")));
    assert!(!read_token);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Skipped(s) if s.reason.contains("rule: volume-changed")))
    );
}

/// The fence is asked before the manifest is written: a backup that ended
/// while its volume was read gets no manifest, and the volume fails with
/// the fence's reason.
#[tokio::test]
async fn a_fenced_backup_gets_no_manifest() {
    let s = setup();
    let vol = s.data.join("ns/pvc");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("f"), b"data").unwrap();
    let fence: Fence = Arc::new(|| {
        Box::pin(async { Err("backup b9 is Completed (rule: backup-fence)".to_string()) })
    });
    let limits = VolumeLimits {
        fence: Some(fence),
        ..VolumeLimits::default()
    };
    let done = back_up(&s, "b9", "pvc", limits).await;
    assert_eq!(done.phase, VolumePhase::Failed);
    assert!(
        done.error
            .as_deref()
            .unwrap()
            .contains("rule: backup-fence"),
        "{done:?}"
    );
    assert!(done.manifest_key.is_none());
    assert!(!s.store_dir.join("backups/b9/volumes/manifests").exists());
}
