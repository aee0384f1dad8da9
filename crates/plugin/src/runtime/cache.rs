//! The compiled-component cache: one file per component and engine, named
//! by sha256, bounded in total size, the least recently used entries
//! removed first.
//!
//! An entry is `{component}-{engine}.cwasm`: the component's sha256 and a
//! sha256 of wasmtime's compatibility hash (its version, the compiler's
//! target and flags, the tunables and wasm features: what decides the
//! native code), both in hex. Entries named the old way (a 16-digit
//! `DefaultHasher` engine key, not stable across Rust releases) never
//! match a name looked up now and are evicted like any other.
//!
//! Several processes may share the directory (Velero's plugin processes on
//! one volume): an entry is written to a temporary file and renamed into
//! place, readers read it whole into memory, and eviction takes a file that
//! vanished under it (another process evicting, or replacing it) as gone.
//! Recency is each entry's mtime, set on every hit: atime may be off
//! (`noatime`) on the filesystem.

use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The cache's bound when none is set: 1 GiB. Compiled example plugins are
/// 0.2–0.8 MB, the JavaScript and Python ones 35–37 MB.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 1 << 30;

/// The variable that sets the bound: a size such as `512MiB` or `2GiB`.
pub const ENV_CACHE_MAX_BYTES: &str = "IAR_CACHE_MAX_BYTES";

/// Prefix of an entry being written; one older than [`STALE_TEMP`] is the
/// leftover of a writer that died, and eviction removes it.
const TEMP_PREFIX: &str = ".iar-cwasm-";
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// The bound `value` (of [`ENV_CACHE_MAX_BYTES`]) sets: unset is
/// [`DEFAULT_CACHE_MAX_BYTES`].
pub fn cache_max_bytes_from(value: Option<&str>) -> Result<u64, CacheBoundError> {
    match value {
        None => Ok(DEFAULT_CACHE_MAX_BYTES),
        Some(v) => crate::limits::parse_bytes(v)
            .map(|n| n as u64)
            .map_err(CacheBoundError),
    }
}

/// A cache bound ([`ENV_CACHE_MAX_BYTES`]) that is not a byte size.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{ENV_CACHE_MAX_BYTES}: {0}")]
pub struct CacheBoundError(#[source] pub crate::limits::ByteSizeError);

/// Feeds what a `Hash` writes into a sha256, as wasmtime's own cache
/// (`wasmtime-cache`) keys its entries: a fixed algorithm, where
/// `DefaultHasher`'s may change with any Rust release.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().expect("a sha256 has 8 bytes"))
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// The engine half of an entry's name: sha256 of wasmtime's compatibility
/// hash (`Engine::precompile_compatibility_hash`), in hex.
pub(super) fn engine_key(engine: &Engine) -> String {
    let mut h = Sha256Hasher(Sha256::new());
    h.0.update(b"iar compile cache: wasmtime engine\0");
    engine.precompile_compatibility_hash().hash(&mut h);
    hex::encode(h.0.finalize())
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether a file name is a cache entry's, named now or the old way; the
/// directory may hold other files (`~/.cache/iar` does), never touched.
fn is_entry_name(name: &str) -> bool {
    let Some((component, engine)) = name
        .strip_suffix(".cwasm")
        .and_then(|stem| stem.split_once('-'))
    else {
        return false;
    };
    is_hex(component, 64) && (is_hex(engine, 64) || is_hex(engine, 16))
}

/// A cache directory and its bound.
pub(super) struct CompileCache {
    dir: PathBuf,
    max_bytes: u64,
    engine_key: String,
}

impl CompileCache {
    pub(super) fn new(dir: PathBuf, max_bytes: u64, engine: &Engine) -> CompileCache {
        CompileCache {
            dir,
            max_bytes,
            engine_key: engine_key(engine),
        }
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry for the component of sha256 `digest` (hex).
    pub(super) fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}-{}.cwasm", self.engine_key))
    }

    /// The compiled component of `digest`, if its entry is there, whole and
    /// accepted by wasmtime; its mtime is then set to now. Anything else is
    /// a miss (logged unless the entry is simply absent).
    pub(super) fn load(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.path(digest);
        // Read into memory rather than mmap the file: a cache file
        // truncated under a running host (another process, an operator)
        // would otherwise crash it with SIGBUS.
        let file = match std::fs::read(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), "cannot read cached component: {e}");
                return None;
            }
        };
        let loaded = entry::open(&file, digest).and_then(|native| {
            // SAFETY: deserializing runs native code from the file. What is
            // trusted: the directory, which `Runtime::new` accepted only if
            // it is owned by this user and not writable by group or others,
            // so only this user's processes can place a file here. What is
            // checked, not trusted: the entry's sha256 (so a truncated,
            // corrupted or half-written file is refused) and the component
            // digest it records (so an entry renamed or copied from another
            // component is refused); wasmtime checks the engine
            // compatibility header. The checksum is no signature: it cannot
            // stop someone who can already write as this user.
            unsafe { Component::deserialize(engine, native) }.map_err(anyhow::Error::from)
        });
        match loaded {
            Ok(component) => {
                touch(&path, SystemTime::now());
                Some(component)
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), "ignoring unusable cached component: {e:#}");
                None
            }
        }
    }

    /// Writes `component`'s entry (replacing an unusable one), then evicts
    /// down to the bound. Failures are logged: the component is compiled
    /// either way.
    pub(super) fn store(&self, component: &Component, digest: &str) {
        let path = self.path(digest);
        let written = (|| -> anyhow::Result<()> {
            let sealed = entry::seal(&component.serialize()?, digest)?;
            write_atomically(&path, &sealed)?;
            Ok(())
        })();
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), "could not cache compiled component: {e:#}");
        }
        let evicted = evict(&self.dir, self.max_bytes, SystemTime::now());
        if evicted.removed > 0 {
            tracing::info!(
                dir = %self.dir.display(),
                "compile cache over {} bytes: removed {} least recently used entries ({} bytes); {} bytes kept",
                self.max_bytes,
                evicted.removed,
                evicted.removed_bytes,
                evicted.kept_bytes
            );
        }
    }
}

