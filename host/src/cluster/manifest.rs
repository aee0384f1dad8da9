//! A directory of manifests playing the part of a cluster
//! ([`ManifestCluster`]): what `iar backup` lists and what plugins'
//! lookups read, through a parse cache keyed by each file's mtime and
//! length.

use super::{ClusterError, ClusterReader, list_answer};
use crate::catalog::{Catalog, GroupResource};
use crate::item::{Item, ItemRef};
use crate::manifests;
use crate::select::BackupFilter;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

pub(super) struct CachedFile {
    modified: Option<SystemTime>,
    len: u64,
    pub(super) items: Vec<Item>,
}

/// One directory's listing: its mtime when listed, its manifest files, its
/// subdirectories.
type Listing = (Option<SystemTime>, Vec<PathBuf>, Vec<PathBuf>);

#[derive(Default)]
pub(super) struct Cache {
    pub(super) files: HashMap<PathBuf, CachedFile>,
    /// Which file last held each object, and where in that file's items:
    /// a lookup is a hash probe, not a walk through a 2,500-object List.
    /// The file's path is shared by its objects' entries (one allocation
    /// per file, not one per object).
    index: HashMap<ItemRef, (Arc<Path>, usize)>,
    /// Directory listings (files, subdirectories), valid while the
    /// directory's mtime is unchanged: adding, removing or renaming an entry
    /// changes it.
    dirs: HashMap<PathBuf, Listing>,
    /// Every manifest file under the paths, rebuilt when a listing changes.
    all: Vec<PathBuf>,
    all_set: std::collections::HashSet<PathBuf>,
    /// When a miss last re-checked every file, and how many times one did.
    last_full_scan: Option<std::time::Instant>,
    full_scans: u64,
    /// Where the parsed objects' texts are kept ([`crate::spool`]): the
    /// cache holds positions, so its memory does not grow with the
    /// manifests' size. `None` until the first file is read; `Some(None)`
    /// when no spool could be made (the texts stay in memory).
    pub(super) spool: Option<Option<Arc<crate::spool::Spool>>>,
}

/// How often a miss may re-check every manifest file: a file edited in
/// place to add an object (playing a controller) is seen within this.
pub const MISS_RESCAN: std::time::Duration = std::time::Duration::from_millis(250);

/// A directory (or files) of manifests playing the part of a cluster. Every
/// answer reflects the files as they are on disk at that moment, so editing
/// one plays the part of a controller (a VolumeSnapshot becoming ready); a
/// parse cache keyed by mtime and length keeps a lookup to a few `stat`s.
pub struct ManifestCluster {
    /// The sources: what `list` lists.
    paths: Vec<PathBuf>,
    /// The sources and the overlay: what lookups read.
    lookup_paths: Vec<PathBuf>,
    /// Where created objects go ([`overlay`](super::overlay)); none: writes are refused.
    pub(super) overlay: Option<PathBuf>,
    catalog: &'static Catalog,
    pub(super) cache: RwLock<Cache>,
}

fn modified(path: &Path) -> Result<(Option<SystemTime>, u64), ClusterError> {
    let meta = std::fs::metadata(path).map_err(ClusterError::io(path))?;
    Ok((meta.modified().ok(), meta.len()))
}

