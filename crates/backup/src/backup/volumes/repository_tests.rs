//! Volume backups into a namespace's restic repository (rustic_core), on
//! a local store: incremental, restorable, password-bound, checked,
//! pruned, and as safe against a pod's user as the chunk format.

use super::test_setup::{SECRET, Setup, setup};
use super::*;
use iar_tests::fixtures::noise;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

pub(super) fn password(p: &str) -> iar_repository::Password {
    iar_repository::Password::new(p).unwrap()
}

pub(super) fn limits(pw: &str) -> VolumeLimits {
    VolumeLimits {
        repository: Some(password(pw)),
        ..VolumeLimits::default()
    }
}

pub(super) fn request(backup: &str) -> VolumeRequest {
    VolumeRequest {
        backup: backup.into(),
        backup_uid: String::new(),
        pod: ItemRef::new("", "pods", "shop", "db-0"),
        volume: "data".into(),
        pvc: Some("db-data".into()),
    }
}

pub(super) async fn back_up(s: &Setup, backup: &str, limits: VolumeLimits) -> VolumeBackup {
    LocalDirBackupper::new(s.data.clone(), s.store.clone(), 1)
        .with_limits(limits)
        .start(request(backup))
        .await
        .finished()
        .await
}

/// [`back_up`] into the repository, with `seam` run between each file's
/// listing and its open.
pub(super) async fn back_up_seamed(s: &Setup, backup: &str, seam: walk::Seam) -> VolumeBackup {
    let limits = VolumeLimits {
        seam: Some(seam),
        ..limits("pw")
    };
    back_up(s, backup, limits).await
}

