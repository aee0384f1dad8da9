//! A volume as rustic_core's [`ReadSource`]: the same handle-based walk as
//! [`walk`](super::walk) (every name opened beneath its parent's handle
//! with `O_NOFOLLOW`, a directory re-checked by device and inode when its
//! turn comes, a file opened only when the repository needs its content
//! and refused unless `fstat` says it is the regular file listed), with
//! rustic's own `LocalSource` never used: it walks by path.
//!
//! Entries come depth first in name order, each directory before its
//! contents, as rustic's tree builder expects, under
//! [`iar_repository::SNAPSHOT_ROOT`].

use super::SkippedEntry;
use super::handles::{READ, file_type, names, read_link, stat_nofollow};
use super::walk::{DIR_CHANGED, Seam, data_size, estimate, join, open_listed_dir};
use iar_repository::jiff::Timestamp;
use iar_repository::{
    ErrorKind, Metadata, Node, NodeType, ReadSource, ReadSourceEntry, ReadSourceOpen, RusticError,
};
use rustix::fs::{FileType, Mode, Stat};
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What the walk shares with whoever runs it.
#[derive(Clone, Default)]
pub struct Shared {
    /// Entries listed and not read, with the rule.
    pub skipped: Arc<Mutex<Vec<SkippedEntry>>>,
    /// Bytes of file content read so far.
    pub bytes_read: Arc<AtomicU64>,
    /// Entries walked so far, read or not.
    pub files_done: Arc<AtomicU64>,
    /// Files that ended before their listed size while read. Their
    /// snapshot is taken again (see [`super::repository_backup`]).
    pub shrunk: Arc<Mutex<Vec<Shrunk>>>,
    /// The first error that no rule chose (a file that cannot be opened
    /// or read, a directory that cannot be listed): it fails the volume,
    /// as it does in the chunk format. rustic would leave the entry out
    /// of the snapshot with a log line and call the snapshot whole.
    pub fatal: Arc<Mutex<Option<String>>>,
    /// Set to stop: the walk lists nothing more and readers end.
    pub stop: Arc<AtomicBool>,
}

/// A file that ended before its listed size while it was read.
pub struct Shrunk {
    pub path: Vec<u8>,
    pub listed: u64,
    pub read: u64,
}

impl Shared {
    fn skip(&self, path: &[u8], reason: String) {
        let (path, path_hex) = super::named(path);
        self.skipped.lock().unwrap().push(SkippedEntry {
            path,
            path_hex,
            reason,
        });
    }

    /// Records the volume's failure (the first one wins) and stops the
    /// walk; returns the error to hand rustic.
    fn fail(&self, path: &[u8], why: &str) -> Box<RusticError> {
        let shown = String::from_utf8_lossy(if path.is_empty() { b"." } else { path });
        self.fatal
            .lock()
            .unwrap()
            .get_or_insert_with(|| format!("{shown}: {why} (rule: volume-unreadable)"));
        self.stop.store(true, Ordering::Relaxed);
        refused(path, why)
    }
}

pub struct HandleSource {
    root: OwnedFd,
    seam: Option<Seam>,
    shared: Shared,
}

impl HandleSource {
    pub fn new(root: OwnedFd, seam: Option<Seam>, shared: Shared) -> Self {
        HandleSource { root, seam, shared }
    }
}

/// The most holes a file may have and still be read. The repository's
/// chunker reads a hole as zeros (stored once, but read and hashed in
/// full), so a pod's user could make a file of exabytes that holds
/// nothing and keep the agent busy until the volume's timeout; past this
/// bound the file is recorded, not read (rule `sparse-file`).
pub const MAX_HOLES: u64 = 64 << 30;

fn timestamp(secs: i64, nanos: i64) -> Option<Timestamp> {
    Timestamp::new(secs, nanos as i32).ok()
}

/// What a restore can give back, and no more: no atime or ctime (a restore
/// cannot set a ctime, and the parent comparison ignores both), and an
/// inode and device only for a file with other hard links (restic's
/// restore relinks by them). Every node is stored again with each
/// changed directory: after 1 % of 5,000 small files changed, dropping
/// them took the second upload from 2.29 % to 2.16 % of the volume
/// (bench/repository.sh).
fn metadata(st: &Stat) -> Metadata {
    let linked = file_type(st) == FileType::RegularFile && st.st_nlink > 1;
    Metadata {
        mode: Some(iar_repository::mode::to_go(st.st_mode)),
        mtime: timestamp(st.st_mtime, st.st_mtime_nsec as i64),
        atime: None,
        ctime: None,
        uid: Some(st.st_uid),
        gid: Some(st.st_gid),
        inode: if linked { st.st_ino } else { 0 },
        device_id: if linked { st.st_dev } else { 0 },
        size: if file_type(st) == FileType::RegularFile {
            st.st_size as u64
        } else {
            0
        },
        links: st.st_nlink,
        ..Metadata::default()
    }
}

