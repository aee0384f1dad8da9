//! One restore, as Velero's `restoreContext.execute` runs one: the
//! backup's resources in priority order, each object filtered, reset,
//! handed to the restore actions that apply to it (in the sandbox, under
//! their grants, limits and item-change rules), mapped to its target
//! namespace and created; its namespace made first; what a plugin names
//! as additional items restored before it; operations the plugins started
//! polled to their end. Blocking: the plugins' calls are wasm calls, and
//! the cluster's writes wait on the network, so it runs on a blocking
//! thread, never on the async runtime.

use crate::builtin;
use crate::csi;
use crate::hooks::post::{self, PodExec, PodHooks};
use crate::order;
use crate::pod_volumes::{self, BackedUpVolume, PodVolumeJob, PodVolumeReport, PodVolumes};
use crate::prepare::{self, VolumePlan};
use crate::spec::{ExistingPolicy, RestoreSpec};
use iar_core::catalog::GroupResource;
use iar_core::cluster::{ClusterReader, Created};
use iar_core::item::{Item, ItemRef};
use iar_core::results::Results;
use iar_plugin::plugin::{Interface, Plugin, PluginInstance, RestoreRef};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long one create, get or replace may wait for the cluster.
const CLUSTER_WAIT: Duration = Duration::from_secs(30);
/// Between two polls of a plugin's operations or its additional items.
const POLL: Duration = Duration::from_secs(1);
/// How long a plugin's additional items may take to be ready when it
/// names no time (Velero's default, 10 minutes).
const READY_WAIT: Duration = Duration::from_secs(600);

/// What a restore needs besides its items.
pub struct Context<'a> {
    pub spec: &'a RestoreSpec,
    /// The restore as its actions see it (its name, namespace, uid, spec).
    pub restore: RestoreRef,
    pub cluster: Arc<dyn ClusterReader>,
    /// The plugins that may export a restore action, in order.
    pub plugins: &'a [Plugin],
    /// Set when whoever runs the restore no longer may (a controller that
    /// lost its leadership): the restore creates nothing more and ends at
    /// the next object or poll, with an error saying so.
    pub stop: Option<Arc<AtomicBool>>,
    /// Runs restored pods' exec hooks; `None` where there is no pod to
    /// run them in (a restore into a directory): each is a warning.
    pub exec: Option<Arc<dyn PodExec>>,
    /// The data of Velero's change-storage-class and change-image-name
    /// ConfigMaps ([`builtin::VeleroConfigs`]).
    pub configs: builtin::VeleroConfigs,
    /// Fills restored pods' volumes from their file-system backups;
    /// `None` where there is no pod to fill (a restore into a directory):
    /// each such volume is a warning.
    pub pod_volumes: Option<PodVolumes>,
}

/// The error a restore stopped by [`Context::stop`] ends with.
pub const STOPPED: &str = "the restore was stopped before its end: whoever ran it may no longer (a controller that lost its leadership); the next leader marks it Failed";

/// What a restore did.
#[derive(Debug, Default)]
pub struct Outcome {
    pub results: Results,
    /// Objects the backup holds that the restore selected.
    pub selected: usize,
    /// Objects created, or replaced under `existingResourcePolicy: update`.
    pub restored: usize,
    /// Objects that already existed and were left.
    pub existing: usize,
    /// Log lines, in order.
    pub log: Vec<String>,
    /// Velero's `hookStatus`: exec hooks that applied to restored pods,
    /// and those of them that failed or never ran.
    pub hooks_attempted: usize,
    pub hooks_failed: usize,
    /// Pod volumes filled from their file-system backups, and those that
    /// were not.
    pub pod_volumes_completed: usize,
    pub pod_volumes_failed: usize,
}

impl Outcome {
    /// Velero's phase for a restore that ran to its end.
    pub fn phase(&self) -> &'static str {
        if self.results.errors.count() == 0 {
            "Completed"
        } else {
            "PartiallyFailed"
        }
    }
}

struct Operation {
    plugin: usize,
    id: String,
    item: ItemRef,
}

struct Run<'a> {
    cx: Context<'a>,
    by_id: HashMap<String, Item>,
    done: HashSet<String>,
    namespaces: HashSet<String>,
    provisioned: HashSet<String>,
    instances: Vec<Option<PluginInstance>>,
    operations: Vec<Operation>,
    out: Outcome,
    /// Whether the stop was seen (and its error said once).
    stop_seen: bool,
    /// Restored pods' exec hooks, each pod's waiting and running on a
    /// thread of its own from its creation on, as in Velero.
    hooks: Vec<(String, std::thread::JoinHandle<post::Report>)>,
    /// The backup's pod volume backups.
    volumes: &'a [BackedUpVolume],
    /// Restored pods' volume restores, each pod's on a thread of its own.
    volume_jobs: Vec<(String, std::thread::JoinHandle<PodVolumeReport>)>,
}

/// What a pod's thread ([`Run::spawn_for_pod`]) said: log lines,
/// warnings and errors, taken into the restore's outcome.
trait PodThreadReport {
    fn said(&mut self) -> (Vec<String>, Vec<String>, Vec<String>);
}

impl PodThreadReport for post::Report {
    fn said(&mut self) -> (Vec<String>, Vec<String>, Vec<String>) {
        take_said(&mut self.log, &mut self.warnings, &mut self.errors)
    }
}

impl PodThreadReport for PodVolumeReport {
    fn said(&mut self) -> (Vec<String>, Vec<String>, Vec<String>) {
        take_said(&mut self.log, &mut self.warnings, &mut self.errors)
    }
}

fn take_said(
    log: &mut Vec<String>,
    warnings: &mut Vec<String>,
    errors: &mut Vec<String>,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    (
        std::mem::take(log),
        std::mem::take(warnings),
        std::mem::take(errors),
    )
}

