//! A static stand-in for Kubernetes API discovery, used when there is no
//! cluster to ask: resolves resource names as users write them and maps
//! `apiVersion`/`kind` to the plural resource an item belongs to.

use std::fmt;

/// A resource qualified by its API group; the group is `""` for the core group.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: impl Into<String>, resource: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            resource: resource.into(),
        }
    }
}

/// Same form as apimachinery's `GroupResource.String()`, which is what
/// Velero matches include/exclude lists against.
impl fmt::Display for GroupResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// One row of the discovery table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub short_names: &'static [&'static str],
    pub namespaced: bool,
}

impl ResourceInfo {
    pub fn group_resource(&self) -> GroupResource {
        GroupResource::new(self.group, self.plural)
    }

    /// `"v1"` for the core group, `"group/version"` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// Known resources. Lookups scan in table order, so when a name is ambiguous
/// across groups the earlier row wins (core first, as kubectl prefers).
#[derive(Debug)]
pub struct Catalog {
    entries: &'static [ResourceInfo],
}

const fn r(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    short_names: &'static [&'static str],
    namespaced: bool,
) -> ResourceInfo {
    ResourceInfo {
        group,
        version,
        kind,
        plural,
        singular,
        short_names,
        namespaced,
    }
}

const NS: bool = true;
const CLUSTER: bool = false;

