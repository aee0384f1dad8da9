//! One pass of item actions over a set of items, on a pool of worker
//! threads. Each worker owns one instance per plugin, reused across the
//! items of this backup. Used by the first pass (phase backup: items grouped
//! into item blocks, additional items followed) and by finalize (phase
//! finalize, post-operation items, one at a time).
//!
//! A worker takes a whole block and acts on its items in order. Every item
//! of every block is claimed in the pass's `seen` [`ClaimSet`] before any
//! worker starts, and an additional item is claimed before it is read, so
//! an item named by several blocks and by plugins' additional items is
//! backed up exactly once.

use crate::backup::block_work::BlockWork;
use crate::backup::blocks::{ClaimSet, form_blocks_keeping};
use iar_core::clock::{Clock, RealClock};
use iar_core::cluster::ClusterReader;
use iar_core::item::{Item, ItemRef};
use iar_core::select::BackupFilter;
use iar_plugin::plugin::Relation;
use iar_plugin::plugin::{BackupRef, Plugin, PluginInstance};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use thin_vec::{ThinVec, thin_vec};

/// An operation an action started on an item.
#[derive(Clone, Debug, PartialEq)]
pub struct StartedOperation {
    pub plugin: String,
    pub item: ItemRef,
    pub operation_id: String,
    pub post_operation_items: Vec<ItemRef>,
    /// When the action returned it: the operation's timeout counts from here.
    pub created: std::time::SystemTime,
}

/// What happened to one item.
#[derive(Debug, Default)]
pub struct ItemOutcome {
    pub id: ItemRef,
    /// The item as the actions left it; `None` when an action failed it
    /// (or, in the first pass, once it is written out). Boxed: a backup
    /// keeps an outcome per item, and most outcomes hold none.
    pub stored: Option<Box<Item>>,
    // The lists below are empty for almost every item: a `ThinVec` is one
    // pointer (8 bytes, no allocation while empty) where a `Vec` is 24,
    // 80 bytes less per outcome kept until the pass ends.
    pub errors: ThinVec<String>,
    pub warnings: ThinVec<String>,
    pub operations: ThinVec<StartedOperation>,
    /// Objects the plugins created while acting on it (contract 1.2.0),
    /// recorded whether or not the item was stored: the backup deletes
    /// them when it is deleted or canceled.
    pub created: ThinVec<iar_core::cluster::writes::CreatedObject>,
    /// What the plugins logged while acting on it, as `plugin: message`.
    pub logs: ThinVec<String>,
    /// The index of the item block it was backed up in (blocks are numbered
    /// in the order they were formed; additional items follow, one each).
    pub block: usize,
    /// Set when the item was written out as its block ended (the first
    /// pass streams its tarball) and `stored` dropped: what the backup
    /// still needs of it.
    pub written: Option<WrittenItem>,
}

/// What remains of a stored item once it is written to the tarball.
#[derive(Clone, Debug, PartialEq)]
pub struct WrittenItem {
    /// Velero's resource-list key, `<apiVersion>/<kind>`: one shared
    /// string per kind, not one per item.
    pub resource_key: Arc<str>,
    /// Written before the post-operation items' member (see
    /// `store::tarball::StreamWriter`).
    pub in_head: bool,
}

/// Takes each outcome as its block ends, on the worker that made it: the
/// first pass writes the stored item out and drops it.
pub type OutcomeSink<'a> = &'a (dyn Fn(&mut ItemOutcome) + Sync);

/// What a pass did: one outcome per item, and what forming the item blocks
/// reported (related items not found, relations that failed).
#[derive(Debug, Default)]
pub struct PassOutput {
    pub outcomes: Vec<ItemOutcome>,
    pub blocks: usize,
    pub warnings: Vec<String>,
    pub errors: Vec<String>,
}

/// How far a running pass is, read while it runs (a live status): items
/// given a stored outcome so far, and items known to the pass (those
/// listed, then the additional items plugins named).
#[derive(Debug, Default)]
pub struct PassProgress {
    backed_up: AtomicU64,
    total: AtomicU64,
}

impl PassProgress {
    /// (backed up, total) now.
    pub fn now(&self) -> (u64, u64) {
        (
            self.backed_up.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed),
        )
    }
}

