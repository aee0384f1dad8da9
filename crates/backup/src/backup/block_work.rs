//! What a block does around its item actions: pre hooks for each pod
//! before, then the pod volume backups it decided, and, once *this block's*
//! volume backups have ended, post hooks. The pass calls [`BlockWork::pre`]
//! and [`BlockWork::start_volumes`] on its worker thread; the wait for the
//! volumes and the post hooks run as a task on the async runtime, so a
//! block that waits for its volumes holds no worker.

use crate::backup::hooks::{
    BackupHooks, DEFAULT_MAX_TIMEOUT, HookPhase, HookRecord, HookRunner, HookTarget, Verdict,
    cap_timeouts, post_hooks_allowed, run_hooks, verdict,
};
use crate::backup::volume_policy::{Claim, ResourcePolicies, VolumeAction, decide_pod_volumes};
use crate::backup::volumes::{VolumeBackup, VolumeBackupper, VolumeRequest};
use iar_core::item::{Item, ItemRef};
use iar_core::store::{BackupFile, BackupStore};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
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
    /// Where the hook ledger is written; `None` keeps no ledger (tests).
    pub ledger_store: Option<BackupStore>,
    /// The backup's uid ([`BlockWork::with_uid`]): what its post hooks'
    /// claims are keyed by.
    pub backup_key: String,
    /// The machine's claims on post hooks ([`BlockWork::with_uid`]).
    claims: Arc<PostClaims>,
    /// Asked before a block's post hooks run: whether this machine still
    /// drives the backup ([`BlockWork::with_driver_check`]).
    driver_check: Option<DriverCheck>,
    /// `--max-hook-timeout`: no hook runs longer, whatever its annotation
    /// or spec asks (see [`cap_timeouts`]).
    pub max_hook_timeout: Duration,
    /// Stamps hook runs (the phase machine's clock).
    pub clock: Arc<dyn iar_core::clock::Clock>,
    /// Run by the backup's deletion ([`BlockWork::for_deletion`]): its
    /// owed unfreezes run although the backup is `Deleting`.
    deletion: bool,
    state: Mutex<State>,
    /// The hook ledger as last written. An async lock held across its PUT:
    /// each write must carry every entry before it, so writes are serial.
    ledger: tokio::sync::Mutex<Vec<LedgerEntry>>,
    /// Told each time a block's volume wait and post hooks end.
    tail_ended: tokio::sync::Notify,
    /// Set once the item pass that owns this work started every block
    /// ([`BlockWork::all_blocks_started`]).
    all_started: std::sync::atomic::AtomicBool,
}

/// One pod's hooks of one phase in the hook ledger
/// (`backups/<b>/<b>-hooks.json.gz`). A post entry is written `started`
/// before its hooks run and again when they end, so a resumed backup knows
/// a post hook that may have run (and never runs it again) from one that
/// never started.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntry {
    pub pod: ItemRef,
    /// `pre` or `post`.
    pub phase: String,
    /// `started`, `succeeded`, `continued` (a hook failed or timed out
    /// with `onError: Continue`: the pod's post hooks are still owed, as in
    /// Velero), `unknown` (pre hooks that failed the block without saying
    /// how they ended: their unfreeze is owed), `failed` (a failure that
    /// fails the block) or `skipped`.
    pub state: String,
}

/// Whether a pre entry's state leaves the pod's post hooks owed: its pre
/// hooks succeeded, or failed only with `onError: Continue` (see
/// [`post_hooks_allowed`]), or started and never said how they ended (a
/// freeze that may have happened is undone rather than left). A ledger
/// written before `continued` existed says `failed` for those: their post
/// hooks are not owed, as then.
fn owes_post(pre: &LedgerEntry) -> bool {
    pre.phase == "pre"
        && matches!(
            pre.state.as_str(),
            "succeeded" | "continued" | "started" | "unknown"
        )
}

impl LedgerEntry {
    fn of(pod: &ItemRef, phase: &str, records: &[HookRecord]) -> LedgerEntry {
        use crate::backup::hooks::HookStatus;
        let state = if records.iter().all(|r| r.status == HookStatus::Succeeded) {
            "succeeded"
        } else if records
            .iter()
            .any(|r| matches!(r.status, HookStatus::Skipped { .. }))
        {
            "skipped"
        } else if post_hooks_allowed(records) {
            "continued"
        } else if phase == "pre" && crate::backup::hooks::outcome_unknown(records) {
            "unknown"
        } else {
            "failed"
        };
        LedgerEntry {
            pod: pod.clone(),
            phase: phase.into(),
            state: state.into(),
        }
    }
}

