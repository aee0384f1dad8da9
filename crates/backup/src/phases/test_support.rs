//! What the phases' unit tests build a phase from: a local store on a
//! tempdir, a cluster, a [`ManualClock`], and each part a phase may hold.
//! A test builds the one phase it drives, with these parts, and steps the
//! clock instead of sleeping.

use super::blocks::Blocks;
use super::cancel::Cancel;
use super::created::Created;
use super::dispatch::Dispatcher;
use super::finalize::Finalize;
use super::first_pass::{FirstPass, PassTurns};
use super::gc::Gc;
use super::item_pass::PassRunner;
use super::journal::Journal;
use super::leases::{Kept, Leases};
use super::load::Loader;
use super::plugin_set::PluginSets;
use super::poller::Pollers;
use super::record::{Recorder, Run};
use super::resume::Resume;
use super::waiting::Waiting;
use super::{BackupRequest, Settings};
use crate::backup::object::{BackupObject, BackupPhase, Results};
use iar_core::clock::{Clock, ManualClock};
use iar_core::cluster::ClusterReader;
use iar_core::operations::OperationsMap;
use iar_core::store::{BackupFile, BackupStore};
use iar_plugin::plugin::Plugin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A fixed "now" for tests that pass the time themselves (2027-01-15).
pub(super) fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// The parts of a phase machine, owned by a test.
pub(super) struct Parts {
    pub(super) _dir: tempfile::TempDir,
    pub(super) store: BackupStore,
    pub(super) cluster: Arc<dyn ClusterReader>,
    pub(super) clock: Arc<ManualClock>,
    /// The same clock, as the phases hold it.
    pub(super) dyn_clock: Arc<dyn Clock>,
    pub(super) journal: Arc<Journal>,
    pub(super) operations: OperationsMap,
    pub(super) plugins: PluginSets,
    pub(super) pollers: Pollers,
    pub(super) turns: PassTurns,
    pub(super) kept: Kept,
    pub(super) settings: Settings,
}

impl Parts {
    /// No cluster, no plugins, default settings.
    pub(super) fn new() -> Parts {
        Parts::with(Arc::new(iar_core::NoCluster), Vec::new())
    }

    pub(super) fn with(cluster: Arc<dyn ClusterReader>, plugins: Vec<Plugin>) -> Parts {
        let dir = tempfile::tempdir().unwrap();
        let store = BackupStore::open(dir.path().to_str().unwrap()).unwrap();
        let clock = Arc::new(ManualClock::new());
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let journal = Journal::with_clock(dyn_clock.clone());
        Parts {
            _dir: dir,
            store,
            cluster,
            clock,
            dyn_clock,
            journal: Arc::new(journal),
            operations: OperationsMap::new(),
            plugins: PluginSets::fixed(plugins),
            pollers: Pollers::default(),
            turns: PassTurns::default(),
            kept: Kept::default(),
            settings: Settings {
                workers: 2,
                lease_duration: Duration::from_secs(30),
                ..Settings::default()
            },
        }
    }

    pub(super) fn now(&self) -> SystemTime {
        self.clock.system_now()
    }

    pub(super) fn recorder(&self) -> Recorder<'_> {
        Recorder {
            store: &self.store,
            journal: &self.journal,
            status_sink: None,
            clock: &*self.clock,
        }
    }

    pub(super) fn loader(&self) -> Loader<'_> {
        Loader {
            store: &self.store,
            journal: &self.journal,
            plugins: &self.plugins,
        }
    }

    pub(super) fn leases(&self) -> Leases<'_> {
        Leases {
            store: &self.store,
            duration: self.settings.lease_duration,
            kept: &self.kept,
        }
    }

    pub(super) fn blocks(&self) -> Blocks<'_> {
        Blocks::new(
            &self.settings,
            &self.store,
            &self.cluster,
            &self.journal,
            None,
            None,
            None,
            None,
            &self.dyn_clock,
        )
    }

    pub(super) fn passes(&self) -> PassRunner<'_> {
        PassRunner {
            plugins: &self.plugins,
            cluster: &self.cluster,
            journal: &self.journal,
            workers: self.settings.workers,
            clock: &self.dyn_clock,
        }
    }

    pub(super) fn created(&self) -> Created<'_> {
        Created {
            store: &self.store,
            cluster: &self.cluster,
            journal: &self.journal,
        }
    }

    pub(super) fn first_pass(&self) -> FirstPass<'_> {
        FirstPass {
            store: &self.store,
            operations: &self.operations,
            cluster: &self.cluster,
            journal: &self.journal,
            plugins: &self.plugins,
            recorder: self.recorder(),
            blocks: self.blocks(),
            passes: self.passes(),
            created: self.created(),
            turns: &self.turns,
            clock: &*self.clock,
            concurrent_passes: self.settings.concurrent_passes,
            sync_period: self.settings.sync_period,
            operation_timeout: self.settings.operation_timeout,
            default_backup_ttl: self.settings.default_backup_ttl,
        }
    }

    pub(super) fn waiting(&self) -> Waiting<'_> {
        Waiting {
            store: &self.store,
            operations: &self.operations,
            plugins: &self.plugins,
            pollers: &self.pollers,
            cluster: &self.cluster,
            journal: &self.journal,
            recorder: self.recorder(),
            clock: &*self.clock,
            sync_period: self.settings.sync_period,
            operation_timeout: self.settings.operation_timeout,
            workers: self.settings.workers,
        }
    }

    pub(super) fn finalize(&self) -> Finalize<'_> {
        Finalize {
            store: &self.store,
            operations: &self.operations,
            cluster: &self.cluster,
            journal: &self.journal,
            passes: self.passes(),
            recorder: self.recorder(),
        }
    }

    pub(super) fn resume(&self) -> Resume<'_> {
        Resume {
            blocks: self.blocks(),
            recorder: self.recorder(),
        }
    }

    pub(super) fn dispatcher(&self) -> Dispatcher<'_> {
        Dispatcher {
            loader: self.loader(),
            recorder: self.recorder(),
            resume: self.resume(),
            waiting: self.waiting(),
            finalize: self.finalize(),
        }
    }

    pub(super) fn cancel(&self) -> Cancel<'_> {
        Cancel {
            waiting: self.waiting(),
            blocks: self.blocks(),
            created: self.created(),
            journal: &self.journal,
            recorder: self.recorder(),
        }
    }

    pub(super) fn gc(&self) -> Gc<'_> {
        Gc {
            store: &self.store,
            leases: self.leases(),
            created: self.created(),
            status_sink: None,
            clock: &*self.clock,
        }
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
        name: name.into(),
        namespace: "velero".into(),
        spec: serde_json::json!({}),
        sources,
        annotations: Default::default(),
    }
}
