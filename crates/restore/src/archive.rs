//! A backup's items, read from its contents tarball as Velero reads them
//! (`resources/<group-resource>/namespaces/<ns>/<name>.json`,
//! `resources/<group-resource>/cluster/<name>.json`; the
//! `<version>-preferredversion` copies are not read). The tarball comes
//! from the store, which a writer without the repository password can
//! change: an entry whose object is not what its path says (another
//! namespace, name or API group) is refused, never restored where its
//! body points.

use iar_core::item::{Item, ItemRef};
use serde_json::Value;

/// The rule an entry whose object contradicts its path breaks.
pub const IDENTITY_RULE: &str = "tarball-identity";

/// The items of `entries` (a tarball's paths and bodies), and a message
/// for each entry refused.
/// An entry written twice (a finalized backup's tail replaces items of
/// its head) is read as its last copy, as Velero's extraction to disk
/// leaves it.
pub fn items(entries: Vec<(String, Vec<u8>)>) -> (Vec<Item>, Vec<String>) {
    let mut items = Vec::new();
    let mut refused = Vec::new();
    let last: std::collections::BTreeMap<String, Vec<u8>> = entries.into_iter().collect();
    for (path, body) in last {
        let Some(rest) = path.strip_prefix("resources/") else {
            continue;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let (group_resource, namespace, file) = match parts.as_slice() {
            [gr, "namespaces", ns, file] => (*gr, *ns, *file),
            [gr, "cluster", file] => (*gr, "", *file),
            // A preferred-version copy, or not an item.
            _ => continue,
        };
        let Some(name) = file.strip_suffix(".json") else {
            continue;
        };
        match item(group_resource, namespace, name, &body) {
            Ok(i) => items.push(i),
            Err(why) => refused.push(format!("{path}: {why} (rule: {IDENTITY_RULE})")),
        }
    }
    (items, refused)
}

fn item(group_resource: &str, namespace: &str, name: &str, body: &[u8]) -> Result<Item, String> {
    let (resource, group) = group_resource
        .split_once('.')
        .unwrap_or((group_resource, ""));
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let field = |p: &str| value.pointer(p).and_then(Value::as_str).unwrap_or_default();
    if field("/metadata/name") != name {
        return Err(format!("its object is named {:?}", field("/metadata/name")));
    }
    if field("/metadata/namespace") != namespace {
        return Err(format!(
            "its object is in namespace {:?}",
            field("/metadata/namespace")
        ));
    }
    let api_group = iar_core::item::group_of(field("/apiVersion"));
    if api_group != group || field("/kind").is_empty() {
        return Err(format!(
            "its object is {} {:?}, not of group {group:?}",
            field("/apiVersion"),
            field("/kind")
        ));
    }
    let id = ItemRef::new(
        group.to_string(),
        resource.to_string(),
        namespace.to_string(),
        name.to_string(),
    );
    iar_core::identifier::check(&id).map_err(|part| format!("{part}"))?;
    Ok(Item::with_id(id, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(path: &str, v: Value) -> (String, Vec<u8>) {
        (path.to_string(), serde_json::to_vec(&v).unwrap())
    }

    #[test]
    fn an_entry_whose_object_points_elsewhere_is_refused() {
        let (items, refused) = items(vec![
            entry(
                "resources/configmaps/namespaces/shop/c.json",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "shop"}}),
            ),
            entry(
                "resources/configmaps/namespaces/shop/d.json",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d", "namespace": "kube-system"}}),
            ),
            entry(
                "resources/roles.rbac.authorization.k8s.io/namespaces/shop/r.json",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "r", "namespace": "shop"}}),
            ),
            entry(
                "resources/configmaps/v1-preferredversion/namespaces/shop/c.json",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "shop"}}),
            ),
        ]);
        assert_eq!(items.len(), 1);
        assert_eq!(
            items[0].id.to_string(),
            ItemRef::new("", "configmaps", "shop", "c").to_string()
        );
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(
            refused.iter().all(|r| r.contains(IDENTITY_RULE)),
            "{refused:?}"
        );
        assert!(refused[0].contains("kube-system"), "{refused:?}");
    }
}
