//! Realistic Kubernetes objects for conformance checks: one or two of each
//! common kind, placed in a namespace and given labels that a plugin's
//! selector asks for, so the checks reach the plugin's real code paths.

use iar_core::select::applies_to::ResourceSelector;
use serde_json::{Value, json};

/// Objects of common kinds, shaped to match `selector` where it names
/// namespaces or simple label terms. Sorted smallest first, so the first
/// failing item is also the smallest that shows a failure.
pub fn items(selector: &ResourceSelector) -> Vec<Value> {
    let ns = selector
        .included_namespaces
        .iter()
        .find(|n| !n.contains('*') && !n.is_empty())
        .cloned()
        .unwrap_or_else(|| "shop".to_string());
    let labels = labels_for(&selector.label_selector);
    let mut out = objects(&ns);
    for obj in out.iter_mut().filter(|_| !labels.is_empty()) {
        let meta = &mut obj["metadata"];
        if !meta["labels"].is_object() {
            meta["labels"] = json!({});
        }
        for (k, v) in &labels {
            meta["labels"][k] = Value::String(v.clone());
        }
    }
    out.sort_by_key(|v| v.to_string().len());
    out
}

/// Labels that satisfy the positive terms of a label selector:
/// `k=v`, `k==v`, `k in (a,b)` (the first value), `k` (any value).
/// Negative terms are satisfied by not setting the key.
fn labels_for(selector: &str) -> Vec<(String, String)> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&selector[start..]);
    let mut out = Vec::new();
    for t in terms.iter().map(|t| t.trim()).filter(|t| !t.is_empty()) {
        if t.starts_with('!') || t.contains("!=") || t.contains(" notin ") {
            continue;
        }
        if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
            out.push((k.trim().to_string(), v.trim().to_string()));
        } else if let Some((k, list)) = t.split_once(" in ") {
            let first = list
                .trim()
                .trim_start_matches('(')
                .trim_end_matches(')')
                .split(',')
                .next()
                .unwrap_or("")
                .trim();
            out.push((k.trim().to_string(), first.to_string()));
        } else {
            out.push((t.to_string(), "true".to_string()));
        }
    }
    out
}

fn objects(ns: &str) -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": ns, "labels": {"app": "web"},
                "uid": "7d0c1f9e-0000-4000-8000-000000000001",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "7d0c1f9e-0000-4000-8000-000000000002"}]},
            "spec": {
                "containers": [{"name": "web", "image": "nginx:1.27",
                    "ports": [{"containerPort": 80}],
                    "envFrom": [{"configMapRef": {"name": "web-env"}}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "conf", "mountPath": "/etc/web"}]}],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
                    {"name": "conf", "configMap": {"name": "web-conf"}},
                    {"name": "tmp", "emptyDir": {}}
                ],
                "nodeName": "node-1", "serviceAccountName": "web"
            },
            "status": {"phase": "Running", "podIP": "10.0.0.12"}
        }),
        json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data-web-0", "namespace": ns, "labels": {"app": "web"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": "csi-standard", "volumeName": "pv-data-web-0"},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}
        }),
        json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "scratch", "namespace": ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}},
                "storageClassName": "csi-standard"},
            "status": {"phase": "Pending"}
        }),
        json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pv-data-web-0"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": "csi.example.com", "volumeHandle": "vol-0a1b2c"},
                "claimRef": {"kind": "PersistentVolumeClaim", "namespace": ns, "name": "data-web-0"},
                "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "csi-standard"},
            "status": {"phase": "Bound"}
        }),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "api", "namespace": ns, "labels": {"app": "api"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "api"}},
                "template": {"metadata": {"labels": {"app": "api"}},
                    "spec": {"containers": [{"name": "api", "image": "example/api:2.1",
                        "env": [{"name": "MODE", "value": "prod"}]}]}}},
            "status": {"replicas": 2, "readyReplicas": 2}
        }),
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": ns, "labels": {"app": "web"}},
            "spec": {"replicas": 1, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}
        }),
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web-conf", "namespace": ns, "labels": {"app": "web"}},
            "data": {"nginx.conf": "server { listen 80; }", "color": "blue"}
        }),
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "api-token", "namespace": ns},
            "type": "Opaque",
            "data": {"token": "c2VjcmV0"}
        }),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": ns, "labels": {"app": "web"}},
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.20", "selector": {"app": "web"},
                "ports": [{"port": 80, "targetPort": 80, "protocol": "TCP"}]}
        }),
        json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "web", "namespace": ns}
        }),
        json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns},
            "status": {"phase": "Active"}
        }),
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "migrate", "namespace": ns},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "migrate", "image": "example/migrate:1"}]}}}
        }),
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"rules": [{"host": "shop.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}
        }),
        json!({
            "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
            "metadata": {"name": "csi-snapclass", "labels": {"velero.io/csi-volumesnapshot-class": "true"}},
            "driver": "csi.example.com", "deletionPolicy": "Retain"
        }),
        json!({
            "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
            "metadata": {"name": "data-web-0-nightly", "namespace": ns},
            "spec": {"source": {"persistentVolumeClaimName": "data-web-0"}, "volumeSnapshotClassName": "csi-snapclass"},
            "status": {"readyToUse": true, "restoreSize": "1Gi"}
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_satisfy_positive_terms() {
        assert_eq!(
            labels_for("app=web, tier in (gold, silver),!legacy,env!=dev,backup"),
            [
                ("app".into(), "web".into()),
                ("tier".into(), "gold".into()),
                ("backup".into(), "true".into())
            ]
        );
    }

    #[test]
    fn items_land_in_the_selected_namespace_with_the_labels() {
        let sel = ResourceSelector {
            included_namespaces: vec!["payments".into()],
            label_selector: "team=a".into(),
            ..ResourceSelector::default()
        };
        let items = items(&sel);
        assert!(items.len() >= 10);
        let pod = items.iter().find(|i| i["kind"] == "Pod").unwrap();
        assert_eq!(pod["metadata"]["namespace"], "payments");
        assert_eq!(pod["metadata"]["labels"]["team"], "a");
    }
}
