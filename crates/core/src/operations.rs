//! Asynchronous item operations: what a plugin started, its progress, and the
//! per-backup map that persists it.
//!
//! The one rule (DESIGN.md, "Operations and persistence"): uploading a
//! backup's operations and updating the map are one atomic step per backup.
//! Velero did it under one lock for all backups, so one slow upload stalled
//! every other backup; here each backup has its own lock.

use crate::item::ItemRef;
use crate::metrics::Metrics;
use crate::store::{BackupFile, BackupStore, StoreError};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::SystemTime;

/// Lifecycle of one operation, serialized as Velero's strings.
///
/// `Canceled` is iar's own (an operation its backup gave up on, cancelled
/// through the plugin): Velero knows only the other four. In the
/// Velero-layout file it is written as `Failed` with the error
/// `canceled: <reason>` (see [`OperationStatus`]), and read back as
/// `Canceled`, so `iar describe` and a resumed backup still see it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OperationPhase {
    New,
    InProgress,
    Completed,
    Failed,
    Canceled,
}

/// How a `Canceled` operation's error begins in the Velero-layout file,
/// where its phase is `Failed`.
pub const CANCELED_PREFIX: &str = "canceled: ";

impl OperationPhase {
    pub const ALL: [OperationPhase; 5] = [
        Self::New,
        Self::InProgress,
        Self::Completed,
        Self::Failed,
        Self::Canceled,
    ];

    /// Completed, Failed or Canceled: no more progress calls.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Canceled)
    }

    /// The name, as the `iar_operations{phase}` label shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::New => "New",
            Self::InProgress => "InProgress",
            Self::Completed => "Completed",
            Self::Failed => "Failed",
            Self::Canceled => "Canceled",
        }
    }
}

/// How many operations are in each phase (indexed as
/// [`OperationPhase::ALL`]): what the map adds to or takes from the
/// `iar_operations` gauge when a backup's list changes.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct PhaseCounts([i64; 5]);

impl PhaseCounts {
    fn of(ops: &[Operation]) -> Self {
        let mut c = PhaseCounts::default();
        for op in ops {
            c.0[op.status.phase as usize] += 1;
        }
        c
    }

    /// Moves the gauge of `m` from `self` to `after`.
    fn publish(self, after: PhaseCounts, m: &Metrics) {
        if self == after {
            return;
        }
        for (i, phase) in OperationPhase::ALL.iter().enumerate() {
            m.operations_in_phase(phase.as_str(), after.0[i] - self.0[i]);
        }
    }
}

/// Velero's `itemoperation.BackupOperation`, one entry of
/// `<backup>-itemoperations.json.gz`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    pub spec: OperationSpec,
    pub status: OperationStatus,
}

/// Written with Velero's intended camelCase names. Velero's own Go tags for
/// the last three fields are malformed (`"json:operationID"`), so Velero
/// itself writes `ResourceIdentifier`/`OperationID`/`PostOperationItems` with
/// `Group`/`Resource`/`Namespace`/`Name` inside, and `null` for no items. Go
/// matches names case-insensitively, so Velero reads what we write; the
/// aliases below let us read what Velero writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationSpec {
    pub backup_name: String,
    #[serde(rename = "backupUID")]
    pub backup_uid: String,
    /// The plugin that started the operation.
    pub backup_item_action: String,
    #[serde(alias = "ResourceIdentifier", deserialize_with = "de_ref")]
    pub resource_identifier: ItemRef,
    #[serde(rename = "operationID", alias = "OperationID")]
    pub operation_id: String,
    #[serde(default, alias = "PostOperationItems", deserialize_with = "de_refs")]
    pub post_operation_items: Vec<ItemRef>,
}

/// Velero's `itemoperation.OperationStatus`; every field but the phase is
/// `omitempty` there, so it is here. Serialized in Velero's vocabulary:
/// phase `Canceled` is written `Failed` with the error prefixed by
/// [`CANCELED_PREFIX`], and read back as `Canceled` (a file written before,
/// with `Canceled` itself, still reads).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "StatusWire", from = "StatusWire")]
pub struct OperationStatus {
    pub phase: OperationPhase,
    pub error: String,
    pub n_completed: i64,
    pub n_total: i64,
    pub operation_units: String,
    pub description: String,
    pub created: Option<SystemTime>,
    pub started: Option<SystemTime>,
    pub updated: Option<SystemTime>,
}

