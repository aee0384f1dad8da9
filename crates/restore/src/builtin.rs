//! Velero's built-in restore actions for RBAC bindings, API services,
//! webhook configurations, CRDs, service-account token secrets and a
//! pod's claims (v1.18.3, `pkg/restore/actions`), run natively as
//! Velero's server runs them; [`crate::prepare`] holds those for pods,
//! services, jobs, service accounts and volumes.

use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The label of API services the aggregator registers itself
/// (`autoregister.AutoRegisterManagedLabel`): Velero never restores them.
pub const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

/// APIServiceAction: an API service the aggregator manages is skipped.
pub fn skips_api_service(object: &Value) -> bool {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_some_and(|l| l.contains_key(AUTOMANAGED))
}

/// RoleBindingAction and ClusterRoleBindingAction: a subject in a mapped
/// namespace is in its new namespace.
pub fn binding_subjects(object: &mut Value, mapping: &BTreeMap<String, String>) {
    if mapping.is_empty() {
        return;
    }
    let Some(Value::Array(subjects)) = object.get_mut("subjects") else {
        return;
    };
    for s in subjects.iter_mut().filter_map(Value::as_object_mut) {
        let mapped = s
            .get("namespace")
            .and_then(Value::as_str)
            .and_then(|ns| mapping.get(ns));
        if let Some(to) = mapped {
            s.insert("namespace".into(), json!(to));
        }
    }
}

/// AdmissionWebhookConfigurationAction: in a v1 configuration, a
/// webhook's `sideEffects` other than `None` or `NoneOnDryRun` (v1 allows
/// no other) becomes `None`.
pub fn webhook_side_effects(object: &mut Value) {
    if object.get("apiVersion").and_then(Value::as_str) != Some("admissionregistration.k8s.io/v1") {
        return;
    }
    let Some(Value::Array(webhooks)) = object.get_mut("webhooks") else {
        return;
    };
    for w in webhooks.iter_mut().filter_map(Value::as_object_mut) {
        let s = w.get("sideEffects").and_then(Value::as_str);
        if !matches!(s, Some("None" | "NoneOnDryRun")) {
            w.insert("sideEffects".into(), json!("None"));
        }
    }
}

/// CRDV1PreserveUnknownFieldsAction: v1 forbids `preserveUnknownFields:
/// true`; each version's schema says it instead.
pub fn crd_preserve_unknown_fields(object: &mut Value) {
    if object.get("apiVersion").and_then(Value::as_str) != Some("apiextensions.k8s.io/v1")
        || object.pointer("/spec/preserveUnknownFields") != Some(&Value::Bool(true))
    {
        return;
    }
    object["spec"]["preserveUnknownFields"] = json!(false);
    if let Some(Value::Array(versions)) = object.pointer_mut("/spec/versions") {
        for v in versions {
            if let Some(schema) = v
                .pointer_mut("/schema/openAPIV3Schema")
                .and_then(Value::as_object_mut)
            {
                schema.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
            }
        }
    }
}

/// What SecretAction does with a service-account token secret.
#[derive(Debug, PartialEq, Eq)]
pub enum TokenSecret {
    /// Not a token secret: as it is.
    Other,
    /// A token Kubernetes made for an account named `<account>-token-…`
    /// that exists: made again by Kubernetes, not restored.
    Skip(String),
    /// Restored without its token, CA and account uid, which Kubernetes
    /// fills anew.
    Reset,
}

/// The service accounts a token secret's name may belong to (Velero
/// matches every account whose name and `-token-` begin the secret's).
fn token_accounts(secret: &Value) -> Vec<String> {
    let name = secret
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    name.match_indices("-token-")
        .map(|(at, _)| name[..at].to_string())
        .filter(|a| !a.is_empty())
        .collect()
}

