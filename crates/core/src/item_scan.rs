//! An object's identity read from its JSON text in one pass that builds
//! nothing: how the boundary checks an item a plugin changed without
//! parsing it into a `Value` (which cost the host more than the rest of the
//! call together).
//!
//! The scan accepts exactly the texts `Value` accepts (same string escapes,
//! number ranges, nesting limit, trailing characters) and, for duplicate
//! keys, keeps the last as `Value` does. `Item::value` relies on that: a
//! text the scan accepted parses. Two paths: [`by_serde`] goes through
//! serde_json's own `deserialize_any`, the path `Value` is parsed by, with
//! visitors that keep only four strings; it is the judge. A byte-level
//! fast path (`fast.rs`) reads the common subset first (most of a call's
//! boundary cost was the serde pass) and hands anything else to it.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

mod fast;

/// The fields the boundary compares, each "" when missing or not a string
/// (what a JSON-pointer lookup on the parsed value gives).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity<'a> {
    pub api_version: Cow<'a, str>,
    pub kind: Cow<'a, str>,
    pub namespace: Cow<'a, str>,
    pub name: Cow<'a, str>,
}

impl Identity<'_> {
    pub fn into_owned(self) -> Identity<'static> {
        Identity {
            api_version: interned(&self.api_version),
            kind: interned(&self.kind),
            namespace: owned(self.namespace),
            name: owned(self.name),
        }
    }

    /// The fields of a parsed value.
    pub fn of(value: &serde_json::Value) -> Identity<'static> {
        let at = |p: &str| {
            value
                .pointer(p)
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
        };
        Identity {
            api_version: interned(at("/apiVersion")),
            kind: interned(at("/kind")),
            namespace: owned(Cow::Borrowed(at("/metadata/namespace"))),
            name: owned(Cow::Borrowed(at("/metadata/name"))),
        }
    }
}

fn owned(s: Cow<'_, str>) -> Cow<'static, str> {
    if s.is_empty() {
        Cow::Borrowed("")
    } else {
        Cow::Owned(s.into_owned())
    }
}

/// At most this many distinct apiVersion and kind values are interned, each
/// of at most [`INTERNED_LEN`] bytes.
const INTERNED_MAX: usize = 4096;
const INTERNED_LEN: usize = 256;

/// An apiVersion or kind, kept once for the process: a backup's items take
/// few values ("v1", "ConfigMap"), and every item holds both (two
/// allocations less per item a backup keeps). The values live as long as
/// the process, so their number and length are bounded: input with
/// endless distinct kinds gets owned copies beyond the bound, never
/// unbounded growth.
fn interned(s: &str) -> Cow<'static, str> {
    static SEEN: std::sync::OnceLock<std::sync::RwLock<HashSet<&'static str>>> =
        std::sync::OnceLock::new();
    if s.is_empty() {
        return Cow::Borrowed("");
    }
    let seen = SEEN.get_or_init(Default::default);
    if let Some(found) = seen.read().unwrap_or_else(|p| p.into_inner()).get(s) {
        return Cow::Borrowed(found);
    }
    if s.len() > INTERNED_LEN {
        return Cow::Owned(s.to_string());
    }
    let mut seen = seen.write().unwrap_or_else(|p| p.into_inner());
    if let Some(found) = seen.get(s) {
        return Cow::Borrowed(found);
    }
    if seen.len() >= INTERNED_MAX {
        return Cow::Owned(s.to_string());
    }
    let kept: &'static str = Box::leak(s.into());
    seen.insert(kept);
    Cow::Borrowed(kept)
}

/// What a JSON text holds, as far as the boundary cares.
#[derive(Debug, PartialEq, Eq)]
pub enum Scanned<'a> {
    Object(Identity<'a>),
    /// Valid JSON, but not an object.
    NotObject,
}

/// Scans `text`: an error when it is not one JSON value, else whether it is
/// an object and, if so, its identity.
pub fn scan(text: &str) -> Result<Scanned<'_>, serde_json::Error> {
    match fast::scan(text) {
        Some(scanned) => Ok(scanned),
        None => by_serde(text),
    }
}

