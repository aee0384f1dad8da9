//! Pod volume data in a real backup repository: restic's format, written
//! and read by `rustic_core`, one repository per namespace under
//! `restic/<namespace>/` of the backup store (Velero keeps one per
//! namespace too, `kopia/<namespace>/`). Content-defined chunks are
//! stored once across every backup and pod of the namespace, encrypted
//! (AES-256-CTR + Poly1305), and each volume backup is a snapshot whose
//! parent is that volume's previous one, so an unchanged file costs a
//! metadata comparison and a changed one only its new chunks.
//!
//! The password is the operator's (a Kubernetes Secret mounted as a file,
//! `--repository-password-file`); it never comes from a plugin and is
//! never written to the store.
//!
//! Everything here blocks: call it on a blocking thread.

mod backend;
pub mod mode;

pub use backend::StoreBackend;
pub use rustic_core::repofile::{Metadata, Node, NodeType};
pub use rustic_core::{ErrorKind, ReadSource, ReadSourceEntry, ReadSourceOpen, RusticError, jiff};

use iar_core::store::BackupStore;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions};
use rustic_core::repofile::SnapshotFile;
use rustic_core::{
    BackupOptions, ConfigOptions, Credentials, KeyOptions, LsOptions, ParentOptions, PruneOptions,
    Repository, RepositoryBackends, RepositoryOptions, SnapshotOptions,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::runtime::Handle;

/// The path every volume snapshot holds its files under (restic lists it
/// as the snapshot's path).
pub const SNAPSHOT_ROOT: &str = "/volume";
/// The host name of every snapshot: iar's, not a node's, so a volume's
/// parent is found whichever node backed it up last.
pub const HOST: &str = "iar";

/// A repository password. Never printed.
#[derive(Clone)]
pub struct Password(String);

impl Password {
    /// The password from a file, as Kubernetes mounts a Secret's key: a
    /// trailing newline (an `echo` into the Secret) is not part of it.
    pub fn from_file(path: &std::path::Path) -> Result<Self, RepositoryError> {
        let text = std::fs::read_to_string(path).map_err(|e| RepositoryError::Password {
            why: format!("reading {}: {e}", path.display()),
        })?;
        Self::new(text.trim_end_matches(['\n', '\r']))
    }

    pub fn new(password: &str) -> Result<Self, RepositoryError> {
        if password.is_empty() {
            return Err(RepositoryError::Password {
                why: "the password is empty".into(),
            });
        }
        Ok(Password(password.to_string()))
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(..)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RepositoryError {
    #[error("repository password: {why} (rule: repository-password)")]
    Password { why: String },
    #[error(
        "{location}: the password opens none of the repository's keys (rule: repository-password)"
    )]
    WrongPassword { location: String },
    #[error("{location}: no repository here")]
    Missing { location: String },
    #[error("{location}: the backup stopped; its partial snapshot was deleted")]
    Stopped { location: String },
    #[error("{location}: {what}: {why}")]
    Failed {
        location: String,
        what: String,
        why: String,
    },
}

/// What a volume's snapshots are found by.
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeTags {
    pub backup: String,
    /// The Backup's uid when it has one (a cluster's), else empty.
    pub backup_uid: String,
    pub namespace: String,
    pub pod: String,
    pub volume: String,
    pub pvc: Option<String>,
}

impl VolumeTags {
    /// The snapshot's label: the volume's identity across backups. A
    /// claim's data is the claim's whichever pod mounts it; any other
    /// volume belongs to its pod.
    pub fn label(&self) -> String {
        match &self.pvc {
            Some(pvc) => format!("{}/pvc/{pvc}", self.namespace),
            None => format!("{}/pod/{}/{}", self.namespace, self.pod, self.volume),
        }
    }

    fn tags(&self) -> String {
        let mut tags = vec![
            format!("backup={}", self.backup),
            format!("namespace={}", self.namespace),
            format!("pod={}", self.pod),
            format!("volume={}", self.volume),
        ];
        if !self.backup_uid.is_empty() {
            tags.push(format!("backup-uid={}", self.backup_uid));
        }
        if let Some(pvc) = &self.pvc {
            tags.push(format!("pvc={pvc}"));
        }
        tags.join(",")
    }
}

/// A snapshot written, as a volume backup records it.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    pub snapshot: String,
    pub parent: Option<String>,
    /// Bytes of the volume's files, and of new data added to the
    /// repository (after dedup and compression: what was uploaded).
    pub bytes_processed: u64,
    pub bytes_added: u64,
    pub files_new: u64,
    pub files_changed: u64,
    pub files_unmodified: u64,
}

