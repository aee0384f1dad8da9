//! iar's repository locks against restic 0.18.1's own binary (built by
//! `tools/restic/build.sh`, once per machine): each side honours the
//! other's locks, and restic reads, judges and removes iar's lock files.
//! Without Go (so without restic) these tests skip, and fail under
//! `CI=true`.

use iar_core::store::BackupStore;
use iar_repository::jiff::{SignedDuration, Timestamp};
use iar_repository::{LockFile, LockOptions, Password, RepositoryError, VolumeRepository};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const PASSWORD: &str = "correct horse battery staple";

/// What a test does when a tool it needs is missing (as
/// `iar_apiserver::skip_or_fail`): under `CI=true` it fails; elsewhere it
/// says loudly that it SKIPPED, and the caller returns.
fn skip_or_fail(what: &str) {
    let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    if ci {
        panic!("CI=true, so a missing tool fails the test instead of skipping it: {what}");
    }
    let _ = writeln!(std::io::stderr(), "\n!!! SKIPPED {what} !!!\n");
}

/// restic's CLI, or `None` (a failure under CI) without Go.
fn restic() -> Option<PathBuf> {
    if Command::new("go").arg("version").output().is_err() {
        skip_or_fail("Go is not installed, so restic cannot be built");
        return None;
    }
    let build = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/restic/build.sh");
    let out = Command::new("bash")
        .arg(build)
        .stderr(Stdio::inherit())
        .output()
        .expect("running tools/restic/build.sh");
    assert!(out.status.success(), "tools/restic/build.sh failed");
    Some(PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()))
}

struct Fixture {
    restic: PathBuf,
    dir: tempfile::TempDir,
    store: BackupStore,
    runtime: tokio::runtime::Runtime,
}

impl Fixture {
    fn new() -> Option<Fixture> {
        let restic = restic()?;
        let dir = tempfile::tempdir().unwrap();
        let store = BackupStore::open(dir.path().to_str().unwrap()).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        Some(Fixture {
            restic,
            dir,
            store,
            runtime,
        })
    }

    /// The namespace `shop`'s repository, created by iar; locks wait for
    /// no one unless told.
    fn repo(&self, options: LockOptions) -> VolumeRepository {
        let password = Password::new(PASSWORD).unwrap();
        VolumeRepository::open_or_init(&self.store, "shop", &password, self.runtime.handle())
            .unwrap()
            .with_lock_options(options)
    }

    fn repository(&self) -> PathBuf {
        self.dir.path().join("restic/shop")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.restic);
        c.arg("--repo")
            .arg(self.repository())
            .arg("--no-cache")
            .args(args)
            .env("RESTIC_PASSWORD", PASSWORD);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("running restic")
    }

    fn lock_files(&self) -> Vec<String> {
        match std::fs::read_dir(self.repository().join("locks")) {
            Ok(entries) => entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn no_wait() -> LockOptions {
    LockOptions {
        retry_for: Duration::ZERO,
        ..LockOptions::default()
    }
}

/// While iar holds a backup's (shared) lock, restic's prune refuses; restic
/// reads iar's lock file (its name the hash of its bytes, decrypted with
/// the master key) and lists it.
#[test]
fn restic_prune_refuses_while_iar_holds_a_lock_and_reads_iars_lock_file() {
    let Some(f) = Fixture::new() else { return };
    let repo = f.repo(no_wait());
    let lock = repo.lock(false).unwrap();

    let pruned = f.run(&["prune"]);
    assert!(!pruned.status.success(), "{}", text(&pruned));
    assert!(
        text(&pruned).contains("repository is already locked"),
        "{}",
        text(&pruned)
    );
    assert!(
        text(&pruned).contains(&format!("PID {}", std::process::id())),
        "{}",
        text(&pruned)
    );

    let listed = f.run(&["list", "locks", "--no-lock"]);
    assert!(listed.status.success(), "{}", text(&listed));
    assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), lock.id());

    let shown = f.run(&["cat", "lock", &lock.id(), "--no-lock"]);
    assert!(shown.status.success(), "{}", text(&shown));
    let json: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(json["pid"], std::process::id());
    assert_eq!(json["exclusive"], false);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(json["hostname"], host.trim());

    drop(lock);
    let pruned = f.run(&["prune"]);
    assert!(pruned.status.success(), "{}", text(&pruned));
}

