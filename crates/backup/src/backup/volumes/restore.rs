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
//!
//! A file whose content cannot be read back (a chunk or blob missing,
//! corrupt, or not the one its id names) is removed again and reported,
//! and the restore carries on with the rest: it then ends with an error
//! naming every such file, so a restore that ends well restored all.
//!
//! A restore from a record ([`RestoreOptions::restore_record`]) also
//! checks that the data is the record's volume's: a record is a store
//! object too, and one pointing at another namespace's repository (or
//! another pod's snapshot) is refused before anything is written.

use super::handles::{self, c_name, file_type, lossy, open_dir, stat_nofollow};
use super::{
    CHUNK, EntryKind, Manifest, ManifestEntry, SkippedEntry, VolumeBackup, VolumePhase, data_key,
    get_json_gz, gunzip_chunk, parse_snapshot_key, skipped_key,
};
use iar_core::store::BackupStore;
use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;

#[path = "restore_meta.rs"]
mod meta;
#[cfg(test)]
#[path = "restore_tests.rs"]
mod tests;

#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    /// Restore the owners the backup recorded (root only, as
    /// `tar --same-owner`), and with them setuid, setgid and sticky bits
    /// and the extended attributes outside `user.*`; without it those
    /// bits and attributes are dropped.
    pub preserve_owner: bool,
    /// The namespace repositories' password, for a volume backed up into
    /// one (its key is a `restic/<namespace>/snapshots/<id>`).
    pub repository_password: Option<iar_repository::Password>,
}

/// How a file's step stands to the other names of a hard-linked file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Link {
    #[default]
    None,
    /// The first name: written, and linked to by later ones.
    First,
    /// A later name: a link to the entry of this index, not written.
    To(usize),
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
    /// The modification time (seconds, nanoseconds), when the source
    /// has one.
    pub mtime: Option<(i64, u32)>,
    /// Extended attributes to set, already limited to those allowed.
    pub xattrs: Vec<(String, Vec<u8>)>,
    pub link: Link,
}

/// What a restore did.
#[derive(Debug)]
#[must_use = "a restore can end with files not restored"]
pub struct Restored {
    pub manifest: Manifest,
    /// Files restored, and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// Files not restored, or restored only in part: each names the file,
    /// why, and its rule.
    pub not_restored: Vec<String>,
    /// What was restored without some of its metadata (extended
    /// attributes, times).
    pub warnings: Vec<String>,
    /// Everything the backup itself left out, with its reason (only from
    /// [`RestoreOptions::restore_record`]).
    pub skipped: Vec<SkippedEntry>,
}

impl Restored {
    /// The restore's error when a file was not restored: every one.
    pub fn error(&self) -> Option<String> {
        (!self.not_restored.is_empty()).then(|| {
            format!(
                "{} files not restored (or only in part): {}",
                self.not_restored.len(),
                self.not_restored.join("; ")
            )
        })
    }
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
            // The chunk format records none of these.
            mtime: None,
            xattrs: Vec::new(),
            link: Link::None,
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
    /// The file's content is all sent. `digest`: its sha256 to check,
    /// when the source has one; `short`: the length the content had
    /// where the entry says another, and why (the file is then restored
    /// at that length and reported).
    End {
        digest: Option<String>,
        short: Option<(u64, String)>,
    },
    /// The file's content could not be read: the file is removed and
    /// reported, and the restore goes on.
    Fail {
        why: String,
    },
}

/// Writes a volume back from its manifest (or snapshot) key into `dest`
/// (which must exist), checking every chunk's digest (every blob's id).
/// The inverse of the walk. Ends with an error naming every file not
/// restored; for a repository snapshot, the snapshot must be tagged with
/// `backup` and the key's namespace.
///
/// Without the record the key came from, nothing says whose volume the
/// key names: [`RestoreOptions::restore_record`] checks that too.
pub async fn restore_volume(
    store: &BackupStore,
    backup: &str,
    manifest_key: &str,
    dest: &Path,
    options: &RestoreOptions,
) -> Result<Manifest, String> {
    let restored = if let Some((namespace, id)) = parse_snapshot_key(manifest_key) {
        let expect = meta::Expect {
            backup: backup.to_string(),
            namespace: namespace.to_string(),
            volume: None,
        };
        restore_snapshot(store, id, expect, dest, options)
            .await
            .map_err(|e| format!("{manifest_key}: {e}"))?
    } else {
        restore_chunks(store, backup, manifest_key, None, dest, options).await?
    };
    for w in &restored.warnings {
        tracing::warn!("{manifest_key}: {w}");
    }
    match restored.error() {
        Some(e) => Err(format!("{manifest_key}: {e}")),
        None => Ok(restored.manifest),
    }
}

