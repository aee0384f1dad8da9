//! A line diff of pretty-printed JSON, enough to read a mismatch: lines only
//! in the expected value start with `-`, only in the actual one with `+`.

use serde_json::Value;

/// Lines kept around each change.
const CONTEXT: usize = 2;

pub fn json_diff(expected: &Value, actual: &Value) -> String {
    let pretty = |v: &Value| serde_json::to_string_pretty(v).expect("JSON values print");
    line_diff(&pretty(expected), &pretty(actual))
}

/// A longest-common-subsequence diff. Quadratic, which is fine for the
/// objects a test compares.
pub fn line_diff(a: &str, b: &str) -> String {
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            // Removals first, so a changed line reads "- old" then "+ new".
            ops.push(('-', a[i]));
            i += 1;
        } else {
            ops.push(('+', b[j]));
            j += 1;
        }
    }
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != ' ').collect();
    let near = |k: usize| {
        changed
            .iter()
            .any(|&c| k + CONTEXT >= c && k <= c + CONTEXT)
    };
    let mut out = Vec::new();
    let mut skipped = false;
    for (k, (tag, line)) in ops.iter().enumerate() {
        if near(k) {
            if skipped {
                out.push("  ...".to_string());
                skipped = false;
            }
            out.push(format!("{tag} {line}"));
        } else {
            skipped = true;
        }
    }
    if skipped {
        out.push("  ...".to_string());
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shows_only_changed_lines_with_context() {
        let d = json_diff(
            &json!({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6}),
            &json!({"a": 1, "b": 2, "c": 30, "d": 4, "e": 5, "f": 6}),
        );
        assert_eq!(
            d,
            "  ...\n    \"a\": 1,\n    \"b\": 2,\n-   \"c\": 3,\n+   \"c\": 30,\n    \"d\": 4,\n    \"e\": 5,\n  ..."
        );
    }
}