/// While `restic backup` runs (reading a stdin kept open), iar's prune
/// refuses naming restic's process, a forget (shared) goes ahead; once
/// restic is done, the prune runs.
#[test]
fn iar_prune_refuses_while_restic_holds_a_lock() {
    let Some(f) = Fixture::new() else { return };
    let repo = f.repo(no_wait());
    let mut backup = f
        .command(&["backup", "--stdin", "--stdin-filename", "slow"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting restic backup");
    let started = Instant::now();
    while f.lock_files().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "restic wrote no lock"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let refused = repo.prune(false).unwrap_err();
    assert!(
        matches!(refused, RepositoryError::Locked { .. }),
        "{refused}"
    );
    let refused = refused.to_string();
    assert!(refused.contains("(rule: repository-lock)"), "{refused}");
    assert!(
        refused.contains(&format!("PID {}", backup.id())),
        "{refused}"
    );
    assert!(refused.contains("a shared lock"), "{refused}");
    assert_eq!(repo.forget("b1", "").unwrap(), 0);

    backup.stdin.take().unwrap().write_all(b"data\n").unwrap();
    assert!(backup.wait().unwrap().success());
    repo.prune(false).unwrap();
}

/// restic judges iar's lock files as its own: `unlock` removes a stale
/// one (31 minutes old, another host) and keeps a live one; `unlock
/// --remove-all` removes iar's live lock, which iar then reports lost.
#[test]
fn restic_unlock_judges_iars_locks() {
    let Some(f) = Fixture::new() else { return };
    let repo = f.repo(LockOptions {
        refresh_every: Duration::from_millis(200),
        ..no_wait()
    });
    let old = Timestamp::now() - SignedDuration::from_mins(31);
    let stale = repo
        .write_lock_file(&LockFile {
            time: old.to_string(),
            hostname: "another-host".into(),
            ..LockFile::this_process(true, "iar test")
        })
        .unwrap();
    let live_elsewhere = repo
        .write_lock_file(&LockFile {
            hostname: "another-host".into(),
            ..LockFile::this_process(false, "iar test")
        })
        .unwrap();
    // (A live lock of this host would have restic probe this test's pid
    // with SIGHUP, which ends it: restic ignores SIGHUP, a test does not.)
    let unlocked = f.run(&["unlock"]);
    assert!(unlocked.status.success(), "{}", text(&unlocked));
    assert!(
        text(&unlocked).contains("successfully removed 1 locks"),
        "{}",
        text(&unlocked)
    );
    assert_eq!(f.lock_files(), vec![live_elsewhere.clone()]);
    assert!(!f.lock_files().contains(&stale));

    // iar's window is iar's: restic reads a declaring lock 11 minutes old
    // (its JSON has a field restic does not know) and keeps it, as its 30
    // minutes say; iar's next lock removes it.
    let eleven_ago = Timestamp::now() - SignedDuration::from_mins(11);
    let declared = repo
        .write_lock_file(
            &LockFile {
                time: eleven_ago.to_string(),
                hostname: "another-host".into(),
                ..LockFile::this_process(true, "iar test")
            }
            .declaring(iar_repository::locks::OWN_STALE_AFTER),
        )
        .unwrap();
    let unlocked = f.run(&["unlock"]);
    assert!(unlocked.status.success(), "{}", text(&unlocked));
    assert!(f.lock_files().contains(&declared), "{}", text(&unlocked));
    let lock = repo.lock(false).unwrap();
    assert!(!f.lock_files().contains(&declared));
    drop(lock);

    let removed = f.run(&["unlock", "--remove-all"]);
    assert!(removed.status.success(), "{}", text(&removed));
    let lock = repo.lock(false).unwrap();
    let removed = f.run(&["unlock", "--remove-all"]);
    assert!(removed.status.success(), "{}", text(&removed));
    // Its next refresh (every 200 ms) notices: waited for, not timed, as a
    // loaded machine may run the refresher late (it failed so once, at
    // 600 ms, in a full test run).
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !lock.lost() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(lock.lost(), "iar noticed restic removed its lock");
}