// One row per line reads as a table; rustfmt would split them.
#[rustfmt::skip]
static BUILTIN: &[ResourceInfo] = &[
    // core
    r("", "v1", "Pod", "pods", "pod", &["po"], NS),
    r("", "v1", "Service", "services", "service", &["svc"], NS),
    r("", "v1", "ConfigMap", "configmaps", "configmap", &["cm"], NS),
    r("", "v1", "Secret", "secrets", "secret", &[], NS),
    r("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", &["sa"], NS),
    r("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaim", &["pvc"], NS),
    r("", "v1", "PersistentVolume", "persistentvolumes", "persistentvolume", &["pv"], CLUSTER),
    r("", "v1", "Namespace", "namespaces", "namespace", &["ns"], CLUSTER),
    r("", "v1", "Node", "nodes", "node", &["no"], CLUSTER),
    r("", "v1", "Endpoints", "endpoints", "endpoints", &["ep"], NS),
    r("", "v1", "Event", "events", "event", &["ev"], NS),
    r("", "v1", "LimitRange", "limitranges", "limitrange", &["limits"], NS),
    r("", "v1", "ResourceQuota", "resourcequotas", "resourcequota", &["quota"], NS),
    r("", "v1", "ReplicationController", "replicationcontrollers", "replicationcontroller", &["rc"], NS),
    // apps
    r("apps", "v1", "Deployment", "deployments", "deployment", &["deploy"], NS),
    r("apps", "v1", "StatefulSet", "statefulsets", "statefulset", &["sts"], NS),
    r("apps", "v1", "DaemonSet", "daemonsets", "daemonset", &["ds"], NS),
    r("apps", "v1", "ReplicaSet", "replicasets", "replicaset", &["rs"], NS),
    r("apps", "v1", "ControllerRevision", "controllerrevisions", "controllerrevision", &[], NS),
    // batch
    r("batch", "v1", "Job", "jobs", "job", &[], NS),
    r("batch", "v1", "CronJob", "cronjobs", "cronjob", &["cj"], NS),
    // networking.k8s.io
    r("networking.k8s.io", "v1", "Ingress", "ingresses", "ingress", &["ing"], NS),
    r("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", "networkpolicy", &["netpol"], NS),
    // rbac.authorization.k8s.io
    r("rbac.authorization.k8s.io", "v1", "Role", "roles", "role", &[], NS),
    r("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", "rolebinding", &[], NS),
    r("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", "clusterrole", &[], CLUSTER),
    r("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", &[], CLUSTER),
    // storage.k8s.io
    r("storage.k8s.io", "v1", "StorageClass", "storageclasses", "storageclass", &["sc"], CLUSTER),
    r("storage.k8s.io", "v1", "CSIDriver", "csidrivers", "csidriver", &[], CLUSTER),
    r("storage.k8s.io", "v1", "CSINode", "csinodes", "csinode", &[], CLUSTER),
    r("storage.k8s.io", "v1", "VolumeAttachment", "volumeattachments", "volumeattachment", &[], CLUSTER),
    // scheduling.k8s.io: a restored pod's PriorityClass (Velero's pod actions name it)
    r("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", "priorityclass", &["pc"], CLUSTER),
    // admissionregistration.k8s.io, apiregistration.k8s.io: what Velero's
    // built-in restore actions select by these names
    r("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "mutatingwebhookconfiguration", &[], CLUSTER),
    r("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", "validatingwebhookconfiguration", &[], CLUSTER),
    r("apiregistration.k8s.io", "v1", "APIService", "apiservices", "apiservice", &[], CLUSTER),
    // discovery.k8s.io, node.k8s.io
    r("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", "endpointslice", &[], NS),
    r("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", "runtimeclass", &[], CLUSTER),
    // snapshot.storage.k8s.io
    r("snapshot.storage.k8s.io", "v1", "VolumeSnapshot", "volumesnapshots", "volumesnapshot", &["vs"], NS),
    r("snapshot.storage.k8s.io", "v1", "VolumeSnapshotContent", "volumesnapshotcontents", "volumesnapshotcontent", &["vsc", "vscs"], CLUSTER),
    r("snapshot.storage.k8s.io", "v1", "VolumeSnapshotClass", "volumesnapshotclasses", "volumesnapshotclass", &["vsclass", "vsclasses"], CLUSTER),
    // apiextensions.k8s.io
    r("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", "customresourcedefinition", &["crd", "crds"], CLUSTER),
    // policy
    r("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", "poddisruptionbudget", &["pdb"], NS),
    // autoscaling
    r("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", "horizontalpodautoscaler", &["hpa"], NS),
    // velero.io
    r("velero.io", "v1", "Backup", "backups", "backup", &[], NS),
    r("velero.io", "v1", "Restore", "restores", "restore", &[], NS),
    r("velero.io", "v1", "Schedule", "schedules", "schedule", &[], NS),
    r("velero.io", "v1", "BackupStorageLocation", "backupstoragelocations", "backupstoragelocation", &["bsl"], NS),
    r("velero.io", "v1", "VolumeSnapshotLocation", "volumesnapshotlocations", "volumesnapshotlocation", &["vsl"], NS),
    // coordination.k8s.io
    r("coordination.k8s.io", "v1", "Lease", "leases", "lease", &[], NS),
];

static BUILTIN_CATALOG: Catalog = Catalog { entries: BUILTIN };

impl Catalog {
    /// The static table of well-known resources.
    pub fn builtin() -> &'static Catalog {
        &BUILTIN_CATALOG
    }

    pub fn iter(&self) -> impl Iterator<Item = &ResourceInfo> {
        self.entries.iter()
    }

    /// Resolves a name as written in a selector or on the CLI: plural
    /// ("pods"), singular ("pod"), short ("po"), kind case-insensitively
    /// ("Pod"), each optionally qualified with a group ("deployments.apps",
    /// "deploy.apps"). None when it does not resolve (callers then keep the
    /// name as typed, never widen it). Names containing glob metacharacters
    /// (`*?[`) do not resolve.
    pub fn resolve(&self, name: &str) -> Option<&ResourceInfo> {
        if name.is_empty() || name.contains(['*', '?', '[']) {
            return None;
        }
        // kubectl lowercases resource arguments before matching, which also
        // makes kind matching case-insensitive.
        let name = name.to_ascii_lowercase();
        // Split at the first dot, as apimachinery's ParseGroupResource does.
        let (res, group) = match name.split_once('.') {
            Some((res, group)) => (res, Some(group)),
            None => (name.as_str(), None),
        };
        if res.is_empty() || group == Some("") {
            return None;
        }
        let in_group = |e: &&ResourceInfo| group.is_none_or(|g| e.group == g);
        // Earlier forms win over later ones across the whole table, so a
        // plural name is never shadowed by another row's short name.
        let forms: [&dyn Fn(&ResourceInfo) -> bool; 4] = [
            &|e| e.plural == res,
            &|e| e.singular == res,
            &|e| e.short_names.contains(&res),
            &|e| e.kind.eq_ignore_ascii_case(res),
        ];
        forms
            .iter()
            .find_map(|form| self.entries.iter().filter(in_group).find(|e| form(e)))
    }

    /// The table row for an `apiVersion` and `kind`, if known.
    pub fn lookup_kind(&self, api_version: &str, kind: &str) -> Option<&ResourceInfo> {
        let group = group_of(api_version);
        self.entries
            .iter()
            .find(|e| e.group == group && e.kind == kind)
    }

    /// The GroupResource for an object's apiVersion ("v1", "apps/v1") and
    /// kind. Known kinds come from the table; unknown ones are guessed with
    /// the pluralisation heuristic kube-rs uses.
    pub fn for_kind(&self, api_version: &str, kind: &str) -> GroupResource {
        match self.lookup_kind(api_version, kind) {
            Some(info) => info.group_resource(),
            None => {
                GroupResource::new(group_of(api_version), to_plural(&kind.to_ascii_lowercase()))
            }
        }
    }

    /// Whether a resource is namespaced; None when unknown.
    pub fn namespaced(&self, gr: &GroupResource) -> Option<bool> {
        self.entries
            .iter()
            .find(|e| e.group == gr.group && e.plural == gr.resource)
            .map(|e| e.namespaced)
    }
}

