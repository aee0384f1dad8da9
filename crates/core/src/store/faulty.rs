//! An `ObjectStore` that fails or pauses puts, or fails deletes, on
//! command, for tests of what a failed or slow upload (or an interrupted
//! deletion) does (here and in other crates' integration
//! tests, so it is not `cfg(test)`).

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Wraps a store; reads, lists and copies pass straight through, and
/// deletes unless told to fail.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    fail: AtomicBool,
    /// Puts left before they start failing; `usize::MAX` means no limit.
    budget: AtomicUsize,
    pauses: Mutex<Vec<Arc<Pause>>>,
    /// Puts to keys ending in one of these fail.
    failing: Mutex<Vec<String>>,
    /// Deletes left before they start failing; `usize::MAX` means no limit.
    delete_budget: Arc<AtomicUsize>,
    /// While on, a conditional create overwrites like a plain put: an S3
    /// server that ignores `If-None-Match`.
    unconditional: AtomicBool,
}

#[derive(Debug)]
struct Pause {
    suffix: String,
    released: watch::Sender<bool>,
    /// How many puts have reached the pause.
    arrived: watch::Sender<usize>,
}

impl Pause {
    fn release(&self) {
        self.released.send_replace(true);
    }
}

/// Holds matching puts until [`PauseGuard::release`] or drop.
#[derive(Debug)]
pub struct PauseGuard {
    pause: Arc<Pause>,
}

impl PauseGuard {
    /// Resolves once a put has reached the pause and is waiting there.
    pub fn paused(&self) -> impl Future<Output = ()> + Send + use<> {
        let mut arrived = self.pause.arrived.subscribe();
        async move {
            // The sender lives as long as the guard's `Pause`, held here too.
            let _ = arrived.wait_for(|n| *n > 0).await;
        }
    }

    pub fn release(self) {}
}

