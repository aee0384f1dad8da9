use super::*;
use crate::select::labels::LabelSelector;
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;

fn refused(selector: Value) -> String {
    match parse(Some(&selector)) {
        Ok(s) => panic!("{selector} should be refused, got {s:?}"),
        Err(e) => e,
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What apimachinery accepts is accepted, in kube's text the server is
/// sent, and matched as apimachinery matches it.
#[test]
fn accepted_selectors_match_as_in_kubernetes() {
    let selector = json!({
        "matchLabels": {"app": "web", "example.com/tier": ""},
        "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "staging"]},
            {"key": "legacy", "operator": "NotIn", "values": ["true"]},
            {"key": "owner", "operator": "Exists"},
            {"key": "frozen", "operator": "DoesNotExist", "values": null},
            {"key": "zone", "operator": "Exists", "values": []}
        ]
    });
    let kube = parse(Some(&selector)).unwrap();
    assert_eq!(
        kube.to_string(),
        "app=web,example.com/tier=,env in (prod,staging),legacy notin (true),owner,!frozen,zone"
    );
    let ours = LabelSelector::from(kube.clone());
    assert_eq!(ours.to_string(), kube.to_string());
    let base = [
        ("app", "web"),
        ("example.com/tier", ""),
        ("env", "prod"),
        ("owner", "x"),
        ("zone", "a"),
    ];
    assert!(ours.matches(&labels(&base)));
    let with = |extra: (&'static str, &'static str)| {
        let mut l = labels(&base);
        l.insert(extra.0.into(), extra.1.into());
        l
    };
    assert!(!ours.matches(&with(("legacy", "true"))), "NotIn");
    assert!(
        ours.matches(&with(("legacy", "false"))),
        "NotIn, other value"
    );
    assert!(!ours.matches(&with(("frozen", ""))), "DoesNotExist");
    assert!(!ours.matches(&with(("env", "dev"))), "In");
    assert!(!ours.matches(&with(("app", "api"))), "matchLabels");
    let mut no_owner = labels(&base);
    no_owner.remove("owner");
    assert!(!ours.matches(&no_owner), "Exists");

    for everything in [
        json!(null),
        json!({}),
        json!({"matchLabels": null, "matchExpressions": null}),
    ] {
        let s = parse(Some(&everything)).unwrap();
        assert!(s.selects_all(), "{everything}");
        assert_eq!(s.to_string(), "");
    }
    assert!(parse(None).unwrap().selects_all());
}

/// Hostile selectors: each refused with the field named to the entry and
/// the rule it breaks.
#[test]
fn hostile_selectors_are_refused_naming_field_and_rule() {
    let expr = |e: Value| json!({"matchExpressions": [{"key": "ok", "operator": "Exists"}, e]});
    let long = "v".repeat(64);
    let cases: Vec<(Value, String)> = vec![
        // Malformed operators: apimachinery's are case-sensitive, and the
        // string form's `=`/`>` have no structured spelling.
        (
            expr(json!({"key": "a", "operator": "Near", "values": ["x"]})),
            "labelSelector.matchExpressions[1].operator: \"Near\" is not a label selector operator (In, NotIn, Exists, DoesNotExist)".into(),
        ),
        (
            expr(json!({"key": "a", "operator": "in", "values": ["x"]})),
            "labelSelector.matchExpressions[1].operator: \"in\" is not a label selector operator (In, NotIn, Exists, DoesNotExist)".into(),
        ),
        (
            expr(json!({"key": "a", "operator": "Gt", "values": ["1"]})),
            "labelSelector.matchExpressions[1].operator: \"Gt\" is not a label selector operator (In, NotIn, Exists, DoesNotExist)".into(),
        ),
        (
            expr(json!({"key": "a", "operator": ""})),
            "labelSelector.matchExpressions[1].operator: \"\" is not a label selector operator (In, NotIn, Exists, DoesNotExist)".into(),
        ),
        (
            expr(json!({"key": "a", "operator": 1})),
            "labelSelector.matchExpressions[1].operator is a number, not a string".into(),
        ),
        (
            expr(json!({"key": "a"})),
            "labelSelector.matchExpressions[1].operator: \"\" is not a label selector operator (In, NotIn, Exists, DoesNotExist)".into(),
        ),
        // Values where the operator takes none, none where it needs some.
        (
            expr(json!({"key": "a", "operator": "Exists", "values": ["x"]})),
            "labelSelector.matchExpressions[1].values: must be empty when the operator is Exists (it tests the key alone)".into(),
        ),
        (
            expr(json!({"key": "a", "operator": "DoesNotExist", "values": [""]})),
            "labelSelector.matchExpressions[1].values: must be empty when the operator is DoesNotExist (it tests the key alone)".into(),
        ),
        (
            expr(json!({"key": "a", "operator": "In", "values": []})),
            "labelSelector.matchExpressions[1].values: must be non-empty when the operator is In".into(),
        ),
        (
            expr(json!({"key": "a", "operator": "NotIn"})),
            "labelSelector.matchExpressions[1].values: must be non-empty when the operator is NotIn".into(),
        ),
        // Empty and malformed keys.
        (
            expr(json!({"key": "", "operator": "Exists"})),
            "labelSelector.matchExpressions[1].key: label key \"\" is not valid: name part must be non-empty".into(),
        ),
        (
            json!({"matchLabels": {"": "x"}}),
            "labelSelector.matchLabels: label key \"\" is not valid: name part must be non-empty".into(),
        ),
        (
            json!({"matchLabels": {"a b": "x"}}),
            "labelSelector.matchLabels: label key \"a b\" is not valid: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
        ),
        (
            expr(json!({"key": "/a", "operator": "Exists"})),
            "labelSelector.matchExpressions[1].key: label key \"/a\" is not valid: prefix part must be non-empty".into(),
        ),
        // Too-long and malformed values.
        (
            json!({"matchLabels": {"app": long}}),
            format!("labelSelector.matchLabels.app: label value \"{long}\" is not valid: must be no more than 63 characters"),
        ),
        (
            expr(json!({"key": "a", "operator": "In", "values": ["x", long]})),
            format!("labelSelector.matchExpressions[1].values[1]: label value \"{long}\" is not valid: must be no more than 63 characters"),
        ),
        // Values that would have read as more requirements, or other
        // values, once in selector text.
        (
            json!({"matchLabels": {"app": "web,!x"}}),
            "labelSelector.matchLabels.app: label value \"web,!x\" is not valid: must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
        ),
        (
            expr(json!({"key": "a", "operator": "In", "values": ["x,y"]})),
            "labelSelector.matchExpressions[1].values[0]: label value \"x,y\" is not valid: must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
        ),
        (
            expr(json!({"key": "a", "operator": "NotIn", "values": ["x) ,b in (c"]})),
            "labelSelector.matchExpressions[1].values[0]: label value \"x) ,b in (c\" is not valid: must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
        ),
        // A string (or another type) where an object is expected.
        (
            json!("app=web"),
            "labelSelector is a string, not an object: a Backup's labelSelector is a metav1.LabelSelector (matchLabels, matchExpressions), not selector text".into(),
        ),
        (
            json!(["app"]),
            "labelSelector is a list, not an object: a Backup's labelSelector is a metav1.LabelSelector (matchLabels, matchExpressions), not selector text".into(),
        ),
        (
            json!({"matchLabels": "app=web"}),
            "labelSelector.matchLabels is a string, not an object".into(),
        ),
        (
            json!({"matchExpressions": [{"key": "ok", "operator": "Exists"}, "app in (web)"]}),
            "labelSelector.matchExpressions[1] is a string, not an object".into(),
        ),
        (
            json!({"matchExpressions": "app"}),
            "labelSelector.matchExpressions is a string, not a list".into(),
        ),
        (
            expr(json!({"key": "a", "operator": "In", "values": "x"})),
            "labelSelector.matchExpressions[1].values is a string, not a list of strings".into(),
        ),
        (
            json!({"matchLabels": {"app": {"name": "web"}}}),
            "labelSelector.matchLabels.app is an object, not a string".into(),
        ),
        (
            json!({"matchLabels": {"app": null}}),
            "labelSelector.matchLabels.app is null, not a string".into(),
        ),
        (
            expr(json!({"key": null, "operator": "Exists"})),
            "labelSelector.matchExpressions[1].key: label key \"\" is not valid: name part must be non-empty".into(),
        ),
        (
            expr(json!({"operator": "Exists"})),
            "labelSelector.matchExpressions[1].key: label key \"\" is not valid: name part must be non-empty".into(),
        ),
        // A field k8s-openapi would skip, the backup then wider.
        (
            json!({"matchLabels": {"app": "web"}, "matchExpresions": [{"key": "a", "operator": "DoesNotExist"}]}),
            "labelSelector.matchExpresions is not a selector field (matchLabels, matchExpressions)".into(),
        ),
    ];
    for (selector, want) in cases {
        assert_eq!(refused(selector.clone()), want, "{selector}");
    }
}

/// A label selector kube's Selector converts as apimachinery does, and
/// whose text (what the server is sent) reads back, through the string
/// form's parser, as the same requirements.
fn key() -> impl Strategy<Value = String> {
    let name = "[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?";
    (
        proptest::option::of("[a-z0-9]{1,5}(\\.[a-z0-9]{1,5}){0,2}"),
        name,
    )
        .prop_map(|(p, n)| match p {
            Some(p) => format!("{p}/{n}"),
            None => n,
        })
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?"
    ]
}

