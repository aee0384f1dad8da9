//! The cluster host calls of contract 1.2.0 (`cluster-write`'s create and
//! delete, `cluster-list`), 1.4.0's update and patch, and the accounting
//! every cluster call shares (the host-call count, the wall-clock budget,
//! identifiers, read grants). The rules a write must pass live in
//! `cluster::writes`.

use super::State;
use crate::contract::latest::cluster_write::{PatchType, WriteError};
use crate::contract::v1::types;
use crate::sandbox::HostCallLimit;
use iar_core::cluster::writes::{self, ChangeError, CreatedObject, PatchKind};
use iar_core::cluster::{ClusterError, Created};
use iar_core::item::ItemRef;
use serde_json::Value;
use std::time::Duration;

pub(super) fn to_ref(id: types::ResourceIdentifier) -> ItemRef {
    ItemRef::new(id.group, id.resource, id.namespace, id.name)
}

impl State {
    /// Counts one host call against `maxHostCalls`; past it the call traps.
    pub(super) fn count_host_call(&mut self) -> wasmtime::Result<()> {
        self.host_calls += 1;
        if self.host_calls > self.max_host_calls {
            return Err(HostCallLimit {
                limit: self.max_host_calls,
            }
            .into());
        }
        Ok(())
    }

    /// What is left of the call's ceiling for one cluster request; none:
    /// the call stops.
    pub(super) fn budget(&self) -> wasmtime::Result<Duration> {
        self.wall_left().ok_or_else(|| self.past_ceiling())
    }

    /// After a cluster request: a request that ended past the ceiling
    /// stops the call, whatever it answered.
    pub(super) fn still_within(&self) -> wasmtime::Result<()> {
        self.budget().map(|_| ())
    }

    /// Reads (`cluster-get`, `list`) only of what the plugin was granted.
    pub(super) fn may_read(&self, gr: &iar_core::catalog::GroupResource) -> Result<(), String> {
        if self.grants.allows(gr) {
            Ok(())
        } else {
            Err(format!(
                "reading {gr} is not granted to this plugin (rule: {})",
                crate::plugin::READ_GRANT_RULE
            ))
        }
    }

    /// Kubernetes' naming rules on an identifier a guest passed, before
    /// it reaches a grant or a URL.
    pub(super) fn identifier(what: &str, id: &ItemRef) -> Result<(), String> {
        iar_core::identifier::check(id).map_err(|part| {
            format!(
                "{what} refused: {part} (rule: {})",
                iar_core::identifier::RULE
            )
        })
    }

    fn create(&mut self, id: &ItemRef, object: &str) -> wasmtime::Result<Result<String, String>> {
        if let Err(e) = Self::identifier("create", id) {
            return Ok(Err(e));
        }
        let object = match writes::prepare_create(
            &self.write_scope,
            &self.write_grants,
            id,
            object,
            self.max_item_bytes,
        ) {
            Ok(object) => object,
            Err(refused) => return Ok(Err(refused.to_string())),
        };
        if let Err(refused) = writes::claim_create(&self.write_scope, self.max_creates) {
            return Ok(Err(refused.to_string()));
        }
        let budget = self.budget()?;
        let answer = self.cluster.create_within(id, object, budget);
        self.still_within()?;
        let (object, new) = match answer {
            Ok(Created::New(object)) => (object, true),
            Ok(Created::Existing(object)) => (object, false),
            Err(e) => {
                writes::refund_create(&self.write_scope);
                return Ok(Err(format!("creating {id}: {e}")));
            }
        };
        if !new {
            writes::refund_create(&self.write_scope);
        }
        // An object of that name that is not this plugin's, for this
        // backup, is neither returned nor recorded.
        if !new && !writes::is_own(&object, &self.write_scope) {
            return Ok(Err(
                writes::not_own("create", id, &self.write_scope).to_string()
            ));
        }
        let record = CreatedObject {
            plugin: self.write_scope.plugin.clone(),
            id: id.clone(),
            uid: writes::uid_of(&object),
        };
        if !self.created.contains(&record) {
            self.created.push(record);
        }
        Ok(Ok(iar_core::item::json_text(&object)))
    }