/// Every file and link under `dir`: relative path -> content or target.
pub(super) fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.insert(rel, format!("-> {}", t.display()).into_bytes());
            } else if meta.is_dir() {
                out.insert(rel, b"<dir>".to_vec());
                stack.push(p);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// Bytes under the store's `restic/` prefix.
fn repository_bytes(s: &Setup) -> u64 {
    fn size(p: &Path) -> u64 {
        std::fs::read_dir(p).map_or(0, |entries| {
            entries
                .map(|e| {
                    let e = e.unwrap();
                    let m = e.metadata().unwrap();
                    if m.is_dir() { size(&e.path()) } else { m.len() }
                })
                .sum()
        })
    }
    size(&s.store_dir.join("restic"))
}

/// What backup `backup` of db-0's volume listed and did not read.
pub(super) async fn skipped_of(s: &Setup, backup: &str) -> Vec<SkippedEntry> {
    get_json_gz(&s.store, &skipped_key(backup, "shop", "db-0", "data"))
        .await
        .unwrap()
        .unwrap()
}

pub(super) fn restore_options(pw: &str) -> RestoreOptions {
    RestoreOptions {
        repository_password: Some(password(pw)),
        ..RestoreOptions::default()
    }
}

pub(super) async fn restored(
    s: &Setup,
    done: &VolumeBackup,
    pw: &str,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let out = tempfile::tempdir().unwrap();
    let key = done.manifest_key.as_deref().unwrap();
    restore_volume(
        &s.store,
        &done.backup,
        key,
        out.path(),
        &restore_options(pw),
    )
    .await?;
    Ok(contents(out.path()))
}

/// The repository is synchronous and blocks on the runtime: the test's
/// worker thread lends itself to it.
pub(super) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

pub(super) fn repo(s: &Setup, pw: &str) -> iar_repository::VolumeRepository {
    let runtime = tokio::runtime::Handle::current();
    blocking(|| iar_repository::VolumeRepository::open(&s.store, "shop", &password(pw), &runtime))
        .unwrap()
}

/// Three backups of a volume of 500 files while 1 % of them change: the
/// second and third upload a small part of the volume (what changed, its
/// trees and index), each snapshot's parent is the one before, and the
/// middle one restores file by file as it was.
#[tokio::test(flavor = "multi_thread")]
async fn backups_of_a_changing_volume_upload_what_changed_and_restore_as_they_were() {
    let s = setup();
    let vol = s.data.join("shop/db-data");
    std::fs::create_dir_all(vol.join("base/sub")).unwrap();
    for i in 0..500u64 {
        let dir = if i % 2 == 0 { "base" } else { "base/sub" };
        std::fs::write(vol.join(format!("{dir}/f{i}")), noise(i, 16 << 10)).unwrap();
    }
    std::fs::write(vol.join("big"), noise(9999, 3 << 20)).unwrap();
    std::os::unix::fs::symlink("base/f0", vol.join("link")).unwrap();
    std::fs::set_permissions(vol.join("base/f2"), std::fs::Permissions::from_mode(0o640)).unwrap();
    let volume_bytes = (500 * (16 << 10) + (3 << 20)) as u64;

    let first = back_up(&s, "b1", limits("pw")).await;
    assert_eq!(first.phase, VolumePhase::Completed, "{:?}", first.error);
    let key1 = first.manifest_key.clone().unwrap();
    assert!(
        parse_snapshot_key(&key1).is_some_and(|(ns, _)| ns == "shop"),
        "{key1}"
    );
    assert_eq!(first.bytes_done, volume_bytes);
    let after_first = repository_bytes(&s);
    assert!(
        after_first > volume_bytes,
        "{after_first} of {volume_bytes}"
    );

    // 1 %: five files rewritten.
    for i in [1u64, 2, 3, 4, 5] {
        let dir = if i % 2 == 0 { "base" } else { "base/sub" };
        std::fs::write(vol.join(format!("{dir}/f{i}")), noise(i + 10_000, 16 << 10)).unwrap();
    }
    let at_second = contents(&vol);
    let second = back_up(&s, "b2", limits("pw")).await;
    assert_eq!(second.phase, VolumePhase::Completed, "{:?}", second.error);
    let uploaded = repository_bytes(&s) - after_first;
    assert!(
        uploaded * 50 <= volume_bytes,
        "the second backup uploaded {uploaded} bytes of a {volume_bytes}-byte volume (over 2 %)"
    );

    std::fs::remove_file(vol.join("base/f10")).unwrap();
    std::fs::write(vol.join("new"), b"after b2").unwrap();
    let third = back_up(&s, "b3", limits("pw")).await;
    assert_eq!(third.phase, VolumePhase::Completed, "{:?}", third.error);

    let r = repo(&s, "pw");
    let snap = |b: &str| blocking(|| r.snapshots_of(b, "")).unwrap().remove(0);
    assert_eq!(snap("b1").parent, None);
    assert_eq!(snap("b2").parent, Some(snap("b1").id));
    assert_eq!(snap("b3").parent, Some(snap("b2").id));
    let summary = snap("b2").summary.unwrap();
    assert_eq!((summary.files_changed, summary.files_new), (5, 0));

    let back = restored(&s, &second, "pw").await.unwrap();
    assert_eq!(back.len(), at_second.len());
    for (path, content) in &at_second {
        assert!(
            back.get(path) == Some(content),
            "{path} differs after the restore"
        );
    }
    assert!(!back.contains_key("new"));
}

/// A wrong password opens nothing: the restore and a backup into the
/// same namespace are refused by rule, and no second repository appears.
#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_is_refused_by_rule() {
    let s = setup();
    std::fs::create_dir_all(s.data.join("shop/db-data")).unwrap();
    std::fs::write(s.data.join("shop/db-data/f"), b"x").unwrap();
    let done = back_up(&s, "b1", limits("right")).await;
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);

    let e = restored(&s, &done, "wrong").await.unwrap_err();
    assert!(e.contains("rule: repository-password"), "{e}");
    let refused = back_up(&s, "b2", limits("wrong")).await;
    assert_eq!(refused.phase, VolumePhase::Failed);
    let e = refused.error.unwrap();
    assert!(
        e.contains("rule: repository-password") && e.contains("shop"),
        "{e}"
    );
    let keys = std::fs::read_dir(s.store_dir.join("restic/shop/keys"))
        .unwrap()
        .count();
    assert_eq!(keys, 1);

    let none = RestoreOptions::default();
    let out = tempfile::tempdir().unwrap();
    let e = restore_volume(
        &s.store,
        "b1",
        done.manifest_key.as_deref().unwrap(),
        out.path(),
        &none,
    )
    .await
    .unwrap_err();
    assert!(e.contains("rule: repository-password"), "{e}");
}

