use super::*;
use VolumeAction::*;
use iar_core::catalog::Catalog;
use serde_json::json;

const POLICY: &str = r#"
version: v1
volumePolicies:
- conditions: {storageClass: [fast]}
  action: {type: fs-backup}
- conditions: {capacity: "0,10Gi", csi: {driver: ebs.csi.aws.com}}
  action: {type: snapshot}
- conditions: {nfs: {server: 10.0.0.1}}
  action: {type: skip}
- conditions: {volumeTypes: [emptyDir]}
  action: {type: skip}
- conditions: {capacity: "100Gi,"}
  action: {type: skip}
"#;

fn pvc_facts(name: &str, class: &str, gib: f64, csi: Option<&str>) -> VolumeFacts {
    VolumeFacts {
        name: name.into(),
        pvc: Some(format!("claim-{name}")),
        volume_type: if csi.is_some() { "csi" } else { "local" }.into(),
        capacity: Some(gib * 1024f64.powi(3)),
        storage_class: Some(class.into()),
        csi: csi.map(|d| (d.to_string(), BTreeMap::new())),
        ..VolumeFacts::default()
    }
}

fn plain(name: &str, volume_type: &str) -> VolumeFacts {
    VolumeFacts {
        name: name.into(),
        volume_type: volume_type.into(),
        ..VolumeFacts::default()
    }
}

/// name, volume, policy, opt-in list, opt-out list, default, then the
/// expected action and rule.
type Case<'a> = (
    &'a str,
    VolumeFacts,
    Option<&'a ResourcePolicies>,
    Vec<String>,
    Vec<String>,
    bool,
    VolumeAction,
    Rule,
);

