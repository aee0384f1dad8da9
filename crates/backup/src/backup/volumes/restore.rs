//! Writing a volume back from its manifest, beneath the target's handle.
//!
//! A manifest comes from a store, and whoever can write a store can craft
//! one (every digest correct). So the whole manifest is checked first
//! ([`plan_restore`], pure): every path relative and plain, none twice,
//! every parent a directory the manifest itself lists earlier (never a
//! symlink or a file), every size and chunk count consistent — a refusal
//! names the entry and the rule before anything is written. Then every
//! write goes through directory handles opened with `O_NOFOLLOW` from the
//! target down, files are created `O_EXCL` (nothing existing is replaced
//! or written through), and symlinks are created, never followed.

use super::handles::{self, c_name, file_type, lossy, open_dir, stat_nofollow};
use super::{CHUNK, EntryKind, Manifest, ManifestEntry, data_key, get_json_gz, gunzip_chunk};
use iar_core::store::BackupStore;
use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use tokio::sync::mpsc;

#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    /// Restore the owners the backup recorded (root only, as
    /// `tar --same-owner`), and with them setuid, setgid and sticky bits;
    /// without it those bits are dropped.
    pub preserve_owner: bool,
    /// The namespace repositories' password, for a volume backed up into
    /// one (its key is a `restic/<namespace>/snapshots/<id>`).
    pub repository_password: Option<iar_repository::Password>,
}

/// One checked entry: where it goes and how.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The path's components, each a plain name.
    pub components: Vec<Vec<u8>>,
    pub kind: EntryKind,
    /// The mode to set, special bits already dropped unless owners are
    /// restored.
    pub mode: u32,
    pub owner: Option<(u32, u32)>,
    /// The data regions to write (for a file), and its length.
    pub extents: Vec<(u64, u64)>,
    pub size: u64,
    /// A symlink's target.
    pub target: Vec<u8>,
    pub index: usize,
}

fn refuse(e: &ManifestEntry, rule: &str, why: impl std::fmt::Display) -> String {
    format!(
        "entry {:?}: {why} (rule: {rule}); nothing was written",
        e.path
    )
}

