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

/// Longest DNS-1123 label (namespaces, resources).
const LABEL_MAX: usize = 63;
/// Longest DNS-1123 subdomain (API groups) and object name.
const SUBDOMAIN_MAX: usize = 253;

/// Checks all four parts. An empty group is the core group and an empty
/// namespace a cluster-scoped object; resource and name must be set.
pub fn check(id: &ItemRef) -> Result<(), InvalidPart> {
    if !id.group.is_empty() {
        dns_subdomain(&id.group).map_err(|p| part("group", &id.group, p))?;
    }
    resource(&id.resource).map_err(|p| part("resource", &id.resource, p))?;
    if !id.namespace.is_empty() {
        dns_label(&id.namespace).map_err(|p| part("namespace", &id.namespace, p))?;
    }
    name(&id.name).map_err(|p| part("name", &id.name, p))?;
    Ok(())
}

fn part(field: &'static str, value: &str, problem: String) -> InvalidPart {
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
    InvalidPart {
        field,
        value,
        problem,
    }
}

fn alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// A DNS-1123 label: 1–63 of `[a-z0-9-]`, starting and ending alphanumeric
/// (namespaces).
fn dns_label(s: &str) -> Result<(), String> {
    const WHAT: &str = "is not a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63)";
    let ok = !s.is_empty()
        && s.len() <= LABEL_MAX
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.starts_with(alnum)
        && s.ends_with(alnum);
    if ok { Ok(()) } else { Err(WHAT.into()) }
}

/// A DNS-1123 subdomain: dot-separated labels, at most 253 (API groups).
fn dns_subdomain(s: &str) -> Result<(), String> {
    const WHAT: &str =
        "is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253)";
    let ok = s.len() <= SUBDOMAIN_MAX && s.split('.').all(|l| dns_label(l).is_ok());
    if ok { Ok(()) } else { Err(WHAT.into()) }
}

/// A resource's plural name: a DNS-1123 label, so never a subresource
/// (`pods/log`, `nodes/proxy`).
fn resource(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("is empty".into());
    }
    dns_label(s).map_err(|_| {
        "is not a resource name (a DNS-1123 label; subresources such as pods/log cannot be named)"
            .into()
    })
}

/// An object's name, by the rule every Kubernetes resource at least obeys
/// (a path segment: not `.` or `..`, no `/` or `%`, at most 253), narrowed
/// by what a URL path must never carry: `?`, `#`, whitespace and control
/// characters. No kind allows those in names that a backup reads.
fn name(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("is empty".into());
    }
    if s.len() > SUBDOMAIN_MAX {
        return Err(format!("is longer than {SUBDOMAIN_MAX} bytes"));
    }
    if s == "." || s == ".." {
        return Err("is a relative path segment".into());
    }
    if let Some(c) = s
        .chars()
        .find(|c| matches!(c, '/' | '%' | '?' | '#') || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "contains {c:?}, which no object name may (rule of path segment names)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(group: &str, resource: &str, namespace: &str, name: &str) -> ItemRef {
        ItemRef {
            group: group.into(),
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
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
