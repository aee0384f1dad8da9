//! The top-level members of an item's JSON text, found without reading
//! their values: each key, and where its value starts and ends.
//!
//! Only for text the host sent, which its boundary checked is one JSON
//! object: this finds where values end (strings by their closing quote,
//! containers by their matching bracket) and checks nothing else, which is
//! what makes it cheaper than serde's skipping reader, the head's other
//! path. It gives up (`None`) on anything it does not expect, and on an
//! escaped key (which only a decoder compares rightly); the caller then
//! reads the text with serde.

use std::ops::Range;

/// Calls `member` with each top-level key (as written, without its quotes)
/// and the range of its value, in order; `None` when `text` is not shaped
/// as an object or a key has an escape.
pub(crate) fn members<'t>(
    text: &'t str,
    mut member: impl FnMut(&'t str, Range<usize>) -> Option<()>,
) -> Option<()> {
    let b = text.as_bytes();
    let mut i = ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return Some(());
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let end = string_end(b, i + 1)?;
        let key = text.get(i + 1..end - 1)?;
        if key.contains('\\') {
            return None;
        }
        i = ws(b, end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = ws(b, i + 1);
        let end = value_end(b, start)?;
        member(key, start..end)?;
        i = ws(b, end);
        match b.get(i)? {
            b',' => i = ws(b, i + 1),
            b'}' => return Some(()),
            _ => return None,
        }
    }
}

fn ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = b.get(i) {
        i += 1;
    }
    i
}

/// Just past the closing quote of the string whose content starts at `i`.
fn string_end(b: &[u8], mut i: usize) -> Option<usize> {
    loop {
        let at = i + memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[at] == b'"' {
            return Some(at + 1);
        }
        // An escape: its next byte is never the string's end.
        i = at + 2;
    }
}

/// Just past the value that starts at `i`.
fn value_end(b: &[u8], mut i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => string_end(b, i + 1),
        b'{' | b'[' => {
            let mut depth = 0usize;
            loop {
                match *b.get(i)? {
                    b'"' => {
                        i = string_end(b, i + 1)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        // A number, `true`, `false` or `null`: the run of the bytes they
        // are written with.
        _ => {
            let start = i;
            while let Some(c) = b.get(i) {
                if !(c.is_ascii_alphanumeric() || matches!(c, b'.' | b'+' | b'-')) {
                    break;
                }
                i += 1;
            }
            (i > start).then_some(i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(text: &str) -> Option<Vec<(String, String)>> {
        let mut out = Vec::new();
        members(text, |k, at| {
            out.push((k.to_string(), text[at].to_string()));
            Some(())
        })?;
        Some(out)
    }

    #[test]
    fn finds_each_member_and_where_its_value_ends() {
        let text = r#" { "a" : "x\"}]" , "b":{"c":[1,{"d":"]}"}],"e":"\\"},"f":-1.5e3,"g":true ,"h":null,"i":[] } "#;
        let got = collect(text).unwrap();
        let want = [
            ("a", r#""x\"}]""#),
            ("b", r#"{"c":[1,{"d":"]}"}],"e":"\\"}"#),
            ("f", "-1.5e3"),
            ("g", "true"),
            ("h", "null"),
            ("i", "[]"),
        ];
        assert_eq!(got.len(), want.len());
        for ((k, v), (wk, wv)) in got.iter().zip(want) {
            assert_eq!((k.as_str(), v.as_str()), (wk, wv));
        }
        assert_eq!(collect("{}").unwrap(), vec![]);
    }

    #[test]
    fn gives_up_on_what_it_does_not_expect() {
        for text in [
            "",
            "[]",
            r#"{"a":1"#,
            r#"{"a" 1}"#,
            r#"{"a":"x"#,
            r#"{"a":{"b":1}"#,
            r#"{"a":1;"b":2}"#,
            r#"{"a":}"#,
            r#"{"k\u0069nd":"Pod"}"#,
        ] {
            assert!(collect(text).is_none(), "{text}");
        }
    }
}