impl RestoreOptions {
    /// Restores `record`'s volume into `dest` (which must exist): a
    /// Completed record's data, which must be the record's own volume's
    /// (rule `snapshot-mismatch` otherwise, before anything is read from
    /// a repository or written). Files that could not be restored are in
    /// the result ([`Restored::error`]); what the backup left out too.
    pub async fn restore_record(
        &self,
        store: &BackupStore,
        record: &VolumeBackup,
        dest: &Path,
    ) -> Result<Restored, String> {
        let (VolumePhase::Completed, Some(key)) = (&record.phase, &record.manifest_key) else {
            return Err(format!(
                "volume backup {} did not complete ({:?}: {}); nothing to restore",
                record.describe(),
                record.phase,
                record.reason()
            ));
        };
        let mut restored = if let Some((namespace, id)) = parse_snapshot_key(key) {
            // Tenant A's restore reads only `restic/<A>/`.
            if namespace != record.pod_namespace {
                return Err(format!(
                    "{key}: volume backup {} names a snapshot in namespace {namespace:?}'s repository (rule: snapshot-mismatch); nothing was read or written",
                    record.describe()
                ));
            }
            let expect = meta::Expect {
                backup: record.backup.clone(),
                namespace: record.pod_namespace.clone(),
                volume: Some((
                    record.pod_name.clone(),
                    record.volume.clone(),
                    record.pvc.clone(),
                )),
            };
            restore_snapshot(store, id, expect, dest, self)
                .await
                .map_err(|e| format!("{key}: {e}"))?
        } else {
            restore_chunks(store, &record.backup, key, Some(record), dest, self).await?
        };
        restored.skipped =
            left_out(store, record, &restored.manifest, &mut restored.warnings).await;
        Ok(restored)
    }
}

/// Everything the backup of `record` left out: the store's complete list
/// when it wrote one, else the manifest's (the chunk format keeps it
/// there).
async fn left_out(
    store: &BackupStore,
    record: &VolumeBackup,
    manifest: &Manifest,
    warnings: &mut Vec<String>,
) -> Vec<SkippedEntry> {
    let key = skipped_key(
        &record.backup,
        &record.pod_namespace,
        &record.pod_name,
        &record.volume,
    );
    match get_json_gz::<Vec<SkippedEntry>>(store, &key).await {
        Ok(Some(listed)) => listed,
        Ok(None) => manifest.skipped.clone(),
        Err(e) => {
            warnings.push(format!(
                "the list of what the backup left out could not be read: {e}"
            ));
            manifest.skipped.clone()
        }
    }
}

/// `e` with the files not restored before it, which would otherwise go
/// unreported.
fn stopped(e: String, report: &Report) -> String {
    if report.not_restored.is_empty() {
        return e;
    }
    format!(
        "{e}; before that, {} files were not restored: {}",
        report.not_restored.len(),
        report.not_restored.join("; ")
    )
}

/// A chunk-format manifest's volume: checked against `record` when there
/// is one.
async fn restore_chunks(
    store: &BackupStore,
    backup: &str,
    manifest_key: &str,
    record: Option<&VolumeBackup>,
    dest: &Path,
    options: &RestoreOptions,
) -> Result<Restored, String> {
    let manifest: Manifest = get_json_gz(store, manifest_key)
        .await?
        .ok_or_else(|| format!("{manifest_key}: missing"))?;
    if let Some(r) = record {
        let theirs = (
            &manifest.backup,
            &manifest.pod_namespace,
            &manifest.pod_name,
            &manifest.volume,
            &manifest.pvc,
        );
        if theirs != (&r.backup, &r.pod_namespace, &r.pod_name, &r.volume, &r.pvc) {
            return Err(format!(
                "{manifest_key}: the manifest is of volume {} of pod {}/{} in backup {:?}, not the record's {} in backup {:?} (rule: snapshot-mismatch); nothing was written",
                manifest.volume,
                manifest.pod_namespace,
                manifest.pod_name,
                manifest.backup,
                r.describe(),
                r.backup
            ));
        }
    }
    let steps = plan_restore(&manifest, options).map_err(|e| format!("{manifest_key}: {e}"))?;
    let root = open_target(dest)?;
    let (tx, rx) = mpsc::channel::<Op>(2);
    let writer = tokio::task::spawn_blocking(move || Writer::new(root, true).run(rx));
    let fed = feed(store, backup, &manifest, steps, &tx).await;
    drop(tx);
    let (report, written) = writer
        .await
        .map_err(|e| format!("{manifest_key}: the writer stopped: {e}"))?;
    // The writer's error is the cause when both failed (a send fails
    // because the writer stopped).
    written
        .and(fed)
        .map_err(|e| format!("{manifest_key}: {}", stopped(e, &report)))?;
    Ok(report.into_restored(manifest, Vec::new()))
}

