//! The backup store: Velero's layout under `backups/<name>/`, over any
//! `object_store` backend: a local directory by default, S3, GCS or Azure by
//! URL. Every write is a single atomic PUT of a whole file.

pub mod deadline;
pub mod delete;
// A store that fails or stalls on cue, for other crates' tests (and the
// integration tests) through the `test-support` feature; never shipped.
#[cfg(any(test, feature = "test-support"))]
pub mod faulty;
mod fence;
pub mod gz;
pub mod lease;
mod local_stage;
pub mod restores;
pub mod tarball;

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use object_store::local::LocalFileSystem;
use object_store::path::{Path, PathPart};
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt, ObjectStoreScheme, PutMode, PutOptions};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("backup store {url}: {reason}")]
    Url {
        url: String,
        #[source]
        reason: UrlProblem,
    },
    #[error("backup store {url}: {key}: {source}{}", credentials_hint(source))]
    Io {
        url: String,
        key: String,
        source: object_store::Error,
    },
    #[error("backup store {url}: {key} is corrupt: {reason}")]
    Corrupt {
        url: String,
        key: String,
        #[source]
        reason: Corruption,
    },
    #[error("backup store {url}: {key} already exists")]
    Exists { url: String, key: String },
    #[error("invalid backup name {name:?}: {reason}")]
    Name {
        name: String,
        #[source]
        reason: NameProblem,
    },
    #[error("backup {backup:?}: not written: {reason} (rule: lease-fence)")]
    Fenced { backup: String, reason: String },
    #[error(
        "backup store {url}: {reason}; a lease there would not be exclusive, so iar refuses to take one (rule: store-conditional-writes)"
    )]
    NoConditionalWrites {
        url: String,
        #[source]
        reason: ConditionalProbe,
    },
}

/// Why a store location cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum UrlProblem {
    #[error("not a URL: {0}")]
    NotAUrl(#[source] url::ParseError),
    #[error("no bucket; use {scheme}://BUCKET[/PREFIX]")]
    NoBucket { scheme: String },
    #[error("{UNSUPPORTED}")]
    Unsupported,
    #[error("not a local file path")]
    NotALocalPath,
    /// `file://` with a host: a relative path written as a URL.
    #[error(
        "a file:// URL names an absolute path (file:///path/to/store); give a relative path alone, without file://"
    )]
    FileHost,
    /// A read of a local store that is not there: a mistyped path.
    #[error("no such directory: nothing was ever backed up here (a mistyped --store?)")]
    NoSuchStore,
    #[error("cannot create directory: {0}")]
    CreateDir(#[source] std::io::Error),
    /// The object_store client refused the location.
    #[error("{0}")]
    Client(#[source] object_store::Error),
}

/// How a cloud store's requests are retried. object_store's default backs
/// off from 100 ms with decorrelated jitter, so its 10 retries can all be
/// spent within two seconds of a store that refuses connections: the
/// fault campaign saw a backup fail on a 1.5 s S3 restart. From 1 s (each
/// wait at least that, growing threefold up to 15 s) the same 10 retries
/// outlast a restart of a minute or so, within the 3-minute bound.
pub fn retry_config() -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: std::time::Duration::from_secs(1),
            max_backoff: std::time::Duration::from_secs(15),
            base: 3.0,
        },
        max_retries: 10,
        retry_timeout: std::time::Duration::from_secs(180),
    }
}

/// What to do when the error is the cloud SDK's last resort failing: with
/// no credentials in the environment, object_store asks the instance
/// metadata endpoint, whose refusal says nothing about the cause.
fn credentials_hint(e: &object_store::Error) -> &'static str {
    let text = e.to_string();
    if text.contains("169.254.169.254") || text.contains("credential") {
        "; no usable cloud credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (with AWS_ENDPOINT, and AWS_ALLOW_HTTP=true for an http:// endpoint such as MinIO's), or GOOGLE_*/AZURE_* for gs:// and az://"
    } else {
        ""
    }
}

