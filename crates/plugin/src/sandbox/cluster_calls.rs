//! The cluster host calls of contract 1.2.0 (`cluster-write`'s create and
//! delete, `cluster-list`) and the accounting every cluster call shares
//! (the host-call count, the wall-clock budget, identifiers, read grants).
//! The rules a write must pass live in `cluster::writes`.

use super::State;
use crate::contract::v1::types;
use crate::sandbox::HostCallLimit;
use iar_core::cluster::Created;
use iar_core::cluster::writes::{self, CreatedObject};
use iar_core::item::ItemRef;
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

    fn delete(&mut self, id: &ItemRef) -> wasmtime::Result<Result<bool, String>> {
        if let Err(e) = Self::identifier("delete", id) {
            return Ok(Err(e));
        }
        if let Err(refused) = writes::check_delete(&self.write_scope, &self.write_grants, id) {
            return Ok(Err(refused.to_string()));
        }
        let budget = self.budget()?;
        let found = self.cluster.get_json_within(id, budget);
        self.still_within()?;
        let found = match found {
            Ok(None) => return Ok(Ok(false)),
            Ok(Some(text)) => serde_json::from_str::<serde_json::Value>(&text)
                .map_err(|e| format!("deleting {id}: reading it: {e}")),
            Err(e) => Err(format!("deleting {id}: {e}")),
        };
        let found = match found {
            Ok(found) => found,
            Err(e) => return Ok(Err(e)),
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
        State::create(self, &to_ref(id), &object)
    }

    fn delete(&mut self, id: types::ResourceIdentifier) -> wasmtime::Result<Result<bool, String>> {
        self.count_host_call()?;
        State::delete(self, &to_ref(id))
    }
}
