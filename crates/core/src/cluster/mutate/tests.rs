use super::*;
use serde_json::json;

fn gr(s: &str) -> GroupResource {
    let (resource, group) = s.split_once('.').unwrap_or((s, ""));
    GroupResource::new(group, resource)
}

fn grants(entries: &[&str]) -> MutateGrants {
    MutateGrants::only(entries).unwrap()
}

fn pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop"},
           "spec": {"containers": [{"name": "app", "image": "nginx"}],
                    "volumes": [{"name": "data", "emptyDir": {}}]}})
}

#[test]
fn an_unchanged_item_needs_no_grant() {
    assert_eq!(
        MutateGrants::none().check(&gr("pods"), &pod(), &pod()),
        Ok(())
    );
}

#[test]
fn a_change_without_a_grant_is_refused_naming_the_first_changed_path() {
    let mut after = pod();
    after["metadata"]["labels"] = json!({"team": "a"});
    let err = MutateGrants::none()
        .check(&gr("pods"), &pod(), &after)
        .unwrap_err();
    assert_eq!(err.rule, rule::NOT_GRANTED);
    assert_eq!(err.path, ".metadata.labels");
    // A grant for another resource does not help; a glob over this one does.
    assert!(
        grants(&["configmaps"])
            .check(&gr("pods"), &pod(), &after)
            .is_err()
    );
    assert_eq!(grants(&["*"]).check(&gr("pods"), &pod(), &after), Ok(()));
    assert_eq!(grants(&["pods"]).check(&gr("pods"), &pod(), &after), Ok(()));
}

#[test]
fn rights_resources_need_their_exact_name_even_under_a_glob() {
    let before = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "view"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": "shop"}]});
    let mut after = before.clone();
    after["roleRef"]["name"] = json!("cluster-admin");
    let crb = gr("clusterrolebindings.rbac.authorization.k8s.io");
    for g in [&["*"][..], &["*.rbac.authorization.k8s.io"], &[]] {
        let err = grants(g).check(&crb, &before, &after).unwrap_err();
        assert_eq!(err.rule, rule::RIGHTS, "{g:?}");
        assert_eq!(err.path, ".roleRef.name");
    }
    assert_eq!(
        grants(&["clusterrolebindings.rbac.authorization.k8s.io"]).check(&crb, &before, &after),
        Ok(())
    );
    for name in RIGHTS_RESOURCES {
        assert!(!grants(&["*"]).allows(&gr(name)), "{name}");
    }
}

#[test]
fn a_webhook_url_change_is_a_rights_change() {
    let before = json!({"kind": "MutatingWebhookConfiguration", "metadata": {"name": "w"},
        "webhooks": [{"name": "a", "clientConfig": {"service": {"name": "s", "namespace": "n"}}}]});
    let mut after = before.clone();
    after["webhooks"][0]["clientConfig"] = json!({"url": "https://evil.example"});
    let err = grants(&["*"])
        .check(
            &gr("mutatingwebhookconfigurations.admissionregistration.k8s.io"),
            &before,
            &after,
        )
        .unwrap_err();
    assert_eq!(err.rule, rule::RIGHTS);
    assert_eq!(err.path, ".webhooks[0].clientConfig.service");
}