/// The group part of an apiVersion: "" for "v1", "apps" for "apps/v1".
fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(group, _)| group)
}

/// Kubernetes' guess at a plural from a lowercase kind, following kube-rs
/// `to_plural` (special cases included) so names agree with kube-rs clients.
pub fn to_plural(word: &str) -> String {
    match word {
        "" => return String::new(),
        "endpoints" | "endpointslices" => return word.to_string(),
        "nodemetrics" => return "nodes".to_string(),
        "podmetrics" => return "pods".to_string(),
        _ => {}
    }
    if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|s| word.ends_with(s))
    {
        return format!("{word}es");
    }
    match word.strip_suffix('y') {
        Some(stem)
            if stem
                .chars()
                .next_back()
                .is_some_and(|c| !matches!(c, 'a' | 'e' | 'i' | 'o' | 'u')) =>
        {
            format!("{stem}ies")
        }
        _ => format!("{word}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn resolved(name: &str) -> Option<String> {
        Catalog::builtin()
            .resolve(name)
            .map(|i| i.group_resource().to_string())
    }

    #[test]
    fn display_core_and_grouped() {
        assert_eq!(GroupResource::new("", "pods").to_string(), "pods");
        assert_eq!(
            GroupResource::new("apps", "deployments").to_string(),
            "deployments.apps"
        );
    }

    #[test]
    fn table_is_consistent() {
        let cat = Catalog::builtin();
        let mut plurals = HashSet::new();
        let mut shorts = HashSet::new();
        for e in cat.iter() {
            assert!(
                plurals.insert((e.group, e.plural)),
                "duplicate {}",
                e.plural
            );
            for s in e.short_names {
                assert!(shorts.insert(*s), "duplicate short name {s}");
            }
            assert_eq!(e.plural, e.plural.to_ascii_lowercase());
            assert_eq!(e.singular, e.singular.to_ascii_lowercase());
            // Each row must resolve to itself by every name it has.
            for name in [e.plural, e.singular, e.kind]
                .into_iter()
                .chain(e.short_names.iter().copied())
            {
                assert_eq!(cat.resolve(name), Some(e), "{name}");
                let qualified = format!("{name}.{}", e.group);
                if !e.group.is_empty() {
                    assert_eq!(cat.resolve(&qualified), Some(e), "{qualified}");
                }
            }
            assert_eq!(cat.for_kind(&e.api_version(), e.kind), e.group_resource());
            assert_eq!(cat.namespaced(&e.group_resource()), Some(e.namespaced));
        }
        assert!(cat.iter().count() >= 40);
    }

    #[test]
    fn resolve_forms() {
        let cases: &[(&str, Option<&str>)] = &[
            ("pods", Some("pods")),
            ("pod", Some("pods")),
            ("po", Some("pods")),
            ("Pod", Some("pods")),
            ("POD", Some("pods")),
            ("PODS", Some("pods")),
            ("deployments", Some("deployments.apps")),
            ("deploy", Some("deployments.apps")),
            ("Deployment", Some("deployments.apps")),
            ("deployments.apps", Some("deployments.apps")),
            ("deploy.apps", Some("deployments.apps")),
            ("Deployment.apps", Some("deployments.apps")),
            ("deployment.APPS", Some("deployments.apps")),
            ("svc", Some("services")),
            ("pvc", Some("persistentvolumeclaims")),
            ("ep", Some("endpoints")),
            ("endpoints", Some("endpoints")),
            ("quota", Some("resourcequotas")),
            ("cj", Some("cronjobs.batch")),
            ("cronjobs.batch", Some("cronjobs.batch")),
            ("ing", Some("ingresses.networking.k8s.io")),
            ("netpol", Some("networkpolicies.networking.k8s.io")),
            (
                "clusterrolebindings",
                Some("clusterrolebindings.rbac.authorization.k8s.io"),
            ),
            ("sc", Some("storageclasses.storage.k8s.io")),
            ("vs", Some("volumesnapshots.snapshot.storage.k8s.io")),
            (
                "vsc",
                Some("volumesnapshotcontents.snapshot.storage.k8s.io"),
            ),
            (
                "vsclass",
                Some("volumesnapshotclasses.snapshot.storage.k8s.io"),
            ),
            (
                "volumesnapshots.snapshot.storage.k8s.io",
                Some("volumesnapshots.snapshot.storage.k8s.io"),
            ),
            (
                "crd",
                Some("customresourcedefinitions.apiextensions.k8s.io"),
            ),
            (
                "crds",
                Some("customresourcedefinitions.apiextensions.k8s.io"),
            ),
            ("pdb", Some("poddisruptionbudgets.policy")),
            ("hpa", Some("horizontalpodautoscalers.autoscaling")),
            ("backups", Some("backups.velero.io")),
            ("bsl", Some("backupstoragelocations.velero.io")),
            ("vsl", Some("volumesnapshotlocations.velero.io")),
            ("leases", Some("leases.coordination.k8s.io")),
            // Not resolvable: kept as typed by callers.
            ("widgets", None),
            ("widgets.example.com", None),
            ("pods.apps", None),
            ("deployments.batch", None),
            ("deployments.ap", None),
            ("pods.", None),
            (".apps", None),
            ("", None),
            ("pod*", None),
            ("po?", None),
            ("[p]ods", None),
            ("*", None),
            (" pods", None),
        ];
        for (name, want) in cases {
            assert_eq!(resolved(name).as_deref(), *want, "resolve({name:?})");
        }
    }

    #[test]
    fn for_kind_known() {
        let cat = Catalog::builtin();
        assert_eq!(cat.for_kind("v1", "Pod"), GroupResource::new("", "pods"));
        assert_eq!(
            cat.for_kind("apps/v1", "Deployment"),
            GroupResource::new("apps", "deployments")
        );
        assert_eq!(
            cat.for_kind("v1", "Endpoints"),
            GroupResource::new("", "endpoints")
        );
        assert_eq!(
            cat.for_kind("networking.k8s.io/v1", "Ingress"),
            GroupResource::new("networking.k8s.io", "ingresses")
        );
        // Version does not matter, only the group.
        assert_eq!(
            cat.for_kind("autoscaling/v1", "HorizontalPodAutoscaler"),
            GroupResource::new("autoscaling", "horizontalpodautoscalers")
        );
        // A known kind in another group is a different resource.
        assert_eq!(
            cat.for_kind("example.com/v1", "Backup"),
            GroupResource::new("example.com", "backups")
        );
    }

    #[test]
    fn for_kind_pluralisation() {
        let cat = Catalog::builtin();
        let cases = [
            ("Widget", "widgets"),
            ("Bus", "buses"),
            ("Box", "boxes"),
            ("Quiz", "quizes"),
            ("Match", "matches"),
            ("Mesh", "meshes"),
            ("Policy", "policies"),
            ("Gateway", "gateways"),
            ("Key", "keys"),
            ("Toy", "toys"),
            ("Guy", "guys"),
            ("Y", "ys"),
            ("Sky", "skies"),
            ("Status", "statuses"),
            ("Endpoints", "endpoints"),
            ("EndpointSlices", "endpointslices"),
            ("NodeMetrics", "nodes"),
            ("PodMetrics", "pods"),
            ("VirtualMachine", "virtualmachines"),
            ("", ""),
        ];
        for (kind, want) in cases {
            assert_eq!(
                cat.for_kind("example.com/v1alpha1", kind),
                GroupResource::new("example.com", want),
                "{kind}"
            );
        }
        // Unknown core kinds keep the core group.
        assert_eq!(
            cat.for_kind("v1", "Binding"),
            GroupResource::new("", "bindings")
        );
        assert_eq!(cat.for_kind("", "Thing"), GroupResource::new("", "things"));
    }

    #[test]
    fn namespaced_lookup() {
        let cat = Catalog::builtin();
        assert_eq!(cat.namespaced(&GroupResource::new("", "pods")), Some(true));
        assert_eq!(
            cat.namespaced(&GroupResource::new("", "persistentvolumes")),
            Some(false)
        );
        assert_eq!(
            cat.namespaced(&GroupResource::new("", "namespaces")),
            Some(false)
        );
        assert_eq!(
            cat.namespaced(&GroupResource::new("storage.k8s.io", "storageclasses")),
            Some(false)
        );
        assert_eq!(
            cat.namespaced(&GroupResource::new("velero.io", "backups")),
            Some(true)
        );
        assert_eq!(cat.namespaced(&GroupResource::new("apps", "pods")), None);
        assert_eq!(
            cat.namespaced(&GroupResource::new("example.com", "widgets")),
            None
        );
    }
}