impl Cache {
    /// Re-lists the directories under `path` whose mtime changed; returns
    /// whether any did.
    fn relist(&mut self, path: &Path) -> Result<bool, ClusterError> {
        if !path.is_dir() {
            return Ok(false);
        }
        let (mtime, _) = modified(path)?;
        let mut changed = false;
        if !self
            .dirs
            .get(path)
            .is_some_and(|(m, _, _)| *m == mtime && mtime.is_some())
        {
            let mut files = Vec::new();
            let mut subdirs = Vec::new();
            for entry in std::fs::read_dir(path).map_err(ClusterError::io(path))? {
                let entry = entry.map_err(ClusterError::io(path))?;
                // The entry's type as the directory listing gives it, with
                // no `stat` per entry (an overlay directory of thousands of
                // created objects is re-listed on every create); a symlink
                // is followed, as before.
                let is_dir = match entry.file_type() {
                    Ok(t) if !t.is_symlink() => t.is_dir(),
                    _ => entry.path().is_dir(),
                };
                let entry = entry.path();
                if is_dir {
                    subdirs.push(entry);
                } else if manifests::is_manifest(&entry) {
                    files.push(entry);
                }
            }
            files.sort();
            subdirs.sort();
            self.dirs
                .insert(path.to_path_buf(), (mtime, files, subdirs));
            changed = true;
        }
        for sub in self.dirs[path].2.clone() {
            changed |= self.relist(&sub)?;
        }
        Ok(changed)
    }

    fn collect(&self, path: &Path, out: &mut Vec<PathBuf>) {
        match self.dirs.get(path) {
            None => out.push(path.to_path_buf()),
            Some((_, files, subdirs)) => {
                out.extend(files.iter().cloned());
                for sub in subdirs {
                    self.collect(sub, out);
                }
            }
        }
    }

    /// Brings the list of files up to date: a `stat` per directory.
    /// Returns whether the listing changed.
    fn update_listing(&mut self, paths: &[PathBuf]) -> Result<bool, ClusterError> {
        let mut changed = self.all.is_empty();
        for path in paths {
            changed |= self.relist(path)?;
        }
        if changed {
            let mut all = Vec::new();
            for path in paths {
                self.collect(path, &mut all);
            }
            self.all_set = all.iter().cloned().collect();
            self.all = all;
        }
        Ok(changed)
    }

    /// Re-reads a file if it changed since it was parsed.
    fn refresh(&mut self, file: &Path, catalog: &Catalog) -> Result<(), ClusterError> {
        let (modified, len) = match modified(file) {
            Ok(m) => m,
            Err(_) => {
                // Gone: forget what it held.
                if let Some(old) = self.files.remove(file) {
                    for item in old.items {
                        self.index.remove(&item.id);
                    }
                }
                return Ok(());
            }
        };
        let fresh = self
            .files
            .get(file)
            .is_some_and(|c| c.modified == modified && c.len == len && modified.is_some());
        if !fresh {
            // Each object is spooled as it is read: neither the file's
            // objects nor their texts are ever in memory together.
            let spool = self.spool();
            let mut items = manifests::read_file_with(file, catalog, &mut |item| match &spool {
                Some(spool) => item.spooled(spool),
                None => item,
            })?;
            // Kept for the whole backup: without the slack of its growth
            // (up to half again), and the index grown once, not doubled.
            items.shrink_to_fit();
            self.index.reserve(items.len());
            let shared: Arc<Path> = Arc::from(file);
            for (at, item) in items.iter().enumerate() {
                self.index.insert(item.id.clone(), (shared.clone(), at));
            }
            self.files.insert(
                file.to_path_buf(),
                CachedFile {
                    modified,
                    len,
                    items,
                },
            );
        }
        Ok(())
    }

    /// The spool, made on first use.
    fn spool(&mut self) -> Option<Arc<crate::spool::Spool>> {
        self.spool
            .get_or_insert_with(|| match crate::spool::Spool::new() {
                Ok(spool) => Some(spool),
                Err(e) => {
                    tracing::warn!(
                        "no spool in the temporary directory ({e}): manifests are kept in memory"
                    );
                    None
                }
            })
            .clone()
    }

    fn lookup(&self, id: &ItemRef) -> Option<&Item> {
        let (file, at) = self.index.get(id)?;
        self.files
            .get(&**file)?
            .items
            .get(*at)
            .filter(|i| &i.id == id)
    }
}

impl ManifestCluster {
    pub fn new(paths: Vec<PathBuf>) -> Self {
        ManifestCluster {
            lookup_paths: paths.clone(),
            paths,
            overlay: None,
            catalog: Catalog::builtin(),
            cache: RwLock::new(Cache::default()),
        }
    }