/// The same answer as [`scan`], through serde_json alone: what the fast
/// path is checked against, and the baseline of its benchmark.
pub fn by_serde(text: &str) -> Result<Scanned<'_>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let scanned = de.deserialize_any(Root)?;
    de.end()?;
    Ok(scanned)
}

/// The scalar visits of a visitor that answers `$value` for a boolean, a
/// number or null (strings and containers each visitor reads itself).
macro_rules! scalars_answer {
    ($value:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// Any JSON value, fully read (strings decoded, numbers checked) and kept
/// nowhere. `IgnoredAny` would not do: serde_json skips it with a looser
/// reader than the one `Value` goes through.
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SkipVisitor).map(|_| Skip)
    }
}

struct SkipVisitor;

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    scalars_answer!(());
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(SkipVisitor)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key::<Skip>()?.is_some() {
            map.next_value::<Skip>()?;
        }
        Ok(())
    }
}

/// A string value, borrowed from the text when it has no escapes; "" for
/// any other JSON value (which is still read in full).
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(Text(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Text(Cow::Owned(s.to_string())))
    }
    fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
        Ok(Text(Cow::Owned(s)))
    }
    scalars_answer!(Text(Cow::Borrowed("")));
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        SkipVisitor.visit_seq(seq).map(|_| Text(Cow::Borrowed("")))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        SkipVisitor.visit_map(map).map(|_| Text(Cow::Borrowed("")))
    }
}

/// `metadata`: its namespace and name, or both "" when it is not an object.
struct Metadata<'a> {
    namespace: Cow<'a, str>,
    name: Cow<'a, str>,
}

impl<'de> Deserialize<'de> for Metadata<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MetadataVisitor)
    }
}

struct MetadataVisitor;

impl MetadataVisitor {
    fn empty<'a>() -> Metadata<'a> {
        Metadata {
            namespace: Cow::Borrowed(""),
            name: Cow::Borrowed(""),
        }
    }
}

impl<'de> Visitor<'de> for MetadataVisitor {
    type Value = Metadata<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut m = Self::empty();
        while let Some(Text(key)) = map.next_key::<Text>()? {
            match &*key {
                "namespace" => m.namespace = map.next_value::<Text>()?.0,
                "name" => m.name = map.next_value::<Text>()?.0,
                _ => map.next_value::<Skip>().map(|_| ())?,
            }
        }
        Ok(m)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        SkipVisitor.visit_seq(seq).map(|_| Self::empty())
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Self::empty())
    }
    scalars_answer!(Self::empty());
}

/// The top level: an object's identity, or `NotObject`.
struct Root;

