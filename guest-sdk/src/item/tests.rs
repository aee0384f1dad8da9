use super::*;
use serde_json::json;

fn pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "web-0", "namespace": "shop", "labels": {"app": "web"},
                        "annotations": {"a": "b"}},
           "spec": {"containers": [{"name": "c", "image": "nginx \"quoted\" \u{e9}"}]},
           "status": {"phase": "Running"}})
}

fn lazy(v: &Value) -> Item {
    Item::parse(serde_json::to_string(v).unwrap()).unwrap()
}

/// Every accessor reads the same from a lazy item as from a parsed one.
#[test]
fn lazy_and_parsed_items_read_alike() {
    let (l, p) = (lazy(&pod()), Item::from_value(pod()).unwrap());
    assert!(matches!(l.repr, Repr::Text(_)));
    assert_eq!(
        (
            l.api_version(),
            l.group(),
            l.kind(),
            l.name(),
            l.namespace()
        ),
        (
            p.api_version(),
            p.group(),
            p.kind(),
            p.name(),
            p.namespace()
        )
    );
    assert_eq!(l.labels(), p.labels());
    assert_eq!(l.annotations(), p.annotations());
    assert_eq!(
        (l.label("app"), l.annotation("a")),
        (Some("web"), Some("b"))
    );
    assert_eq!(l.metadata(), p.metadata());
    assert_eq!(l.json(), p.json());
    assert_eq!(l, p);
}

/// An unchanged item goes back as the text it came as; one changed in
/// metadata is the same object a whole parse and change would give,
/// whichever order `json()` and the change come in.
#[test]
fn metadata_changes_write_the_same_object() {
    let text = serde_json::to_string(&pod()).unwrap();
    assert_eq!(Item::parse(text.clone()).unwrap().into_text(), text);

    let mut expected = Item::from_value(pod()).unwrap();
    expected.set_label("team", "payments");
    expected.set_annotation("x", "y");
    let expected = expected.into_json();

    let mut l = lazy(&pod());
    l.set_label("team", "payments");
    l.set_annotation("x", "y");
    assert_eq!(l.json(), &expected, "json() sees the change");
    let out: Value = serde_json::from_str(&l.into_text()).unwrap();
    assert_eq!(out, expected);

    let mut l = lazy(&pod());
    assert_eq!(l.json(), &pod());
    l.set_label("team", "payments");
    l.set_annotation("x", "y");
    assert_eq!(l.json(), &expected, "a change after json() shows in it");
    assert_eq!(
        serde_json::from_str::<Value>(&l.into_text()).unwrap(),
        expected
    );

    // The new metadata is spliced where the old one was: in a pretty
    // text, and in one with `metadata` twice (the last one counts, so
    // that is the one changed).
    for text in [
        serde_json::to_string_pretty(&pod()).unwrap(),
        r#"{"metadata":{"name":"x"},"kind":"Pod","metadata" : {"name":"y"} ,"apiVersion":"v1"}"#
            .to_string(),
    ] {
        let mut whole = Item::from_value(serde_json::from_str(&text).unwrap()).unwrap();
        whole.set_label("team", "payments");
        let mut l = Item::parse(text.clone()).unwrap();
        l.set_label("team", "payments");
        let out = l.into_text();
        assert_eq!(
            serde_json::from_str::<Value>(&out).unwrap(),
            whole.into_json()
        );
        // Everything outside metadata is the text as it came.
        assert!(out.starts_with(&text[..text.rfind("\"metadata\"").unwrap()]));
    }

    // No metadata at all: it is made.
    let bare = json!({"apiVersion": "v1", "kind": "ConfigMap"});
    let mut l = lazy(&bare);
    l.set_label("k", "v");
    let out: Value = serde_json::from_str(&l.into_text()).unwrap();
    assert_eq!(
        out,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"labels": {"k": "v"}}})
    );
}

/// A repeated key means its last value, as the host's checks and a
/// `Value` read it; bad texts get the messages of a whole parse.
#[test]
fn repeated_keys_and_bad_texts() {
    let text = r#"{"kind":"A","metadata":{"name":"x"},"kind":"Pod","metadata":{"name":"y"},"apiVersion":"v1"}"#;
    let l = Item::parse(text.into()).unwrap();
    assert_eq!((l.kind(), l.name()), ("Pod", "y"));
    assert_eq!(l.json(), &serde_json::from_str::<Value>(text).unwrap());
    // A text cut short (never sent by the host) reads as empty, and a
    // plugin's own read of it fails naming the item.
    let cut = Item::parse("{".into()).unwrap();
    assert_eq!((cut.kind(), cut.name()), ("", ""));
    assert!(cut.parse_as::<Value>().is_err());
    assert_eq!(
        Item::parse("[1]".into()).unwrap_err(),
        "an item must be a JSON object"
    );
}