/// SecretAction, given whether each of [`token_accounts`] exists.
pub fn token_secret(secret: &mut Value, exists: &dyn Fn(&str) -> bool) -> TokenSecret {
    if secret.get("type").and_then(Value::as_str) != Some("kubernetes.io/service-account-token") {
        return TokenSecret::Other;
    }
    if let Some(a) = token_accounts(secret).into_iter().find(|a| exists(a)) {
        return TokenSecret::Skip(a);
    }
    if let Some(a) = secret
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove("kubernetes.io/service-account.uid");
    }
    if let Some(d) = secret.get_mut("data").and_then(Value::as_object_mut) {
        d.remove("token");
        d.remove("ca.crt");
    }
    TokenSecret::Reset
}

/// The ConfigMap Velero's change-storage-class action reads, by its
/// labels (`common.PluginConfigLabelSelector`): in the namespace of the
/// server that restores (here, of the Restore).
pub const STORAGE_CLASS_CONFIG: &str =
    "velero.io/plugin-config,velero.io/change-storage-class=RestoreItemAction";

/// The ConfigMap Velero's change-image-name action reads, likewise.
pub const IMAGE_NAME_CONFIG: &str =
    "velero.io/plugin-config,velero.io/change-image-name=RestoreItemAction";

/// The data of the two ConfigMaps Velero's built-in restore actions read;
/// empty where there is none.
#[derive(Clone, Debug, Default)]
pub struct VeleroConfigs {
    /// Old storage class → new.
    pub storage_classes: BTreeMap<String, String>,
    /// Rules `"<old part>,<new part>"`, by key.
    pub image_names: BTreeMap<String, String>,
}

/// Where ChangeImageNameAction looks for containers, by resource.
fn container_paths(group_resource: &str) -> &'static [&'static str] {
    match group_resource {
        "pods" => &["/spec/containers", "/spec/initContainers"],
        "cronjobs.batch" => &[
            "/spec/jobTemplate/spec/template/spec/containers",
            "/spec/jobTemplate/spec/template/spec/initContainers",
        ],
        "deployments.apps"
        | "statefulsets.apps"
        | "daemonsets.apps"
        | "replicasets.apps"
        | "replicationcontrollers"
        | "jobs.batch" => &[
            "/spec/template/spec/containers",
            "/spec/template/spec/initContainers",
        ],
        _ => &[],
    }
}

/// ChangeImageNameAction: each container's image that a rule's old part
/// is in has every occurrence of it replaced by the rule's new part; the
/// first rule that matches, in key order (Velero takes them in Go's map
/// order, which varies), and none whose old part is empty (it would match
/// every image). Returns the images changed.
pub fn image_names(
    object: &mut Value,
    group_resource: &str,
    rules: &BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let mut changed = Vec::new();
    if rules.is_empty() {
        return changed;
    }
    for path in container_paths(group_resource) {
        let Some(Value::Array(containers)) = object.pointer_mut(path) else {
            continue;
        };
        for c in containers.iter_mut() {
            let Some(image) = c.get("image").and_then(Value::as_str).map(String::from) else {
                continue;
            };
            let rule = rules.values().find_map(|row| {
                let (old, new) = row.split_once(',')?;
                let (old, new) = (old.trim(), new.trim());
                (!old.is_empty() && !new.is_empty() && image.contains(old)).then_some((old, new))
            });
            if let Some((old, new)) = rule {
                let replaced = image.replace(old, new);
                c["image"] = json!(replaced);
                changed.push((image, replaced));
            }
        }
    }
    changed
}