impl<'de> Visitor<'de> for Root {
    type Value = Scanned<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut id = Identity::default();
        while let Some(Text(key)) = map.next_key::<Text>()? {
            // Each occurrence overwrites: with duplicate keys the last one
            // is what `Value` keeps.
            match &*key {
                "apiVersion" => id.api_version = map.next_value::<Text>()?.0,
                "kind" => id.kind = map.next_value::<Text>()?.0,
                "metadata" => {
                    let m = map.next_value::<Metadata>()?;
                    (id.namespace, id.name) = (m.namespace, m.name);
                }
                _ => map.next_value::<Skip>().map(|_| ())?,
            }
        }
        Ok(Scanned::Object(id))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        SkipVisitor.visit_seq(seq).map(|_| Scanned::NotObject)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Scanned::NotObject)
    }
    scalars_answer!(Scanned::NotObject);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn kinds_are_kept_once_and_hostile_ones_never_grow_the_set_past_its_bound() {
        let a = interned("ConfigMap");
        let b = interned(&String::from("ConfigMap"));
        assert!(matches!((&a, &b), (Cow::Borrowed(x), Cow::Borrowed(y)) if std::ptr::eq(*x, *y)));
        // An input with endless distinct kinds: every value is right, and
        // at most INTERNED_MAX of them were ever kept for the process.
        let mut kept = 0;
        for i in 0..INTERNED_MAX + 100 {
            let kind = format!("HostileKind{i}");
            let got = interned(&kind);
            assert_eq!(got, kind);
            kept += matches!(got, Cow::Borrowed(_)) as usize;
        }
        assert!(kept <= INTERNED_MAX);
        let long = "K".repeat(INTERNED_LEN + 1);
        assert!(matches!(interned(&long), Cow::Owned(s) if s == long));
    }

    /// The scan (both paths, and the fast one whenever it answers) and
    /// `Value` agree on whether `text` is JSON, whether it is an object,
    /// and the object's identity.
    fn agrees(text: &str) {
        let parsed = text.parse::<Value>();
        let check = |path: &str, got: Result<Scanned, serde_json::Error>| match (got, &parsed) {
            (Ok(Scanned::Object(id)), Ok(v)) => {
                assert!(v.is_object(), "{path}: {text}");
                assert_eq!(id, Identity::of(v), "{path}: {text}");
            }
            (Ok(Scanned::NotObject), Ok(v)) => assert!(!v.is_object(), "{path}: {text}"),
            (Err(_), Err(_)) => {}
            (s, p) => panic!("{path}: {text:?}: scan {s:?}, Value {p:?}"),
        };
        check("scan", scan(text));
        check("by_serde", by_serde(text));
        if let Some(answer) = fast::scan(text) {
            check("fast", Ok(answer));
        }
    }

    #[test]
    fn the_fast_path_answers_what_kubernetes_objects_are_made_of() {
        let pod = include_str!("../../../examples/bench/pod.json");
        let compact = serde_json::to_string(&pod.parse::<Value>().unwrap()).unwrap();
        for text in [
            pod,
            &compact,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n","annotations":{"x":"{\"a\":[1,\"\\u00e9\"]}\n"}},"data":{"k":"caf\u00e9 \/ \t"}}"#,
            r#"{"spec":{"replicas":3,"ratio":-0.25,"zero":0,"on":true,"off":false,"none":null,"list":[[],{},[1,[2,[3]]]]}}"#,
            r#"[1,"a",{"b":null}]"#,
            r#""just a string""#,
        ] {
            let fast =
                fast::scan(text).unwrap_or_else(|| panic!("the fast path gave up on {text}"));
            assert_eq!(
                Ok(fast),
                by_serde(text).map_err(|e| e.to_string()),
                "{text}"
            );
            agrees(text);
        }
    }

    #[test]
    fn the_fast_path_leaves_every_rare_form_to_serde() {
        let deep = |n: usize| format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n));
        let (within, beyond) = (
            deep(fast::MAX_DEPTH as usize - 2),
            deep(fast::MAX_DEPTH as usize),
        );
        let long = |n: usize| format!("{{\"a\":{}}}", "9".repeat(n));
        let (short_int, long_int) = (long(fast::MAX_INT_DIGITS), long(fast::MAX_INT_DIGITS + 1));
        assert!(fast::scan(&within).is_some());
        assert!(fast::scan(&short_int).is_some());
        for text in [
            r#"{"x":1e5}"#,
            r#"{"x":1.5E-3}"#,
            r#"{"x":1e400}"#,
            &long_int,
            &format!("{{\"a\":1{}}}", "0".repeat(400)),
            r#"{"kind":"\ud83d\ude00"}"#,
            r#"{"kind":"\ud800"}"#,
            r#"{"x":"\udc00"}"#,
            r#"{"api\u0056ersion":"v1"}"#,
            r#"{"kind":"P\u006fd"}"#,
            r#"{"metadata":{"n\u0061me":"a"}}"#,
            r#"{"metadata":{"name":"a\"b"}}"#,
            &beyond,
            &deep(200),
            "{\"x\":\"a\u{1}b\"}",
            r#"{"x":"\q"}"#,
            r#"{"x":"\u12G4"}"#,
            r#"{"x":"\u+123"}"#,
            r#"{"x":01}"#,
            r#"{"x":1.}"#,
            r#"{"x":-}"#,
            r#"{"x":tru}"#,
            r#"{"x":1,}"#,
            r#"[1,]"#,
            r#"{"a":1} x"#,
            "",
        ] {
            assert!(fast::scan(text).is_none(), "the fast path answered {text}");
            agrees(text);
        }
    }

    #[test]
    fn agrees_with_value_on_tricky_texts() {
        let deep_ok = format!("{{\"a\":{}1{}}}", "[".repeat(120), "]".repeat(120));
        let too_deep = format!("{{\"a\":{}1{}}}", "[".repeat(200), "]".repeat(200));
        for text in [
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"n"}}"#,
            r#"{"apiVersion":"v1","apiVersion":"apps/v1","kind":"Pod"}"#,
            r#"{"metadata":{"name":"a"},"metadata":5}"#,
            r#"{"metadata":{"name":"a","name":7}}"#,
            r#"{"metadata":{"name":"a"},"metadata":{"namespace":"b"}}"#,
            r#"{"api\u0056ersion":"v\u0031","kind":"P\nod"}"#,
            r#"{"kind":"\ud800"}"#,
            r#"{"kind":"\ud83d\ude00"}"#,
            "{\"kind\":\"a\u{1}b\"}",
            r#"{"x":1e400}"#,
            r#"{"x":-0.0,"y":18446744073709551616,"z":[null,true,{"q":[]}]}"#,
            r#"{"metadata":[{"name":"a"}]}"#,
            r#"{"metadata":{},"spec":{"name":"a","namespace":"b"}}"#,
            r#"{"metadata":{"name":"a"},"spec":{"name":"b"},"status":{"metadata":{"name":"c"}}}"#,
            r#"{"metadata":{"labels":{"name":"x"},"name":"a"},"metadata":[]}"#,
            r#"{"kind":"Pod","kind":["x"],"apiVersion":{"kind":"y"}}"#,
            r#"{"apiVersion":null,"kind":{"a":1},"metadata":{"namespace":["x"]}}"#,
            r#"{"a":1} x"#,
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"[1,2]"#,
            r#""str""#,
            "17",
            "null",
            "",
            "  {}  ",
            &deep_ok,
            &too_deep,
        ] {
            agrees(text);
        }
    }

    #[test]
    fn borrows_unescaped_strings() {
        let text = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a\"b","namespace":"n"}}"#;
        let Scanned::Object(id) = scan(text).unwrap() else {
            panic!("an object")
        };
        assert!(matches!(id.kind, Cow::Borrowed("Pod")));
        assert_eq!(id.name, "a\"b");
    }

    /// JSON texts of the forms items are made of, and of the rare ones,
    /// nested; keys that the scan reads are likely.
    fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,4})?([eE][+-]?[0-9]{1,3})?",
            "\"([a-z0-9 /.-]|\\\\[\"\\\\/bfnrtq]|\\\\u[0-9a-fdD]{4}){0,6}\"",
        ];
        let key = proptest::sample::select(vec![
            r#""apiVersion""#,
            r#""kind""#,
            r#""metadata""#,
            r#""name""#,
            r#""namespace""#,
            r#""x""#,
            r#""n\u0061me""#,
        ]);
        leaf.prop_recursive(4, 40, 5, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                proptest::collection::vec((key.clone(), inner), 0..5).prop_map(|kv| {
                    let fields: Vec<String> =
                        kv.iter().map(|(k, v)| format!("{k} : {v}")).collect();
                    format!("{{ {} }}", fields.join(","))
                }),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(2048))]

        #[test]
        fn agrees_with_value_on_any_text(text in "[{}\\[\\]\":,a-z0-9.eE+\\-\\\\ ]{0,40}") {
            agrees(&text);
        }

        #[test]
        fn agrees_with_value_on_json_and_json_with_one_byte_changed(
            text in json_text(),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            byte in proptest::sample::select(b"\"{}[],:\\u0e-1\x01 ".to_vec()),
        ) {
            agrees(&text);
            let mut changed = text.into_bytes();
            if !changed.is_empty() {
                let i = at.index(changed.len());
                changed[i] = byte;
            }
            if let Ok(changed) = String::from_utf8(changed) {
                agrees(&changed);
            }
        }

        #[test]
        fn agrees_with_value_on_objects(
            fields in proptest::collection::vec(
                (proptest::sample::select(vec!["apiVersion", "kind", "metadata", "name", "namespace", "x"]),
                 proptest::sample::select(vec![
                     r#""v1""#, r#""Pod""#, "1", "null", "[]", r#"{"name":"a"}"#,
                     r#"{"namespace":"n","name":"b"}"#, r#"{"name":1}"#, r#""a\u0062""#,
                 ])),
                0..6,
            )
        ) {
            let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            agrees(&format!("{{{}}}", body.join(",")));
        }
    }
}
