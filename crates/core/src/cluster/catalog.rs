//! What discovery tells a Kubernetes client (contract 1.4.0's
//! `cluster-catalog`): the resources a cluster serves and its version.

use crate::catalog::Catalog;

/// One resource at its group's preferred version, as discovery lists it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ApiResourceRow {
    /// "" for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    /// Plural.
    pub resource: String,
    /// "" when the cluster does not say.
    pub singular: String,
    pub short_names: Vec<String>,
    pub namespaced: bool,
    pub verbs: Vec<String>,
}

/// The API server's `/version`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ServerVersion {
    pub major: String,
    pub minor: String,
    pub git_version: String,
}

/// What the API server allows on a built-in resource: every resource of
/// iar's built-in table is a full REST resource.
const BUILTIN_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The resources of iar's built-in table, as discovery would list them:
/// what a cluster of manifests answers.
pub fn builtin_rows() -> Vec<ApiResourceRow> {
    Catalog::builtin()
        .iter()
        .map(|r| ApiResourceRow {
            group: r.group.to_string(),
            version: r.version.to_string(),
            kind: r.kind.to_string(),
            resource: r.plural.to_string(),
            singular: r.singular.to_string(),
            short_names: r.short_names.iter().map(|s| s.to_string()).collect(),
            namespaced: r.namespaced,
            verbs: BUILTIN_VERBS.iter().map(|v| v.to_string()).collect(),
        })
        .collect()
}