/// ChangeStorageClassAction: a volume's, a claim's or a stateful set's
/// claim templates' storage class that `mapping` names becomes the one it
/// maps to, which must exist (`exists`); `Err` names the missing one, and
/// the object is not restored, as in Velero. Returns the classes changed.
pub fn storage_class(
    object: &mut Value,
    group_resource: &str,
    mapping: &BTreeMap<String, String>,
    exists: &dyn Fn(&str) -> bool,
) -> Result<Vec<(String, String)>, String> {
    if mapping.is_empty() {
        return Ok(Vec::new());
    }
    let mut specs: Vec<&mut Value> = match group_resource {
        "persistentvolumes" | "persistentvolumeclaims" => {
            object.get_mut("spec").into_iter().collect()
        }
        "statefulsets.apps" => match object.pointer_mut("/spec/volumeClaimTemplates") {
            Some(Value::Array(templates)) => templates
                .iter_mut()
                .filter_map(|t| t.get_mut("spec"))
                .collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    let mut changed = Vec::new();
    for spec in specs.iter_mut() {
        let Some(old) = spec.get("storageClassName").and_then(Value::as_str) else {
            continue;
        };
        let Some(new) = mapping.get(old) else {
            continue;
        };
        if !exists(new) {
            return Err(format!(
                "storage class {new} (mapped from {old} by the change-storage-class ConfigMap) does not exist"
            ));
        }
        changed.push((old.to_string(), new.clone()));
        spec["storageClassName"] = json!(new);
    }
    Ok(changed)
}

/// AddPVCFromPodAction: the claims a pod mounts, restored before it.
pub fn pod_claims(pod: &Value) -> Vec<String> {
    pod.pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.pointer("/persistentVolumeClaim/claimName"))
        .filter_map(Value::as_str)
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_subjects_follow_the_mapping() {
        let mut rb = json!({"subjects": [
            {"kind": "ServiceAccount", "name": "a", "namespace": "shop"},
            {"kind": "ServiceAccount", "name": "b", "namespace": "other"},
            {"kind": "User", "name": "c"},
        ]});
        let mapping = BTreeMap::from([("shop".to_string(), "shop-2".to_string())]);
        binding_subjects(&mut rb, &mapping);
        assert_eq!(rb["subjects"][0]["namespace"], "shop-2");
        assert_eq!(rb["subjects"][1]["namespace"], "other");
        assert_eq!(rb["subjects"][2].get("namespace"), None);
    }

    #[test]
    fn webhooks_side_effects_crds_and_api_services_as_velero() {
        let mut hooks = json!({"apiVersion": "admissionregistration.k8s.io/v1", "webhooks": [
            {"name": "a", "sideEffects": "Unknown"}, {"name": "b", "sideEffects": "NoneOnDryRun"}, {"name": "c"},
        ]});
        webhook_side_effects(&mut hooks);
        let effects: Vec<_> = hooks["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["sideEffects"].clone())
            .collect();
        assert_eq!(
            effects,
            [json!("None"), json!("NoneOnDryRun"), json!("None")]
        );
        let mut beta = json!({"apiVersion": "admissionregistration.k8s.io/v1beta1", "webhooks": [{"sideEffects": "Unknown"}]});
        webhook_side_effects(&mut beta);
        assert_eq!(beta["webhooks"][0]["sideEffects"], "Unknown");

        let mut crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "spec": {"preserveUnknownFields": true,
            "versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"type": "object"}}}, {"name": "v2"}]}});
        crd_preserve_unknown_fields(&mut crd);
        assert_eq!(crd["spec"]["preserveUnknownFields"], false);
        assert_eq!(
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert_eq!(crd["spec"]["versions"][1].get("schema"), None);

        assert!(skips_api_service(
            &json!({"metadata": {"labels": {AUTOMANAGED: "onstart"}}})
        ));
        assert!(!skips_api_service(
            &json!({"metadata": {"labels": {"app": "metrics"}}})
        ));
    }

    #[test]
    fn a_token_secret_of_an_existing_account_is_skipped_another_reset() {
        let secret = |name: &str| {
            json!({"type": "kubernetes.io/service-account-token",
            "metadata": {"name": name, "annotations": {"kubernetes.io/service-account.uid": "u", "keep": "k"}},
            "data": {"token": "dA==", "ca.crt": "Yw==", "namespace": "bg=="}})
        };
        let mut s = secret("builder-token-x7k2q");
        assert_eq!(
            token_secret(&mut s, &|a| a == "builder"),
            TokenSecret::Skip("builder".into())
        );
        let mut s = secret("gone-token-abcde");
        assert_eq!(token_secret(&mut s, &|_| false), TokenSecret::Reset);
        assert_eq!(s["data"], json!({"namespace": "bg=="}));
        assert_eq!(s["metadata"]["annotations"], json!({"keep": "k"}));
        let mut opaque =
            json!({"type": "Opaque", "metadata": {"name": "x-token-y"}, "data": {"token": "dA=="}});
        assert_eq!(token_secret(&mut opaque, &|_| true), TokenSecret::Other);
        assert_eq!(opaque["data"]["token"], "dA==");
    }

    #[test]
    fn storage_classes_change_as_the_config_map_maps_them() {
        let mapping = BTreeMap::from([("slow".to_string(), "fast".to_string())]);
        let mut pvc = json!({"spec": {"storageClassName": "slow"}});
        let changed = storage_class(&mut pvc, "persistentvolumeclaims", &mapping, &|c| {
            c == "fast"
        });
        assert_eq!(changed.unwrap(), [("slow".to_string(), "fast".to_string())]);
        assert_eq!(pvc["spec"]["storageClassName"], "fast");
        let mut sts = json!({"spec": {"volumeClaimTemplates": [
            {"spec": {"storageClassName": "slow"}}, {"spec": {"storageClassName": "other"}}, {"spec": {}},
        ]}});
        storage_class(&mut sts, "statefulsets.apps", &mapping, &|_| true).unwrap();
        assert_eq!(
            sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"],
            "fast"
        );
        assert_eq!(
            sts["spec"]["volumeClaimTemplates"][1]["spec"]["storageClassName"],
            "other"
        );
        // The class it maps to must exist; the object is then not restored.
        let mut pv = json!({"spec": {"storageClassName": "slow"}});
        let e = storage_class(&mut pv, "persistentvolumes", &mapping, &|_| false).unwrap_err();
        assert!(
            e.contains("storage class fast") && e.contains("does not exist"),
            "{e}"
        );
        // Other resources are left.
        let mut pod = json!({"spec": {"storageClassName": "slow"}});
        assert!(
            storage_class(&mut pod, "pods", &mapping, &|_| true)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn images_change_as_the_rules_say() {
        let rules = BTreeMap::from([
            ("case1".to_string(), "1.1.1.1:5000,2.2.2.2:3000".to_string()),
            ("case2".to_string(), ",everything".to_string()),
        ]);
        let mut pod = json!({"spec": {
            "containers": [{"name": "a", "image": "1.1.1.1:5000/abc:test"}, {"name": "b", "image": "nginx"}],
            "initContainers": [{"name": "i", "image": "1.1.1.1:5000/init"}],
        }});
        let changed = image_names(&mut pod, "pods", &rules);
        assert_eq!(changed.len(), 2, "{changed:?}");
        assert_eq!(
            pod["spec"]["containers"][0]["image"],
            "2.2.2.2:3000/abc:test"
        );
        assert_eq!(pod["spec"]["containers"][1]["image"], "nginx");
        assert_eq!(
            pod["spec"]["initContainers"][0]["image"],
            "2.2.2.2:3000/init"
        );
        let mut cron = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "c", "image": "1.1.1.1:5000/job"}]}}}}}});
        image_names(&mut cron, "cronjobs.batch", &rules);
        assert_eq!(
            cron.pointer("/spec/jobTemplate/spec/template/spec/containers/0/image"),
            Some(&json!("2.2.2.2:3000/job"))
        );
        let mut cm =
            json!({"spec": {"template": {"spec": {"containers": [{"image": "1.1.1.1:5000/x"}]}}}});
        assert!(image_names(&mut cm, "configmaps", &rules).is_empty());
    }

    #[test]
    fn a_pods_claims_come_first() {
        let pod = json!({"spec": {"volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
            {"name": "html", "emptyDir": {}},
        ]}});
        assert_eq!(pod_claims(&pod), ["data-web-0"]);
    }
}