/// The per-volume decision table: each named case gives the volume, the
/// policy (or none), the annotations and the default, and the action and
/// rule that must decide it.
#[test]
fn per_volume_decisions() {
    let policy = ResourcePolicies::parse(POLICY).unwrap();
    let nfs = VolumeFacts {
        nfs: Some(("10.0.0.1".into(), "/x".into())),
        ..pvc_facts("share", "slow", 5.0, None)
    };
    let p = Some(&policy);
    let fs_host_path = ResourcePolicies::parse(
            "version: v1\nvolumePolicies:\n- conditions: {volumeTypes: [hostPath]}\n  action: {type: fs-backup}\n",
        )
        .unwrap();
    let snapshot_empty_dir = ResourcePolicies::parse(
            "version: v1\nvolumePolicies:\n- conditions: {volumeTypes: [emptydir]}\n  action: {type: snapshot}\n",
        )
        .unwrap();
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("policy fs-backup beats default off and no opt-in",
                pvc_facts("data", "fast", 5.0, None), p, s(&[]), s(&[]), false, FsBackup, Rule::Policy(0)),
            ("policy fs-backup beats opt-out",
                pvc_facts("data", "fast", 5.0, None), p, s(&[]), s(&["data"]), true, FsBackup, Rule::Policy(0)),
            ("policy snapshot beats default on",
                pvc_facts("data", "slow", 5.0, Some("ebs.csi.aws.com")), p, s(&[]), s(&[]), true, Snapshot, Rule::Policy(1)),
            ("policy snapshot: capacity above range does not match, default decides",
                pvc_facts("data", "slow", 50.0, Some("ebs.csi.aws.com")), p, s(&[]), s(&[]), true, FsBackup, Rule::DefaultOn),
            ("policy skip by nfs server beats opt-in",
                nfs, p, s(&["share"]), s(&[]), false, Skip, Rule::Policy(2)),
            ("policy skip by volume type beats opt-in",
                plain("scratch", "emptyDir"), p, s(&["scratch"]), s(&[]), false, Skip, Rule::Policy(3)),
            ("policy skip by open-ended capacity",
                pvc_facts("big", "slow", 200.0, None), p, s(&[]), s(&[]), true, Skip, Rule::Policy(4)),
            ("no policy match: opt-in with default off",
                pvc_facts("data", "slow", 50.0, None), p, s(&["logs", "data"]), s(&[]), false, FsBackup, Rule::OptIn),
            ("opt-in is ignored when the default is on (only excludes count)",
                pvc_facts("data", "slow", 50.0, None), None, s(&["other"]), s(&[]), true, FsBackup, Rule::DefaultOn),
            ("opt-out with default on: a PVC is left to snapshots",
                pvc_facts("data", "slow", 50.0, None), None, s(&[]), s(&["data"]), true, Snapshot, Rule::OptOut),
            ("opt-out with default on: an emptyDir is skipped",
                plain("scratch", "emptyDir"), None, s(&[]), s(&["scratch"]), true, Skip, Rule::OptOut),
            ("default on", plain("scratch", "emptyDir"), None, s(&[]), s(&[]), true, FsBackup, Rule::DefaultOn),
            ("default off", plain("scratch", "emptyDir"), None, s(&[]), s(&[]), false, Skip, Rule::DefaultOff),
            ("default off, PVC", pvc_facts("data", "slow", 1.0, None), None, s(&[]), s(&[]), false, Snapshot, Rule::DefaultOff),
            ("opt-out list is ignored when the default is off",
                plain("scratch", "emptyDir"), None, s(&[]), s(&["scratch"]), false, Skip, Rule::DefaultOff),
            ("hostPath is never fs-backed, even opted in",
                plain("node", "hostPath"), None, s(&["node"]), s(&[]), false, Skip, Rule::UnsupportedType),
            ("secret, configMap, projected, downwardAPI never, default on",
                plain("creds", "secret"), None, s(&[]), s(&[]), true, Skip, Rule::UnsupportedType),
            ("configMap", plain("cfg", "configMap"), None, s(&[]), s(&[]), true, Skip, Rule::UnsupportedType),
            ("projected", plain("kube-api-access-x", "projected"), None, s(&[]), s(&[]), true, Skip, Rule::UnsupportedType),
            ("downwardAPI", plain("info", "downwardAPI"), None, s(&[]), s(&[]), true, Skip, Rule::UnsupportedType),
            ("default token", plain("default-token-abcde", "secret"), None, s(&[]), s(&[]), true, Skip, Rule::UnsupportedType),
            ("policy fs-backup on a hostPath still skips",
                plain("node", "hostPath"),
                Some(&fs_host_path),
                s(&[]), s(&[]), true, Skip, Rule::Policy(0)),
            ("policy snapshot on an emptyDir skips (nothing to snapshot)",
                plain("scratch", "emptyDir"),
                Some(&snapshot_empty_dir),
                s(&["scratch"]), s(&[]), false, Skip, Rule::Policy(0)),
        ];
    for (name, facts, policy, opt_in, opt_out, default, action, rule) in cases {
        let d = decide(&facts, policy, &opt_in, &opt_out, default);
        assert_eq!(
            (d.action, d.rule.clone()),
            (action, rule),
            "{name}: {}",
            d.reason
        );
        assert!(!d.reason.is_empty(), "{name}");
    }
}

/// Default off, one volume opted in: that volume, and only that one, is
/// fs-backed, so a post hook that waits on the pod's volumes must wait
/// for it (Velero once decided from the default flag alone and did not).
#[test]
fn default_off_with_one_opted_in_volume() {
    let pod = Item::from_value(
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db", "namespace": "ns",
            "annotations": {OPT_IN: "data, scratch"}},
        "spec": {"volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "db-data"}},
            {"name": "logs", "persistentVolumeClaim": {"claimName": "db-logs"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "token", "projected": {"sources": []}},
            {"name": "cfg", "configMap": {"name": "c"}}
        ]}}),
        Catalog::builtin(),
    )
    .unwrap();
    let claim = |name: &str| Claim {
        pvc: Some(json!({"metadata": {"name": name}, "spec": {"storageClassName": "std"}})),
        pv: Some(json!({"spec": {"capacity": {"storage": "1Gi"}, "csi": {"driver": "d"}}})),
    };
    let got: Vec<(String, VolumeAction)> = decide_pod_volumes(&pod, &claim, None, false)
        .into_iter()
        .map(|d| (d.volume, d.action))
        .collect();
    assert_eq!(
        got,
        vec![
            ("data".into(), FsBackup),
            ("logs".into(), Snapshot),
            ("scratch".into(), FsBackup),
            ("token".into(), Skip),
            ("cfg".into(), Skip),
        ]
    );
    // A policy that skips csi volumes overrides the opt-in of "data".
    let skip_csi = ResourcePolicies::parse(
        "version: v1\nvolumePolicies:\n- conditions: {csi: {driver: d}}\n  action: {type: skip}\n",
    )
    .unwrap();
    let d = decide_pod_volumes(&pod, &claim, Some(&skip_csi), false);
    assert_eq!((d[0].action, d[0].rule.clone()), (Skip, Rule::Policy(0)));
    assert_eq!(d[0].pvc.as_deref(), Some("db-data"));
}

