//! Item blocks: items that must be backed up together (a Pod, the PVCs it
//! mounts and their PVs, its ServiceAccount), and the claim set that makes
//! every item backed up exactly once across workers, blocks and plugins'
//! additional items.
//!
//! A block grows from the first collected item (in [`ItemRef`] order) that no
//! block holds yet, through related items, transitively. Related items come
//! from the built-in relations below and from any [`Relation`] the caller
//! adds (the 1.1.0 `item-block-action` plugins plug in there). A related item
//! the backup did not collect is read from the cluster; one that does not
//! exist is skipped with a warning.

use iar_core::cluster::{ClusterError, ClusterReader};
use iar_core::item::{Item, ItemRef};
use iar_plugin::plugin::Relation;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::Mutex;

/// Items backed up together. The first is the one the block grew from.
#[derive(Clone, Debug, PartialEq)]
pub struct ItemBlock {
    pub items: Vec<Item>,
}

impl ItemBlock {
    /// The block's Pods: the ones whose hooks and volumes the block owns.
    pub fn pods(&self) -> impl Iterator<Item = &Item> {
        self.items.iter().filter(|i| is(&i.id, "", "pods"))
    }

    pub fn ids(&self) -> Vec<ItemRef> {
        self.items.iter().map(|i| i.id.clone()).collect()
    }
}

/// The blocks of one backup, and what went wrong while forming them.
#[derive(Debug, Default)]
pub struct Blocks {
    pub blocks: Vec<ItemBlock>,
    /// A related item that does not exist: skipped.
    pub warnings: Vec<String>,
    /// A relation or a cluster read that failed: the block is formed
    /// without what it would have added.
    pub errors: Vec<String>,
}

fn is(id: &ItemRef, group: &str, resource: &str) -> bool {
    id.group == group && id.resource == resource
}

fn core(resource: &str, namespace: &str, name: &str) -> ItemRef {
    ItemRef::new("", resource, namespace, name)
}

/// The claim names of a Pod's PVC volumes, in spec order.
pub fn pod_claims(pod: &Value) -> Vec<String> {
    pod.pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.pointer("/persistentVolumeClaim/claimName")?.as_str())
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The built-in relations: Pod → its PVCs and ServiceAccount; PVC → its PV
/// and the collected Pods and PVs that name it; PV → its bound PVC.
fn builtin_related(item: &Item, by_claim: &HashMap<ItemRef, Vec<ItemRef>>) -> Vec<ItemRef> {
    let id = &item.id;
    let mut out = Vec::new();
    // Only these three kinds have built-in relations: any other item is
    // not parsed (it would keep its parse for the rest of the backup).
    let related_kind = ["pods", "persistentvolumeclaims", "persistentvolumes"]
        .iter()
        .any(|r| is(id, "", r));
    if !related_kind {
        return out;
    }
    let v = item.value();
    if is(id, "", "pods") {
        for claim in pod_claims(v) {
            out.push(core("persistentvolumeclaims", &id.namespace, &claim));
        }
        if let Some(sa) = str_at(v, "/spec/serviceAccountName") {
            out.push(core("serviceaccounts", &id.namespace, sa));
        }
    } else if is(id, "", "persistentvolumeclaims") {
        if let Some(pv) = str_at(v, "/spec/volumeName") {
            out.push(core("persistentvolumes", "", pv));
        }
        out.extend(by_claim.get(id).into_iter().flatten().cloned());
    } else if is(id, "", "persistentvolumes")
        && let (Some(ns), Some(name)) = (
            str_at(v, "/spec/claimRef/namespace"),
            str_at(v, "/spec/claimRef/name"),
        )
    {
        out.push(core("persistentvolumeclaims", ns, name));
    }
    out
}

/// An item ordered and found by its id alone.
struct ById(Item);

