//! A lease on one backup, kept in the store beside it, so two processes never
//! drive the same backup: `iar backup` of a name another process is creating
//! fails, and `iar resume` refuses a backup another live process drives.
//!
//! The lease is a chain of generations, `backups/<name>/<name>-lease-<gen>.json`,
//! each holding the holder's id and an expiry. A process takes the lease by
//! creating the next generation with a conditional create
//! (`PutMode::Create`), which exactly one contender wins on every backend
//! (object_store's LocalFileSystem publishes it with a hard link; S3, GCS and
//! Azure with `If-None-Match`). It may do so only when there is no lease or
//! the newest one has expired or was released. A conditional *update*
//! (`PutMode::Update`) would need one key only, but LocalFileSystem does not
//! implement it (object_store 0.14), and the local directory is iar's default.
//!
//! The holder renews by rewriting its own generation before it expires, and
//! counts the lease lost when a newer generation exists or when it could not
//! renew before its own expiry (a taker may act from then on). This assumes
//! clocks that agree to well under the lease duration, as Kubernetes Leases do.

use super::fence::Fence;
use super::{BACKUPS, BackupStore, FILE_NAME_LIMIT, MAX_FILE_NAME, StoreError};
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(
        "backup {backup:?} is being driven by another process ({holder}) whose lease expires at {expires}; refused (wait for it to end, or for the lease to expire if it was killed)"
    )]
    Held {
        backup: String,
        holder: String,
        expires: String,
    },
    #[error("backup {backup:?}: lost its lease: {reason}")]
    Lost { backup: String, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What one generation of the lease holds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRecord {
    pub holder: String,
    pub generation: u64,
    /// RFC 3339; the lease is free from then on.
    pub expires: String,
    /// Set when the holder ended normally: free at once.
    #[serde(default)]
    pub released: bool,
}

impl LeaseRecord {
    fn expires_at(&self) -> SystemTime {
        humantime::parse_rfc3339(&self.expires).unwrap_or(SystemTime::UNIX_EPOCH)
    }

    fn free(&self, now: SystemTime) -> bool {
        self.released || self.expires_at() <= now
    }
}

/// A lease this process holds. Dropping it without [`Lease::release`]
/// leaves it to expire.
#[derive(Debug)]
pub struct Lease {
    store: BackupStore,
    backup: String,
    record: LeaseRecord,
    duration: Duration,
    /// What this process's writes of the backup are checked against.
    fence: Arc<Fence>,
    /// The holder of the generation before, when this one took the lease
    /// from it (it expired unreleased, and was another process's).
    taken_from: Option<String>,
}

impl Drop for Lease {
    /// Dropped without [`Lease::release`]: the lease is left to expire, and
    /// this process writes nothing more for the backup (a task that
    /// outlived the run that held it stops at its next write).
    fn drop(&mut self) {
        self.fence.abandoned.store(true, Ordering::Release);
    }
}

/// This process, as a lease holder: host, pid, and a per-process nonce so a
/// reused pid is a different holder.
pub fn holder_id() -> String {
    use std::sync::OnceLock;
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown-host".into());
        let nonce = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        format!("iar pid {} on {host} ({nonce:08x})", std::process::id())
    })
    .clone()
}

/// Milliseconds: a lease of a few seconds must not lose one to rounding.
fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn key(backup: &str, generation: u64) -> String {
    format!("{BACKUPS}/{backup}/{}", file_name(backup, generation))
}

fn file_name(backup: &str, generation: u64) -> String {
    format!("{backup}-lease-{generation:020}.json")
}

/// The longest backup name whose lease file name fits in
/// [`MAX_FILE_NAME`] bytes (the generation is always 20 digits).
pub const MAX_LEASED_NAME: usize = MAX_FILE_NAME - "-lease-00000000000000000000.json".len();

/// Refuses a backup whose lease file name would be longer than
/// [`MAX_FILE_NAME`] bytes: a local store cannot create it (ENAMETOOLONG),
/// and a backup without a lease must never start. Checked before any
/// lease is read or taken, so the error is this one and says what to do.
pub fn check_lease_key(backup: &str) -> Result<(), StoreError> {
    let file = file_name(backup, 0);
    if file.len() > MAX_FILE_NAME {
        return Err(StoreError::Name {
            name: backup.to_string(),
            reason: super::NameProblem::TooLong(format!(
                "its lease file name ({backup:.20}…-lease-<generation>.json) would be {} bytes, {FILE_NAME_LIMIT}; a backup name may have at most {MAX_LEASED_NAME} bytes (rule: name-length)",
                file.len()
            )),
        });
    }
    Ok(())
}

