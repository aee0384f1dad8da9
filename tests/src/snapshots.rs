//! The CSI snapshot controller, played on the manifest cluster's overlay:
//! where `iar backup --items` (and `ManifestCluster::with_overlay`) put the
//! VolumeSnapshots the `pvc-snapshot` plugin creates. No snapshot
//! controller or CSI driver runs without an API server, so a test says
//! what status each snapshot gets once it exists, and this thread writes
//! it into the created object's file, as the controller would write the
//! object's status: the plugin's `progress` then reads it through the
//! real lookup path. Against an API server the real snapshot-controller
//! does this (`tests/apiserver`).

use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How many times a status was set, and the statuses by snapshot name.
type Wanted = (u64, Arc<HashMap<String, Value>>);

/// Plays the snapshot controller until dropped.
pub struct SnapshotController {
    /// The wanted statuses (copied on write: a pass holds the set it
    /// started with, not a copy of thousands), and how many times one was
    /// set.
    statuses: Arc<Mutex<Wanted>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SnapshotController {
    /// Watches `overlay` (every 10 ms) for VolumeSnapshots.
    pub fn start(overlay: &Path) -> SnapshotController {
        let statuses: Arc<Mutex<Wanted>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (statuses, stop, overlay) = (statuses.clone(), stop.clone(), overlay.to_path_buf());
            std::thread::spawn(move || {
                let mut applied = HashMap::new();
                let mut passed = HashMap::new();
                while !stop.load(Ordering::Relaxed) {
                    let (set, wanted) = statuses.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    for dir in snapshot_dirs(&overlay) {
                        // A directory unchanged (by a settled mtime) since
                        // a pass with the same wanted statuses has nothing
                        // new: no read of its thousands of entries.
                        let stamp = settled_mtime(&dir).map(|m| (m, set));
                        if stamp.is_some() && passed.get(&dir) == stamp.as_ref() {
                            continue;
                        }
                        for file in yaml_files(&dir) {
                            apply(&file, &wanted, &mut applied);
                        }
                        match stamp {
                            Some(stamp) => passed.insert(dir, stamp),
                            None => passed.remove(&dir),
                        };
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        SnapshotController {
            statuses,
            stop,
            thread: Some(thread),
        }
    }

    /// The status snapshot `name` gets once it exists (now, if it does).
    pub fn set(&self, name: &str, status: Value) {
        let mut statuses = self.statuses.lock().unwrap_or_else(|p| p.into_inner());
        statuses.0 += 1;
        Arc::make_mut(&mut statuses.1).insert(name.to_string(), status);
    }
}

impl Drop for SnapshotController {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Every VolumeSnapshot file of the overlay
/// (`volumesnapshots.<group>/<namespace>/<name>.yaml`).
pub fn snapshot_files(overlay: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = snapshot_dirs(overlay)
        .iter()
        .flat_map(|dir| yaml_files(dir))
        .collect();
    out.sort();
    out
}

/// The overlay's VolumeSnapshot namespace directories.
fn snapshot_dirs(overlay: &Path) -> Vec<PathBuf> {
    let Ok(resources) = std::fs::read_dir(overlay) else {
        return Vec::new();
    };
    resources
        .flatten()
        .filter(|r| {
            r.file_name()
                .to_string_lossy()
                .starts_with("volumesnapshots.")
        })
        .flat_map(|r| std::fs::read_dir(r.path()).into_iter().flatten().flatten())
        .map(|ns| ns.path())
        .collect()
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|f| f.path())
        .filter(|f| f.extension().is_some_and(|e| e == "yaml"))
        .collect()
}

/// The directory's mtime, when it is old enough to change with the next
/// entry added (file times come from a coarse clock; the manifest
/// cluster's listings wait as long, `iar::cluster::SETTLED`); `None`
/// otherwise.
fn settled_mtime(dir: &Path) -> Option<SystemTime> {
    const SETTLED: Duration = Duration::from_millis(100);
    let at = mtime(dir)?;
    let age = SystemTime::now().duration_since(at).ok()?;
    (age >= SETTLED).then_some(at)
}

/// What was last seen set on each file: the status, and the file's mtime
/// then. A file unchanged since, whose wanted status is the same, is not
/// read again (the backup benchmarks' overlay holds 2,500 snapshots).
type Applied = HashMap<PathBuf, (Option<SystemTime>, Value)>;

fn mtime(file: &Path) -> Option<SystemTime> {
    std::fs::metadata(file).and_then(|m| m.modified()).ok()
}

/// Sets the wanted status on one snapshot's file, if it is not set yet:
/// written to a temporary name and renamed over, so that a lookup never
/// reads half a file.
fn apply(file: &Path, wanted: &HashMap<String, Value>, applied: &mut Applied) {
    let Some(name) = file.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
        return;
    };
    let Some(status) = wanted.get(&name) else {
        return;
    };
    if applied
        .get(file)
        .is_some_and(|(at, set)| at.is_some() && *at == mtime(file) && set == status)
    {
        return;
    }
    let Ok(text) = std::fs::read_to_string(file) else {
        return;
    };
    let Ok(mut object) = serde_saphyr::from_str::<Value>(&text) else {
        return;
    };
    if object["status"] != *status {
        object["status"] = status.clone();
        let tmp = file.with_extension("status-tmp");
        if std::fs::write(&tmp, serde_saphyr::to_string(&object).expect("a value")).is_err()
            || std::fs::rename(&tmp, file).is_err()
        {
            return;
        }
    }
    applied.insert(file.to_path_buf(), (mtime(file), status.clone()));
}
