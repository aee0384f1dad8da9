//! The contents tarball of a first pass, written as its blocks end: each
//! stored item is compressed into the tarball and dropped, so that what a
//! backup holds per item is its identity and where it went, not its body.

use crate::backup::pass::{ItemOutcome, WrittenItem};
use iar_core::item::{Item, ItemRef};
use iar_core::store::tarball;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// An item as the tarball holds it: compact JSON, as Velero writes items
/// (`json.Marshal`), and the text the item already has when a plugin
/// changed it or it crossed into one, so nothing is serialized again;
/// shared, so its two entries and the item hold one copy.
#[derive(Clone)]
pub(super) struct EntryBytes(std::sync::Arc<str>);

impl AsRef<[u8]> for EntryBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// The tarball entries of one backed-up item, as Velero writes them since
/// format 1.1.0: the plain path and the same bytes under the version the
/// item was read at (`<version>-preferredversion`).
pub(super) fn archive_entries(
    id: &ItemRef,
    item: &Item,
) -> Result<[(String, EntryBytes); 2], String> {
    // From the identity read with the item: no parse of its whole value.
    let versioned = tarball::preferred_version_path(id, item.api_version())?;
    let plain = tarball::item_path(id)?;
    let bytes = EntryBytes(item.json().clone());
    Ok([(plain, bytes.clone()), (versioned, bytes)])
}

/// Velero's resource list key of an item: `<apiVersion>/<kind>`
/// ("v1/ConfigMap", "apps/v1/Deployment"), as `resourceKey` makes it.
pub(super) fn resource_key(item: &Item) -> String {
    format!("{}/{}", item.api_version(), item.kind())
}

/// Takes the first pass's outcomes as their blocks end (the pass's
/// [`crate::backup::pass::OutcomeSink`]) and writes their items out.
///
/// Post-operation items go to the tarball's tail member, which finalize
/// rewrites alone; they are few, and kept in memory until the end. An item
/// is known to be one when an operation named it before it was written;
/// one named only after it was written into the head (another block's
/// operation naming it late) makes [`ContentsSink::finish`] write the
/// tarball as one member, which finalize then rewrites whole.
pub(super) struct ContentsSink {
    state: Mutex<SinkState>,
    head: HeadWriter,
}

struct SinkState {
    tail: Vec<(String, EntryBytes)>,
    post_operation: HashSet<ItemRef>,
    /// The resource-list keys seen so far, each kept once and shared by
    /// the outcomes of its kind.
    keys: HashSet<Arc<str>>,
}

/// How many entries may wait for the head's compressor: past that, a
/// worker waits (its items are the memory the queue holds).
const HEAD_QUEUE: usize = 256;

/// The head member, compressed on a thread of its own: a gzip stream takes
/// its bytes in order, and compressing under the sink's lock had made two
/// item-block workers queue for it (a backup without plugins ran slower on
/// two workers than on one). Workers hand it entries through a bounded
/// queue and go on.
struct HeadWriter {
    queue: std::sync::mpsc::SyncSender<(String, EntryBytes)>,
    /// The writer, and the first write that failed (the tarball is then
    /// not written).
    thread: std::thread::JoinHandle<(tarball::StreamWriter, Option<std::io::Error>)>,
}

impl HeadWriter {
    fn start(mut head: tarball::StreamWriter) -> std::io::Result<HeadWriter> {
        let (queue, entries) = std::sync::mpsc::sync_channel::<(String, EntryBytes)>(HEAD_QUEUE);
        let thread = std::thread::Builder::new()
            .name("iar-tarball".into())
            .spawn(move || {
                let mut failed = None;
                for (path, bytes) in entries {
                    if failed.is_none()
                        && let Err(e) = head.append(&path, bytes.as_ref())
                    {
                        failed = Some(e);
                    }
                }
                (head, failed)
            })?;
        Ok(HeadWriter { queue, thread })
    }

    fn send(&self, entries: impl IntoIterator<Item = (String, EntryBytes)>) {
        for entry in entries {
            // The compressor runs until the queue is dropped, so a send
            // fails only if it panicked, which `finish` reports.
            let _ = self.queue.send(entry);
        }
    }

    /// Waits for every queued entry to be compressed.
    fn finish(self) -> std::io::Result<tarball::StreamWriter> {
        let HeadWriter { queue, thread } = self;
        drop(queue);
        let (head, failed) = thread
            .join()
            .map_err(|_| std::io::Error::other("the tarball's compressor panicked"))?;
        match failed {
            Some(e) => Err(e),
            None => Ok(head),
        }
    }
}

/// The post-operation items `outcome`'s operations name.
fn named_by(outcome: &ItemOutcome) -> impl Iterator<Item = ItemRef> + '_ {
    outcome
        .operations
        .iter()
        .flat_map(|op| op.post_operation_items.iter().cloned())
}

