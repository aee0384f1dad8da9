//! What the phases' unit tests build a phase from: a phase machine on a
//! local store in a tempdir, a cluster and a [`ManualClock`]. A test builds
//! the one phase it drives with the machine's own builders, and steps the
//! clock instead of sleeping.

use super::record::Run;
use super::resume::Resume;
use super::{BackupRequest, PhaseMachine, Settings};
use crate::backup::object::{BackupObject, BackupPhase, Results};
use iar_core::clock::{Clock, ManualClock};
use iar_core::cluster::ClusterReader;
use iar_core::store::{BackupFile, BackupStore};
use iar_plugin::plugin::Plugin;
use iar_plugin::{PluginSettings, Runtime, RuntimeConfig};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A fixed "now" for tests that pass the time themselves (2027-01-15).
pub(super) fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// A phase machine on a local store and a [`ManualClock`], owned by a
/// test; its phases are built by the machine's own builders (reached
/// through `Deref`), so a test drives exactly what a step runs.
pub(super) struct Parts {
    pub(super) _dir: tempfile::TempDir,
    pub(super) clock: Arc<ManualClock>,
    machine: PhaseMachine,
}

impl std::ops::Deref for Parts {
    type Target = PhaseMachine;

    fn deref(&self) -> &PhaseMachine {
        &self.machine
    }
}

impl Parts {
    /// No cluster, no plugins, default settings.
    pub(super) fn new() -> Parts {
        Parts::with(Arc::new(iar_core::NoCluster), Vec::new())
    }

    pub(super) fn with(cluster: Arc<dyn ClusterReader>, plugins: Vec<Plugin>) -> Parts {
        Parts::built(cluster, plugins, |m| m)
    }

    /// On `cluster`, the machine as `build` finishes it (a hook runner, a
    /// volume backupper).
    pub(super) fn with_machine(
        cluster: Arc<dyn ClusterReader>,
        build: impl FnOnce(PhaseMachine) -> PhaseMachine,
    ) -> Parts {
        Parts::built(cluster, Vec::new(), build)
    }

    fn built(
        cluster: Arc<dyn ClusterReader>,
        plugins: Vec<Plugin>,
        build: impl FnOnce(PhaseMachine) -> PhaseMachine,
    ) -> Parts {
        let dir = tempfile::tempdir().unwrap();
        let store = BackupStore::open(dir.path().to_str().unwrap()).unwrap();
        let clock = Arc::new(ManualClock::new());
        let settings = Settings {
            workers: 2,
            lease_duration: Duration::from_secs(30),
            ..Settings::default()
        };
        let machine =
            build(PhaseMachine::new(plugins, store, cluster, settings).with_clock(clock.clone()));
        Parts {
            _dir: dir,
            clock,
            machine,
        }
    }

    pub(super) fn now(&self) -> SystemTime {
        self.clock.system_now()
    }

    /// The phase for a backup found New or InProgress.
    pub(super) fn resume(&self) -> Resume<'_> {
        self.machine.interrupted()
    }

    /// A backup object in `phase`, stored, with empty results: what a
    /// process that died in that phase left (its log and operations as
    /// the test writes them).
    pub(super) async fn put_object(&self, name: &str, phase: BackupPhase) -> BackupObject {
        let mut object =
            BackupObject::new_at(name, "velero", "uid-1", serde_json::json!({}), self.now());
        object.status.phase = phase;
        self.store
            .put_json(name, BackupFile::Metadata, &object)
            .await
            .unwrap();
        object
    }

    /// The stored backup, loaded as a step loads it.
    pub(super) async fn load(&self, name: &str) -> Run {
        let object: BackupObject = self
            .store
            .get_json(name, BackupFile::Metadata)
            .await
            .unwrap()
            .expect("stored");
        self.loader().run(name, object).await.unwrap()
    }

    pub(super) async fn stored(&self, name: &str) -> BackupObject {
        self.store
            .get_json(name, BackupFile::Metadata)
            .await
            .unwrap()
            .expect("stored")
    }

    pub(super) async fn results(&self, name: &str) -> Results {
        self.store
            .get_json(name, BackupFile::Results)
            .await
            .unwrap()
            .unwrap_or_default()
    }
}

/// A request for `name` over the manifests in `sources`.
pub(super) fn request(name: &str, sources: Vec<std::path::PathBuf>) -> BackupRequest {
    BackupRequest {
        labels: Default::default(),
        name: name.into(),
        namespace: "velero".into(),
        spec: serde_json::json!({}),
        sources,
        annotations: Default::default(),
    }
}

/// The hostile test guest, on a runtime without a compile cache: its
/// operations stay in progress (it never says they completed) and a cancel
/// is logged.
pub(super) fn hostile() -> Plugin {
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .unwrap();
    Plugin::from_file(
        &runtime,
        iar_tests::artifacts::HOSTILE.as_ref(),
        PluginSettings::default(),
    )
    .unwrap()
}
