//! What a plugin may write to the cluster (contract 1.2.0's
//! `cluster-write`): which resources (its write grant), from which call,
//! in which namespace, and which objects are its own. Everything here is
//! decided from the call and the object alone, before any request leaves
//! the host; the cluster then creates or deletes.

use crate::catalog::GroupResource;
use crate::item::ItemRef;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// The label naming the backup an object was created for (its name as a
/// label value: a digest when it is not one).
pub const BACKUP_NAME_LABEL: &str = "iar.dev/backup-name";
/// The label holding the uid of the backup an object was created for: what
/// ownership is decided by (a name may be reused, a uid is not).
pub const BACKUP_UID_LABEL: &str = "iar.dev/backup-uid";
/// The annotation naming the plugin that created an object.
pub const CREATED_BY_ANNOTATION: &str = "iar.dev/created-by";
/// The full name of the backup an object was created for: its label
/// holds a digest for a name that is not a label value, and a digest is
/// itself a valid backup name, so a deletion compares this.
pub const BACKUP_NAME_ANNOTATION: &str = "iar.dev/backup-name";

/// Rule names, as refusals and the docs give them.
pub mod rule {
    pub const GRANT: &str = "write-grant";
    pub const CALL: &str = "write-call";
    pub const FINALIZE: &str = "no-create-in-finalize";
    pub const NAMESPACE: &str = "write-namespace";
    pub const OBJECT: &str = "write-object";
    pub const CONFLICT: &str = "create-conflict";
    pub const NOT_OWN: &str = "delete-not-own";
    pub const READ_ONLY: &str = "cluster-read-only";
    /// A deletion of what a backup created skips an object that does not
    /// say it was created for that backup.
    pub const GC_NOT_OWNER: &str = "gc-not-owner";
    pub const CREATE_LIMIT: &str = "create-limit";
    /// Contract 1.4.0's `update` and `patch`.
    pub const UPDATE_FINALIZE: &str = "no-update-in-finalize";
    pub const UPDATE_NOT_OWN: &str = "update-not-own";
    pub const IDENTITY: &str = "write-identity";
    pub const RESOURCE_VERSION: &str = "update-resource-version";
    pub const PATCH_TYPE: &str = "patch-type";
    pub const GENERATE_NAME: &str = "generate-name";
}

mod changes;
pub use changes::{
    ChangeError, PatchKind, apply_patch, check_change, check_patch_kind, parse_update, rebase,
    resource_version,
};

/// Objects created so far, by (backup name, backup uid, plugin), in this
/// process: `maxCreatesPerBackup` holds across a backup's calls and
/// instances, not only within one call (where `maxHostCalls` bounds it).
/// A few bytes per backup and plugin; never cleared, so a plugin cannot
/// reset its count by being reloaded.
static CREATES: std::sync::LazyLock<std::sync::Mutex<HashMap<CreateKey, usize>>> =
    std::sync::LazyLock::new(Default::default);

/// Backup name, backup uid, plugin.
type CreateKey = (String, String, String);

fn create_key(scope: &WriteScope) -> CreateKey {
    (
        scope.backup_name.clone(),
        scope.backup_uid.clone(),
        scope.plugin.clone(),
    )
}

/// Counts one write (a create, an update or a patch) of `scope`'s plugin
/// in its backup, or refuses it past `max` (rule `create-limit`).
pub fn claim_create(scope: &WriteScope, max: usize) -> Result<(), WriteRefused> {
    let mut creates = CREATES.lock().unwrap_or_else(|p| p.into_inner());
    let n = creates.entry(create_key(scope)).or_insert(0);
    if *n >= max {
        return Err(refuse(
            rule::CREATE_LIMIT,
            format!(
                "plugin {} already created or changed {max} objects in backup {} (maxCreatesPerBackup)",
                scope.plugin, scope.backup_name
            ),
        ));
    }
    *n += 1;
    Ok(())
}

/// Gives back a claim whose write made nothing new (a create that found
/// the object this plugin created before; a write that failed).
pub fn refund_create(scope: &WriteScope) {
    let mut creates = CREATES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = creates.get_mut(&create_key(scope)) {
        *n = n.saturating_sub(1);
    }
}

/// Which resources a plugin may create (and delete what it created), by
/// exact `resource.group` ("volumesnapshots.snapshot.storage.k8s.io",
/// "configmaps"). No glob: a write is granted resource by resource. None
/// by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteGrants {
    allow: Vec<String>,
}

impl WriteGrants {
    /// Exactly these resources; an entry with a glob character, or that is
    /// not `resource` or `resource.group`, is refused.
    pub fn only<S: AsRef<str>>(entries: &[S]) -> Result<Self, super::GrantError> {
        use super::GrantError;
        let mut allow = Vec::new();
        for entry in entries {
            let entry = entry.as_ref();
            if entry.contains(['*', '?', '[', ']']) {
                return Err(GrantError::WriteGlob {
                    entry: entry.to_string(),
                });
            }
            let (resource, group) = entry.split_once('.').unwrap_or((entry, ""));
            crate::names::dns_label(resource)
                .and_then(|()| match group {
                    "" => Ok(()),
                    group => crate::names::dns_subdomain(group),
                })
                .map_err(|source| GrantError::WriteNotAResource {
                    entry: entry.to_string(),
                    source,
                })?;
            allow.push(entry.to_string());
        }
        Ok(WriteGrants { allow })
    }