/// Claims of `(plugin, operation id)`: a plugin's host call asks whether an
/// id is already taken in this backup.
type OperationClaims = ClaimSet<(String, String)>;

/// Runs every applicable action on one item, in plugin order; each sees the
/// item as the previous one left it. An action error fails the item (it is
/// not stored), as in Velero.
fn act_on_item(
    instances: &mut [PluginInstance],
    item: Item,
    backup: &BackupRef,
    claimed: &OperationClaims,
    additional: &mut Vec<ItemRef>,
    clock: &dyn Clock,
) -> ItemOutcome {
    let mut outcome = ItemOutcome {
        id: item.id.clone(),
        ..ItemOutcome::default()
    };
    let mut current = item;
    for instance in instances.iter_mut() {
        if !instance.plugin().applies(&current) {
            continue;
        }
        let plugin = instance.plugin().name().to_string();
        // Claims the id as it is checked, so two workers cannot both get it.
        let claim = |id: &str| !claimed.claim(&(plugin.clone(), id.to_string()));
        let result = instance.execute(&current, backup, &claim);
        outcome
            .logs
            .extend(instance.take_logs().into_iter().map(|l| l.line(&plugin)));
        outcome.created.extend(instance.take_created());
        match result {
            Ok(mut out) => {
                if let Some(changed) = out.item.take() {
                    current = changed;
                }
                additional.extend(out.additional_items);
                if let Some(operation_id) = out.operation_id {
                    outcome.operations.push(StartedOperation {
                        plugin,
                        item: current.id.clone(),
                        operation_id,
                        post_operation_items: out.post_operation_items,
                        created: clock.system_now(),
                    });
                }
            }
            Err(e) => {
                outcome.errors.push(e.to_string());
                return outcome;
            }
        }
    }
    outcome.stored = Some(Box::new(current));
    outcome
}

/// How the backup phase follows the additional items plugins name: claimed
/// in `seen` (each read once), read from `cluster`, kept out when `filter`
/// excludes them.
struct Follow<'a> {
    seen: &'a ClaimSet<ItemRef>,
    cluster: &'a Arc<dyn ClusterReader>,
    filter: Option<&'a BackupFilter>,
}