/// restic's `check` with `--read-data` finds a pack whose bytes changed
/// in the store.
#[tokio::test(flavor = "multi_thread")]
async fn check_finds_a_corrupted_pack() {
    let s = setup();
    std::fs::create_dir_all(s.data.join("shop/db-data")).unwrap();
    std::fs::write(s.data.join("shop/db-data/f"), noise(1, 200_000)).unwrap();
    let done = back_up(&s, "b1", limits("pw")).await;
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    let r = repo(&s, "pw");
    assert_eq!(blocking(|| r.check(true)).unwrap(), Vec::<String>::new());

    let mut packs = Vec::new();
    for d in std::fs::read_dir(s.store_dir.join("restic/shop/data")).unwrap() {
        for p in std::fs::read_dir(d.unwrap().path()).unwrap() {
            packs.push(p.unwrap().path());
        }
    }
    let largest = packs
        .iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = std::fs::read(largest).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(largest, bytes).unwrap();
    let findings = blocking(|| r.check(true)).unwrap();
    assert!(
        !findings.is_empty(),
        "check found nothing in a corrupted pack"
    );
}

/// Forgetting a deleted backup's snapshots and pruning gives its data
/// back; the backup kept still restores.
#[tokio::test(flavor = "multi_thread")]
async fn a_prune_after_a_forget_removes_only_unused_data() {
    let s = setup();
    let vol = s.data.join("shop/db-data");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("kept"), noise(1, 1 << 20)).unwrap();
    std::fs::write(vol.join("gone"), noise(2, 4 << 20)).unwrap();
    let first = back_up(&s, "b1", limits("pw")).await;
    assert_eq!(first.phase, VolumePhase::Completed, "{:?}", first.error);
    std::fs::remove_file(vol.join("gone")).unwrap();
    let second = back_up(&s, "b2", limits("pw")).await;
    assert_eq!(second.phase, VolumePhase::Completed, "{:?}", second.error);
    let before = repository_bytes(&s);

    let r = repo(&s, "pw");
    assert_eq!(blocking(|| r.forget("b1", "")).unwrap(), 1);
    let pruned = blocking(|| r.prune(true)).unwrap();
    assert!(pruned.packs_removed >= 1, "{pruned:?}");
    let after = repository_bytes(&s);
    assert!(before - after >= 4 << 20, "{before} -> {after}");
    assert_eq!(blocking(|| r.check(true)).unwrap(), Vec::<String>::new());
    let back = restored(&s, &second, "pw").await.unwrap();
    assert_eq!(back.keys().collect::<Vec<_>>(), ["kept"]);
}

