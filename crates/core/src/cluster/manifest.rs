//! A directory of manifests playing the part of a cluster
//! ([`ManifestCluster`]): what `iar backup` lists and what plugins'
//! lookups read, through a parse cache keyed by each file's mtime and
//! length.

use super::listing::Listings;
use super::{ClusterError, ClusterReader, list_answer};
use crate::catalog::{Catalog, GroupResource};
use crate::clock::{Clock, RealClock};
use crate::item::{Item, ItemRef};
use crate::manifests;
use crate::select::BackupFilter;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Instant, SystemTime};

pub(super) struct CachedFile {
    modified: Option<SystemTime>,
    len: u64,
    pub(super) items: Vec<Item>,
}

/// Where a list looks: a kind in one namespace.
#[derive(Hash, PartialEq, Eq)]
struct Scope {
    group: String,
    resource: String,
    namespace: String,
}

impl Scope {
    fn of(id: &ItemRef) -> Scope {
        Scope {
            group: id.group.clone(),
            resource: id.resource.clone(),
            namespace: id.namespace.clone(),
        }
    }
}

#[derive(Default)]
pub(super) struct Cache {
    pub(super) files: HashMap<PathBuf, CachedFile>,
    /// Which file last held each object, and where in that file's items:
    /// a lookup is a hash probe, not a walk through a 2,500-object List.
    /// The file's path is shared by its objects' entries (one allocation
    /// per file, not one per object).
    index: HashMap<ItemRef, (Arc<Path>, usize)>,
    /// The same objects by kind and namespace: a plugin listing the pods
    /// of one namespace (pvc-snapshot does, per claim) reads those, not
    /// every object of the backup.
    scopes: HashMap<Scope, HashSet<ItemRef>>,
    /// Which files there are.
    listings: Listings,
    /// When a miss last re-checked every file, and how many times one did.
    last_full_scan: Option<Instant>,
    full_scans: u64,
    /// Where the parsed objects' texts are kept ([`crate::spool`]): the
    /// cache holds positions, so its memory does not grow with the
    /// manifests' size. `None` until the first file is read; `Some(None)`
    /// when no spool could be made (the texts stay in memory).
    pub(super) spool: Option<Option<Arc<crate::spool::Spool>>>,
}

/// How often a miss or a list may re-check every manifest file: a file
/// edited in place to add an object (playing a controller) is seen within
/// this. A new file is seen at once.
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
    pub(super) catalog: &'static Catalog,
    pub(super) cache: RwLock<Cache>,
    /// What [`MISS_RESCAN`] is measured by: the real clock, or a test's.
    clock: Arc<dyn Clock>,
}

fn modified(path: &Path) -> Result<(Option<SystemTime>, u64), ClusterError> {
    let meta = std::fs::metadata(path).map_err(ClusterError::io(path))?;
    Ok((meta.modified().ok(), meta.len()))
}

impl Cache {
    /// Forgets what `file` held when it was last read: the index entries
    /// that still point at it (an object that moved on points elsewhere).
    fn forget_items(&mut self, file: &Path) {
        let Some(old) = self.files.remove(file) else {
            return;
        };
        for item in old.items {
            if self.index.get(&item.id).is_some_and(|(f, _)| **f == *file) {
                self.index.remove(&item.id);
                let scope = Scope::of(&item.id);
                if let Some(ids) = self.scopes.get_mut(&scope) {
                    ids.remove(&item.id);
                    if ids.is_empty() {
                        self.scopes.remove(&scope);
                    }
                }
            }
        }
    }

    /// Whether a full scan ended within [`MISS_RESCAN`] of `clock`'s now.
    fn scanned_recently(&self, clock: &dyn Clock) -> bool {
        self.last_full_scan
            .is_some_and(|at| clock.now().saturating_duration_since(at) < MISS_RESCAN)
    }