/// Why a store file cannot be read (or written) as what it should be.
#[derive(Debug, thiserror::Error)]
pub enum Corruption {
    #[error("cannot encode: {0}")]
    Encode(#[source] serde_json::Error),
    #[error("not gzip: {0}")]
    NotGzip(#[source] std::io::Error),
    #[error("not gzip'd text: {0}")]
    NotGzipText(#[source] std::io::Error),
    #[error("bad JSON: {0}")]
    Json(#[source] serde_json::Error),
    #[error("bad lease JSON: {0}")]
    LeaseJson(#[source] serde_json::Error),
}

/// Why a backup name or a key cannot name files in the store.
#[derive(Debug, thiserror::Error)]
pub enum NameProblem {
    #[error("empty")]
    Empty,
    /// Over a length limit; the phrase says which and what to do.
    #[error("{0}")]
    TooLong(String),
    /// Not one path segment.
    #[error("{0}")]
    Segment(#[source] object_store::path::InvalidPart),
    /// Not a name a Backup resource can have.
    #[error(
        "{0}: a backup name is a Kubernetes object name (lowercase letters, digits, '-' and '.'), as Velero names the Backup it syncs from the store (rule: backup-name)"
    )]
    NotAnObjectName(String),
    /// A free-form key outside `backups/<backup name>/`.
    #[error("{0} (rule: keys stay under {BACKUPS}/<backup name>/)")]
    Key(&'static str),
    /// A key segment that is not one.
    #[error("{0} (rule: keys stay under {BACKUPS}/<backup name>/)")]
    KeySegment(#[source] object_store::path::InvalidPart),
}

/// What the store did with the conditional-create probe, when it is not
/// what a lease needs. Kept once per store (so shared, not copied).
#[derive(Clone, Debug, thiserror::Error)]
pub enum ConditionalProbe {
    #[error("a conditional create failed: {0}")]
    CreateFailed(#[source] Arc<object_store::Error>),
    #[error(
        "it accepted a conditional create (If-None-Match: *) of an object that exists, so it does not support conditional writes"
    )]
    Ignored,
    #[error("a second conditional create failed with an error that is not 'already exists': {0}")]
    SecondFailed(#[source] Arc<object_store::Error>),
}

/// What [`BackupStore::download_url`] can give.
#[derive(Debug)]
pub enum Download {
    Url(url::Url),
    NotFound,
    /// The store signs no URLs here: a local directory, GCS and Azure,
    /// and S3 with the options its fenced writes cannot presign either
    /// ([`deadline::DeadlineWriter::for_s3`]).
    Unsigned,
}

/// The files of one backup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackupFile {
    Contents,
    Metadata,
    ItemOperations,
    Results,
    Logs,
    /// The pod volume backups' records as their blocks ended (written
    /// once the blocks end, or by whoever ends them).
    VolumeBackups,
    /// Their progress while the blocks wait: a key of its own, so that a
    /// progress write delayed in the store (a frozen store answers its
    /// queue late) never lands over the records.
    VolumeProgress,
    /// One hook record per pod and phase, written before a post hook starts
    /// and again when it ends, so a resumed backup never runs one twice.
    HookLedger,
    /// The plugins a backup was pinned to (name and digest): a process
    /// that takes it over runs exactly those or fails their operations.
    PluginSet,
    /// What was backed up, by API version and kind (Velero's
    /// `BackupResourceList`, read by `velero backup describe --details`).
    ResourceList,
    /// The objects plugins created in the cluster for this backup
    /// (contract 1.2.0): deleted with the backup.
    CreatedObjects,
}

impl BackupFile {
    /// The object key, as Velero names it.
    pub fn key(self, backup: &str) -> String {
        let file = match self {
            BackupFile::Contents => format!("{backup}.tar.gz"),
            BackupFile::Metadata => "velero-backup.json".to_string(),
            BackupFile::ItemOperations => format!("{backup}-itemoperations.json.gz"),
            BackupFile::Results => format!("{backup}-results.gz"),
            BackupFile::Logs => format!("{backup}-logs.gz"),
            BackupFile::VolumeBackups => format!("{backup}-volumebackups.json.gz"),
            BackupFile::VolumeProgress => format!("{backup}-volumeprogress.json.gz"),
            BackupFile::HookLedger => format!("{backup}-hooks.json.gz"),
            BackupFile::PluginSet => format!("{backup}-plugins.json.gz"),
            BackupFile::ResourceList => format!("{backup}-resource-list.json.gz"),
            BackupFile::CreatedObjects => format!("{backup}-created-objects.json.gz"),
        };
        format!("{BACKUPS}/{backup}/{file}")
    }

    /// Everything but the backup object is gzip'd.
    fn gzipped(self) -> bool {
        self != BackupFile::Metadata
    }
}

const BACKUPS: &str = "backups";

/// What [`BackupStore::set_aside`] puts between a key and the time.
const SET_ASIDE: &str = ".corrupt-";

/// Kubernetes' limit on an object name, a backup's included.
pub const MAX_BACKUP_NAME: usize = 253;

/// The longest file name (one key segment) a store is trusted to hold: the
/// 255 bytes (`NAME_MAX`) of Linux file systems, where a local store lives,
/// less 5 for the `#<n>` suffix object_store's local store writes a file
/// under before it renames it into place.
pub const MAX_FILE_NAME: usize = 250;

/// How a refused name's reason states the limit.
const FILE_NAME_LIMIT: &str = "over the 250 bytes a store file name may have (255, less the `#<n>` of a local store's staged write)";
const UNSUPPORTED: &str = "unsupported scheme; use a path, file://, s3://, gs:// or az://";

#[derive(Clone)]
pub struct BackupStore {
    store: Arc<dyn ObjectStore>,
    url: String,
    puts: Arc<AtomicU64>,
    /// The leases this process holds, which its writes are checked against.
    fences: Arc<fence::Fences>,
    /// Whether the store was seen to honour a conditional create (checked
    /// once, before the first lease).
    conditional: Arc<tokio::sync::OnceCell<Result<(), ConditionalProbe>>>,
    /// Who this process is in the leases it takes ([`lease::holder_id`],
    /// with the replica's name in front when it has one).
    holder: Arc<str>,
    /// What leases and fences read the time from (a test's `ManualClock`
    /// steps a lease past its expiry).
    clock: Arc<dyn crate::clock::Clock>,
    /// Where the store can refuse a write that arrives after its lease
    /// ended (S3's presigned URLs): how fenced writes go.
    deadline: Option<Arc<deadline::DeadlineWriter>>,
    /// A local store's staging of fenced writes, which a takeover revokes.
    local: Option<Arc<local_stage::LocalStaging>>,
}

impl std::fmt::Debug for BackupStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackupStore")
            .field("url", &self.url)
            .finish()
    }
}

impl BackupStore {
    /// A plain path (relative or absolute; created if missing) or a URL:
    /// `file://`, `s3://bucket/prefix`, `gs://`, `az://`. Cloud credentials
    /// come from the environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`); building a
    /// client does not connect.
    /// [`BackupStore::open`] for a command that only reads: a local store
    /// that does not exist is refused (a mistyped path would otherwise be
    /// created, and listed as empty).
    pub fn open_existing(location: &str) -> Result<Self, StoreError> {
        let dir = if !location.contains("://") {
            Some(std::path::PathBuf::from(location))
        } else {
            url::Url::parse(location)
                .ok()
                .filter(|u| u.scheme() == "file")
                .and_then(|u| u.to_file_path().ok())
        };
        if let Some(dir) = dir
            && !dir.is_dir()
        {
            return Err(StoreError::Url {
                url: location.to_string(),
                reason: UrlProblem::NoSuchStore,
            });
        }
        Self::open(location)
    }

    pub fn open(location: &str) -> Result<Self, StoreError> {
        let url_err = |reason| StoreError::Url {
            url: location.to_string(),
            reason,
        };
        if !location.contains("://") {
            return Self::open_dir(std::path::Path::new(location), location);
        }
        let url = url::Url::parse(location).map_err(|e| url_err(UrlProblem::NotAUrl(e)))?;
        if url.scheme() == "file"
            && url
                .host_str()
                .is_some_and(|h| !h.is_empty() && h != "localhost")
        {
            return Err(url_err(UrlProblem::FileHost));
        }
        let (scheme, prefix) = ObjectStoreScheme::parse(&url).map_err(|_| match url.scheme() {
            s @ ("s3" | "gs" | "az") => url_err(UrlProblem::NoBucket {
                scheme: s.to_string(),
            }),
            _ => url_err(UrlProblem::Unsupported),
        })?;
        // The cloud builders make their HTTPS client here.
        crate::tls::install_crypto();
        let mut deadline = None;
        let built: object_store::Result<Arc<dyn ObjectStore>> = match scheme {
            ObjectStoreScheme::Local => {
                let dir = url
                    .to_file_path()
                    .map_err(|()| url_err(UrlProblem::NotALocalPath))?;
                return Self::open_dir(&dir, location);
            }
            ObjectStoreScheme::AmazonS3 => {
                let builder = object_store::aws::AmazonS3Builder::from_env()
                    .with_url(location)
                    .with_retry(retry_config());
                builder.clone().build().map(|s| {
                    let s3 = Arc::new(s);
                    deadline = deadline::DeadlineWriter::for_s3(
                        &builder,
                        s3.clone(),
                        prefix.clone(),
                        None,
                    );
                    s3 as _
                })
            }
            ObjectStoreScheme::GoogleCloudStorage => {
                object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(location)
                    .with_retry(retry_config())
                    .build()
                    .map(|s| Arc::new(s) as _)
            }
            ObjectStoreScheme::MicrosoftAzure => {
                object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_url(location)
                    .with_retry(retry_config())
                    .build()
                    .map(|s| Arc::new(s) as _)
            }
            _ => {
                return Err(url_err(UrlProblem::Unsupported));
            }
        };
        let store = built.map_err(|e| url_err(UrlProblem::Client(e)))?;
        // The builders take the bucket from the URL; the path is ours to apply.
        let store: Arc<dyn ObjectStore> = if prefix.as_ref().is_empty() {
            store
        } else {
            Arc::new(PrefixStore::new(store, prefix))
        };
        let mut opened = Self::from_object_store(store, location);
        opened.deadline = deadline.map(Arc::new);
        Ok(opened)
    }

    fn open_dir(dir: &std::path::Path, location: &str) -> Result<Self, StoreError> {
        let url_err = |reason| StoreError::Url {
            url: location.to_string(),
            reason,
        };
        std::fs::create_dir_all(dir).map_err(|e| url_err(UrlProblem::CreateDir(e)))?;
        // fsync so that a machine crash, not only a process crash, leaves
        // either the old or the new file. Directories a deletion empties
        // go too: an empty `backups/<name>/` would still be listed.
        let fs = Arc::new(
            LocalFileSystem::new_with_prefix(dir)
                .map_err(|e| url_err(UrlProblem::Client(e)))?
                .with_fsync(true)
                .with_automatic_cleanup(true),
        );
        let shown = std::fs::canonicalize(dir)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| location.to_string());
        let mut opened = Self::from_object_store(fs.clone(), &shown);
        opened.local = Some(Arc::new(local_stage::LocalStaging::under(dir, fs)));
        Ok(opened)
    }

    /// Wraps any store (tests inject [`faulty::FaultyStore`]); `url` is only
    /// shown in messages.
    pub fn from_object_store(store: Arc<dyn ObjectStore>, url: &str) -> Self {
        BackupStore {
            store,
            url: url.to_string(),
            puts: Arc::new(AtomicU64::new(0)),
            fences: Arc::default(),
            conditional: Arc::default(),
            holder: lease::holder_id().into(),
            clock: crate::clock::RealClock::shared(),
            deadline: None,
            local: None,
        }
    }

    /// Sends fenced writes through `writer`, which the store refuses once
    /// their lease has ended ([`deadline`]); [`BackupStore::open`] does
    /// this for an S3 store.
    pub fn with_deadline_writer(mut self, writer: deadline::DeadlineWriter) -> Self {
        self.deadline = Some(Arc::new(writer));
        self
    }

    /// The object store beneath, for a reader of a format of its own (the
    /// volume repository, `iar-repository`) that keeps to its own prefix
    /// outside `backups/`.
    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }

    /// This store as another process opens it: the same objects, none of
    /// this one's leases (for tests that play two processes in one).
    #[cfg(any(test, feature = "test-support"))]
    pub fn as_another_process(&self) -> Self {
        let mut other = self.clone();
        other.fences = Arc::default();
        other
    }

    /// Reads lease and fence times from `clock` (the phase machine's, so a
    /// test steps both together).
    pub fn with_clock(mut self, clock: Arc<dyn crate::clock::Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Names this process `name` in the leases it takes (a controller
    /// replica's identity), so a lease says which replica drives a backup.
    pub fn with_holder_name(mut self, name: &str) -> Self {
        self.holder = format!("{name}: {}", lease::holder_id()).into();
        self
    }

    /// Who this process is in the leases it takes.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Number of successful puts so far, across clones.
    pub fn puts(&self) -> u64 {
        self.puts.load(Ordering::Relaxed)
    }

    fn path(&self, backup: &str, file: BackupFile) -> Result<(Path, String), StoreError> {
        let bad = |reason| StoreError::Name {
            name: backup.to_string(),
            reason,
        };
        if backup.is_empty() {
            return Err(bad(NameProblem::Empty));
        }
        if backup.len() > MAX_BACKUP_NAME {
            return Err(bad(NameProblem::TooLong(format!(
                "{} bytes long, over the {MAX_BACKUP_NAME} Kubernetes allows an object name (rule: name-length)",
                backup.len()
            ))));
        }
        PathPart::parse(backup).map_err(|e| bad(NameProblem::Segment(e)))?;
        let key = file.key(backup);
        Ok((Path::from(key.as_str()), key))
    }

    /// Refuses, before anything is written, a backup name the store cannot
    /// hold every file of: empty, not one path segment, longer than
    /// Kubernetes' [`MAX_BACKUP_NAME`], or so long that one of its file
    /// names (its lease's, `<name>-lease-<20 digits>.json`, or a file set
    /// aside as `<name>-itemoperations.json.gz.corrupt-<seconds>`) would be
    /// over [`MAX_FILE_NAME`] bytes, which a local store cannot create; or
    /// not a Kubernetes object name (rule `backup-name`). A name refused
    /// here is refused for good: retrying cannot help.
    pub fn check_backup_name(&self, backup: &str) -> Result<(), StoreError> {
        // Velero syncs every backup of a store into a Backup resource of
        // its name: one Kubernetes would refuse is a backup Velero never
        // shows (and `a/b` is not one key segment). Lengths are the
        // checks below, with their own rule.
        if backup.len() <= MAX_BACKUP_NAME {
            crate::names::dns_subdomain(backup).map_err(|e| StoreError::Name {
                name: backup.to_string(),
                reason: NameProblem::NotAnObjectName(e.to_string()),
            })?;
        }
        self.path(backup, BackupFile::Metadata)?;
        lease::check_lease_key(backup)?;
        let longest = [
            BackupFile::Contents,
            BackupFile::ItemOperations,
            BackupFile::Results,
            BackupFile::Logs,
            BackupFile::VolumeBackups,
            BackupFile::VolumeProgress,
            BackupFile::HookLedger,
            BackupFile::PluginSet,
            BackupFile::ResourceList,
        ]
        .into_iter()
        .map(|f| f.key(backup))
        .max_by_key(String::len)
        .expect("not empty");
        let aside = format!(
            "{}{SET_ASIDE}0000000000",
            longest.rsplit('/').next().unwrap_or("")
        );
        if aside.len() > MAX_FILE_NAME {
            return Err(StoreError::Name {
                name: backup.to_string(),
                reason: NameProblem::TooLong(format!(
                    "a file of it set aside ({backup:.20}…{SET_ASIDE}<seconds>) would have a name of {} bytes, {FILE_NAME_LIMIT}; a backup name may have at most {} bytes (rule: name-length)",
                    aside.len(),
                    MAX_FILE_NAME - (aside.len() - backup.len()),
                )),
            });
        }
        Ok(())
    }

    /// Validates a free-form key: it must lie under `backups/<valid name>/`,
    /// with no empty, `.` or `..` segment, so that a volume backupper can
    /// write only inside the backup it works for.
    fn checked_key(&self, key: &str) -> Result<Path, StoreError> {
        let bad = |reason| StoreError::Name {
            name: key.to_string(),
            reason,
        };
        let mut parts = key.split('/');
        if parts.next() != Some(BACKUPS) {
            return Err(bad(NameProblem::Key("not under backups/")));
        }
        let rest: Vec<&str> = parts.collect();
        if rest.len() < 2 {
            return Err(bad(NameProblem::Key("no backup name and file")));
        }
        for part in &rest {
            if part.is_empty() || *part == "." || *part == ".." {
                return Err(bad(NameProblem::Key("empty, . or .. segment")));
            }
            PathPart::parse(part).map_err(|e| bad(NameProblem::KeySegment(e)))?;
        }
        Ok(Path::from(key))
    }

    /// Writes one object by key (see [`BackupStore::checked_key`]); atomic
    /// like [`BackupStore::put`].
    pub async fn put_key(&self, key: &str, bytes: Bytes) -> Result<(), StoreError> {
        let path = self.checked_key(key)?;
        let backup = key
            .split('/')
            .nth(1)
            .expect("checked_key: a key under backups/<name>/");
        self.put_fenced(backup, &path, key.to_string(), bytes).await
    }

    /// Reads one object by key; `None` if it does not exist.
    pub async fn get_key(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        let path = self.checked_key(key)?;
        let result = match self.store.get(&path).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.io(key.to_string(), e)),
        };
        result
            .bytes()
            .await
            .map(Some)
            .map_err(|e| self.io(key.to_string(), e))
    }

    pub async fn exists_key(&self, key: &str) -> Result<bool, StoreError> {
        let path = self.checked_key(key)?;
        match self.store.head(&path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.io(key.to_string(), e)),
        }
    }

