//! The CSI snapshot-controller (`github.com/kubernetes-csi/external-snapshotter`,
//! built by `tools/kubernetes/build.sh snapshot-controller`) against the test API
//! server, with the v1 `snapshot.storage.k8s.io` CRDs installed. It does the
//! API side of CSI snapshots: it binds VolumeSnapshots and
//! VolumeSnapshotContents, adds and removes their finalizers and copies a
//! content's status (readyToUse, restoreSize, ...) to its snapshot.
//!
//! What it does not do: cut snapshots. That is a CSI driver's sidecar
//! (csi-snapshotter), which does not run here; a VolumeSnapshotContent's
//! status is whatever the test writes to it.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::StartError;
use crate::poll;
use crate::process::ServerProcess;
use crate::{ApiServer, binaries, lock, loud, skip_or_fail};

const READY: Duration = Duration::from_secs(60);

/// What its log says once its informers have synced (at `--vmodule` level 4
/// of that file, set below).
const INITIALIZED: &str = "controller initialized";

/// A running snapshot-controller.
pub struct SnapshotController {
    process: Mutex<Option<ServerProcess>>,
    log: PathBuf,
}

impl SnapshotController {
    /// Installs the VolumeSnapshot CRDs on `server`, starts the controller
    /// against it (admin credentials) and waits until its caches have
    /// synced. `Ok(None)` when there is no Go to build it with.
    pub async fn start(server: &ApiServer) -> Result<Option<SnapshotController>, StartError> {
        let kubeconfig = server.kubeconfig().to_path_buf();
        let dir = server.dir().to_path_buf();
        let Some(binary) = tokio::task::spawn_blocking(binaries::snapshot_controller)
            .await
            .expect("the build thread does not panic")?
        else {
            return Ok(None);
        };
        let files = binary.parent().expect("the binary is in a directory");
        let client = server.client(crate::User::Admin).await?;
        // Before the controller: it exits if they are not served in 30 s.
        crate::install_crds(&client, &files.join("snapshot-crds.yaml")).await?;
        let controller = SnapshotController::spawn(&binary, &kubeconfig, &dir)?;
        controller.wait_initialized().await?;
        Ok(Some(controller))
    }

    fn spawn(
        binary: &Path,
        kubeconfig: &Path,
        dir: &Path,
    ) -> Result<SnapshotController, StartError> {
        let log = dir.join("snapshot-controller.log");
        let mut command = std::process::Command::new(binary);
        command
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            // The only instance; a lease would only delay its start.
            .arg("--leader-election=false")
            // On by default: without the VolumeGroupSnapshot CRDs (not
            // installed) it would wait 30 s for them before going on.
            .arg("--feature-gates=CSIVolumeGroupSnapshot=false")
            // The client's default 5 QPS would pace a test of many snapshots.
            .arg("--kube-api-qps=100")
            .arg("--kube-api-burst=200")
            // A sync that failed (say, a content created after its snapshot)
            // is retried with backoff from 1 s; its default cap is 5 min.
            .arg("--retry-interval-max=5s")
            // Its informers drop an update whose old object has no
            // resourceVersion ("error parsing old ResourceVersion"), which
            // an API server restart can hand them (the fault campaign's
            // seed 4914: a content made ready, its snapshot never told);
            // the periodic resync, 15 min by default, is what recovers.
            // 30 s keeps that recovery inside a test's bounds.
            .arg("--resync-period=30s")
            // Level 4 of snapshot_controller_base.go alone: INITIALIZED and
            // each failed sync.
            .arg("--vmodule=snapshot_controller_base=4");
        let process = ServerProcess::spawn("snapshot-controller", command, log.clone())?;
        Ok(SnapshotController {
            process: Mutex::new(Some(process)),
            log,
        })
    }

    /// Waits until its log says its informers have synced.
    async fn wait_initialized(&self) -> Result<(), StartError> {
        poll::until_async(
            Instant::now() + READY,
            Duration::from_millis(100),
            || async {
                if let Some(p) = lock(&self.process).as_mut() {
                    p.check_running()?;
                }
                Ok(if self.log().contains(INITIALIZED) {
                    Ok(())
                } else {
                    Err(format!("no {INITIALIZED:?} in its log"))
                })
            },
            |last| StartError::not_ready("snapshot-controller", READY, last, &self.log),
        )
        .await
    }

    /// Its log (stdout and stderr), for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills it. Idempotent.
    pub fn shutdown(&self) {
        if let Some(mut p) = lock(&self.process).take() {
            p.kill();
        }
    }
}

impl Drop for SnapshotController {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The snapshot-controller of the shared API server ([`crate::shared`]),
/// started on first use and stopped at exit. `None` when tests must skip
/// (no Go; loud, and a failure under `CI=true`). Panics if it cannot start.
pub async fn shared() -> Option<&'static SnapshotController> {
    static SHARED: OnceLock<SnapshotController> = OnceLock::new();
    static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    extern "C" fn stop_shared() {
        if let Some(controller) = SHARED.get() {
            controller.shutdown();
        }
    }

    let server = crate::shared().await?;
    let _starting = STARTING.lock().await;
    if let Some(controller) = SHARED.get() {
        return Some(controller);
    }
    match SnapshotController::start(server).await {
        Ok(Some(controller)) => {
            // SAFETY: registers a function with no arguments that touches
            // only the static above; statics are never dropped.
            unsafe { libc::atexit(stop_shared) };
            loud("iar-apiserver: the CSI snapshot-controller is running");
            Some(SHARED.get_or_init(|| controller))
        }
        Ok(None) => {
            skip_or_fail(
                "a VolumeSnapshot test: `go` is not on PATH, so the snapshot-controller \
                 cannot be built",
            );
            None
        }
        Err(e) => panic!("the snapshot-controller did not start: {e}"),
    }
}
