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
//! Creating a repository is safe when two writers race (`creation.rs`),
//! opening tries every key the password opens ([`keys`]), and every
//! operation holds a restic lock ([`locks`]).
//!
//! Everything here blocks: call it on a blocking thread.

mod backend;
mod creation;
#[cfg(test)]
mod creation_tests;
mod crypto;
pub mod keys;
#[cfg(test)]
mod lock_tests;
pub mod locks;
pub mod mode;

pub use backend::{ConfigGuard, StoreBackend};
pub use keys::{KeyReport, KeyStatus};
pub use locks::{LockFile, LockOptions, RepositoryLock};
pub use rustic_core::repofile::{Metadata, Node, NodeType};
pub use rustic_core::{ErrorKind, ReadSource, ReadSourceEntry, ReadSourceOpen, RusticError, jiff};

use creation::{CreationLease, Taking};
use crypto::RepoKey;
use iar_core::store::BackupStore;
use keys::KeyFiles;
use locks::Locks;
use object_store::ObjectStore;
use object_store::path::Path;
use rustic_core::repofile::SnapshotFile;
use rustic_core::{
    BackupOptions, ConfigOptions, Credentials, KeyOptions, ParentOptions, PruneOptions, Repository,
    RepositoryBackends, RepositoryOptions, SnapshotOptions,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
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
    /// The password from a file, read as restic's `--password-file` reads
    /// it (the docs offer restic's CLI as the way back, so both must open
    /// the repository with the same password): a byte-order mark marks
    /// UTF-16 (decoded) or UTF-8 (dropped), and white space at either end
    /// is not part of it (Go's `strings.TrimSpace`), so a newline from an
    /// `echo` into a Secret is not either.
    pub fn from_file(path: &std::path::Path) -> Result<Self, RepositoryError> {
        let bytes = std::fs::read(path).map_err(|e| RepositoryError::Password {
            why: format!("reading {}: {e}", path.display()),
        })?;
        let text = password_text(&bytes).map_err(|why| RepositoryError::Password {
            why: format!("reading {}: {why}", path.display()),
        })?;
        Self::new(text.trim())
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

/// A password file's text, as restic's `textfile.Read` decodes it.
fn password_text(bytes: &[u8]) -> Result<String, String> {
    let utf16 = |be: bool, body: &[u8]| {
        let units: Vec<u16> = body
            .chunks(2)
            .map(|c| {
                let pair = [c[0], c.get(1).copied().unwrap_or(0)];
                if be {
                    u16::from_be_bytes(pair)
                } else {
                    u16::from_le_bytes(pair)
                }
            })
            .collect();
        String::from_utf16(&units).map_err(|e| format!("not UTF-16: {e}"))
    };
    match bytes {
        [0xef, 0xbb, 0xbf, rest @ ..] => String::from_utf8(rest.to_vec()),
        [0xff, 0xfe, rest @ ..] => return utf16(false, rest),
        [0xfe, 0xff, rest @ ..] => return utf16(true, rest),
        _ => String::from_utf8(bytes.to_vec()),
    }
    .map_err(|e| format!("not UTF-8: {e}"))
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
    #[error(
        "{location}: wanted {wanted} lock, but the repository is locked: {holder} (rule: repository-lock)"
    )]
    Locked {
        location: String,
        wanted: &'static str,
        holder: String,
    },
    #[error(
        "{location}: the repository lock was lost (not refreshed in time, or removed by someone else); stopped (rule: repository-lock)"
    )]
    LockLost { location: String },
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

    /// Refuses a value a tag cannot hold whole: restic's tag lists are
    /// comma-separated, so a backup named `x,backup=victim` would be
    /// tagged `backup=victim` too.
    pub fn check(&self) -> Result<(), RepositoryError> {
        let values = [
            ("backup", self.backup.as_str()),
            ("backup uid", &self.backup_uid),
            ("namespace", &self.namespace),
            ("pod", &self.pod),
            ("volume", &self.volume),
            ("claim", self.pvc.as_deref().unwrap_or_default()),
        ];
        match values.iter().find(|(_, v)| v.contains([',', '\n', '\0'])) {
            Some((what, v)) => Err(RepositoryError::Failed {
                location: prefix(&self.namespace),
                what: "tagging the snapshot".into(),
                why: format!(
                    "{what} {v:?} holds a comma or a control character, which a snapshot tag cannot (rule: invalid-identifier)"
                ),
            }),
            None => Ok(()),
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
    locks: Locks,
    store: Arc<dyn ObjectStore>,
    runtime: Handle,
    prefix: String,
    password: Password,
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

/// How a repository is created: the creation lease, and (tests) a stall
/// between the key and the config.
#[derive(Clone)]
pub(crate) struct Creation {
    pub lease: Duration,
    pub before_config: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl Default for Creation {
    fn default() -> Self {
        Creation {
            lease: creation::LEASE,
            before_config: None,
        }
    }
}

/// How often a writer waiting for another's `init` looks for the config.
const INIT_POLL: Duration = Duration::from_millis(200);

impl VolumeRepository {
    fn unopened(
        store: &BackupStore,
        namespace: &str,
        runtime: &Handle,
    ) -> Result<(Repository<()>, String), RepositoryError> {
        Self::unopened_on(Arc::new(StoreBackend::new(
            store.object_store(),
            store.url(),
            &prefix(namespace),
            runtime.clone(),
        )))
    }

    fn unopened_on(
        backend: Arc<StoreBackend>,
    ) -> Result<(Repository<()>, String), RepositoryError> {
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
        Self::open_existing(store, namespace, password, runtime, repo, location)
    }

    /// Opens with the first key the password opens whose master key
    /// decrypts the config (restic and rustic stop at the first key the
    /// password opens, which a stray key can be).
    fn open_existing(
        store: &BackupStore,
        namespace: &str,
        password: &Password,
        runtime: &Handle,
        repo: Repository<()>,
        location: String,
    ) -> Result<Self, RepositoryError> {
        let object_store = store.object_store();
        let files = KeyFiles {
            store: &object_store,
            runtime,
            prefix: &prefix(namespace),
        };
        let key = match files.opening_key(&password.0) {
            Ok(Ok(key)) => key,
            Ok(Err(0)) => return Err(RepositoryError::WrongPassword { location }),
            Ok(Err(opened)) => {
                return Err(RepositoryError::Failed {
                    location,
                    what: "opening".into(),
                    why: format!(
                        "the password opens {opened} of the repository's keys, but none of their master keys decrypts its config (rule: repository-key)"
                    ),
                });
            }
            Err(object_store::Error::NotFound { .. }) => {
                return Err(RepositoryError::Missing { location });
            }
            Err(e) => {
                return Err(RepositoryError::Failed {
                    location,
                    what: "reading the keys".into(),
                    why: e.to_string(),
                });
            }
        };
        let repo = repo
            .open(&Credentials::Masterkey(key.to_master()))
            .map_err(failed(&location, "opening"))?;
        Ok(Self::opened(
            repo, key, location, store, namespace, password, runtime,
        ))
    }

    fn opened(
        repo: Repository<rustic_core::OpenStatus>,
        key: RepoKey,
        location: String,
        store: &BackupStore,
        namespace: &str,
        password: &Password,
        runtime: &Handle,
    ) -> Self {
        let prefix = prefix(namespace);
        let locks = Locks::new(
            store.object_store(),
            runtime.clone(),
            &prefix,
            &location,
            key,
            store.holder(),
            LockOptions::default(),
        );
        VolumeRepository {
            repo,
            location,
            locks,
            store: store.object_store(),
            runtime: runtime.clone(),
            prefix,
            password: password.clone(),
        }
    }

    /// Opens `namespace`'s repository, creating it first if there is none.
    ///
    /// Two node agents may start the namespace's first volume backups at
    /// once, and two `init`s would each write a key and a config. So the
    /// creating writer holds a lease on a marker (`creation.rs`), re-checks
    /// it holds it before writing the config (a writer stalled past its
    /// lease stops and removes its key), and the config is written with a
    /// conditional create. A failed `init` removes the key it wrote. The
    /// others wait for the config.
    pub fn open_or_init(
        store: &BackupStore,
        namespace: &str,
        password: &Password,
        runtime: &Handle,
    ) -> Result<Self, RepositoryError> {
        Self::open_or_init_with(store, namespace, password, runtime, &Creation::default())
    }

    pub(crate) fn open_or_init_with(
        store: &BackupStore,
        namespace: &str,
        password: &Password,
        runtime: &Handle,
        creation: &Creation,
    ) -> Result<Self, RepositoryError> {
        let (repo, location) = Self::unopened(store, namespace, runtime)?;
        let creating = |e: object_store::Error| RepositoryError::Failed {
            location: location.clone(),
            what: "creating".into(),
            why: format!("{e} (rule: repository-init)"),
        };
        let lease = Arc::new(CreationLease::new(
            store.object_store(),
            runtime.clone(),
            &prefix(namespace),
            store.holder(),
            creation.lease,
        ));
        if !Self::exists(&repo, &location)? {
            // A store that ignores a conditional create would let every
            // writer take the marker (and write a config).
            runtime
                .block_on(store.check_conditional_create())
                .map_err(|e| RepositoryError::Failed {
                    location: location.clone(),
                    what: "creating".into(),
                    why: e.to_string(),
                })?;
        }
        // Local time only paces this writer's own waiting; whether the
        // marker is stale is the store's clock's call.
        let started = Instant::now();
        let mut next_try = started;
        loop {
            if Self::exists(&repo, &location)? {
                return Self::open_existing(store, namespace, password, runtime, repo, location);
            }
            if Instant::now() >= next_try {
                match lease.try_take().map_err(creating)? {
                    Taking::Taken => break,
                    Taking::Held(wait) => next_try = Instant::now() + wait,
                }
            }
            if started.elapsed() > creation.lease * 3 {
                return Err(RepositoryError::Failed {
                    location,
                    what: "creating".into(),
                    why: "other writers held the creation marker and wrote no config (rule: repository-init)".into(),
                });
            }
            std::thread::sleep(INIT_POLL);
        }
        // The marker's previous holder may have written the config just
        // before releasing it.
        let outcome = if Self::exists(&repo, &location)? {
            Self::open_existing(store, namespace, password, runtime, repo, location)
        } else {
            Self::create(store, namespace, password, runtime, &lease, creation)
        };
        lease.release();
        outcome
    }

    /// `init` while holding the creation lease.
    fn create(
        store: &BackupStore,
        namespace: &str,
        password: &Password,
        runtime: &Handle,
        lease: &Arc<CreationLease>,
        creation: &Creation,
    ) -> Result<Self, RepositoryError> {
        let lost = Arc::new(AtomicBool::new(false));
        let guard = {
            let (lease, lost, stall) =
                (lease.clone(), lost.clone(), creation.before_config.clone());
            Box::new(move || {
                if let Some(stall) = &stall {
                    stall();
                }
                match lease.holds() {
                    Ok(true) => Ok(()),
                    Ok(false) => {
                        lost.store(true, Ordering::SeqCst);
                        Err("this writer no longer holds the creation lease".to_string())
                    }
                    Err(e) => Err(format!("reading the creation marker: {e}")),
                }
            })
        };
        let backend = Arc::new(
            StoreBackend::new(
                store.object_store(),
                store.url(),
                &prefix(namespace),
                runtime.clone(),
            )
            .with_config_guard(guard),
        );
        let (repo, location) = Self::unopened_on(backend.clone())?;
        let created = repo.init(
            &Credentials::password(&password.0),
            &KeyOptions::default(),
            &ConfigOptions::default(),
        );
        match created {
            Ok(repo) => {
                let key =
                    RepoKey::from_master(&repo.key()).ok_or_else(|| RepositoryError::Failed {
                        location: location.clone(),
                        what: "creating".into(),
                        why: "rustic's master key has the wrong length".into(),
                    })?;
                tracing::info!(repository = %location, "created the volume repository");
                Ok(Self::opened(
                    repo, key, location, store, namespace, password, runtime,
                ))
            }
            Err(e) => {
                // A key without its config would be a stray key beside
                // the config another writer writes.
                let object_store = store.object_store();
                let files = KeyFiles {
                    store: &object_store,
                    runtime,
                    prefix: &prefix(namespace),
                };
                let mut removed = "removed the key it wrote".to_string();
                for id in backend.written_keys() {
                    let id = id.to_hex();
                    if let Err(e) = files.remove(id.as_str()) {
                        removed = format!("could not remove its key keys/{}: {e}", id.as_str());
                    }
                }
                let why = if lost.load(Ordering::SeqCst) {
                    format!(
                        "another writer took over the creation lease while this one was stalled before writing the config; wrote no config, {removed} (rule: repository-init)"
                    )
                } else {
                    format!("{}; {removed} (rule: repository-init)", e.display_log())
                };
                Err(RepositoryError::Failed {
                    location,
                    what: "creating".into(),
                    why,
                })
            }
        }
    }

    /// Reads lock settings from `options` (how long to wait out another's
    /// lock; tests shorten the refresh).
    pub fn with_lock_options(mut self, options: LockOptions) -> Self {
        self.locks = self.locks.with_options(options);
        self
    }

    /// Takes a restic lock on the repository (exclusive or shared), held
    /// until the guard is dropped. Every operation here takes its own;
    /// this is for a caller that must keep others out across several.
    pub fn lock(&self, exclusive: bool) -> Result<RepositoryLock, RepositoryError> {
        self.locks.take(exclusive)
    }

    /// Writes `lock` as a lock file (not held, not refreshed, not removed
    /// on drop); its id. For tests and tools that need another process's
    /// lock, e.g. a stale one.
    #[doc(hidden)]
    pub fn write_lock_file(&self, lock: &LockFile) -> Result<String, RepositoryError> {
        self.locks.write(lock).map_err(|e| RepositoryError::Failed {
            location: self.location.clone(),
            what: "writing a lock".into(),
            why: format!("{e} (rule: repository-lock)"),
        })
    }

    /// Every key file and what it is to this password: the one(s) that open
    /// the repository, stray keys (the password opens them, but their
    /// master key does not decrypt the config: left by an older iar's
    /// overtaken `init`), and keys the password does not open (another
    /// operator's, never touched). With `repair`, stray keys are deleted,
    /// unless snapshot or index files decrypt with them
    /// ([`KeyStatus::StrayWithData`]). For `iar repository check|repair`.
    ///
    /// Takes no lock: a key is read only when a repository is opened, and
    /// a stray key opens nothing.
    pub fn check_keys(&self, repair: bool) -> Result<Vec<KeyReport>, RepositoryError> {
        KeyFiles {
            store: &self.store,
            runtime: &self.runtime,
            prefix: &self.prefix,
        }
        .check(&self.password.0, repair)
        .map_err(|e| RepositoryError::Failed {
            location: self.location.clone(),
            what: "checking the keys".into(),
            why: format!("{e} (rule: repository-key)"),
        })
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
        tags.check()?;
        // Shared: backups run side by side; a prune (exclusive) waits, as
        // it must never delete data this archive is about to reference.
        let lock = self.locks.take(false)?;
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
        // A lost lock may have let a prune delete packs the snapshot
        // references: it is no backup then.
        let lost = lock.check();
        if stopped() || lost.is_err() {
            indexed.delete_snapshots(&[written.id]).map_err(&fail)?;
            lost?;
            return Err(RepositoryError::Stopped {
                location: self.location,
            });
        }
        drop(lock);
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

    /// The snapshots written for backup `backup` whose uid is `uid`: by
    /// the uid's tag (a name is reused by the next backup of that name,
    /// a uid never), and by its exact name tag only on snapshots that
    /// carry no uid. Tags are matched whole, and
    /// no tag value can hold a comma (see [`VolumeTags::check`]), so no
    /// name can select another backup's snapshots.
    pub fn snapshots_of(
        &self,
        backup: &str,
        uid: &str,
    ) -> Result<Vec<SnapshotFile>, RepositoryError> {
        let by_name = format!("backup={backup}");
        let by_uid = format!("backup-uid={uid}");
        self.repo
            .get_matching_snapshots(|s| {
                // Snapshots of iar before 0.1's uid tags carry only the
                // name; they are the backup's when no uid says otherwise.
                let unowned = s.tags.contains(&by_name)
                    && !s.tags.iter().any(|t| t.starts_with("backup-uid="));
                s.hostname == HOST && (unowned || (!uid.is_empty() && s.tags.contains(&by_uid)))
            })
            .map_err(failed(&self.location, "listing snapshots"))
    }

    /// Every snapshot iar wrote into this repository.
    pub fn snapshots(&self) -> Result<Vec<SnapshotFile>, RepositoryError> {
        self.repo
            .get_matching_snapshots(|s| s.hostname == HOST)
            .map_err(failed(&self.location, "listing snapshots"))
    }

    /// Forgets the snapshots of backup `backup` (uid `uid`; see
    /// [`VolumeRepository::snapshots_of`]); their data stays until a
    /// prune. Returns how many.
    pub fn forget(&self, backup: &str, uid: &str) -> Result<usize, RepositoryError> {
        let _lock = self.forget_lock()?;
        let ids: Vec<_> = self
            .snapshots_of(backup, uid)?
            .iter()
            .map(|s| s.id)
            .collect();
        self.repo
            .delete_snapshots(&ids)
            .map_err(failed(&self.location, "forgetting snapshots"))?;
        Ok(ids.len())
    }

    /// Forgets every snapshot iar wrote whose backup `owned` does not
    /// claim, given the snapshot's `backup=` and `backup-uid=` tags (an
    /// untagged one is not iar's to judge, and stays); returns their ids.
    /// A snapshot is an orphan when its backup was deleted before it was
    /// written, and its writer could not forget it itself (a node agent
    /// stopped past its silence, then cut off from the API server and the
    /// store: the fault campaign's seed 3655).
    pub fn forget_orphans(
        &self,
        owned: impl Fn(&str, &str) -> bool,
    ) -> Result<Vec<String>, RepositoryError> {
        let _lock = self.forget_lock()?;
        let tag = |s: &SnapshotFile, key: &str| {
            s.tags
                .iter()
                .find_map(|t| t.strip_prefix(key))
                .map(str::to_string)
        };
        let orphans: Vec<_> = self
            .snapshots()?
            .into_iter()
            .filter(|s| match (tag(s, "backup="), tag(s, "backup-uid=")) {
                (Some(backup), Some(uid)) => !owned(&backup, &uid),
                _ => false,
            })
            .collect();
        let ids: Vec<_> = orphans.iter().map(|s| s.id).collect();
        self.repo
            .delete_snapshots(&ids)
            .map_err(failed(&self.location, "forgetting orphaned snapshots"))?;
        Ok(ids.iter().map(ToString::to_string).collect())
    }

    /// A forget's lock: shared, where restic's `forget` takes an
    /// exclusive one. Deleting a snapshot file cannot take data a
    /// concurrent writer needs: only a prune deletes data, and a prune is
    /// exclusive. So a deletion runs beside backups.
    fn forget_lock(&self) -> Result<RepositoryLock, RepositoryError> {
        self.locks.take(false)
    }

    /// Forgets one snapshot by id.
    pub fn forget_snapshot(&self, id: &str) -> Result<(), RepositoryError> {
        let _lock = self.forget_lock()?;
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
        // Exclusive: the only operation that deletes data.
        let lock = self.locks.take(true)?;
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
        // Planning reads every index and may take a while.
        lock.check()?;
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
        // Shared (restic's `check` is exclusive): it keeps a prune out;
        // a backup running beside it may show as packs no index lists yet.
        let _lock = self.locks.take(false)?;
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
        // Held while the reader lives: no prune deletes what it reads.
        let lock = self.locks.take(false)?;
        let fail = failed(&self.location, "reading snapshot");
        let repo = self.repo.to_indexed().map_err(&fail)?;
        let snap = repo.get_snapshot_from_str(id, |_| true).map_err(&fail)?;
        Ok(SnapshotReader {
            repo,
            tree: snap.tree,
            tags: snap.tags.iter().cloned().collect(),
            location: self.location.clone(),
            _lock: lock,
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
    /// The snapshot's root tree (the volume is its [`SNAPSHOT_ROOT`]).
    tree: rustic_core::TreeId,
    tags: Vec<String>,
    location: String,
    _lock: RepositoryLock,
}

/// Whether `bytes` are the blob `id` names: restic's ids are the sha256
/// of the plaintext, and a blob's MAC alone does not say which blob it is
/// (whoever can write the store can swap two valid ciphertexts).
fn is_blob(id: &rustic_core::Id, bytes: &[u8]) -> bool {
    use sha2::Digest;
    rustic_core::Id::new(sha2::Sha256::digest(bytes).into()) == *id
}

impl SnapshotReader {
    /// The snapshot's tags (`backup=`, `namespace=`, `pod=`, `volume=`,
    /// ...: see [`VolumeTags`]), as the snapshot holds them.
    pub fn tags(&self) -> &[String] {
        &self.tags
    }

    /// A tree, checked against its id as its blobs are: rustic's own
    /// tree reads check the MAC only, so a swapped tree would put another
    /// directory's entries in this one's place.
    fn read_tree(&self, id: rustic_core::TreeId) -> Result<Vec<Node>, RepositoryError> {
        use rustic_core::repofile::BlobType;
        #[derive(serde::Deserialize)]
        struct Tree {
            nodes: Option<Vec<Node>>,
        }
        let fail = |why: String| RepositoryError::Failed {
            location: self.location.clone(),
            what: "listing snapshot".into(),
            why,
        };
        let bytes = self
            .repo
            .get_blob_cached(&(*id).into(), BlobType::Tree)
            .map_err(|e| fail(e.display_log()))?;
        if !is_blob(&id, &bytes) {
            return Err(fail(format!(
                "tree {} is not the tree its id names (rule: blob-hash)",
                id.to_hex().as_str()
            )));
        }
        let tree: Tree = serde_json::from_slice(&bytes).map_err(|e| {
            fail(format!(
                "tree {}: {e} (rule: snapshot-inconsistent)",
                id.to_hex().as_str()
            ))
        })?;
        Ok(tree.nodes.unwrap_or_default())
    }

    /// Every entry below the volume's root, in path order (each directory
    /// before its contents), paths relative; every tree checked against
    /// its id.
    pub fn entries(&self) -> Result<Vec<(PathBuf, Node)>, RepositoryError> {
        use std::ffi::OsString;
        let inconsistent = |why: String| RepositoryError::Failed {
            location: self.location.clone(),
            what: "listing snapshot".into(),
            why: format!("{why} (rule: snapshot-inconsistent)"),
        };
        let subtree = |path: &std::path::Path, node: &Node| {
            node.subtree.ok_or_else(|| {
                inconsistent(format!(
                    "directory {:?} has no tree",
                    path.display().to_string()
                ))
            })
        };
        let root_name = SNAPSHOT_ROOT.trim_start_matches('/');
        let volume = self
            .read_tree(self.tree)?
            .into_iter()
            .find(|n| n.is_dir() && n.name() == std::ffi::OsStr::new(root_name))
            .ok_or_else(|| inconsistent(format!("no directory {SNAPSHOT_ROOT}")))?;
        let mut out = Vec::new();
        // Depth first, as restic lists: a directory, then its contents.
        let mut stack = vec![(
            PathBuf::new(),
            self.read_tree(subtree(std::path::Path::new(SNAPSHOT_ROOT), &volume)?)?
                .into_iter(),
        )];
        while let Some((dir, nodes)) = stack.last_mut() {
            let Some(node) = nodes.next() else {
                stack.pop();
                continue;
            };
            // Joined as bytes: `PathBuf::join` drops the parent for a name
            // that starts with `/`, and the caller checks every name.
            let mut path = OsString::from(dir.as_os_str());
            if !path.is_empty() {
                path.push("/");
            }
            path.push(node.name());
            let path = PathBuf::from(path);
            let nodes = if node.is_dir() {
                Some(self.read_tree(subtree(&path, &node)?)?.into_iter())
            } else {
                None
            };
            out.push((path.clone(), node));
            if let Some(nodes) = nodes {
                stack.push((path, nodes));
            }
        }
        Ok(out)
    }

    /// Reads `node`'s content into `sink`, a blob at a time with its
    /// offset in the file, on up to [`READERS`] threads (so blobs arrive
    /// out of order): fetching, decrypting and decompressing a blob is
    /// most of a restore's work, and a large file's blobs are independent.
    /// Each blob is checked against its MAC, its length in the index and
    /// its id (sha256 of its plaintext, as restic's `LoadBlob` does).
    ///
    /// Returns how many bytes the blobs hold, for the caller to compare
    /// with the node's size. An error is this file's (a blob missing,
    /// unreadable or not the one its id names, with its rule), or the
    /// first one `sink` returned.
    pub fn read_file(
        &self,
        node: &Node,
        sink: impl Fn(u64, bytes::Bytes) -> Result<(), String> + Sync,
    ) -> Result<u64, String> {
        use rustic_core::repofile::BlobType;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let content = node.content.as_deref().unwrap_or_default();
        // Each blob's offset in the file and length, from the index.
        let mut blobs = Vec::with_capacity(content.len());
        let mut end = 0u64;
        for id in content {
            let entry = self.repo.get_index_entry(id).map_err(|e| {
                format!(
                    "{}: blob {} is not in the index: {} (rule: blob-missing)",
                    self.location,
                    id.to_hex().as_str(),
                    e.display_log()
                )
            })?;
            let len = u64::from(entry.location.data_length());
            blobs.push((end, len));
            end += len;
        }
        let next = AtomicUsize::new(0);
        let work = || -> Result<(), String> {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(id) = content.get(i) else {
                    return Ok(());
                };
                let (offset, len) = blobs[i];
                let hex = id.to_hex();
                let read = self
                    .repo
                    .get_blob_cached(&(*id).into(), BlobType::Data)
                    .map_err(|e| {
                        format!(
                            "{}: blob {}: {} (rule: blob-unreadable)",
                            self.location,
                            hex.as_str(),
                            e.display_log()
                        )
                    })
                    .and_then(|bytes| {
                        if bytes.len() as u64 != len {
                            return Err(format!(
                                "{}: blob {} holds {} bytes where the index says {len} (rule: manifest-inconsistent)",
                                self.location,
                                hex.as_str(),
                                bytes.len()
                            ));
                        }
                        if !is_blob(id, &bytes) {
                            return Err(format!(
                                "{}: blob {} is not the blob its id names: its content hashes otherwise (rule: blob-hash)",
                                self.location,
                                hex.as_str()
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
            return work().map(|()| end);
        }
        std::thread::scope(|scope| {
            let others: Vec<_> = (1..READERS).map(|_| scope.spawn(work)).collect();
            let mine = work();
            others
                .into_iter()
                .map(|t| t.join().unwrap_or_else(|_| Err("a reader stopped".into())))
                .fold(mine, Result::and)
        })
        .map(|()| end)
    }
}

#[cfg(test)]
mod password_tests {
    use super::Password;

    fn read(bytes: &[u8]) -> String {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), bytes).unwrap();
        Password::from_file(file.path()).unwrap().0
    }

    /// As restic reads `--password-file`: white space at both ends and a
    /// byte-order mark are not part of the password; UTF-16 is decoded.
    #[test]
    fn a_password_file_reads_as_restic_reads_it() {
        assert_eq!(read(b"s3cret\n"), "s3cret");
        assert_eq!(read(b"  s3cret \t\r\n"), "s3cret");
        assert_eq!(read(b"two words\n"), "two words");
        assert_eq!(read(b"\xef\xbb\xbfs3cret\n"), "s3cret");
        let utf16le: Vec<u8> = [0xff, 0xfe]
            .into_iter()
            .chain("pässword\n".encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        assert_eq!(read(&utf16le), "pässword");
        let empty = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(empty.path(), " \n").unwrap();
        let refused = Password::from_file(empty.path()).unwrap_err().to_string();
        assert!(refused.contains("rule: repository-password"), "{refused}");
    }
}