    /// Where a collected backup's resource uid is recorded
    /// ([`BackupStore::put_collected`]): under `plugins/`, which Velero's
    /// store layout admits. The uid is one key segment.
    fn collected_path(&self, uid: &str) -> Result<(Path, String), StoreError> {
        PathPart::parse(uid).map_err(|e| StoreError::Name {
            name: uid.to_string(),
            reason: NameProblem::Segment(e),
        })?;
        let key = format!("plugins/iar/collected/{uid}");
        Ok((Path::from(key.as_str()), key))
    }

    /// Records that the backup made for Backup resource `uid` was
    /// deleted from the store, before its files go: a resource whose
    /// status never left `New` (its status writes lost) is then known to
    /// have run, and is never started again once its data is gone. A few
    /// bytes per deleted backup, kept.
    pub async fn put_collected(&self, uid: &str) -> Result<(), StoreError> {
        let (path, key) = self.collected_path(uid)?;
        self.store
            .put(&path, Bytes::from_static(b"{}").into())
            .await
            .map_err(|e| self.io(key, e))?;
        self.puts.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Whether the backup made for Backup resource `uid` was deleted from
    /// the store ([`BackupStore::put_collected`]).
    pub async fn was_collected(&self, uid: &str) -> Result<bool, StoreError> {
        let (path, key) = self.collected_path(uid)?;
        match self.store.head(&path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.io(key, e)),
        }
    }