impl PartialEq for ById {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for ById {}

impl PartialOrd for ById {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ById {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.id.cmp(&other.0.id)
    }
}

impl std::borrow::Borrow<ItemRef> for ById {
    fn borrow(&self) -> &ItemRef {
        &self.0.id
    }
}

/// Forms the blocks of a backup from the items it collected. Deterministic:
/// the same items, cluster and relations give the same blocks in the same
/// order. Blocking (cluster reads, plugin calls): call from a blocking thread.
pub fn form_blocks(
    items: Vec<Item>,
    cluster: &dyn ClusterReader,
    relations: &[&dyn Relation],
) -> Blocks {
    form_blocks_keeping(items, cluster, relations, &|_| true)
}

/// [`form_blocks`], where a related item read from the cluster (not one of
/// `items`) stays in its block only if `keep_read` says so; its own
/// relations are followed either way, so a block grows the same.
pub fn form_blocks_keeping(
    items: Vec<Item>,
    cluster: &dyn ClusterReader,
    relations: &[&dyn Relation],
    keep_read: &dyn Fn(&Item) -> bool,
) -> Blocks {
    // Keyed by the item's own id (no second copy of every identity); of
    // two items with one id, the later one stays, as a map would keep it.
    // The order is the id's alone, which nothing mutates (the item's lazy
    // text and value cells are outside it).
    #[allow(clippy::mutable_key_type)]
    let mut collected: BTreeSet<ById> = BTreeSet::new();
    for i in items {
        collected.replace(ById(i));
    }
    // PVC → the collected Pods mounting it and PVs claimed by it: the
    // reverse of Pod → PVC and PV → PVC, so a block grows the same way
    // whichever of its items sorts first.
    let mut by_claim: HashMap<ItemRef, Vec<ItemRef>> = HashMap::new();
    for ById(i) in &collected {
        if is(&i.id, "", "pods") || is(&i.id, "", "persistentvolumes") {
            for target in builtin_related(i, &HashMap::new()) {
                if is(&target, "", "persistentvolumeclaims") {
                    by_claim.entry(target).or_default().push(i.id.clone());
                }
            }
        }
    }
    let mut out = Blocks::default();
    // Plugin relations of every collected item, asked once up front, and
    // their reverse: an item named by a plugin joins its namer's block even
    // when it sorts first and would otherwise start a block of its own.
    let mut plugin_edges: HashMap<ItemRef, Vec<ItemRef>> = HashMap::new();
    let mut named_by: HashMap<ItemRef, Vec<ItemRef>> = HashMap::new();
    // Without relations there is nothing to ask (and no entry per item).
    for ById(i) in collected.iter().filter(|_| !relations.is_empty()) {
        let more = relate(i, relations, &mut out.errors);
        for target in &more {
            named_by
                .entry(target.clone())
                .or_default()
                .push(i.id.clone());
        }
        plugin_edges.insert(i.id.clone(), more);
    }
    let mut placed: HashSet<ItemRef> = HashSet::new();
    while let Some(ById(first)) = collected.pop_first() {
        placed.insert(first.id.clone());
        let mut block = Vec::new();
        // Each with whether it was read from the cluster.
        let mut queue = VecDeque::from([(first, false)]);
        while let Some((item, read_here)) = queue.pop_front() {
            let mut related = builtin_related(&item, &by_claim);
            match plugin_edges.remove(&item.id) {
                Some(more) => related.extend(more),
                // Read from the cluster, not collected: asked now.
                None => related.extend(relate(&item, relations, &mut out.errors)),
            }
            if let Some(namers) = named_by.get(&item.id) {
                related.extend(namers.iter().cloned());
            }
            for id in related {
                if !placed.insert(id.clone()) {
                    continue;
                }
                if let Some(ById(found)) = collected.take(&id) {
                    queue.push_back((found, false));
                    continue;
                }
                // A panic in a cluster reader (host code) is an error for
                // this related item, not the end of the backup.
                let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    cluster.get_item(&id)
                }))
                .unwrap_or_else(|panic| {
                    Err(ClusterError::Panicked(
                        panic
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_default(),
                    ))
                });
                match read {
                    Ok(Some(found)) => queue.push_back((found, true)),
                    Ok(None) => out.warnings.push(format!(
                        "item block of {}: related item {id} (named by {}) was not found; skipped",
                        block_root(&block, &item),
                        item.id
                    )),
                    Err(e) => {
                        // Not placed after all: a later block may still find it.
                        placed.remove(&id);
                        out.errors.push(format!(
                            "item block of {}: reading related item {id} (named by {}): {e}",
                            block_root(&block, &item),
                            item.id
                        ))
                    }
                }
            }
            if !read_here || keep_read(&item) {
                block.push(item);
            }
        }
        // Most blocks are one item, and a Vec grows to room for four: at
        // 100,000 blocks that was half the pass's memory.
        block.shrink_to_fit();
        out.blocks.push(ItemBlock { items: block });
    }
    out
}

/// What the plugin relations name for one item; a relation's error is
/// recorded and the others still count.
fn relate(item: &Item, relations: &[&dyn Relation], errors: &mut Vec<String>) -> Vec<ItemRef> {
    let mut related = Vec::new();
    for r in relations {
        match r.related(item) {
            Ok(more) => related.extend(more),
            Err(e) => errors.push(format!(
                "item block relation {}: related items of {}: {e}",
                r.name(),
                item.id
            )),
        }
    }
    related
}

fn block_root<'a>(block: &'a [Item], current: &'a Item) -> &'a ItemRef {
    block.first().map(|i| &i.id).unwrap_or(&current.id)
}

const SHARDS: usize = 16;

/// A thread-safe "first one wins" set: [`ClaimSet::claim`] returns true for
/// exactly one caller per key, however many workers, blocks or plugins'
/// additional items name it. Sharded so that workers claiming different
/// items rarely wait on each other. Keys are item refs for items, or
/// `(plugin, operation id)` pairs for operation ids.
pub struct ClaimSet<K = ItemRef> {
    shards: Vec<Mutex<HashSet<K>>>,
    hasher: RandomState,
}

impl<K: Eq + Hash + Clone> Default for ClaimSet<K> {
    fn default() -> Self {
        ClaimSet {
            shards: (0..SHARDS).map(|_| Mutex::new(HashSet::new())).collect(),
            hasher: RandomState::new(),
        }
    }
}

impl<K: Eq + Hash + Clone> ClaimSet<K> {
    pub fn new() -> Self {
        Self::default()
    }

    fn shard(&self, key: &K) -> std::sync::MutexGuard<'_, HashSet<K>> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        // A panic elsewhere cannot leave a half-inserted set: recover it.
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True if this call is the first to claim `key`: the caller backs it up.
    pub fn claim(&self, key: &K) -> bool {
        let mut shard = self.shard(key);
        if shard.contains(key) {
            return false;
        }
        shard.insert(key.clone())
    }

    pub fn contains(&self, key: &K) -> bool {
        self.shard(key).contains(key)
    }

    /// Releases a claim, for an item whose backup is to be retried by
    /// whoever claims it next.
    pub fn release(&self, key: &K) -> bool {
        self.shard(key).remove(key)
    }

    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests;
