//! Which manifest files are under the manifest cluster's paths
//! ([`Listings`]), kept up to date by a `stat` per directory: a directory
//! is read again only when its mtime changed, and what changed is applied
//! to the set of files (a plugin creating thousands of objects adds a
//! file each to the overlay; the set is not rebuilt for each).

use super::ClusterError;
use crate::manifests;
use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How old a directory's mtime must be, when it is read, for an unchanged
/// mtime later to mean an unchanged directory. File times come from a
/// coarse clock (a kernel tick, up to 10 ms on Linux; more on some
/// filesystems): an entry added within the tick of the mtime we saw, after
/// we read the directory, leaves the mtime as it was. A directory changed
/// this recently is read again on every look until its mtime is older
/// (git's "racily clean" entries, for directories).
pub const SETTLED: Duration = Duration::from_millis(100);

/// One directory as last read.
struct Listing {
    mtime: Option<SystemTime>,
    /// Whether `mtime` was at least [`SETTLED`] old when the directory was
    /// read: only then does an unchanged mtime vouch for the listing.
    settled: bool,
    /// The manifest files' names: a directory read again is compared by
    /// name, and only what changed is joined into paths.
    names: HashSet<OsString>,
    subdirs: Vec<PathBuf>,
}

#[derive(Default)]
pub struct Listings {
    dirs: HashMap<PathBuf, Listing>,
    /// Every manifest file under the paths (and each path that is a file),
    /// by its path's bytes (hashed as bytes, not as path components).
    files: HashSet<OsString>,
    /// Files listed since the last [`take_unread`](Self::take_unread).
    unread: Vec<PathBuf>,
    listed_once: bool,
}

impl Listings {
    /// Brings the set of files up to date with the disk; returns whether
    /// it changed (always, the first time).
    pub fn update(&mut self, paths: &[PathBuf]) -> Result<bool, ClusterError> {
        let mut changed = !self.listed_once;
        self.listed_once = true;
        for path in paths {
            changed |= self.relist(path, true)?;
        }
        Ok(changed)
    }

    pub fn listed_once(&self) -> bool {
        self.listed_once
    }

    pub fn contains(&self, file: &Path) -> bool {
        self.files.contains(file.as_os_str())
    }

    /// The files listed since the last call.
    pub fn take_unread(&mut self) -> Vec<PathBuf> {
        std::mem::take(&mut self.unread)
    }

    /// Every file, sorted: when two files hold one object, the later one's
    /// copy answers, the same one each time.
    pub fn all_sorted(&mut self) -> Vec<PathBuf> {
        self.unread.clear();
        let mut all: Vec<PathBuf> = self.files.iter().map(PathBuf::from).collect();
        all.sort_unstable();
        all
    }

    fn add(&mut self, file: PathBuf) -> bool {
        let added = self.files.insert(file.as_os_str().to_owned());
        if added {
            self.unread.push(file);
        }
        added
    }

    fn remove(&mut self, file: &Path) -> bool {
        self.files.remove(file.as_os_str())
    }

    /// Re-reads `path` if it is a directory whose mtime changed (or was
    /// not settled), and its subdirectories likewise. A `root` that is not
    /// a directory is a file of its own.
    fn relist(&mut self, path: &Path, root: bool) -> Result<bool, ClusterError> {
        let meta = match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => meta,
            // Gone, or a file: nothing under it any more; a root that is a
            // file is listed itself.
            found => {
                let mut changed = self.forget(path);
                if root && found.is_ok() {
                    changed |= self.add(path.to_path_buf());
                } else {
                    changed |= self.remove(path);
                }
                return Ok(changed);
            }
        };
        // A root that was a file (or did not exist) is a directory now.
        let mut changed = self.remove(path);
        let mtime = meta.modified().ok();
        if let Some(known) = self.dirs.get(path)
            && known.settled
            && known.mtime == mtime
        {
            let subdirs = known.subdirs.clone();
            for sub in &subdirs {
                changed |= self.relist(sub, false)?;
            }
            return Ok(changed);
        }
        let read_at = SystemTime::now();
        let mut names = HashSet::new();
        let mut subdirs = Vec::new();
        for entry in std::fs::read_dir(path).map_err(ClusterError::io(path))? {
            let entry = entry.map_err(ClusterError::io(path))?;
            // The entry's type as the directory gives it, with no `stat`
            // per entry; a symlink is followed.
            let is_dir = match entry.file_type() {
                Ok(t) if !t.is_symlink() => t.is_dir(),
                _ => entry.path().is_dir(),
            };
            if is_dir {
                subdirs.push(entry.path());
            } else {
                let name = entry.file_name();
                if manifests::is_manifest(Path::new(&name)) {
                    names.insert(name);
                }
            }
        }
        let settled =
            mtime.is_some_and(|m| read_at.duration_since(m).is_ok_and(|age| age >= SETTLED));
        let old = self.dirs.remove(path);
        if let Some(old) = &old {
            for gone in old.names.difference(&names) {
                changed |= self.remove(&path.join(gone));
            }
            for gone in old.subdirs.iter().filter(|d| !subdirs.contains(d)) {
                changed |= self.forget(gone);
            }
        }
        let known = |name: &OsStr| old.as_ref().is_some_and(|o| o.names.contains(name));
        for name in names.iter().filter(|n| !known(n)) {
            changed |= self.add(path.join(name));
        }
        for sub in &subdirs {
            changed |= self.relist(sub, false)?;
        }
        self.dirs.insert(
            path.to_path_buf(),
            Listing {
                mtime,
                settled,
                names,
                subdirs,
            },
        );
        Ok(changed)
    }

    /// Forgets a directory that went, and everything listed under it.
    fn forget(&mut self, dir: &Path) -> bool {
        let Some(listing) = self.dirs.remove(dir) else {
            return false;
        };
        for name in &listing.names {
            self.remove(&dir.join(name));
        }
        for sub in &listing.subdirs {
            self.forget(sub);
        }
        true
    }
}