    /// Objects plugins create go to `dir` (made on the first create), and
    /// lookups read it after the sources; `list` does not (what a backup
    /// lists is its sources). See [`overlay`](super::overlay).
    pub fn with_overlay(mut self, dir: PathBuf) -> Self {
        self.lookup_paths = self.paths.clone();
        self.lookup_paths.push(dir.clone());
        self.overlay = Some(dir);
        self
    }

    /// The overlay directory, if writes go to one.
    pub fn overlay(&self) -> Option<&Path> {
        self.overlay.as_deref()
    }

    /// How many lookups that missed re-checked every file.
    pub fn full_scans(&self) -> u64 {
        self.cache.read().map_or(0, |c| c.full_scans)
    }
}

impl ManifestCluster {
    /// The fast path: answers a lookup whose file is unchanged since it was
    /// read, under the read lock only, so hits on many workers do not wait
    /// for each other. `None` means "take the slow path". One `stat`, with
    /// no lock held: a file that changed, moved or went takes the slow path
    /// (which re-lists the directories); a copy of the object added to
    /// another file meanwhile is not looked for (two files holding one
    /// object is ambiguous anyway, and the one already read answers).
    fn get_unchanged(&self, id: &ItemRef) -> Option<Item> {
        let (file, file_stamp) = {
            let cache = self.cache.read().ok()?;
            if cache.all.is_empty() {
                return None;
            }
            let (file, _) = cache
                .index
                .get(id)
                .filter(|(f, _)| cache.all_set.contains(&**f))?;
            let cached = cache.files.get(&**file)?;
            (file.clone(), (cached.modified, cached.len))
        };
        let now = modified(&file).ok()?;
        if now != file_stamp || now.0.is_none() {
            return None;
        }
        let cache = self.cache.read().ok()?;
        let cached = cache.files.get(&*file)?;
        // Re-checked under the lock: a writer may have re-read it meanwhile.
        if (cached.modified, cached.len) != file_stamp {
            return None;
        }
        cache.lookup(id).cloned()
    }

    /// Finds an object as the files are now: a copy of the cached item
    /// (which holds its spool position, or shares its text), answered from
    /// outside the lock, so the cache's own items never load a text.
    fn find<R>(
        &self,
        id: &ItemRef,
        answer: impl Fn(&Item) -> R,
    ) -> Result<Option<R>, ClusterError> {
        Ok(self.find_item(id)?.map(|item| answer(&item)))
    }

    fn find_item(&self, id: &ItemRef) -> Result<Option<Item>, ClusterError> {
        if let Some(found) = self.get_unchanged(id) {
            return Ok(Some(found));
        }
        // The write lock guards the parse cache; it is held while a changed
        // file is re-read so that concurrent lookups do not parse it twice
        // (atomicity is the point: listing, files and index change together).
        let mut cache = self.cache.write().map_err(|_| ClusterError::Poisoned)?;
        let relisted = cache.update_listing(&self.lookup_paths)?;
        // Fast path: the file that held the object, if it is still listed.
        if let Some((file, _)) = cache.index.get(id).cloned()
            && cache.all_set.contains(&*file)
        {
            cache.refresh(&file, self.catalog)?;
            if let Some(found) = cache.lookup(id) {
                return Ok(Some(found.clone()));
            }
        }
        // A miss, or the object moved: every file, changed ones re-read.
        // At most once per MISS_RESCAN unless the listing changed: misses
        // in between (a plugin asking for names that do not exist, as fast
        // as it can) are answered from the last scan instead of each
        // taking a `stat` of every file under the write lock.
        let recent = cache
            .last_full_scan
            .is_some_and(|at| at.elapsed() < MISS_RESCAN);
        if recent && !relisted {
            return Ok(None);
        }
        // Within the period only the listing changed: the files new to it
        // are read, and edits in place wait for the next full scan, as they
        // do for any miss within the period. (A plugin creating thousands of
        // objects, one overlay file each, each create looking its object up
        // first, had made every create stat every file.)
        let files: Vec<PathBuf> = cache
            .all
            .iter()
            .filter(|f| !recent || !cache.files.contains_key(*f))
            .cloned()
            .collect();
        for file in files {
            cache.refresh(&file, self.catalog)?;
        }
        if !recent {
            cache.last_full_scan = Some(std::time::Instant::now());
            cache.full_scans += 1;
        }
        let listed = cache
            .index
            .get(id)
            .is_some_and(|(f, _)| cache.all_set.contains(&**f));
        Ok(if listed {
            cache.lookup(id).cloned()
        } else {
            None
        })
    }
}