#[derive(Default)]
struct State {
    records: Vec<HookRecord>,
    /// Problems that are not a hook run: hook definitions that do not parse,
    /// volumes chosen for a backup that cannot be done here.
    warnings: Vec<(String, String)>,
    /// `(namespace, message)`: what fails the backup partially (pre hooks
    /// not run because the ledger could not say they would).
    errors: Vec<(String, String)>,
    /// Blocks whose volume wait and post hooks still run.
    pending_tails: usize,
    /// What stops them ([`BlockWork::abort`]).
    aborts: Vec<tokio::task::AbortHandle>,
    /// The volume backups of the blocks whose tails ended.
    volumes: Vec<VolumeBackup>,
    watchers: Vec<watch::Receiver<VolumeBackup>>,
}

/// Counts a block's tail as ended when dropped, whether it returned or
/// panicked, so [`BlockWork::finish`] never waits for a tail that is gone.
struct TailEnded {
    work: Arc<BlockWork>,
    volumes: Option<Vec<VolumeBackup>>,
}

impl TailEnded {
    fn returned(&mut self, volumes: Vec<VolumeBackup>) {
        self.volumes = Some(volumes);
    }
}

impl Drop for TailEnded {
    fn drop(&mut self) {
        {
            let mut state = self.work.state();
            state.pending_tails -= 1;
            match self.volumes.take() {
                Some(v) => state.volumes.extend(v),
                // An error: its volumes' ends are not known (they are
                // failed in the report, from their last progress).
                None => state.errors.push((
                    String::new(),
                    "a block's volume wait or post hooks ended before they finished (a panic, or the runtime's shutdown)".into(),
                )),
            }
        }
        self.work.tail_ended.notify_waiters();
    }
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
    /// `(namespace, message)`: post hooks that may not have run (an
    /// unfreeze owed and not known to be done), which fail the backup
    /// partially rather than pass as a warning.
    pub errors: Vec<(String, String)>,
}

/// Whether the machine still drives the backup: `Err(why)` when another
/// took it over (or that cannot be told).
pub type DriverCheck = Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>
        + Send
        + Sync,
>;

/// Post hooks started by one phase machine (one per process in a
/// deployment), by (backup uid, pod): each pod's run at most once per
/// backup there, whichever path asks (the block's own wait, or a resume of
/// the backup by the same machine after a failed step), even when the
/// ledger's "started" could not be written (a store unreachable for the
/// moment). Across machines the ledger decides, and a machine that loses
/// a backup's lease stops its block work. A few bytes per pod and backup,
/// never cleared, as `maxCreatesPerBackup`'s count.
#[derive(Default)]
pub struct PostClaims(Mutex<std::collections::HashSet<(String, ItemRef)>>);

impl PostClaims {
    /// Claims `pod`'s post hooks of backup `uid`: false when they were
    /// claimed before. Work without a backup uid (a test's bare block)
    /// claims nothing.
    fn claim(&self, uid: &str, pod: &ItemRef) -> bool {
        if uid.is_empty() {
            return true;
        }
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((uid.to_string(), pod.clone()))
    }