    pub fn none() -> Self {
        WriteGrants::default()
    }

    pub fn is_empty(&self) -> bool {
        self.allow.is_empty()
    }

    /// The entries as written.
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        self.allow.iter().map(String::as_str)
    }

    pub fn allows(&self, gr: &GroupResource) -> bool {
        let name = gr.to_string();
        self.allow.contains(&name)
    }
}

/// The call a write comes from, as the host set it before entering the
/// guest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum WriteCall {
    /// `applies-to`, `get-related-items`, instantiation: no writes.
    #[default]
    None,
    /// `execute` on an item of `namespace` ("" for a cluster-scoped item).
    Execute {
        namespace: String,
        finalize: bool,
    },
    Progress,
    Cancel,
}

/// Who writes: the plugin, the backup it writes for, and the call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteScope {
    pub plugin: String,
    pub backup_name: String,
    pub backup_uid: String,
    pub call: WriteCall,
}

/// One object a plugin created for a backup, as the backup records it:
/// deleting or cancelling the backup deletes it (with this uid as the
/// precondition, so a newer object of the same name is never deleted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedObject {
    pub plugin: String,
    #[serde(flatten)]
    pub id: ItemRef,
    pub uid: String,
}

/// A write refused by a rule, before or instead of any request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message} (rule: {rule})")]
pub struct WriteRefused {
    pub rule: &'static str,
    pub message: String,
}

fn refuse(rule: &'static str, message: impl Into<String>) -> WriteRefused {
    WriteRefused {
        rule,
        message: message.into(),
    }
}

/// The checks every write makes: the grant, then the call.
fn check_common(
    what: &str,
    scope: &WriteScope,
    grants: &WriteGrants,
    id: &ItemRef,
) -> Result<(), WriteRefused> {
    let gr = id.group_resource();
    if !grants.allows(&gr) {
        return Err(refuse(
            rule::GRANT,
            format!("{what} {id}: {gr} is not in this plugin's allowWrite"),
        ));
    }
    if scope.call == WriteCall::None {
        return Err(refuse(
            rule::CALL,
            format!("{what} {id}: writes are allowed only from execute, progress and cancel"),
        ));
    }
    Ok(())
}

/// Checks a create and returns the object to send: `object` parsed, its
/// identity checked against `id` (filled in where absent), the backup's
/// labels and the plugin's annotation set, and what the API server owns
/// (status, uid, resourceVersion, ...) left out.
pub fn prepare_create(
    scope: &WriteScope,
    grants: &WriteGrants,
    id: &ItemRef,
    object: &str,
    max_bytes: usize,
) -> Result<Value, WriteRefused> {
    check_common("creating", scope, grants, id)?;
    let namespace = match &scope.call {
        WriteCall::Execute {
            finalize: false,
            namespace,
        } => namespace,
        WriteCall::Execute { finalize: true, .. } => {
            return Err(refuse(
                rule::FINALIZE,
                format!("creating {id}: finalize starts nothing and creates nothing"),
            ));
        }
        _ => {
            return Err(refuse(
                rule::CALL,
                format!("creating {id}: objects are created only from execute"),
            ));
        }
    };
    if !id.namespace.is_empty() && id.namespace != *namespace {
        let item = if namespace.is_empty() {
            "a cluster-scoped item".to_string()
        } else {
            format!("an item of namespace {namespace:?}")
        };
        return Err(refuse(
            rule::NAMESPACE,
            format!("creating {id}: a plugin executing on {item} creates only in that namespace"),
        ));
    }
    if object.len() > max_bytes {
        return Err(refuse(
            rule::OBJECT,
            format!(
                "creating {id}: the object is {} bytes, over the plugin's maxItemBytes {max_bytes}",
                object.len()
            ),
        ));
    }
    let bad = |why: String| refuse(rule::OBJECT, format!("creating {id}: {why}"));
    let mut value: Value =
        serde_json::from_str(object).map_err(|e| bad(format!("the object is not JSON: {e}")))?;
    let Value::Object(map) = &mut value else {
        return Err(bad("the object is not a JSON object".into()));
    };
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if api_version.is_empty() || map.get("kind").and_then(Value::as_str).is_none() {
        return Err(bad("the object has no apiVersion or kind".into()));
    }
    if group != id.group {
        return Err(bad(format!(
            "its apiVersion {api_version:?} is not of group {:?}",
            id.group
        )));
    }
    // Only what a creator may set survives; the server fills in the rest.
    map.remove("status");
    let metadata = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = metadata else {
        return Err(bad("its metadata is not an object".into()));
    };
    meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations"));
    for (field, want) in [("name", &id.name), ("namespace", &id.namespace)] {
        match meta.get(field).and_then(Value::as_str) {
            None => {
                if !want.is_empty() {
                    meta.insert(field.into(), Value::String(want.clone()));
                }
            }
            Some(got) if got == want.as_str() => {}
            Some(got) => {
                return Err(bad(format!(
                    "its metadata.{field} {got:?} is not the identifier's {want:?}"
                )));
            }
        }
    }
    stamp(meta, scope);
    Ok(value)
}