    /// Number of objects under a key prefix (checked like a key).
    pub async fn count_under(&self, prefix: &str) -> Result<usize, StoreError> {
        use futures::TryStreamExt;
        let path = self.checked_key(prefix)?;
        let listed: Vec<_> = self
            .store
            .list(Some(&path))
            .try_collect()
            .await
            .map_err(|e| self.io(prefix.to_string(), e))?;
        Ok(listed.len())
    }

    fn io(&self, key: String, source: object_store::Error) -> StoreError {
        StoreError::Io {
            url: self.url.clone(),
            key,
            source,
        }
    }

    fn corrupt(&self, key: String, reason: Corruption) -> StoreError {
        StoreError::Corrupt {
            url: self.url.clone(),
            key,
            reason,
        }
    }

    /// Atomic: a reader sees the old object or the new one, never a part.
    /// Object stores' PUT is atomic; object_store's LocalFileSystem (0.14,
    /// `local.rs` `put_opts`) writes a staged `<key>#<n>` file and renames it
    /// over the key, removing the staged file on error.
    pub async fn put(
        &self,
        backup: &str,
        file: BackupFile,
        bytes: Bytes,
    ) -> Result<(), StoreError> {
        let (path, key) = self.path(backup, file)?;
        self.put_fenced(backup, &path, key, bytes).await
    }