/// How [`Run::create`] left an object.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placed {
    New,
    Existing,
    Failed,
}

/// Restores `items` (a backup's, from its tarball), and the data of its
/// pod volume backups `volumes` into the pods it creates.
pub fn run(cx: Context<'_>, items: Vec<Item>, volumes: &[BackedUpVolume]) -> Outcome {
    let instances = cx.plugins.iter().map(|_| None).collect();
    let mut run = Run {
        cx,
        by_id: HashMap::new(),
        done: HashSet::new(),
        namespaces: HashSet::new(),
        provisioned: HashSet::new(),
        instances,
        operations: Vec::new(),
        out: Outcome::default(),
        stop_seen: false,
        hooks: Vec::new(),
        volumes,
        volume_jobs: Vec::new(),
    };
    let mut by_resource: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for item in items {
        let key = item.id.to_string();
        by_resource
            .entry(item.id.group_resource().to_string())
            .or_default()
            .push(key.clone());
        run.by_id.insert(key, item);
    }
    let resources: BTreeSet<String> = by_resource.keys().cloned().collect();
    for gr in order::ordered(&resources) {
        let mut keys = by_resource.remove(&gr).unwrap_or_default();
        keys.sort();
        for key in keys {
            if run.stopped() {
                return run.out;
            }
            let item = run.by_id[&key].clone();
            if run.selected(&item) {
                run.out.selected += 1;
                run.restore_item(&item, false);
            }
        }
    }
    run.wait_for_operations();
    run.wait_for_volumes();
    run.wait_for_hooks();
    run.out
}

