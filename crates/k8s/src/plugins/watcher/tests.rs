use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;

fn cm(name: &str, plugin: &str, created: i64, uid: &str, enabled: bool) -> ConfigMap {
    let mut data = BTreeMap::from([(configmap::KEY_NAME.to_string(), plugin.to_string())]);
    if !enabled {
        data.insert(configmap::KEY_ENABLED.into(), "false".into());
    }
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(uid.into()),
            creation_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + created).unwrap(),
            )),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    }
}

fn winners(objects: &[ConfigMap]) -> BTreeMap<String, String> {
    claimants(objects)
        .into_iter()
        .map(|(plugin, list)| (plugin, name(list[0])))
        .collect()
}

/// The oldest claimant holds a name, then the smaller uid; the order
/// the objects are seen in changes nothing (a restart lists them in
/// another order than their events came in), and a disabled ConfigMap
/// claims nothing.
#[test]
fn the_oldest_configmap_holds_a_name_whatever_the_order() {
    let objects = [
        cm("aa-newer", "labels", 20, "u1", true),
        cm("zz-older", "labels", 10, "u9", true),
        cm("tie-b", "tie", 5, "b", true),
        cm("tie-a", "tie", 5, "c", true),
        cm("tie-c", "tie", 5, "a", true),
        cm("off-oldest", "off", 1, "0", false),
        cm("off-on", "off", 2, "1", true),
    ];
    let expected = BTreeMap::from([
        ("labels".to_string(), "zz-older".to_string()),
        ("tie".to_string(), "tie-c".to_string()),
        ("off".to_string(), "off-on".to_string()),
    ]);
    let mut order: Vec<ConfigMap> = objects.to_vec();
    for shift in 0..order.len() {
        order.rotate_left(1);
        assert_eq!(winners(&order), expected, "rotation {shift}");
        order.reverse();
        assert_eq!(winners(&order), expected, "reversed, rotation {shift}");
    }
    let claims = claimants(&objects);
    match claim_of(&claims, &objects[0]) {
        Claim::Waits { winner, why, .. } => {
            assert_eq!(winner, "zz-older");
            assert!(why.starts_with("created earlier"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        claim_of(&claims, &objects[1]),
        Claim::Holds {
            plugin: Some("labels".into()),
            rivals: vec!["aa-newer".into()]
        }
    );
    match claim_of(&claims, &objects[2]) {
        Claim::Waits { winner, why, .. } => {
            assert_eq!(winner, "tie-c");
            assert!(why.contains("smaller uid"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        claim_of(&claims, &objects[5]),
        Claim::Holds {
            plugin: None,
            rivals: vec![]
        }
    );
    let note = claim_note(&claim_of(&claims, &objects[1]));
    assert!(note.contains("\"aa-newer\""), "{note}");
    assert!(note.contains("rule: plugin-name-unique"), "{note}");
}