/// One namespace's repository, opened with its password.
pub struct VolumeRepository {
    repo: Repository<rustic_core::OpenStatus>,
    location: String,
}

/// The namespaces with a repository in `store` (each `restic/<ns>/config`).
pub fn namespaces(store: &BackupStore, runtime: &Handle) -> Result<Vec<String>, RepositoryError> {
    let listed = match runtime.block_on(
        store
            .object_store()
            .list_with_delimiter(Some(&Path::from("restic"))),
    ) {
        Err(object_store::Error::NotFound { .. }) => return Ok(Vec::new()),
        listed => listed,
    }
    .map_err(|e| RepositoryError::Failed {
        location: format!("{}/restic", store.url()),
        what: "listing repositories".into(),
        why: e.to_string(),
    })?;
    let mut out: Vec<String> = listed
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename().map(str::to_string))
        .collect();
    out.sort();
    Ok(out)
}

/// The repository's prefix in the store.
pub fn prefix(namespace: &str) -> String {
    format!("restic/{namespace}")
}

fn failed(
    location: &str,
    what: &str,
) -> impl Fn(Box<rustic_core::RusticError>) -> RepositoryError + use<> {
    let (location, what) = (location.to_string(), what.to_string());
    move |e| RepositoryError::Failed {
        location: location.clone(),
        what: what.clone(),
        why: e.display_log(),
    }
}

/// How long a first writer may take to create a repository before another
/// takes over its marker (it crashed between the marker and the config).
const INIT_TAKEOVER: Duration = Duration::from_secs(120);

impl VolumeRepository {
    fn unopened(
        store: &BackupStore,
        namespace: &str,
        runtime: &Handle,
    ) -> Result<(Repository<()>, String), RepositoryError> {
        let backend = Arc::new(StoreBackend::new(
            store.object_store(),
            store.url(),
            &prefix(namespace),
            runtime.clone(),
        ));
        let location = rustic_core::ReadBackend::location(backend.as_ref());
        let backends = RepositoryBackends::new(backend, None);
        let repo = Repository::new(&RepositoryOptions::default(), &backends)
            .map_err(failed(&location, "opening"))?;
        Ok((repo, location))
    }

    /// Whether the repository has its config, i.e. exists.
    fn exists(repo: &Repository<()>, location: &str) -> Result<bool, RepositoryError> {
        repo.config_id()
            .map(|id| id.is_some())
            .map_err(failed(location, "reading the config"))
    }

    /// Opens `namespace`'s repository; `Missing` if there is none yet.
    pub fn open(
        store: &BackupStore,
        namespace: &str,
        password: &Password,
        runtime: &Handle,
    ) -> Result<Self, RepositoryError> {
        let (repo, location) = Self::unopened(store, namespace, runtime)?;
        if !Self::exists(&repo, &location)? {
            return Err(RepositoryError::Missing { location });
        }
        Self::open_existing(repo, password, location)
    }

    fn open_existing(
        repo: Repository<()>,
        password: &Password,
        location: String,
    ) -> Result<Self, RepositoryError> {
        match repo.open(&Credentials::password(&password.0)) {
            Ok(repo) => Ok(VolumeRepository { repo, location }),
            Err(e) if e.is_incorrect_password() => Err(RepositoryError::WrongPassword { location }),
            Err(e) => Err(failed(&location, "opening")(e)),
        }
    }

