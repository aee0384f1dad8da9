use super::test_setup::setup;
use super::*;
use iar_tests::fixtures::noise;
use std::os::unix::fs::PermissionsExt;

fn request(backup: &str, ns: &str, pod: &str, volume: &str, pvc: Option<&str>) -> VolumeRequest {
    VolumeRequest {
        backup: backup.into(),
        backup_uid: String::new(),
        pod: ItemRef::new("", "pods", ns, pod),
        volume: volume.into(),
        pvc: pvc.map(String::from),
    }
}

async fn data_objects(store: &BackupStore, backup: &str) -> usize {
    store
        .count_under(&format!("backups/{backup}/volumes/data"))
        .await
        .unwrap()
}

/// A volume with nested directories, a multi-chunk file, a symlink, an
/// empty file and file modes is written back from its manifest exactly:
/// same paths, bytes and modes; progress ends at the total.
#[tokio::test]
async fn restored_content_equals_the_source() {
    let s = setup();
    let vol = s.data.join("shop/db-data");
    std::fs::create_dir_all(vol.join("pg/base")).unwrap();
    let big = noise(7, CHUNK * 2 + 12_345);
    std::fs::write(vol.join("pg/base/big"), &big).unwrap();
    std::fs::write(vol.join("pg/small"), b"hello").unwrap();
    std::fs::write(vol.join("empty"), b"").unwrap();
    std::fs::set_permissions(vol.join("pg/small"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::symlink("pg/small", vol.join("link")).unwrap();
    let b = LocalDirBackupper::new(s.data.clone(), s.store.clone(), 2);
    let h = b
        .start(request("b1", "shop", "db-0", "data", Some("db-data")))
        .await;
    let done = h.finished().await;
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    assert_eq!(done.bytes_total, big.len() as u64 + 5);
    assert_eq!(done.bytes_done, done.bytes_total);
    assert!(done.started.is_some() && done.completed >= done.started);
    let key = done.manifest_key.clone().unwrap();
    assert_eq!(key, "backups/b1/volumes/manifests/shop/db-0/data.json.gz");

    let out = tempfile::tempdir().unwrap();
    let manifest = restore_volume(&s.store, "b1", &key, out.path(), &RestoreOptions::default())
        .await
        .unwrap();
    assert_eq!(
        manifest
            .entries
            .iter()
            .find(|e| e.path == "pg/base/big")
            .unwrap()
            .chunks
            .len(),
        3
    );
    assert_eq!(std::fs::read(out.path().join("pg/base/big")).unwrap(), big);
    assert_eq!(
        std::fs::read(out.path().join("pg/small")).unwrap(),
        b"hello"
    );
    assert_eq!(std::fs::read(out.path().join("empty")).unwrap(), b"");
    assert_eq!(
        std::fs::metadata(out.path().join("pg/small"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o640
    );
    assert_eq!(
        std::fs::read_link(out.path().join("link")).unwrap(),
        PathBuf::from("pg/small")
    );
}

/// Identical content is stored once: two volumes and two files holding
/// the same bytes add one data object, not four.
#[tokio::test]
async fn identical_files_are_stored_once() {
    let s = setup();
    let same = noise(3, 100_000);
    for pvc in ["a", "b"] {
        let dir = s.data.join("ns").join(pvc);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("one"), &same).unwrap();
        std::fs::write(dir.join("two"), &same).unwrap();
    }
    std::fs::write(s.data.join("ns/b/other"), noise(4, 10)).unwrap();
    let b = LocalDirBackupper::new(s.data.clone(), s.store.clone(), 1);
    for pvc in ["a", "b"] {
        let h = b.start(request("b2", "ns", "p", pvc, Some(pvc))).await;
        assert_eq!(h.finished().await.phase, VolumePhase::Completed);
    }
    assert_eq!(data_objects(&s.store, "b2").await, 2);
}

/// Progress is reported as it goes: the watcher sees bytes done rise
/// through intermediate values to the total.
#[tokio::test]
async fn progress_rises_to_the_total() {
    let s = setup();
    let dir = s.data.join("ns/pvc");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("f"), noise(9, CHUNK * 3)).unwrap();
    let b = LocalDirBackupper::new(s.data.clone(), s.store.clone(), 1);
    let h = b.start(request("b3", "ns", "p", "v", Some("pvc"))).await;
    let mut rx = h.watch();
    let mut seen = vec![rx.borrow().bytes_done];
    while !rx.borrow().phase.is_terminal() {
        rx.changed().await.unwrap();
        seen.push(rx.borrow().bytes_done);
    }
    let last = rx.borrow().clone();
    assert_eq!(last.phase, VolumePhase::Completed);
    assert_eq!(last.bytes_done, (CHUNK * 3) as u64);
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    assert!(
        seen.iter().any(|&b| b > 0 && b < last.bytes_done),
        "no intermediate progress: {seen:?}"
    );
}

/// A volume whose directory is missing fails with a reason naming the
/// directory, the pod, the volume and the claim.
#[tokio::test]
async fn missing_directory_fails_with_a_reason() {
    let s = setup();
    let b = LocalDirBackupper::new(s.data.clone(), s.store.clone(), 1);
    let done = b
        .start(request("b4", "ns", "web-0", "data", Some("gone")))
        .await
        .finished()
        .await;
    assert_eq!(done.phase, VolumePhase::Failed);
    let e = done.error.unwrap();
    assert!(e.contains("volume data (pvc gone) of pod ns/web-0"), "{e}");
    assert!(
        e.contains(&format!(
            "{} does not exist",
            s.data.join("ns/gone").display()
        )),
        "{e}"
    );
    // A non-PVC volume is looked for under the pod's own directory.
    let done = b
        .start(request("b4", "ns", "web-0", "scratch", None))
        .await
        .finished()
        .await;
    assert!(done.error.unwrap().contains(".pods/web-0/scratch"));
}

/// A claim, volume, pod or namespace name that breaks its Kubernetes
/// rule (`../..`, a `/`, an upper-case letter) is refused before any
/// path is built: the volume backup fails naming the pod, the volume,
/// the name and the rule, and nothing outside `--volume-data` is read,
/// although a directory is there for the traversal to reach. Before,
/// the names were joined as written and the outside directory was read.
#[tokio::test]
async fn names_that_break_kubernetes_rules_are_refused_before_any_read() {
    let s = setup();
    // `<data>/ns/../outside` exists, with a file that must never reach
    // the store.
    std::fs::create_dir_all(s.data.join("outside")).unwrap();
    std::fs::write(s.data.join("outside/key"), b"outside").unwrap();
    let b = LocalDirBackupper::new(s.data.clone(), s.store.clone(), 1);
    let cases = [
        (
            ("ns", "web-0", "data", Some("../outside")),
            "claimName \"../outside\"",
        ),
        (("ns", "web-0", "data", Some("../../outside")), "claimName"),
        (
            ("ns", "web-0", "data", Some("Upper")),
            "claimName \"Upper\"",
        ),
        (("ns", "web-0", "../../outside", None), "volume name"),
        (("ns", "..", "x", None), "pod name \"..\""),
        (("..", "web-0", "outside", None), "namespace \"..\""),
    ];
    for ((ns, pod, volume, pvc), what) in cases {
        let done = b
            .start(request("b8", ns, pod, volume, pvc))
            .await
            .finished()
            .await;
        assert_eq!(done.phase, VolumePhase::Failed, "{done:?}");
        let e = done.error.unwrap();
        assert!(
            e.starts_with(&format!("volume {volume}")) && e.contains(&format!("of pod {ns}/{pod}")),
            "{e}"
        );
        assert!(e.contains(what), "{e}");
        assert!(e.contains("(rule: invalid-identifier)"), "{e}");
        assert!(!e.contains("does not exist"), "no path was tried: {e}");
    }
    // Nothing was read into the store for any of them.
    assert_eq!(data_objects(&s.store, "b8").await, 0);
    let names = [Some("../outside"), Some("a/b"), Some(&"x".repeat(254)[..])];
    for pvc in names {
        assert!(volume_dir(&s.data, "ns", "p", "v", pvc).is_err(), "{pvc:?}");
    }
    assert_eq!(
        volume_dir(&s.data, "ns", "p", "v", Some("db-data.1")).unwrap(),
        s.data.join("ns/db-data.1")
    );
}

/// Cancel stops a volume backup in progress (it ends Canceled short of
/// its total, with no manifest) and one still waiting for a permit
/// (Canceled without ever starting).
#[tokio::test]
async fn cancel_stops_running_and_waiting_backups() {
    let s = setup();
    let dir = s.data.join("ns/big");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..8 {
        std::fs::write(dir.join(format!("f{i}")), noise(i, CHUNK)).unwrap();
    }
    let b = LocalDirBackupper::new(s.data.clone(), s.store.clone(), 1);
    let running = b.start(request("b5", "ns", "p", "big", Some("big"))).await;
    let waiting = b
        .start(request("b5", "ns", "p", "also-big", Some("big")))
        .await;
    let mut rx = running.watch();
    rx.wait_for(|v| v.bytes_done > 0).await.unwrap();
    waiting.cancel();
    running.cancel();
    let r = running.finished().await;
    assert_eq!(r.phase, VolumePhase::Canceled);
    assert!(
        r.bytes_done < r.bytes_total,
        "{} of {}",
        r.bytes_done,
        r.bytes_total
    );
    assert!(r.manifest_key.is_none());
    assert!(
        r.error
            .unwrap()
            .contains("volume big (pvc big) of pod ns/p: canceled")
    );
    let w = waiting.finished().await;
    assert_eq!(w.phase, VolumePhase::Canceled);
    assert_eq!(w.started, None);
}

/// `--volume-concurrency` bounds the volumes read at once: with a bound
/// of 2, six volumes' [started, completed] intervals never overlap by
/// more than 2, and all complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_is_bounded() {
    let s = setup();
    for i in 0..6 {
        let dir = s.data.join(format!("ns/v{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f"), noise(i, CHUNK)).unwrap();
    }
    let b = LocalDirBackupper::new(s.data.clone(), s.store.clone(), 2);
    let mut handles = Vec::new();
    for i in 0..6 {
        let v = format!("v{i}");
        handles.push(b.start(request("b6", "ns", "p", &v, Some(&v))).await);
    }
    let mut spans = Vec::new();
    for h in &handles {
        let v = h.finished().await;
        assert_eq!(v.phase, VolumePhase::Completed);
        spans.push((v.started.unwrap(), v.completed.unwrap()));
    }
    for (start, _) in &spans {
        let running = spans
            .iter()
            .filter(|(s, e)| s <= start && start < e)
            .count();
        assert!(running <= 2, "{running} volumes read at once");
    }
}

/// The records persist next to the item operations, camelCase, and
/// read back equal.
#[tokio::test]
async fn records_round_trip_through_the_store() {
    let s = setup();
    let mut r = request("b7", "ns", "p", "data", Some("c")).record();
    r.phase = VolumePhase::InProgress;
    r.bytes_done = 5;
    r.bytes_total = 10;
    assert_eq!(get_volume_backups(&s.store, "b7").await.unwrap(), None);
    put_volume_backups(&s.store, "b7", std::slice::from_ref(&r))
        .await
        .unwrap();
    let back = get_volume_backups(&s.store, "b7").await.unwrap().unwrap();
    assert_eq!(back, vec![r]);
    let raw = s
        .store
        .get_key("backups/b7/b7-volumebackups.json.gz")
        .await
        .unwrap()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&gunzip_chunk(&raw).unwrap()).unwrap();
    assert_eq!(json[0]["podNamespace"], "ns");
    assert_eq!(json[0]["bytesDone"], 5);
    assert_eq!(json[0]["phase"], "InProgress");
    assert!(json[0]["created"].as_str().unwrap().ends_with('Z'));
}

/// A volume backup's record is stamped by the clock its limits carry
/// (the phase machine's): created, started and completed all read it.
#[tokio::test]
async fn a_volume_backups_times_come_from_its_clock() {
    let s = setup();
    let vol = s.data.join("shop/db-data");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("f"), b"x").unwrap();
    let clock = std::sync::Arc::new(iar_core::clock::ManualClock::new());
    clock.advance(std::time::Duration::from_secs(3600));
    let at = iar_core::clock::Clock::system_now(&*clock);
    let b = LocalDirBackupper::new(s.data.clone(), s.store.clone(), 1).with_limits(VolumeLimits {
        clock: clock.clone(),
        ..VolumeLimits::default()
    });
    let done = b
        .start(request("b1", "shop", "db-0", "data", Some("db-data")))
        .await
        .finished()
        .await;
    assert_eq!(done.phase, VolumePhase::Completed, "{:?}", done.error);
    assert_eq!(
        (done.created, done.started, done.completed),
        (Some(at), Some(at), Some(at))
    );
}