/// [`OperationStatus`] as written: the same fields, in Velero's phases.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusWire {
    phase: OperationPhase,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    error: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    n_completed: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    n_total: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    operation_units: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    description: String,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "rfc3339")]
    created: Option<SystemTime>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "rfc3339")]
    started: Option<SystemTime>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "rfc3339")]
    updated: Option<SystemTime>,
}

impl From<OperationStatus> for StatusWire {
    fn from(s: OperationStatus) -> Self {
        let (phase, error) = match s.phase {
            OperationPhase::Canceled => (
                OperationPhase::Failed,
                format!("{CANCELED_PREFIX}{}", s.error),
            ),
            phase => (phase, s.error),
        };
        StatusWire {
            phase,
            error,
            n_completed: s.n_completed,
            n_total: s.n_total,
            operation_units: s.operation_units,
            description: s.description,
            created: s.created,
            started: s.started,
            updated: s.updated,
        }
    }
}

impl From<StatusWire> for OperationStatus {
    fn from(w: StatusWire) -> Self {
        let (phase, error) = match (w.phase, w.error.strip_prefix(CANCELED_PREFIX)) {
            (OperationPhase::Failed, Some(reason)) => {
                (OperationPhase::Canceled, reason.to_string())
            }
            (phase, _) => (phase, w.error),
        };
        OperationStatus {
            phase,
            error,
            n_completed: w.n_completed,
            n_total: w.n_total,
            operation_units: w.operation_units,
            description: w.description,
            created: w.created,
            started: w.started,
            updated: w.updated,
        }
    }
}

impl Operation {
    /// Fails the operation, with the reason, when one of its timestamps
    /// cannot be written (before 1970 or after 9999, from a plugin's
    /// progress) and drops that timestamp. Returns whether it changed.
    /// The boundary refuses such times; this keeps one bad value that got
    /// past it from blocking the persistence of every other operation.
    pub fn fail_unwritable_times(&mut self) -> bool {
        let s = &mut self.status;
        let mut bad = Vec::new();
        for (field, t) in [
            ("created", &mut s.created),
            ("started", &mut s.started),
            ("updated", &mut s.updated),
        ] {
            if t.is_some_and(|t| !rfc3339::in_range(t)) {
                bad.push(field);
                *t = None;
            }
        }
        if bad.is_empty() {
            return false;
        }
        s.phase = OperationPhase::Failed;
        s.error = format!(
            "plugin {:?}, operation {:?} on {}: rule timestamp-range: {} outside 1970..=9999, cannot be persisted",
            self.spec.backup_item_action,
            self.spec.operation_id,
            self.spec.resource_identifier,
            bad.join(", ")
        );
        true
    }

    /// A just-started operation: phase New, created now, no progress yet.
    pub fn new(spec: OperationSpec, created: SystemTime) -> Self {
        Operation {
            spec,
            status: OperationStatus {
                phase: OperationPhase::New,
                error: String::new(),
                n_completed: 0,
                n_total: 0,
                operation_units: String::new(),
                description: String::new(),
                created: Some(created),
                started: None,
                updated: None,
            },
        }
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// A resource identifier in either our lower-case or Velero's Go-default
/// capitalized field names.
#[derive(Deserialize)]
struct RefWire {
    #[serde(default, alias = "Group")]
    group: String,
    #[serde(default, alias = "Resource")]
    resource: String,
    #[serde(default, alias = "Namespace")]
    namespace: String,
    #[serde(default, alias = "Name")]
    name: String,
}

impl From<RefWire> for ItemRef {
    fn from(w: RefWire) -> Self {
        ItemRef::new(w.group, w.resource, w.namespace, w.name)
    }
}

fn de_ref<'de, D: Deserializer<'de>>(d: D) -> Result<ItemRef, D::Error> {
    RefWire::deserialize(d).map(Into::into)
}

/// Velero writes `null` for an operation without post-operation items.
fn de_refs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ItemRef>, D::Error> {
    let refs = Option::<Vec<RefWire>>::deserialize(d)?;
    Ok(refs
        .unwrap_or_default()
        .into_iter()
        .map(Into::into)
        .collect())
}

/// RFC 3339 in UTC (what Go's metav1.Time reads), with fractional seconds only
/// when there are any, so a round trip is exact.
mod rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    pub fn serialize<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
        let Some(t) = *t else {
            return s.serialize_none();
        };
        // Total: `OperationsMap::sync` fails an operation whose times are out
        // of range before writing, so this clamp is only a last resort that
        // keeps one bad value from failing the whole file.
        s.collect_str(&humantime::format_rfc3339(clamp(t)))
    }