    /// Opens `namespace`'s repository, creating it first if there is none.
    ///
    /// Two node agents may start the namespace's first volume backups at
    /// once. Two `init`s would each write a key and a config, and a key
    /// whose master key is not the config's breaks every later open; so
    /// the first writer creates a marker (a conditional create: one
    /// wins), and the others wait for the config it writes.
    pub fn open_or_init(
        store: &BackupStore,
        namespace: &str,
        password: &Password,
        runtime: &Handle,
    ) -> Result<Self, RepositoryError> {
        let (repo, location) = Self::unopened(store, namespace, runtime)?;
        let marker = Path::from(format!("{}/iar-init", prefix(namespace)));
        let object_store = store.object_store();
        let started = SystemTime::now();
        loop {
            if Self::exists(&repo, &location)? {
                return Self::open_existing(repo, password, location);
            }
            let created = runtime.block_on(object_store.put_opts(
                &marker,
                store.holder().to_string().into(),
                PutOptions::from(PutMode::Create),
            ));
            match created {
                Ok(_) => break,
                Err(object_store::Error::AlreadyExists { .. }) => {
                    let stale = runtime
                        .block_on(object_store.head(&marker))
                        .ok()
                        .and_then(|m| SystemTime::from(m.last_modified).elapsed().ok())
                        .is_some_and(|age| age > INIT_TAKEOVER);
                    if stale {
                        let _ = runtime.block_on(object_store.delete(&marker));
                    } else if started.elapsed().unwrap_or_default() > INIT_TAKEOVER * 2 {
                        return Err(RepositoryError::Failed {
                            location,
                            what: "creating".into(),
                            why: "another writer holds the creation marker and wrote no config"
                                .into(),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => {
                    return Err(RepositoryError::Failed {
                        location,
                        what: "creating".into(),
                        why: e.to_string(),
                    });
                }
            }
        }
        let repo = repo
            .init(
                &Credentials::password(&password.0),
                &KeyOptions::default(),
                &ConfigOptions::default(),
            )
            .map_err(failed(&location, "creating"))?;
        let _ = runtime.block_on(object_store.delete(&marker));
        tracing::info!(repository = %location, "created the volume repository");
        Ok(VolumeRepository { repo, location })
    }

    pub fn location(&self) -> &str {
        &self.location
    }

    /// Backs up `source` (its entries' paths under [`SNAPSHOT_ROOT`]) as
    /// one snapshot of the volume `tags` names, whose parent is that
    /// volume's latest snapshot. If `stopped` says so once the source is
    /// read, the snapshot (which then stands for part of the volume) is
    /// deleted again and `Stopped` returned.
    pub fn back_up<R>(
        self,
        source: &R,
        tags: &VolumeTags,
        stopped: impl Fn() -> bool,
    ) -> Result<Written, RepositoryError>
    where
        R: ReadSource + 'static,
        <R as ReadSource>::Open: Send,
        <R as ReadSource>::Iter: Send,
    {
        let fail = failed(&self.location, "backing up");
        let label = tags.label();
        let parent = self
            .repo
            .get_matching_snapshots(|s| s.hostname == HOST && s.label == label)
            .map_err(&fail)?
            .into_iter()
            .max_by_key(|s| s.time.clone());
        let snap = SnapshotOptions::default()
            .label(label)
            .host(HOST.to_string())
            .add_tags(&tags.tags())
            .and_then(|o| o.to_snapshot())
            .map_err(&fail)?;
        let mut parent_opts = ParentOptions::default();
        match &parent {
            Some(p) => parent_opts.parents = vec![p.id.to_string()],
            None => parent_opts.force = true,
        }
        // The walk's inode numbers are the volume's own; a pod moved to
        // another node (or a restored claim) keeps its files' times and
        // sizes but not their inodes or ctimes.
        parent_opts.ignore_inode = true;
        parent_opts.ignore_ctime = true;
        let opts = BackupOptions::default().parent_opts(parent_opts);
        let indexed = self.repo.to_indexed_ids().map_err(&fail)?;
        let written = indexed
            .archive(&opts, source, snap, &[PathBuf::from(SNAPSHOT_ROOT)])
            .map_err(&fail)?;
        if stopped() {
            indexed.delete_snapshots(&[written.id]).map_err(&fail)?;
            return Err(RepositoryError::Stopped {
                location: self.location,
            });
        }
        let summary = written.summary.clone().unwrap_or_default();
        Ok(Written {
            snapshot: full_id(&written.id),
            parent: parent.map(|p| full_id(&p.id)),
            bytes_processed: summary.total_bytes_processed,
            bytes_added: summary.data_added_packed,
            files_new: summary.files_new,
            files_changed: summary.files_changed,
            files_unmodified: summary.files_unmodified,
        })
    }

    /// The snapshots written for backup `backup`.
    pub fn snapshots_of(&self, backup: &str) -> Result<Vec<SnapshotFile>, RepositoryError> {
        let tag = format!("backup={backup}");
        self.repo
            .get_matching_snapshots(|s| s.hostname == HOST && s.tags.contains(&tag))
            .map_err(failed(&self.location, "listing snapshots"))
    }

    /// Forgets backup `backup`'s snapshots (their data stays until a
    /// prune); returns how many.
    pub fn forget(&self, backup: &str) -> Result<usize, RepositoryError> {
        let ids: Vec<_> = self.snapshots_of(backup)?.iter().map(|s| s.id).collect();
        self.repo
            .delete_snapshots(&ids)
            .map_err(failed(&self.location, "forgetting snapshots"))?;
        Ok(ids.len())
    }

    /// Forgets one snapshot by id.
    pub fn forget_snapshot(&self, id: &str) -> Result<(), RepositoryError> {
        let fail = failed(&self.location, "forgetting a snapshot");
        let snap = self
            .repo
            .get_snapshot_from_str(id, |_| true)
            .map_err(&fail)?;
        self.repo.delete_snapshots(&[snap.id]).map_err(&fail)
    }

    /// Removes the data no snapshot uses any more.
    ///
    /// By default in rustic's two phases, safe beside a writer: unused
    /// packs are first marked, and deleted by a later prune once
    /// `keep-delete` (23 h) has passed, unless a snapshot written
    /// meanwhile uses them again. `instant`: deleted now, for a
    /// repository no backup is writing to (the caller's guarantee).
    pub fn prune(&self, instant: bool) -> Result<Pruned, RepositoryError> {
        let fail = failed(&self.location, "pruning");
        // Packs partly used are repacked whatever their share of the
        // repository (rustic's default stops at 10 %): a deleted
        // backup's data comes back at the first maintenance.
        let opts = PruneOptions::default()
            .instant_delete(instant)
            .max_repack(rustic_core::LimitOption::Unlimited);
        let plan = self.repo.prune_plan(&opts).map_err(&fail)?;
        let removed = plan.stats.packs.unused + plan.stats.packs.repack;
        let bytes = plan.stats.size_sum().unused;
        self.repo.prune(&opts, plan).map_err(&fail)?;
        Ok(Pruned {
            packs_removed: removed,
            bytes_unused: bytes,
        })
    }

    /// restic's `check`: structure always; with `read_data`, every pack's
    /// contents against its hash. The findings, one line each; empty when
    /// the repository is sound.
    pub fn check(&self, read_data: bool) -> Result<Vec<String>, RepositoryError> {
        let opts = rustic_core::CheckOptions::default().read_data(read_data);
        let results = self
            .repo
            .check(opts)
            .map_err(failed(&self.location, "checking"))?;
        Ok(results
            .0
            .iter()
            .map(|(level, e)| format!("{level:?}: {e}"))
            .collect())
    }

    /// Reads snapshot `id`'s entries in path order (paths relative to the
    /// volume) and opens each file's content on demand.
    pub fn reader(self, id: &str) -> Result<SnapshotReader, RepositoryError> {
        let fail = failed(&self.location, "reading snapshot");
        let repo = self.repo.to_indexed().map_err(&fail)?;
        let node = repo
            .node_from_snapshot_path(&format!("{id}:{SNAPSHOT_ROOT}"), |_| true)
            .map_err(&fail)?;
        Ok(SnapshotReader {
            repo,
            node,
            location: self.location.clone(),
        })
    }
}

/// A snapshot's id in full (its `Display` is the short form).
fn full_id(id: &rustic_core::repofile::SnapshotId) -> String {
    id.to_hex().as_str().to_string()
}

/// What a prune removed.
#[derive(Clone, Debug, PartialEq)]
pub struct Pruned {
    pub packs_removed: u64,
    pub bytes_unused: u64,
}

/// Threads that read one file's blobs.
pub const READERS: usize = 2;

/// One snapshot, read for a restore.
pub struct SnapshotReader {
    repo: Repository<rustic_core::IndexedFullStatus>,
    node: Node,
    location: String,
}

impl SnapshotReader {
    /// Every entry below the volume's root, in path order, paths relative.
    pub fn entries(&self) -> Result<Vec<(PathBuf, Node)>, RepositoryError> {
        let fail = failed(&self.location, "listing snapshot");
        let iter = self
            .repo
            .ls(&self.node, &LsOptions::default().recursive(true))
            .map_err(&fail)?;
        iter.map(|r| r.map_err(&fail)).collect()
    }

    /// Reads `node`'s content into `sink`, a blob at a time with its
    /// offset in the file, on up to [`READERS`] threads (so blobs arrive
    /// out of order): fetching, decrypting and decompressing a blob is
    /// most of a restore's work, and a large file's blobs are independent.
    /// Each blob is checked against its MAC as it is read.
    pub fn read_file(
        &self,
        node: &Node,
        sink: impl Fn(u64, bytes::Bytes) -> Result<(), String> + Sync,
    ) -> Result<(), String> {
        use rustic_core::repofile::BlobType;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let fail =
            |e: Box<rustic_core::RusticError>| format!("{}: {}", self.location, e.display_log());
        let content = node.content.as_deref().unwrap_or_default();
        // Each blob's offset in the file and length, from the index.
        let mut blobs = Vec::with_capacity(content.len());
        let mut end = 0u64;
        for id in content {
            let entry = self.repo.get_index_entry(id).map_err(fail)?;
            let len = u64::from(entry.location.data_length());
            blobs.push((end, len));
            end += len;
        }
        if end != node.meta.size {
            return Err(format!(
                "{}: the snapshot's file holds {end} of its {} bytes",
                self.location, node.meta.size
            ));
        }
        let next = AtomicUsize::new(0);
        let work = || -> Result<(), String> {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(id) = content.get(i) else {
                    return Ok(());
                };
                let (offset, len) = blobs[i];
                let read = self
                    .repo
                    .get_blob_cached(&(*id).into(), BlobType::Data)
                    .map_err(fail)
                    .and_then(|bytes| {
                        if bytes.len() as u64 != len {
                            return Err(format!(
                                "{}: blob {id} holds {} bytes where the index says {len} (rule: manifest-inconsistent)",
                                self.location,
                                bytes.len()
                            ));
                        }
                        sink(offset, bytes)
                    });
                if read.is_err() {
                    // The other readers stop at their next blob.
                    next.store(content.len(), Ordering::Relaxed);
                    return read;
                }
            }
        };
        if content.len() < 2 {
            return work();
        }
        std::thread::scope(|scope| {
            let others: Vec<_> = (1..READERS).map(|_| scope.spawn(work)).collect();
            let mine = work();
            others
                .into_iter()
                .map(|t| t.join().unwrap_or_else(|_| Err("a reader stopped".into())))
                .fold(mine, Result::and)
        })
    }
}
