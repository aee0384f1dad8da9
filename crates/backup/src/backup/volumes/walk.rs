//! The walk that reads a volume: blocking, beneath the volume root's
//! handle, every name opened relative to its parent's handle without
//! following links (see [`handles`](super::handles)). What is read is what
//! was opened: a file is read through the descriptor whose `fstat` said it
//! is the regular file that was listed, and only up to the size it had
//! then, holes skipped. Anything else is recorded, not read.

use super::handles::{READ, file_type, names, open_dir, read_link, stat_nofollow};
use super::{CHUNK, EntryKind, Extent, ManifestEntry, SkippedEntry, gzip, named};
use rustix::fs::{FileType, Mode, SeekFrom, Stat};
use sha2::{Digest, Sha256};
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// What the walk found, in manifest order.
pub enum Event {
    /// A directory or a symlink, complete.
    Entry(ManifestEntry),
    /// A regular file opened; its chunks and then [`Event::FileEnd`] follow.
    FileStart(ManifestEntry),
    Data {
        sha: String,
        gz: Vec<u8>,
        len: u64,
    },
    FileEnd {
        digest: String,
        size: u64,
        extents: Vec<Extent>,
    },
    Skipped(SkippedEntry),
}

/// Called with a file's path after it was listed and before it is opened:
/// the tests swap it there, as a pod's user racing the agent would.
pub type Seam = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// Why the walk stopped early.
pub enum WalkStop {
    /// The receiver is gone: canceled or timed out.
    Dropped,
    Failed(String),
}

/// The bytes the walk will read at most: the regular files' allocated
/// sizes (a sparse file counts what it holds, not its length).
pub fn estimate(root: &OwnedFd) -> std::io::Result<u64> {
    let mut total = 0u64;
    let mut stack = vec![Pending::root(root)?];
    while let Some(p) = stack.pop() {
        let Some(dir) = p.open() else { continue };
        let dir = Arc::new(dir);
        for name in names(&dir)? {
            let Ok(st) = stat_nofollow(&dir, &name) else {
                continue;
            };
            match file_type(&st) {
                FileType::RegularFile => total += data_size(&st),
                FileType::Directory => stack.push(Pending::child(&dir, name, Vec::new(), &st)),
                _ => {}
            }
        }
    }
    Ok(total)
}

pub(super) fn data_size(st: &Stat) -> u64 {
    (st.st_size as u64).min(st.st_blocks as u64 * 512)
}

/// A directory to walk: the root, or a child opened when its turn comes
/// (holding one handle per pending directory would run out of them).
struct Pending {
    parent: Option<Arc<OwnedFd>>,
    root: Option<OwnedFd>,
    name: OsString,
    path: Vec<u8>,
    dev: u64,
    ino: u64,
}

impl Pending {
    fn root(fd: &OwnedFd) -> std::io::Result<Pending> {
        Ok(Pending {
            parent: None,
            root: Some(fd.try_clone()?),
            name: OsString::new(),
            path: Vec::new(),
            dev: 0,
            ino: 0,
        })
    }

    fn child(parent: &Arc<OwnedFd>, name: OsString, path: Vec<u8>, st: &Stat) -> Pending {
        Pending {
            parent: Some(parent.clone()),
            root: None,
            name,
            path,
            dev: st.st_dev,
            ino: st.st_ino,
        }
    }

    /// The directory's handle, if it is still the directory listed.
    fn open(self) -> Option<OwnedFd> {
        match (self.root, self.parent) {
            (Some(root), _) => Some(root),
            (None, Some(parent)) => open_listed_dir(&parent, &self.name, self.dev, self.ino),
            (None, None) => None,
        }
    }
}

/// Directory `name` beneath `parent`, if it is still the directory listed
/// (same device and inode): a pod's user may have swapped it since.
pub(super) fn open_listed_dir(
    parent: &OwnedFd,
    name: &OsStr,
    dev: u64,
    ino: u64,
) -> Option<OwnedFd> {
    let fd = open_dir(parent, name).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    (st.st_dev == dev && st.st_ino == ino).then_some(fd)
}

/// What a walk records for a directory it no longer finds as listed.
pub(super) const DIR_CHANGED: &str = "changed between listing and reading: no longer the directory listed; its contents are not read (rule: volume-changed)";

pub(super) fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        return name.to_vec();
    }
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

fn entry(path: &[u8], kind: EntryKind, st: &Stat) -> ManifestEntry {
    let (path, path_hex) = named(path);
    ManifestEntry {
        path,
        path_hex,
        kind,
        mode: st.st_mode & 0o7777,
        uid: Some(st.st_uid),
        gid: Some(st.st_gid),
        ..ManifestEntry::default()
    }
}

fn skipped(path: &[u8], reason: String) -> Event {
    let (path, path_hex) = named(path);
    Event::Skipped(SkippedEntry {
        path,
        path_hex,
        reason,
    })
}

pub(super) fn kind_name(t: FileType) -> &'static str {
    match t {
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Symlink => "a symlink",
        FileType::Directory => "a directory",
        FileType::RegularFile => "a regular file",
        FileType::Unknown => "of an unknown kind",
    }
}

