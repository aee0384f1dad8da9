//! What a volume backup leaves out is said, never silent: each entry a
//! rule chose not to read is on the record (and so a warning of the
//! backup); an entry that could not be read fails the volume; a file that
//! shrinks while read is read again; and a name cannot select another
//! backup's snapshots.

use super::repository_tests::{
    back_up, back_up_seamed, blocking, limits, repo, request, restored, skipped_of,
};
use super::test_setup::setup;
use super::*;
use iar_tests::fixtures::noise;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// FIFOs, a socket and an over-bound sparse file: the volume is
/// Completed, and the record names each with its rule (the first
/// [`SKIPPED_SHOWN`], and how many in all), as the store's list does.
#[tokio::test(flavor = "multi_thread")]
async fn every_entry_left_out_is_on_the_record_with_its_rule() {
    let s = setup();
    let vol = s.data.join("shop/db-data");
    std::fs::create_dir_all(vol.join("pipes")).unwrap();
    std::fs::write(vol.join("kept"), b"data").unwrap();
    for i in 0..SKIPPED_SHOWN + 5 {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            vol.join(format!("pipes/p{i:02}")),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }
    let _socket = std::os::unix::net::UnixListener::bind(vol.join("sock")).unwrap();
    let done = back_up(&s, "b1", limits("pw")).await;
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    let all = skipped_of(&s, "b1").await;
    assert_eq!(all.len(), SKIPPED_SHOWN + 6, "{all:?}");
    assert!(
        all.iter()
            .all(|e| e.reason.contains("rule: not-a-regular-file")),
        "{all:?}"
    );
    assert_eq!(done.skipped_total, all.len() as u64);
    assert_eq!(done.skipped, all[..SKIPPED_SHOWN]);
    let warnings = done.skipped_warnings();
    assert_eq!(warnings.len(), SKIPPED_SHOWN + 1, "{warnings:?}");
    assert!(
        warnings[0].contains("volume data (pvc db-data) of pod shop/db-0")
            && warnings[0].contains("pipes/p00"),
        "{warnings:?}"
    );
    assert!(
        warnings[SKIPPED_SHOWN].contains("left out 6 more entries, listed at")
            && warnings[SKIPPED_SHOWN].contains(&skipped_key("b1", "shop", "db-0", "data")),
        "{warnings:?}"
    );
    // Round trip: the record is persisted and read back as it was.
    let json = serde_json::to_string(&done).unwrap();
    assert_eq!(serde_json::from_str::<VolumeBackup>(&json).unwrap(), done);
}

/// A file the walk listed and then cannot open (here: swapped for a
/// socket between its listing and its open, whose open fails with ENXIO
/// even for root, as an unreadable file's does for anyone else) fails the
/// volume with its name and rule; no snapshot stands for the volume.
/// rustic alone would leave the file out with a log line and call the
/// snapshot whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_that_cannot_be_read_fails_the_volume() {
    let s = setup();
    let vol = s.data.join("shop/db-data");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("a-before"), noise(1, 4096)).unwrap();
    std::fs::write(vol.join("doomed"), noise(2, 4096)).unwrap();
    std::fs::write(vol.join("z-after"), noise(3, 4096)).unwrap();
    let doomed = vol.join("doomed");
    let listener = Arc::new(std::sync::Mutex::new(None));
    let keep = listener.clone();
    let seam: walk::Seam = Arc::new(move |path: &[u8]| {
        if path == b"doomed" {
            std::fs::remove_file(&doomed).unwrap();
            *keep.lock().unwrap() = Some(std::os::unix::net::UnixListener::bind(&doomed).unwrap());
        }
    });
    let done = back_up_seamed(&s, "b1", seam).await;
    assert_eq!(done.phase, VolumePhase::Failed, "{done:?}");
    let error = done.error.clone().unwrap();
    assert!(
        error.contains("doomed") && error.contains("rule: volume-unreadable"),
        "{error}"
    );
    let r = repo(&s, "pw");
    assert_eq!(blocking(|| r.snapshots_of("b1", "")).unwrap().len(), 0);
}

/// Counts the seam's calls for `name`, and truncates it to half its size
/// on the calls `shrink` says.
fn shrinking(
    vol: &std::path::Path,
    name: &'static str,
    shrink: impl Fn(usize) -> bool + Send + Sync + 'static,
) -> (walk::Seam, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let (path, counted) = (vol.join(name), calls.clone());
    let seam: walk::Seam = Arc::new(move |p: &[u8]| {
        if p == name.as_bytes() {
            let call = counted.fetch_add(1, Ordering::SeqCst);
            if shrink(call) {
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                let len = f.metadata().unwrap().len();
                f.set_len(len / 2).unwrap();
            }
        }
    });
    (seam, calls)
}