impl<'a> Run<'a> {
    /// Whether the restore was told to stop; the first time, an error
    /// says so.
    fn stopped(&mut self) -> bool {
        if !self.stop_seen
            && self
                .cx
                .stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Acquire))
        {
            self.stop_seen = true;
            self.error("", STOPPED.to_string());
        }
        self.stop_seen
    }

    fn log(&mut self, line: String) {
        tracing::info!(restore = %self.cx.restore.name, "{line}");
        self.out.log.push(line);
    }

    /// Whether the restore's filters take `item` (additional items named
    /// by a plugin are not held to them, as in Velero).
    fn selected(&self, item: &Item) -> bool {
        let spec = self.cx.spec;
        if item.id.group_resource().to_string() == "namespaces" {
            return spec.filter.selector().includes_namespace(&item.id.name);
        }
        if item.id.namespace.is_empty() && !spec.takes_cluster_scoped() {
            return false;
        }
        spec.filter.matches(item)
    }

    fn restore_item(&mut self, item: &Item, must_include: bool) {
        if self.stopped() {
            return;
        }
        let key = item.id.to_string();
        if !self.done.insert(key) {
            return;
        }
        let gr = item.id.group_resource().to_string();
        if order::NEVER.contains(&gr.as_str()) {
            return;
        }
        if !must_include
            && item.id.namespace.is_empty()
            && self.cx.spec.include_cluster_resources == Some(false)
        {
            return;
        }
        let source_ns = item.id.namespace.clone();
        let target_ns = self.cx.spec.target_namespace(&source_ns).to_string();
        if gr == "namespaces" {
            let target = self.cx.spec.target_namespace(&item.id.name).to_string();
            self.ensure_namespace(&item.id.name, &target);
            return;
        }
        if !target_ns.is_empty() && !self.ensure_namespace(&source_ns, &target_ns) {
            return;
        }
        if prepare::is_completed(&gr, item.value()) {
            self.log(format!("{}: completed; not restored", item.id));
            return;
        }
        let mut value = match self.cx.restore.as_restored(item) {
            Ok(i) => i.into_value(),
            Err(e) => {
                self.error(&target_ns, format!("error restoring {}: {e}", item.id));
                return;
            }
        };
        prepare::builtin_actions(&gr, &mut value, self.cx.spec.preserve_node_ports);
        let cluster = self.cx.cluster.clone();
        let class_exists = |class: &str| {
            exists(
                &*cluster,
                ItemRef::new("storage.k8s.io", "storageclasses", "", class),
            )
        };
        match builtin::storage_class(
            &mut value,
            &gr,
            &self.cx.configs.storage_classes,
            &class_exists,
        ) {
            Ok(changed) => {
                for (old, new) in changed {
                    self.log(format!(
                        "{}: storage class {old} changed to {new} (change-storage-class)",
                        item.id
                    ));
                }
            }
            Err(e) => {
                self.error(&target_ns, format!("error restoring {}: {e}", item.id));
                return;
            }
        }
        for (old, new) in builtin::image_names(&mut value, &gr, &self.cx.configs.image_names) {
            self.log(format!(
                "{}: image {old} changed to {new} (change-image-name)",
                item.id
            ));
        }
        let mut name = item.id.name.clone();
        let mut fill = Vec::new();
        match gr.as_str() {
            csi::SNAPSHOTS | csi::CONTENTS if self.cx.spec.restore_pvs == Some(false) => {
                self.log(format!("{}: restorePVs is false; not restored", item.id));
                return;
            }
            csi::SNAPSHOTS => match self.snapshot(item, &mut value, &target_ns) {
                Some(restored) => name = restored,
                None => return,
            },
            csi::CONTENTS => match self.content(item, &mut value, &target_ns) {
                Some(restored) => name = restored,
                None => return,
            },
            "persistentvolumes" => {
                if let VolumePlan::Provision = prepare::persistent_volume(&mut value) {
                    self.provisioned.insert(item.id.name.clone());
                    self.log(format!(
                        "{}: its reclaim policy is Delete and iar holds no snapshot of it; left for its claim to provision anew",
                        item.id
                    ));
                    return;
                }
            }
            "persistentvolumeclaims" => {
                let provisioned = self.provisioned.clone();
                prepare::persistent_volume_claim(&mut value, &|v| provisioned.contains(v));
            }
            "rolebindings.rbac.authorization.k8s.io"
            | "clusterrolebindings.rbac.authorization.k8s.io" => {
                builtin::binding_subjects(&mut value, &self.cx.spec.namespace_mapping);
            }
            "apiservices.apiregistration.k8s.io" if builtin::skips_api_service(&value) => {
                self.log(format!(
                    "{}: managed by the API server's aggregator; not restored",
                    item.id
                ));
                return;
            }
            "mutatingwebhookconfigurations.admissionregistration.k8s.io"
            | "validatingwebhookconfigurations.admissionregistration.k8s.io" => {
                builtin::webhook_side_effects(&mut value);
            }
            "customresourcedefinitions.apiextensions.k8s.io" => {
                builtin::crd_preserve_unknown_fields(&mut value);
            }
            "secrets" => {
                // Velero lists the accounts of the secret's own (backed-up)
                // namespace in the cluster.
                let account_exists = |account: &str| {
                    exists(
                        &*cluster,
                        ItemRef::new("", "serviceaccounts", source_ns.as_str(), account),
                    )
                };
                if let builtin::TokenSecret::Skip(account) =
                    builtin::token_secret(&mut value, &account_exists)
                {
                    self.log(format!(
                        "{}: a token Kubernetes makes again for service account {account}; not restored",
                        item.id
                    ));
                    return;
                }
            }
            "pods" => {
                // AddPVCFromPodAction: its claims first, whatever the
                // filters (additional items).
                for claim in builtin::pod_claims(&value) {
                    let key = ItemRef::new(
                        "",
                        "persistentvolumeclaims",
                        source_ns.as_str(),
                        claim.as_str(),
                    )
                    .to_string();
                    if let Some(found) = self.by_id.get(&key).cloned() {
                        self.restore_item(&found, true);
                    }
                }
                fill = self.wait_for_data(&item.id, &mut value, &target_ns);
                let seed = self.cx.restore.uid.clone();
                for w in self
                    .cx
                    .spec
                    .hooks
                    .add_init_containers(&mut value, &target_ns, &seed)
                {
                    self.out.results.warnings.add(&target_ns, w);
                }
            }
            _ => {}
        }
        let Some(value) = self.run_actions(item, value, &target_ns) else {
            return;
        };
        let created = in_namespace(&item.id, &name, value, &target_ns);
        let id = created.id.clone();
        let mut value = created.into_value();
        prepare::finish(&mut value, &self.cx.spec.backup_name, &self.cx.restore.name);
        let hooks = (gr == "pods").then(|| self.cx.spec.hooks.exec_hooks(&value));
        // Only a pod this restore created runs its hooks (Velero's
        // restoreItem returns before them for one that existed).
        let placed = self.create(&id, value, &target_ns);
        if !fill.is_empty() {
            self.start_volumes(&id, &item.id, fill, placed);
        }
        if placed == Placed::New
            && let Some((hooks, warnings)) = hooks
        {
            for w in warnings {
                self.out.results.warnings.add(&target_ns, w);
            }
            self.start_hooks(&id, hooks);
        }
    }

    /// The volumes of backed-up pod `value` to fill from the backup, with
    /// the pod made to wait for them ([`pod_volumes::add_restore_wait`]);
    /// a wait of an earlier restore it carries goes. Without a pod to
    /// fill (a restore into a directory), each is a warning and none.
    fn wait_for_data(&mut self, from: &ItemRef, value: &mut Value, target_ns: &str) -> Vec<String> {
        let fill = pod_volumes::volumes_of(self.volumes, &from.namespace, &from.name, value);
        pod_volumes::remove_restore_wait(value);
        if fill.is_empty() {
            return fill;
        }
        let Some(pv) = &self.cx.pod_volumes else {
            let (source, pod) = (&from.namespace, &from.name);
            for v in fill {
                self.out.results.warnings.add(
                    target_ns,
                    format!(
                        "pod {target_ns}/{pod}: the data of its volume {v} is not restored into it: this restore writes manifests, with no pod to fill (iar volume restore {} {source}/{pod}/{v} --to DIR writes it out)",
                        self.cx.spec.backup_name
                    ),
                );
            }
            return Vec::new();
        };
        let (uid, image) = (self.cx.restore.uid.clone(), pv.image.clone());
        pod_volumes::add_restore_wait(value, &fill, &uid, &image);
        fill
    }

    /// Starts filling the volumes of pod `pod` (created from pod
    /// `source`) on a thread of its own. A pod that was there already
    /// keeps its data, as in Velero.
    fn start_volumes(
        &mut self,
        pod: &ItemRef,
        source: &ItemRef,
        volumes: Vec<String>,
        placed: Placed,
    ) {
        if placed != Placed::New {
            if placed == Placed::Existing {
                self.out.results.warnings.add(
                    &pod.namespace,
                    format!(
                        "pod {}/{} already existed: the data of its volumes {volumes:?} is not restored into it",
                        pod.namespace, pod.name
                    ),
                );
            }
            return;
        }
        let Some(pv) = self.cx.pod_volumes.clone() else {
            return;
        };
        let job = PodVolumeJob {
            namespace: pod.namespace.clone(),
            pod: pod.name.clone(),
            source_namespace: source.namespace.clone(),
            source_pod: source.name.clone(),
            backup: self.cx.spec.backup_name.clone(),
            restore_name: self.cx.restore.name.clone(),
            volumes,
        };
        let (uid, stop) = (self.cx.restore.uid.clone(), self.cx.stop.clone());
        if let Some(handle) = self.spawn_for_pod(pod, "volume restores", move || {
            pv.restorer.restore(&uid, job, stop)
        }) {
            self.volume_jobs.push((pod.namespace.clone(), handle));
        }
    }

    /// Runs `work` for pod `pod` on a thread of its own (its `what`: hooks
    /// or volume restores); a thread that cannot start is an error.
    fn spawn_for_pod<R: Send + 'static>(
        &mut self,
        pod: &ItemRef,
        what: &str,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Option<std::thread::JoinHandle<R>> {
        let name = format!("restore-{}", what.replace(' ', "-"));
        match std::thread::Builder::new().name(name).spawn(work) {
            Ok(handle) => Some(handle),
            Err(e) => {
                self.error(
                    &pod.namespace,
                    format!(
                        "pod {}/{}: its {what} could not start: {e}",
                        pod.namespace, pod.name
                    ),
                );
                None
            }
        }
    }

    /// The reports of `jobs` (each pod's thread, by its namespace) once
    /// each has ended, their lines, warnings and errors in the outcome; a
    /// thread that panicked is an error.
    fn joined<R: PodThreadReport>(
        &mut self,
        jobs: Vec<(String, std::thread::JoinHandle<R>)>,
        what: &str,
    ) -> Vec<R> {
        let mut reports = Vec::new();
        for (ns, handle) in jobs {
            let Ok(mut report) = handle.join() else {
                self.error(&ns, format!("a pod's {what} ended in a panic"));
                continue;
            };
            let (log, warnings, errors) = report.said();
            for line in log {
                self.log(line);
            }
            for w in warnings {
                self.out.results.warnings.add(&ns, w);
            }
            for e in errors {
                self.error(&ns, e);
            }
            reports.push(report);
        }
        reports
    }

    /// Waits for every pod's volume restores to end, and counts them.
    fn wait_for_volumes(&mut self) {
        let jobs = std::mem::take(&mut self.volume_jobs);
        for report in self.joined(jobs, "volume restores") {
            self.out.pod_volumes_completed += report.completed;
            self.out.pod_volumes_failed += report.failed;
        }
    }

    /// Starts waiting for a created pod's containers to run its exec
    /// hooks.
    fn start_hooks(&mut self, pod: &ItemRef, hooks: Vec<crate::hooks::ExecHook>) {
        if hooks.is_empty() {
            return;
        }
        let Some(exec) = self.cx.exec.clone() else {
            for h in hooks {
                self.out.results.warnings.add(
                    &pod.namespace,
                    format!(
                        "pod {}/{}: post-restore hook {} in container {} not run: this restore writes manifests, with no pod to run it in (iar restore --cluster and iar controller run them)",
                        pod.namespace, pod.name, h.name, h.container
                    ),
                );
            }
            return;
        };
        let job = PodHooks {
            namespace: pod.namespace.clone(),
            pod: pod.name.clone(),
            hooks,
        };
        let (cluster, stop) = (self.cx.cluster.clone(), self.cx.stop.clone());
        if let Some(handle) = self.spawn_for_pod(pod, "post-restore hooks", move || {
            post::run(job, cluster, exec, stop)
        }) {
            self.hooks.push((pod.namespace.clone(), handle));
        }
    }

    /// Waits for every pod's hooks to end (each bounded by its wait and
    /// its hooks' timeouts), and counts them in the outcome.
    fn wait_for_hooks(&mut self) {
        let jobs = std::mem::take(&mut self.hooks);
        for report in self.joined(jobs, "post-restore hooks") {
            self.out.hooks_attempted += report.attempted;
            self.out.hooks_failed += report.failed;
        }
    }

    /// The restore actions that apply to the item, in order, each handed
    /// what the last one returned. `None`: not to be created (a plugin
    /// skipped it or failed).
    fn run_actions(&mut self, from_backup: &Item, value: Value, target_ns: &str) -> Option<Value> {
        let mut current = Item::with_id(from_backup.id.clone(), value);
        for index in 0..self.cx.plugins.len() {
            let plugin = &self.cx.plugins[index];
            if !plugin.exports(Interface::RestoreItemAction) {
                continue;
            }
            // Velero picks restore actions by the item's target namespace.
            let mapped = in_namespace(
                &current.id,
                &current.id.name,
                current.value().clone(),
                target_ns,
            );
            if !plugin.restore_applies(&mapped) {
                continue;
            }
            let name = plugin.name().to_string();
            let seen: Vec<String> = self.operations.iter().map(|o| o.id.clone()).collect();
            let restore = self.cx.restore.clone();
            let instance = self.instance(index);
            let answer = instance.restore_execute(&current, from_backup, &restore, &|op| {
                seen.iter().any(|s| s == op)
            });
            for log in instance.take_logs() {
                self.out
                    .log
                    .push(format!("plugin {name}: {}: {}", log.level, log.message));
            }
            let out = match answer {
                Ok(out) => out,
                Err(e) => {
                    self.error(
                        target_ns,
                        format!("error restoring {}: {e}", from_backup.id),
                    );
                    return None;
                }
            };
            if out.skip_restore {
                self.log(format!(
                    "{}: plugin {name} asked to skip it",
                    from_backup.id
                ));
                return None;
            }
            if let Some(changed) = out.item {
                current = Item::with_id(from_backup.id.clone(), changed.into_value());
            }
            for additional in &out.additional_items {
                match self.by_id.get(&additional.to_string()).cloned() {
                    Some(found) => self.restore_item(&found, true),
                    None => self.log(format!(
                        "{}: plugin {name} named {additional}, which the backup does not hold",
                        from_backup.id
                    )),
                }
            }
            if out.wait_for_additional_items && !out.additional_items.is_empty() {
                let wait = out.additional_items_ready_timeout.unwrap_or(READY_WAIT);
                self.wait_ready(index, &out.additional_items, wait, target_ns);
            }
            if let Some(op) = out.operation_id {
                self.operations.push(Operation {
                    plugin: index,
                    id: op,
                    item: from_backup.id.clone(),
                });
            }
        }
        Some(current.into_value())
    }

    /// A VolumeSnapshot as restored ([`csi::snapshot`]), its content
    /// restored first whatever the filters say; its new name, or `None`
    /// (an error said) when it cannot be restored.
    fn snapshot(&mut self, item: &Item, value: &mut Value, target_ns: &str) -> Option<String> {
        let (restored, content) = match csi::snapshot(value, item.value(), &self.cx.restore.uid) {
            Ok(found) => found,
            Err(e) => {
                self.error(target_ns, format!("error restoring {}: {e}", item.id));
                return None;
            }
        };
        let content = ItemRef::new(
            "snapshot.storage.k8s.io",
            "volumesnapshotcontents",
            "",
            &content,
        );
        let Some(found) = self.by_id.get(&content.to_string()).cloned() else {
            self.error(
                target_ns,
                format!(
                    "error restoring {}: the backup does not hold its {content}",
                    item.id
                ),
            );
            return None;
        };
        self.restore_item(&found, true);
        self.log(format!(
            "{}: restored as {restored}, from its content's snapshot handle",
            item.id
        ));
        Some(restored)
    }

    /// A VolumeSnapshotContent as restored ([`csi::content`]) with this
    /// cluster's class of its driver; its new name, or `None` (an error
    /// said).
    fn content(&mut self, item: &Item, value: &mut Value, target_ns: &str) -> Option<String> {
        let driver = item.value()["spec"]["driver"].as_str().unwrap_or_default();
        let class = self.class_of_driver(driver);
        match csi::content(
            value,
            item.value(),
            &self.cx.restore.uid,
            &self.cx.spec.namespace_mapping,
            class,
        ) {
            Ok(restored) => Some(restored),
            Err(e) => {
                self.error(target_ns, format!("error restoring {}: {e}", item.id));
                None
            }
        }
    }

    /// The restoring cluster's VolumeSnapshotClass for `driver`
    /// ([`csi::class_of_driver`]); none where the cluster cannot list them
    /// (a directory).
    fn class_of_driver(&mut self, driver: &str) -> Option<String> {
        let classes = GroupResource {
            group: "snapshot.storage.k8s.io".into(),
            resource: "volumesnapshotclasses".into(),
        };
        match self
            .cx
            .cluster
            .list_within(&classes, "", &Default::default(), 1000, CLUSTER_WAIT)
        {
            Ok(found) => {
                let found: Vec<Value> = found
                    .iter()
                    .filter_map(|j| serde_json::from_str(j).ok())
                    .collect();
                csi::class_of_driver(&found, driver)
            }
            Err(e) => {
                self.log(format!(
                    "listing VolumeSnapshotClasses for driver {driver}: {e}; the restored content names none"
                ));
                None
            }
        }
    }

    fn instance(&mut self, index: usize) -> &mut PluginInstance {
        let cluster = self.cx.cluster.clone();
        let plugin = &self.cx.plugins[index];
        self.instances[index].get_or_insert_with(|| plugin.instance(cluster))
    }

    fn wait_ready(&mut self, index: usize, items: &[ItemRef], wait: Duration, ns: &str) {
        let name = self.cx.plugins[index].name().to_string();
        let restore = self.cx.restore.clone();
        let until = Instant::now() + wait;
        loop {
            match self.instance(index).additional_items_ready(items, &restore) {
                Ok(true) => return,
                Ok(false) if Instant::now() < until => std::thread::sleep(POLL),
                Ok(false) => {
                    let message = format!(
                        "plugin {name}: its additional items were not ready within {wait:?}"
                    );
                    self.out.results.warnings.add(ns, message);
                    return;
                }
                Err(e) => {
                    self.error(ns, format!("plugin {name}: {e}"));
                    return;
                }
            }
        }
    }

    /// Makes sure namespace `target` exists: from the backed-up namespace
    /// `source`'s object where the backup holds it, as Velero does; false
    /// (and an error) when it cannot be made.
    fn ensure_namespace(&mut self, source: &str, target: &str) -> bool {
        if self.namespaces.contains(target) {
            return true;
        }
        let id = ItemRef::new("", "namespaces", "", target);
        match self.cx.cluster.get(&id) {
            Ok(Some(_)) => {
                self.namespaces.insert(target.to_string());
                return true;
            }
            Ok(None) => {}
            Err(e) => {
                self.error("", format!("namespace {target}: {e}"));
                return false;
            }
        }
        let backed_up = self
            .by_id
            .get(&ItemRef::new("", "namespaces", "", source).to_string())
            .cloned();
        let mut value = match backed_up.map(|ns| self.cx.restore.as_restored(&ns)) {
            Some(Ok(ns)) => ns.into_value(),
            _ => json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {}}),
        };
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("name".into(), json!(target));
        }
        // Its phase and finalizers are the API server's to set. Velero
        // creates it as backed up (`kube.EnsureNamespaceExistsAndIsReady`),
        // without the restore's labels, which every other object gets.
        if let Some(map) = value.as_object_mut() {
            map.remove("spec");
            map.remove("status");
        }
        self.create(&id, value, "") != Placed::Failed
    }

    /// Creates `id`; an object already there is left (a warning when it
    /// differs) or replaced, as the spec's policy says.
    fn create(&mut self, id: &ItemRef, value: Value, ns: &str) -> Placed {
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let created = self
            .cx
            .cluster
            .create_within(id, value.clone(), CLUSTER_WAIT);
        match created {
            Ok(Created::New(_)) => {
                self.out.restored += 1;
                if id.resource == "namespaces" {
                    self.namespaces.insert(id.name.clone());
                }
                self.log(format!("{id}: created"));
                Placed::New
            }
            Ok(Created::Existing(found)) => {
                if id.resource == "namespaces" {
                    self.namespaces.insert(id.name.clone());
                }
                self.existing(id, &kind, value, found, ns);
                Placed::Existing
            }
            Err(e) => {
                self.error(ns, format!("error restoring {id}: {e}"));
                Placed::Failed
            }
        }
    }

    fn existing(&mut self, id: &ItemRef, kind: &str, mut value: Value, found: Value, ns: &str) {
        if prepare::same_as_restored(&found, &value) {
            self.out.existing += 1;
            self.log(format!(
                "{id}: already exists, the same as the backed-up one"
            ));
            return;
        }
        if self.cx.spec.existing == ExistingPolicy::Update && id.resource != "namespaces" {
            if let (Some(meta), Some(version)) = (
                value.get_mut("metadata").and_then(Value::as_object_mut),
                found.pointer("/metadata/resourceVersion"),
            ) {
                meta.insert("resourceVersion".into(), version.clone());
            }
            match self.cx.cluster.replace_within(id, value, CLUSTER_WAIT) {
                Ok(_) => {
                    self.out.restored += 1;
                    self.log(format!("{id}: existed; updated to the backed-up one"));
                }
                Err(e) => self.out.results.warnings.add(
                    ns,
                    format!("could not update existing {kind} {:?}: {e}", id.name),
                ),
            }
            return;
        }
        self.out.existing += 1;
        self.out.results.warnings.add(
            ns,
            format!(
                "could not restore, {kind} {:?} already exists. Warning: the in-cluster version is different than the backed-up version",
                id.name
            ),
        );
    }

    fn error(&mut self, ns: &str, message: String) {
        tracing::warn!(restore = %self.cx.restore.name, "{message}");
        self.out.log.push(format!("error: {message}"));
        self.out.results.errors.add(ns, message);
    }

    /// Polls each operation a plugin started until it ends or the spec's
    /// `itemOperationTimeout` passes.
    fn wait_for_operations(&mut self) {
        let until = Instant::now() + self.cx.spec.operation_timeout;
        let restore = self.cx.restore.clone();
        let mut pending = std::mem::take(&mut self.operations);
        while !pending.is_empty() && !self.stopped() {
            let mut still = Vec::new();
            for op in pending {
                let name = self.cx.plugins[op.plugin].name().to_string();
                let ns = self
                    .cx
                    .spec
                    .target_namespace(&op.item.namespace)
                    .to_string();
                match self
                    .instance(op.plugin)
                    .restore_progress(&op.id, &op.item, &restore)
                {
                    Ok(p) if p.completed => match p.error {
                        Some(e) => self.error(
                            &ns,
                            format!("plugin {name}: operation {} of {}: {e}", op.id, op.item),
                        ),
                        None => self.log(format!(
                            "plugin {name}: operation {} of {} completed",
                            op.id, op.item
                        )),
                    },
                    Ok(_) => still.push(op),
                    Err(e) => self.error(
                        &ns,
                        format!("plugin {name}: operation {} of {}: {e}", op.id, op.item),
                    ),
                }
            }
            pending = still;
            if pending.is_empty() {
                break;
            }
            if Instant::now() >= until {
                for op in pending {
                    let ns = self
                        .cx
                        .spec
                        .target_namespace(&op.item.namespace)
                        .to_string();
                    self.error(
                        &ns,
                        format!(
                            "operation {} of {} did not end within the restore's itemOperationTimeout",
                            op.id, op.item
                        ),
                    );
                }
                break;
            }
            std::thread::sleep(POLL);
        }
    }
}

