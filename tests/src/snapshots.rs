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

/// Plays the snapshot controller until dropped.
pub struct SnapshotController {
    statuses: Arc<Mutex<HashMap<String, Value>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SnapshotController {
    /// Watches `overlay` (every 10 ms) for VolumeSnapshots.
    pub fn start(overlay: &Path) -> SnapshotController {
        let statuses: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (statuses, stop, overlay) = (statuses.clone(), stop.clone(), overlay.to_path_buf());
            std::thread::spawn(move || {
                let mut applied = HashMap::new();
                while !stop.load(Ordering::Relaxed) {
                    let wanted = statuses.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    for file in snapshot_files(&overlay) {
                        apply(&file, &wanted, &mut applied);
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
        self.statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), status);
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
    let mut out = Vec::new();
    let Ok(resources) = std::fs::read_dir(overlay) else {
        return out;
    };
    for resource in resources.flatten() {
        if !resource
            .file_name()
            .to_string_lossy()
            .starts_with("volumesnapshots.")
        {
            continue;
        }
        for ns in std::fs::read_dir(resource.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            for file in std::fs::read_dir(ns.path()).into_iter().flatten().flatten() {
                if file.path().extension().is_some_and(|e| e == "yaml") {
                    out.push(file.path());
                }
            }
        }
    }
    out.sort();
    out
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
    let Ok(mut object) = serde_yaml::from_str::<Value>(&text) else {
        return;
    };
    if object["status"] != *status {
        object["status"] = status.clone();
        let tmp = file.with_extension("status-tmp");
        if std::fs::write(&tmp, serde_yaml::to_string(&object).expect("a value")).is_err()
            || std::fs::rename(&tmp, file).is_err()
        {
            return;
        }
    }
    applied.insert(file.to_path_buf(), (mtime(file), status.clone()));
}