    /// Gives back a claim whose hooks were not run and not claimed in the
    /// store, so that whoever runs the owed unfreezes next (the end of
    /// the blocks, a resume, the deletion) may run them.
    fn release(&self, uid: &str, pod: &ItemRef) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(uid.to_string(), pod.clone()));
    }
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
            ledger_store: None,
            backup_key: String::new(),
            claims: Arc::default(),
            driver_check: None,
            max_hook_timeout: DEFAULT_MAX_TIMEOUT,
            clock: iar_core::clock::RealClock::shared(),
            deletion: false,
            state: Mutex::new(State::default()),
            ledger: tokio::sync::Mutex::new(Vec::new()),
            tail_ended: tokio::sync::Notify::new(),
            all_started: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The backup's uid, which keys its post hooks' claims in `claims`,
    /// the machine's (every backup the phase machine runs has one).
    pub fn with_uid(mut self, uid: &str, claims: Arc<PostClaims>) -> Self {
        self.backup_key = uid.to_string();
        self.claims = claims;
        self
    }

    /// Asks `check` before running a block's post hooks: a machine whose
    /// backup was taken over (its lease expired while it still waited on
    /// the volume) must not unfreeze beside the one that took it, which
    /// runs them from the ledger (the campaign saw both, 9 ms apart).
    pub fn with_driver_check(mut self, check: DriverCheck) -> Self {
        self.driver_check = Some(check);
        self
    }

    /// The work of the backup's deletion, which runs the unfreezes the
    /// backup still owes before its ledger and claims go: a backup marked
    /// `Deleting` runs no other hooks (see [`BlockWork::post_once`]).
    pub fn for_deletion(mut self) -> Self {
        self.deletion = true;
        self
    }

    /// Keeps the hook ledger in `store`.
    pub fn with_ledger(mut self, store: BackupStore) -> Self {
        self.ledger_store = Some(store);
        self
    }

    /// Stamps hook runs with `clock` (the phase machine's).
    pub fn with_clock(mut self, clock: Arc<dyn iar_core::clock::Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Caps every hook's timeout at `max` (`--max-hook-timeout`).
    pub fn with_max_hook_timeout(mut self, max: Duration) -> Self {
        self.max_hook_timeout = max;
        self
    }

    /// Sets `entry` (replacing the pod's entry of the same phase) and
    /// writes the whole ledger. A failed write is a warning: the hooks
    /// themselves went as recorded.
    async fn ledger(&self, entry: LedgerEntry) {
        if let Err(e) = self.try_ledger(entry).await {
            self.state()
                .warnings
                .push((String::new(), format!("hook ledger: {e}")));
        }
    }

    /// Sets `entry` and writes the whole ledger, saying whether it could.
    async fn try_ledger(&self, entry: LedgerEntry) -> Result<(), iar_core::store::StoreError> {
        let Some(store) = &self.ledger_store else {
            return Ok(());
        };
        let mut ledger = self.ledger.lock().await;
        match ledger
            .iter_mut()
            .find(|e| e.pod == entry.pod && e.phase == entry.phase)
        {
            Some(e) => *e = entry,
            None => ledger.push(entry),
        }
        store
            .put_json(&self.backup, BackupFile::HookLedger, &*ledger)
            .await
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
                    format!("{phase:?} hooks of pod {}: not run: {e}", pod.id.path()),
                ));
                Vec::new()
            }
        }
    }

    /// Whether `pod` has hooks of `phase` (quietly: an annotation that
    /// does not parse says so where the hooks run).
    pub fn has_hooks(&self, pod: &Item, phase: HookPhase) -> bool {
        self.hooks.for_pod(pod, phase).is_ok_and(|h| !h.is_empty())
    }

    /// The hooks about to run for `pod` in `phase`, each timeout capped at
    /// `max_hook_timeout`, with a warning for each one clamped.
    fn runnable_hooks(
        &self,
        pod: &Item,
        phase: HookPhase,
    ) -> Vec<crate::backup::hooks::ResolvedHook> {
        let mut hooks = self.hooks_for(pod, phase);
        let clamped = cap_timeouts(&pod.id, &mut hooks, self.max_hook_timeout);
        let ns = &pod.id.namespace;
        self.state()
            .warnings
            .extend(clamped.into_iter().map(|w| (ns.clone(), w)));
        hooks
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
            let hooks = self.runnable_hooks(pod, HookPhase::Pre);
            // A pod with post hooks is in the ledger even without pre
            // hooks: after a restart, its post hooks are known to be owed.
            let has_post = !self.hooks_for(pod, HookPhase::Post).is_empty();
            let pre = self.runtime.block_on(async {
                // An earlier attempt of this backup (a first pass that
                // failed after its pre hooks, retried by another replica)
                // froze the pod already: not again. Its post hooks are owed
                // as that attempt's entry says.
                let earlier = self
                    .ledger
                    .lock()
                    .await
                    .iter()
                    .find(|e| e.pod == pod.id && e.phase == "pre")
                    .cloned();
                if let Some(earlier) = earlier {
                    return self.ran_before(pod, &hooks, &earlier);
                }
                // A freeze is claimed in the store, once across machines
                // (a first pass retried elsewhere may not see the ledger
                // entry of the one before: the campaign's seed 1029 froze
                // a pod twice), then recorded as started before it runs:
                // a process that takes the backup over then owes its
                // unfreeze. One that cannot be claimed or recorded is not
                // run.
                if !hooks.is_empty() {
                    match self.claim_pre(&pod.id).await {
                        Ok(true) => {}
                        Ok(false) => {
                            let earlier = started(&pod.id, "pre");
                            return self.ran_before(pod, &hooks, &earlier);
                        }
                        Err(e) => return self.unrecorded(pod, &hooks, &e),
                    }
                    if let Err(e) = self.try_ledger(started(&pod.id, "pre")).await {
                        return self.unrecorded(pod, &hooks, &e);
                    }
                }
                let pre = run_hooks(self.runner.as_ref(), &target, &hooks, &*self.clock).await;
                if !pre.is_empty() || has_post {
                    self.ledger(LedgerEntry::of(&pod.id, "pre", &pre)).await;
                }
                pre
            });
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

    /// Whether the backup is still in the store and not being deleted (a
    /// store that cannot answer leaves it so: the claim decides). No object
    /// but a hook ledger is a backup whose first pass never wrote its
    /// object (its store out of reach after the pre hooks ran: the
    /// campaign's seed 3107 left a pod frozen so); a deletion removes the
    /// ledger with the object.
    async fn still_stored(&self, store: &BackupStore) -> bool {
        match store
            .get_json::<serde_json::Value>(&self.backup, BackupFile::Metadata)
            .await
        {
            Ok(Some(o)) => o["status"]["phase"] != "Deleting",
            Ok(None) => !matches!(
                store
                    .get_json::<serde_json::Value>(&self.backup, BackupFile::HookLedger)
                    .await,
                Ok(None)
            ),
            Err(_) => true,
        }
    }

    /// Claims `pod`'s pre hooks in the store for this run (`Ok(true)`), or
    /// finds them another's (`Ok(false)`: an earlier attempt of the backup
    /// ran them, or runs them). Without a store, this run's.
    async fn claim_pre(&self, pod: &ItemRef) -> Result<bool, iar_core::store::StoreError> {
        let Some(store) = &self.ledger_store else {
            return Ok(true);
        };
        let what = ["pre", pod.namespace.as_str(), pod.name.as_str()];
        let token = claim_token(store.holder());
        let claim = serde_json::json!({"holder": store.holder(), "token": token});
        Ok(claim_hooks(store, &self.backup, &what, &claim, &token)
            .await?
            .is_none())
    }

    /// Pre hooks an earlier attempt of the backup ran (its ledger entry):
    /// not run again, said as a warning; none recorded when the pod's post
    /// hooks are owed, skipped ones when not.
    fn ran_before(
        &self,
        pod: &Item,
        hooks: &[crate::backup::hooks::ResolvedHook],
        earlier: &LedgerEntry,
    ) -> Vec<HookRecord> {
        let reason = format!(
            "an earlier attempt of this backup ran them ({})",
            earlier.state
        );
        self.state().warnings.push((
            pod.id.namespace.clone(),
            format!(
                "pre hooks of pod {}: not run again: {reason}",
                pod.id.path()
            ),
        ));
        if owes_post(earlier) {
            return Vec::new();
        }
        self.skipped(pod, hooks, &reason)
    }

    /// `pod`'s `hooks`, each recorded skipped for `reason`, now.
    fn skipped(
        &self,
        pod: &Item,
        hooks: &[crate::backup::hooks::ResolvedHook],
        reason: &str,
    ) -> Vec<HookRecord> {
        let now = self.clock.system_now();
        hooks
            .iter()
            .map(|hook| HookRecord {
                pod: pod.id.clone(),
                hook: hook.clone(),
                status: crate::backup::hooks::HookStatus::Skipped {
                    reason: reason.to_string(),
                },
                output: Default::default(),
                started: Some(now),
                ended: Some(now),
            })
            .collect()
    }

    /// The hook ledger as this work has written it.
    pub async fn ledger_entries(&self) -> Vec<LedgerEntry> {
        self.ledger.lock().await.clone()
    }

    /// Carries on the hook ledger an earlier attempt of the backup wrote:
    /// each write holds every entry, and its pre entries are not run again.
    pub async fn continue_ledger(&self, entries: Vec<LedgerEntry>) {
        *self.ledger.lock().await = entries;
    }

    /// Pre hooks not run because the ledger could not record them as
    /// started: each skipped (so the pod's post hooks are not owed), and
    /// an error of the backup (its volumes are backed up unfrozen).
    fn unrecorded(
        &self,
        pod: &Item,
        hooks: &[crate::backup::hooks::ResolvedHook],
        e: &iar_core::store::StoreError,
    ) -> Vec<HookRecord> {
        let reason = format!("the hook ledger could not record them as started: {e}");
        self.state().errors.push((
            pod.id.namespace.clone(),
            format!(
                "pre hooks of pod {}: not run: {reason} (rule: hook-ledger)",
                pod.id.path()
            ),
        ));
        self.skipped(pod, hooks, &reason)
    }

    /// Says that the item pass owning this work has started every block:
    /// only then is its report the backup's (a pass cut short, or a
    /// resume that follows records, holds part of it at most).
    pub fn all_blocks_started(&self) {
        self.all_started
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether [`BlockWork::all_blocks_started`] was said.
    pub fn has_all_blocks(&self) -> bool {
        self.all_started.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The file-system volume backups `items` call for: each pod's
    /// volumes that its annotations, the volume policy and the default
    /// choose for one, as [`BlockWork::start_volumes`] decides them (the
    /// claims and volumes looked up among `items`). `(pod, volume)`.
    pub fn chosen_fs_volumes(&self, items: &[Item]) -> Vec<(ItemRef, String)> {
        let mut out = Vec::new();
        for pod in items
            .iter()
            .filter(|i| i.id.group.is_empty() && i.id.resource == "pods")
        {
            let claim = |name: &str| claim_in(items, &pod.id.namespace, name);
            for d in decide_pod_volumes(
                pod,
                &claim,
                self.policies.as_ref(),
                self.default_volumes_to_fs_backup,
            ) {
                if d.action == VolumeAction::FsBackup {
                    out.push((pod.id.clone(), d.volume));
                }
            }
        }
        out
    }

    /// After the block's items: decides each pod's volumes, starts the
    /// file-system backups (unless the block failed), and leaves a task on
    /// the runtime that waits for them and then runs the post hooks of the
    /// pods whose pre hooks allow them ([`post_hooks_allowed`]: none failed
    /// the block, none was skipped). Returns at once.
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
                                d.volume, p.pod.id.path(), d.reason
                            ),
                        ));
                        continue;
                    };
                    let handle = self.runtime.block_on(backupper.start(VolumeRequest {
                        backup: self.backup.clone(),
                        backup_uid: String::new(),
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
        // A block without pods has no volumes and no hooks to wait for:
        // no task (a backup of 50,000 ConfigMaps would keep 50,000).
        if pods.is_empty() {
            return;
        }
        self.state().pending_tails += 1;
        let mut ended = TailEnded {
            work: self.clone(),
            volumes: None,
        };
        let tail = self.runtime.spawn(async move {
            let work = ended.work.clone();
            let mut volumes = Vec::new();
            for (p, handles) in pods {
                for h in &handles {
                    volumes.push(h.finished().await);
                }
                // Pre hooks that may have frozen the pod without saying so
                // (the fault campaign's seed 1201: a freeze run while its
                // exec's answer was cut, left in place) owe their unfreeze,
                // though they failed the block.
                if post_hooks_allowed(&p.pre) || crate::backup::hooks::outcome_unknown(&p.pre) {
                    let hooks = work.runnable_hooks(&p.pod, HookPhase::Post);
                    if hooks.is_empty() {
                        continue;
                    }
                    if let Some(check) = &work.driver_check
                        && let Err(why) = check().await
                    {
                        // Still owed: whoever records the blocks runs
                        // them ([`BlockWork::ledger_entries`]), this machine
                        // too if it drives the backup again (the fault
                        // campaign's seed 1309 left the freeze when it did).
                        work.state().warnings.push((
                            p.pod.id.namespace.clone(),
                            format!(
                                "post hooks of pod {}: not run by this block: {why}; whoever drives the backup runs them from the hook ledger",
                                p.pod.id.path()
                            ),
                        ));
                        continue;
                    }
                    if !work.claims.claim(&work.backup_key, &p.pod.id) {
                        continue;
                    }
                    // Not stopped with the block's wait: once claimed, an
                    // unfreeze runs to its end and says so, even if this
                    // machine loses the backup meanwhile (whoever takes it
                    // sees the claim and waits for that end).
                    let (w, pod) = (work.clone(), p.pod.id.clone());
                    let run = work.runtime.spawn(async move {
                        match w.post_once(&pod, &p.target, &hooks).await {
                            Ok(post) => w.state().records.extend(post),
                            Err(m) => w.state().errors.push((pod.namespace.clone(), m)),
                        }
                    });
                    let _ = run.await;
                }
            }
            ended.returned(volumes);
        });
        self.state().aborts.push(tail.abort_handle());
    }

    /// Stops every block's volume wait and post hooks, as the end of the
    /// process would: for a machine that stops driving its backups.
    pub fn abort(&self) {
        for tail in std::mem::take(&mut self.state().aborts) {
            tail.abort();
        }
    }

    /// The latest state of every volume backup started so far.
    pub fn progress(&self) -> Vec<VolumeBackup> {
        self.state()
            .watchers
            .iter()
            .map(|w| w.borrow().clone())
            .collect()
    }

    /// Waits for every block's volumes and post hooks (call after the
    /// pass), and reports all they did. It may be called again, and by
    /// whoever holds the work: a step that failed while it waited leaves
    /// the blocks running, and a resume of the backup in this process
    /// waits for them rather than start again from the ledger (which may
    /// lack what a failed write did not record).
    pub async fn finish(&self) -> BlockReport {
        loop {
            let ended = self.tail_ended.notified();
            if self.state().pending_tails == 0 {
                break;
            }
            ended.await;
        }
        let state = self.state();
        BlockReport {
            hooks: state.records.clone(),
            volumes: state.volumes.clone(),
            warnings: state.warnings.clone(),
            errors: state.errors.clone(),
        }
    }
}

impl BlockWork {
    /// After a restart of a backup whose items were all written: follows
    /// each unfinished volume backup again through the backupper (its
    /// request outlived the process that made it), then runs, once, the
    /// post hooks the ledger says are owed ([`BlockWork::run_owed_posts`]).
    /// `pods` are the live pods the owed hooks are resolved on.
    pub async fn resume(
        &self,
        ledger: &[LedgerEntry],
        volumes: Vec<VolumeBackup>,
        pods: &[Item],
    ) -> BlockReport {
        use crate::backup::volumes::VolumePhase;
        // Carry on the ledger as it was: each write holds every entry.
        *self.ledger.lock().await = ledger.to_vec();
        let backupper = self.backupper.clone();
        let follow = volumes.into_iter().map(|v| {
            let backupper = backupper.clone();
            async move {
                if v.phase.is_terminal() {
                    return v;
                }
                let Some(backupper) = backupper else {
                    let mut v = v;
                    v.phase = VolumePhase::Failed;
                    v.error = Some("interrupted by restart".into());
                    return v;
                };
                let request = VolumeRequest {
                    backup: v.backup.clone(),
                    backup_uid: String::new(),
                    pod: ItemRef::new("", "pods", v.pod_namespace.clone(), v.pod_name.clone()),
                    volume: v.volume.clone(),
                    pvc: v.pvc.clone(),
                };
                backupper.start(request).await.finished().await
            }
        });
        let volumes = futures::future::join_all(follow).await;
        let mut report = BlockReport {
            volumes,
            ..BlockReport::default()
        };
        self.run_owed_posts(ledger, pods, &mut report).await;
        let mut state = self.state();
        report.warnings.append(&mut state.warnings);
        report.errors.append(&mut state.errors);
        report
    }

    /// Runs, once, the post hooks `ledger` says are owed and no run has
    /// ended: a pod whose pre hooks succeeded (or failed only with
    /// `onError: Continue`, or started and never said how they ended) and
    /// whose post hooks have no end recorded. `pods` are the live pods the
    /// owed hooks are resolved on; one that is gone is a warning. Each
    /// goes through [`BlockWork::post_once`]: a run another process
    /// claimed is waited for, never repeated.
    pub async fn run_owed_posts(
        &self,
        ledger: &[LedgerEntry],
        pods: &[Item],
        report: &mut BlockReport,
    ) {
        for pod_id in BlockWork::owed_post_hooks(ledger) {
            let Some(pod) = pods.iter().find(|p| p.id == pod_id) else {
                report.warnings.push((
                    pod_id.namespace.clone(),
                    format!(
                        "post hooks of pod {}: not run: the pod is gone",
                        pod_id.path()
                    ),
                ));
                continue;
            };
            let hooks = self.runnable_hooks(pod, HookPhase::Post);
            if hooks.is_empty() {
                continue;
            }
            // Claimed here before: with a store, its claim there says how
            // that run ended, and `post_once` waits for that end or runs
            // them once more (a run of this process stopped between its
            // claim and its exec left the freeze: the fault campaign's
            // seed 4866). Without one, this process's claim is all there is.
            if !self.claims.claim(&self.backup_key, &pod.id) && self.ledger_store.is_none() {
                report.errors.push((
                    pod.id.namespace.clone(),
                    format!(
                        "post hooks of pod {}: already started here (their ledger entry could not be written, or the run was stopped); not run again, so they may not have run (rule: hook-ledger)",
                        pod.id.path()
                    ),
                ));
                continue;
            }
            let target = HookTarget::for_pod(pod, self.volume_data.as_deref());
            match self.post_once(&pod.id, &target, &hooks).await {
                Ok(post) => report.hooks.extend(post),
                Err(m) => report.errors.push((pod.id.namespace.clone(), m)),
            }
        }
        // What the runs said on the way (a second run, another's end).
        let mut state = self.state();
        report.warnings.append(&mut state.warnings);
        report.errors.append(&mut state.errors);
    }

    /// Hooks run so far and how many of them failed (skipped ones are
    /// neither), as `status.hookStatus` counts them; `None` before any.
    pub fn hook_counts(&self) -> Option<crate::backup::object::HookStatusCounts> {
        use crate::backup::hooks::HookStatus;
        let state = self.state();
        let ran: Vec<_> = state
            .records
            .iter()
            .filter(|r| !matches!(r.status, HookStatus::Skipped { .. }))
            .collect();
        (!ran.is_empty()).then(|| crate::backup::object::HookStatusCounts {
            hooks_attempted: ran.len() as u64,
            hooks_failed: ran
                .iter()
                .filter(|r| r.status != HookStatus::Succeeded)
                .count() as u64,
        })
    }

    /// The pods whose post hooks [`BlockWork::resume`] would run: owed,
    /// and not ended (a run that only started may still be going on
    /// elsewhere: its claim says).
    pub fn owed_post_hooks(ledger: &[LedgerEntry]) -> Vec<ItemRef> {
        ledger
            .iter()
            .filter(|e| owes_post(e))
            .filter(|pre| {
                !ledger
                    .iter()
                    .any(|e| e.phase == "post" && e.pod == pre.pod && e.state != "started")
            })
            .map(|e| e.pod.clone())
            .collect()
    }
}

pub(super) fn started(pod: &ItemRef, phase: &str) -> LedgerEntry {
    LedgerEntry {
        pod: pod.clone(),
        phase: phase.into(),
        state: "started".into(),
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
    let pv_name = pvc.and_then(|c| c.value().pointer("/spec/volumeName")?.as_str());
    let pv = pv_name.and_then(|pv| {
        items.iter().find(|i| {
            i.id.group.is_empty() && i.id.resource == "persistentvolumes" && i.id.name == pv
        })
    });
    Claim {
        pvc: pvc.map(|i| i.value().clone()),
        pv: pv.map(|i| i.value().clone()),
    }
}

/// What a restart found of a backup's unfinished volume backups: each
/// failed "interrupted by restart" (the process that followed it is gone
/// and the backup cannot go on), with the message that says so. The post
/// hooks owed are run by [`BlockWork::run_owed_posts`]: a freeze is undone
/// whatever becomes of the backup.
pub fn interrupted(
    volumes: &mut [VolumeBackup],
    now: std::time::SystemTime,
) -> Vec<(String, String)> {
    use crate::backup::volumes::VolumePhase;
    let mut out = Vec::new();
    for v in volumes.iter_mut().filter(|v| !v.phase.is_terminal()) {
        v.phase = VolumePhase::Failed;
        v.error = Some("interrupted by restart".into());
        v.completed = Some(now);
        out.push((
            v.pod_namespace.clone(),
            format!("volume backup {}: interrupted by restart", v.describe()),
        ));
    }
    out
}

mod post_once;
pub use post_once::post_settled;
use post_once::{claim_hooks, claim_token};

#[cfg(test)]
mod rerun_tests;
#[cfg(test)]
mod tests;