    /// Held from a write's fence check to its end: this process gives the
    /// lease back only once its writes in flight have ended (a release
    /// frees the lease at once, and a write held up on the way would land
    /// after the taker began: the campaign's seed 3134). Nothing where this
    /// process holds no lease.
    async fn writing(&self, backup: &str) -> Option<(Arc<fence::Fence>, fence::Writing)> {
        let fence = self.fences.get(backup)?;
        let in_flight = fence.writes.clone().read_owned().await;
        Some((fence, fence::Writing(in_flight)))
    }

    /// A write of one of `backup`'s files, checked against this process's
    /// lease on it ([`BackupStore::check_fence`]) while held in flight
    /// ([`BackupStore::writing`]); with a lease and a store that can
    /// refuse a late request, one the store takes only before the lease
    /// ends ([`deadline`]), or on a local store one a takeover revokes
    /// ([`local_stage`]).
    async fn put_fenced(
        &self,
        backup: &str,
        path: &Path,
        key: String,
        bytes: Bytes,
    ) -> Result<(), StoreError> {
        let writing = self.writing(backup).await;
        let deadline = self.check_fence(backup).await?;
        let staged = writing.as_ref().and_then(|(f, _)| f.staging.clone());
        match (deadline, &self.deadline, staged, &self.local) {
            (Some(by), Some(writer), _, _) => writer
                .put_by(path, bytes, by, || self.clock.system_now())
                .await
                .map_err(|e| match e {
                    deadline::DeadlineError::Passed(reason) => StoreError::Fenced {
                        backup: backup.to_string(),
                        reason,
                    },
                    deadline::DeadlineError::Failed(e) => self.io(key, e),
                })?,
            (Some(_), _, Some(staged), Some(local)) => {
                let target = local.file_of(path).map_err(|e| self.io(key.clone(), e))?;
                local_stage::LocalStaging::put(&staged, target, bytes)
                    .await
                    .map_err(|e| match e {
                        local_stage::StageError::Revoked => StoreError::Fenced {
                            backup: backup.to_string(),
                            reason: "another process took its lease over while this write was on its way".into(),
                        },
                        local_stage::StageError::Io(e) => self.io(
                            key,
                            object_store::Error::Generic {
                                store: "LocalFileSystem",
                                source: Box::new(e),
                            },
                        ),
                    })?
            }
            _ => {
                self.store
                    .put(path, bytes.into())
                    .await
                    .map_err(|e| self.io(key, e))?;
            }
        }
        self.puts.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// A URL that reads the file at `key` (checked as a key) for
    /// `expires`, without this store's credentials: a DownloadRequest's
    /// answer.
    pub async fn download_url(
        &self,
        key: &str,
        expires: std::time::Duration,
    ) -> Result<Download, StoreError> {
        let path = if key.starts_with("restores/") {
            self.checked_restore_key(key)?
        } else {
            self.checked_key(key)?
        };
        let Some(signer) = &self.deadline else {
            return Ok(Download::Unsigned);
        };
        match self.store.head(&path).await {
            Ok(_) => {}
            Err(object_store::Error::NotFound { .. }) => return Ok(Download::NotFound),
            Err(e) => return Err(self.io(key.to_string(), e)),
        }
        signer
            .signed_get(&path, expires)
            .await
            .map(Download::Url)
            .map_err(|e| self.io(key.to_string(), e))
    }

    /// `None` if the file does not exist.
    pub async fn get(&self, backup: &str, file: BackupFile) -> Result<Option<Bytes>, StoreError> {
        let (path, key) = self.path(backup, file)?;
        let result = match self.store.get(&path).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.io(key, e)),
        };
        result.bytes().await.map(Some).map_err(|e| self.io(key, e))
    }

    /// Plain JSON for the backup object, gzip'd JSON for the others.
    pub async fn put_json<T: Serialize + ?Sized>(
        &self,
        backup: &str,
        file: BackupFile,
        value: &T,
    ) -> Result<(), StoreError> {
        let json = if file.gzipped() {
            serde_json::to_vec(value)
        } else {
            serde_json::to_vec_pretty(value)
        }
        .map_err(|e| self.corrupt(file.key(backup), Corruption::Encode(e)))?;
        let bytes = if file.gzipped() { gzip(&json) } else { json };
        self.put(backup, file, bytes.into()).await
    }

    /// The inverse of [`BackupStore::put_json`]; `None` if missing.
    pub async fn get_json<T: DeserializeOwned>(
        &self,
        backup: &str,
        file: BackupFile,
    ) -> Result<Option<T>, StoreError> {
        let Some(bytes) = self.get(backup, file).await? else {
            return Ok(None);
        };
        let key = || file.key(backup);
        let json = if file.gzipped() {
            gunzip(&bytes).map_err(|e| self.corrupt(key(), Corruption::NotGzip(e)))?
        } else {
            bytes.to_vec()
        };
        serde_json::from_slice(&json)
            .map(Some)
            .map_err(|e| self.corrupt(key(), Corruption::Json(e)))
    }

    /// Like [`BackupStore::put_json`], but only if the object does not exist
    /// yet (`PutMode::Create`: a hard link on a local directory,
    /// `If-None-Match` on S3/GCS/Azure), so of two writers exactly one
    /// creates it; the other gets [`StoreError::Exists`].
    pub async fn create_json<T: Serialize + ?Sized>(
        &self,
        backup: &str,
        file: BackupFile,
        value: &T,
    ) -> Result<(), StoreError> {
        let (path, key) = self.path(backup, file)?;
        let json = serde_json::to_vec_pretty(value)
            .map_err(|e| self.corrupt(key.clone(), Corruption::Encode(e)))?;
        let bytes = if file.gzipped() { gzip(&json) } else { json };
        match self
            .store
            .put_opts(&path, bytes.into(), PutOptions::from(PutMode::Create))
            .await
        {
            Ok(_) => {
                self.puts.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(object_store::Error::AlreadyExists { .. }) => Err(StoreError::Exists {
                url: self.url.clone(),
                key,
            }),
            Err(e) => Err(self.io(key, e)),
        }
    }

    /// The key of claim `what` (path segments, e.g. a hook phase and a
    /// pod's namespace and name) of backup `backup`:
    /// `backups/<backup>/<backup>-claims/<what...>`, deleted with the
    /// backup's other files.
    fn claim_path(&self, backup: &str, what: &[&str]) -> Result<(Path, String), StoreError> {
        self.path(backup, BackupFile::Metadata)?;
        let mut key = format!("{BACKUPS}/{backup}/{backup}-claims");
        for part in what {
            PathPart::parse(part).map_err(|e| StoreError::Name {
                name: part.to_string(),
                reason: NameProblem::Segment(e),
            })?;
            key.push('/');
            key.push_str(part);
        }
        Ok((Path::from(key.as_str()), key))
    }

    /// Claims `what` for backup `backup` once across every process and
    /// machine: the first caller creates the claim holding `value`
    /// (`PutMode::Create`, as [`BackupStore::create_json`]) and gets
    /// `Ok(None)`; every later one gets the claim as it is now. A store
    /// that cannot answer is an `Err`: the claim is then nobody's yet, or
    /// the caller's own whose answer was lost, which a caller tells by a
    /// token of its own in `value` when it asks again.
    pub async fn claim_once(
        &self,
        backup: &str,
        what: &[&str],
        value: &serde_json::Value,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let (path, key) = self.claim_path(backup, what)?;
        match self
            .store
            .put_opts(
                &path,
                value.to_string().into_bytes().into(),
                PutOptions::from(PutMode::Create),
            )
            .await
        {
            Ok(_) => {
                self.puts.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
            Err(object_store::Error::AlreadyExists { .. }) => Ok(Some(
                self.read_claim(backup, what).await?.unwrap_or_default(),
            )),
            Err(e) => Err(self.io(key, e)),
        }
    }

    /// Claim `what` of backup `backup` as it is now; `None` if nobody has
    /// it.
    pub async fn read_claim(
        &self,
        backup: &str,
        what: &[&str],
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let (path, key) = self.claim_path(backup, what)?;
        match self.store.get(&path).await {
            Ok(got) => {
                let bytes = got.bytes().await.map_err(|e| self.io(key.clone(), e))?;
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| self.corrupt(key, Corruption::Json(e)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.io(key, e)),
        }
    }

    /// Rewrites claim `what` of backup `backup` (its holder saying how the
    /// claimed work ended).
    pub async fn update_claim(
        &self,
        backup: &str,
        what: &[&str],
        value: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let (path, key) = self.claim_path(backup, what)?;
        self.store
            .put(&path, value.to_string().into_bytes().into())
            .await
            .map_err(|e| self.io(key, e))?;
        self.puts.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Moves a file that cannot be read to `<key>.corrupt-<unix seconds>`
    /// beside it, so it is kept for a person to look at and never
    /// overwritten by a shorter rewrite. Returns the new key.
    pub async fn set_aside(&self, backup: &str, file: BackupFile) -> Result<String, StoreError> {
        let (path, key) = self.path(backup, file)?;
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let aside = format!("{key}{SET_ASIDE}{secs}");
        self.store
            .rename(&path, &Path::from(aside.as_str()))
            .await
            .map_err(|e| self.io(key, e))?;
        Ok(aside)
    }

    /// The backup log, one line per entry, gzip'd.
    pub async fn put_logs(&self, backup: &str, lines: &[String]) -> Result<(), StoreError> {
        let mut text = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        self.put(backup, BackupFile::Logs, gzip(text.as_bytes()).into())
            .await
    }

    /// The backup log's lines; `None` if there is none. A log that is not
    /// gzip'd UTF-8 is [`StoreError::Corrupt`].
    pub async fn get_logs(&self, backup: &str) -> Result<Option<Vec<String>>, StoreError> {
        let Some(gz) = self.get(backup, BackupFile::Logs).await? else {
            return Ok(None);
        };
        let text = gunzip(&gz)
            .and_then(|b| String::from_utf8(b).map_err(std::io::Error::other))
            .map_err(|e| self.corrupt(BackupFile::Logs.key(backup), Corruption::NotGzipText(e)))?;
        Ok(Some(text.lines().map(String::from).collect()))
    }

    /// Names of the backups under `backups/`, sorted.
    pub async fn list_backups(&self) -> Result<Vec<String>, StoreError> {
        let listing = match self
            .store
            .list_with_delimiter(Some(&Path::from(BACKUPS)))
            .await
        {
            Ok(l) => l,
            Err(object_store::Error::NotFound { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(self.io(format!("{BACKUPS}/"), e)),
        };
        let mut names: Vec<String> = listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        names.sort();
        Ok(names)
    }
}

/// The store's own JSON files (operations, results, logs) are rewritten
/// every sync period while operations run; the fast level compresses them
/// about as well as the default (their text repeats) in a fraction of the
/// time. The tarball keeps the default level (`tarball::gzip`).
fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(data).expect("writing to a Vec cannot fail");
    gz.finish().expect("writing to a Vec cannot fail")
}

fn gunzip(data: &[u8]) -> std::io::Result<Vec<u8>> {
    gz::gunzip_at_most(data, gz::JSON_MAX)
}

#[cfg(test)]
mod tests;