/// Marks an entry used: its mtime is what eviction orders by. A file gone
/// meanwhile (evicted by another process) is fine.
fn touch(path: &Path, now: SystemTime) {
    match std::fs::File::open(path).and_then(|f| f.set_modified(now)) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => {
            tracing::debug!(path = %path.display(), "cannot mark cached component used: {e}")
        }
    }
}

/// What one eviction did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Evicted {
    /// Entries removed (by this call; ones that vanished meanwhile are not
    /// counted).
    pub removed: usize,
    pub removed_bytes: u64,
    /// What the entries left add up to, as this call saw them.
    pub kept_bytes: u64,
}

/// Removes entries from `dir`, least recently modified first, until they
/// add up to at most `max_bytes`; and temporary files older than
/// [`STALE_TEMP`]. Files that are not entries are left alone; a file that
/// vanishes under it counts as removed by whoever removed it.
pub(super) fn evict(dir: &Path, max_bytes: u64, now: SystemTime) -> Evicted {
    let mut evicted = Evicted::default();
    let Ok(listing) = std::fs::read_dir(dir) else {
        return evicted;
    };
    let mut entries = Vec::new();
    for item in listing.flatten() {
        let name = item.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_temp = name.starts_with(TEMP_PREFIX);
        if !is_temp && !is_entry_name(name) {
            continue;
        }
        // Not followed: a symlink is not an entry. Gone since the listing:
        // nothing to count.
        let Ok(meta) = item.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if is_temp {
            if now.duration_since(modified).unwrap_or_default() > STALE_TEMP {
                let _ = std::fs::remove_file(item.path());
            }
            continue;
        }
        entries.push((modified, item.file_name(), meta.len()));
    }
    let mut total: u64 = entries.iter().map(|e| e.2).sum();
    // Oldest first; the name breaks ties so that concurrent evictions
    // agree on the order.
    entries.sort();
    for (_, name, len) in entries {
        if total <= max_bytes {
            break;
        }
        match std::fs::remove_file(dir.join(&name)) {
            Ok(()) => {
                evicted.removed += 1;
                evicted.removed_bytes += len;
                total -= len;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => total -= len,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "cannot evict {name:?} from the compile cache: {e}")
            }
        }
    }
    evicted.kept_bytes = total;
    evicted
}

/// The on-disk form of a cached component: a header naming what it holds,
/// then wasmtime's serialized component.
///
/// ```text
/// "iar-cwasm\0v1\0\0\0\0" (16)  component sha256 (32)  sha256(digest ‖ native) (32)  native
/// ```
pub(super) mod entry {
    use anyhow::{anyhow, bail};
    use sha2::{Digest, Sha256};

    const MAGIC: &[u8; 16] = b"iar-cwasm\0v1\0\0\0\0";
    const HEADER: usize = 16 + 32 + 32;

    fn checksum(digest: &[u8], native: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(digest);
        h.update(native);
        h.finalize().into()
    }

    /// Wraps a serialized component compiled from `digest` (hex sha256).
    pub(crate) fn seal(native: &[u8], digest: &str) -> anyhow::Result<Vec<u8>> {
        let digest = hex::decode(digest).map_err(|e| anyhow!("digest {digest:?}: {e}"))?;
        let mut out = Vec::with_capacity(HEADER + native.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&digest);
        out.extend_from_slice(&checksum(&digest, native));
        out.extend_from_slice(native);
        Ok(out)
    }

    /// The serialized component in `file`, if the file is whole and was
    /// compiled from `digest`.
    pub(crate) fn open<'a>(file: &'a [u8], digest: &str) -> anyhow::Result<&'a [u8]> {
        if file.len() < HEADER || &file[..16] != MAGIC {
            bail!("not an iar cache entry (or one of another format version)");
        }
        let (recorded, sum, native) = (&file[16..48], &file[48..80], &file[HEADER..]);
        if hex::encode(recorded) != digest {
            bail!(
                "entry was compiled from component {}, not {digest}",
                hex::encode(recorded)
            );
        }
        if checksum(recorded, native) != sum {
            bail!("checksum mismatch: the entry is truncated or corrupted");
        }
        Ok(native)
    }
}

/// Creates the cache directory (0700) if it is missing, and accepts it only
/// if no one but this user can write to it: a cached entry is native code
/// that this process will run.
pub(super) fn dir_trusted(dir: &Path) -> Result<(), String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot create it: {e}"))?;
        }
        let meta = std::fs::metadata(dir).map_err(|e| format!("cannot stat it: {e}"))?;
        if !meta.is_dir() {
            return Err("it is not a directory".into());
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me {
            return Err(format!(
                "it is owned by uid {}, not by this user (uid {me})",
                meta.uid()
            ));
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o022 != 0 {
            return Err(format!(
                "it is writable by group or others (mode {mode:04o}); make it 0700"
            ));
        }
        Ok(())
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Err("ownership cannot be checked on this platform".into())
    }
}

/// Writes through a temporary file (0600) in the same directory and renames
/// it into place, so a reader never sees a partial file.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut builder = tempfile::Builder::new();
    builder.prefix(TEMP_PREFIX).suffix(".tmp");
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600));
    let mut tmp = builder.tempfile_in(dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests;