#[async_trait::async_trait]
impl ClusterReader for ManifestCluster {
    /// Every object, in the order `manifests::read_items` gives, read
    /// through the parse cache: the lookups that follow in the same backup
    /// (item blocks, additional items, post-operation items) find them
    /// parsed, and the items listed hold the cache's spool positions.
    async fn list(&self, filter: &BackupFilter) -> Result<Vec<Item>, ClusterError> {
        let mut files = Vec::new();
        for path in &self.paths {
            files.extend(manifests::manifest_files(path)?);
        }
        // The write lock is held across the reads, as in `find`: listing,
        // files and index change together.
        let mut cache = self.cache.write().map_err(|_| ClusterError::Poisoned)?;
        cache.update_listing(&self.lookup_paths)?;
        let mut items = Vec::new();
        for file in &files {
            cache.refresh(file, self.catalog)?;
            if let Some(cached) = cache.files.get(file) {
                items.extend(cached.items.iter().filter(|i| filter.matches(i)).cloned());
            }
        }
        Ok(items)
    }

    async fn list_sources(
        &self,
        sources: &[PathBuf],
        filter: &BackupFilter,
    ) -> Option<Result<Vec<Item>, ClusterError>> {
        if sources == self.paths.as_slice() {
            Some(self.list(filter).await)
        } else {
            None
        }
    }

    fn get(&self, id: &ItemRef) -> Result<Option<Value>, ClusterError> {
        self.find(id, |item| item.value().clone())
    }

    /// The cached item itself: a clone shares its value and text.
    fn get_item(&self, id: &ItemRef) -> Result<Option<Item>, ClusterError> {
        self.find(id, Item::clone)
    }

    async fn get_item_async(&self, id: &ItemRef) -> Result<Option<Item>, ClusterError> {
        self.get_item(id)
    }

    /// Every file under the sources and the overlay, as they are now.
    fn list_within(
        &self,
        gr: &GroupResource,
        namespace: &str,
        selector: &crate::select::labels::LabelSelector,
        limit: usize,
        _budget: std::time::Duration,
    ) -> Result<Vec<Arc<str>>, ClusterError> {
        // The write lock, as in `find`: listing, files and index change
        // together.
        let mut cache = self.cache.write().map_err(|_| ClusterError::Poisoned)?;
        cache.update_listing(&self.lookup_paths)?;
        for file in cache.all.clone() {
            cache.refresh(&file, self.catalog)?;
        }
        let found: Vec<Item> = cache
            .index
            .iter()
            .filter(|(id, (file, _))| {
                id.group == gr.group
                    && id.resource == gr.resource
                    && (namespace.is_empty() || id.namespace == namespace)
                    && cache.all_set.contains(&**file)
            })
            .filter_map(|(id, _)| cache.lookup(id))
            .filter(|item| selector.matches(&item.labels()))
            .cloned()
            .collect();
        // Texts are read (from the spool) outside the lock.
        drop(cache);
        list_answer(gr, found, limit)
    }

    /// The text each cached object keeps (written on its first lookup):
    /// a plugin polling the same VolumeSnapshot is answered with a copy of
    /// the same bytes.
    fn get_json(&self, id: &ItemRef) -> Result<Option<Arc<str>>, ClusterError> {
        self.find(id, |item| item.json().clone())
    }
}