/// Walks the volume beneath `root`, depth first in name order, sending
/// each [`Event`] through `send` (false: stop).
pub fn walk(
    root: &OwnedFd,
    seam: Option<&Seam>,
    send: &mut dyn FnMut(Event) -> bool,
) -> Result<(), WalkStop> {
    let failed = |what: &[u8], e: std::io::Error| {
        WalkStop::Failed(format!("{}: {e}", String::from_utf8_lossy(what)))
    };
    let mut emit = |e: Event| {
        if send(e) {
            Ok(())
        } else {
            Err(WalkStop::Dropped)
        }
    };
    let mut stack = vec![Pending::root(root).map_err(|e| failed(b".", e))?];
    while let Some(p) = stack.pop() {
        let at = p.path.clone();
        let Some(dir) = p.open() else {
            emit(skipped(&at, DIR_CHANGED.into()))?;
            continue;
        };
        let dir = Arc::new(dir);
        let mut subdirs = Vec::new();
        for name in names(&dir).map_err(|e| failed(&at, e))? {
            let path = join(&at, name.as_bytes());
            let st = match stat_nofollow(&dir, &name) {
                Ok(st) => st,
                // Deleted since the listing: nothing to back up.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(failed(&path, e)),
            };
            match file_type(&st) {
                FileType::Directory => {
                    emit(Event::Entry(entry(&path, EntryKind::Dir, &st)))?;
                    subdirs.push(Pending::child(&dir, name, path, &st));
                }
                FileType::Symlink => match read_link(&dir, &name) {
                    Ok(target) => {
                        let mut e = entry(&path, EntryKind::Symlink, &st);
                        let (t, t_hex) = named(target.as_bytes());
                        (e.target, e.target_hex) = (Some(t), t_hex);
                        emit(Event::Entry(e))?;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    // Swapped for something that is not a link.
                    Err(e) => emit(skipped(
                        &path,
                        format!(
                            "changed between listing and reading ({e}); not read (rule: volume-changed)"
                        ),
                    ))?,
                },
                FileType::RegularFile => {
                    if let Some(seam) = seam {
                        seam(&path);
                    }
                    read_file(&dir, &name, &path, &st, &mut emit)?;
                }
                other => emit(skipped(
                    &path,
                    format!(
                        "{} is not read (only regular files, directories and symlinks are; rule: not-a-regular-file)",
                        kind_name(other)
                    ),
                ))?,
            }
        }
        // Depth first, in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(())
}

/// Reads one regular file beneath `dir`: opened without following a link
/// and without blocking, checked to be the file listed, read up to the
/// size it has now, holes skipped.
fn read_file(
    dir: &OwnedFd,
    name: &OsString,
    path: &[u8],
    listed: &Stat,
    emit: &mut dyn FnMut(Event) -> Result<(), WalkStop>,
) -> Result<(), WalkStop> {
    let failed =
        |e: std::io::Error| WalkStop::Failed(format!("{}: {e}", String::from_utf8_lossy(path)));
    let fd = match rustix::fs::openat(dir, name.as_os_str(), READ, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(rustix::io::Errno::LOOP) => {
            return emit(skipped(
                path,
                "replaced by a symlink after it was listed: not followed, not read (rule: volume-changed)".into(),
            ));
        }
        Err(e) => return Err(failed(e.into())),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| failed(e.into()))?;
    if file_type(&st) != FileType::RegularFile
        || st.st_ino != listed.st_ino
        || st.st_dev != listed.st_dev
    {
        return emit(skipped(
            path,
            format!(
                "changed between listing and opening (now {}, inode {}); not read (rule: volume-changed)",
                kind_name(file_type(&st)),
                st.st_ino
            ),
        ));
    }
    let size = st.st_size as u64;
    let (extents, sparse) = data_extents(&fd, size).map_err(failed)?;
    let mut start = entry(path, EntryKind::File, &st);
    start.size = size;
    emit(Event::FileStart(start))?;
    let file = std::fs::File::from(fd);
    let mut whole = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut read_extents = Vec::new();
    let mut end_of_file = None;
    'extents: for Extent { offset, len } in extents {
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let want = (CHUNK as u64).min(end - pos) as usize;
            let mut n = 0;
            while n < want {
                match file.read_at(&mut buf[n..want], pos + n as u64) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(failed(e)),
                }
            }
            if n > 0 {
                whole.update(&buf[..n]);
                emit(Event::Data {
                    sha: hex::encode(Sha256::digest(&buf[..n])),
                    gz: gzip(&buf[..n]),
                    len: n as u64,
                })?;
            }
            pos += n as u64;
            if n < want {
                // Shrank while read: what was stored is what was read.
                end_of_file = Some(pos);
                if pos > offset {
                    read_extents.push(Extent {
                        offset,
                        len: pos - offset,
                    });
                }
                break 'extents;
            }
        }
        if len > 0 {
            read_extents.push(Extent { offset, len });
        }
    }
    let size = end_of_file.unwrap_or(size);
    emit(Event::FileEnd {
        digest: hex::encode(whole.finalize()),
        size,
        extents: if sparse { read_extents } else { Vec::new() },
    })
}

/// The file's data regions below `size`, and whether it has holes. A
/// file system without `SEEK_DATA` reads as one region.
fn data_extents(fd: &OwnedFd, size: u64) -> std::io::Result<(Vec<Extent>, bool)> {
    let whole = || {
        Ok((
            vec![Extent {
                offset: 0,
                len: size,
            }],
            false,
        ))
    };
    if size == 0 {
        return Ok((Vec::new(), false));
    }
    match rustix::fs::seek(fd, SeekFrom::Hole(0)) {
        Ok(hole) if hole >= size => return whole(),
        Ok(_) => {}
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOTSUP) => return whole(),
        Err(e) => return Err(e.into()),
    }
    let mut out = Vec::new();
    let mut at = 0u64;
    while at < size {
        let data = match rustix::fs::seek(fd, SeekFrom::Data(at)) {
            Ok(d) => d,
            // No data past `at`: the rest is a hole.
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => return Err(e.into()),
        };
        if data >= size {
            break;
        }
        let hole = rustix::fs::seek(fd, SeekFrom::Hole(data))?.min(size);
        out.push(Extent {
            offset: data,
            len: hole - data,
        });
        at = hole;
    }
    Ok((out, true))
}
