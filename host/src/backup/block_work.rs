//! What a block does around its item actions: pre hooks for each pod
//! before, then the pod volume backups it decided, and, once *this block's*
//! volume backups have ended, post hooks. The pass calls [`BlockWork::pre`]
//! and [`BlockWork::start_volumes`] on its worker thread; the wait for the
//! volumes and the post hooks run as a task on the async runtime, so a
//! block that waits for its volumes holds no worker.

use crate::backup::hooks::{
    BackupHooks, HookPhase, HookRecord, HookRunner, HookTarget, Verdict, post_hooks_allowed,
    run_hooks, verdict,
};
use crate::backup::volume_policy::{Claim, ResourcePolicies, VolumeAction, decide_pod_volumes};
use crate::backup::volumes::{VolumeBackup, VolumeBackupper, VolumeRequest};
use crate::item::Item;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// The hooks and volume backups of one backup's blocks.
pub struct BlockWork {
    pub backup: String,
    pub hooks: BackupHooks,
    pub runner: Arc<dyn HookRunner>,
    /// `None` without `--volume-data`: volumes chosen for a file-system
    /// backup are reported, not backed up.
    pub backupper: Option<Arc<dyn VolumeBackupper>>,
    pub volume_data: Option<PathBuf>,
    pub policies: Option<ResourcePolicies>,
    pub default_volumes_to_fs_backup: bool,
    pub runtime: tokio::runtime::Handle,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    records: Vec<HookRecord>,
    /// Problems that are not a hook run: hook definitions that do not parse,
    /// volumes chosen for a backup that cannot be done here.
    warnings: Vec<(String, String)>,
    tails: Vec<tokio::task::JoinHandle<Vec<VolumeBackup>>>,
    watchers: Vec<watch::Receiver<VolumeBackup>>,
}

/// A pod of a block, after its pre hooks.
pub struct PodPre {
    pod: Item,
    target: HookTarget,
    pre: Vec<HookRecord>,
}

/// A block after its pre hooks: `failed` holds the `onError: Fail`
/// outcomes that fail the whole block.
pub struct BlockPre {
    pods: Vec<PodPre>,
    pub failed: Vec<String>,
}

/// Everything the blocks did, once every block has ended.
#[derive(Debug, Default)]
pub struct BlockReport {
    pub hooks: Vec<HookRecord>,
    pub volumes: Vec<VolumeBackup>,
    /// `(namespace, message)`.
    pub warnings: Vec<(String, String)>,
}

