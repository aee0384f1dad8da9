//! The boundary's scan of a returned item (`iar::item_scan::scan`) on any
//! UTF-8 text: its byte-level fast path answers only within a subset of
//! JSON and hands everything else to the serde path, so the two paths and a
//! `Value` parse must agree on whether the text is JSON, whether it is an
//! object, and the object's apiVersion, kind, namespace and name. A fast
//! path that accepted one text `Value` refuses would let the host store
//! an item it cannot parse again.

#![no_main]

use iar::item_scan::{self, Identity, Scanned};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = text.parse::<Value>();
    for (path, got) in [
        ("scan", item_scan::scan(text)),
        ("by_serde", item_scan::by_serde(text)),
    ] {
        match (got, &parsed) {
            (Ok(Scanned::Object(id)), Ok(v)) => {
                assert!(v.is_object(), "{path}: {text:?}");
                assert_eq!(id, Identity::of(v), "{path}: {text:?}");
            }
            (Ok(Scanned::NotObject), Ok(v)) => assert!(!v.is_object(), "{path}: {text:?}"),
            (Err(_), Err(_)) => {}
            (s, v) => panic!("{path} and Value disagree on {text:?}: {s:?} / {v:?}"),
        }
    }
});
