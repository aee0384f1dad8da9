//! Realistic Kubernetes objects and volume data shared by the tests and the
//! benchmarks.

use serde_json::{Value, json};

/// A Pod of about 2.5 KB, shaped like what a StatefulSet leaves in a
/// cluster, mounting PVC `data-<name>` and ConfigMap `web-config`.
pub fn pod(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": "6f1c7a9e-5b43-4f0e-9d59-1a2b3c4d5e6f",
            "resourceVersion": "184467",
            "creationTimestamp": "2026-11-01T10:00:00Z",
            "labels": {"app": "web", "controller-revision-hash": "web-7d9f8c6b5", "tier": "frontend", "statefulset.kubernetes.io/pod-name": name},
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": "2026-11-01T09:59:00Z",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9102"
            },
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                "uid": "0b1e2d3c-4f5a-6b7c-8d9e-0f1a2b3c4d5e", "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "serviceAccountName": "web",
            "nodeName": "worker-2",
            "containers": [{
                "name": "web",
                "image": "registry.example.com/shop/web:1.42.0",
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                "env": [
                    {"name": "DATABASE_HOST", "value": format!("db.{ns}.svc.cluster.local")},
                    {"name": "CACHE_TTL", "value": "300"},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                ],
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
                "livenessProbe": {"httpGet": {"path": "/livez", "port": 8080}, "initialDelaySeconds": 15, "periodSeconds": 20, "failureThreshold": 3},
                "securityContext": {"runAsNonRoot": true, "runAsUser": 10001, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
                "terminationMessagePath": "/dev/termination-log",
                "imagePullPolicy": "IfNotPresent",
                "volumeMounts": [
                    {"name": "data", "mountPath": "/var/lib/web"},
                    {"name": "config", "mountPath": "/etc/web", "readOnly": true}
                ]
            }],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": format!("data-{name}")}},
                {"name": "config", "configMap": {"name": "web-config"}}
            ],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running",
            "podIP": "10.244.2.17",
            "hostIP": "192.168.1.12",
            "startTime": "2026-11-01T10:00:02Z",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T10:00:09Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-11-01T10:00:09Z"}
            ],
            "containerStatuses": [{
                "name": "web", "ready": true, "restartCount": 0,
                "image": "registry.example.com/shop/web:1.42.0",
                "imageID": "registry.example.com/shop/web@sha256:3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a3f4e",
                "state": {"running": {"startedAt": "2026-11-01T10:00:05Z"}}
            }]
        }
    })
}

/// The benchmark Pod (`examples/bench/pod.json`, 4.7 KB as written), which
/// the execute benchmark, `bench/compare.sh` and the ratio guard all use.
pub fn bench_pod() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/bench/pod.json"
    ))
    .expect("examples/bench/pod.json");
    serde_json::from_str(&text).expect("the bench Pod is JSON")
}

/// The `labels` plugin's config for the benchmarks: the label [`native_label`] sets.
pub const BENCH_LABELS: &str = "team=payments";

/// The benchmarks' baseline: what the `labels` plugin does with
/// [`BENCH_LABELS`], natively, the item crossing as JSON text both ways as
/// it does across the wasm boundary: written, then [`native_label_text`],
/// then parsed again, with the same serde_json calls the guest SDK and the
/// host use (`serde_json::to_string`, `FromStr`).
pub fn native_label(value: &Value) -> Value {
    let text = serde_json::to_string(value).expect("JSON writes");
    native_label_text(&text).parse().expect("JSON text parses")
}

/// Only the plugin's own JSON work, natively: the item's text parsed,
/// labelled and written, as the `labels` guest does it inside the sandbox,
/// with nothing done on the host's side. The tightest baseline: iar ÷ this
/// is the whole cost of the sandbox and the boundary.
pub fn native_label_text(text: &str) -> String {
    let mut v: Value = text.parse().expect("JSON text parses");
    let labels = v["metadata"]["labels"]
        .as_object_mut()
        .expect("the bench Pod has labels");
    labels.insert("team".into(), json!("payments"));
    serde_json::to_string(&v).expect("JSON writes")
}

/// The xorshift64 sequence from `state` (which must not be 0, the one
/// state it never leaves): a fast, repeatable stream of pseudo-random
/// words for test and benchmark data. Not for anything that must be
/// unpredictable.
pub fn xorshift(mut state: u64) -> impl Iterator<Item = u64> {
    assert_ne!(state, 0, "0 is xorshift's fixed point");
    std::iter::repeat_with(move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    })
}

/// `len` incompressible bytes, the same for the same `seed` and another
/// stream for every other seed: volume data whose size is its cost (gzip
/// cannot shrink it, a deduplicating repository finds nothing to share).
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    // 2·seed + 1: odd (xorshift's state must not be 0) and one-to-one
    // (`seed | 1` gave seeds 2k and 2k + 1 the same stream).
    xorshift(seed.wrapping_mul(2).wrapping_add(1))
        .take(len)
        .map(|x| x as u8)
        .collect()
}

/// A PersistentVolumeClaim of 1Gi in `ns`, bound to PV `pv-<name>` or
/// still Pending.
pub fn pvc(ns: &str, name: &str, bound: bool) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"volumeName": if bound { format!("pv-{name}") } else { String::new() }, "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": if bound { "Bound" } else { "Pending" }}
    })
}
