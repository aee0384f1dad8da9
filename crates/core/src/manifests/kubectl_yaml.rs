//! The YAML cases where readers disagree, read by iar as kubectl reads
//! them. Each `kubectl` column is what kubectl v1.36's reading gave
//! (apimachinery's YAMLOrJSONDecoder, sigs.k8s.io/yaml 1.6 over go-yaml
//! v2, each document turned into JSON), measured by a Go program for the
//! choice of serde-saphyr (docs/decisions.md, "YAML"). Where iar differs,
//! the case says so and why that is acceptable.

use super::parse_documents;
use serde_json::{Value, json};
use std::path::Path;

/// `v: <scalar>` as iar reads it in a manifest, or its error's message.
fn read(scalar: &str) -> Result<Value, super::ManifestError> {
    let text = format!("kind: ConfigMap\nv: {scalar}\n");
    parse_documents(Path::new("x.yaml"), &text).map(|mut docs| docs.remove(0)["v"].take())
}

/// Where iar reads as kubectl does: YAML 1.1 booleans, octal, the integer
/// ranges, timestamps kept as text.
#[test]
fn scalars_read_as_kubectl_reads_them() {
    let cases = [
        ("on", json!(true)),
        ("yes", json!(true)),
        ("y", json!(true)),
        ("True", json!(true)),
        ("off", json!(false)),
        ("no", json!(false)),
        ("n", json!(false)),
        ("0755", json!(493)),
        ("0o755", json!(493)),
        ("0x1F", json!(31)),
        ("1_000", json!(1000)),
        ("9223372036854775807", json!(i64::MAX)),
        ("9223372036854775808", json!(9223372036854775808u64)),
        ("18446744073709551615", json!(u64::MAX)),
        ("2024-01-02T03:04:05Z", json!("2024-01-02T03:04:05Z")),
        ("~", Value::Null),
        ("", Value::Null),
        ("'yes'", json!("yes")),
        ("\"0755\"", json!("0755")),
    ];
    for (scalar, kubectl) in cases {
        assert_eq!(read(scalar).unwrap(), kubectl, "v: {scalar}");
    }
}

/// Where iar's reading differs from kubectl's. None changes what an
/// object means to the API server:
#[test]
fn where_iar_differs_from_kubectl() {
    // Numbers kubectl writes as integers iar keeps as the floats YAML
    // says they are: equal as JSON numbers, and every Go reader after
    // iar (Velero's restore, the API server through unstructured JSON)
    // writes an integral float as an integer again.
    for (scalar, kubectl, iar) in [
        ("1e3", json!(1000), json!(1000.0)),
        ("1.0", json!(1), json!(1.0)),
        ("08", json!(8), json!(8.0)),
        (
            "18446744073709551616",
            json!(18446744073709552000.0),
            json!(1.8446744073709552e19),
        ),
        (
            "-9223372036854775809",
            json!(-9223372036854776000.0),
            json!(-9.223372036854776e18),
        ),
    ] {
        let read = read(scalar).unwrap();
        assert_eq!(read, iar, "v: {scalar}");
        assert_eq!(
            read.as_f64(),
            kubectl.as_f64(),
            "v: {scalar}: the same number"
        );
    }
    // Spellings outside YAML 1.1's lists: kubectl takes `yEs` as text and
    // `0X1F` as 31, iar the other way round. Neither is written by hand
    // in a manifest (a linter flags both).
    assert_eq!(read("yEs").unwrap(), json!(true), "kubectl: \"yEs\"");
    assert_eq!(read("0X1F").unwrap(), json!("0X1F"), "kubectl: 31");
}

/// `.inf` and `.nan` have no JSON: kubectl refuses them ("json:
/// unsupported value: +Inf"), and so does iar, naming the place
/// (serde_yaml read them as null).
#[test]
fn non_finite_floats_are_refused() {
    for scalar in [".inf", "-.inf", ".nan"] {
        let err = read(scalar).unwrap_err().to_string();
        assert!(
            err.starts_with("x.yaml: document 1: ") && err.contains("at line 2, column 4"),
            "v: {scalar}: {err}"
        );
    }
}

/// Keys: a key given twice keeps its last value (go-yaml v2 without
/// strict mode); a merge key `<<` merges, the mapping's own keys winning.
/// kubectl lets a `<<` written after a key override it (a go-yaml v2
/// quirk; YAML's merge type says the mapping's keys win, as iar has it),
/// and turns the key `on` into "true", where iar keeps "on".
#[test]
fn keys_merges_and_aliases() {
    let doc = |text: &str| {
        parse_documents(Path::new("x.yaml"), text)
            .unwrap()
            .remove(0)
    };
    assert_eq!(doc("kind: A\nv: 1\nv: 2\n")["v"], 2);
    let merged = doc("kind: A\nbase: &b {a: 1, b: 2}\nv:\n  <<: *b\n  b: 3\n");
    assert_eq!(merged["v"], json!({"a": 1, "b": 3}));
    let after = doc("kind: A\nbase: &b {a: 1, b: 2}\nv:\n  b: 3\n  <<: *b\n");
    assert_eq!(after["v"], json!({"a": 1, "b": 3}), "kubectl: b is 2");
    let alias = doc("kind: A\nx: &a [1, 2]\nv: *a\n");
    assert_eq!(alias["v"], json!([1, 2]));
    assert_eq!(
        doc("kind: A\nv: {on: 1, 2: two}\n")["v"],
        json!({"on": 1, "2": "two"}),
        "kubectl: {{\"true\": 1, \"2\": \"two\"}}"
    );
}

/// A stream: empty documents, `---` alone and `...` ends are skipped, as
/// kubectl skips them; an index in an error counts the documents read.
#[test]
fn multi_document_streams() {
    let docs = parse_documents(
        Path::new("x.yaml"),
        "kind: A\n---\n---\nkind: B\n...\n---\nkind: C\n",
    )
    .unwrap();
    let kinds: Vec<_> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["A", "B", "C"]);
    let err = parse_documents(Path::new("x.yaml"), "kind: A\n---\nkind: [\n")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("x.yaml: document 2: "), "{err}");
}

/// What iar writes (`iar crd`, `iar plugin configmap`, the overlay) kubectl
/// reads back as the same strings: a string YAML 1.1 would take for a
/// boolean or a number is quoted. (serde_yaml wrote `yes` and `1_000`
/// bare, which kubectl reads as true and 1000.)
#[test]
fn written_strings_read_back_as_strings() {
    let strings = [
        "yes",
        "on",
        "y",
        "Y",
        "no",
        "off",
        "n",
        "0755",
        "0o755",
        "1_000",
        "08",
        "1e3",
        "~",
        "null",
        "2024-01-02",
        "true",
        "0x1F",
        ".inf",
        "- a",
        "a: b",
        "#x",
        "",
    ];
    let object = json!({"kind": "ConfigMap", "data": strings});
    let text = crate::yaml::to_string(&object).unwrap();
    for s in strings.iter().filter(|s| !s.is_empty()) {
        assert!(
            text.contains(&format!("\"{s}\"")),
            "{s:?} is not quoted in:\n{text}"
        );
    }
    let back = parse_documents(Path::new("x.yaml"), &text).unwrap();
    assert_eq!(back, [object]);
}
