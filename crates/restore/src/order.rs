//! The order a restore creates objects in: Velero's resource priorities
//! (`pkg/cmd/server/config/config.go`, v1.18.3, `defaultRestorePriorities`),
//! then the backup's other resources alphabetically, then the low
//! priorities; and what Velero never restores.

use std::collections::BTreeSet;

/// First, in this order: what the rest depends on (CRDs before their
/// objects, namespaces before what is in them, claims before pods, pods
/// before the controllers that would otherwise make new ones).
/// Velero writes `volumesnapshotclass.snapshot.storage.k8s.io` and resolves
/// it through discovery to the plural; the plural is written here.
pub const HIGH: &[&str] = &[
    "customresourcedefinitions.apiextensions.k8s.io",
    "namespaces",
    "storageclasses.storage.k8s.io",
    "volumesnapshotclasses.snapshot.storage.k8s.io",
    "volumesnapshotcontents.snapshot.storage.k8s.io",
    "volumesnapshots.snapshot.storage.k8s.io",
    "datauploads.velero.io",
    "persistentvolumes",
    "persistentvolumeclaims",
    "clusterroles.rbac.authorization.k8s.io",
    "roles.rbac.authorization.k8s.io",
    "serviceaccounts",
    "clusterrolebindings.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "secrets",
    "configmaps",
    "limitranges",
    "priorityclasses.scheduling.k8s.io",
    "pods",
    "replicasets.apps",
    "clusterclasses.cluster.x-k8s.io",
    "endpoints",
    "services",
];

/// Last, in this order.
pub const LOW: &[&str] = &[
    "clusterbootstraps.run.tanzu.vmware.com",
    "clusters.cluster.x-k8s.io",
    "clusterresourcesets.addons.cluster.x-k8s.io",
    "apps.kappctrl.k14s.io",
    "packageinstalls.packaging.carvel.dev",
];

/// Never restored (Velero's `nonRestorableResources`), and iar's own
/// resources, which describe backups and restores rather than the
/// application.
pub const NEVER: &[&str] = &[
    "nodes",
    "events",
    "events.events.k8s.io",
    "backups.velero.io",
    "restores.velero.io",
    "resticrepositories.velero.io",
    "csinodes.storage.k8s.io",
    "volumeattachments.storage.k8s.io",
    "backuprepositories.velero.io",
    "backups.iar.dev",
    "restores.iar.dev",
    "schedules.iar.dev",
    "volumebackups.iar.dev",
];

/// The group-resources of a backup (Velero's `GroupResource.String()`:
/// `resource.group`, the resource alone for the core group) in the order
/// they are restored; those never restored left out.
pub fn ordered(in_backup: &BTreeSet<String>) -> Vec<String> {
    let prioritized: BTreeSet<&str> = HIGH.iter().chain(LOW).copied().collect();
    HIGH.iter()
        .map(|s| s.to_string())
        .filter(|gr| in_backup.contains(gr))
        .chain(
            in_backup
                .iter()
                .filter(|gr| !prioritized.contains(gr.as_str()))
                .cloned(),
        )
        .chain(
            LOW.iter()
                .map(|s| s.to_string())
                .filter(|gr| in_backup.contains(gr)),
        )
        .filter(|gr| !NEVER.contains(&gr.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_first_then_the_rest_alphabetically_then_the_low_ones() {
        let backup: BTreeSet<String> = [
            "deployments.apps",
            "pods",
            "clusters.cluster.x-k8s.io",
            "configmaps",
            "namespaces",
            "events",
            "customresourcedefinitions.apiextensions.k8s.io",
            "widgets.example.com",
            "persistentvolumeclaims",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            ordered(&backup),
            [
                "customresourcedefinitions.apiextensions.k8s.io",
                "namespaces",
                "persistentvolumeclaims",
                "configmaps",
                "pods",
                "deployments.apps",
                "widgets.example.com",
                "clusters.cluster.x-k8s.io",
            ]
        );
    }
}
