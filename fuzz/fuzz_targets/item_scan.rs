//! The boundary's scan of a returned item (`iar::item_scan::scan`) on any
//! UTF-8 text: its byte-level fast path answers only within a subset of
//! JSON and hands everything else to the serde path, so the two paths and a
//! `Value` parse must agree on whether the text is JSON, whether it is an
//! object, and the object's apiVersion, kind, namespace and name. A fast
//! path that accepted one text `Value` refuses would let the host store
//! an item it cannot parse again.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        iar_fuzz::assert_scan_agrees_with_value(text);
    }
});
