//! Kubernetes' rules for the four parts of an object's identity (API
//! group, resource, namespace, name), applied to every identifier a plugin
//! or an object's field names before the host looks anything up with it.
//!
//! The parts end up in API-server URL paths (kube-core formats them in
//! unescaped) and in store paths, so a namespace such as
//! `kube-system/secrets/x?` would otherwise read another resource than the
//! one the grant check looked at. A part that breaks its rule is refused
//! with rule `invalid-identifier`, never looked up and answered "not found".

use crate::item::ItemRef;
use crate::names;

/// The rule every refusal names.
pub const RULE: &str = "invalid-identifier";

/// Which part of an identifier broke which rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} {value:?} {problem}")]
pub struct InvalidPart {
    /// `group`, `resource`, `namespace` or `name`.
    pub field: &'static str,
    pub value: String,
    /// What is wrong, as a phrase: "is empty", "is not a DNS-1123 label …".
    pub problem: String,
}

/// Checks all four parts. An empty group is the core group and an empty
/// namespace a cluster-scoped object; resource and name must be set.
///
/// The rules are the store's (`crate::names`), the ones item paths obey,
/// and narrowed where a URL path needs it: each label of a group at most
/// 63, as DNS has it, and a name without `?`, `#` or whitespace, which
/// would end or split the path it is put in.
pub fn check(id: &ItemRef) -> Result<(), InvalidPart> {
    if !id.group.is_empty() {
        names::dns_subdomain(&id.group)
            .and_then(|()| id.group.split('.').try_for_each(names::dns_label))
            .map_err(|why| part("group", &id.group, "a DNS-1123 subdomain", why))?;
    }
    names::dns_label(&id.resource).map_err(|why| {
        part(
            "resource",
            &id.resource,
            "a resource name (a DNS-1123 label; subresources such as pods/log cannot be named)",
            why,
        )
    })?;
    if !id.namespace.is_empty() {
        names::dns_label(&id.namespace)
            .map_err(|why| part("namespace", &id.namespace, "a DNS-1123 label", why))?;
    }
    names::path_segment(&id.name)
        .and_then(|()| {
            match id
                .name
                .chars()
                .find(|c| matches!(c, '?' | '#') || c.is_whitespace())
            {
                Some(c) => Err(names::NameError::Contains(c)),
                None => Ok(()),
            }
        })
        .map_err(|why| part("name", &id.name, "an object name", why))?;
    Ok(())
}

/// A refusal of one part: `is empty`, or `is not WHAT: WHY`.
fn part(field: &'static str, value: &str, what: &str, why: names::NameError) -> InvalidPart {
    // The value is the plugin's: bounded, so a refusal cannot be made huge.
    let mut value = value.to_string();
    if value.len() > 300 {
        let mut cut = 300;
        while !value.is_char_boundary(cut) {
            cut -= 1;
        }
        value.truncate(cut);
        value.push('…');
    }
    let problem = if why == names::NameError::Empty {
        "is empty".to_string()
    } else {
        format!("is not {what}: {why}")
    };
    InvalidPart {
        field,
        value,
        problem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(group: &str, resource: &str, namespace: &str, name: &str) -> ItemRef {
        ItemRef::new(group, resource, namespace, name)
    }

    #[test]
    fn real_identifiers_pass() {
        for ok in [
            id("", "configmaps", "shop", "web-config"),
            id("", "persistentvolumes", "", "pvc-0b5e.1"),
            id(
                "snapshot.storage.k8s.io",
                "volumesnapshots",
                "shop",
                "data-web-0",
            ),
            id(
                "rbac.authorization.k8s.io",
                "clusterroles",
                "",
                "system:controller:x",
            ),
            id("apps", "deployments", "a", &"n".repeat(253)),
        ] {
            check(&ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    /// The identifiers tried from outside against a real API server, and
    /// their relatives: each is refused, naming the part.
    #[test]
    fn crafted_identifiers_are_refused_naming_the_part() {
        for (bad, field) in [
            (
                id("", "configmaps", "kube-system/secrets/topsecret?x=", "x"),
                "namespace",
            ),
            (
                id("", "configmaps", "kube-system/secrets/topsecret#", "x"),
                "namespace",
            ),
            (id("", "pods", "shop", "web-0/log"), "name"),
            (id("", "nodes/proxy", "", "node-1"), "resource"),
            (id("", "pods", "shop", "web?watch=1"), "name"),
            (id("", "pods", "shop", "%2e%2e"), "name"),
            (id("", "pods", "shop", ".."), "name"),
            (id("", "pods", "shop", "a b"), "name"),
            (id("", "pods", "shop", "a\n"), "name"),
            (id("", "pods", "shop", &"n".repeat(254)), "name"),
            (id("", "pods", "Shop", "x"), "namespace"),
            (id("", "pods", &"n".repeat(64), "x"), "namespace"),
            (id("apps/v1", "deployments", "a", "x"), "group"),
            (id("Apps", "deployments", "a", "x"), "group"),
            (id("", "", "a", "x"), "resource"),
            (id("", "Pods", "a", "x"), "resource"),
            (id("", "pods", "a", ""), "name"),
        ] {
            let err = check(&bad).expect_err(&bad.to_string());
            assert_eq!(err.field, field, "{bad}: {err}");
        }
    }

    #[test]
    fn a_huge_value_is_cut_in_the_refusal() {
        let err = check(&id("", "pods", &"x/".repeat(10_000), "a")).unwrap_err();
        assert!(err.to_string().len() < 600, "{err}");
    }
}
