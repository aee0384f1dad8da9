//! A listed entry's extended attributes (ACLs, file capabilities, SELinux
//! labels, `user.*`), read beneath its directory's handle: through
//! `/proc/self/fd/<dir>/<name>` with the `l*xattr` calls, which resolve
//! the directory by its handle (never by a path a pod could swap) and do
//! not follow the entry itself if it became a link.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// An entry's attributes as `(name, value)`; none where the file system
/// keeps none. Names that are not UTF-8 (restic stores names as strings)
/// are left out.
pub(super) fn read(dir: &OwnedFd, name: &OsStr) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    use rustix::io::Errno;
    let mut path = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
    path.extend_from_slice(name.as_bytes());
    let path = OsStr::from_bytes(&path);
    let names = match sized(
        || rustix::fs::llistxattr_query(path),
        |buf| rustix::fs::llistxattr(path, buf),
    ) {
        Ok(names) => names,
        Err(Errno::NOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for raw in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let Ok(attr) = std::str::from_utf8(raw) else {
            continue;
        };
        match sized(
            || rustix::fs::lgetxattr_query(path, attr),
            |buf| rustix::fs::lgetxattr(path, attr, buf),
        ) {
            Ok(value) => out.push((attr.to_string(), value)),
            // Removed since it was listed.
            Err(Errno::NODATA) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// Asks `size` for the length, then `get` for the bytes, again if they
/// changed size between the two (`ERANGE`).
fn sized(
    size: impl Fn() -> rustix::io::Result<usize>,
    get: impl Fn(&mut [u8]) -> rustix::io::Result<usize>,
) -> rustix::io::Result<Vec<u8>> {
    for _ in 0..3 {
        let len = size()?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; len];
        match get(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(rustix::io::Errno::RANGE) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(rustix::io::Errno::RANGE)
}