impl Drop for PauseGuard {
    fn drop(&mut self) {
        self.pause.release();
    }
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        FaultyStore {
            inner,
            fail: AtomicBool::new(false),
            budget: AtomicUsize::new(usize::MAX),
            pauses: Mutex::new(Vec::new()),
            failing: Mutex::new(Vec::new()),
            delete_budget: Arc::new(AtomicUsize::new(usize::MAX)),
            unconditional: AtomicBool::new(false),
        }
    }

    /// While on, puts ignore their mode (`Create` included) and overwrite,
    /// as a server without conditional writes does.
    pub fn ignore_conditional_puts(&self, on: bool) {
        self.unconditional.store(on, Ordering::SeqCst);
    }

    /// Counting from this call, the first `n` deletes go through and every
    /// later one fails; `None` lets every delete through again.
    pub fn fail_deletes_after(&self, n: Option<usize>) {
        self.delete_budget
            .store(n.unwrap_or(usize::MAX), Ordering::SeqCst);
    }

    /// While on, every put fails.
    pub fn fail_puts(&self, on: bool) {
        self.fail.store(on, Ordering::SeqCst);
    }

    /// Counting from this call, the first `n` puts go through and every
    /// later one fails.
    pub fn fail_after(&self, n: usize) {
        self.budget.store(n, Ordering::SeqCst);
    }

    /// From now on, every put to a key ending in `key_suffix` fails (the
    /// others go through).
    pub fn fail_puts_to(&self, key_suffix: &str) {
        self.failing.lock().unwrap().push(key_suffix.to_string());
    }

    /// Blocks every put to a key ending in `key_suffix`, before it writes
    /// anything, until the guard is released or dropped.
    pub fn pause_puts_to(&self, key_suffix: &str) -> PauseGuard {
        let pause = Arc::new(Pause {
            suffix: key_suffix.to_string(),
            released: watch::channel(false).0,
            arrived: watch::channel(0).0,
        });
        self.pauses.lock().unwrap().push(pause.clone());
        PauseGuard { pause }
    }

    /// Runs before every put: waits at a matching pause, then decides
    /// whether the put fails.
    async fn gate(&self, location: &Path) -> Result<()> {
        let pause = {
            let mut pauses = self.pauses.lock().unwrap();
            pauses.retain(|p| !*p.released.borrow());
            pauses
                .iter()
                .find(|p| location.as_ref().ends_with(&p.suffix))
                .cloned()
        };
        if let Some(pause) = pause {
            let mut released = pause.released.subscribe();
            pause.arrived.send_modify(|n| *n += 1);
            let _ = released.wait_for(|r| *r).await;
        }
        let over_budget =
            self.budget
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| match b {
                    usize::MAX => None,
                    0 => Some(0),
                    b => Some(b - 1),
                })
                == Ok(0);
        let targeted = self
            .failing
            .lock()
            .unwrap()
            .iter()
            .any(|suffix| location.as_ref().ends_with(suffix.as_str()));
        if self.fail.load(Ordering::SeqCst) || over_budget || targeted {
            return Err(object_store::Error::Generic {
                store: "FaultyStore",
                source: format!("injected failure: put {location}").into(),
            });
        }
        Ok(())
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.gate(location).await?;
        let opts = if self.unconditional.load(Ordering::SeqCst) {
            PutOptions {
                mode: object_store::PutMode::Overwrite,
                ..opts
            }
        } else {
            opts
        };
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.gate(location).await?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        use futures::StreamExt;
        let budget = self.delete_budget.clone();
        let gated = locations.map(move |location| {
            let location = location?;
            let spent = budget.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| match b {
                usize::MAX | 0 => None,
                b => Some(b - 1),
            });
            if spent == Err(0) {
                return Err(object_store::Error::Generic {
                    store: "FaultyStore",
                    source: format!("injected failure: delete {location}").into(),
                });
            }
            Ok(location)
        });
        self.inner.delete_stream(gated.boxed())
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;
    use std::time::Duration;

    fn store() -> Arc<FaultyStore> {
        Arc::new(FaultyStore::new(Arc::new(InMemory::new())))
    }

    async fn put(s: &FaultyStore, key: &str, data: &'static str) -> Result<PutResult> {
        s.put(&Path::from(key), Bytes::from_static(data.as_bytes()).into())
            .await
    }

    async fn get(s: &FaultyStore, key: &str) -> String {
        let bytes = s
            .get(&Path::from(key))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn fail_puts_toggles_and_names_the_injection() {
        let s = store();
        put(&s, "a", "1").await.unwrap();
        s.fail_puts(true);
        let err = put(&s, "a", "2").await.unwrap_err();
        assert!(matches!(err, object_store::Error::Generic { .. }));
        assert!(err.to_string().contains("injected failure"), "{err}");
        assert_eq!(get(&s, "a").await, "1", "reads still work");
        s.fail_puts(false);
        put(&s, "a", "3").await.unwrap();
        assert_eq!(get(&s, "a").await, "3");
    }

    #[tokio::test]
    async fn fail_after_lets_n_puts_through() {
        let s = store();
        put(&s, "before", "x").await.unwrap();
        s.fail_after(2);
        put(&s, "a", "1").await.unwrap();
        put(&s, "b", "2").await.unwrap();
        for _ in 0..3 {
            let err = put(&s, "c", "3").await.unwrap_err();
            assert!(err.to_string().contains("injected failure"), "{err}");
        }
        assert!(s.get(&Path::from("c")).await.is_err());
        assert_eq!(get(&s, "b").await, "2");
    }

    #[tokio::test]
    async fn pause_holds_matching_puts_until_released() {
        let s = store();
        put(&s, "backups/b/b-results.gz", "old").await.unwrap();
        let guard = s.pause_puts_to("-results.gz");
        let writer = {
            let s = s.clone();
            tokio::spawn(async move { put(&s, "backups/b/b-results.gz", "new").await })
        };
        tokio::time::timeout(Duration::from_secs(5), guard.paused())
            .await
            .expect("the put reaches the pause");
        // Other keys are not held, and the paused key still reads old.
        put(&s, "backups/b/velero-backup.json", "{}").await.unwrap();
        assert_eq!(get(&s, "backups/b/b-results.gz").await, "old");
        assert!(!writer.is_finished());
        guard.release();
        writer.await.unwrap().unwrap();
        assert_eq!(get(&s, "backups/b/b-results.gz").await, "new");
        // Released pauses hold nothing.
        put(&s, "backups/b/b-results.gz", "newer").await.unwrap();
    }

    #[tokio::test]
    async fn dropping_the_guard_releases() {
        let s = store();
        let guard = s.pause_puts_to("k");
        let writer = {
            let s = s.clone();
            tokio::spawn(async move { put(&s, "k", "v").await })
        };
        let paused = guard.paused();
        paused.await;
        drop(guard);
        writer.await.unwrap().unwrap();
        assert_eq!(get(&s, "k").await, "v");
    }
}