#[test]
fn pod_security_fields_need_the_security_grant() {
    let mut after = pod();
    after["spec"]["hostPID"] = json!(true);
    let err = grants(&["pods"])
        .check(&gr("pods"), &pod(), &after)
        .unwrap_err();
    assert_eq!(
        (err.rule, err.path.as_str()),
        (rule::RIGHTS, ".spec.hostPID")
    );
    // Without any grant it is still the rights rule that names it.
    let err = MutateGrants::none()
        .check(&gr("pods"), &pod(), &after)
        .unwrap_err();
    assert_eq!(err.rule, rule::RIGHTS);
    assert_eq!(
        grants(&["pods", "pods/security"]).check(&gr("pods"), &pod(), &after),
        Ok(())
    );
    // The security grant alone is not a grant to change the rest.
    assert_eq!(
        grants(&["pods/security"])
            .check(&gr("pods"), &pod(), &after)
            .unwrap_err()
            .rule,
        rule::NOT_GRANTED
    );

    let cases = [(
        json!({"name": "app", "image": "nginx", "securityContext": {"privileged": true}}),
        ".spec.containers[name=app].securityContext",
    )];
    for (container, path) in cases {
        let mut after = pod();
        after["spec"]["containers"][0] = container;
        let err = grants(&["*"])
            .check(&gr("pods"), &pod(), &after)
            .unwrap_err();
        assert_eq!((err.rule, err.path.as_str()), (rule::RIGHTS, path));
    }
    let mut after = pod();
    after["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "root", "hostPath": {"path": "/"}}));
    let err = grants(&["*"])
        .check(&gr("pods"), &pod(), &after)
        .unwrap_err();
    assert_eq!(err.path, ".spec.volumes[name=root].hostPath");
    let mut after = pod();
    after["spec"]["serviceAccountName"] = json!("admin");
    assert_eq!(
        grants(&["*"])
            .check(&gr("pods"), &pod(), &after)
            .unwrap_err()
            .rule,
        rule::RIGHTS
    );
    // A plain volume or image change is not a security change.
    let mut after = pod();
    after["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "tmp", "emptyDir": {}}));
    after["spec"]["containers"][0]["image"] = json!("nginx:2");
    assert_eq!(grants(&["*"]).check(&gr("pods"), &pod(), &after), Ok(()));
}

#[test]
fn pod_templates_are_checked_where_each_workload_holds_them() {
    let template = |host: bool| json!({"spec": {"hostNetwork": host, "containers": []}});
    let cases = [
        (
            "deployments.apps",
            json!({"spec": {"template": template(false)}}),
            json!({"spec": {"template": template(true)}}),
            ".spec.template.spec.hostNetwork",
        ),
        (
            "cronjobs.batch",
            json!({"spec": {"jobTemplate": {"spec": {"template": template(false)}}}}),
            json!({"spec": {"jobTemplate": {"spec": {"template": template(true)}}}}),
            ".spec.jobTemplate.spec.template.spec.hostNetwork",
        ),
    ];
    for (r, before, after, path) in cases {
        let err = grants(&["*"]).check(&gr(r), &before, &after).unwrap_err();
        assert_eq!((err.rule, err.path.as_str()), (rule::RIGHTS, path), "{r}");
        let exact = format!("{r}/security");
        assert_eq!(
            grants(&["*", &exact]).check(&gr(r), &before, &after),
            Ok(())
        );
    }
}

#[test]
fn entries_are_globs_or_exact_security_grants() {
    assert!(
        MutateGrants::only(&["*", "*.apps", "pods/security", "deployments.apps/security"]).is_ok()
    );
    for bad in ["*/security", "configmaps/security", "pods/status", "[bad"] {
        assert!(MutateGrants::only(&[bad]).is_err(), "{bad}");
    }
}

#[test]
fn first_change_names_keys_indexes_and_dotted_keys() {
    assert_eq!(first_change(&json!({"a": 1}), &json!({"a": 1})), None);
    assert_eq!(
        first_change(&json!({"a": [1, 2]}), &json!({"a": [1]})).unwrap(),
        ".a[1]"
    );
    assert_eq!(
        first_change(&json!({"a": [1]}), &json!({"a": [1, 2]})).unwrap(),
        ".a[1]"
    );
    assert_eq!(
        first_change(&json!({"m": {}}), &json!({"m": {"iar.dev/x": "y"}})).unwrap(),
        ".m[\"iar.dev/x\"]"
    );
    assert_eq!(first_change(&json!(1), &json!("1")).unwrap(), "");
}

/// `check_item` decides as `check` does, and the fields it read from an
/// accepted output serve the next check of that item: a chain of plugins
/// reads each item's security fields once.
#[test]
fn check_item_reads_each_item_s_security_fields_once_and_decides_as_check() {
    use crate::item::Item;
    let catalog = crate::catalog::Catalog::builtin();
    let first = Item::from_value(pod(), catalog).unwrap();
    let mut labelled = pod();
    labelled["metadata"]["labels"] = json!({"team": "a"});
    let all = grants(&["*"]);
    let read = all
        .check_item(&first, &labelled.to_string())
        .unwrap()
        .expect("a pod's fields were read");
    let second = Item::from_value(labelled.clone(), catalog)
        .unwrap()
        .with_security(Some(read.clone()));
    assert!(std::sync::Arc::ptr_eq(
        second.security(|| panic!("read again")).unwrap(),
        &read
    ));
    let mut privileged = labelled.clone();
    privileged["spec"]["hostPID"] = json!(true);
    let err = all
        .check_item(&second, &privileged.to_string())
        .unwrap_err();
    assert_eq!(
        (err.rule, err.path.as_str()),
        (rule::RIGHTS, ".spec.hostPID")
    );
    assert_eq!(
        all.check(&gr("pods"), second.value(), &privileged)
            .unwrap_err(),
        err
    );
    // Without a grant the change is refused with its path, as by `check`.
    let err = MutateGrants::none()
        .check_item(&first, &labelled.to_string())
        .unwrap_err();
    assert_eq!(
        (err.rule, err.path.as_str()),
        (rule::NOT_GRANTED, ".metadata.labels")
    );
}