/// Acts on one item and, with `follow` (the backup phase), reads the
/// additional items it names that no one has claimed yet. Returns its
/// outcome and the items found.
fn backup_one(
    instances: &mut [PluginInstance],
    item: Item,
    backup: &BackupRef,
    claimed: &OperationClaims,
    follow: Option<&Follow<'_>>,
    clock: &dyn Clock,
) -> (ItemOutcome, Vec<Item>) {
    let mut additional = Vec::new();
    let mut outcome = act_on_item(instances, item, backup, claimed, &mut additional, clock);
    let mut found = Vec::new();
    let Some(Follow {
        seen,
        cluster,
        filter,
    }) = follow
    else {
        return (outcome, found);
    };
    // A name Kubernetes would refuse is not looked up, nor backed up.
    additional.retain(|id| match iar_core::store::tarball::item_path(id) {
        Ok(_) => true,
        Err(e) => {
            outcome
                .errors
                .push(format!("additional item named by {}: {e}", outcome.id));
            false
        }
    });
    // Claimed before it is read: of the workers (and blocks) naming it, one
    // reads and backs it up.
    for id in additional.into_iter().filter(|id| seen.claim(id)) {
        match cluster.get_item(&id) {
            Ok(Some(item)) => match filter.and_then(|f| f.excludes_additional(&item)) {
                // Left out, and said so: the plugin named it, the spec
                // keeps it out (no plugin sees it either).
                Some(why) => outcome.logs.push(format!(
                    "additional item {id} named by {} left out of the backup: {why}",
                    outcome.id
                )),
                None => found.push(item),
            },
            Ok(None) => outcome.warnings.push(format!(
                "additional item {id} named by {} was not found",
                outcome.id
            )),
            Err(e) => outcome.errors.push(format!("additional item {id}: {e}")),
        }
    }
    (outcome, found)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

struct Queue {
    /// Blocks not yet taken, each with its index.
    blocks: VecDeque<(usize, Vec<Item>)>,
    next_index: usize,
    busy: usize,
    outcomes: Vec<ItemOutcome>,
}

fn fresh_instances(plugins: &[Plugin], cluster: &Arc<dyn ClusterReader>) -> Vec<PluginInstance> {
    plugins
        .iter()
        .map(|p| p.instance(cluster.clone()))
        .collect()
}

/// Runs the actions over `items` with `workers` threads. With
/// `in_blocks` (the backup phase), items are grouped into item
/// blocks first (built-in relations plus `relations`, the plugins'
/// `item-block-action`s). Without it (finalize), each item is acted on
/// alone. In both, additional items are read from `cluster` and backed up
/// too, each exactly once: in finalize as Velero does (its finalize backs up
/// the additional items of post-operation items, a snapshot's content for
/// one), with no filter (Velero's must-include). With `work`, each block runs its pods' pre hooks first
/// (an `onError: Fail` fails every item of the block, unacted on) and starts
/// its volume backups after its items; the wait for them and the post hooks
/// are left to `work`'s runtime, so the worker goes on to the next block.
/// `filter` keeps related items the spec does not select out of blocks, and
/// additional items it excludes out of the backup.
/// Blocking: call from a blocking thread.
#[allow(clippy::too_many_arguments)]
pub fn run(
    plugins: &[Plugin],
    items: Vec<Item>,
    backup: &BackupRef,
    cluster: &Arc<dyn ClusterReader>,
    workers: usize,
    in_blocks: bool,
    relations: &[&dyn Relation],
    work: Option<&Arc<BlockWork>>,
    filter: Option<&BackupFilter>,
    progress: Option<&PassProgress>,
    sink: Option<OutcomeSink<'_>>,
) -> PassOutput {
    run_timed(
        plugins, items, backup, cluster, workers, in_blocks, relations, work, filter, progress,
        sink, &RealClock,
    )
}

/// [`run`], with the operations it starts stamped by `clock` (their
/// timeouts are counted from then).
#[allow(clippy::too_many_arguments)]
pub fn run_timed(
    plugins: &[Plugin],
    items: Vec<Item>,
    backup: &BackupRef,
    cluster: &Arc<dyn ClusterReader>,
    workers: usize,
    in_blocks: bool,
    relations: &[&dyn Relation],
    work: Option<&Arc<BlockWork>>,
    filter: Option<&BackupFilter>,
    progress: Option<&PassProgress>,
    sink: Option<OutcomeSink<'_>>,
    clock: &dyn Clock,
) -> PassOutput {
    let mut output = PassOutput::default();
    let blocks: Vec<Vec<Item>> = if in_blocks {
        // A related item read from the cluster joins its block only if the
        // spec's filters select it (as in Velero, a block holds only items
        // of the backup); plugins' additional items are followed as before.
        let keep_read = |i: &Item| filter.is_none_or(|f| f.matches(i));
        let formed = form_blocks_keeping(items, cluster.as_ref(), relations, &keep_read);
        output.warnings = formed.warnings;
        output.errors = formed.errors;
        formed.blocks.into_iter().map(|b| b.items).collect()
    } else {
        items.into_iter().map(|i| vec![i]).collect()
    };
    output.blocks = blocks.len();
    let seen = ClaimSet::new();
    let blocks: VecDeque<(usize, Vec<Item>)> = blocks
        .into_iter()
        .map(|b| {
            b.into_iter()
                .filter(|i| seen.claim(&i.id))
                .collect::<Vec<_>>()
        })
        .filter(|b| !b.is_empty())
        .enumerate()
        .collect();
    let listed: usize = blocks.iter().map(|(_, b)| b.len()).sum();
    if let Some(p) = progress {
        p.total.fetch_add(listed as u64, Ordering::Relaxed);
    }
    let queue = Mutex::new(Queue {
        next_index: blocks.len(),
        blocks,
        busy: 0,
        // One outcome per listed item at least: made at its size, not
        // grown by doubling (at 50,000 items the last doubling alone held
        // 17 MB beside the 8 MB it replaced).
        outcomes: Vec::with_capacity(listed),
    });
    let wake = Condvar::new();
    let claimed = OperationClaims::new();
    let follow = Some(Follow {
        seen: &seen,
        cluster,
        filter: filter.filter(|_| in_blocks),
    });
    std::thread::scope(|scope| {
        for _ in 0..workers.max(1) {
            scope.spawn(|| {
                let mut instances = fresh_instances(plugins, cluster);
                loop {
                    let block = {
                        let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
                        loop {
                            if let Some(block) = q.blocks.pop_front() {
                                q.busy += 1;
                                break Some(block);
                            }
                            if q.busy == 0 {
                                break None;
                            }
                            q = wake.wait(q).unwrap_or_else(|p| p.into_inner());
                        }
                    };
                    let Some((index, mut items)) = block else {
                        wake.notify_all();
                        return;
                    };
                    let mut outcomes = Vec::with_capacity(items.len());
                    let mut found_all = Vec::new();
                    let pre = work.map(|w| w.pre(&items));
                    let failed = pre.as_ref().map_or(&[][..], |p| &p.failed[..]);
                    let to_act = if failed.is_empty() {
                        // The block's items are needed again after the
                        // actions only to decide its volumes.
                        if work.is_some() {
                            items.clone()
                        } else {
                            std::mem::take(&mut items)
                        }
                    } else {
                        for item in &items {
                            outcomes.push(ItemOutcome {
                                id: item.id.clone(),
                                errors: thin_vec![format!(
                                    "item {}: not backed up: a pre hook of its block failed it (rule: hook onError Fail): {}",
                                    item.id,
                                    failed.join("; ")
                                )],
                                block: index,
                                ..ItemOutcome::default()
                            });
                        }
                        Vec::new()
                    };
                    for item in to_act {
                        let id = item.id.clone();
                        // A panic in host code on this thread (a cluster
                        // reader, a host call a plugin made) fails this item
                        // only. Left to unwind, it would end the worker with
                        // the block still counted busy, and the other
                        // workers would wait for it for ever.
                        let acted =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                backup_one(
                                    &mut instances,
                                    item,
                                    backup,
                                    &claimed,
                                    follow.as_ref(),
                                    clock,
                                )
                            }));
                        let (mut outcome, found) = acted.unwrap_or_else(|panic| {
                            // The instances may have been mid-call: start afresh.
                            instances = fresh_instances(plugins, cluster);
                            let outcome = ItemOutcome {
                                errors: thin_vec![format!(
                                    "item {id}: host code panicked while running the actions on it: {} (rule: host-panic)",
                                    panic_message(panic.as_ref())
                                )],
                                id,
                                ..ItemOutcome::default()
                            };
                            (outcome, Vec::new())
                        });
                        outcome.block = index;
                        outcomes.push(outcome);
                        found_all.extend(found);
                    }
                    if let (Some(w), Some(pre)) = (work, pre) {
                        w.start_volumes(pre, &items);
                    }
                    if let Some(p) = progress {
                        let stored = outcomes.iter().filter(|o| o.stored.is_some()).count();
                        p.backed_up.fetch_add(stored as u64, Ordering::Relaxed);
                        p.total.fetch_add(found_all.len() as u64, Ordering::Relaxed);
                    }
                    if let Some(sink) = sink {
                        outcomes.iter_mut().for_each(sink);
                    }
                    let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
                    for item in found_all {
                        let i = q.next_index;
                        q.next_index += 1;
                        q.blocks.push_back((i, vec![item]));
                    }
                    q.busy -= 1;
                    q.outcomes.extend(outcomes);
                    drop(q);
                    wake.notify_all();
                }
            });
        }
    });
    let mut outcomes = queue
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .outcomes;
    // Unstable: ids are unique (each item is claimed once), and a stable
    // sort takes a buffer as large as the outcomes (8 MB at 50,000 items,
    // held at the backup's peak).
    outcomes.sort_unstable_by(|a, b| a.id.cmp(&b.id));
    output.outcomes = outcomes;
    output
}