/// The generation a key of this backup's lease chain holds; `None` for
/// any other key.
pub(super) fn generation_of(backup: &str, key: &str) -> Option<u64> {
    key.strip_prefix(&format!("{BACKUPS}/{backup}/{backup}-lease-"))?
        .strip_suffix(".json")?
        .parse()
        .ok()
}

impl BackupStore {
    /// The newest lease generation of a backup, if any.
    pub async fn current_lease(&self, backup: &str) -> Result<Option<LeaseRecord>, StoreError> {
        self.path(backup, super::BackupFile::Metadata)?;
        check_lease_key(backup)?;
        // A generation removed between the listing and its read (a taker
        // deletes the ones before its own) is listed again; a loop, not a
        // recursion, so that a lease changing hands often cannot deepen
        // the stack.
        loop {
            if let Some(found) = self.newest_lease(backup).await? {
                return Ok(found);
            }
        }
    }

    /// The newest lease generation as listed and read now; `None` when
    /// the generation listed was removed before it was read.
    async fn newest_lease(&self, backup: &str) -> Result<Option<Option<LeaseRecord>>, StoreError> {
        let listing = match self
            .store
            .list_with_delimiter(Some(&Path::from(format!("{BACKUPS}/{backup}"))))
            .await
        {
            Ok(l) => l,
            Err(object_store::Error::NotFound { .. }) => return Ok(Some(None)),
            Err(e) => return Err(self.io(format!("{BACKUPS}/{backup}/"), e)),
        };
        let newest = listing
            .objects
            .iter()
            .filter_map(|o| generation_of(backup, o.location.as_ref()))
            .max();
        let Some(generation) = newest else {
            return Ok(Some(None));
        };
        let k = key(backup, generation);
        let bytes = match self.store.get(&Path::from(k.as_str())).await {
            Ok(r) => r.bytes().await.map_err(|e| self.io(k.clone(), e))?,
            // Removed since the listing: a newer one exists or none does.
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.io(k, e)),
        };
        serde_json::from_slice(&bytes)
            .map(|record| Some(Some(record)))
            .map_err(|e| self.corrupt(k, super::Corruption::LeaseJson(e)))
    }

    /// Checks, once per store, that a conditional create is honoured: a
    /// probe object is created, created again (which must be refused) and
    /// deleted. A server that ignores `If-None-Match` would let every
    /// contender believe it took the lease; iar refuses to run a lease there
    /// rather than lose exclusivity silently. Only an answer is kept (the
    /// second create refused, or accepted): a probe cut short by the store
    /// (a reset, a timeout, a 503) says nothing about it and is tried again
    /// at the next lease. Kept, such a failure refused every lease of the
    /// process for good (the fault campaign's seed 5664: a store reset as
    /// both replicas started, and no backup ever ran).
    pub async fn check_conditional_create(&self) -> Result<(), StoreError> {
        use super::ConditionalProbe;
        let verdict = self
            .conditional
            .get_or_try_init(|| async {
                let nanos = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos();
                // Under `backups/`, beside the backups' directories: Velero lists
                // only directories there, and refuses a store with a
                // top-level prefix its layout does not know.
                let probe = Path::from(format!(
                    "backups/.iar-conditional-probe-{}-{nanos}",
                    std::process::id()
                ));
                let create = || {
                    self.store.put_opts(
                        &probe,
                        Bytes::from_static(b"probe").into(),
                        PutOptions::from(PutMode::Create),
                    )
                };
                // Ok: an answer, kept; Err: no answer, not kept.
                let outcome = match create().await {
                    Err(e) => Err(ConditionalProbe::CreateFailed(Arc::new(e))),
                    Ok(_) => match create().await {
                        Err(object_store::Error::AlreadyExists { .. }) => Ok(Ok(())),
                        Ok(_) => Ok(Err(ConditionalProbe::Ignored)),
                        Err(e) => Err(ConditionalProbe::SecondFailed(Arc::new(e))),
                    },
                };
                let _ = self.store.delete(&probe).await;
                outcome
            })
            .await;
        let verdict = match verdict {
            Ok(kept) => kept.clone(),
            Err(unanswered) => Err(unanswered),
        };
        verdict.map_err(|reason| StoreError::NoConditionalWrites {
            url: self.url.clone(),
            reason,
        })
    }

    /// Takes the lease on `backup` for `duration`, or says who holds it.
    pub async fn acquire_lease(
        &self,
        backup: &str,
        duration: Duration,
    ) -> Result<Lease, LeaseError> {
        self.check_conditional_create().await?;
        let holder = self.holder.to_string();
        // A contender that loses the create race reads the winner's lease
        // next time round, so a few rounds always settle it.
        for _ in 0..8 {
            let now = self.clock.system_now();
            let (generation, taken_from) = match self.current_lease(backup).await? {
                Some(current) if !current.free(now) => {
                    return Err(LeaseError::Held {
                        backup: backup.into(),
                        holder: current.holder,
                        expires: current.expires,
                    });
                }
                Some(current) => {
                    let from =
                        (!current.released && current.holder != holder).then_some(current.holder);
                    (current.generation + 1, from)
                }
                None => (1, None),
            };
            // On a local store: the writes of the generations taken over
            // that are still on their way land now or never; and this
            // generation's own staging exists before its record does.
            let staging = match &self.local {
                Some(local) => {
                    local.revoke(backup, generation - 1).await?;
                    Some(local.prepare(backup, generation).await?)
                }
                None => None,
            };
            let record = LeaseRecord {
                holder: holder.clone(),
                generation,
                expires: rfc3339(now + duration),
                released: false,
            };
            let k = key(backup, generation);
            let bytes = Bytes::from(serde_json::to_vec_pretty(&record).expect("serializes"));
            match self
                .store
                .put_opts(
                    &Path::from(k.as_str()),
                    bytes.into(),
                    PutOptions::from(PutMode::Create),
                )
                .await
            {
                Ok(_) => {
                    // Older generations are history now; keeping them would
                    // only slow the listing. Best effort.
                    for old in generation.saturating_sub(2).max(1)..generation {
                        let _ = self.store.delete(&Path::from(key(backup, old))).await;
                    }
                    let fence = Arc::new(Fence {
                        generation,
                        expires: std::sync::Mutex::new(now + duration),
                        abandoned: AtomicBool::new(false),
                        released: AtomicBool::new(false),
                        writes: Arc::default(),
                        staging,
                    });
                    self.fences.set(backup, fence.clone());
                    return Ok(Lease {
                        store: self.clone(),
                        backup: backup.into(),
                        record,
                        duration,
                        fence,
                        taken_from,
                    });
                }
                Err(e) => {
                    if let Some(dir) = staging {
                        super::local_stage::LocalStaging::discard(dir).await;
                    }
                    match e {
                        object_store::Error::AlreadyExists { .. } => continue,
                        e => return Err(self.io(k, e).into()),
                    }
                }
            }
        }
        Err(LeaseError::Lost {
            backup: backup.into(),
            reason: "the lease kept changing hands while taking it".into(),
        })
    }
}