    /// Reads the files new to the listing when `recent`; otherwise checks
    /// every file, re-reading those that changed, and notes when it ended.
    fn scan(
        &mut self,
        recent: bool,
        clock: &dyn Clock,
        catalog: &Catalog,
    ) -> Result<(), ClusterError> {
        let files = if recent {
            self.listings.take_unread()
        } else {
            self.listings.all_sorted()
        };
        for file in files {
            self.refresh(&file, catalog)?;
        }
        if !recent {
            self.last_full_scan = Some(clock.now());
            self.full_scans += 1;
        }
        Ok(())
    }

    /// The object, if the file it was last read from is still listed.
    fn lookup_listed(&self, id: &ItemRef) -> Option<&Item> {
        let (file, _) = self.index.get(id)?;
        if self.listings.contains(file) {
            self.lookup(id)
        } else {
            None
        }
    }

    /// Re-reads a file if it changed since it was parsed.
    fn refresh(&mut self, file: &Path, catalog: &Catalog) -> Result<(), ClusterError> {
        let (modified, len) = match modified(file) {
            Ok(m) => m,
            Err(_) => {
                // Gone: forget what it held.
                self.forget_items(file);
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
            self.forget_items(file);
            self.index.reserve(items.len());
            let shared: Arc<Path> = Arc::from(file);
            for (at, item) in items.iter().enumerate() {
                self.index.insert(item.id.clone(), (shared.clone(), at));
                self.scopes
                    .entry(Scope::of(&item.id))
                    .or_default()
                    .insert(item.id.clone());
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
            clock: RealClock::shared(),
        }
    }

    /// Measures [`MISS_RESCAN`] by `clock` instead of the real one: a test
    /// steps it to the next period instead of sleeping.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
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
            if !cache.listings.listed_once() {
                return None;
            }
            let (file, _) = cache
                .index
                .get(id)
                .filter(|(f, _)| cache.listings.contains(f))?;
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
        self.find_item_in(id, &self.lookup_paths)
    }

    /// The object as the sources hold it, the overlay's directories not
    /// re-listed (see [`overlay`](super::overlay)'s create).
    pub(super) fn get_from_sources(&self, id: &ItemRef) -> Result<Option<Value>, ClusterError> {
        Ok(self
            .find_item_in(id, &self.paths)?
            .map(|item| item.value().clone()))
    }

    /// Finds `id`, re-listing the directories of `paths` first.
    fn find_item_in(&self, id: &ItemRef, paths: &[PathBuf]) -> Result<Option<Item>, ClusterError> {
        if let Some(found) = self.get_unchanged(id) {
            return Ok(Some(found));
        }
        // The write lock guards the parse cache; it is held while a changed
        // file is re-read so that concurrent lookups do not parse it twice
        // (atomicity is the point: listing, files and index change together).
        let mut cache = self.cache.write().map_err(|_| ClusterError::Poisoned)?;
        let relisted = cache.listings.update(paths)?;
        // Fast path: the file that held the object, if it is still listed.
        if let Some((file, _)) = cache.index.get(id).cloned()
            && cache.listings.contains(&file)
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
        // taking a `stat` of every file under the write lock. Within the
        // period only the files new to the listing are read (a plugin
        // creating thousands of objects, one overlay file each, looks each
        // up first), and edits in place wait for the next full scan.
        let recent = cache.scanned_recently(&*self.clock);
        if recent && !relisted {
            return Ok(None);
        }
        cache.scan(recent, &*self.clock, self.catalog)?;
        Ok(cache.lookup_listed(id).cloned())
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
        cache.listings.update(&self.lookup_paths)?;
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

    /// Every file under the sources and the overlay: new files at once,
    /// files edited in place within [`MISS_RESCAN`], as for a miss.
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
        cache.listings.update(&self.lookup_paths)?;
        let recent = cache.scanned_recently(&*self.clock);
        cache.scan(recent, &*self.clock, self.catalog)?;
        let found: Vec<Item> = cache
            .scopes
            .iter()
            .filter(|(scope, _)| {
                scope.group == gr.group
                    && scope.resource == gr.resource
                    && (namespace.is_empty() || scope.namespace == namespace)
            })
            .flat_map(|(_, ids)| ids)
            .filter_map(|id| cache.lookup_listed(id))
            .filter(|item| selector.matches_with(|| item.labels()))
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
