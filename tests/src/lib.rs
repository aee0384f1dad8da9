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

pub mod blackhole;
pub mod fixtures;
mod hop;
pub mod http_faults;
pub mod snapshots;
pub mod toxiproxy;

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

/// versitygw, the S3 server the tests keep stores in (built by
/// `tools/velero/build.sh`).
pub mod s3 {
    use std::net::{IpAddr, TcpListener, TcpStream};
    use std::path::Path;
    use std::process::{Child, Command, Stdio};
    use std::time::Duration;

    /// A running versitygw, killed when dropped.
    pub struct Gateway(Child);

    impl Drop for Gateway {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// `binary` serving `root` (each directory in it a bucket) on `ip` at
    /// a free port, with one root user; returns once it listens, with its
    /// endpoint (`http://IP:PORT`).
    pub fn versitygw(
        binary: &Path,
        root: &Path,
        ip: IpAddr,
        access_key: &str,
        secret_key: &str,
    ) -> (Gateway, String) {
        let port = TcpListener::bind((ip, 0))
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let gateway = versitygw_at(binary, root, ip, port, access_key, secret_key, None);
        (gateway, format!("http://{ip}:{port}"))
    }

    /// [`versitygw`] on a given port: a gateway started again where its
    /// clients still point (a restart of the store, for fault tests).
    /// With `access_log`, every request it answers is appended there (S3's
    /// server access log format: time, operation, key, status, user agent).
    pub fn versitygw_at(
        binary: &Path,
        root: &Path,
        ip: IpAddr,
        port: u16,
        access_key: &str,
        secret_key: &str,
        access_log: Option<&Path>,
    ) -> Gateway {
        let mut command = Command::new(binary);
        if let Some(log) = access_log {
            command.arg("--access-log").arg(log);
        }
        let child = command
            .args(["--port", &format!("{ip}:{port}"), "posix"])
            .arg(root)
            .env("ROOT_ACCESS_KEY", access_key)
            .env("ROOT_SECRET_KEY", secret_key)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting versitygw");
        let gateway = Gateway(child);
        super::blocking::wait_for(
            &format!("versitygw listening on {ip}:{port}"),
            Duration::from_secs(30),
            || {
                TcpStream::connect((ip, port))
                    .map(drop)
                    .map_err(|e| e.to_string())
            },
        );
        gateway
    }

    impl Gateway {
        /// The gateway's process id, to stop and continue it.
        pub fn pid(&self) -> u32 {
            self.0.id()
        }
    }
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
        check: impl FnMut() -> Result<T, String>,
    ) -> T {
        wait_for_every(what, within, POLL, check)
    }

    /// [`wait_for`], polling every `period`: for a check that costs a
    /// process or a request (a `kubectl get`), not a file or a socket.
    pub fn wait_for_every<T>(
        what: &str,
        within: Duration,
        period: Duration,
        mut check: impl FnMut() -> Result<T, String>,
    ) -> T {
        let deadline = Instant::now() + within;
        loop {
            match check() {
                Ok(v) => return v,
                Err(last) if Instant::now() > deadline => {
                    panic!("{what}: gave up after {within:?}; last: {last}")
                }
                Err(_) => std::thread::sleep(period),
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
