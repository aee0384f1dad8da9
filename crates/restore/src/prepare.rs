//! What a restore does to an object besides its plugins: the resets of
//! Velero's built-in restore actions (`pkg/restore/actions`, v1.18.3),
//! which Velero's server always runs and iar runs here natively; the
//! restore's own resets (status, volume binding); and its labels.
//! docs/restores.md lists where these differ from Velero's.

use serde_json::{Map, Value};

/// Velero's labels on every restored object.
pub const BACKUP_NAME_LABEL: &str = "velero.io/backup-name";
pub const RESTORE_NAME_LABEL: &str = "velero.io/restore-name";

/// A label value from a name, as Velero's `label.GetValidName`: a name
/// over 63 characters is cut to 57 and followed by the first 6 hex digits
/// of its SHA-256.
pub fn label_value(name: &str) -> String {
    use sha2::{Digest, Sha256};
    if name.len() <= 63 {
        return name.to_string();
    }
    let digest = hex::encode(Sha256::digest(name.as_bytes()));
    format!("{}{}", &name[..57], &digest[..6])
}

fn object_mut<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Map<String, Value>> {
    let mut here = v;
    for key in path {
        here = here.get_mut(*key)?;
    }
    here.as_object_mut()
}

/// Whether Velero skips the object as finished (`isCompleted`): a pod
/// that Succeeded or Failed, a job with a completion time.
pub fn is_completed(group_resource: &str, object: &Value) -> bool {
    match group_resource {
        "pods" => matches!(
            object.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        ),
        "jobs.batch" => object
            .pointer("/status/completionTime")
            .is_some_and(|t| !t.is_null()),
        _ => false,
    }
}

/// The built-in actions' resets of `object` (a `group_resource`), in
/// place.
pub fn builtin_actions(group_resource: &str, object: &mut Value, preserve_node_ports: bool) {
    match group_resource {
        "pods" => pod(object),
        "services" => service(object, preserve_node_ports),
        "jobs.batch" => job(object),
        "serviceaccounts" => service_account(object),
        _ => {}
    }
}

/// PodAction: no node, no priority (admission sets it from the class),
/// no volumes or mounts of the service account's legacy token secret.
fn pod(object: &mut Value) {
    let Some(spec) = object_mut(object, &["spec"]) else {
        return;
    };
    spec.remove("nodeName");
    spec.remove("priority");
    let account = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let token = format!("{account}-token-");
    let keep = |v: &Value| {
        !v.get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| n.starts_with(&token))
    };
    if let Some(Value::Array(volumes)) = spec.get_mut("volumes") {
        volumes.retain(keep);
    }
    for containers in ["containers", "initContainers"] {
        if let Some(Value::Array(list)) = spec.get_mut(containers) {
            for c in list {
                if let Some(Value::Array(mounts)) = c.get_mut("volumeMounts") {
                    mounts.retain(keep);
                }
            }
        }
    }
}

/// ServiceAction: a new cluster IP (unless headless), new node ports
/// unless the restore preserves them (an ExternalName service has none).
fn service(object: &mut Value, preserve_node_ports: bool) {
    let Some(spec) = object_mut(object, &["spec"]) else {
        return;
    };
    if spec.get("clusterIP").and_then(Value::as_str) != Some("None") {
        spec.remove("clusterIP");
        spec.remove("clusterIPs");
    }
    if preserve_node_ports || spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
        return;
    }
    spec.remove("healthCheckNodePort");
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.remove("nodePort");
        }
    }
}

/// JobAction: the old job's controller uid is not the new one's.
fn job(object: &mut Value) {
    for path in [
        &["spec", "selector", "matchLabels"][..],
        &["spec", "template", "metadata", "labels"][..],
    ] {
        if let Some(labels) = object_mut(object, path) {
            labels.remove("controller-uid");
            labels.remove("batch.kubernetes.io/controller-uid");
        }
    }
}

/// ServiceAccountAction: the legacy token secrets are made anew.
fn service_account(object: &mut Value) {
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let token = format!("{name}-token-");
    if let Some(Value::Array(secrets)) = object.get_mut("secrets") {
        secrets.retain(|s| {
            !s.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| n.starts_with(&token))
        });
    }
}

/// Annotations the persistent volume controllers use to track a binding
/// (Velero's `resetVolumeBindingInfo`): the restored pair binds anew.
const BINDING_ANNOTATIONS: [&str; 2] = [
    "pv.kubernetes.io/bind-completed",
    "pv.kubernetes.io/bound-by-controller",
];

/// What becomes of a persistent volume: restored as it was (its claim's
/// uid and version cleared), or left for its claim's provisioner to make
/// anew, as Velero does with a volume it has no snapshot of whose
/// reclaim policy is Delete (its data went with the original claim).
pub enum VolumePlan {
    Restore,
    Provision,
}

pub fn persistent_volume(object: &mut Value) -> VolumePlan {
    if object
        .pointer("/spec/persistentVolumeReclaimPolicy")
        .and_then(Value::as_str)
        == Some("Delete")
    {
        return VolumePlan::Provision;
    }
    if let Some(claim) = object_mut(object, &["spec", "claimRef"]) {
        claim.remove("uid");
        claim.remove("resourceVersion");
    }
    drop_binding_annotations(object);
    VolumePlan::Restore
}