impl Lease {
    pub fn holder(&self) -> &str {
        &self.record.holder
    }

    /// The generation this lease is.
    pub fn generation(&self) -> u64 {
        self.record.generation
    }

    /// The process this lease was taken over from: the generation before
    /// expired unreleased, and was another's (which may still have
    /// writes on their way).
    pub fn taken_from(&self) -> Option<&str> {
        self.taken_from.as_deref()
    }

    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// How long the lease stands unrenewed, by this process's clock (zero
    /// once it expired).
    pub fn time_left(&self) -> Duration {
        self.record
            .expires_at()
            .duration_since(self.store.clock.system_now())
            .unwrap_or_default()
    }

    /// When a renewal should happen: a third of the duration, so two can
    /// fail before the lease expires.
    pub fn renew_every(&self) -> Duration {
        self.duration / 3
    }

    /// Extends the lease. A store error is returned as such (the caller
    /// retries until the expiry); `Lost` once a newer generation exists or
    /// the expiry passed unrenewed.
    pub async fn renew(&mut self) -> Result<(), LeaseError> {
        let lost = |reason: String| LeaseError::Lost {
            backup: self.backup.clone(),
            reason,
        };
        let now = self.store.clock.system_now();
        if self.record.expires_at() <= now {
            return Err(lost(format!(
                "it expired at {} before it could be renewed",
                self.record.expires
            )));
        }
        if let Some(current) = self.store.current_lease(&self.backup).await?
            && current.generation != self.record.generation
        {
            return Err(lost(format!("{} took it over", current.holder)));
        }
        let mut next = self.record.clone();
        next.expires = rfc3339(now + self.duration);
        self.write(&next).await?;
        self.record = next;
        *self.fence.expires.lock().unwrap_or_else(|p| p.into_inner()) = now + self.duration;
        Ok(())
    }

