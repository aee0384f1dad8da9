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
fn restic() -> Option<PathBuf> {
    if Command::new("go").arg("version").output().is_err() {
        iar_apiserver::skip_or_fail("Go is not installed, so restic cannot be built");
        return None;
    }
    let out = Command::new("bash")
        .arg(repo().join("tools/restic/build.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("running tools/restic/build.sh");
    assert!(out.status.success(), "tools/restic/build.sh failed");
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
    let refused = iar(&["delete", "nightly-1", "--store", f.store()]);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("rule: repository-password"),
        "{}",
        text(&refused)
    );
    assert_eq!(f.snapshots(&restic).len(), 1);
    // Still there, its snapshot shown as restic names it.
    let out = iar(&["describe", "nightly-1", "--store", f.store()]);
    assert!(out.status.success(), "{}", text(&out));
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
