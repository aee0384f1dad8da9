//! One pass of item actions over a set of items, on a pool of worker
//! threads. Each worker owns one instance per plugin, reused across the
//! items of this backup. Used by the first pass (phase backup, additional
//! items followed) and by finalize (phase finalize, post-operation items).

use crate::cluster::ClusterReader;
use crate::item::{Item, ItemRef};
use crate::plugin::{BackupRef, Plugin, PluginInstance};
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex};

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
    /// The item as the actions left it; `None` when an action failed it.
    pub stored: Option<serde_json::Value>,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    pub operations: Vec<StartedOperation>,
    /// What the plugins logged while acting on it, as `plugin: message`.
    pub logs: Vec<String>,
}

/// Runs every applicable action on one item, in plugin order; each sees the
/// item as the previous one left it. An action error fails the item (it is
/// not stored), as in Velero.
fn act_on_item(
    instances: &mut [PluginInstance],
    item: Item,
    backup: &BackupRef,
    claimed: &Mutex<HashSet<(String, String)>>,
    additional: &mut Vec<ItemRef>,
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
        let claim = |id: &str| {
            !claimed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert((plugin.clone(), id.to_string()))
        };
        let result = instance.execute(&current, backup, &claim);
        outcome.logs.extend(
            instance
                .take_logs()
                .into_iter()
                .map(|l| format!("plugin {plugin}: {}: {}", l.level, l.message)),
        );
        match result {
            Ok(out) => {
                if let Some(changed) = out.item {
                    current.value = changed;
                }
                additional.extend(out.additional_items);
                if let Some(operation_id) = out.operation_id {
                    outcome.operations.push(StartedOperation {
                        plugin,
                        item: current.id.clone(),
                        operation_id,
                        post_operation_items: out.post_operation_items,
                        created: std::time::SystemTime::now(),
                    });
                }
            }
            Err(e) => {
                outcome.errors.push(e.to_string());
                return outcome;
            }
        }
    }
    outcome.stored = Some(current.value);
    outcome
}

/// Acts on one item and, with `follow_additional`, reads the additional
/// items it names that no one has claimed yet. Returns its outcome and the
/// items found.
fn backup_one(
    instances: &mut [PluginInstance],
    item: Item,
    backup: &BackupRef,
    claimed: &Mutex<HashSet<(String, String)>>,
    queue: &Mutex<Queue>,
    cluster: &Arc<dyn ClusterReader>,
    follow_additional: bool,
) -> (ItemOutcome, Vec<Item>) {
    let mut additional = Vec::new();
    let mut outcome = act_on_item(instances, item, backup, claimed, &mut additional);
    let mut found = Vec::new();
    if !follow_additional {
        return (outcome, found);
    }
    // A name Kubernetes would refuse is not looked up, nor backed up.
    additional.retain(|id| match crate::store::tarball::item_path(id) {
        Ok(_) => true,
        Err(e) => {
            outcome
                .errors
                .push(format!("additional item named by {}: {e}", outcome.id));
            false
        }
    });
    let fresh: Vec<ItemRef> = {
        let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
        additional
            .into_iter()
            .filter(|id| q.seen.insert(id.clone()))
            .collect()
    };
    // Cluster reads happen outside the queue lock.
    for id in fresh {
        match cluster.get_item(&id) {
            Ok(Some(item)) => found.push(item),
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
    items: VecDeque<Item>,
    busy: usize,
    seen: HashSet<ItemRef>,
    outcomes: Vec<ItemOutcome>,
}

/// Runs the actions over `items` with `workers` threads. With
/// `follow_additional`, additional items are read from `cluster` and backed
/// up too, each at most once. Blocking: call from a blocking thread.
pub fn run(
    plugins: &[Plugin],
    items: Vec<Item>,
    backup: &BackupRef,
    cluster: &Arc<dyn ClusterReader>,
    workers: usize,
    follow_additional: bool,
) -> Vec<ItemOutcome> {
    let seen = items.iter().map(|i| i.id.clone()).collect();
    let queue = Mutex::new(Queue {
        items: items.into(),
        busy: 0,
        seen,
        outcomes: Vec::new(),
    });
    let wake = Condvar::new();
    let claimed = Mutex::new(HashSet::new());
    std::thread::scope(|scope| {
        for _ in 0..workers.max(1) {
            scope.spawn(|| {
                let mut instances: Vec<PluginInstance> = plugins
                    .iter()
                    .map(|p| p.instance(cluster.clone()))
                    .collect();
                loop {
                    let item = {
                        let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
                        loop {
                            if let Some(item) = q.items.pop_front() {
                                q.busy += 1;
                                break Some(item);
                            }
                            if q.busy == 0 {
                                break None;
                            }
                            q = wake.wait(q).unwrap_or_else(|p| p.into_inner());
                        }
                    };
                    let Some(item) = item else {
                        wake.notify_all();
                        return;
                    };
                    let id = item.id.clone();
                    // A panic in host code on this thread (a cluster reader,
                    // a host call a plugin made) fails this item only. Left
                    // to unwind, it would end the worker with the item
                    // still counted busy, and the other workers would wait
                    // for it for ever.
                    let acted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        backup_one(
                            &mut instances,
                            item,
                            backup,
                            &claimed,
                            &queue,
                            cluster,
                            follow_additional,
                        )
                    }));
                    let (outcome, found) = acted.unwrap_or_else(|panic| {
                        // The instances may have been mid-call: start afresh.
                        instances = plugins
                            .iter()
                            .map(|p| p.instance(cluster.clone()))
                            .collect();
                        let outcome = ItemOutcome {
                            errors: vec![format!(
                                "item {id}: host code panicked while running the actions on it: {} (rule: host-panic)",
                                panic_message(panic.as_ref())
                            )],
                            id,
                            ..ItemOutcome::default()
                        };
                        (outcome, Vec::new())
                    });
                    let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
                    q.items.extend(found);
                    q.busy -= 1;
                    q.outcomes.push(outcome);
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
    outcomes.sort_by(|a, b| a.id.cmp(&b.id));
    outcomes
}
