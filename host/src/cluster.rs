//! Read-only cluster lookups offered to plugins (`cluster-get`), and which
//! resources an operator lets a plugin read.

use crate::item::{Item, ItemRef};
use crate::manifests;
use crate::resources::{Catalog, GroupResource};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// Answers `cluster-get`. Implementations must be cheap to call from a
/// blocking worker thread.
pub trait ClusterReader: Send + Sync {
    /// `Ok(None)` when the object does not exist.
    fn get(&self, id: &ItemRef) -> Result<Option<Value>, String>;
}

/// No cluster at all: every lookup finds nothing.
pub struct NoCluster;

impl ClusterReader for NoCluster {
    fn get(&self, _id: &ItemRef) -> Result<Option<Value>, String> {
        Ok(None)
    }
}

/// Which resources a plugin may read through `cluster-get`, as globs over
/// `resource.group` ("volumesnapshots.snapshot.storage.k8s.io", "pods").
#[derive(Clone, Debug)]
pub struct ReadGrants {
    allow: Vec<glob::Pattern>,
    deny: Vec<glob::Pattern>,
}

impl Default for ReadGrants {
    /// Everything but Secrets: a plugin that needs Secrets must be granted
    /// them by name, since they hold credentials.
    fn default() -> Self {
        ReadGrants {
            allow: vec![glob::Pattern::new("*").expect("valid glob")],
            deny: vec![glob::Pattern::new("secrets").expect("valid glob")],
        }
    }
}

impl ReadGrants {
    /// Exactly these resources (globs); nothing is denied beyond them.
    pub fn only<S: AsRef<str>>(patterns: &[S]) -> Result<Self, String> {
        let allow = patterns
            .iter()
            .map(|p| {
                glob::Pattern::new(p.as_ref())
                    .map_err(|e| format!("invalid read grant {:?}: {e}", p.as_ref()))
            })
            .collect::<Result<_, _>>()?;
        Ok(ReadGrants {
            allow,
            deny: Vec::new(),
        })
    }

    /// Nothing may be read.
    pub fn none() -> Self {
        ReadGrants {
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }

    pub fn allows(&self, gr: &GroupResource) -> bool {
        let name = gr.to_string();
        self.allow.iter().any(|p| p.matches(&name)) && !self.deny.iter().any(|p| p.matches(&name))
    }
}

struct CachedFile {
    modified: Option<SystemTime>,
    len: u64,
    items: Vec<Item>,
}

/// A directory (or files) of manifests playing the part of a cluster. Files
/// are read again when they change on disk, so editing one plays the part of
/// a controller (a VolumeSnapshot becoming ready).
pub struct ManifestCluster {
    paths: Vec<PathBuf>,
    catalog: &'static Catalog,
    cache: Mutex<HashMap<PathBuf, CachedFile>>,
}

impl ManifestCluster {
    pub fn new(paths: Vec<PathBuf>) -> Self {
        ManifestCluster {
            paths,
            catalog: Catalog::builtin(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn find_in_file(&self, file: &Path, id: &ItemRef) -> Result<Option<Value>, String> {
        let meta = std::fs::metadata(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let (modified, len) = (meta.modified().ok(), meta.len());
        // The lock only guards the parse cache; holding it while reading one
        // small file keeps two readers from parsing it twice.
        let mut cache = self.cache.lock().map_err(|_| "manifest cache poisoned")?;
        let fresh = cache
            .get(file)
            .is_some_and(|c| c.modified == modified && c.len == len && modified.is_some());
        if !fresh {
            let items = manifests::read_file(file, self.catalog).map_err(|e| e.to_string())?;
            cache.insert(
                file.to_path_buf(),
                CachedFile {
                    modified,
                    len,
                    items,
                },
            );
        }
        Ok(cache[file]
            .items
            .iter()
            .find(|item| &item.id == id)
            .map(|item| item.value.clone()))
    }
}

impl ClusterReader for ManifestCluster {
    fn get(&self, id: &ItemRef) -> Result<Option<Value>, String> {
        for path in &self.paths {
            for file in manifests::manifest_files(path).map_err(|e| e.to_string())? {
                if let Some(found) = self.find_in_file(&file, id)? {
                    return Ok(Some(found));
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gr(group: &str, resource: &str) -> GroupResource {
        GroupResource {
            group: group.into(),
            resource: resource.into(),
        }
    }

    #[test]
    fn secrets_need_an_explicit_grant() {
        let default = ReadGrants::default();
        assert!(default.allows(&gr("", "pods")));
        assert!(default.allows(&gr("snapshot.storage.k8s.io", "volumesnapshots")));
        assert!(!default.allows(&gr("", "secrets")));
        let only = ReadGrants::only(&["secrets", "*.snapshot.storage.k8s.io"]).unwrap();
        assert!(only.allows(&gr("", "secrets")));
        assert!(only.allows(&gr("snapshot.storage.k8s.io", "volumesnapshots")));
        assert!(!only.allows(&gr("", "pods")));
        assert!(!ReadGrants::none().allows(&gr("", "pods")));
        assert!(
            ReadGrants::only(&["[oops"])
                .unwrap_err()
                .contains("invalid read grant")
        );
    }

    #[test]
    fn manifest_cluster_sees_edits() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("vs.yaml");
        let write = |ready: bool| {
            let doc = format!(
                "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata: {{name: s, namespace: ns}}\nstatus: {{readyToUse: {ready}}}\n"
            );
            std::fs::write(&file, doc).unwrap();
        };
        write(false);
        let cluster = ManifestCluster::new(vec![dir.path().to_path_buf()]);
        let id = ItemRef {
            group: "snapshot.storage.k8s.io".into(),
            resource: "volumesnapshots".into(),
            namespace: "ns".into(),
            name: "s".into(),
        };
        let ready =
            |c: &ManifestCluster| c.get(&id).unwrap().unwrap()["status"]["readyToUse"].clone();
        assert_eq!(ready(&cluster), Value::Bool(false));
        // "true" is shorter than "false": the length alone shows the change
        // even when both writes land within one mtime tick.
        write(true);
        assert_eq!(ready(&cluster), Value::Bool(true));
        let missing = ItemRef {
            name: "other".into(),
            ..id.clone()
        };
        assert_eq!(cluster.get(&missing).unwrap(), None);
    }
}