/// A log truncated while it is read (copytruncate): the snapshot is
/// taken again with the log at its new size, so the backup is whole and
/// restorable, and repository check finds nothing. Before, the snapshot
/// held the listed size over fewer bytes, and the restore stopped there.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_that_shrinks_once_while_read_is_read_again() {
    let s = setup();
    let vol = s.data.join("shop/db-data");
    std::fs::create_dir_all(&vol).unwrap();
    let log = noise(7, 1 << 20);
    std::fs::write(vol.join("app.log"), &log).unwrap();
    std::fs::write(vol.join("z-data"), noise(8, 64 << 10)).unwrap();
    let (seam, calls) = shrinking(&vol, "app.log", |call| call == 0);
    let done = back_up_seamed(&s, "b1", seam).await;
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "read once more");
    assert!(done.skipped.is_empty(), "{:?}", done.skipped);
    let back = restored(&s, &done, "pw").await.unwrap();
    assert_eq!(back["app.log"], log[..log.len() / 2]);
    assert_eq!(back["z-data"], noise(8, 64 << 10));
    let r = repo(&s, "pw");
    assert_eq!(blocking(|| r.check(true)).unwrap(), Vec::<String>::new());
    // The first try's snapshot is gone: one stands for the volume.
    assert_eq!(blocking(|| r.snapshots_of("b1", "")).unwrap().len(), 1);
}

/// A file that never holds still: after the last try its snapshot is kept
/// at the listed size, the bytes past its end zeros, and the record warns
/// of it by rule; the repository stays consistent and every other file
/// restores.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_that_keeps_shrinking_is_kept_padded_with_a_warning() {
    let s = setup();
    let vol = s.data.join("shop/db-data");
    std::fs::create_dir_all(&vol).unwrap();
    let log = noise(9, 1 << 20);
    std::fs::write(vol.join("app.log"), &log).unwrap();
    std::fs::write(vol.join("z-data"), noise(10, 64 << 10)).unwrap();
    let (seam, calls) = shrinking(&vol, "app.log", |_| true);
    let done = back_up_seamed(&s, "b1", seam).await;
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    assert_eq!(calls.load(Ordering::SeqCst), SHRINK_TRIES);
    assert_eq!(done.skipped.len(), 1, "{:?}", done.skipped);
    assert!(
        done.skipped[0].path == "app.log" && done.skipped[0].reason.contains("rule: file-changed"),
        "{:?}",
        done.skipped
    );
    // Listed at 1/4 on the last try, half of that read.
    let listed = log.len() / 4;
    let mut expected = log[..listed / 2].to_vec();
    expected.resize(listed, 0);
    let back = restored(&s, &done, "pw").await.unwrap();
    assert_eq!(back["app.log"], expected);
    assert_eq!(back["z-data"], noise(10, 64 << 10));
    let r = repo(&s, "pw");
    assert_eq!(blocking(|| r.check(true)).unwrap(), Vec::<String>::new());
}

/// A backup named to forge another's tag (`x,backup=victim`) is refused
/// by rule; deletion selects by the backup's uid, so a later backup of
/// the same name keeps its snapshot.
#[tokio::test(flavor = "multi_thread")]
async fn snapshots_are_selected_by_uid_never_by_a_forged_name() {
    let s = setup();
    let vol = s.data.join("shop/db-data");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("f"), b"data").unwrap();
    let start = async |backup: &str, uid: &str| {
        let request = VolumeRequest {
            backup_uid: uid.into(),
            ..request(backup)
        };
        LocalDirBackupper::new(s.data.clone(), s.store.clone(), 1)
            .with_limits(limits("pw"))
            .start(request)
            .await
            .finished()
            .await
    };
    let victim = start("victim", "uid-v").await;
    assert_eq!(victim.phase, VolumePhase::Completed, "{:?}", victim.error);
    let forged = start("x,backup=victim", "uid-x").await;
    assert_eq!(forged.phase, VolumePhase::Failed);
    assert!(
        forged
            .error
            .as_deref()
            .is_some_and(|e| e.contains("rule: invalid-identifier")),
        "{forged:?}"
    );
    // Two backups named b, one after the other's deletion was asked.
    for uid in ["uid-1", "uid-2"] {
        let done = start("b", uid).await;
        assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    }
    let r = repo(&s, "pw");
    assert_eq!(blocking(|| r.forget("b", "uid-1")).unwrap(), 1);
    assert_eq!(blocking(|| r.snapshots_of("b", "uid-2")).unwrap().len(), 1);
    assert_eq!(blocking(|| r.snapshots_of("b", "uid-1")).unwrap().len(), 0);
    assert_eq!(
        blocking(|| r.snapshots_of("victim", "uid-v"))
            .unwrap()
            .len(),
        1
    );
}
