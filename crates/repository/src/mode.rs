//! File modes as restic stores them: Go's `io/fs.FileMode` bits (restic is
//! written in Go), not POSIX's. rustic_core keeps its own mapping private.

const PERM: u32 = 0o777;
const GO_DIR: u32 = 1 << 31;
const GO_SYMLINK: u32 = 1 << 27;
const GO_SETUID: u32 = 1 << 23;
const GO_SETGID: u32 = 1 << 22;
const GO_STICKY: u32 = 1 << 20;

const S_IFMT: u32 = 0o170_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFLNK: u32 = 0o120_000;

/// A POSIX `st_mode` (of a directory, symlink or regular file) in Go's bits.
pub const fn to_go(mode: u32) -> u32 {
    let mut go = mode & PERM;
    match mode & S_IFMT {
        S_IFDIR => go |= GO_DIR,
        S_IFLNK => go |= GO_SYMLINK,
        _ => {}
    }
    if mode & 0o4000 != 0 {
        go |= GO_SETUID;
    }
    if mode & 0o2000 != 0 {
        go |= GO_SETGID;
    }
    if mode & 0o1000 != 0 {
        go |= GO_STICKY;
    }
    go
}

/// Permission and special bits (`0o7777`) of a mode in Go's bits.
pub const fn permissions_from_go(go: u32) -> u32 {
    let mut mode = go & PERM;
    if go & GO_SETUID != 0 {
        mode |= 0o4000;
    }
    if go & GO_SETGID != 0 {
        mode |= 0o2000;
    }
    if go & GO_STICKY != 0 {
        mode |= 0o1000;
    }
    mode
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_bits_survive_the_round_trip() {
        for mode in [0o100_644, 0o104_755, 0o042_775, 0o041_777, 0o120_777] {
            assert_eq!(permissions_from_go(to_go(mode)), mode & 0o7777, "{mode:o}");
        }
        assert_eq!(to_go(0o040_755), GO_DIR | 0o755);
        assert_eq!(to_go(0o120_777), GO_SYMLINK | 0o777);
    }
}
