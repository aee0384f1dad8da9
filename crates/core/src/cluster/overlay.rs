//! The manifest cluster's overlay: where the objects plugins create go when
//! the cluster is a directory of manifests (`iar backup --items`). One YAML
//! file per object, `<dir>/<resource>.<group>/<namespace>/<name>.yaml`
//! (`core` for the core group, `_cluster` for no namespace), read back by
//! every lookup like any other manifest: editing a file plays the part of
//! the controller that would act on the object (the snapshot controller
//! marking a VolumeSnapshot ready).

use super::{ClusterError, ClusterReader, ClusterWriter, Created, ManifestCluster, writes};
use crate::item::ItemRef;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Where the overlay keeps `id`. The parts passed the identifier check (no
/// `/`, no `..`), so the path stays under `dir`.
pub fn path_of(dir: &Path, id: &ItemRef) -> PathBuf {
    let group = if id.group.is_empty() {
        "core"
    } else {
        &id.group
    };
    let namespace = if id.namespace.is_empty() {
        "_cluster"
    } else {
        &id.namespace
    };
    dir.join(format!("{}.{group}", id.resource))
        .join(namespace)
        .join(format!("{}.yaml", id.name))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ClusterError + '_ {
    move |source| ClusterError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `object` as `id` unless a file for it exists: written to a
/// temporary name (not a manifest's, so no lookup reads it half-written),
/// then linked into place, which fails if the name is taken. Of two
/// writers racing for one name, exactly one creates it. Returns false when
/// it existed.
pub fn create(dir: &Path, id: &ItemRef, object: &Value) -> Result<bool, ClusterError> {
    let path = path_of(dir, id);
    let parent = path.parent().expect("path_of has parents");
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let tmp = staged(parent, id, object)?;
    match std::fs::hard_link(tmp.path(), &path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io(&path)(e)),
    }
}

/// `object` as YAML in a temporary file of `parent` (a name no lookup
/// reads as a manifest), for the caller to link or rename into place.
fn staged(
    parent: &Path,
    id: &ItemRef,
    object: &Value,
) -> Result<tempfile::NamedTempFile, ClusterError> {
    let text = crate::yaml::to_string(object).map_err(|e| ClusterError::Api {
        what: format!("writing {id} to the overlay"),
        source: Box::new(e),
    })?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".writing-")
        .suffix(".tmp")
        .tempfile_in(parent)
        .map_err(io(parent))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(io(tmp.path()))?;
    Ok(tmp)
}

/// Removes the overlay's file for `id`; false when there was none.
pub fn delete(dir: &Path, id: &ItemRef) -> Result<bool, ClusterError> {
    let path = path_of(dir, id);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io(&path)(e)),
    }
}

/// What the overlay holds, as (identifier, path), sorted: `iar describe`
/// lists it.
pub fn objects(dir: &Path) -> Vec<(ItemRef, PathBuf)> {
    let mut out = Vec::new();
    let Ok(resources) = std::fs::read_dir(dir) else {
        return out;
    };
    for resource in resources.flatten() {
        let rname = resource.file_name().to_string_lossy().into_owned();
        let Some((resource_name, group)) = rname.split_once('.') else {
            continue;
        };
        let group = if group == "core" { "" } else { group };
        let Ok(namespaces) = std::fs::read_dir(resource.path()) else {
            continue;
        };
        for ns in namespaces.flatten() {
            let nsname = ns.file_name().to_string_lossy().into_owned();
            let namespace = if nsname == "_cluster" { "" } else { &nsname };
            let Ok(files) = std::fs::read_dir(ns.path()) else {
                continue;
            };
            for file in files.flatten() {
                let fname = file.file_name().to_string_lossy().into_owned();
                if let Some(name) = fname.strip_suffix(".yaml") {
                    out.push((
                        ItemRef::new(
                            group.to_string(),
                            resource_name.to_string(),
                            namespace.to_string(),
                            name.to_string(),
                        ),
                        file.path(),
                    ));
                }
            }
        }
    }
    out.sort();
    out
}

