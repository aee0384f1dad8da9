//! Contract 1.4.0's `cluster-catalog`: discovery for Kubernetes clients
//! inside a plugin. No grant (any authenticated Kubernetes user may read
//! discovery); each call is a host call, and one that waits on the API
//! server waits at most what is left of the call's ceiling.

use super::State;
use crate::contract::latest::cluster_catalog as wit;

impl wit::Host for State {
    fn resources(&mut self) -> wasmtime::Result<Result<Vec<wit::ApiResource>, String>> {
        self.count_host_call()?;
        let budget = self.budget()?;
        let answer = self.cluster.catalog_within(budget).map(|rows| {
            rows.iter()
                .map(|r| wit::ApiResource {
                    group: r.group.clone(),
                    version: r.version.clone(),
                    kind: r.kind.clone(),
                    resource: r.resource.clone(),
                    singular: r.singular.clone(),
                    short_names: r.short_names.clone(),
                    namespaced: r.namespaced,
                    verbs: r.verbs.clone(),
                })
                .collect()
        });
        self.still_within()?;
        Ok(answer.map_err(|e| e.to_string()))
    }

    fn server_version(&mut self) -> wasmtime::Result<Result<wit::VersionInfo, String>> {
        self.count_host_call()?;
        let budget = self.budget()?;
        let answer = self.cluster.server_version_within(budget);
        self.still_within()?;
        Ok(answer
            .map(|v| wit::VersionInfo {
                major: v.major,
                minor: v.minor,
                git_version: v.git_version,
            })
            .map_err(|e| e.to_string()))
    }

    fn home_namespace(&mut self) -> wasmtime::Result<String> {
        self.count_host_call()?;
        Ok(self.home_namespace.clone())
    }
}