impl BlockWork {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        backup: String,
        hooks: BackupHooks,
        runner: Arc<dyn HookRunner>,
        backupper: Option<Arc<dyn VolumeBackupper>>,
        volume_data: Option<PathBuf>,
        policies: Option<ResourcePolicies>,
        default_volumes_to_fs_backup: bool,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        BlockWork {
            backup,
            hooks,
            runner,
            backupper,
            volume_data,
            policies,
            default_volumes_to_fs_backup,
            runtime,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn hooks_for(&self, pod: &Item, phase: HookPhase) -> Vec<crate::backup::hooks::ResolvedHook> {
        match self.hooks.for_pod(pod, phase) {
            Ok(h) => h,
            Err(e) => {
                self.state().warnings.push((
                    pod.id.namespace.clone(),
                    format!("{phase:?} hooks of pod {}: not run: {e}", pod.id),
                ));
                Vec::new()
            }
        }
    }

    /// Runs the pre hooks of every pod of the block, in order. Called on a
    /// worker thread (not a runtime thread): waits for the hook processes.
    pub fn pre(&self, items: &[Item]) -> BlockPre {
        let mut out = BlockPre {
            pods: Vec::new(),
            failed: Vec::new(),
        };
        for pod in items.iter().filter(|i| is_pod(i)) {
            let target = HookTarget::for_pod(pod, self.volume_data.as_deref());
            let hooks = self.hooks_for(pod, HookPhase::Pre);
            let pre = self
                .runtime
                .block_on(run_hooks(self.runner.as_ref(), &target, &hooks));
            out.failed
                .extend(pre.iter().filter_map(|r| match verdict(r) {
                    Verdict::BlockFailed(m) => Some(m),
                    _ => None,
                }));
            self.state().records.extend(pre.iter().cloned());
            out.pods.push(PodPre {
                pod: pod.clone(),
                target,
                pre,
            });
        }
        out
    }

    /// After the block's items: decides each pod's volumes, starts the
    /// file-system backups (unless the block failed), and leaves a task on
    /// the runtime that waits for them and then runs the post hooks of the
    /// pods whose pre hooks all succeeded. Returns at once.
    pub fn start_volumes(self: &Arc<Self>, block: BlockPre, items: &[Item]) {
        let mut pods = Vec::new();
        for p in block.pods {
            let mut handles = Vec::new();
            if block.failed.is_empty() {
                let claim = |name: &str| claim_in(items, &p.pod.id.namespace, name);
                for d in decide_pod_volumes(
                    &p.pod,
                    &claim,
                    self.policies.as_ref(),
                    self.default_volumes_to_fs_backup,
                ) {
                    if d.action != VolumeAction::FsBackup {
                        continue;
                    }
                    let Some(backupper) = &self.backupper else {
                        self.state().warnings.push((
                            p.pod.id.namespace.clone(),
                            format!(
                                "volume {} of pod {}: chosen for a file-system backup ({}) but no --volume-data was given; not backed up",
                                d.volume, p.pod.id, d.reason
                            ),
                        ));
                        continue;
                    };
                    let handle = self.runtime.block_on(backupper.start(VolumeRequest {
                        backup: self.backup.clone(),
                        pod: p.pod.id.clone(),
                        volume: d.volume,
                        pvc: d.pvc,
                    }));
                    self.state().watchers.push(handle.watch());
                    handles.push(handle);
                }
            }
            pods.push((p, handles));
        }
        let work = self.clone();
        let tail = self.runtime.spawn(async move {
            let mut volumes = Vec::new();
            for (p, handles) in pods {
                for h in &handles {
                    volumes.push(h.finished().await);
                }
                if post_hooks_allowed(&p.pre) {
                    let hooks = work.hooks_for(&p.pod, HookPhase::Post);
                    let post = run_hooks(work.runner.as_ref(), &p.target, &hooks).await;
                    work.state().records.extend(post);
                }
            }
            volumes
        });
        self.state().tails.push(tail);
    }

    /// The latest state of every volume backup started so far.
    pub fn progress(&self) -> Vec<VolumeBackup> {
        self.state()
            .watchers
            .iter()
            .map(|w| w.borrow().clone())
            .collect()
    }

    /// Waits for every block's volumes and post hooks (call after the pass).
    pub async fn finish(&self) -> BlockReport {
        let tails = std::mem::take(&mut self.state().tails);
        let mut report = BlockReport::default();
        for t in tails {
            match t.await {
                Ok(v) => report.volumes.extend(v),
                Err(e) => report.warnings.push((
                    String::new(),
                    format!("a block's volume wait or post hooks panicked: {e}"),
                )),
            }
        }
        let mut state = self.state();
        report.hooks = std::mem::take(&mut state.records);
        report.warnings.append(&mut state.warnings);
        report
    }
}

fn is_pod(i: &Item) -> bool {
    i.id.group.is_empty() && i.id.resource == "pods"
}

/// A PVC volume's claim and bound PV, from the block's items.
fn claim_in(items: &[Item], namespace: &str, name: &str) -> Claim {
    let pvc = items.iter().find(|i| {
        i.id.group.is_empty()
            && i.id.resource == "persistentvolumeclaims"
            && i.id.namespace == namespace
            && i.id.name == name
    });
    let pv_name = pvc.and_then(|c| c.value.pointer("/spec/volumeName")?.as_str());
    let pv = pv_name.and_then(|pv| {
        items.iter().find(|i| {
            i.id.group.is_empty() && i.id.resource == "persistentvolumes" && i.id.name == pv
        })
    });
    Claim {
        pvc: pvc.map(|i| i.value.clone()),
        pv: pv.map(|i| i.value.clone()),
    }
}
