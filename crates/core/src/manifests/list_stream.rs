//! A large JSON `List` read a piece at a time: the elements of its
//! top-level `items` array are handed out one by one as byte slices, so a
//! 100 MB list is never in memory whole (it was: the file's text was the
//! largest single allocation of `iar backup`, as large as the input).
//!
//! Only the structure is scanned here (strings, escapes, nesting); each
//! element is parsed by serde_json, from a slice, as before. serde_json's
//! own reader-based parse was measured first and halved items/s (it reads
//! a byte at a time through `io::Read`); this scan keeps the slice parse.
//!
//! Anything but the plain shape — one object, an `items` array of
//! objects, a string `kind`, each key once — is not handled here: the
//! caller reads the file whole, and reports what is wrong with it exactly
//! as it always did.

use std::io::{self, Read};

/// What the scan found, once the whole file was read.
#[derive(Debug, PartialEq)]
pub(super) struct Scanned {
    /// The top-level `kind`, if it had one.
    pub kind: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// The top-level `{`.
    Open,
    /// A key or the closing `}` (just after the `{`).
    FirstKey,
    /// A key (after a comma).
    Key,
    Colon,
    Value,
    /// Inside a number, `true`, `false` or `null` at the top level.
    Scalar,
    /// A comma or `}` at the top level.
    Next,
    /// An element or `]` (just after the `[` of `items`).
    FirstElement,
    /// An element (after a comma in `items`).
    Element,
    /// A comma or `]` in `items`.
    NextElement,
    /// Only whitespace may follow.
    End,
}

/// What a string being read is.
#[derive(Clone, Copy, PartialEq)]
enum Text {
    /// Skipped.
    Other,
    /// A top-level key.
    Key,
    /// The top-level `kind`'s value.
    Kind,
}