fn is_sha(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Checks a whole manifest before anything is written.
pub fn plan_restore(manifest: &Manifest, options: &RestoreOptions) -> Result<Vec<Step>, String> {
    plan(manifest, options, true)
}

/// [`plan_restore`]; `chunked`: the files' content is the chunk format's
/// (digests and chunk lists to check), else a repository's (each blob
/// checked by the repository as it is read).
fn plan(manifest: &Manifest, options: &RestoreOptions, chunked: bool) -> Result<Vec<Step>, String> {
    let mut kinds: HashMap<Vec<u8>, EntryKind> = HashMap::with_capacity(manifest.entries.len());
    let mut steps = Vec::with_capacity(manifest.entries.len());
    for (index, e) in manifest.entries.iter().enumerate() {
        let path = e
            .path_bytes()
            .map_err(|why| refuse(e, "unsafe-path", why))?;
        let components: Vec<Vec<u8>> = path.split(|b| *b == b'/').map(<[u8]>::to_vec).collect();
        let plain = |c: &[u8]| !c.is_empty() && c != b"." && c != b".." && !c.contains(&0);
        if path.is_empty() || !components.iter().all(|c| plain(c)) {
            return Err(refuse(
                e,
                "unsafe-path",
                "not a relative path of plain names",
            ));
        }
        if kinds.contains_key(&path) {
            return Err(refuse(
                e,
                "duplicate-path",
                "the manifest names this path twice",
            ));
        }
        if components.len() > 1 {
            let parent = path[..path.len() - components.last().unwrap().len() - 1].to_vec();
            match kinds.get(&parent) {
                Some(EntryKind::Dir) => {}
                Some(EntryKind::Symlink) => {
                    return Err(refuse(
                        e,
                        "path-under-symlink",
                        format!("its parent {:?} is a symlink", lossy(&parent)),
                    ));
                }
                Some(EntryKind::File) => {
                    return Err(refuse(
                        e,
                        "path-under-file",
                        format!("its parent {:?} is a file", lossy(&parent)),
                    ));
                }
                None => {
                    return Err(refuse(
                        e,
                        "parent-not-listed",
                        format!(
                            "its parent {:?} is not a directory listed before it",
                            lossy(&parent)
                        ),
                    ));
                }
            }
        }
        let mut extents = Vec::new();
        if e.kind == EntryKind::File && !chunked {
            extents = vec![(0, e.size)];
        } else if e.kind == EntryKind::File {
            if !is_sha(&e.digest) || !e.chunks.iter().all(|c| is_sha(c)) {
                return Err(refuse(
                    e,
                    "manifest-inconsistent",
                    "a digest is not a sha256",
                ));
            }
            extents = if e.extents.is_empty() {
                vec![(0, e.size)]
            } else {
                e.extents.iter().map(|x| (x.offset, x.len)).collect()
            };
            let mut end = 0u64;
            let mut chunks = 0u64;
            for &(offset, len) in &extents {
                let stop = offset.checked_add(len);
                if offset < end || stop.is_none_or(|s| s > e.size) {
                    return Err(refuse(
                        e,
                        "manifest-inconsistent",
                        format!(
                            "extent {offset}+{len} overlaps another or passes the size {}",
                            e.size
                        ),
                    ));
                }
                end = offset + len;
                chunks += len.div_ceil(CHUNK as u64);
            }
            if chunks != e.chunks.len() as u64 {
                return Err(refuse(
                    e,
                    "manifest-inconsistent",
                    format!(
                        "{} bytes of data need {chunks} chunks, the manifest lists {}",
                        e.size,
                        e.chunks.len()
                    ),
                ));
            }
        }
        let mut target = Vec::new();
        if e.kind == EntryKind::Symlink {
            target = e
                .target_bytes()
                .map_err(|why| refuse(e, "unsafe-path", why))?;
            if target.is_empty() || target.contains(&0) {
                return Err(refuse(
                    e,
                    "unsafe-path",
                    "an empty symlink target or one with a NUL byte",
                ));
            }
        }
        if e.uid == Some(u32::MAX) || e.gid == Some(u32::MAX) {
            return Err(refuse(e, "manifest-inconsistent", "an owner of -1"));
        }
        let owner = match (options.preserve_owner, e.uid, e.gid) {
            (true, Some(u), Some(g)) => Some((u, g)),
            _ => None,
        };
        // Setuid, setgid and sticky only with the owner they were set for.
        let mode = if owner.is_some() {
            e.mode & 0o7777
        } else {
            e.mode & 0o777
        };
        kinds.insert(path, e.kind);
        steps.push(Step {
            components,
            kind: e.kind,
            mode,
            owner,
            extents,
            size: if e.kind == EntryKind::File { e.size } else { 0 },
            target,
            index,
        });
    }
    Ok(steps)
}

/// What the writer thread is asked to do.
enum Op {
    Begin(Step),
    Data {
        offset: u64,
        bytes: bytes::Bytes,
    },
    /// The file's sha256 to check, when the source has one.
    End {
        digest: Option<String>,
    },
}

/// Writes a volume back from its manifest into `dest` (which must exist),
/// checking every chunk's digest. The inverse of the walk.
pub async fn restore_volume(
    store: &BackupStore,
    backup: &str,
    manifest_key: &str,
    dest: &Path,
    options: &RestoreOptions,
) -> Result<Manifest, String> {
    if let Some((namespace, id)) = super::parse_snapshot_key(manifest_key) {
        return restore_snapshot(store, namespace, id, dest, options)
            .await
            .map_err(|e| format!("{manifest_key}: {e}"));
    }
    let manifest: Manifest = get_json_gz(store, manifest_key)
        .await?
        .ok_or_else(|| format!("{manifest_key}: missing"))?;
    let steps = plan_restore(&manifest, options).map_err(|e| format!("{manifest_key}: {e}"))?;
    let root = open_target(dest)?;
    let (tx, rx) = mpsc::channel::<Op>(2);
    let writer = tokio::task::spawn_blocking(move || Writer::new(root, true).run(rx));
    let fed = feed(store, backup, &manifest, steps, &tx).await;
    drop(tx);
    let written = writer
        .await
        .map_err(|e| format!("{manifest_key}: the writer stopped: {e}"))?;
    // The writer's error is the cause when both failed (a send fails
    // because the writer stopped).
    written.map_err(|e| format!("{manifest_key}: {e}"))?;
    fed?;
    Ok(manifest)
}

/// Fetches and checks each chunk and hands the writer its work, in order.
async fn feed(
    store: &BackupStore,
    backup: &str,
    manifest: &Manifest,
    steps: Vec<Step>,
    tx: &mpsc::Sender<Op>,
) -> Result<(), String> {
    let gone = || "the writer stopped".to_string();
    for step in steps {
        let e = &manifest.entries[step.index];
        let extents = step.extents.clone();
        tx.send(Op::Begin(step)).await.map_err(|_| gone())?;
        if e.kind != EntryKind::File {
            continue;
        }
        let mut chunks = e.chunks.iter();
        for (offset, len) in extents {
            let mut pos = offset;
            while pos < offset + len {
                let sha = chunks
                    .next()
                    .ok_or_else(|| format!("{}: too few chunks", e.path))?;
                let key = data_key(backup, sha);
                let gz = store
                    .get_key(&key)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("{key}: missing"))?;
                let chunk = gunzip_chunk(&gz).map_err(|err| format!("{key} is corrupt: {err}"))?;
                if hex::encode(Sha256::digest(&chunk)) != *sha {
                    return Err(format!("{key} is corrupt: digest mismatch"));
                }
                let want = (CHUNK as u64).min(offset + len - pos);
                if chunk.len() as u64 != want {
                    return Err(format!(
                        "{}: chunk {sha} holds {} bytes where the manifest needs {want} (rule: manifest-inconsistent)",
                        e.path,
                        chunk.len()
                    ));
                }
                tx.send(Op::Data {
                    offset: pos,
                    bytes: chunk.into(),
                })
                .await
                .map_err(|_| gone())?;
                pos += want;
            }
        }
        tx.send(Op::End {
            digest: Some(e.digest.clone()),
        })
        .await
        .map_err(|_| gone())?;
    }
    Ok(())
}