    /// The last instant humantime formats (9999-12-31T23:59:59Z); it panics
    /// before 1970 and fails from year 10000 on.
    const MAX: Duration = Duration::from_secs(253_402_300_799);

    pub fn in_range(t: SystemTime) -> bool {
        t.duration_since(UNIX_EPOCH).is_ok_and(|d| d <= MAX)
    }

    fn clamp(t: SystemTime) -> SystemTime {
        match t.duration_since(UNIX_EPOCH) {
            Err(_) => UNIX_EPOCH,
            Ok(d) if d > MAX => UNIX_EPOCH + MAX,
            Ok(_) => t,
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SystemTime>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|s| humantime::parse_rfc3339(&s).map_err(D::Error::custom))
            .transpose()
    }
}

/// One backup's operations and whether they differ from what is persisted.
#[derive(Default)]
struct Entry {
    ops: Vec<Operation>,
    dirty: bool,
}

type Slot = Arc<tokio::sync::Mutex<Entry>>;

/// Per-backup operation lists, one lock per backup.
///
/// Every change is counted into the process's `iar_operations{phase}`
/// gauge as it is made (and taken out again when a backup is removed or
/// the map dropped), so `/metrics` serves the gauge without reading the
/// map.
///
/// The outer std `RwLock` is held only to find or insert a backup's slot,
/// never across an `.await`; each slot has its own tokio mutex, which
/// [`OperationsMap::sync`] holds across the upload.
pub struct OperationsMap {
    backups: RwLock<HashMap<String, Slot>>,
    metrics: &'static Metrics,
}

impl Default for OperationsMap {
    fn default() -> Self {
        Self::with_metrics(crate::metrics::global())
    }
}

impl OperationsMap {
    /// A map counting into the process's metrics.
    pub fn new() -> Self {
        Self::default()
    }

    /// A map counting into `metrics` (a test's own registry).
    pub fn with_metrics(metrics: &'static Metrics) -> Self {
        OperationsMap {
            backups: RwLock::default(),
            metrics,
        }
    }

    fn slot(&self, backup: &str) -> Option<Slot> {
        // A panic elsewhere cannot leave a HashMap half-updated here.
        let map = self.backups.read().unwrap_or_else(PoisonError::into_inner);
        map.get(backup).cloned()
    }

    fn slot_or_insert(&self, backup: &str) -> Slot {
        if let Some(slot) = self.slot(backup) {
            return slot;
        }
        let mut map = self.backups.write().unwrap_or_else(PoisonError::into_inner);
        map.entry(backup.to_owned()).or_default().clone()
    }

    /// Sets a backup's list to what the store holds (after a restart): clean.
    pub async fn insert_loaded(&self, backup: &str, ops: Vec<Operation>) {
        let slot = self.slot_or_insert(backup);
        let mut entry = slot.lock().await;
        PhaseCounts::of(&entry.ops).publish(PhaseCounts::of(&ops), self.metrics);
        entry.ops = ops;
        entry.dirty = false;
    }

    /// Appends a new operation; the backup needs a sync.
    pub async fn add(&self, backup: &str, op: Operation) {
        let slot = self.slot_or_insert(backup);
        let mut entry = slot.lock().await;
        PhaseCounts::default().publish(PhaseCounts::of(std::slice::from_ref(&op)), self.metrics);
        entry.ops.push(op);
        entry.dirty = true;
    }

    /// A deep copy of a backup's operations. Waits for an in-flight sync of
    /// that backup, so a reader sees exactly what is (or is being) persisted
    /// or later, never an interleaving.
    pub async fn get(&self, backup: &str) -> Option<Vec<Operation>> {
        let slot = self.slot(backup)?;
        let entry = slot.lock().await;
        Some(entry.ops.clone())
    }

