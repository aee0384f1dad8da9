//! Refusing a key a Velero spec does not have (a Backup's, a Restore's),
//! naming the key it most likely meant: a misspelt filter is not a filter,
//! and ignoring it would widen what the backup or restore takes.

use serde_json::Value;

/// `Err` naming the first key of `spec` that is not in `known`, with the
/// nearest known key when one is close; `what` names the spec ("Velero's
/// Backup spec") and `why` says what ignoring it would do.
pub fn refuse_unknown(spec: &Value, known: &[&str], what: &str, why: &str) -> Result<(), String> {
    let Some(map) = spec.as_object() else {
        return Ok(());
    };
    for key in map.keys() {
        if known.contains(&key.as_str()) {
            continue;
        }
        let nearest = known
            .iter()
            .map(|k| (edit_distance(k, key), *k))
            .min()
            .filter(|(d, _)| *d <= 3)
            .map(|(_, k)| format!(" (did you mean {k}?)"))
            .unwrap_or_default();
        return Err(format!(
            "unknown key {key:?}{nearest}: not a field of {what}, and {why}"
        ));
    }
    Ok(())
}

/// Levenshtein's distance, over bytes (spec keys are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_distance_is_levenshteins() {
        assert_eq!(super::edit_distance("kitten", "sitting"), 3);
        assert_eq!(super::edit_distance("", "abc"), 3);
    }
}
