//! Shared support for iar's integration tests.
//!
//! [`artifacts`] names the guest components that `build.rs` builds from
//! source for `wasm32-wasip2` (profile `guest`): the example plugins under
//! `plugins/` and the test fixtures under `tests/guests/`. Each constant is
//! the absolute path of one `.wasm` component, named after its package
//! without the `iar-plugin-`/`iar-guest-` prefix (`LABELS`, `HOSTILE`, ...);
//! [`artifacts::ALL`] lists them all with their package names and
//! [`artifacts::SOURCES`] with their source directories.
//!
//! [`fixtures`] holds the test data both crates' tests and the benchmarks
//! use (Kubernetes objects, incompressible volume bytes), and
//! [`store_files`] reads a local store's files. Nothing here needs iar's
//! types: iar dev-depends on this crate, so the helpers that do live in
//! each test binary's `support.rs` (`host/tests/all/support.rs`,
//! `tests/tests/all/support.rs`).

/// Paths of the guest components built by `build.rs`.
pub mod artifacts {
    include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));
}

pub mod fixtures;
pub mod snapshots;

/// Every file directly under `backups/<name>/` of a local store in
/// `store_dir`, by file name: what a test compares byte for byte to show
/// that nothing was written.
pub fn store_files(
    store_dir: &std::path::Path,
    name: &str,
) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(store_dir.join("backups").join(name))
        .unwrap_or_else(|e| panic!("backups/{name} in {}: {e}", store_dir.display()))
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// How often [`wait_for`] tries again.
pub const POLL: std::time::Duration = std::time::Duration::from_millis(25);

/// Polls `check` every [`POLL`] until it gives a value, or fails the test
/// after `within`, saying what it waited for and what it last saw (the
/// `Err`). For state that another task, process or server changes a
/// moment later; never a fixed sleep.
pub async fn wait_for<T, F, Fut>(what: &str, within: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = std::time::Instant::now() + within;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) if std::time::Instant::now() > deadline => {
                panic!("{what}: gave up after {within:?}; last: {last}")
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// [`wait_for`] a condition to hold.
pub async fn wait_until<F, Fut>(what: &str, within: std::time::Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(what, within, || {
        let holds = condition();
        async move {
            if holds.await {
                Ok(())
            } else {
                Err("not yet".to_string())
            }
        }
    })
    .await
}

/// [`wait_for`] and [`wait_until`] for synchronous tests, polling a
/// closure on the test's own thread (a child process, a file, a socket):
/// same polling, same failure message.
pub mod blocking {
    use super::POLL;
    use std::time::{Duration, Instant};

    /// Polls `check` every [`POLL`] until it gives a value, or fails the
    /// test after `within`, saying what it waited for and what it last
    /// saw (the `Err`).
    pub fn wait_for<T>(
        what: &str,
        within: Duration,
        mut check: impl FnMut() -> Result<T, String>,
    ) -> T {
        let deadline = Instant::now() + within;
        loop {
            match check() {
                Ok(v) => return v,
                Err(last) if Instant::now() > deadline => {
                    panic!("{what}: gave up after {within:?}; last: {last}")
                }
                Err(_) => std::thread::sleep(POLL),
            }
        }
    }

    /// [`wait_for`] a condition to hold.
    pub fn wait_until(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
        wait_for(what, within, || {
            if condition() {
                Ok(())
            } else {
                Err("not yet".to_string())
            }
        })
    }
}