    async fn write(&self, record: &LeaseRecord) -> Result<(), StoreError> {
        let k = key(&self.backup, record.generation);
        let bytes = Bytes::from(serde_json::to_vec_pretty(record).expect("serializes"));
        self.store
            .store
            .put(&Path::from(k.as_str()), bytes.into())
            .await
            .map_err(|e| self.store.io(k, e))?;
        Ok(())
    }

    /// Marks the lease free at once. Someone else holding it by now is
    /// [`LeaseError::Lost`]: what this process did under it was done after
    /// a takeover, and must not be reported as this process's success. No
    /// lease at all (its files deleted with the backup) is nothing to give
    /// back.
    pub async fn release(self) -> Result<(), LeaseError> {
        // Given back: from here on another process may take it at once,
        // so a task of this one that outlived the work writes nothing (the
        // fence refuses it) unless this process takes the lease again.
        self.fence.released.store(true, Ordering::Release);
        // And the writes already past their check end first (bounded: each
        // ends by the lease's end), so none lands after the release.
        let _drained = self.fence.writes.write().await;
        if let Some(dir) = self.fence.staging.clone() {
            super::local_stage::LocalStaging::discard(dir).await;
        }
        match self.store.current_lease(&self.backup).await? {
            Some(current) if current.generation == self.record.generation => {}
            Some(current) => {
                return Err(LeaseError::Lost {
                    backup: self.backup.clone(),
                    reason: format!("{} took it over", current.holder),
                });
            }
            None => return Ok(()),
        }
        let mut done = self.record.clone();
        done.released = true;
        done.expires = rfc3339(self.store.clock.system_now());
        Ok(self.write(&done).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, BackupStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = BackupStore::open(dir.path().to_str().unwrap()).unwrap();
        (dir, store)
    }

    /// A store over a fresh directory whose faults a test turns on.
    fn faulty_dir() -> (tempfile::TempDir, Arc<crate::store::faulty::FaultyStore>) {
        let dir = tempfile::tempdir().unwrap();
        let local = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        let faulty = Arc::new(crate::store::faulty::FaultyStore::new(Arc::new(local)));
        (dir, faulty)
    }

    /// Of many contenders at once for a free lease, exactly one gets it and
    /// every other is told who holds it. A plain put (no conditional create)
    /// would let several believe they hold it.
    /// A store that ignores conditional creates (as an S3 server without
    /// `If-None-Match` does) gets no lease, and says why by rule; nothing of
    /// the probe is left behind.
    #[tokio::test]
    async fn a_store_without_conditional_writes_is_refused_a_lease() {
        let (dir, faulty) = faulty_dir();
        faulty.ignore_conditional_puts(true);
        let store = BackupStore::from_object_store(faulty.clone(), "s3://no-conditions");
        let e = store
            .acquire_lease("b", Duration::from_secs(60))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("store-conditional-writes") && e.contains("s3://no-conditions"),
            "{e}"
        );
        let left: Vec<_> = walk(dir.path());
        assert!(left.is_empty(), "the probe is deleted: {left:?}");
        // The same store, honouring them again: the verdict is kept per
        // store value, so a fresh one is checked again and passes.
        faulty.ignore_conditional_puts(false);
        let store = BackupStore::from_object_store(faulty, "s3://no-conditions");
        store
            .acquire_lease("b", Duration::from_secs(60))
            .await
            .unwrap();
    }