impl ContentsSink {
    /// A tarball that starts with the format version, as Velero's does.
    pub(super) fn new() -> std::io::Result<ContentsSink> {
        let mut head = tarball::StreamWriter::new();
        head.append(tarball::VERSION_PATH, tarball::VERSION)?;
        Ok(ContentsSink {
            state: Mutex::new(SinkState {
                tail: Vec::new(),
                post_operation: HashSet::new(),
                keys: HashSet::new(),
            }),
            head: HeadWriter::start(head)?,
        })
    }

    /// Writes `outcome`'s stored item (if any) and drops it, leaving what
    /// the backup still needs in `outcome.written`. An item whose identity
    /// makes no tarball path gets an error instead.
    ///
    /// The lock is held only to decide where the item goes; a head
    /// item's entries are compressed by the [`HeadWriter`].
    pub(super) fn take(&self, outcome: &mut ItemOutcome) {
        let Some(item) = outcome.stored.take() else {
            self.lock().post_operation.extend(named_by(outcome));
            return;
        };
        let entries = archive_entries(&outcome.id, &item);
        let key = resource_key(&item);
        drop(item);
        let mut state = self.lock();
        state.post_operation.extend(named_by(outcome));
        let entries = match entries {
            Ok(entries) => entries,
            Err(e) => {
                outcome.errors.push(e);
                return;
            }
        };
        let in_head = !state.post_operation.contains(&outcome.id);
        let head_entries = if in_head {
            Some(entries)
        } else {
            state.tail.extend(entries);
            None
        };
        let resource_key = match state.keys.get(key.as_str()) {
            Some(shared) => shared.clone(),
            None => {
                let shared: Arc<str> = key.into();
                state.keys.insert(shared.clone());
                shared
            }
        };
        drop(state);
        if let Some(entries) = head_entries {
            self.head.send(entries);
        }
        outcome.written = Some(WrittenItem {
            resource_key,
            in_head,
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SinkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether an item written into the head was named a post-operation
    /// item afterwards (see [`ContentsSink`]).
    pub(super) fn late_post_operation_items(&self, outcomes: &[ItemOutcome]) -> bool {
        let state = self.lock();
        !state.post_operation.is_empty()
            && outcomes.iter().any(|o| {
                o.written.as_ref().is_some_and(|w| w.in_head)
                    && state.post_operation.contains(&o.id)
            })
    }

    /// The tarball, once every outcome went through [`ContentsSink::take`];
    /// in one member when `late` (see [`ContentsSink`]).
    pub(super) fn finish(self, late: bool) -> std::io::Result<Vec<u8>> {
        let state = self.state.into_inner().unwrap_or_else(|p| p.into_inner());
        let contents = self.head.finish()?.finish(state.tail)?;
        if late {
            tarball::one_member(&contents)
        } else {
            Ok(contents)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::pass::StartedOperation;
    use iar_core::catalog::Catalog;

    fn outcome(kind: &str, resource: &str, name: &str) -> ItemOutcome {
        let group = if kind == "VolumeSnapshot" {
            "snapshot.storage.k8s.io/v1"
        } else {
            "v1"
        };
        let item = Item::from_value(
            serde_json::json!({"apiVersion": group, "kind": kind,
                "metadata": {"name": name, "namespace": "ns"}}),
            Catalog::builtin(),
        )
        .unwrap();
        assert_eq!(item.id.resource, resource);
        ItemOutcome {
            id: item.id.clone(),
            stored: Some(Box::new(item)),
            ..ItemOutcome::default()
        }
    }

    fn naming(mut o: ItemOutcome, post: &ItemOutcome) -> ItemOutcome {
        o.operations.push(StartedOperation {
            plugin: "p".into(),
            item: o.id.clone(),
            operation_id: "op".into(),
            post_operation_items: vec![post.id.clone()],
            created: std::time::SystemTime::UNIX_EPOCH,
        });
        o
    }

    fn paths(contents: &[u8]) -> Vec<String> {
        tarball::read(contents)
            .unwrap()
            .into_iter()
            .map(|(p, _)| p)
            .collect()
    }

    /// What an outcome keeps once written is small, and its resource-list
    /// key is shared by every outcome of its kind: a backup keeps one
    /// outcome per item until the pass ends (issue 21's memory goal).
    #[test]
    fn a_written_outcome_keeps_little_and_shares_its_key() {
        let sink = ContentsSink::new().unwrap();
        let mut outcomes: Vec<ItemOutcome> = (0..3)
            .map(|i| outcome("ConfigMap", "configmaps", &format!("cm-{i}")))
            .collect();
        outcomes.iter_mut().for_each(|o| sink.take(o));
        let key = |o: &ItemOutcome| o.written.as_ref().unwrap().resource_key.clone();
        assert_eq!(&*key(&outcomes[0]), "v1/ConfigMap");
        assert!(
            outcomes
                .iter()
                .all(|o| Arc::ptr_eq(&key(o), &key(&outcomes[0])))
        );
        // An id, a box, five thin lists, a block index, the written record:
        // at most 96 bytes (264 with `Vec`s and an owned id before).
        assert!(
            std::mem::size_of::<ItemOutcome>() <= 96,
            "{}",
            std::mem::size_of::<ItemOutcome>()
        );
    }

    /// Items leave memory as they are taken; a post-operation item named
    /// before it came goes to the tail member, which finalize rewrites
    /// alone; the version file comes first.
    #[test]
    fn items_are_written_as_they_come_and_post_operation_items_last() {
        let sink = ContentsSink::new().unwrap();
        let snapshot = outcome("VolumeSnapshot", "volumesnapshots", "snap");
        let mut outcomes = vec![
            naming(
                outcome("PersistentVolumeClaim", "persistentvolumeclaims", "data"),
                &snapshot,
            ),
            outcome("ConfigMap", "configmaps", "a"),
            snapshot,
        ];
        outcomes.iter_mut().for_each(|o| sink.take(o));
        assert!(outcomes.iter().all(|o| o.stored.is_none()));
        let written: Vec<bool> = outcomes
            .iter()
            .map(|o| o.written.as_ref().unwrap().in_head)
            .collect();
        assert_eq!(written, [true, true, false]);
        assert_eq!(
            outcomes[2].written.as_ref().unwrap().resource_key.as_ref(),
            "snapshot.storage.k8s.io/v1/VolumeSnapshot"
        );
        assert!(!sink.late_post_operation_items(&outcomes));
        let contents = sink.finish(false).unwrap();
        let head = tarball::head_member(&contents).expect("two members");
        let all = paths(&contents);
        assert_eq!(all[0], tarball::VERSION_PATH);
        assert_eq!(all.len(), 1 + 2 * 3);
        // The head member alone (a tar without its trailer) reads as the
        // entries before the tail's.
        let in_head = paths(&contents[..head]);
        assert_eq!(in_head.len(), 1 + 2 * 2);
        assert!(
            in_head.iter().all(|p| !p.contains("volumesnapshots")),
            "the head holds no post-operation item: {in_head:?}"
        );
    }

    /// An item named a post-operation item only after it was written into
    /// the head: the tarball is one member, which finalize rewrites whole,
    /// so the new version replaces it instead of being added beside it.
    #[test]
    fn a_post_operation_item_named_late_makes_one_member() {
        let sink = ContentsSink::new().unwrap();
        let snapshot = outcome("VolumeSnapshot", "volumesnapshots", "snap");
        let claim = naming(
            outcome("PersistentVolumeClaim", "persistentvolumeclaims", "data"),
            &snapshot,
        );
        let mut outcomes = vec![snapshot, claim];
        outcomes.iter_mut().for_each(|o| sink.take(o));
        assert!(sink.late_post_operation_items(&outcomes));
        let contents = sink.finish(true).unwrap();
        assert_eq!(tarball::head_member(&contents), None);
        let replaced = tarball::rewrite(
            &contents,
            &std::collections::BTreeMap::from([(
                tarball::item_path(&outcomes[0].id).unwrap(),
                b"{}".to_vec(),
            )]),
        )
        .unwrap();
        let snapshots = tarball::read(&replaced)
            .unwrap()
            .into_iter()
            .filter(|(p, _)| p == &tarball::item_path(&outcomes[0].id).unwrap())
            .collect::<Vec<_>>();
        assert_eq!(snapshots, [(snapshots[0].0.clone(), b"{}".to_vec())]);
    }

    /// Workers taking items at once, more than the compressor's queue
    /// holds: every item is in the tarball once, under both its paths.
    #[test]
    fn items_taken_by_many_workers_are_each_written_once() {
        let sink = ContentsSink::new().unwrap();
        std::thread::scope(|s| {
            for worker in 0..3 {
                let sink = &sink;
                s.spawn(move || {
                    for i in 0..HEAD_QUEUE {
                        let mut o = outcome("ConfigMap", "configmaps", &format!("cm-{worker}-{i}"));
                        sink.take(&mut o);
                        assert!(o.written.as_ref().unwrap().in_head);
                    }
                });
            }
        });
        let all = paths(&sink.finish(false).unwrap());
        assert_eq!(all[0], tarball::VERSION_PATH);
        let unique: std::collections::BTreeSet<&String> = all.iter().collect();
        assert_eq!(all.len(), 1 + 2 * 3 * HEAD_QUEUE);
        assert_eq!(unique.len(), all.len());
    }
}