    /// A create whose identifier has no name (contract 1.4.0): the host
    /// names it from `metadata.generateName`, as the API server would, and
    /// draws again when the name is taken by an object not this plugin's.
    fn create_generated(
        &mut self,
        id: ItemRef,
        object: &str,
    ) -> wasmtime::Result<Result<String, String>> {
        let prefix = match writes::generate_name_prefix(&id, object) {
            Ok(prefix) => prefix,
            Err(refused) => return Ok(Err(refused.to_string())),
        };
        let mut object: Value = match serde_json::from_str(object) {
            Ok(v) => v,
            Err(e) => return Ok(Err(format!("creating {id}: the object is not JSON: {e}"))),
        };
        let conflict = format!("(rule: {})", writes::rule::CONFLICT);
        let mut answer = Ok(String::new());
        for _ in 0..GENERATE_TRIES {
            let named = ItemRef::new(
                id.group.clone(),
                id.resource.clone(),
                id.namespace.clone(),
                writes::generated_name(&prefix),
            );
            if let Some(meta) = object["metadata"].as_object_mut() {
                meta.remove("generateName");
                meta.insert("name".into(), Value::String(named.name.clone()));
            }
            answer = State::create(self, &named, &iar_core::item::json_text(&object))?;
            match &answer {
                Err(e) if e.ends_with(&conflict) => continue,
                _ => break,
            }
        }
        Ok(answer)
    }

    fn delete(&mut self, id: &ItemRef) -> wasmtime::Result<Result<bool, String>> {
        if let Err(e) = Self::identifier("delete", id) {
            return Ok(Err(e));
        }
        if let Err(refused) = writes::check_delete(&self.write_scope, &self.write_grants, id) {
            return Ok(Err(refused.to_string()));
        }
        let found = match self.read_object(id)? {
            Ok(None) => return Ok(Ok(false)),
            Ok(Some((_, found))) => found,
            Err(ReadFailed::Cluster(e)) => return Ok(Err(format!("deleting {id}: {e}"))),
            Err(ReadFailed::NotJson(e)) => {
                return Ok(Err(format!("deleting {id}: reading it: {e}")));
            }
        };
        if !writes::is_own(&found, &self.write_scope) {
            return Ok(Err(
                writes::not_own("delete", id, &self.write_scope).to_string()
            ));
        }
        let budget = self.budget()?;
        let answer = self
            .cluster
            .delete_within(id, &writes::uid_of(&found), budget);
        self.still_within()?;
        Ok(answer.map_err(|e| format!("deleting {id}: {e}")))
    }

    /// The object `id` names as the cluster holds it, its text and its
    /// value, read within what is left of the call's ceiling (past it the
    /// call stops); `None` when it does not exist. What delete, update,
    /// patch and read-own decide ownership on.
    pub(super) fn read_object(
        &mut self,
        id: &ItemRef,
    ) -> wasmtime::Result<Result<Option<Found>, ReadFailed>> {
        let budget = self.budget()?;
        let found = self.cluster.get_json_within(id, budget);
        self.still_within()?;
        Ok(match found {
            Ok(None) => Ok(None),
            Ok(Some(text)) => match serde_json::from_str(&text) {
                Ok(value) => Ok(Some((text, value))),
                Err(e) => Err(ReadFailed::NotJson(e)),
            },
            Err(e) => Err(ReadFailed::Cluster(e)),
        })
    }

    /// Contract 1.4.0's `update` and `patch`: checked, then counted against
    /// the plugin's writes in the backup (given back when nothing was
    /// written), then read, changed and written at the version read.
    fn change(
        &mut self,
        id: &ItemRef,
        change: Change<'_>,
    ) -> wasmtime::Result<Result<String, ChangeError>> {
        let verb = change.verb();
        if let Err(part) = iar_core::identifier::check(id) {
            return Ok(Err(writes::WriteRefused {
                rule: iar_core::identifier::RULE,
                message: format!("{verb} refused: {part}"),
            }
            .into()));
        }
        let checked = writes::check_change(
            verb,
            &self.write_scope,
            &self.write_grants,
            id,
            change.len(),
            self.max_item_bytes,
        )
        .and_then(|()| match change {
            Change::Update(text) => writes::parse_update(id, text).map(Change::Updated),
            Change::Patch(kind, _) => writes::check_patch_kind(id, kind).map(|()| change),
            Change::Updated(_) => Ok(change),
        });
        let change = match checked {
            Ok(change) => change,
            Err(refused) => return Ok(Err(refused.into())),
        };
        if let Err(refused) = writes::claim_create(&self.write_scope, self.max_creates) {
            return Ok(Err(refused.into()));
        }
        let written = self.change_claimed(id, &change);
        if !matches!(written, Ok(Ok(_))) {
            writes::refund_create(&self.write_scope);
        }
        written
    }

