//! A restore's warnings and errors as Velero records them
//! (`pkg/util/results`): messages about Velero itself, about cluster-scoped
//! objects, and per namespace; the results file holds one for warnings
//! and one for errors.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Messages {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub velero: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub namespaces: BTreeMap<String, Vec<String>>,
}

impl Messages {
    /// About an object of `namespace` ("" for a cluster-scoped one).
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

    pub fn len(&self) -> usize {
        self.velero.len()
            + self.cluster.len()
            + self.namespaces.values().map(Vec::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
}

/// The results file: `restore-<name>-results.gz`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub warnings: Messages,
    pub errors: Messages,
}
