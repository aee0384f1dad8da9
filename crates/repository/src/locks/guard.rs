//! A held lock: refreshed on a thread of its own, removed when dropped.

use super::Locks;
use crate::RepositoryError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// A lock on a repository, held until dropped. A thread refreshes it (a
/// new lock file, then the old one deleted) every `refresh_every`; if that
/// keeps failing until others may judge the lock stale, or someone removed
/// it, [`RepositoryLock::lost`] says so and the holder must stop.
pub struct RepositoryLock {
    state: Arc<State>,
    /// Dropped to stop the refresher, which then removes the lock.
    stop: Option<mpsc::Sender<()>>,
    refresher: Option<JoinHandle<()>>,
}

struct State {
    locks: Locks,
    exclusive: bool,
    /// The current lock file's id.
    current: Mutex<String>,
    /// When the current lock file's time was taken.
    made: Mutex<Instant>,
    /// The lock file was removed by someone else.
    removed: AtomicBool,
}

impl State {
    fn lost(&self) -> bool {
        self.removed.load(Ordering::SeqCst)
            || lock(&self.made).elapsed() > self.locks.options().lost_after()
    }

    fn current(&self) -> String {
        lock(&self.current).clone()
    }

    /// Writes a new lock file and deletes the old one.
    fn refresh(&self) -> Result<(), String> {
        let old = self.current();
        // Removed (`restic unlock --remove-all`, or judged stale where the
        // clocks disagree): another may already act as if it were gone, so
        // a new one would only hide that.
        if !self.locks.exists(&old).map_err(|e| e.to_string())? {
            self.removed.store(true, Ordering::SeqCst);
            return Err(format!("lock file locks/{old} was removed"));
        }
        let made = Instant::now();
        let lock_file = self
            .locks
            .options()
            .lock_file(self.exclusive, &self.locks.shared.username);
        let new = self.locks.write(&lock_file).map_err(|e| e.to_string())?;
        *lock(&self.current) = new;
        *lock(&self.made) = made;
        self.locks.remove(&old).map_err(|e| e.to_string())
    }
}

/// How soon a failed refresh is tried again.
const RETRY_FAILED_REFRESH: std::time::Duration = std::time::Duration::from_secs(15);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RepositoryLock {
    pub(crate) fn start(locks: Locks, exclusive: bool, id: String, made: Instant) -> Self {
        let every = locks.options().refresh_every;
        let state = Arc::new(State {
            locks,
            exclusive,
            current: Mutex::new(id),
            made: Mutex::new(made),
            removed: AtomicBool::new(false),
        });
        let (stop, stopped) = mpsc::channel::<()>();
        let shared = state.clone();
        // Every store call of the lock happens here, so dropping the guard
        // inside an async context never blocks on the runtime.
        let refresher = std::thread::Builder::new()
            .name("iar-repository-lock".into())
            .spawn(move || {
                let mut wait = every;
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(wait) {
                    // Past the point where others may judge it stale, a
                    // refresh would only hide that the lock lapsed.
                    if shared.lost() {
                        continue;
                    }
                    wait = match shared.refresh() {
                        Ok(()) => every,
                        // Tried again soon: a store down for a moment at
                        // the refresh must not cost the lock, which is
                        // lost 1.5 periods after its last refresh.
                        Err(e) => {
                            tracing::warn!(repository = %shared.locks.location(), "refreshing the repository lock: {e}");
                            every.min(RETRY_FAILED_REFRESH)
                        }
                    };
                }
                if !shared.removed.load(Ordering::SeqCst) {
                    let id = shared.current();
                    if let Err(e) = shared.locks.remove(&id) {
                        tracing::warn!(repository = %shared.locks.location(), lock = %id, "removing the repository lock: {e}");
                    }
                }
            })
            .expect("spawning the lock's refresher");
        RepositoryLock {
            state,
            stop: Some(stop),
            refresher: Some(refresher),
        }
    }

    /// Whether the lock may no longer protect the holder: unrefreshed for
    /// [`super::LockOptions::lost_after`], or removed by someone else.
    pub fn lost(&self) -> bool {
        self.state.lost()
    }

    /// `Err` (rule: repository-lock) once [`Self::lost`].
    pub fn check(&self) -> Result<(), RepositoryError> {
        if !self.lost() {
            return Ok(());
        }
        Err(RepositoryError::LockLost {
            location: self.state.locks.location().to_string(),
        })
    }

    pub fn exclusive(&self) -> bool {
        self.state.exclusive
    }

    /// The current lock file's name under `locks/`.
    pub fn id(&self) -> String {
        self.state.current()
    }
}

impl std::fmt::Debug for RepositoryLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepositoryLock")
            .field("id", &self.id())
            .field("exclusive", &self.exclusive())
            .finish()
    }
}

impl Drop for RepositoryLock {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.refresher.take() {
            let _ = t.join();
        }
    }
}