    fn change_claimed(
        &mut self,
        id: &ItemRef,
        change: &Change<'_>,
    ) -> wasmtime::Result<Result<String, ChangeError>> {
        let verb = change.verb();
        // A patch without a version applies to the object as it is: a
        // change between the read and the write is read again, as the API
        // server retries its own patches.
        let tries = match change {
            Change::Patch(_, body) if !patch_names_version(body) => PATCH_TRIES,
            _ => 1,
        };
        let mut last = None;
        for _ in 0..tries {
            let current = match self.read_object(id)? {
                Ok(Some((_, current))) => current,
                Ok(None) => {
                    return Ok(Err(ChangeError::NotFound(format!(
                        "{verb} {id}: no such object"
                    ))));
                }
                Err(ReadFailed::Cluster(e)) => return Ok(Err(cluster_error(verb, id, e))),
                Err(ReadFailed::NotJson(e)) => {
                    return Ok(Err(ChangeError::Unavailable(format!(
                        "{verb} {id}: reading it: {e}"
                    ))));
                }
            };
            if !writes::is_own(&current, &self.write_scope) {
                return Ok(Err(writes::WriteRefused {
                    rule: writes::rule::UPDATE_NOT_OWN,
                    message: format!(
                        "{verb} {id}: it is not an object plugin {} created for backup {}",
                        self.write_scope.plugin, self.write_scope.backup_name
                    ),
                }
                .into()));
            }
            let wanted = match change {
                Change::Updated(object) => object.clone(),
                Change::Patch(kind, body) => match writes::apply_patch(id, &current, *kind, body) {
                    Ok(v) => v,
                    Err(e) => return Ok(Err(e)),
                },
                Change::Update(_) => unreachable!("parsed by change()"),
            };
            // The version the plugin wrote over: the one it named, else the
            // one just read.
            let named = writes::resource_version(&wanted).map(str::to_string);
            let read = writes::resource_version(&current).unwrap_or("").to_string();
            if let Some(named) = &named
                && *named != read
            {
                return Ok(Err(ChangeError::Conflict(format!(
                    "{verb} {id}: the object is at version {read:?}, not {named:?}: it changed since it was read"
                ))));
            }
            let mut object = match writes::rebase(verb, &self.write_scope, id, &current, wanted) {
                Ok(object) => object,
                Err(refused) => return Ok(Err(refused.into())),
            };
            if let Some(meta) = object["metadata"].as_object_mut() {
                meta.insert("resourceVersion".into(), Value::String(read));
            }
            let budget = self.budget()?;
            let answer = self.cluster.replace_within(id, object, budget);
            self.still_within()?;
            match answer {
                Ok(written) => return Ok(Ok(iar_core::item::json_text(&written))),
                Err(ClusterError::Conflict(m)) => last = Some(ChangeError::Conflict(m)),
                Err(e) => return Ok(Err(cluster_error(verb, id, e))),
            }
        }
        Ok(Err(last.expect("at least one try")))
    }
}

/// An object [`State::read_object`] found: its text, as the cluster gave
/// it, and its value.
pub(super) type Found = (std::sync::Arc<str>, Value);

/// Why [`State::read_object`] has no object to give.
pub(super) enum ReadFailed {
    Cluster(ClusterError),
    NotJson(serde_json::Error),
}

/// Names drawn for one create by `generateName`, at most.
const GENERATE_TRIES: usize = 3;

/// Reads, applies and writes of one patch without a version, at most.
const PATCH_TRIES: usize = 3;

/// An update's object or a patch's body, as the guest sent it.
enum Change<'a> {
    Update(&'a str),
    Updated(Value),
    Patch(PatchKind, &'a str),
}

impl Change<'_> {
    fn verb(&self) -> &'static str {
        match self {
            Change::Update(_) | Change::Updated(_) => "updating",
            Change::Patch(..) => "patching",
        }
    }

    fn len(&self) -> usize {
        match self {
            Change::Update(text) | Change::Patch(_, text) => text.len(),
            Change::Updated(_) => 0,
        }
    }
}

/// Whether a patch's body names the version it applies to (a merge
/// patch's `metadata.resourceVersion`; a JSON patch's `test` of it).
fn patch_names_version(body: &str) -> bool {
    match serde_json::from_str::<Value>(body) {
        Ok(Value::Object(o)) => o
            .get("metadata")
            .and_then(|m| m.get("resourceVersion"))
            .is_some_and(|v| !v.is_null()),
        Ok(Value::Array(ops)) => ops.iter().any(|op| {
            op["path"] == "/metadata/resourceVersion"
                && matches!(op["op"].as_str(), Some("test" | "replace" | "add"))
        }),
        _ => false,
    }
}

