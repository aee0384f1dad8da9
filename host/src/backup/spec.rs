//! The part of a Velero Backup `spec` that iar honours: namespace, resource
//! and label filters, and the operation timeout.

use crate::resources::Catalog;
use crate::selector::{CompiledSelector, ResourceSelector, SelectorError};
use serde_json::Value;
use std::time::Duration;

/// Which items a backup takes, compiled from its spec. The include/exclude
/// semantics are the same as a plugin's applies-to (Velero uses one
/// implementation for both).
#[derive(Clone, Debug)]
pub struct BackupFilter {
    selector: CompiledSelector,
}

fn strings(spec: &Value, key: &str) -> Vec<String> {
    spec.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// A metav1.LabelSelector object as selector syntax.
fn label_selector(v: Option<&Value>) -> Result<String, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(String::new());
    };
    let mut parts = Vec::new();
    if let Some(m) = v.get("matchLabels").and_then(Value::as_object) {
        for (k, val) in m {
            let val = val
                .as_str()
                .ok_or_else(|| format!("labelSelector.matchLabels.{k} is not a string"))?;
            parts.push(format!("{k}={val}"));
        }
    }
    for e in v
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e
            .get("key")
            .and_then(Value::as_str)
            .ok_or("labelSelector.matchExpressions: missing key")?;
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        parts.push(match e.get("operator").and_then(Value::as_str) {
            Some("In") => format!("{key} in ({})", values.join(",")),
            Some("NotIn") => format!("{key} notin ({})", values.join(",")),
            Some("Exists") => key.to_string(),
            Some("DoesNotExist") => format!("!{key}"),
            other => {
                return Err(format!(
                    "labelSelector.matchExpressions: unknown operator {other:?}"
                ));
            }
        });
    }
    Ok(parts.join(","))
}

impl BackupFilter {
    /// From a Backup `spec` (or an empty one: everything).
    pub fn from_spec(spec: &Value) -> Result<Self, String> {
        let sel = ResourceSelector {
            included_namespaces: strings(spec, "includedNamespaces"),
            excluded_namespaces: strings(spec, "excludedNamespaces"),
            included_resources: strings(spec, "includedResources"),
            excluded_resources: strings(spec, "excludedResources"),
            label_selector: label_selector(spec.get("labelSelector"))?,
        };
        let selector = CompiledSelector::compile(&sel, Catalog::builtin())
            .map_err(|e: SelectorError| format!("backup spec: {e}"))?;
        Ok(BackupFilter { selector })
    }

    pub fn matches(&self, item: &crate::Item) -> bool {
        self.selector.matches(
            &item.id.group,
            &item.id.resource,
            &item.id.namespace,
            &item.labels(),
        )
    }
}

/// Parses a Go duration as Velero writes it ("4h0m0s", "90m", "1h30m").
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let mut total = Duration::ZERO;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{s:?}: missing unit"))?;
        let n: f64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{s:?} is not a duration"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            "ns" => 0.000_000_001,
            u => return Err(format!("{s:?}: unknown unit {u:?}")),
        };
        total += Duration::from_secs_f64(n * secs);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// The spec's `itemOperationTimeout`, if set.
pub fn operation_timeout(spec: &Value) -> Result<Option<Duration>, String> {
    match spec.get("itemOperationTimeout").and_then(Value::as_str) {
        None => Ok(None),
        Some(s) => parse_go_duration(s)
            .map(Some)
            .map_err(|e| format!("itemOperationTimeout: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_durations() {
        assert_eq!(
            parse_go_duration("4h0m0s"),
            Ok(Duration::from_secs(4 * 3600))
        );
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_go_duration("4 hours").is_err());
        assert!(parse_go_duration("10").is_err());
    }

    #[test]
    fn label_selector_objects_become_selector_syntax() {
        let v = json!({"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "legacy", "operator": "DoesNotExist"}
        ]});
        assert_eq!(
            label_selector(Some(&v)).unwrap(),
            "app=web,tier in (a,b),!legacy"
        );
        assert!(
            label_selector(Some(
                &json!({"matchExpressions": [{"key": "x", "operator": "Near"}]})
            ))
            .is_err()
        );
    }
}