    /// A probe the store cut short (its puts failing, as a reset or a 503
    /// would) is no verdict: the lease is refused while it fails, and the
    /// same store value takes it once the store answers. A verdict, once
    /// answered, is kept: a store seen ignoring conditional creates stays
    /// refused. Seed 5664 of the fault campaign kept the failure, and no
    /// backup of that process ever ran.
    #[tokio::test]
    async fn a_probe_cut_short_is_tried_again_and_an_answer_is_kept() {
        let (_dir, faulty) = faulty_dir();
        let store = BackupStore::from_object_store(faulty.clone(), "s3://flaky");
        faulty.fail_puts(true);
        let e = store
            .acquire_lease("b", Duration::from_secs(60))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a conditional create failed") && e.contains("store-conditional-writes"),
            "{e}"
        );
        faulty.fail_puts(false);
        store
            .acquire_lease("b", Duration::from_secs(60))
            .await
            .expect("the probe is tried again once the store answers");

        let ignoring = BackupStore::from_object_store(faulty.clone(), "s3://flaky");
        faulty.ignore_conditional_puts(true);
        assert!(
            ignoring
                .acquire_lease("c", Duration::from_secs(60))
                .await
                .is_err()
        );
        faulty.ignore_conditional_puts(false);
        let e = ignoring
            .acquire_lease("c", Duration::from_secs(60))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not support conditional writes"), "{e}");
    }

    fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            if e.path().is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path());
            }
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn exactly_one_contender_takes_a_free_lease() {
        let (_dir, store) = store();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.acquire_lease("b", Duration::from_secs(60)).await })
            })
            .collect();
        let mut won = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(lease) => won.push(lease),
                Err(LeaseError::Held { holder, .. }) => assert_eq!(holder, holder_id()),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(won.len(), 1);
        let current = store.current_lease("b").await.unwrap().unwrap();
        assert_eq!(current.generation, won[0].record.generation);
    }

    /// An expired lease is taken over by the next generation, and its old
    /// holder finds out at its next renewal; a released one is free at once.
    #[tokio::test]
    async fn expiry_takeover_loss_and_release() {
        let (_dir, store) = store();
        let mut first = store.acquire_lease("b", Duration::ZERO).await.unwrap();
        let second = store
            .acquire_lease("b", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(second.record.generation, first.record.generation + 1);
        let err = first.renew().await.unwrap_err();
        assert!(matches!(err, LeaseError::Lost { .. }), "{err}");
        let err = store
            .acquire_lease("b", Duration::from_secs(60))
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, LeaseError::Held { .. }) && msg.contains(&holder_id()),
            "{msg}"
        );
        second.release().await.unwrap();
        let third = store
            .acquire_lease("b", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(third.record.generation, 3);
    }

    /// A lease file name longer than 255 bytes (250, leaving room for the
    /// local store's staging suffix) is refused before the store is
    /// touched, with the limit and the longest name that fits (218 bytes):
    /// the lease of the longest such name is taken, one byte more is
    /// refused by rule rather than failing in the file system (before, a
    /// local store answered "File name too long", and the controller
    /// retried it every 5 s). Lengths are bytes: a multi-byte name counts
    /// its bytes.
    #[tokio::test]
    async fn a_lease_key_over_255_bytes_is_refused_by_rule() {
        assert_eq!(MAX_LEASED_NAME, 218);
        let (dir, store) = store();
        let fits = "a".repeat(MAX_LEASED_NAME);
        assert_eq!(file_name(&fits, 7).len(), 250);
        check_lease_key(&fits).unwrap();
        let lease = store
            .acquire_lease(&fits, Duration::from_secs(60))
            .await
            .unwrap();
        lease.release().await.unwrap();
        for over in ["a".repeat(MAX_LEASED_NAME + 1), "é".repeat(110)] {
            let err = store
                .acquire_lease(&over, Duration::from_secs(60))
                .await
                .unwrap_err();
            let msg = err.to_string();
            assert!(
                matches!(err, LeaseError::Store(StoreError::Name { .. }))
                    && msg.contains("over the 250 bytes a store file name may have (255, less")
                    && msg.contains("at most 218 bytes")
                    && msg.ends_with("(rule: name-length)"),
                "{msg}"
            );
            assert!(!dir.path().join("backups").join(&over).exists());
        }
    }
}