/// A pod's user against the repository walk: links out of the volume are
/// stored as links and never read; a file swapped for a link between its
/// listing and its open is refused, recorded with its rule, and not read.
#[tokio::test(flavor = "multi_thread")]
async fn links_and_swaps_are_never_followed_into_the_repository() {
    let s = setup();
    let outside = s.outside.clone();
    let vol = s.data.join("shop/db-data");
    std::fs::create_dir_all(&vol).unwrap();
    std::os::unix::fs::symlink("../../other-tenant/token", vol.join("file-link")).unwrap();
    std::os::unix::fs::symlink(&outside, vol.join("dir-link")).unwrap();
    std::fs::write(vol.join("victim"), b"mine").unwrap();
    let token = outside.join("token");
    let victim = vol.join("victim");
    let seam: walk::Seam = Arc::new(move |path: &[u8]| {
        if path == b"victim" {
            std::fs::remove_file(&victim).unwrap();
            std::os::unix::fs::symlink(&token, &victim).unwrap();
        }
    });
    let done = back_up_seamed(&s, "b1", seam).await;
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    let back = restored(&s, &done, "pw").await.unwrap();
    assert_eq!(back["file-link"], b"-> ../../other-tenant/token");
    assert!(back["dir-link"].starts_with(b"-> /"));
    assert!(!back.contains_key("victim"), "{back:?}");
    assert!(back.values().all(|v| v != SECRET));
    let skipped = skipped_of(&s, "b1").await;
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(
        skipped[0].reason.contains("rule: volume-changed"),
        "{skipped:?}"
    );
}

/// A restore from the repository into a target a pod's user prepared:
/// a directory swapped for a link to elsewhere, a file already there. The
/// readers and the writer run on threads of their own; the writer's
/// refusal, with its rule, is the error, and nothing is written through
/// the link or over the file.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_from_the_repository_writes_nothing_through_the_target() {
    let s = setup();
    let vol = s.data.join("shop/db-data");
    std::fs::create_dir_all(vol.join("pg")).unwrap();
    // Several blobs, so the file is read on both reader threads.
    std::fs::write(vol.join("pg/table"), noise(41, 6 << 20)).unwrap();
    std::fs::write(vol.join("wal"), b"wal").unwrap();
    let done = back_up(&s, "b1", limits("pw")).await;
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    let key = done.manifest_key.clone().unwrap();

    let target = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), target.path().join("pg")).unwrap();
    let e = restore_volume(&s.store, "b1", &key, target.path(), &restore_options("pw"))
        .await
        .unwrap_err();
    assert!(
        e.contains("pg exists in the target and is not a directory")
            && e.contains("rule: target-exists"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);

    let target = tempfile::tempdir().unwrap();
    std::fs::write(target.path().join("wal"), b"the pod's own").unwrap();
    let e = restore_volume(&s.store, "b1", &key, target.path(), &restore_options("pw"))
        .await
        .unwrap_err();
    assert!(e.contains("rule: target-exists"), "{e}");
    assert_eq!(
        std::fs::read(target.path().join("wal")).unwrap(),
        b"the pod's own"
    );

    // Into an empty target, the many-blob file comes back exactly.
    let back = restored(&s, &done, "pw").await.unwrap();
    assert_eq!(back["pg/table"], noise(41, 6 << 20));
    assert_eq!(back["wal"], b"wal");
}

/// A canceled backup leaves no snapshot behind: a partial one would
/// stand for the volume, and be the next backup's parent.
#[tokio::test(flavor = "multi_thread")]
async fn a_canceled_backup_leaves_no_snapshot() {
    let s = setup();
    let vol = s.data.join("shop/db-data");
    std::fs::create_dir_all(&vol).unwrap();
    for i in 0..40 {
        std::fs::write(vol.join(format!("f{i:02}")), noise(i, 1000)).unwrap();
    }
    let seam: walk::Seam = Arc::new(|_| std::thread::sleep(Duration::from_millis(100)));
    let handle = LocalDirBackupper::new(s.data.clone(), s.store.clone(), 1)
        .with_limits(VolumeLimits {
            seam: Some(seam),
            ..limits("pw")
        })
        .start(request("b1"))
        .await;
    let mut watch = handle.watch();
    watch.wait_for(|v| v.bytes_done > 0).await.unwrap();
    handle.cancel();
    let done = handle.finished().await;
    assert_eq!(done.phase, VolumePhase::Canceled);
    // The blocking side finishes the walk's last file, then forgets.
    let r = repo(&s, "pw");
    blocking(|| {
        iar_tests::blocking::wait_for(
            "the partial snapshot forgotten",
            Duration::from_secs(30),
            || match r.snapshots_of("b1", "").unwrap().len() {
                0 => Ok(()),
                n => Err(format!("{n} snapshots of b1")),
            },
        )
    });
}