/// Whether `id` is in the cluster now (an unanswered read is not).
fn exists(cluster: &dyn ClusterReader, id: ItemRef) -> bool {
    matches!(cluster.get(&id), Ok(Some(_)))
}

/// The object as it is created: in namespace `ns` (the restore's mapping
/// of its own), under the identity it has there (`name`: its own, or the
/// one a built-in action gave it).
fn in_namespace(id: &ItemRef, name: &str, mut value: Value, ns: &str) -> Item {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut)
        && !ns.is_empty()
    {
        meta.insert("namespace".into(), json!(ns));
    }
    let id = ItemRef::new(
        id.group.clone(),
        id.resource.clone(),
        ns.to_string(),
        name.to_string(),
    );
    Item::with_id(id, value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iar_core::cluster::{ClusterError, ClusterWriter};
    use std::sync::Mutex;

    /// Creates whatever it is given; after `stop_after` creates, sets the
    /// stop flag, as a controller losing its leadership mid-restore does.
    struct Stopping {
        created: Mutex<Vec<String>>,
        stop: Arc<AtomicBool>,
        stop_after: usize,
    }

    impl ClusterWriter for Stopping {
        fn create_within(
            &self,
            id: &ItemRef,
            object: Value,
            _: Duration,
        ) -> Result<Created, ClusterError> {
            let mut created = self.created.lock().unwrap();
            created.push(id.to_string());
            if created.len() >= self.stop_after {
                self.stop.store(true, Ordering::Release);
            }
            Ok(Created::New(object))
        }
    }

    #[async_trait::async_trait]
    impl ClusterReader for Stopping {
        fn get(&self, _: &ItemRef) -> Result<Option<Value>, ClusterError> {
            Ok(None)
        }
    }

    fn config_map(name: &str) -> Item {
        Item::with_id(
            ItemRef::new("", "configmaps", "shop", name),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "shop"}}),
        )
    }

    /// Told to stop (its leader's term ended), a restore creates nothing
    /// more from the next object on, and its errors say why.
    #[test]
    fn a_restore_told_to_stop_creates_nothing_more() {
        let stop = Arc::new(AtomicBool::new(false));
        let cluster = Arc::new(Stopping {
            created: Mutex::default(),
            stop: stop.clone(),
            // The namespace, then one config map.
            stop_after: 2,
        });
        let spec = RestoreSpec::from_value(&json!({"backupName": "b"})).unwrap();
        let outcome = run(
            Context {
                spec: &spec,
                restore: RestoreRef {
                    object: None,
                    name: "r".into(),
                    namespace: "iar".into(),
                    uid: "u".into(),
                    spec: json!({}),
                },
                cluster: cluster.clone(),
                plugins: &[],
                stop: Some(stop),
                exec: None,
                configs: Default::default(),
                pod_volumes: None,
            },
            (0..5).map(|i| config_map(&format!("cm-{i}"))).collect(),
            &[],
        );
        assert_eq!(
            *cluster.created.lock().unwrap(),
            ["namespaces shop", "configmaps shop/cm-0"]
        );
        assert_eq!(outcome.results.errors.count(), 1);
        assert!(
            outcome.log.iter().any(|l| l.ends_with(STOPPED)),
            "{:?}",
            outcome.log
        );
        assert_eq!(outcome.phase(), "PartiallyFailed");
    }

    /// Keeps what is created; a pod reads back running, as a kubelet
    /// would make it; `existing` objects are already there.
    #[derive(Default)]
    struct Kubelet {
        objects: Mutex<HashMap<String, Value>>,
        existing: Vec<String>,
    }

    impl ClusterWriter for Kubelet {
        fn create_within(
            &self,
            id: &ItemRef,
            object: Value,
            _: Duration,
        ) -> Result<Created, ClusterError> {
            if self.existing.contains(&id.to_string()) {
                return Ok(Created::Existing(object));
            }
            self.objects
                .lock()
                .unwrap()
                .insert(id.to_string(), object.clone());
            Ok(Created::New(object))
        }
    }

    #[async_trait::async_trait]
    impl ClusterReader for Kubelet {
        fn get(&self, id: &ItemRef) -> Result<Option<Value>, ClusterError> {
            let mut found = self.objects.lock().unwrap().get(&id.to_string()).cloned();
            if let Some(pod) = found.as_mut().filter(|_| id.resource == "pods") {
                pod["status"] = json!({"phase": "Running", "containerStatuses": [
                    {"name": "web", "ready": true, "state": {"running": {}}}
                ]});
            }
            Ok(found)
        }
    }

    #[derive(Default)]
    struct Execs(Mutex<Vec<String>>);

    impl PodExec for Execs {
        fn exec(&self, ns: &str, pod: &str, hook: &crate::hooks::ExecHook) -> Result<(), String> {
            let line = format!("{ns}/{pod} {}: {}", hook.container, hook.command.join(" "));
            self.0.lock().unwrap().push(line);
            Ok(())
        }
    }

    fn web_pod(name: &str) -> Item {
        Item::with_id(
            ItemRef::new("", "pods", "shop", name),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "shop", "labels": {"app": "web"},
                                "annotations": {"post.hook.restore.velero.io/command": "[\"warm\", \"up\"]"}},
                   "spec": {"containers": [{"name": "web", "image": "nginx"}]}}),
        )
    }

    fn restore_pods(
        spec: &RestoreSpec,
        cluster: Arc<Kubelet>,
        exec: Option<Arc<dyn PodExec>>,
        pods: &[&str],
    ) -> Outcome {
        run(
            Context {
                spec,
                restore: RestoreRef {
                    object: None,
                    name: "r".into(),
                    namespace: "iar".into(),
                    uid: "u".into(),
                    spec: spec.raw.clone(),
                },
                cluster,
                plugins: &[],
                stop: None,
                exec,
                configs: Default::default(),
                pod_volumes: None,
            },
            pods.iter().map(|p| web_pod(p)).collect(),
            &[],
        )
    }

    /// A restored pod gets the spec's init containers and runs its exec
    /// hook once it runs, in its namespace after mapping; a pod that was
    /// already there runs none (Velero's restoreItem returns before them).
    #[test]
    fn a_created_pod_gets_its_init_containers_and_runs_its_exec_hook() {
        let spec = RestoreSpec::from_value(&json!({
            "backupName": "b",
            "namespaceMapping": {"shop": "shop-2"},
            "hooks": {"resources": [{
                "name": "prep", "includedNamespaces": ["shop-2"],
                "postHooks": [{"init": {"initContainers": [
                    {"name": "prep", "image": "busybox", "command": ["true"]}
                ]}}],
            }]},
        }))
        .unwrap();
        let cluster = Arc::new(Kubelet {
            existing: vec!["pods shop-2/web-1".into()],
            ..Kubelet::default()
        });
        let execs = Arc::new(Execs::default());
        let outcome = restore_pods(
            &spec,
            cluster.clone(),
            Some(execs.clone()),
            &["web-0", "web-1"],
        );
        assert_eq!(*execs.0.lock().unwrap(), ["shop-2/web-0 web: warm up"]);
        assert_eq!((outcome.hooks_attempted, outcome.hooks_failed), (1, 0));
        assert_eq!(outcome.phase(), "Completed", "{:?}", outcome.results);
        let created = cluster.objects.lock().unwrap()["pods shop-2/web-0"].clone();
        assert_eq!(created["spec"]["initContainers"][0]["name"], "prep");
        assert!(
            outcome
                .log
                .iter()
                .any(|l| l.contains("post-restore hook <from-annotation> in container web ran")),
            "{:?}",
            outcome.log
        );
    }

    /// Into a directory there is no pod to run a hook in: each is a
    /// warning, never silently dropped.
    #[test]
    fn with_nothing_to_exec_in_each_hook_is_a_warning() {
        let spec = RestoreSpec::from_value(&json!({"backupName": "b"})).unwrap();
        let outcome = restore_pods(&spec, Arc::new(Kubelet::default()), None, &["web-0"]);
        assert_eq!(outcome.hooks_attempted, 0);
        let warnings = outcome.results.warnings.lines().join("\n");
        assert!(
            warnings.contains("post-restore hook <from-annotation> in container web not run"),
            "{warnings}"
        );
        assert_eq!(outcome.phase(), "Completed");
    }

    /// Asked to fill pods' volumes: every job, and the counts it gives.
    #[derive(Default)]
    struct Filler(Mutex<Vec<(String, PodVolumeJob)>>);

    impl crate::pod_volumes::PodVolumeRestorer for Filler {
        fn restore(
            &self,
            restore_uid: &str,
            job: PodVolumeJob,
            _: Option<Arc<AtomicBool>>,
        ) -> PodVolumeReport {
            let report = PodVolumeReport {
                completed: job.volumes.len() - 1,
                failed: 1,
                errors: vec![format!("{}: one failed", job.pod)],
                ..Default::default()
            };
            self.0.lock().unwrap().push((restore_uid.to_string(), job));
            report
        }
    }

    fn pod_with_volumes(name: &str) -> Item {
        Item::with_id(
            ItemRef::new("", "pods", "shop", name),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "shop"},
                   "spec": {"containers": [{"name": "web", "image": "nginx"}],
                            "initContainers": [{"name": "restore-wait", "image": "old"}],
                            "volumes": [{"name": "html", "emptyDir": {}}, {"name": "logs", "emptyDir": {}}]}}),
        )
    }

    fn backed_up(pod: &str, volume: &str) -> BackedUpVolume {
        BackedUpVolume {
            pod_namespace: "shop".into(),
            pod_name: pod.into(),
            volume: volume.into(),
            phase: "Completed".into(),
        }
    }

    /// A pod whose volumes were backed up file by file is created waiting
    /// for their data (restore-wait first, naming the restore's uid), its
    /// volumes are asked of the restorer with the namespace it went to and
    /// the one the data is of, and the restore counts how they ended. A
    /// pod with nothing backed up loses an earlier restore's wait. Into a
    /// directory, each volume is a warning naming the command that writes
    /// it out.
    #[test]
    fn a_restored_pod_waits_for_its_volumes_data() {
        let spec = RestoreSpec::from_value(
            &json!({"backupName": "b", "namespaceMapping": {"shop": "shop-2"}}),
        )
        .unwrap();
        let volumes = [backed_up("web-0", "html"), backed_up("web-0", "logs")];
        let (cluster, filler) = (Arc::new(Kubelet::default()), Arc::new(Filler::default()));
        let cx = |pod_volumes| Context {
            spec: &spec,
            restore: RestoreRef {
                object: None,
                name: "r".into(),
                namespace: "iar".into(),
                uid: "u-1".into(),
                spec: spec.raw.clone(),
            },
            cluster: cluster.clone(),
            plugins: &[],
            stop: None,
            exec: None,
            configs: Default::default(),
            pod_volumes,
        };
        let pods = || vec![pod_with_volumes("web-0"), pod_with_volumes("web-1")];
        let outcome = run(
            cx(Some(PodVolumes {
                restorer: filler.clone(),
                image: "iar:9".into(),
            })),
            pods(),
            &volumes,
        );
        let jobs = filler.0.lock().unwrap().clone();
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        let (uid, job) = &jobs[0];
        assert_eq!(uid, "u-1");
        assert_eq!(
            (
                job.namespace.as_str(),
                job.pod.as_str(),
                job.source_namespace.as_str()
            ),
            ("shop-2", "web-0", "shop")
        );
        assert_eq!((job.backup.as_str(), job.restore_name.as_str()), ("b", "r"));
        assert_eq!(job.volumes, ["html", "logs"]);
        assert_eq!(
            (outcome.pod_volumes_completed, outcome.pod_volumes_failed),
            (1, 1)
        );
        assert!(outcome.results.errors.count() == 1, "{:?}", outcome.results);
        let objects = cluster.objects.lock().unwrap().clone();
        let init =
            |pod: &str| objects[&format!("pods shop-2/{pod}")]["spec"]["initContainers"].clone();
        assert_eq!(init("web-0")[0]["name"], "restore-wait");
        assert_eq!(init("web-0")[0]["image"], "iar:9");
        assert_eq!(init("web-0")[0]["command"][2], "u-1");
        assert_eq!(init("web-1"), Value::Null, "an old wait goes");
        // Into a directory: no wait, a warning per volume.
        let (cluster2, plain) = (Arc::new(Kubelet::default()), cx(None));
        let plain = Context {
            cluster: cluster2.clone(),
            ..plain
        };
        let outcome = run(plain, pods(), &volumes);
        let warned = outcome.results.warnings.lines();
        assert_eq!(
            warned
                .iter()
                .filter(|w| w.contains("iar volume restore b shop/web-0/"))
                .count(),
            2,
            "{warned:?}"
        );
        let objects = cluster2.objects.lock().unwrap().clone();
        assert_eq!(
            objects["pods shop-2/web-0"]["spec"]["initContainers"],
            Value::Null
        );
    }
}