/// Sets the host's labels and annotation on an object's metadata (the
/// backup it was written for, the plugin that wrote it), over whatever the
/// plugin put there; label and annotation values that are not strings go.
fn stamp(meta: &mut Map<String, Value>, scope: &WriteScope) {
    for (field, key, value) in [
        (
            "labels",
            BACKUP_NAME_LABEL,
            crate::names::label_value(&scope.backup_name),
        ),
        ("labels", BACKUP_UID_LABEL, scope.backup_uid.clone()),
        ("annotations", CREATED_BY_ANNOTATION, scope.plugin.clone()),
        (
            "annotations",
            BACKUP_NAME_ANNOTATION,
            scope.backup_name.clone(),
        ),
    ] {
        let entry = meta
            .entry(field)
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        if let Value::Object(m) = entry {
            m.retain(|_, v| v.is_string());
            m.insert(key.into(), Value::String(value));
        }
    }
}

/// The `metadata.generateName` of an object created without a name (an
/// identifier whose name is empty), as Kubernetes takes it: a prefix the
/// host completes. Refused (rule `generate-name`) when there is none, or
/// when the object names itself too.
pub fn generate_name_prefix(id: &ItemRef, object: &str) -> Result<String, WriteRefused> {
    let refused = |why: &str| refuse(rule::GENERATE_NAME, format!("creating {id}: {why}"));
    let value: Value = serde_json::from_str(object)
        .map_err(|_| refused("an object without a name needs metadata.generateName"))?;
    let meta = &value["metadata"];
    if meta["name"].as_str().is_some_and(|n| !n.is_empty()) {
        return Err(refused(
            "the identifier has no name but the object has one: name both or neither",
        ));
    }
    match meta["generateName"].as_str() {
        Some(prefix) if !prefix.is_empty() => Ok(prefix.to_string()),
        _ => Err(refused(
            "an object without a name needs metadata.generateName",
        )),
    }
}

/// A name from `prefix` as apimachinery's `SimpleNameGenerator` makes one:
/// the prefix cut to 58 bytes, then 5 characters of its alphabet (no
/// vowels, no look-alikes). Random, not secret.
pub fn generated_name(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut cut = prefix.len().min(58);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    // std's per-process random keys, fed a counter and the time: no
    // dependency for five characters.
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let mut bits = h.finish();
    let mut name = prefix[..cut].to_string();
    for _ in 0..5 {
        name.push(ALPHABET[(bits % ALPHABET.len() as u64) as usize] as char);
        bits /= ALPHABET.len() as u64;
    }
    name
}

/// Checks a delete before the object is read.
pub fn check_delete(
    scope: &WriteScope,
    grants: &WriteGrants,
    id: &ItemRef,
) -> Result<(), WriteRefused> {
    check_common("deleting", scope, grants, id)
}

/// Whether `object` was created by this scope's plugin for this scope's
/// backup: the uid label and the annotation, both set by the host.
pub fn is_own(object: &Value, scope: &WriteScope) -> bool {
    let meta = &object["metadata"];
    meta["labels"][BACKUP_UID_LABEL].as_str() == Some(scope.backup_uid.as_str())
        && meta["annotations"][CREATED_BY_ANNOTATION].as_str() == Some(scope.plugin.as_str())
}

/// Whether `object` says it was created for the backup stored as
/// `backup_name` with uid `backup_uid`: both labels [`prepare_create`]
/// stamps, the name (as a label value) and the uid. What a backup's
/// created-objects record lists is a file in the store, which anyone who
/// can write the store can plant; the object's own labels are the host's.
/// An empty uid is no one's.
pub fn created_for(object: &Value, backup_name: &str, backup_uid: &str) -> bool {
    let labels = &object["metadata"]["labels"];
    !backup_uid.is_empty()
        && labels[BACKUP_UID_LABEL].as_str() == Some(backup_uid)
        && labels[BACKUP_NAME_LABEL].as_str()
            == Some(crate::names::label_value(backup_name).as_str())
}

/// The refusal for an object of that name that is not this plugin's.
pub fn not_own(what: &'static str, id: &ItemRef, scope: &WriteScope) -> WriteRefused {
    let (rule, verb) = if what == "delete" {
        (rule::NOT_OWN, "deleting")
    } else {
        (rule::CONFLICT, "creating")
    };
    refuse(
        rule,
        format!(
            "{verb} {id}: an object of that name exists that plugin {} did not create for backup {}",
            scope.plugin, scope.backup_name
        ),
    )
}

/// An object's uid (`metadata.uid`), empty when it has none.
pub fn uid_of(object: &Value) -> String {
    object["metadata"]["uid"].as_str().unwrap_or("").to_string()
}

#[cfg(test)]
mod tests;