/// A manifest cluster with an overlay takes writes there.
impl ClusterWriter for ManifestCluster {
    /// Into the overlay, with the uid and creation time an API server
    /// would give it.
    fn create_within(
        &self,
        id: &ItemRef,
        mut object: Value,
        _budget: std::time::Duration,
    ) -> Result<Created, ClusterError> {
        let Some(dir) = &self.overlay else {
            return Err(ClusterError::ReadOnly);
        };
        // Whether it exists: the overlay keeps an object in its own file
        // only, so its other files are not looked through; the sources
        // are. (A plugin filling the overlay, one file per create, had
        // made every create re-list a directory of all the files before.)
        let existing = if path_of(dir, id).exists() {
            self.get(id)?
        } else {
            self.get_from_sources(id)?
        };
        if let Some(existing) = existing {
            return Ok(Created::Existing(existing));
        }
        let now = SystemTime::now();
        let uid = crate::names::uid_for(&id.to_string(), now);
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("uid".into(), Value::String(uid));
            meta.insert("resourceVersion".into(), Value::String("1".into()));
            meta.insert(
                "creationTimestamp".into(),
                Value::String(humantime::format_rfc3339_seconds(now).to_string()),
            );
        }
        if create(dir, id, &object)? {
            Ok(Created::New(object))
        } else {
            // Another writer got there first: its object, as written.
            Ok(Created::Existing(self.get(id)?.unwrap_or(object)))
        }
    }

    /// Only an object of the overlay: the sources are the operator's.
    /// Rewritten in place (a temporary file renamed over it). As an API
    /// server does: an object that carries a `metadata.resourceVersion`
    /// replaces only that version (else [`ClusterError::Conflict`]), and
    /// what is written gets the next one.
    fn replace_within(
        &self,
        id: &ItemRef,
        mut object: Value,
        _budget: std::time::Duration,
    ) -> Result<Value, ClusterError> {
        let Some(dir) = &self.overlay else {
            return Err(ClusterError::ReadOnly);
        };
        let path = path_of(dir, id);
        // Held across the read, the compare and the rename: that is what
        // makes the version check a compare-and-swap between this
        // process's writers (one process writes an overlay).
        static REPLACING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = REPLACING.lock().unwrap_or_else(|p| p.into_inner());
        if !path.exists() {
            return Err(ClusterError::Refused(format!(
                "replacing {id}: it is not in the overlay {} (the manifests it came from are read only)",
                dir.display()
            )));
        }
        // The file itself, not the parse cache: a rewrite within the
        // cache's timestamp granularity, of the same length, would read
        // as the version before it.
        let stored = crate::manifests::read_file(&path, self.catalog)?
            .into_iter()
            .find(|item| item.id == *id)
            .map(|item| item.value().clone())
            .ok_or_else(|| {
                ClusterError::NotFound(format!("replacing {id}: it is no longer in the overlay"))
            })?;
        let version = |o: &Value| {
            o["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string()
        };
        let (had, given) = (version(&stored), version(&object));
        if !given.is_empty() && given != had {
            return Err(ClusterError::Conflict(format!(
                "replacing {id}: the object is at version {had:?}, not {given:?}: it changed since it was read"
            )));
        }
        let next = had.parse::<u64>().unwrap_or(0) + 1;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(next.to_string()));
        }
        let parent = path.parent().expect("path_of has parents");
        staged(parent, id, &object)?
            .persist(&path)
            .map_err(|e| io(&path)(e.error))?;
        Ok(object)
    }

    /// Only from the overlay: the sources are the operator's, never a
    /// plugin's to delete.
    fn delete_within(
        &self,
        id: &ItemRef,
        uid: &str,
        _budget: std::time::Duration,
    ) -> Result<bool, ClusterError> {
        let Some(dir) = &self.overlay else {
            return Err(ClusterError::ReadOnly);
        };
        if !path_of(dir, id).exists() {
            return Ok(false);
        }
        match self.get(id)? {
            Some(found) if writes::uid_of(&found) == uid => delete(dir, id),
            _ => Ok(false),
        }
    }
}