fn open_target(dest: &Path) -> Result<OwnedFd, String> {
    rustix::fs::openat(
        CWD,
        dest,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("{}: {e}", dest.display()))
}

/// A snapshot's entry as a manifest entry, for [`plan`]'s checks: a
/// repository is a store whoever can write the store can craft too.
fn entry_of(path: &Path, node: &iar_repository::Node) -> ManifestEntry {
    use iar_repository::NodeType;
    let (path, path_hex) = super::named(path.as_os_str().as_bytes());
    let kind = match &node.node_type {
        NodeType::Dir => EntryKind::Dir,
        NodeType::Symlink { .. } => EntryKind::Symlink,
        _ => EntryKind::File,
    };
    let (target, target_hex) = match kind {
        EntryKind::Symlink => {
            let (t, hex) = super::named(node.node_type.to_link().as_os_str().as_bytes());
            (Some(t), hex)
        }
        _ => (None, None),
    };
    ManifestEntry {
        path,
        path_hex,
        kind,
        mode: iar_repository::mode::permissions_from_go(node.meta.mode.unwrap_or(0o600)),
        size: if kind == EntryKind::File {
            node.meta.size
        } else {
            0
        },
        uid: node.meta.uid,
        gid: node.meta.gid,
        target,
        target_hex,
        ..ManifestEntry::default()
    }
}

/// Writes snapshot `id` of `namespace`'s repository into `dest`, with the
/// same checks and handle-based writes as a chunk-format restore.
async fn restore_snapshot(
    store: &BackupStore,
    namespace: &str,
    id: &str,
    dest: &Path,
    options: &RestoreOptions,
) -> Result<Manifest, String> {
    let password = options.repository_password.clone().ok_or(
        "the volume is in a repository and no repository password was given (rule: repository-password)",
    )?;
    let root = open_target(dest)?;
    let (store, namespace, id, options) = (
        store.clone(),
        namespace.to_string(),
        id.to_string(),
        options.clone(),
    );
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let repo = iar_repository::VolumeRepository::open(&store, &namespace, &password, &runtime)
            .map_err(|e| e.to_string())?;
        let reader = repo.reader(&id).map_err(|e| e.to_string())?;
        let listed = reader.entries().map_err(|e| e.to_string())?;
        let manifest = Manifest {
            backup: String::new(),
            pod_namespace: namespace.clone(),
            pod_name: String::new(),
            volume: String::new(),
            pvc: None,
            entries: listed.iter().map(|(p, n)| entry_of(p, n)).collect(),
            skipped: Vec::new(),
        };
        let steps = plan(&manifest, &options, false)?;
        // The writer on a thread of its own, the reading (fetch, decrypt,
        // decompress: a file's blobs on `iar_repository::READERS` threads)
        // here, so a restore uses every core; blobs are checked by the
        // repository, so the writer hashes nothing.
        let (tx, rx) = mpsc::channel::<Op>(4);
        let outcome = std::thread::scope(|scope| {
            let writer = scope.spawn(|| Writer::new(root, false).run(rx));
            let gone = || "the writer stopped".to_string();
            let read = (|| {
                for step in steps {
                    let node = &listed[step.index].1;
                    let is_file = step.kind == EntryKind::File;
                    tx.blocking_send(Op::Begin(step)).map_err(|_| gone())?;
                    if is_file {
                        reader.read_file(node, |offset, bytes| {
                            tx.blocking_send(Op::Data { offset, bytes })
                                .map_err(|_| gone())
                        })?;
                        tx.blocking_send(Op::End { digest: None })
                            .map_err(|_| gone())?;
                    }
                }
                Ok::<_, String>(())
            })();
            drop(tx);
            let written = writer
                .join()
                .unwrap_or_else(|_| Err("the writer stopped".into()));
            // The writer's error is the cause when both failed.
            written.and(read)
        });
        outcome?;
        Ok(manifest)
    })
    .await
    .map_err(|e| format!("the restore stopped: {e}"))?
}