/// A pod's user makes a file of exabytes that holds two words: the
/// repository's chunker would read every hole as zeros until the volume's
/// timeout. It is recorded by rule and not read; the rest of the volume
/// is backed up at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_sparse_file_of_exabytes_is_recorded_not_read() {
    let s = setup();
    let vol = s.data.join("shop/db-data");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("kept"), b"data").unwrap();
    let f = std::fs::File::create(vol.join("huge")).unwrap();
    // As large as this file system allows, up to 8 EiB.
    let len = [8u64 << 60, 1 << 50, 1 << 44, 1 << 40]
        .into_iter()
        .find(|&l| f.set_len(l).is_ok())
        .unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"middle", len / 2).unwrap();
    drop(f);
    let done = back_up(&s, "b1", limits("pw")).await;
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    assert!(done.bytes_done < 1 << 20, "read {} bytes", done.bytes_done);
    let back = restored(&s, &done, "pw").await.unwrap();
    assert_eq!(back.keys().collect::<Vec<_>>(), ["kept"]);
    let skipped = skipped_of(&s, "b1").await;
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(
        skipped[0].reason.contains("rule: sparse-file"),
        "{skipped:?}"
    );
    // The record says so too, and the backup warns of it.
    assert_eq!((done.skipped.clone(), done.skipped_total), (skipped, 1));
    let warnings = done.skipped_warnings();
    assert!(
        warnings.len() == 1
            && warnings[0].contains("\"huge\"")
            && warnings[0].contains("rule: sparse-file"),
        "{warnings:?}"
    );
}

/// The leader's maintenance forgets, before it prunes, the snapshots no
/// stored backup owns: one whose backup is gone (an agent stopped past
/// its silence wrote it after the backup was deleted, and could not
/// forget it itself: the fault campaign's seed 3655), and one tagged with
/// a uid its backup's name no longer has. A stored backup's snapshot
/// stays.
#[tokio::test(flavor = "multi_thread")]
async fn maintenance_forgets_only_the_snapshots_no_stored_backup_owns() {
    let s = setup();
    let vol = s.data.join("shop/db-data");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("f"), noise(1, 1 << 16)).unwrap();
    for (backup, uid) in [("kept", "u-kept"), ("gone", "u-gone"), ("again", "u-old")] {
        let done = LocalDirBackupper::new(s.data.clone(), s.store.clone(), 1)
            .with_limits(limits("pw"))
            .start(VolumeRequest {
                backup_uid: uid.into(),
                ..request(backup)
            })
            .await
            .finished()
            .await;
        assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    }
    for (backup, uid) in [("kept", "u-kept"), ("again", "u-new")] {
        let mut object =
            crate::backup::object::BackupObject::new(backup, "velero", uid, serde_json::json!({}));
        object.status.phase = crate::backup::object::BackupPhase::Completed;
        s.store
            .put_json(backup, iar_core::store::BackupFile::Metadata, &object)
            .await
            .unwrap();
    }
    let machine = crate::phases::PhaseMachine::new(
        Vec::new(),
        s.store.clone(),
        Arc::new(iar_core::NoCluster),
        crate::phases::Settings {
            repository_password: Some(password("pw")),
            ..Default::default()
        },
    );

    let done = machine.maintain_repositories().await.unwrap();
    let crate::phases::maintenance::Maintenance::Done(done) = done else {
        panic!("{done:?}")
    };
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].orphans.len(), 2, "{done:?}");
    assert!(done[0].outcome.is_ok(), "{done:?}");
    let r = repo(&s, "pw");
    let left: Vec<String> = blocking(|| r.snapshots())
        .unwrap()
        .iter()
        .map(|s| s.tags.to_string())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(
        left[0].contains("backup=kept") && left[0].contains("backup-uid=u-kept"),
        "{left:?}"
    );
}