/// Why a file's content stopped: its own fault, or the writer's.
enum Fed {
    File(String),
    Gone,
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
        let end = match feed_file(store, backup, e, extents, tx).await {
            Ok(()) => Op::End {
                digest: Some(e.digest.clone()),
                short: None,
            },
            Err(Fed::File(why)) => Op::Fail { why },
            Err(Fed::Gone) => return Err(gone()),
        };
        tx.send(end).await.map_err(|_| gone())?;
    }
    Ok(())
}

/// One file's chunks, each checked against its digest.
async fn feed_file(
    store: &BackupStore,
    backup: &str,
    e: &ManifestEntry,
    extents: Vec<(u64, u64)>,
    tx: &mpsc::Sender<Op>,
) -> Result<(), Fed> {
    let mut chunks = e.chunks.iter();
    for (offset, len) in extents {
        let mut pos = offset;
        while pos < offset + len {
            let sha = chunks.next().ok_or_else(|| {
                Fed::File("the manifest lists too few chunks (rule: manifest-inconsistent)".into())
            })?;
            let key = data_key(backup, sha);
            let gz = store
                .get_key(&key)
                .await
                .map_err(|err| Fed::File(format!("reading {key}: {err} (rule: store-read)")))?
                .ok_or_else(|| Fed::File(format!("{key} is missing (rule: chunk-missing)")))?;
            let chunk = gunzip_chunk(&gz).map_err(|err| {
                // The inflate bound names its own rule.
                let err = err.to_string();
                let rule = if err.contains("(rule: ") {
                    ""
                } else {
                    " (rule: chunk-corrupt)"
                };
                Fed::File(format!("{key} is corrupt: {err}{rule}"))
            })?;
            if hex::encode(Sha256::digest(&chunk)) != *sha {
                return Err(Fed::File(format!(
                    "{key} is corrupt: digest mismatch (rule: chunk-digest)"
                )));
            }
            let want = (CHUNK as u64).min(offset + len - pos);
            if chunk.len() as u64 != want {
                return Err(Fed::File(format!(
                    "chunk {sha} holds {} bytes where the manifest needs {want} (rule: manifest-inconsistent)",
                    chunk.len()
                )));
            }
            tx.send(Op::Data {
                offset: pos,
                bytes: chunk.into(),
            })
            .await
            .map_err(|_| Fed::Gone)?;
            pos += want;
        }
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

/// Writes snapshot `id` of `expect`'s namespace's repository into `dest`,
/// with the same checks and handle-based writes as a chunk-format
/// restore, once the snapshot's tags say it is `expect`'s.
async fn restore_snapshot(
    store: &BackupStore,
    id: &str,
    expect: meta::Expect,
    dest: &Path,
    options: &RestoreOptions,
) -> Result<Restored, String> {
    let password = options.repository_password.clone().ok_or(
        "the volume is in a repository and no repository password was given (rule: repository-password)",
    )?;
    let root = open_target(dest)?;
    let (store, id, options) = (store.clone(), id.to_string(), options.clone());
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let repo =
            iar_repository::VolumeRepository::open(&store, &expect.namespace, &password, &runtime)
                .map_err(|e| e.to_string())?;
        let reader = repo.reader(&id).map_err(|e| e.to_string())?;
        meta::check_tags(reader.tags(), &expect, &id)?;
        let listed = reader.entries().map_err(|e| e.to_string())?;
        let (pod_name, volume, pvc) = expect.volume.clone().unwrap_or_default();
        let manifest = Manifest {
            backup: expect.backup.clone(),
            pod_namespace: expect.namespace.clone(),
            pod_name,
            volume,
            pvc,
            entries: listed.iter().map(|(p, n)| entry_of(p, n)).collect(),
            skipped: Vec::new(),
        };
        let mut steps = plan(&manifest, &options, false)?;
        let warnings = meta::add_metadata(&mut steps, &listed, &options);
        // The writer on a thread of its own, the reading (fetch, decrypt,
        // decompress: a file's blobs on `iar_repository::READERS` threads)
        // here, so a restore uses every core; blobs are checked by the
        // repository, so the writer hashes nothing.
        let (tx, rx) = mpsc::channel::<Op>(4);
        let (report, outcome) = std::thread::scope(|scope| {
            let writer = scope.spawn(|| Writer::new(root, false).run(rx));
            let gone = || "the writer stopped".to_string();
            let read = (|| {
                // First names of hard-linked files not fully restored:
                // their later names are written as files of their own.
                let mut unlinkable = HashSet::new();
                for mut step in steps {
                    let node = &listed[step.index].1;
                    if let Link::To(first) = step.link
                        && unlinkable.contains(&first)
                    {
                        step.link = Link::None;
                    }
                    let reads = step.kind == EntryKind::File && !matches!(step.link, Link::To(_));
                    let (index, size) = (step.index, step.size);
                    tx.blocking_send(Op::Begin(step)).map_err(|_| gone())?;
                    if !reads {
                        continue;
                    }
                    let sink_failed = AtomicBool::new(false);
                    let read = reader.read_file(node, |offset, bytes| {
                        tx.blocking_send(Op::Data { offset, bytes }).map_err(|_| {
                            sink_failed.store(true, Ordering::Relaxed);
                            gone()
                        })
                    });
                    let end = match read {
                        Ok(held) if held == size => Op::End {
                            digest: None,
                            short: None,
                        },
                        Ok(held) => Op::End {
                            digest: None,
                            short: Some((
                                held,
                                format!(
                                    "the snapshot says {size} bytes and its blobs hold {held}: those {held} were restored (rule: size-mismatch)"
                                ),
                            )),
                        },
                        Err(e) if sink_failed.load(Ordering::Relaxed) => return Err(e),
                        Err(why) => Op::Fail { why },
                    };
                    if !matches!(end, Op::End { short: None, .. }) {
                        unlinkable.insert(index);
                    }
                    tx.blocking_send(end).map_err(|_| gone())?;
                }
                Ok::<_, String>(())
            })();
            drop(tx);
            let (report, written) = writer
                .join()
                .unwrap_or_else(|_| (Report::default(), Err("the writer stopped".into())));
            // The writer's error is the cause when both failed.
            let outcome = written.and(read);
            (report, outcome)
        });
        outcome.map_err(|e| stopped(e, &report))?;
        Ok(report.into_restored(manifest, warnings))
    })
    .await
    .map_err(|e| format!("the restore stopped: {e}"))?
}

