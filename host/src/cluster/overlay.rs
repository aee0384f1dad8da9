//! The manifest cluster's overlay: where the objects plugins create go when
//! the cluster is a directory of manifests (`iar backup --items`). One YAML
//! file per object, `<dir>/<resource>.<group>/<namespace>/<name>.yaml`
//! (`core` for the core group, `_cluster` for no namespace), read back by
//! every lookup like any other manifest: editing a file plays the part of
//! the controller that would act on the object (the snapshot controller
//! marking a VolumeSnapshot ready).

use super::ClusterError;
use crate::item::ItemRef;
use serde_json::Value;
use std::path::{Path, PathBuf};

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
    let text = serde_yaml::to_string(object).map_err(|e| ClusterError::Api {
        what: format!("writing {id} to the overlay"),
        source: Box::new(e),
    })?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".creating-")
        .suffix(".tmp")
        .tempfile_in(parent)
        .map_err(io(parent))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(io(tmp.path()))?;
    match std::fs::hard_link(tmp.path(), &path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io(&path)(e)),
    }
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
                        ItemRef {
                            group: group.to_string(),
                            resource: resource_name.to_string(),
                            namespace: namespace.to_string(),
                            name: name.to_string(),
                        },
                        file.path(),
                    ));
                }
            }
        }
    }
    out.sort();
    out
}