/// Attributes as restic stores them: rustic_core keeps its type private,
/// so it is built from restic's JSON form (a name and a base64 value).
fn extended_attributes<T: serde::de::DeserializeOwned + Default>(
    found: Vec<(String, Vec<u8>)>,
) -> T {
    use base64::Engine;
    if found.is_empty() {
        return T::default();
    }
    let json: Vec<_> = found
        .into_iter()
        .map(|(name, value)| {
            serde_json::json!({
                "name": name,
                "value": base64::engine::general_purpose::STANDARD.encode(value),
            })
        })
        .collect();
    serde_json::from_value(serde_json::Value::Array(json)).unwrap_or_default()
}

fn rel_path(rel: &[u8]) -> PathBuf {
    let mut p = PathBuf::from(iar_repository::SNAPSHOT_ROOT);
    if !rel.is_empty() {
        p.push(OsStr::from_bytes(rel));
    }
    p
}

/// A file to open when the repository asks for its content.
pub struct HandleOpen {
    dir: Arc<OwnedFd>,
    name: OsString,
    path: Vec<u8>,
    dev: u64,
    ino: u64,
    size: u64,
    seam: Option<Seam>,
    shared: Shared,
}

fn refused(path: &[u8], why: &str) -> Box<RusticError> {
    RusticError::new(ErrorKind::InputOutput, "{path}: {why}")
        .attach_context("path", String::from_utf8_lossy(path).into_owned())
        .attach_context("why", why.to_string())
}

impl ReadSourceOpen for HandleOpen {
    type Reader = Counted;

    fn open(self) -> Result<Counted, Box<RusticError>> {
        if let Some(seam) = &self.seam {
            seam(&self.path);
        }
        let fd = match rustix::fs::openat(&*self.dir, &self.name, READ, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::LOOP) => {
                let why = "replaced by a symlink after it was listed: not followed, not read (rule: volume-changed)";
                self.shared.skip(&self.path, why.into());
                return Err(refused(&self.path, why));
            }
            // Deleted since it was listed: nothing to back up.
            Err(rustix::io::Errno::NOENT) => {
                return Err(refused(&self.path, "deleted after it was listed"));
            }
            Err(e) => return Err(self.shared.fail(&self.path, &format!("opening: {e}"))),
        };
        let st = rustix::fs::fstat(&fd)
            .map_err(|e| self.shared.fail(&self.path, &format!("fstat: {e}")))?;
        if file_type(&st) != FileType::RegularFile || st.st_ino != self.ino || st.st_dev != self.dev
        {
            let why = format!(
                "changed between listing and opening (now inode {}); not read (rule: volume-changed)",
                st.st_ino
            );
            self.shared.skip(&self.path, why.clone());
            return Err(refused(&self.path, &why));
        }
        // What was listed is what is stored: a file that grew since is
        // read up to its listed size.
        Ok(Counted {
            inner: std::fs::File::from(fd).take(self.size),
            listed: self.size,
            read: 0,
            path: self.path,
            shared: self.shared,
        })
    }
}

/// A file's content, counted as it is read, ending early when stopped.
///
/// The snapshot's node already holds the listed size, and restic's
/// `check` (and iar's restore) want the content to add up to it; a file
/// that shrinks while read is therefore made up to its listed size with
/// zeros and recorded in [`Shared::shrunk`], so the caller takes the
/// snapshot again (the file then listed at its new size) and only keeps
/// a padded one, with a warning naming the file, when the file never
/// holds still.
pub struct Counted {
    inner: std::io::Take<std::fs::File>,
    listed: u64,
    read: u64,
    path: Vec<u8>,
    shared: Shared,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.shared.stop.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("the volume backup stopped"));
        }
        if self.read >= self.listed {
            return Ok(0);
        }
        let n = match self.inner.read(buf) {
            Ok(0) => {
                // Ended early: shrank while read.
                if self.inner.limit() == self.listed - self.read {
                    self.shared.shrunk.lock().unwrap().push(Shrunk {
                        path: self.path.clone(),
                        listed: self.listed,
                        read: self.read,
                    });
                }
                let pad = (self.listed - self.read).min(buf.len() as u64) as usize;
                buf[..pad].fill(0);
                // The padding is not read from the volume, so the take
                // limit stays; `read` alone moves on.
                pad
            }
            Ok(n) => {
                self.shared
                    .bytes_read
                    .fetch_add(n as u64, Ordering::Relaxed);
                n
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Err(e),
            Err(e) => {
                return Err(std::io::Error::other(
                    self.shared
                        .fail(&self.path, &format!("reading: {e}"))
                        .to_string(),
                ));
            }
        };
        self.read += n as u64;
        Ok(n)
    }
}

struct Frame {
    dir: Arc<OwnedFd>,
    path: Vec<u8>,
    names: VecDeque<OsString>,
}