/// What the writer reports besides a refusal that stops it.
#[derive(Debug, Default)]
struct Report {
    files: u64,
    bytes: u64,
    not_restored: Vec<String>,
    warnings: Vec<String>,
}

impl Report {
    /// The restore's result; `warnings`: those found before writing.
    fn into_restored(self, manifest: Manifest, mut warnings: Vec<String>) -> Restored {
        warnings.extend(self.warnings);
        Restored {
            manifest,
            files: self.files,
            bytes: self.bytes,
            not_restored: self.not_restored,
            warnings,
            skipped: Vec::new(),
        }
    }
}

/// A file being written: its step, its handle, its running digest.
type OpenFile = (Step, std::fs::File, Option<Sha256>);

/// Owns every handle of the restore; runs on one blocking thread.
struct Writer {
    root: OwnedFd,
    /// The open directories from the target down to the last parent used.
    chain: Vec<(Vec<u8>, OwnedFd)>,
    /// Directories whose mode and time are set last (a read-only
    /// directory would refuse its own contents; each entry written
    /// changes its directory's mtime).
    dirs: Vec<Step>,
    /// Whether files are hashed for a digest given at their end.
    hash: bool,
    /// First names of hard-linked files, by entry index: where they are
    /// and the (device, inode) this restore created there.
    firsts: HashMap<usize, (Vec<Vec<u8>>, u64, u64)>,
    report: Report,
    xattrs: meta::XattrsUnsupported,
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
            firsts: HashMap::new(),
            report: Report::default(),
            xattrs: meta::XattrsUnsupported::default(),
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

