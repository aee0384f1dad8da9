//! A backup's plugins write to the cluster only under this process's lease
//! on the backup, as its store writes are: each create, replace or delete
//! is refused (rule `lease-fence`) once the lease was given back, given up
//! or ran out by this process's clock, and is given no longer than the
//! lease has left. A process cut off from the store cannot renew its
//! lease, while another takes the backup over once it expires and may
//! fail and delete it: a write after that would leave an object no
//! record names (the fault campaign's seed 3906: a VolumeSnapshot
//! created by a first pass whose store was partitioned away, after its
//! backup had expired and gone). Reads are not fenced.

use iar_core::catalog::GroupResource;
use iar_core::cluster::{ClusterError, ClusterReader, ClusterWriter, Created};
use iar_core::item::{Item, ItemRef};
use iar_core::select::BackupFilter;
use iar_core::store::BackupStore;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The rule a fenced write is refused by (the store's own).
pub const RULE: &str = "lease-fence";

/// `cluster` as backup `backup`'s plugins see it: writes fenced by this
/// process's lease on it.
pub(super) fn fenced(
    cluster: Arc<dyn ClusterReader>,
    store: &BackupStore,
    backup: &str,
) -> Arc<dyn ClusterReader> {
    Arc::new(LeaseFenced {
        inner: cluster,
        store: store.clone(),
        backup: backup.to_string(),
    })
}

struct LeaseFenced {
    inner: Arc<dyn ClusterReader>,
    store: BackupStore,
    backup: String,
}

impl LeaseFenced {
    /// The budget a write may have: no longer than the lease stands.
    fn within(&self, what: &str, id: &ItemRef, budget: Duration) -> Result<Duration, ClusterError> {
        match self.store.lease_time_left(&self.backup) {
            Ok(None) => Ok(budget),
            Ok(Some(left)) => Ok(budget.min(left)),
            Err(reason) => Err(ClusterError::Refused(format!(
                "{what} {id} for backup {} refused: {reason} (rule: {RULE})",
                self.backup
            ))),
        }
    }
}

impl ClusterWriter for LeaseFenced {
    fn is_live(&self) -> bool {
        self.inner.is_live()
    }

    fn create_within(
        &self,
        id: &ItemRef,
        object: Value,
        budget: Duration,
    ) -> Result<Created, ClusterError> {
        let budget = self.within("creating", id, budget)?;
        self.inner.create_within(id, object, budget)
    }

    fn replace_within(
        &self,
        id: &ItemRef,
        object: Value,
        budget: Duration,
    ) -> Result<Value, ClusterError> {
        let budget = self.within("replacing", id, budget)?;
        self.inner.replace_within(id, object, budget)
    }

    fn delete_within(
        &self,
        id: &ItemRef,
        uid: &str,
        budget: Duration,
    ) -> Result<bool, ClusterError> {
        let budget = self.within("deleting", id, budget)?;
        self.inner.delete_within(id, uid, budget)
    }
}

#[async_trait::async_trait]
impl ClusterReader for LeaseFenced {
    fn get(&self, id: &ItemRef) -> Result<Option<Value>, ClusterError> {
        self.inner.get(id)
    }

    fn get_json(&self, id: &ItemRef) -> Result<Option<Arc<str>>, ClusterError> {
        self.inner.get_json(id)
    }

    fn get_json_within(
        &self,
        id: &ItemRef,
        budget: Duration,
    ) -> Result<Option<Arc<str>>, ClusterError> {
        self.inner.get_json_within(id, budget)
    }

    async fn get_async(&self, id: &ItemRef) -> Result<Option<Value>, ClusterError> {
        self.inner.get_async(id).await
    }

    fn catalog_within(
        &self,
        budget: Duration,
    ) -> Result<Arc<Vec<iar_core::cluster::catalog::ApiResourceRow>>, ClusterError> {
        self.inner.catalog_within(budget)
    }

    fn server_version_within(
        &self,
        budget: Duration,
    ) -> Result<iar_core::cluster::catalog::ServerVersion, ClusterError> {
        self.inner.server_version_within(budget)
    }

    async fn list(&self, filter: &BackupFilter) -> Result<Vec<Item>, ClusterError> {
        self.inner.list(filter).await
    }

    async fn list_sources(
        &self,
        sources: &[PathBuf],
        filter: &BackupFilter,
    ) -> Option<Result<Vec<Item>, ClusterError>> {
        self.inner.list_sources(sources, filter).await
    }

    fn get_item(&self, id: &ItemRef) -> Result<Option<Item>, ClusterError> {
        self.inner.get_item(id)
    }

    fn list_within(
        &self,
        gr: &GroupResource,
        namespace: &str,
        selector: &iar_core::select::labels::LabelSelector,
        limit: usize,
        budget: Duration,
    ) -> Result<Vec<Arc<str>>, ClusterError> {
        self.inner
            .list_within(gr, namespace, selector, limit, budget)
    }

    async fn delete_async(&self, id: &ItemRef, uid: &str) -> Result<bool, ClusterError> {
        self.within("deleting", id, Duration::ZERO)?;
        self.inner.delete_async(id, uid).await
    }

    async fn get_item_async(&self, id: &ItemRef) -> Result<Option<Item>, ClusterError> {
        self.inner.get_item_async(id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records each write's budget and creates whatever it is given.
    #[derive(Default)]
    struct Recording(Mutex<Vec<(String, Duration)>>);

    impl ClusterWriter for Recording {
        fn create_within(
            &self,
            id: &ItemRef,
            object: Value,
            budget: Duration,
        ) -> Result<Created, ClusterError> {
            self.0.lock().unwrap().push((id.name.clone(), budget));
            Ok(Created::New(object))
        }

        fn delete_within(
            &self,
            id: &ItemRef,
            _: &str,
            budget: Duration,
        ) -> Result<bool, ClusterError> {
            self.0.lock().unwrap().push((id.name.clone(), budget));
            Ok(true)
        }
    }

    #[async_trait::async_trait]
    impl ClusterReader for Recording {
        fn get(&self, _: &ItemRef) -> Result<Option<Value>, ClusterError> {
            Ok(None)
        }
    }

    fn snapshot(name: &str) -> ItemRef {
        ItemRef::new("snapshot.storage.k8s.io", "volumesnapshots", "shop", name)
    }

    /// Under a live lease a write goes, with no longer than the lease has
    /// left; once the lease ran out unrenewed (a store out of reach), or
    /// was given back, it is refused by rule and never reaches the
    /// cluster. Without a lease here nothing is fenced.
    #[tokio::test]
    async fn a_plugins_cluster_write_goes_only_under_the_backups_lease() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(iar_core::clock::ManualClock::new());
        let store = BackupStore::open(dir.path().to_str().unwrap())
            .unwrap()
            .with_clock(clock.clone());
        let recording = Arc::new(Recording::default());
        let cluster = fenced(recording.clone(), &store, "b1");

        // No lease taken here: unfenced.
        cluster
            .create_within(&snapshot("before"), Value::Null, Duration::from_secs(60))
            .unwrap();

        let lease = store
            .acquire_lease("b1", Duration::from_secs(15))
            .await
            .unwrap();
        cluster
            .create_within(&snapshot("held"), Value::Null, Duration::from_secs(60))
            .unwrap();
        // Past the lease's end with no renewal.
        clock.advance(Duration::from_secs(16));
        let refused = cluster
            .create_within(&snapshot("late"), Value::Null, Duration::from_secs(60))
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("rule: lease-fence") && refused.contains("expired"),
            "{refused}"
        );
        let refused = cluster
            .delete_within(&snapshot("held"), "uid", Duration::from_secs(60))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("rule: lease-fence"), "{refused}");

        let recorded = recording.0.lock().unwrap().clone();
        assert_eq!(
            recorded,
            [
                ("before".to_string(), Duration::from_secs(60)),
                ("held".to_string(), Duration::from_secs(15)),
            ]
        );
        drop(lease);
    }

    #[tokio::test]
    async fn a_lease_given_back_fences_every_later_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = BackupStore::open(dir.path().to_str().unwrap()).unwrap();
        let recording = Arc::new(Recording::default());
        let cluster = fenced(recording.clone(), &store, "b1");
        let lease = store
            .acquire_lease("b1", Duration::from_secs(15))
            .await
            .unwrap();
        lease.release().await.unwrap();
        let refused = cluster
            .create_within(&snapshot("after"), Value::Null, Duration::from_secs(60))
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("gave its lease") && refused.contains("rule: lease-fence"),
            "{refused}"
        );
        assert!(recording.0.lock().unwrap().is_empty());
    }
}
