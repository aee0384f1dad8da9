//! Pod volume data in restic's repository format, end to end through the
//! `iar` binary (`iar backup --repository-password-file`, `iar volume
//! restore`, `iar delete`) and read back by restic's own CLI (built from
//! the Go module proxy by `tools/restic/build.sh`): the format is
//! restic's, not a look-alike.

use crate::support::{iar, repo, text};
use iar_tests::artifacts;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// restic's CLI, or `None` (a failure under CI) without Go.
pub(crate) fn restic() -> Option<PathBuf> {
    go_tool("restic")
}

/// A Go tool built by `tools/<name>/build.sh` (once per machine): its
/// path, or `None` (the test skips, or fails under CI) without Go.
pub(crate) fn go_tool(name: &str) -> Option<PathBuf> {
    if Command::new("go").arg("version").output().is_err() {
        iar_apiserver::skip_or_fail(&format!("Go is not installed, so {name} cannot be built"));
        return None;
    }
    let out = Command::new("bash")
        .arg(repo().join(format!("tools/{name}/build.sh")))
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running tools/{name}/build.sh: {e}"));
    assert!(out.status.success(), "tools/{name}/build.sh failed");
    Some(PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()))
}

/// Every file under `dir`: relative path -> content.
pub(crate) fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

struct Fixture {
    items: tempfile::TempDir,
    plugins: tempfile::TempDir,
    data: tempfile::TempDir,
    store: tempfile::TempDir,
    password: tempfile::NamedTempFile,
}

impl Fixture {
    fn new() -> Fixture {
        let items = tempfile::tempdir().unwrap();
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "db-0", "namespace": "shop", "annotations": {
                "backup.velero.io/backup-volumes": "data",
            }},
            "spec": {"containers": [{"name": "db", "image": "db"}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "db-data"}}]}
        });
        std::fs::write(items.path().join("db.json"), pod.to_string()).unwrap();
        let plugins = tempfile::tempdir().unwrap();
        let wasm = Path::new(artifacts::LABELS);
        std::fs::copy(wasm, plugins.path().join(wasm.file_name().unwrap())).unwrap();
        let data = tempfile::tempdir().unwrap();
        let volume = data.path().join("shop/db-data");
        std::fs::create_dir_all(volume.join("pg")).unwrap();
        for i in 0..200 {
            std::fs::write(
                volume.join(format!("pg/{i:03}")),
                format!("row {i}\n").repeat(100),
            )
            .unwrap();
        }
        let password = tempfile::NamedTempFile::new().unwrap();
        // As a Secret created with `echo` holds it: the newline is not part
        // of the password.
        std::fs::write(password.path(), "correct horse battery staple\n").unwrap();
        Fixture {
            items,
            plugins,
            data,
            store: tempfile::tempdir().unwrap(),
            password,
        }
    }

    fn volume(&self) -> PathBuf {
        self.data.path().join("shop/db-data")
    }

    fn store(&self) -> &str {
        self.store.path().to_str().unwrap()
    }

    fn password(&self) -> &str {
        self.password.path().to_str().unwrap()
    }

    fn backup(&self, name: &str) {
        let out = iar(&[
            "backup",
            name,
            "--items",
            self.items.path().to_str().unwrap(),
            "--plugins",
            self.plugins.path().to_str().unwrap(),
            "--store",
            self.store(),
            "--volume-data",
            self.data.path().to_str().unwrap(),
            "--repository-password-file",
            self.password(),
        ]);
        assert!(out.status.success(), "{}", text(&out));
    }

    fn restic(&self, restic: &Path, args: &[&str]) -> std::process::Output {
        let out = Command::new(restic)
            .arg("--repo")
            .arg(self.store.path().join("restic/shop"))
            .arg("--password-file")
            .arg(self.password())
            .arg("--no-cache")
            .args(args)
            .output()
            .expect("running restic");
        assert!(out.status.success(), "restic {args:?}: {}", text(&out));
        out
    }

    fn snapshots(&self, restic: &Path) -> Vec<Value> {
        let out = self.restic(restic, &["snapshots", "--json"]);
        serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
    }
}