fn expression() -> impl Strategy<Value = Value> {
    let values = || proptest::collection::vec(value(), 1..4);
    prop_oneof![
        (key(), values()).prop_map(|(k, v)| json!({"key": k, "operator": "In", "values": v})),
        (key(), values()).prop_map(|(k, v)| json!({"key": k, "operator": "NotIn", "values": v})),
        key().prop_map(|k| json!({"key": k, "operator": "Exists"})),
        key().prop_map(|k| json!({"key": k, "operator": "DoesNotExist"})),
    ]
}

proptest! {
    #[test]
    fn kubes_text_reads_back_as_the_object(
        match_labels in proptest::collection::btree_map(key(), value(), 0..3),
        expressions in proptest::collection::vec(expression(), 0..4),
    ) {
        let object = json!({"matchLabels": match_labels, "matchExpressions": expressions});
        let kube = parse(Some(&object)).map_err(TestCaseError::fail)?;
        let text = kube.to_string();
        let read_back: LabelSelector = text.parse().map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(read_back, LabelSelector::from(kube));
    }

    /// Whatever the object holds, the answer is a selector or a refusal
    /// naming labelSelector, never a panic.
    #[test]
    fn any_object_is_a_selector_or_a_named_refusal(
        key in prop_oneof![Just(json!("a")), Just(json!("")), Just(json!(1)), Just(json!(null)), "\\PC{0,8}".prop_map(Value::from)],
        operator in prop_oneof![Just(json!("In")), Just(json!("Exists")), Just(json!(["In"])), "\\PC{0,8}".prop_map(Value::from)],
        values in prop_oneof![Just(json!(null)), Just(json!([])), Just(json!([1])), Just(json!("x")), proptest::collection::vec("\\PC{0,70}", 0..3).prop_map(|v| json!(v))],
        label in prop_oneof![Just(json!("web")), Just(json!(true)), "\\PC{0,70}".prop_map(Value::from)],
    ) {
        let object = json!({"matchLabels": {"app": label},
            "matchExpressions": [{"key": key, "operator": operator, "values": values}]});
        if let Err(e) = parse(Some(&object)) {
            prop_assert!(e.starts_with("labelSelector"), "{}", e);
        }
    }
}