#[cfg(test)]
mod tests {
    use super::*;
    use iar_core::catalog::Catalog;
    use iar_core::{NoCluster, ReadGrants};
    use iar_plugin::plugin::{Call, Phase, PluginSettings};
    use iar_plugin::{Runtime, RuntimeConfig};
    use std::io::Write;

    fn item(value: serde_json::Value) -> Item {
        Item::from_value(value, Catalog::builtin()).unwrap()
    }

    fn items() -> Vec<Item> {
        vec![
            item(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "web-config", "namespace": "shop"}, "data": {"a": "b"}})),
            item(serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "db", "namespace": "shop"}, "data": {"password": "aHVudGVyMg=="}})),
            item(serde_json::json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": "shop"}, "spec": {}})),
        ]
    }

    /// The labels plugin with an empty applies-to (every item), labelling
    /// what it is handed `seen=yes`, under `grants`.
    fn labels(runtime: &Runtime, grants: ReadGrants) -> Plugin {
        let settings = PluginSettings {
            config: [("labels".to_string(), "seen=yes".to_string())].into(),
            grants,
            // What it is handed it labels, a Secret too (under the read
            // grant): an item change on every resource.
            mutate_grants: iar_core::cluster::mutate::MutateGrants::only(&["*", "secrets"])
                .unwrap(),
            ..PluginSettings::default()
        };
        let plugin =
            Plugin::from_file(runtime, iar_tests::artifacts::LABELS.as_ref(), settings).unwrap();
        assert_eq!(
            plugin.applies_to(),
            &iar_core::select::applies_to::ResourceSelector::default()
        );
        plugin
    }

    /// Items are reads: a plugin is handed only the items its read grants
    /// allow. With the default grant (`*`) or an explicit `*`, a plugin
    /// whose applies-to is empty is never handed the Secret (a glob does
    /// not grant Secrets); granted only ConfigMaps, only the ConfigMap;
    /// granted `secrets` by name, the Secret too. Every item is backed
    /// up either way, one the plugin was not handed as it was.
    #[test]
    fn a_plugin_is_handed_only_the_items_its_read_grants_allow() {
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: None,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let cluster: Arc<dyn ClusterReader> = Arc::new(NoCluster);
        let backup = BackupRef {
            object: None,
            name: "b".into(),
            namespace: "velero".into(),
            uid: "u".into(),
            spec: serde_json::json!({}),
            phase: Phase::Backup,
        };
        for (grants, labelled) in [
            (ReadGrants::default(), &["configmaps", "services"][..]),
            (
                ReadGrants::only(&["*"]).unwrap(),
                &["configmaps", "services"],
            ),
            (ReadGrants::only(&["configmaps"]).unwrap(), &["configmaps"]),
            (
                ReadGrants::only(&["configmaps", "secrets"]).unwrap(),
                &["configmaps", "secrets"],
            ),
        ] {
            let patterns: Vec<String> = grants.patterns().map(String::from).collect();
            let plugin = labels(&runtime, grants);
            let out = run(
                &[plugin],
                items(),
                &backup,
                &cluster,
                2,
                true,
                &[],
                None,
                None,
                None,
                None,
            );
            assert_eq!(out.outcomes.len(), 3, "{patterns:?}");
            for o in &out.outcomes {
                assert!(o.errors.is_empty(), "{patterns:?}: {:?}", o.errors);
                let stored = o.stored.as_ref().expect("backed up");
                let seen = stored.value().pointer("/metadata/labels/seen").is_some();
                assert_eq!(
                    seen,
                    labelled.contains(&o.id.resource.as_str()),
                    "{patterns:?}: {}",
                    o.id
                );
                if o.id.resource == "secrets" {
                    assert_eq!(stored.value()["data"]["password"], "aHVudGVyMg==");
                }
            }
        }
    }

    /// An item kept from a plugin by its grants is logged at debug with
    /// the plugin, the item and the rule.
    #[test]
    fn an_item_kept_from_a_plugin_is_logged_with_the_rule() {
        #[derive(Clone, Default)]
        struct Captured(Arc<Mutex<Vec<u8>>>);
        impl Write for Captured {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: None,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let plugin = labels(&runtime, ReadGrants::default());
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let secret = items().remove(1);
        let applies = tracing::subscriber::with_default(subscriber, || plugin.applies(&secret));
        assert!(!applies);
        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(
            log.contains("DEBUG")
                && log.contains(&format!("plugin={}", plugin.name()))
                && log.contains("item=secrets shop/db")
                && log.contains("rule=\"read-grant\"")
                && log.contains("call=execute"),
            "{log}"
        );
        assert!(plugin.may_read(&items()[0], Call::Execute));
    }
}
