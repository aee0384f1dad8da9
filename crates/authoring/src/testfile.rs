//! The `*.iar-test.yaml` format: which plugin, its settings, and cases that
//! each give an item, a backup, cluster fixtures and what must come back.
//! Unknown fields are errors everywhere, so a misspelt expectation never
//! passes by being ignored.

use iar_core::item::ItemRef;
use iar_plugin::plugin::Phase;
use iar_plugin::plugin::SettingsFile;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One test file.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestFile {
    /// The plugin under test, relative to this file.
    #[serde(default)]
    pub plugin: Option<PathBuf>,
    /// Several plugins; each case then names the one it calls (`plugin:`
    /// in the case, the file stem).
    #[serde(default)]
    pub plugins: Vec<PathBuf>,
    /// The plugin's settings, in the format of `iar backup`'s `NAME.yaml`.
    #[serde(default)]
    pub settings: SettingsFile,
    /// The backup every case belongs to unless it says otherwise.
    #[serde(default)]
    pub backup: Option<BackupSpec>,
    /// Cluster fixtures every case starts with.
    #[serde(default)]
    pub fixtures: Vec<Fixture>,
    pub cases: Vec<Case>,
}

/// The Velero Backup a call belongs to; every field has a default.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct BackupSpec {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub spec: Option<Value>,
}

/// The Velero Restore a restore case belongs to; every field has a
/// default (`spec.backupName` defaults to `iar-test`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct RestoreSpec {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub spec: Option<Value>,
}

/// An object reference in YAML: group and namespace may be left out ("" =
/// core group, cluster-scoped).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ObjectRef {
    pub group: String,
    pub resource: String,
    pub namespace: String,
    pub name: String,
}

impl From<ObjectRef> for ItemRef {
    fn from(r: ObjectRef) -> ItemRef {
        ItemRef::new(r.group, r.resource, r.namespace, r.name)
    }
}

impl From<&ItemRef> for ObjectRef {
    fn from(r: &ItemRef) -> ObjectRef {
        ObjectRef {
            group: r.group.clone(),
            resource: r.resource.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        }
    }
}

/// What `cluster-get` may be asked for.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Fixture {
    /// An object the cluster holds.
    #[serde(default)]
    pub object: Option<Value>,
    /// A manifest file (relative to the test file) of objects the cluster holds.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// An object the cluster does not hold: a read of it answers "not
    /// found" instead of failing the case.
    #[serde(default)]
    pub absent: Option<ObjectRef>,
    /// The case fails unless the plugin reads this fixture.
    #[serde(default)]
    pub expect_get: bool,
}

/// One case.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Case {
    pub name: String,
    /// Which plugin of a multi-plugin file (its file stem).
    #[serde(default)]
    pub plugin: Option<String>,
    #[serde(default)]
    pub item: Option<Value>,
    /// A manifest holding the item, relative to the test file.
    #[serde(default)]
    pub item_file: Option<PathBuf>,
    #[serde(default)]
    pub backup: Option<BackupSpec>,
    #[serde(default = "backup_phase")]
    pub phase: Phase,
    /// Makes the case a restore case (contract 1.3.0): the item is taken
    /// as backed up and given to the restore action as the restore creates
    /// it (its namespace mapping applied, status and server-set metadata
    /// dropped); `poll` and `cancel` steps call the restore's operation.
    #[serde(default)]
    pub restore: Option<RestoreSpec>,
    /// Config for this case only, over the file's settings.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    #[serde(default)]
    pub fixtures: Vec<Fixture>,
    /// Files written by `iar run --record`, replayed as fixtures.
    #[serde(default)]
    pub replay: Vec<PathBuf>,
    /// Reads the plugin must make (each must also be a fixture or absent).
    #[serde(default)]
    pub expected_gets: Vec<ObjectRef>,
    /// CPU budget of each call: the plugin's deadline for this case.
    #[serde(default, with = "duration_opt")]
    pub max_duration: Option<Duration>,
    /// Memory budget: the plugin's memory cap for this case ("16MiB").
    #[serde(default, with = "bytes_opt")]
    pub max_memory: Option<usize>,
    #[serde(default)]
    pub expect: Expect,
    /// An operation's life after execute: polls, fixture changes, cancel,
    /// finalize.
    #[serde(default)]
    pub steps: Vec<Step>,
}

fn backup_phase() -> Phase {
    Phase::Backup
}