/// Two `iar backup`s of a volume; restic lists both snapshots with iar's
/// tags, the second's parent the first; restic's own restore and `iar
/// volume restore` of the first both give back the volume as it was;
/// restic's `check --read-data` passes; `iar delete` forgets the deleted
/// backup's snapshot (restic lists one), and `iar volume restore` without
/// the password is refused by rule.
#[test]
fn restic_reads_what_iar_backed_up_and_iar_delete_forgets_it() {
    let Some(restic) = restic() else { return };
    let f = Fixture::new();
    let before = files(&f.volume());
    f.backup("nightly-1");
    std::fs::write(f.volume().join("pg/007"), "changed\n").unwrap();
    f.backup("nightly-2");

    let snapshots = f.snapshots(&restic);
    assert_eq!(snapshots.len(), 2, "{snapshots:#?}");
    let tagged = |backup: &str| -> &Value {
        let tag = format!("backup={backup}");
        snapshots
            .iter()
            .find(|s| {
                s["tags"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t == tag.as_str())
            })
            .unwrap_or_else(|| panic!("no snapshot tagged {tag}: {snapshots:#?}"))
    };
    let (first, second) = (tagged("nightly-1"), tagged("nightly-2"));
    assert_eq!(second["parent"], first["id"]);
    assert_eq!(first["hostname"], "iar");
    assert!(
        first["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "pvc=db-data")
    );

    let by_restic = tempfile::tempdir().unwrap();
    let id = first["id"].as_str().unwrap();
    f.restic(
        &restic,
        &[
            "restore",
            id,
            "--target",
            by_restic.path().to_str().unwrap(),
        ],
    );
    assert_eq!(files(&by_restic.path().join("volume")), before);

    let by_iar = tempfile::tempdir().unwrap();
    let to = by_iar.path().join("out");
    let out = iar(&[
        "volume",
        "restore",
        "nightly-1",
        "shop/db-0/data",
        "--to",
        to.to_str().unwrap(),
        "--store",
        f.store(),
        "--repository-password-file",
        f.password(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(files(&to), before);

    let refused = iar(&[
        "volume",
        "restore",
        "nightly-1",
        "shop/db-0/data",
        "--to",
        by_iar.path().join("again").to_str().unwrap(),
        "--store",
        f.store(),
    ]);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("rule: repository-password"),
        "{}",
        text(&refused)
    );

    f.restic(&restic, &["check", "--read-data"]);

    let deleted = iar(&[
        "delete",
        "nightly-1",
        "--store",
        f.store(),
        "--repository-password-file",
        f.password(),
    ]);
    assert!(deleted.status.success(), "{}", text(&deleted));
    let left = f.snapshots(&restic);
    assert_eq!(left.len(), 1, "{left:#?}");
    assert_eq!(left[0]["id"], second["id"]);
}

/// `iar delete` of a backup whose volumes are in a repository, without
/// the password: refused by rule, and the backup and its snapshot stay
/// (nothing is left in the repository that no backup names).
#[test]
fn a_delete_without_the_password_keeps_the_backup() {
    let Some(restic) = restic() else { return };
    let f = Fixture::new();
    f.backup("nightly-1");
    // Without the password, and with a wrong one: refused as early, before
    // the backup is marked Deleting and what its plugins created goes.
    let wrong = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(wrong.path(), "not the password\n").unwrap();
    let wrong_password = ["--repository-password-file", wrong.path().to_str().unwrap()];
    for password in [&[][..], &wrong_password[..]] {
        let mut args = vec!["delete", "nightly-1", "--store", f.store()];
        args.extend(password);
        let refused = iar(&args);
        assert!(!refused.status.success());
        assert!(
            text(&refused).contains("rule: repository-password"),
            "{args:?}: {}",
            text(&refused)
        );
        assert_eq!(f.snapshots(&restic).len(), 1);
    }
    // Still there, not Deleting, its snapshot shown as restic names it.
    let out = iar(&["describe", "nightly-1", "--store", f.store()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("Deleting"), "{}", text(&out));
    let id = f.snapshots(&restic)[0]["short_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text(&out).contains(&format!("restic/shop {id}")),
        "{}",
        text(&out)
    );
}

/// A FIFO in the volume is left out by rule, and that is said where an
/// operator looks: the backup's warnings (`iar describe`, `iar logs`),
/// the volume's row in `iar describe`. The backup is still Completed:
/// a warning, as in Velero, not an error.
#[test]
fn what_a_volume_backup_leaves_out_is_a_warning_of_the_backup() {
    let f = Fixture::new();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        f.volume().join("pg/wal-pipe"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    f.backup("nightly-1");
    let out = iar(&["describe", "nightly-1", "--store", f.store()]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = text(&out);
    // Among the backup's warnings (the fixture's claim is not among its
    // items: that is the other one), and under the volume's row.
    assert!(shown.contains("Warnings:     2"), "{shown}");
    assert!(
        shown.contains("\n  volume backup volume data (pvc db-data) of pod shop/db-0: left out \"pg/wal-pipe\": a FIFO is not read")
            && shown.contains("\n  left out \"pg/wal-pipe\": a FIFO is not read (only regular files, directories and symlinks are; rule: not-a-regular-file)"),
        "{shown}"
    );
    let logs = iar(&["logs", "nightly-1", "--store", f.store()]);
    assert!(
        text(&logs).contains("warning: volume backup volume data (pvc db-data) of pod shop/db-0: left out \"pg/wal-pipe\""),
        "{}",
        text(&logs)
    );
}

/// A stray key (one the password opens whose master key opens nothing:
/// what an older iar's overtaken creation left, made here by copying a
/// key of another repository restic created with the same password) is
/// found by `iar repository check`, removed by `repair`, and the
/// repository is sound afterwards, for iar and for restic's own check.
#[test]
fn repository_check_finds_a_stray_key_and_repair_removes_it() {
    let Some(restic) = restic() else { return };
    let f = Fixture::new();
    f.backup("nightly-1");
    let other = tempfile::tempdir().unwrap();
    let made = Command::new(&restic)
        .args(["init", "--repo"])
        .arg(other.path())
        .arg("--password-file")
        .arg(f.password())
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made));
    let keys = f.store.path().join("restic/shop/keys");
    let mut stray = None;
    for key in std::fs::read_dir(other.path().join("keys")).unwrap() {
        let key = key.unwrap();
        std::fs::copy(key.path(), keys.join(key.file_name())).unwrap();
        stray = Some(key.file_name().into_string().unwrap());
    }
    let stray = stray.unwrap();
    let repository = |verb: &str| {
        iar(&[
            "repository",
            verb,
            "shop",
            "--store",
            f.store(),
            "--repository-password-file",
            f.password(),
        ])
    };
    let checked = repository("check");
    assert_eq!(checked.status.code(), Some(1), "{}", text(&checked));
    assert!(
        text(&checked).contains(&format!("key {stray}: a stray key")),
        "{}",
        text(&checked)
    );
    let repaired = repository("repair");
    assert!(repaired.status.success(), "{}", text(&repaired));
    assert!(!keys.join(&stray).exists());
    let checked = repository("check");
    assert!(checked.status.success(), "{}", text(&checked));
    assert!(text(&checked).contains("sound"), "{}", text(&checked));
    f.restic(&restic, &["check"]);
    // Without the password: refused by rule.
    let refused = iar(&["repository", "check", "--store", f.store()]);
    assert!(
        !refused.status.success() && text(&refused).contains("rule: repository-password"),
        "{}",
        text(&refused)
    );
}