/// A claim's binding annotations go; its volume name too when that volume
/// is provisioned anew (`provisioned` says which are).
pub fn persistent_volume_claim(object: &mut Value, provisioned: &dyn Fn(&str) -> bool) {
    let volume = object
        .pointer("/spec/volumeName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if volume.is_empty() {
        return;
    }
    drop_binding_annotations(object);
    if provisioned(&volume)
        && let Some(spec) = object_mut(object, &["spec"])
    {
        spec.remove("volumeName");
    }
}

fn drop_binding_annotations(object: &mut Value) {
    if let Some(annotations) = object_mut(object, &["metadata", "annotations"]) {
        for a in BINDING_ANNOTATIONS {
            annotations.remove(a);
        }
    }
}

/// No status (Velero's `resetStatus`; restoreStatus is not supported), and
/// the restore's labels.
pub fn finish(object: &mut Value, backup: &str, restore: &str) {
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    let Some(meta) = object_mut(object, &["metadata"]) else {
        return;
    };
    let labels = meta
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if !labels.is_object() {
        *labels = Value::Object(Map::new());
    }
    let labels = labels.as_object_mut().expect("made an object above");
    labels.insert(BACKUP_NAME_LABEL.into(), label_value(backup).into());
    labels.insert(RESTORE_NAME_LABEL.into(), label_value(restore).into());
}

/// Whether the object in the cluster is the one the restore would create:
/// compared as Velero compares before its "already exists" warning, without
/// what the API server sets (metadata it owns, status) and without the
/// restore's labels.
pub fn same_as_restored(in_cluster: &Value, restored: &Value) -> bool {
    fn comparable(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            map.remove("status");
        }
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in [
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "managedFields",
                "selfLink",
                "ownerReferences",
                "finalizers",
            ] {
                meta.remove(k);
            }
            if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
                labels.remove(BACKUP_NAME_LABEL);
                labels.remove(RESTORE_NAME_LABEL);
                if labels.is_empty() {
                    meta.remove("labels");
                }
            }
        }
        v
    }
    comparable(in_cluster) == comparable(restored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_long_name_becomes_a_label_value_as_velero_makes_it() {
        let name = "a".repeat(70);
        let v = label_value(&name);
        assert_eq!(v.len(), 63);
        assert!(v.starts_with(&"a".repeat(57)));
        assert_eq!(label_value("short"), "short");
    }

    #[test]
    fn a_service_gets_a_new_address_and_node_ports() {
        let mut svc = json!({"spec": {"clusterIP": "10.0.0.7", "clusterIPs": ["10.0.0.7"],
            "type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}});
        builtin_actions("services", &mut svc, false);
        assert_eq!(
            svc,
            json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}})
        );
        let mut kept =
            json!({"spec": {"clusterIP": "None", "ports": [{"port": 80, "nodePort": 30080}]}});
        builtin_actions("services", &mut kept, true);
        assert_eq!(kept["spec"]["clusterIP"], "None");
        assert_eq!(kept["spec"]["ports"][0]["nodePort"], 30080);
    }

    #[test]
    fn a_pod_loses_its_node_priority_and_legacy_token_volume() {
        let mut pod = json!({"spec": {"nodeName": "n1", "priority": 5, "serviceAccountName": "app",
            "volumes": [{"name": "app-token-x1"}, {"name": "data"}],
            "containers": [{"name": "c", "volumeMounts": [{"name": "app-token-x1"}, {"name": "data"}]}]}});
        builtin_actions("pods", &mut pod, false);
        assert_eq!(
            pod,
            json!({"spec": {"serviceAccountName": "app", "volumes": [{"name": "data"}],
                "containers": [{"name": "c", "volumeMounts": [{"name": "data"}]}]}})
        );
    }

    #[test]
    fn a_job_loses_its_controller_uid() {
        let mut job = json!({"spec": {"selector": {"matchLabels": {"controller-uid": "u", "app": "a"}},
            "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "u", "app": "a"}}}}});
        builtin_actions("jobs.batch", &mut job, false);
        assert_eq!(job["spec"]["selector"]["matchLabels"], json!({"app": "a"}));
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"],
            json!({"app": "a"})
        );
    }

    #[test]
    fn a_deleted_volume_is_provisioned_again_and_its_claim_unbound() {
        let mut pv = json!({"spec": {"persistentVolumeReclaimPolicy": "Delete"}});
        assert!(matches!(persistent_volume(&mut pv), VolumePlan::Provision));
        let mut pvc = json!({"metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes", "keep": "1"}},
            "spec": {"volumeName": "pv-1"}});
        persistent_volume_claim(&mut pvc, &|v| v == "pv-1");
        assert_eq!(
            pvc,
            json!({"metadata": {"annotations": {"keep": "1"}}, "spec": {}})
        );
        let mut retained = json!({"spec": {"persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"name": "c", "uid": "u", "resourceVersion": "9"}}});
        assert!(matches!(
            persistent_volume(&mut retained),
            VolumePlan::Restore
        ));
        assert_eq!(retained["spec"]["claimRef"], json!({"name": "c"}));
    }

    #[test]
    fn the_restore_labels_do_not_make_an_object_differ() {
        let mut restored = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n"}, "data": {"k": "v"}, "status": {}});
        finish(&mut restored, "b", "r");
        assert_eq!(restored["metadata"]["labels"][RESTORE_NAME_LABEL], "r");
        assert!(restored.get("status").is_none());
        let in_cluster = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n", "uid": "x", "resourceVersion": "5"}, "data": {"k": "v"}});
        assert!(same_as_restored(&in_cluster, &restored));
        let changed = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n"}, "data": {"k": "other"}});
        assert!(!same_as_restored(&changed, &restored));
    }
}