/// The walk, one entry at a time.
pub struct Entries {
    root: Option<OwnedFd>,
    frames: Vec<Frame>,
    seam: Option<Seam>,
    shared: Shared,
}

type Item = Result<ReadSourceEntry<HandleOpen>, Box<RusticError>>;

impl Entries {
    fn failed(&self, path: &[u8], e: impl std::fmt::Display) -> Item {
        Err(self.shared.fail(path, &e.to_string()))
    }

    fn open_frame(&mut self, dir: OwnedFd, path: Vec<u8>) -> Result<(), Box<RusticError>> {
        let names = names(&dir).map_err(|e| self.shared.fail(&path, &format!("listing: {e}")))?;
        self.frames.push(Frame {
            dir: Arc::new(dir),
            path,
            names: names.into(),
        });
        Ok(())
    }
}

impl Iterator for Entries {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if self.shared.stop.load(Ordering::Relaxed) {
            return None;
        }
        if let Some(root) = self.root.take() {
            let st = match rustix::fs::fstat(&root) {
                Ok(st) => st,
                Err(e) => return Some(self.failed(b"", e)),
            };
            if let Err(e) = self.open_frame(root, Vec::new()) {
                return Some(Err(e));
            }
            let node = Node::new_node(OsStr::new("volume"), NodeType::Dir, metadata(&st));
            return Some(Ok(ReadSourceEntry {
                path: rel_path(b""),
                node,
                open: None,
            }));
        }
        loop {
            let frame = self.frames.last_mut()?;
            let Some(name) = frame.names.pop_front() else {
                self.frames.pop();
                continue;
            };
            let dir = frame.dir.clone();
            let path = join(&frame.path, name.as_bytes());
            self.shared.files_done.fetch_add(1, Ordering::Relaxed);
            let st = match stat_nofollow(&dir, &name) {
                Ok(st) => st,
                // Deleted since the listing: nothing to back up.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Some(self.failed(&path, e)),
            };
            let mut meta = metadata(&st);
            if matches!(
                file_type(&st),
                FileType::Directory | FileType::RegularFile | FileType::Symlink
            ) {
                match super::xattrs::read(&dir, &name) {
                    Ok(found) => meta.extended_attributes = extended_attributes(found),
                    Err(e) => self.shared.skip(
                        &path,
                        format!("its extended attributes were not read: {e}; its content was (rule: xattr-unreadable)"),
                    ),
                }
            }
            let entry = |node_type, open| {
                Some(Ok(ReadSourceEntry {
                    path: rel_path(&path),
                    node: Node::new_node(&name, node_type, meta.clone()),
                    open,
                }))
            };
            match file_type(&st) {
                FileType::Directory => {
                    let Some(child) = open_listed_dir(&dir, &name, st.st_dev, st.st_ino) else {
                        self.shared.skip(&path, DIR_CHANGED.into());
                        continue;
                    };
                    if let Err(e) = self.open_frame(child, path.clone()) {
                        return Some(Err(e));
                    }
                    return entry(NodeType::Dir, None);
                }
                FileType::Symlink => match read_link(&dir, &name) {
                    Ok(target) => {
                        let target = PathBuf::from(OsString::from_vec(target.into_vec()));
                        return entry(NodeType::from_link(&target), None);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        self.shared.skip(&path, format!("changed between listing and reading ({e}); not read (rule: volume-changed)"));
                        continue;
                    }
                },
                FileType::RegularFile => {
                    let holes = (st.st_size as u64).saturating_sub(data_size(&st));
                    if holes > MAX_HOLES {
                        self.shared.skip(
                            &path,
                            format!(
                                "a sparse file of {} bytes holding {}: over {} bytes of holes, not read (rule: sparse-file)",
                                st.st_size,
                                data_size(&st),
                                MAX_HOLES
                            ),
                        );
                        continue;
                    }
                    let open = HandleOpen {
                        dir,
                        name: name.clone(),
                        path: path.clone(),
                        dev: st.st_dev,
                        ino: st.st_ino,
                        size: st.st_size as u64,
                        seam: self.seam.clone(),
                        shared: self.shared.clone(),
                    };
                    return entry(NodeType::File, Some(open));
                }
                other => {
                    self.shared.skip(
                        &path,
                        format!(
                            "{} is not read (only regular files, directories and symlinks are; rule: not-a-regular-file)",
                            super::walk::kind_name(other)
                        ),
                    );
                    continue;
                }
            }
        }
    }
}

impl ReadSource for HandleSource {
    type Open = HandleOpen;
    type Iter = Entries;

    fn size(&self) -> Result<Option<u64>, Box<RusticError>> {
        estimate(&self.root)
            .map(Some)
            .map_err(|e| refused(b".", &e.to_string()))
    }

    fn entries(&self) -> Entries {
        Entries {
            root: self.root.try_clone().ok(),
            frames: Vec::new(),
            seam: self.seam.clone(),
            shared: self.shared.clone(),
        }
    }
}
