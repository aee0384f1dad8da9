//! Manifest files as `iar run` / `iar backup --items` read them
//! (`iar::manifests::parse_documents`, YAML multi-document and JSON, `*List`
//! kinds expanded), then `Item::from_value` on each document.
//!
//! The same text is read as `x.yaml` and as `x.json`. Properties: every
//! document returned is a JSON object; a `.json` file gives exactly the one
//! object it holds, or the items of the List it holds; and a JSON object
//! that parses as `.json` parses to the same value as `.yaml` (a `.yaml`
//! file holding JSON is read as JSON first, as kubectl does, since JSON is
//! not quite a subset of YAML), with an error naming the file and the
//! document otherwise.

#![no_main]

use std::path::Path;

use iar::Item;
use iar::catalog::Catalog;
use iar::manifests::parse_documents;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn check_objects(docs: &[Value], file: &str) {
    for doc in docs {
        assert!(doc.is_object(), "{file} returned a non-object: {doc}");
        if let Ok(item) = Item::from_value(doc.clone(), Catalog::builtin()) {
            assert!(!item.id.name.is_empty() && !item.id.resource.is_empty());
            let _ = item.labels();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };

    let yaml = parse_documents(Path::new("x.yaml"), text);
    match &yaml {
        Ok(docs) => check_objects(docs, "x.yaml"),
        Err(e) => {
            let shown = e.to_string();
            assert!(shown.starts_with("x.yaml: document "), "{shown}");
        }
    }

    let json = parse_documents(Path::new("x.json"), text);
    let docs = match json {
        Ok(docs) => docs,
        Err(e) => {
            let shown = e.to_string();
            assert!(shown.starts_with("x.json: document 1: "), "{shown}");
            return;
        }
    };
    check_objects(&docs, "x.json");
    let whole: Value = serde_json::from_str(text).expect("parse_documents accepted it");
    let is_list =
        whole["kind"].as_str().is_some_and(|k| k.ends_with("List")) && whole["items"].is_array();
    if is_list {
        assert_eq!(Some(&docs), whole["items"].as_array(), "a List's items");
    } else {
        assert_eq!(docs, [whole.clone()], "one JSON object is one document");
    }

    // JSON is YAML: the same bytes read as YAML give the same objects. Only
    // checked for plain values YAML and JSON agree on: no floats (YAML
    // parsers round differently), and printable ASCII without escapes or
    // tabs, where YAML's own line-break and indentation rules do not apply.
    let plain = text
        .bytes()
        .all(|b| b == b'\n' || (b' '..=b'~').contains(&b) && b != b'\\');
    if !has_float(&whole) && plain {
        match yaml {
            Ok(yaml_docs) => assert_eq!(yaml_docs, docs, "YAML reads JSON {text:?} differently"),
            Err(e) => {
                // Duplicate keys are an error in YAML and allowed in JSON.
                let shown = e.to_string();
                assert!(
                    shown.contains("duplicate"),
                    "YAML refused JSON {text:?}: {shown}"
                );
            }
        }
    }
});

fn has_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => !(n.is_i64() || n.is_u64()),
        Value::Array(a) => a.iter().any(has_float),
        Value::Object(m) => m.values().any(has_float),
        _ => false,
    }
}