/// A file being written: its step, its handle, its running digest.
type OpenFile = (Step, std::fs::File, Option<Sha256>);

/// Owns every handle of the restore; runs on one blocking thread.
struct Writer {
    root: OwnedFd,
    /// The open directories from the target down to the last parent used.
    chain: Vec<(Vec<u8>, OwnedFd)>,
    /// Directories whose mode is set last (a read-only directory would
    /// refuse its own contents).
    dirs: Vec<Step>,
    /// Whether files are hashed for a digest given at their end.
    hash: bool,
}

fn show(components: &[Vec<u8>]) -> String {
    lossy(&components.join(&b'/'))
}

impl Writer {
    fn new(root: OwnedFd, hash: bool) -> Self {
        Writer {
            root,
            chain: Vec::new(),
            dirs: Vec::new(),
            hash,
        }
    }

    /// The handle of `parents` beneath the target, opened without
    /// following any symlink.
    fn parent(&mut self, parents: &[Vec<u8>]) -> Result<&OwnedFd, String> {
        let same = self
            .chain
            .iter()
            .zip(parents)
            .take_while(|((a, _), b)| a == *b)
            .count();
        self.chain.truncate(same);
        for (i, name) in parents.iter().enumerate().skip(same) {
            let at = self.chain.last().map(|(_, fd)| fd).unwrap_or(&self.root);
            let fd = open_dir(at, OsStr::from_bytes(name)).map_err(|e| {
                let where_ = show(&parents[..=i]);
                match e {
                    handles::OpenError::Symlink => format!(
                        "{where_:?} is a symlink in the target: not followed (rule: path-under-symlink)"
                    ),
                    handles::OpenError::NotDir => {
                        format!("{where_:?} is not a directory in the target (rule: target-exists)")
                    }
                    handles::OpenError::Io(e) => format!("{where_:?}: {e}"),
                }
            })?;
            self.chain.push((name.clone(), fd));
        }
        Ok(self.chain.last().map(|(_, fd)| fd).unwrap_or(&self.root))
    }

    fn run(mut self, mut rx: mpsc::Receiver<Op>) -> Result<(), String> {
        let mut file = None;
        while let Some(op) = rx.blocking_recv() {
            self.apply(op, &mut file)?;
        }
        self.finish()
    }

    fn apply(&mut self, op: Op, file: &mut Option<OpenFile>) -> Result<(), String> {
        match op {
            Op::Begin(step) => match step.kind {
                EntryKind::Dir => self.mkdir(step)?,
                EntryKind::Symlink => self.symlink(&step)?,
                EntryKind::File => {
                    let f = self.create(&step)?;
                    *file = Some((step, f, self.hash.then(Sha256::new)));
                }
            },
            Op::Data { offset, bytes } => {
                let (step, f, hash) = file.as_mut().ok_or("data outside a file")?;
                if let Some(hash) = hash {
                    hash.update(&bytes);
                }
                // All zeros: left a hole (the length is set at the end).
                if bytes.iter().any(|b| *b != 0) {
                    f.write_all_at(&bytes, offset)
                        .map_err(|e| format!("{}: {e}", show(&step.components)))?;
                }
            }
            Op::End { digest } => {
                let (step, f, hash) = file.take().ok_or("end outside a file")?;
                self.finish_file(step, f, hash, digest.as_deref())?;
            }
        }
        Ok(())
    }

