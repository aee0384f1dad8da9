//! Item changes are writes: what a plugin may change in the items it is
//! handed (`allowMutate`). A restore creates the item a restore action
//! returns, and a backup stores what a backup action returns for a later
//! restore to create, so a change is granted per resource like a create
//! is. What decides rights (RBAC, webhooks, Secrets, service accounts, a
//! pod's security fields) is changed only under a grant naming it exactly:
//! no glob, however broad, covers it.

use crate::catalog::GroupResource;
use crate::item::{Item, SecurityFields};
use serde_json::Value;
use std::sync::Arc;

mod diff;
mod pod_security;

pub use diff::first_change;

/// Rule names, as refusals and the docs give them.
pub mod rule {
    /// A change on a resource the plugin's `allowMutate` does not cover.
    pub const NOT_GRANTED: &str = "item-change-not-granted";
    /// A change to what decides rights, not named exactly in `allowMutate`.
    pub const RIGHTS: &str = "rights-change-not-granted";
}

/// The suffix of the entry granting a workload's pod security fields:
/// `pods/security`, `deployments.apps/security`.
pub const SECURITY_SUFFIX: &str = "/security";

/// Resources whose every field decides rights: changed only under the
/// exact entry (`clusterrolebindings.rbac.authorization.k8s.io`).
pub const RIGHTS_RESOURCES: &[&str] = &[
    "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "clusterroles.rbac.authorization.k8s.io",
    "clusterrolebindings.rbac.authorization.k8s.io",
    "mutatingwebhookconfigurations.admissionregistration.k8s.io",
    "validatingwebhookconfigurations.admissionregistration.k8s.io",
    "secrets",
    "serviceaccounts",
];

/// What a plugin may change in the items it is handed: globs over
/// `resource.group` (`*`, `*.apps`, `pods`), and `RESOURCE/security`
/// entries for a pod's or pod template's security fields. Nothing by
/// default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MutateGrants {
    allow: Vec<String>,
    /// The glob entries, compiled once: `allows` runs on every changed item.
    globs: Vec<glob::Pattern>,
}

/// A change the grants do not cover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MutateRefused {
    pub rule: &'static str,
    /// The first changed path (`.spec.hostPID`).
    pub path: String,
    /// Why, in a few words, naming the grant that would allow it.
    pub need: String,
}

impl MutateGrants {
    /// These entries; one that is neither a glob over `resource.group` nor
    /// `resource.group/security` is refused.
    pub fn only<S: AsRef<str>>(entries: &[S]) -> Result<Self, super::GrantError> {
        let (mut allow, mut globs) = (Vec::new(), Vec::new());
        for entry in entries {
            let entry = entry.as_ref();
            let bad = |reason: &str| super::GrantError::Mutate {
                entry: entry.to_string(),
                reason: reason.to_string(),
            };
            if let Some(resource) = entry.strip_suffix(SECURITY_SUFFIX) {
                if resource.contains(['*', '?', '[', ']']) {
                    return Err(bad("a security grant names its resource exactly"));
                }
                if !pod_security::holds_pod(resource) {
                    return Err(bad("only pods and pod templates have security fields"));
                }
            } else if entry.contains('/') {
                return Err(bad("the one suffix is /security"));
            } else {
                globs.push(glob::Pattern::new(entry).map_err(|e| bad(&e.to_string()))?);
            }
            allow.push(entry.to_string());
        }
        Ok(MutateGrants { allow, globs })
    }

    pub fn none() -> Self {
        MutateGrants::default()
    }

    pub fn is_empty(&self) -> bool {
        self.allow.is_empty()
    }

    /// The entries as written.
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        self.allow.iter().map(String::as_str)
    }

    fn names_exactly(&self, entry: &str) -> bool {
        self.allow.iter().any(|a| a == entry)
    }

    /// Whether changes to `gr` are granted at all (a glob covers all but
    /// [`RIGHTS_RESOURCES`]).
    pub fn allows(&self, gr: &GroupResource) -> bool {
        let name = gr.to_string();
        if is_rights_resource(&name) {
            return self.names_exactly(&name);
        }
        self.globs.iter().any(|p| p.matches(&name))
    }

    /// Whether `gr`'s pod security fields may change.
    pub fn allows_security(&self, gr: &GroupResource) -> bool {
        self.names_exactly(&format!("{gr}{SECURITY_SUFFIX}"))
    }

    /// Checks `after` (what a plugin returned) against `before` (what it
    /// was handed) for an item of `gr`; `Ok` when nothing changed. The
    /// whole values are compared only to name a refusal's path: a granted
    /// change costs the security fields' comparison alone, on every item a
    /// plugin labels.
    pub fn check(
        &self,
        gr: &GroupResource,
        before: &Value,
        after: &Value,
    ) -> Result<(), MutateRefused> {
        let name = gr.to_string();
        let refused = |rule: &'static str, need: String| match first_change(before, after) {
            None => Ok(()),
            Some(path) => Err(MutateRefused { rule, path, need }),
        };
        if is_rights_resource(&name) && !self.names_exactly(&name) {
            return refused(
                rule::RIGHTS,
                format!("{name} decides rights: allowMutate must name it exactly"),
            );
        }
        if !self.allows_security(gr)
            && let Some(path) = pod_security::first_change(&name, before, after)
        {
            return Err(MutateRefused {
                rule: rule::RIGHTS,
                path,
                need: format!(
                    "is a pod security field: allowMutate must name {name}{SECURITY_SUFFIX}"
                ),
            });
        }
        if !self.allows(gr) {
            return refused(
                rule::NOT_GRANTED,
                format!("{name} is not in this plugin's allowMutate"),
            );
        }
        Ok(())
    }
}

impl MutateGrants {
    /// [`MutateGrants::check`] of `after_text` (what a plugin returned)
    /// against `before` (the item it was handed): a granted change is told
    /// apart by reading only the security fields from the texts, each
    /// item's once ([`Item::security`]: the output read here is the next
    /// plugin's input); a refusal, or a shape that reading leaves open,
    /// parses `after` and compares whole values. On success, the security
    /// fields read from `after_text`, for the item made of it.
    pub fn check_item(
        &self,
        before: &Item,
        after_text: &str,
    ) -> Result<Option<Arc<SecurityFields>>, MutateRefused> {
        let gr = before.id.group_resource();
        let name = gr.to_string();
        let mut read_after = None;
        let security_same = self.allows_security(&gr)
            || match pod_security::read_text(&name, after_text) {
                None => true,
                Some(after) => {
                    let after = after.map(Arc::new);
                    let before_read =
                        before.security(|| pod_security::read_text(&name, before.json()).flatten());
                    let same = matches!((before_read, &after), (Some(b), Some(a))
                        if pod_security::first_change_read(&name, b, a).is_none());
                    read_after = after;
                    same
                }
            };
        if security_same && self.allows(&gr) {
            return Ok(read_after);
        }
        let after: Value = serde_json::from_str(after_text).unwrap_or_default();
        self.check(&gr, before.value(), &after).map(|()| read_after)
    }
}

/// Whether every field of `name` (`resource.group`) decides rights.
pub fn is_rights_resource(name: &str) -> bool {
    RIGHTS_RESOURCES.contains(&name)
}

#[cfg(test)]
mod tests;