    /// Applies every op until the channel closes or a refusal stops it;
    /// the report holds what happened before either.
    fn run(mut self, mut rx: mpsc::Receiver<Op>) -> (Report, Result<(), String>) {
        let mut file = None;
        let mut outcome = Ok(());
        while let Some(op) = rx.blocking_recv() {
            outcome = self.apply(op, &mut file);
            if outcome.is_err() {
                break;
            }
        }
        // Closing the channel stops the feeder at its next send.
        drop(rx);
        if outcome.is_ok() {
            outcome = self.finish();
        }
        let mut report = std::mem::take(&mut self.report);
        report.warnings.extend(self.xattrs.warning());
        (report, outcome)
    }

    fn apply(&mut self, op: Op, file: &mut Option<OpenFile>) -> Result<(), String> {
        match op {
            Op::Begin(step) => match (step.kind, step.link) {
                (EntryKind::Dir, _) => self.mkdir(step)?,
                (EntryKind::Symlink, _) => self.symlink(&step)?,
                (EntryKind::File, Link::To(first)) => self.link(&step, first)?,
                (EntryKind::File, _) => {
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
            Op::End { digest, short } => {
                let (step, f, hash) = file.take().ok_or("end outside a file")?;
                self.finish_file(step, f, hash, digest.as_deref(), short)?;
            }
            Op::Fail { why } => {
                let (step, f, _) = file.take().ok_or("a failure outside a file")?;
                drop(f);
                self.not_restored(&step, &why)?;
            }
        }
        Ok(())
    }

    /// Removes a file whose content could not be restored (what it holds
    /// is not the backup's) and reports it.
    fn not_restored(&mut self, step: &Step, why: &str) -> Result<(), String> {
        let (name, parents) = step.components.split_last().expect("checked: not empty");
        let parent = self.parent(parents)?;
        let _ = rustix::fs::unlinkat(parent, OsStr::from_bytes(name), AtFlags::empty());
        self.firsts.remove(&step.index);
        self.report
            .not_restored
            .push(format!("{}: {why}; not restored", show(&step.components)));
        Ok(())
    }

    /// Directory owners, attributes, modes and times last, deepest first.
    fn finish(&mut self) -> Result<(), String> {
        for step in std::mem::take(&mut self.dirs).into_iter().rev() {
            let (name, parents) = step.components.split_last().expect("checked: not empty");
            let parent = self.parent(parents)?;
            let fd = open_dir(parent, OsStr::from_bytes(name))
                .map_err(|_| format!("{}: changed during the restore", show(&step.components)))?;
            self.set_metadata(&fd, &step)?;
        }
        Ok(())
    }

    /// Owner, extended attributes, mode and time, in that order: a chown
    /// drops file capabilities (`security.capability`), and a read-only
    /// mode refuses `user.*` attributes to their owner.
    fn set_metadata(&mut self, fd: &impl std::os::fd::AsFd, step: &Step) -> Result<(), String> {
        set_owner(fd, step)?;
        meta::set_xattrs(fd, step, &mut self.xattrs, &mut self.report.warnings);
        rustix::fs::fchmod(fd, Mode::from_raw_mode(step.mode))
            .map_err(|e| format!("{}: {e}", show(&step.components)))?;
        if let Some(mtime) = step.mtime
            && let Err(e) = rustix::fs::futimens(fd, &meta::times(mtime))
        {
            self.report.warnings.push(format!(
                "{}: its modification time was not restored: {e}",
                show(&step.components)
            ));
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
        short: Option<(u64, String)>,
    ) -> Result<(), String> {
        let shown = show(&step.components);
        let differs = match (digest, hash) {
            (Some(want), Some(hash)) => hex::encode(hash.finalize()) != want,
            (Some(_), None) => return Err(format!("{shown}: a digest to check and none made")),
            (None, _) => false,
        };
        if differs {
            drop(f);
            return self.not_restored(
                &step,
                "its content is not the manifest's: digest mismatch (rule: file-digest)",
            );
        }
        // Holes at the end, and a sparse file's length.
        let len = short.as_ref().map_or(step.size, |(held, _)| *held);
        f.set_len(len).map_err(|e| format!("{shown}: {e}"))?;
        self.set_metadata(&f, &step)?;
        match short {
            Some((_, why)) => self.report.not_restored.push(format!("{shown}: {why}")),
            None => {
                self.report.files += 1;
                self.report.bytes += len;
            }
        }
        if step.link == Link::First {
            let st = rustix::fs::fstat(&f).map_err(|e| format!("{shown}: {e}"))?;
            self.firsts
                .insert(step.index, (step.components, st.st_dev, st.st_ino));
        }
        Ok(())
    }

    /// A later name of a hard-linked file: linked, beneath both
    /// directories' handles, to the file this restore created at the
    /// first name (checked by device and inode before and after: the
    /// target is writable by others while it is restored).
    fn link(&mut self, step: &Step, first: usize) -> Result<(), String> {
        let shown = show(&step.components);
        let (at, dev, ino) = self
            .firsts
            .get(&first)
            .cloned()
            .ok_or_else(|| format!("{shown}: the file it links to was not restored"))?;
        let ours = |st: &rustix::fs::Stat| {
            file_type(st) == FileType::RegularFile && st.st_dev == dev && st.st_ino == ino
        };
        let changed = || {
            format!(
                "{} changed in the target during the restore: {shown} is not linked to it (rule: target-changed)",
                show(&at)
            )
        };
        let (first_name, first_parents) = at.split_last().expect("checked: not empty");
        let from = self
            .parent(first_parents)?
            .try_clone()
            .map_err(|e| format!("{shown}: {e}"))?;
        let from_name = OsStr::from_bytes(first_name);
        if !stat_nofollow(&from, from_name).is_ok_and(|st| ours(&st)) {
            return Err(changed());
        }
        let (name, parents) = step.components.split_last().expect("checked: not empty");
        let name = OsStr::from_bytes(name);
        let to = self.parent(parents)?;
        // No AT_SYMLINK_FOLLOW: a name swapped for a symlink is linked as
        // the symlink, never what it points to (and caught below).
        match rustix::fs::linkat(&from, from_name, to, name, AtFlags::empty()) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) => {
                return Err(format!(
                    "{shown} exists in the target: not replaced (rule: target-exists)"
                ));
            }
            Err(e) => return Err(format!("{shown}: linking it to {}: {e}", show(&at))),
        }
        if !stat_nofollow(to, name).is_ok_and(|st| ours(&st)) {
            let _ = rustix::fs::unlinkat(to, name, AtFlags::empty());
            return Err(changed());
        }
        self.report.files += 1;
        self.report.bytes += step.size;
        Ok(())
    }

    fn symlink(&mut self, step: &Step) -> Result<(), String> {
        let (name, parents) = step.components.split_last().expect("checked: not empty");
        let parent = self.parent(parents)?;
        let target = c_name(&step.target)?;
        let name = OsStr::from_bytes(name);
        match rustix::fs::symlinkat(target.as_c_str(), parent, name) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) => {
                return Err(format!(
                    "{} exists in the target: not replaced (rule: target-exists)",
                    show(&step.components)
                ));
            }
            Err(e) => return Err(format!("{}: {e}", show(&step.components))),
        }
        if let Some(mtime) = step.mtime {
            // The link itself: never what it points to.
            let set =
                rustix::fs::utimensat(parent, name, &meta::times(mtime), AtFlags::SYMLINK_NOFOLLOW);
            if let Err(e) = set {
                self.report.warnings.push(format!(
                    "{}: its modification time was not restored: {e}",
                    show(&step.components)
                ));
            }
        }
        Ok(())
    }
}

fn set_owner(fd: &impl std::os::fd::AsFd, step: &Step) -> Result<(), String> {
    if let Some((uid, gid)) = step.owner {
        let (u, g) = (
            rustix::fs::Uid::from_raw(uid),
            rustix::fs::Gid::from_raw(gid),
        );
        rustix::fs::fchown(fd, Some(u), Some(g))
            .map_err(|e| format!("{}: setting its owner: {e}", show(&step.components)))?;
    }
    Ok(())
}