    /// Directory modes last, deepest first.
    fn finish(mut self) -> Result<(), String> {
        for step in std::mem::take(&mut self.dirs).into_iter().rev() {
            let (name, parents) = step.components.split_last().expect("checked: not empty");
            let parent = self.parent(parents)?;
            let fd = open_dir(parent, OsStr::from_bytes(name))
                .map_err(|_| format!("{}: changed during the restore", show(&step.components)))?;
            set_owner_and_mode(&fd, &step)?;
        }
        Ok(())
    }

    fn mkdir(&mut self, step: Step) -> Result<(), String> {
        let (name, parents) = step.components.split_last().expect("checked: not empty");
        let parent = self.parent(parents)?;
        match rustix::fs::mkdirat(parent, OsStr::from_bytes(name), Mode::from_raw_mode(0o700)) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) => {
                let st = stat_nofollow(parent, OsStr::from_bytes(name))
                    .map_err(|e| format!("{}: {e}", show(&step.components)))?;
                if file_type(&st) != FileType::Directory {
                    return Err(format!(
                        "{} exists in the target and is not a directory: not replaced (rule: target-exists)",
                        show(&step.components)
                    ));
                }
            }
            Err(e) => return Err(format!("{}: {e}", show(&step.components))),
        }
        self.dirs.push(step);
        Ok(())
    }

    fn create(&mut self, step: &Step) -> Result<std::fs::File, String> {
        let (name, parents) = step.components.split_last().expect("checked: not empty");
        let parent = self.parent(parents)?;
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(
            parent,
            OsStr::from_bytes(name),
            flags,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => Ok(std::fs::File::from(fd)),
            Err(rustix::io::Errno::EXIST) => Err(format!(
                "{} exists in the target: not replaced or written through (rule: target-exists)",
                show(&step.components)
            )),
            Err(e) => Err(format!("{}: {e}", show(&step.components))),
        }
    }

    fn finish_file(
        &mut self,
        step: Step,
        f: std::fs::File,
        hash: Option<Sha256>,
        digest: Option<&str>,
    ) -> Result<(), String> {
        let shown = show(&step.components);
        let differs = match (digest, hash) {
            (Some(want), Some(hash)) => hex::encode(hash.finalize()) != want,
            (Some(_), None) => return Err(format!("{shown}: a digest to check and none made")),
            (None, _) => false,
        };
        if differs {
            let (name, parents) = step.components.split_last().expect("checked: not empty");
            let parent = self.parent(parents)?;
            let _ = rustix::fs::unlinkat(parent, OsStr::from_bytes(name), AtFlags::empty());
            return Err(format!("{shown}: digest mismatch"));
        }
        // Holes at the end, and a sparse file's length.
        f.set_len(step.size).map_err(|e| format!("{shown}: {e}"))?;
        set_owner_and_mode(&f, &step)?;
        Ok(())
    }

    fn symlink(&mut self, step: &Step) -> Result<(), String> {
        let (name, parents) = step.components.split_last().expect("checked: not empty");
        let parent = self.parent(parents)?;
        let target = c_name(&step.target)?;
        match rustix::fs::symlinkat(target.as_c_str(), parent, OsStr::from_bytes(name)) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::EXIST) => Err(format!(
                "{} exists in the target: not replaced (rule: target-exists)",
                show(&step.components)
            )),
            Err(e) => Err(format!("{}: {e}", show(&step.components))),
        }
    }
}

fn set_owner_and_mode(fd: &impl std::os::fd::AsFd, step: &Step) -> Result<(), String> {
    let shown = || show(&step.components);
    if let Some((uid, gid)) = step.owner {
        let (u, g) = (
            rustix::fs::Uid::from_raw(uid),
            rustix::fs::Gid::from_raw(gid),
        );
        rustix::fs::fchown(fd, Some(u), Some(g))
            .map_err(|e| format!("{}: setting its owner: {e}", shown()))?;
    }
    rustix::fs::fchmod(fd, Mode::from_raw_mode(step.mode)).map_err(|e| format!("{}: {e}", shown()))
}