/// Calls `each(element)` for every element of the top-level
/// `items` array of the JSON object `read` holds, reading `chunk` bytes at
/// a time. `None` when the text is not of the plain shape (the caller
/// falls back to reading it whole), or when `each` says stop (`false`).
pub(super) fn split_items(
    mut read: impl Read,
    chunk: usize,
    each: &mut dyn FnMut(&[u8]) -> bool,
) -> io::Result<Option<Scanned>> {
    let mut buf: Vec<u8> = Vec::with_capacity(chunk);
    let mut pos = 0;
    let mut eof = false;
    let mut expect = Expect::Open;
    let mut depth = 0usize;
    // A string being read: where its quote is, what it is, an escape open.
    let mut string: Option<(usize, Text)> = None;
    let mut escaped = false;
    // A nested value being skipped (or an element being read): the depth
    // it returns to when it ends.
    let mut nested: Option<usize> = None;
    let mut element: Option<usize> = None;
    let mut key = String::new();
    let mut kind: Option<String> = None;
    let mut seen_items = false;
    let decode = |bytes: &[u8]| serde_json::from_slice::<String>(bytes).ok();
    loop {
        if pos == buf.len() {
            if eof {
                break;
            }
            // Keep what is still needed: the element or string being read.
            let keep = [element, string.map(|(at, _)| at)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(pos);
            buf.drain(..keep);
            pos -= keep;
            element = element.map(|at| at - keep);
            string = string.map(|(at, t)| (at - keep, t));
            let had = buf.len();
            buf.resize(had + chunk, 0);
            let n = loop {
                match read.read(&mut buf[had..]) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => break r?,
                }
            };
            buf.truncate(had + n);
            eof = n == 0;
            continue;
        }
        let b = buf[pos];
        if let Some((at, text)) = string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                string = None;
                if text != Text::Other {
                    let Some(decoded) = decode(&buf[at..=pos]) else {
                        return Ok(None);
                    };
                    match text {
                        Text::Key => key = decoded,
                        _ => kind = Some(decoded),
                    }
                }
            }
            pos += 1;
            continue;
        }
        if let Some(base) = nested {
            match b {
                b'"' => string = Some((pos, Text::Other)),
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == base {
                        nested = None;
                        if let Some(at) = element.take()
                            && !each(&buf[at..=pos])
                        {
                            return Ok(None);
                        }
                    }
                }
                _ => {}
            }
            pos += 1;
            continue;
        }
        let space = matches!(b, b' ' | b'\t' | b'\n' | b'\r');
        if space && expect != Expect::Scalar {
            pos += 1;
            continue;
        }
        expect = match (expect, b) {
            (Expect::Open, b'{') => {
                depth = 1;
                Expect::FirstKey
            }
            (Expect::FirstKey | Expect::Key, b'"') => {
                string = Some((pos, Text::Key));
                Expect::Colon
            }
            (Expect::FirstKey, b'}') | (Expect::Next, b'}') => {
                depth = 0;
                Expect::End
            }
            (Expect::Colon, b':') => {
                // A key given twice is for the whole-file parse to judge.
                if (key == "items" && seen_items) || (key == "kind" && kind.is_some()) {
                    return Ok(None);
                }
                Expect::Value
            }
            (Expect::Value, _) if key == "items" => {
                if b != b'[' {
                    return Ok(None);
                }
                seen_items = true;
                depth = 2;
                Expect::FirstElement
            }
            (Expect::Value, _) if key == "kind" => {
                if b != b'"' {
                    return Ok(None);
                }
                string = Some((pos, Text::Kind));
                Expect::Next
            }
            (Expect::Value, b'"') => {
                string = Some((pos, Text::Other));
                Expect::Next
            }
            (Expect::Value, b'{' | b'[') => {
                nested = Some(depth);
                depth += 1;
                Expect::Next
            }
            (Expect::Value, b'-' | b'0'..=b'9' | b't' | b'f' | b'n') => Expect::Scalar,
            (Expect::Scalar, b',' | b'}') => {
                // The scalar ended here: this byte is read again as what
                // follows it.
                expect = Expect::Next;
                continue;
            }
            (Expect::Scalar, _) if space => Expect::Next,
            (Expect::Scalar, _) => Expect::Scalar,
            (Expect::Next, b',') => Expect::Key,
            (Expect::FirstElement | Expect::Element, b'{') => {
                element = Some(pos);
                nested = Some(depth);
                depth += 1;
                Expect::NextElement
            }
            (Expect::FirstElement, b']') | (Expect::NextElement, b']') => {
                depth = 1;
                Expect::Next
            }
            (Expect::NextElement, b',') => Expect::Element,
            // Anything else (an element that is not an object, a stray
            // byte, text after the end) is not the plain shape.
            _ => return Ok(None),
        };
        pos += 1;
    }
    if expect != Expect::End || !seen_items {
        return Ok(None);
    }
    Ok(Some(Scanned { kind }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    /// What the whole-file parse makes of a text: the items' texts and
    /// the kind, or nothing.
    fn whole(text: &str) -> Option<(Vec<String>, Option<String>)> {
        #[derive(Deserialize)]
        struct RawList<'a> {
            #[serde(default)]
            kind: Option<String>,
            #[serde(borrow)]
            items: Vec<&'a serde_json::value::RawValue>,
        }
        let list: RawList = serde_json::from_str(text).ok()?;
        let items: Vec<String> = list.items.iter().map(|r| r.get().to_string()).collect();
        items
            .iter()
            .all(|i| i.starts_with('{'))
            .then_some((items, list.kind))
    }

    fn streamed(text: &str, chunk: usize) -> Option<(Vec<String>, Option<String>)> {
        let mut items = Vec::new();
        let scanned = split_items(text.as_bytes(), chunk, &mut |bytes| {
            items.push(String::from_utf8(bytes.to_vec()).unwrap());
            true
        })
        .unwrap()?;
        Some((items, scanned.kind))
    }

    /// Every chunk size, one byte included, splits a list exactly as the
    /// whole-file parse does: strings with quotes, escapes and brackets,
    /// nested objects and arrays, `items` before `kind` (as kubectl writes
    /// it), scalars of every type, whitespace anywhere.
    #[test]
    fn a_list_splits_as_the_whole_file_parse_reads_it() {
        let texts = [
            r#"{"apiVersion":"v1","kind":"List","items":[{"a":1},{"b":"x"}]}"#,
            r#"{ "apiVersion": "v1", "items": [ {"metadata": {"name": "a\"}]["}, "data": {"k": "\\"}} ,
               {"n": [1, [2, {"x": null}], "]"], "t": true} ], "kind" : "ConfigMapList", "metadata": {"resourceVersion": ""} }"#,
            r#"{"items":[],"kind":"List"}"#,
            r#"{"kind":"List","n":-1.5e3,"f":false,"z":null,"items":[{}]}  "#,
            "{\"kind\":\"L\\u0069st\",\"items\":[{\"s\":\"\\u00e9\u{e9}\"}]}\n",
        ];
        for text in texts {
            let want = whole(text).unwrap_or_else(|| panic!("a list: {text}"));
            for chunk in [1, 2, 3, 7, 64, 1 << 20] {
                assert_eq!(
                    streamed(text, chunk).as_ref(),
                    Some(&want),
                    "chunk {chunk}: {text}"
                );
            }
        }
    }

    /// Texts not of the plain shape are left to the whole-file parse (which
    /// reports what is wrong): invalid JSON, an element that is not an
    /// object, a key given twice, `items` that is not an array, trailing
    /// text, an unterminated element, a kind that is not a string.
    #[test]
    fn anything_else_is_left_to_the_whole_file_parse() {
        for text in [
            r#"{"kind":"List","items":[{"a":1},]}"#,
            r#"{"kind":"List","items":[1,{"a":1}]}"#,
            r#"{"kind":"List","items":[{"a":1}],"items":[{"b":2}]}"#,
            r#"{"kind":"List","kind":"List","items":[]}"#,
            r#"{"kind":"List","items":null}"#,
            r#"{"kind":"List","items":[{"a":1}]} x"#,
            r#"{"kind":"List","items":[{"a":1}"#,
            r#"{"kind":7,"items":[]}"#,
            r#"["kind","List"]"#,
            r#"{"kind":"List"}"#,
            "",
        ] {
            for chunk in [1, 5, 1 << 20] {
                assert_eq!(streamed(text, chunk), None, "chunk {chunk}: {text}");
            }
        }
    }

    /// `each` saying stop ends the scan with nothing.
    #[test]
    fn a_refused_element_stops_the_scan() {
        let text = r#"{"kind":"List","items":[{"a":1},{"b":2}]}"#;
        let mut calls = 0;
        let out = split_items(text.as_bytes(), 4, &mut |_| {
            calls += 1;
            false
        })
        .unwrap();
        assert_eq!((out, calls), (None, 1));
    }
}