/// A cluster's failure as `write-error`: what the writer acts on apart.
fn cluster_error(verb: &str, id: &ItemRef, e: ClusterError) -> ChangeError {
    let text = format!("{verb} {id}: {e}");
    match e {
        ClusterError::Conflict(_) => ChangeError::Conflict(text),
        ClusterError::NotFound(_) => ChangeError::NotFound(text),
        ClusterError::Invalid(_) => ChangeError::Invalid(text),
        ClusterError::ReadOnly => writes::WriteRefused {
            rule: writes::rule::READ_ONLY,
            message: format!("{verb} {id}: this cluster cannot be written to"),
        }
        .into(),
        ClusterError::Refused(_) | ClusterError::InvalidIdentifier { .. } => {
            ChangeError::Invalid(text)
        }
        _ => ChangeError::Unavailable(text),
    }
}

fn to_wit(e: ChangeError) -> WriteError {
    match e {
        ChangeError::Refused(r) => WriteError::Refused(r.to_string()),
        ChangeError::Conflict(m) => WriteError::Conflict(m),
        ChangeError::NotFound(m) => WriteError::NotFound(m),
        ChangeError::Invalid(m) => WriteError::Invalid(m),
        ChangeError::Unavailable(m) => WriteError::Unavailable(m),
    }
}

/// Most objects one `cluster-list` may return.
pub const MAX_LIST_OBJECTS: usize = 1000;

impl crate::contract::latest::cluster_list::Host for State {
    fn list(
        &mut self,
        group: String,
        resource: String,
        namespace: String,
        label_selector: String,
    ) -> wasmtime::Result<Result<Vec<String>, String>> {
        self.count_host_call()?;
        let gr = iar_core::catalog::GroupResource::new(group, resource);
        // Every part reaches a URL: checked as an identifier's are.
        let probe = ItemRef::new(
            gr.group.clone(),
            gr.resource.clone(),
            namespace.clone(),
            "list",
        );
        if let Err(e) = Self::identifier("cluster-list", &probe) {
            return Ok(Err(e));
        }
        if let Err(e) = self.may_read(&gr) {
            return Ok(Err(e));
        }
        let selector: iar_core::select::labels::LabelSelector = match label_selector.parse() {
            Ok(s) => s,
            Err(e) => {
                return Ok(Err(format!(
                    "cluster-list refused: label selector {label_selector:?}: {e} (rule: label-selector)"
                )));
            }
        };
        let budget = self.budget()?;
        let answer = self
            .cluster
            .list_within(&gr, &namespace, &selector, MAX_LIST_OBJECTS, budget);
        self.still_within()?;
        Ok(answer
            .map(|objects| objects.iter().map(|o| o.to_string()).collect())
            .map_err(|e| e.to_string()))
    }
}

impl crate::contract::latest::cluster_write::Host for State {
    fn create(
        &mut self,
        id: types::ResourceIdentifier,
        object: String,
    ) -> wasmtime::Result<Result<String, String>> {
        self.count_host_call()?;
        let id = to_ref(id);
        if id.name.is_empty() {
            return State::create_generated(self, id, &object);
        }
        State::create(self, &id, &object)
    }

    fn delete(&mut self, id: types::ResourceIdentifier) -> wasmtime::Result<Result<bool, String>> {
        self.count_host_call()?;
        State::delete(self, &to_ref(id))
    }

    fn update(
        &mut self,
        id: types::ResourceIdentifier,
        object: String,
    ) -> wasmtime::Result<Result<String, WriteError>> {
        self.count_host_call()?;
        Ok(State::change(self, &to_ref(id), Change::Update(&object))?.map_err(to_wit))
    }

    fn patch(
        &mut self,
        id: types::ResourceIdentifier,
        kind: PatchType,
        body: String,
    ) -> wasmtime::Result<Result<String, WriteError>> {
        self.count_host_call()?;
        let kind = match kind {
            PatchType::Merge => PatchKind::Merge,
            PatchType::Json => PatchKind::Json,
            PatchType::StrategicMerge => PatchKind::StrategicMerge,
        };
        Ok(State::change(self, &to_ref(id), Change::Patch(kind, &body))?.map_err(to_wit))
    }
}