/// Facts come from the bound PV for a PVC volume (type, size, CSI,
/// class) and from the pod volume otherwise.
#[test]
fn facts_come_from_the_pv() {
    let vol = json!({"name": "data", "persistentVolumeClaim": {"claimName": "c"}});
    let claim = Claim {
        pvc: Some(
            json!({"metadata": {"labels": {"tier": "db"}}, "spec": {"storageClassName": "from-pvc"}}),
        ),
        pv: Some(
            json!({"spec": {"capacity": {"storage": "2Gi"}, "storageClassName": "gold",
                "nfs": {"server": "s", "path": "/p"}, "claimRef": {}}}),
        ),
    };
    let f = volume_facts(&vol, &claim);
    assert_eq!(f.volume_type, "nfs");
    assert_eq!(f.capacity, Some(2.0 * 1024f64.powi(3)));
    assert_eq!(f.storage_class.as_deref(), Some("gold"));
    assert_eq!(f.nfs, Some(("s".into(), "/p".into())));
    assert_eq!(f.pvc_labels.get("tier").map(String::as_str), Some("db"));
    let unbound = volume_facts(&vol, &Claim::default());
    assert_eq!(unbound.volume_type, "persistentVolumeClaim");
    assert_eq!(
        volume_facts(
            &json!({"name": "h", "hostPath": {"path": "/"}}),
            &Claim::default()
        )
        .volume_type,
        "hostPath"
    );
}

/// Capacity ranges: inclusive bounds, open ends, Kubernetes suffixes.
#[test]
fn capacity_ranges() {
    let gi = 1024f64.powi(3);
    #[rustfmt::skip]
        let cases = [
            ("0,100Gi", 100.0 * gi, true), ("0,100Gi", 100.0 * gi + 1.0, false), ("0,100Gi", 0.0, true),
            ("10Gi,", 10.0 * gi, true), ("10Gi,", 10.0 * gi - 1.0, false), ("10Gi,", 1e15, true),
            (",5Gi", 5.0 * gi, true), (",5Gi", 6.0 * gi, false),
            ("1G,2G", 1.5e9, true), ("1G,2G", 2.1e9, false), ("1e3,2k", 1500.0, true),
            (" 1Mi , 2Mi ", 1.5 * 1024.0 * 1024.0, true), ("5Gi,0", 1e15, true),
        ];
    for (range, bytes, inside) in cases {
        assert_eq!(
            Capacity::parse(range).unwrap().contains(bytes),
            inside,
            "{range} {bytes}"
        );
    }
    for bad in ["100Gi", "1,2,3", "x,1Gi", "1Gb,2Gi", "5Gi,1Gi", "-1,2"] {
        assert!(Capacity::parse(bad).is_err(), "{bad}");
    }
}

/// A policy that does not parse is an error naming the field.
#[test]
fn bad_policies_name_the_field() {
    let cases = [
        ("version: v2\n", "version"),
        (
            "version: v1\nvolumePolicies:\n- conditions: {}\n  action: {type: fs-backup}\n- conditions: {capacity: \"lots\"}\n  action: {type: skip}\n",
            "volumePolicies[1].conditions.capacity",
        ),
        (
            "version: v1\nvolumePolicies:\n- action: {type: copy}\n",
            "volumePolicies[0].action.type",
        ),
        (
            "version: v1\nvolumePolicies:\n- conditions: {storageClas: [x]}\n  action: {type: skip}\n",
            "document",
        ),
    ];
    for (yaml, field) in cases {
        let e = ResourcePolicies::parse(yaml).unwrap_err();
        assert_eq!(e.field, field, "{yaml}: {e}");
    }
    let e = ResourcePolicies::parse(
        "version: v1\nvolumePolicies:\n- conditions: {storageClas: [x]}\n  action: {type: skip}\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("storageClas"), "{e}");
}
