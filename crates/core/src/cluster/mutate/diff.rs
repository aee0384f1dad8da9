//! The first path at which two JSON values differ, for refusals that say
//! what changed.

use serde_json::Value;

/// The first path (`.metadata.labels.team`, `.subjects[0]`) where `after`
/// differs from `before`, in `before`'s key order then `after`'s new keys;
/// `None` when equal. `""` is the whole value (a changed type).
pub fn first_change(before: &Value, after: &Value) -> Option<String> {
    if before == after {
        return None;
    }
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, bv) in b {
                match a.get(k) {
                    None => return Some(key(k)),
                    Some(av) => {
                        if let Some(rest) = first_change(bv, av) {
                            return Some(format!("{}{rest}", key(k)));
                        }
                    }
                }
            }
            a.keys().find(|k| !b.contains_key(*k)).map(|k| key(k))
        }
        (Value::Array(b), Value::Array(a)) => {
            for (i, bv) in b.iter().enumerate() {
                match a.get(i) {
                    None => return Some(format!("[{i}]")),
                    Some(av) => {
                        if let Some(rest) = first_change(bv, av) {
                            return Some(format!("[{i}]{rest}"));
                        }
                    }
                }
            }
            Some(format!("[{}]", b.len()))
        }
        _ => Some(String::new()),
    }
}

/// `.name`, or `["a.b/c"]` for a key a dot would make ambiguous.
fn key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        format!(".{k}")
    } else {
        format!("[{}]", Value::String(k.to_string()))
    }
}
