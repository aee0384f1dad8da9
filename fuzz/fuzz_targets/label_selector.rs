//! Kubernetes label selectors as `kubectl -l` and a plugin's applies-to
//! write them (`iar::select::LabelSelector::from_str`).
//!
//! Properties: an error names the input it refused; a selector that parses
//! re-parses from its Display form to an equal selector, and that form is a
//! fixed point; matching the labels the selector itself names never panics.

#![no_main]

use std::collections::BTreeMap;

use iar::select::LabelSelector;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let selector = match text.parse::<LabelSelector>() {
        Ok(selector) => selector,
        Err(e) => {
            assert_eq!(e.input, text, "the error must name the input");
            return;
        }
    };
    let shown = selector.to_string();
    let back: LabelSelector = shown
        .parse()
        .unwrap_or_else(|e| panic!("{text:?} parsed, but its display {shown:?} does not: {e}"));
    assert_eq!(back, selector, "{text:?} shown as {shown:?}");
    assert_eq!(back.to_string(), shown, "display is not a fixed point");

    // Labels made of the selector's own words: every key with every value
    // the text mentions, so Equals/In/Gt paths all run.
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || "=!(),<>".contains(c))
        .filter(|w| !w.is_empty())
        .collect();
    for value in words.iter().chain([&""]) {
        let labels: BTreeMap<String, String> = words
            .iter()
            .map(|k| (k.to_string(), value.to_string()))
            .collect();
        let _ = selector.matches(&labels);
    }
    assert!(
        !selector.is_empty() || selector.matches(&BTreeMap::new()),
        "the empty selector matches everything"
    );
});