/// What execute (or get-related-items) must return.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Expect {
    /// Whether the plugin's applies-to selects the item (default: true).
    pub applies_to: Option<bool>,
    /// The whole output item.
    pub item: Option<Value>,
    /// JSON pointer → value in the output item (the input item when unchanged).
    pub pointers: BTreeMap<String, Value>,
    /// The plugin returned no item.
    pub unchanged: Option<bool>,
    pub additional_items: Option<Vec<ObjectRef>>,
    pub operation_id: Option<String>,
    pub operation_id_pattern: Option<String>,
    /// `true`: no operation id at all.
    pub no_operation: Option<bool>,
    pub post_operation_items: Option<Vec<ObjectRef>>,
    /// get-related-items (item-block-action) instead of execute.
    pub related_items: Option<Vec<ObjectRef>>,
    /// A restore case: whether the action skips the item.
    pub skip_restore: Option<bool>,
    /// A restore case: whether it waits for its additional items.
    pub wait_for_additional_items: Option<bool>,
    pub error: Option<ExpectError>,
    /// The objects the plugin created (contract 1.2.0), in order, over
    /// execute and every step; a create that found the plugin's own object
    /// again counts once. Created objects join the fixtures, so the steps
    /// can `set` their status as a controller would.
    pub created: Option<Vec<ObjectRef>>,
    /// The objects the plugin deleted, in order, over execute and every
    /// step.
    pub deleted: Option<Vec<ObjectRef>>,
}

/// An error the call must end with.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExpectError {
    /// The rule (`plugin-error`, `no-trap`, `cpu-deadline`, ...).
    pub rule: Option<String>,
    /// A substring of the message.
    pub message: Option<String>,
}

/// One step of an operation's life, written as a one-key map
/// (`- poll: {completed: true}`).
#[derive(Debug, Deserialize)]
#[serde(try_from = "StepSpec")]
pub enum Step {
    /// Adds or replaces a cluster object.
    Set(Value),
    /// Removes a cluster object (later reads answer "not found").
    Remove(ObjectRef),
    /// Calls progress on the operation execute started.
    Poll(ExpectProgress),
    /// Calls cancel on it.
    Cancel(ExpectCancel),
    /// Runs the finalize pass on the post-operation items, read from the
    /// fixtures as they are now.
    Finalize(Expect),
}

/// A step as written: exactly one of its fields is set. (A YAML reader
/// takes enums from `!tag`s; a one-key map is what people write.)
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StepSpec {
    set: Option<Value>,
    remove: Option<ObjectRef>,
    poll: Option<ExpectProgress>,
    cancel: Option<ExpectCancel>,
    finalize: Option<Expect>,
}

/// A step with none, or more than one, of its fields set.
#[derive(Debug, thiserror::Error)]
#[error("a step is one of set, remove, poll, cancel, finalize; this one has {0}")]
pub struct StepFields(usize);

impl TryFrom<StepSpec> for Step {
    type Error = StepFields;
    fn try_from(s: StepSpec) -> Result<Step, StepFields> {
        let mut steps = Vec::new();
        steps.extend(s.set.map(Step::Set));
        steps.extend(s.remove.map(Step::Remove));
        steps.extend(s.poll.map(Step::Poll));
        steps.extend(s.cancel.map(Step::Cancel));
        steps.extend(s.finalize.map(Step::Finalize));
        match steps.len() {
            1 => Ok(steps.remove(0)),
            n => Err(StepFields(n)),
        }
    }
}

/// What a progress call must answer; unnamed fields are not checked.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct ExpectProgress {
    pub completed: Option<bool>,
    pub n_completed: Option<i64>,
    pub n_total: Option<i64>,
    pub operation_units: Option<String>,
    pub description: Option<String>,
    /// The operation's own error (a substring); `""` expects none.
    pub failure: Option<String>,
    /// The call itself must fail so.
    pub error: Option<ExpectError>,
}

/// What a cancel call must answer: success unless `error` is given.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExpectCancel {
    pub error: Option<ExpectError>,
}

mod duration_opt {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| humantime::parse_duration(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

mod bytes_opt {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
        let v = Option::<serde_json::Value>::deserialize(d)?;
        match v {
            None => Ok(None),
            Some(serde_json::Value::Number(n)) => n
                .as_u64()
                .map(|n| Some(n as usize))
                .ok_or_else(|| serde::de::Error::custom("maxMemory: not a byte count")),
            Some(serde_json::Value::String(s)) => iar_plugin::limits::parse_bytes(&s)
                .map(Some)
                .map_err(serde::de::Error::custom),
            Some(_) => Err(serde::de::Error::custom(
                "maxMemory: use \"16MiB\" or bytes",
            )),
        }
    }
}

/// The interactions `iar run --record` saw, replayable as fixtures.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Recording {
    pub gets: Vec<RecordedGet>,
}

/// One `cluster-get`: what was asked and what the cluster answered (`null`:
/// not found).
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedGet {
    #[serde(rename = "ref")]
    pub id: ObjectRef,
    pub object: Option<Value>,
}

/// A test file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TestFileError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Parse {
        path: std::path::PathBuf,
        #[source]
        source: Box<iar_core::yaml::Error>,
    },
}

impl TestFile {
    pub fn read(path: &Path) -> Result<TestFile, TestFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| TestFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        iar_core::yaml::from_str(&text).map_err(|e| TestFileError::Parse {
            path: path.to_path_buf(),
            source: Box::new(e),
        })
    }
}
