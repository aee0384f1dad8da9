//! Warnings and errors as Velero's results files hold them
//! (`pkg/util/results`): messages about Velero itself, about cluster-scoped
//! objects, and per namespace. A backup's `<name>-results.gz` and a
//! restore's `restore-<name>-results.gz` are one of each.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Errors or warnings of one backup or restore, by scope.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResultSet {
    pub velero: Vec<String>,
    pub cluster: Vec<String>,
    pub namespaces: BTreeMap<String, Vec<String>>,
}

impl ResultSet {
    /// Files a message under the item's namespace (or cluster scope).
    pub fn add(&mut self, namespace: &str, message: String) {
        if namespace.is_empty() {
            self.cluster.push(message);
        } else {
            self.namespaces
                .entry(namespace.to_string())
                .or_default()
                .push(message);
        }
    }

    pub fn count(&self) -> u64 {
        (self.velero.len()
            + self.cluster.len()
            + self.namespaces.values().map(Vec::len).sum::<usize>()) as u64
    }

    /// Every message, each with its scope in front.
    pub fn lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self.velero.iter().map(|m| format!("velero: {m}")).collect();
        out.extend(self.cluster.iter().map(|m| format!("cluster: {m}")));
        for (ns, list) in &self.namespaces {
            out.extend(list.iter().map(|m| format!("{ns}: {m}")));
        }
        out
    }

    pub fn all(&self) -> impl Iterator<Item = &String> {
        self.velero
            .iter()
            .chain(&self.cluster)
            .chain(self.namespaces.values().flatten())
    }
}

/// `<name>-results.gz`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Results {
    pub errors: ResultSet,
    pub warnings: ResultSet,
}
