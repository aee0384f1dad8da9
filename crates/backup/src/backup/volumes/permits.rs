//! Who may read a volume now: at most `concurrency` volumes at once, and
//! at most `per_namespace` of them from one namespace, so that one
//! tenant's slow (or hostile) volumes cannot hold every permit while
//! other tenants' blocks — and their frozen applications' post hooks —
//! wait behind them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub struct VolumePermits {
    all: Arc<Semaphore>,
    per_namespace: usize,
    namespaces: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Held while a volume is read; both permits are returned on drop.
pub struct VolumePermit {
    _namespace: OwnedSemaphorePermit,
    _all: OwnedSemaphorePermit,
}

impl VolumePermits {
    /// `per_namespace` defaults to half the permits (at least one): a
    /// second tenant always finds room while the first holds its share.
    pub fn new(concurrency: usize, per_namespace: Option<usize>) -> Arc<Self> {
        let concurrency = concurrency.max(1);
        let per_namespace = per_namespace
            .unwrap_or(concurrency / 2)
            .clamp(1, concurrency);
        Arc::new(VolumePermits {
            all: Arc::new(Semaphore::new(concurrency)),
            per_namespace,
            namespaces: Mutex::default(),
        })
    }

    pub fn per_namespace(&self) -> usize {
        self.per_namespace
    }

    /// Waits for a permit of `namespace`'s share, then for one of all.
    pub async fn acquire(&self, namespace: &str) -> VolumePermit {
        let share = {
            // A std mutex held for a map lookup only, never across an await.
            let mut map = self.namespaces.lock().unwrap_or_else(|e| e.into_inner());
            // Shares nobody holds or waits for are dropped.
            map.retain(|_, s| Arc::strong_count(s) > 1);
            map.entry(namespace.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_namespace)))
                .clone()
        };
        let namespace = share.acquire_owned().await.expect("never closed");
        let all = self
            .all
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        VolumePermit {
            _namespace: namespace,
            _all: all,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// One tenant holding its whole share leaves room for another at once.
    #[tokio::test]
    async fn a_tenant_cannot_take_every_permit() {
        let permits = VolumePermits::new(4, None);
        assert_eq!(permits.per_namespace(), 2);
        let _a1 = permits.acquire("a").await;
        let _a2 = permits.acquire("a").await;
        // No free permit of a's share: the acquire cannot complete now.
        assert!(
            permits.acquire("a").now_or_never().is_none(),
            "a third permit for namespace a"
        );
        // Another tenant is not behind a's queue.
        let _b = permits.acquire("b").await;
        let _c = permits.acquire("c").await;
    }
}