/// Skimming and serde read the same head, and the metadata's place is
/// the same slice of the text.
#[test]
fn the_head_skimmed_is_the_head_serde_reads() {
    let compact = serde_json::to_string(&pod()).unwrap();
    let pretty = serde_json::to_string_pretty(&pod()).unwrap();
    for text in [
        compact.as_str(),
        pretty.as_str(),
        r#"{"kind":"A","metadata":{"name":"x"},"kind":"Pod","metadata":{"name":"y"},"apiVersion":"v1"}"#,
        r#"{"spec":{"a":"}]\"{","b":[{"c":[]},-1e-3,true,null]},"kind":["x"],"metadata":5}"#,
        r#" { "apiVersion" : "v1" , "metadata" : { "name" : "a\u0062" } } "#,
        "{}",
    ] {
        let skimmed = Head::skim(text).unwrap_or_else(|| panic!("skimming gave up on {text}"));
        let read = Head::read_with_serde(text).unwrap();
        assert_eq!(
            (
                &skimmed.api_version,
                &skimmed.kind,
                &skimmed.metadata,
                &skimmed.metadata_at
            ),
            (
                &read.api_version,
                &read.kind,
                &read.metadata,
                &read.metadata_at
            ),
            "{text}"
        );
    }
    // An escaped key: only serde compares it rightly.
    assert!(Head::skim(r#"{"k\u0069nd":"Pod"}"#).is_none());
    assert_eq!(Head::read(r#"{"k\u0069nd":"Pod"}"#).unwrap().kind, "Pod");
}

/// Any JSON value; strings hold the bytes that end strings and
/// containers, and keys are likely to be the head's.
fn any_value() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let text = "[a-z\\\\\"{}\\[\\],: é]{0,6}";
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        text.prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 5, move |inner| {
        let key = prop_oneof![
            Just("apiVersion".to_string()),
            Just("kind".to_string()),
            Just("metadata".to_string()),
            Just("name".to_string()),
            text.prop_map(String::from),
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map(key, inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest::proptest! {
    #[test]
    fn skimming_reads_any_object_as_serde_does(
        fields in proptest::collection::btree_map(
            proptest::sample::select(vec!["apiVersion", "kind", "metadata", "spec", "x\"}"]),
            any_value(),
            0..5,
        ),
        pretty in proptest::prelude::any::<bool>(),
    ) {
        let object = Value::Object(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        let text = if pretty {
            serde_json::to_string_pretty(&object).unwrap()
        } else {
            serde_json::to_string(&object).unwrap()
        };
        let read = Head::read_with_serde(&text).unwrap();
        // Skimming gives up only on an escaped top-level key, and
        // answers alike.
        let escaped_key = object
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.contains(['"', '\\']));
        let skimmed = Head::skim(&text);
        proptest::prop_assert_eq!(skimmed.is_none(), escaped_key, "{}", text);
        if let Some(skimmed) = skimmed {
            proptest::prop_assert_eq!(
                (&skimmed.api_version, &skimmed.kind, &skimmed.metadata, &skimmed.metadata_at),
                (&read.api_version, &read.kind, &read.metadata, &read.metadata_at),
                "{}", text
            );
        }
    }
}

/// `parse_as` reads a plugin's own type, from the text or from the
/// changed object, and names the item when the type does not fit.
#[test]
fn parse_as_reads_a_plugins_type() {
    #[derive(serde::Deserialize)]
    struct View {
        status: Status,
        metadata: Meta,
    }
    #[derive(serde::Deserialize)]
    struct Status {
        phase: String,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        labels: BTreeMap<String, String>,
    }
    let mut l = lazy(&pod());
    let v: View = l.parse_as().unwrap();
    assert_eq!(v.status.phase, "Running");
    l.set_label("team", "payments");
    let v: View = l.parse_as().unwrap();
    assert_eq!(v.metadata.labels["team"], "payments");
    let Some(crate::Error::Failed(err)) = l.parse_as::<Vec<u8>>().err() else {
        panic!("a type that does not fit is a permanent failure")
    };
    assert!(err.contains("Pod shop/web-0: invalid type"), "{err}");
}
