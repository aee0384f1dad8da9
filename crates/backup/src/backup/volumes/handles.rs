//! File system access through directory handles, never through a path a
//! pod's user can change. Every name opened is one component, opened
//! relative to its parent's handle with `O_NOFOLLOW`: a symlink anywhere
//! (planted before the walk or swapped in during it) fails the open
//! instead of being followed, and a FIFO or device is never opened for
//! reading (`O_NONBLOCK`, then `fstat` decides).

use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, Stat};
use std::ffi::{CString, OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// Flags for a directory handle: no symlink as the last component.
pub const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);
/// Flags for reading a file: no symlink, and a FIFO or device swapped in
/// opens without blocking (then `fstat` refuses it).
pub const READ: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// A volume's root: `trusted` is a directory only the agent or operator
/// controls (the kubelet's root, `--volume-data`); each of `below` is
/// opened beneath it without following symlinks.
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeRoot {
    pub trusted: PathBuf,
    pub below: Vec<OsString>,
}

impl VolumeRoot {
    pub fn new(trusted: impl Into<PathBuf>, below: &[&str]) -> Self {
        VolumeRoot {
            trusted: trusted.into(),
            below: below.iter().map(OsString::from).collect(),
        }
    }

    /// The path it names, for messages and for a local hook's environment.
    pub fn path(&self) -> PathBuf {
        let mut p = self.trusted.clone();
        p.extend(&self.below);
        p
    }

    /// Opens it: a component that is a symlink (or not a directory) is
    /// refused with rule `volume-root-symlink`, naming the component.
    pub fn open(&self) -> Result<OwnedFd, String> {
        // The trusted part is the operator's: it may itself be a link.
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut fd = rustix::fs::openat(CWD, &self.trusted, flags, Mode::empty())
            .map_err(|e| format!("{}: {e}", self.trusted.display()))?;
        let mut at = self.trusted.clone();
        for name in &self.below {
            at.push(name);
            fd = open_dir(&fd, name).map_err(|e| match e {
                OpenError::Symlink => format!(
                    "{} is a symlink, not a directory: not followed (rule: volume-root-symlink)",
                    at.display()
                ),
                OpenError::NotDir => format!(
                    "{} is not a directory (rule: volume-root-symlink)",
                    at.display()
                ),
                OpenError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => format!(
                    "volume data directory {} does not exist",
                    self.path().display()
                ),
                OpenError::Io(e) => format!("{}: {e}", at.display()),
            })?;
        }
        Ok(fd)
    }
}

/// Why a component could not be opened as a directory.
#[derive(Debug)]
pub enum OpenError {
    Symlink,
    NotDir,
    Io(std::io::Error),
}

/// Opens directory `name` beneath `dir`, never through a symlink.
pub fn open_dir(dir: &OwnedFd, name: &OsStr) -> Result<OwnedFd, OpenError> {
    match rustix::fs::openat(dir, name, DIR, Mode::empty()) {
        Ok(fd) => Ok(fd),
        // O_NOFOLLOW on a symlink: ELOOP.
        Err(rustix::io::Errno::LOOP) => Err(OpenError::Symlink),
        Err(rustix::io::Errno::NOTDIR) => {
            // Tell a symlink to a directory from a plain file.
            match stat_nofollow(dir, name) {
                Ok(st) if file_type(&st) == FileType::Symlink => Err(OpenError::Symlink),
                _ => Err(OpenError::NotDir),
            }
        }
        Err(e) => Err(OpenError::Io(e.into())),
    }
}

/// `lstat` of `name` beneath `dir`.
pub fn stat_nofollow(dir: &OwnedFd, name: &OsStr) -> std::io::Result<Stat> {
    Ok(rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?)
}

pub fn file_type(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

/// The names in `dir` (without `.` and `..`), as bytes, sorted.
pub fn names(dir: &OwnedFd) -> std::io::Result<Vec<OsString>> {
    let mut out = Vec::new();
    let mut entries = Dir::read_from(dir)?;
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(OsString::from_vec(name.to_vec()));
        }
    }
    out.sort();
    Ok(out)
}

/// A symlink's target, as bytes.
pub fn read_link(dir: &OwnedFd, name: &OsStr) -> std::io::Result<OsString> {
    let target = rustix::fs::readlinkat(dir, name, Vec::new())?;
    Ok(OsString::from_vec(target.into_bytes()))
}

/// A name or path as a C string; a NUL byte (which no file name holds)
/// is refused.
pub fn c_name(name: &[u8]) -> Result<CString, String> {
    CString::new(name).map_err(|_| "a name holds a NUL byte".to_string())
}

/// A display form of bytes that may not be UTF-8.
pub fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