    /// Runs `f` on a backup's list under its lock; `f` returns whether it
    /// changed anything, which marks the backup dirty and is returned.
    /// Returns false without calling `f` for an unknown backup.
    pub async fn update(&self, backup: &str, f: impl FnOnce(&mut Vec<Operation>) -> bool) -> bool {
        let Some(slot) = self.slot(backup) else {
            return false;
        };
        let mut entry = slot.lock().await;
        let before = PhaseCounts::of(&entry.ops);
        let changed = f(&mut entry.ops);
        before.publish(PhaseCounts::of(&entry.ops), self.metrics);
        entry.dirty |= changed;
        changed
    }

    /// Whether the backup has changes not yet persisted.
    pub async fn is_dirty(&self, backup: &str) -> bool {
        match self.slot(backup) {
            Some(slot) => slot.lock().await.dirty,
            None => false,
        }
    }

    /// Persists a dirty backup's whole list (Velero's
    /// UploadProgressAndPutOperationsForBackup, without its global lock).
    /// Returns Ok(true) when it wrote. On a store error the map keeps its
    /// state and stays dirty, so the next sync retries.
    pub async fn sync(&self, backup: &str, store: &BackupStore) -> Result<bool, StoreError> {
        let Some(slot) = self.slot(backup) else {
            return Ok(false);
        };
        // The backup's lock is held across the upload on purpose: otherwise a
        // reader or updater could slip in between the write and clearing the
        // flag, and a change made then would be marked clean without being
        // persisted (or a reader would see state the store does not have).
        // Only this backup waits; others have their own locks.
        let mut entry = slot.lock().await;
        if !entry.dirty {
            return Ok(false);
        }
        // Every operation serializes: one with unwritable times is failed
        // with the reason rather than failing the file for all the others.
        let before = PhaseCounts::of(&entry.ops);
        for op in entry.ops.iter_mut() {
            op.fail_unwritable_times();
        }
        before.publish(PhaseCounts::of(&entry.ops), self.metrics);
        store
            .put_json(backup, BackupFile::ItemOperations, &entry.ops)
            .await?;
        entry.dirty = false;
        Ok(true)
    }

    /// Replaces a backup's list with the persisted one (after a restart);
    /// no file means no operations. Returns how many were read.
    pub async fn load(&self, backup: &str, store: &BackupStore) -> Result<usize, StoreError> {
        let slot = self.slot_or_insert(backup);
        // Read under the lock so a concurrent sync cannot interleave.
        let mut entry = slot.lock().await;
        let ops: Vec<Operation> = store
            .get_json(backup, BackupFile::ItemOperations)
            .await?
            .unwrap_or_default();
        let n = ops.len();
        PhaseCounts::of(&entry.ops).publish(PhaseCounts::of(&ops), self.metrics);
        entry.ops = ops;
        entry.dirty = false;
        Ok(n)
    }

    /// Forgets a backup, after any in-flight sync of it has finished.
    pub async fn remove(&self, backup: &str) {
        let slot = {
            let mut map = self.backups.write().unwrap_or_else(PoisonError::into_inner);
            map.remove(backup)
        };
        if let Some(slot) = slot {
            let entry = slot.lock().await;
            PhaseCounts::of(&entry.ops).publish(PhaseCounts::default(), self.metrics);
        }
    }

    /// The backups in the map, sorted.
    pub fn backups(&self) -> Vec<String> {
        let map = self.backups.read().unwrap_or_else(PoisonError::into_inner);
        let mut names: Vec<String> = map.keys().cloned().collect();
        names.sort();
        names
    }
}

/// The operations of a dropped map are no longer this process's: they
/// leave the gauge.
impl Drop for OperationsMap {
    fn drop(&mut self) {
        let map = self
            .backups
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for slot in map.values() {
            // Nothing else can hold the lock: every user borrows the map.
            if let Ok(entry) = slot.try_lock() {
                PhaseCounts::of(&entry.ops).publish(PhaseCounts::default(), self.metrics);
            }
        }
    }
}

#[cfg(test)]
mod tests;
