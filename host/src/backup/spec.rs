//! The part of a Velero Backup `spec` that iar honours: namespace, resource
//! and label filters, the operation timeout and the ttl.

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
    /// As selector syntax, for a server-side list.
    label_selector: String,
}

/// A list of strings, or absent/null for none. Anything else is an error
/// naming the field: an entry dropped for its type would widen the backup
/// (`includedNamespaces: [1]` must not mean every namespace).
fn strings(spec: &Value, key: &str) -> Result<Vec<String>, String> {
    match spec.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(String::from)
                    .ok_or_else(|| format!("{key}[{i}] is {}, not a string", type_name(v)))
            })
            .collect(),
        Some(v) => Err(format!("{key} is {}, not a list of strings", type_name(v))),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A metav1.LabelSelector object as selector syntax. Every part must have
/// its type; a part ignored for its type would select more.
fn label_selector(v: Option<&Value>) -> Result<String, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(String::new());
    };
    let Value::Object(obj) = v else {
        return Err(format!("labelSelector is {}, not an object", type_name(v)));
    };
    if let Some(other) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "matchLabels" | "matchExpressions"))
    {
        return Err(format!("labelSelector.{other} is not a selector field"));
    }
    let mut parts = Vec::new();
    match obj.get("matchLabels") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, val) in m {
                let val = val.as_str().ok_or_else(|| {
                    format!(
                        "labelSelector.matchLabels.{k} is {}, not a string",
                        type_name(val)
                    )
                })?;
                parts.push(format!("{k}={val}"));
            }
        }
        Some(m) => {
            return Err(format!(
                "labelSelector.matchLabels is {}, not an object",
                type_name(m)
            ));
        }
    }
    let expressions = match obj.get("matchExpressions") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(a)) => a.as_slice(),
        Some(e) => {
            return Err(format!(
                "labelSelector.matchExpressions is {}, not a list",
                type_name(e)
            ));
        }
    };
    for (i, e) in expressions.iter().enumerate() {
        let field = format!("labelSelector.matchExpressions[{i}]");
        if !e.is_object() {
            return Err(format!("{field} is {}, not an object", type_name(e)));
        }
        let key = e
            .get("key")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{field}.key is missing or not a string"))?;
        let values = strings(e, "values").map_err(|r| format!("{field}.{r}"))?;
        parts.push(match e.get("operator").and_then(Value::as_str) {
            Some("In") => format!("{key} in ({})", values.join(",")),
            Some("NotIn") => format!("{key} notin ({})", values.join(",")),
            Some("Exists") => key.to_string(),
            Some("DoesNotExist") => format!("!{key}"),
            other => {
                return Err(format!("{field}.operator: unknown operator {other:?}"));
            }
        });
    }
    Ok(parts.join(","))
}

impl BackupFilter {
    /// From a Backup `spec` (or an empty one: everything).
    pub fn from_spec(spec: &Value) -> Result<Self, String> {
        if !(spec.is_object() || spec.is_null()) {
            return Err(format!("backup spec is {}, not an object", type_name(spec)));
        }
        // Filters iar does not implement would be silently ignored, and the
        // backup would be wider than asked: refuse them.
        for unsupported in [
            "orLabelSelectors",
            "includedClusterScopedResources",
            "excludedClusterScopedResources",
            "includedNamespaceScopedResources",
            "excludedNamespaceScopedResources",
        ] {
            if spec.get(unsupported).is_some_and(|v| !v.is_null()) {
                return Err(format!(
                    "backup spec: {unsupported} is not supported by iar"
                ));
            }
        }
        let label_selector = label_selector(spec.get("labelSelector"))?;
        let sel = ResourceSelector {
            included_namespaces: strings(spec, "includedNamespaces")?,
            excluded_namespaces: strings(spec, "excludedNamespaces")?,
            included_resources: strings(spec, "includedResources")?,
            excluded_resources: strings(spec, "excludedResources")?,
            label_selector: label_selector.clone(),
        };
        let selector = CompiledSelector::compile(&sel, Catalog::builtin())
            .map_err(|e: SelectorError| format!("backup spec: {e}"))?;
        Ok(BackupFilter {
            selector,
            label_selector,
        })
    }

    /// The label selector in selector syntax ("" for none).
    pub fn label_selector(&self) -> &str {
        &self.label_selector
    }

    /// The compiled selector, for listers that narrow what they ask for.
    pub fn selector(&self) -> &CompiledSelector {
        &self.selector
    }

    /// Whether a listed item belongs to the backup: the selector, and not
    /// labelled [`EXCLUDE_LABEL`]`=true`.
    pub fn matches(&self, item: &crate::Item) -> bool {
        self.selector.matches(
            &item.id.group,
            &item.id.resource,
            &item.id.namespace,
            || item.labels(),
        ) && !excluded_by_label(item)
    }

    /// Why an additional item a plugin named stays out of the backup, or
    /// `None` when it goes in. Decided as Velero's item backupper decides
    /// (`pkg/backup/item_backupper.go`): the namespace and resource
    /// includes/excludes and the exclude label; not the label selector,
    /// which chose what was listed, not what plugins may name; and a
    /// cluster-scoped item (a PVC's PersistentVolume) is not held to the
    /// namespace filter.
    pub fn excludes_additional(&self, item: &crate::Item) -> Option<String> {
        let id = &item.id;
        if !self.selector.includes_resource(&id.group, &id.resource) {
            return Some(format!(
                "its resource {} is not included by the backup's includedResources/excludedResources",
                id.group_resource()
            ));
        }
        if !id.namespace.is_empty() && !self.selector.includes_namespace(&id.namespace) {
            return Some(format!(
                "its namespace {} is not included by the backup's includedNamespaces/excludedNamespaces",
                id.namespace
            ));
        }
        if excluded_by_label(item) {
            return Some(format!("it is labelled {EXCLUDE_LABEL}=true"));
        }
        None
    }
}

/// The label that keeps any object out of a backup, as in Velero.
pub const EXCLUDE_LABEL: &str = "velero.io/exclude-from-backup";

fn excluded_by_label(item: &crate::Item) -> bool {
    item.value()
        .pointer("/metadata/labels")
        .and_then(|labels| labels.get(EXCLUDE_LABEL))
        .and_then(Value::as_str)
        == Some("true")
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
        // Checked: a fuzzer found that a huge count panicked in
        // `from_secs_f64` and a long sum overflowed the addition.
        let part =
            Duration::try_from_secs_f64(n * secs).map_err(|_| format!("{s:?} is out of range"))?;
        total = total
            .checked_add(part)
            .ok_or_else(|| format!("{s:?} is out of range"))?;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// The spec's `itemOperationTimeout`, if set.
pub fn operation_timeout(spec: &Value) -> Result<Option<Duration>, String> {
    match spec.get("itemOperationTimeout") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_go_duration(s)
            .map(Some)
            .map_err(|e| format!("itemOperationTimeout: {e}")),
        Some(v) => Err(format!(
            "itemOperationTimeout is {}, not a duration string",
            type_name(v)
        )),
    }
}

/// The spec's `ttl`, if set: how long the backup is kept. Zero is "not
/// set" (Velero applies its default to both).
pub fn ttl(spec: &Value) -> Result<Option<Duration>, String> {
    match spec.get("ttl") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_go_duration(s)
            .map(|d| Some(d).filter(|d| !d.is_zero()))
            .map_err(|e| format!("ttl: {e}")),
        Some(v) => Err(format!("ttl is {}, not a duration string", type_name(v))),
    }
}

/// A duration as Go's `time.Duration.String` writes it, and so as Velero
/// stores `spec.ttl`: "720h0m0s", "1m30s", "1.5s", "250ms", "0s".
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    // Under a second: one unit, with a fraction (Go: "1.5ms", "250µs").
    if nanos < 1_000_000_000 {
        let (unit, per) = match nanos {
            n if n < 1_000 => ("ns", 1),
            n if n < 1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{}{unit}", decimal(nanos / per, nanos % per, per));
    }
    let secs = d.as_secs();
    let seconds = decimal(
        u128::from(secs % 60),
        u128::from(d.subsec_nanos()),
        1_000_000_000,
    );
    match (secs / 3600, secs / 60 % 60) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// `whole.fraction` with the fraction's trailing zeros dropped (and the
/// point too when nothing is left), as Go prints durations.
fn decimal(whole: u128, fraction: u128, per: u128) -> String {
    if fraction == 0 {
        return whole.to_string();
    }
    let width = per.ilog10() as usize;
    let digits = format!("{fraction:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
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
        // Found by fuzzing: both panicked instead of being refused.
        assert!(parse_go_duration("9999999999999999999999h").is_err());
        assert!(parse_go_duration("5000000000000000h5000000000000000h").is_err());
    }

    /// Go's own `time.Duration.String` for each of these values.
    #[test]
    fn durations_print_as_go_prints_them() {
        for (d, go) in [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(1), "1ns"),
            (Duration::from_nanos(1_500), "1.5µs"),
            (Duration::from_millis(1), "1ms"),
            (Duration::from_micros(250_500), "250.5ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_millis(1_500), "1.5s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(720 * 3600), "720h0m0s"),
        ] {
            assert_eq!(format_go_duration(d), go, "{d:?}");
            assert_eq!(parse_go_duration(go), Ok(d), "{go} reads back");
        }
        // Read back through an f64 this one may lose its last nanosecond.
        assert_eq!(
            format_go_duration(Duration::new(3661, 1)),
            "1h1m1.000000001s"
        );
    }

    #[test]
    fn ttl_zero_is_unset_and_a_bad_ttl_names_the_field() {
        assert_eq!(ttl(&json!({})), Ok(None));
        assert_eq!(ttl(&json!({"ttl": "0s"})), Ok(None));
        assert_eq!(
            ttl(&json!({"ttl": "24h0m0s"})),
            Ok(Some(Duration::from_secs(86_400)))
        );
        for bad in [json!({"ttl": 5}), json!({"ttl": "a day"})] {
            assert!(ttl(&bad).unwrap_err().starts_with("ttl"), "{bad}");
        }
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

    /// Entries of the wrong type are an error naming the field, never a
    /// wider backup. Before, `strings` and `label_selector` dropped what was
    /// not a string, so `includedNamespaces: [1]` selected every namespace.
    #[test]
    fn wrong_types_are_errors_naming_the_field() {
        for (spec, field) in [
            (json!({"includedNamespaces": [1]}), "includedNamespaces[0]"),
            (json!({"includedNamespaces": "prod"}), "includedNamespaces"),
            (
                json!({"excludedNamespaces": [null]}),
                "excludedNamespaces[0]",
            ),
            (
                json!({"includedResources": {"pods": true}}),
                "includedResources",
            ),
            (
                json!({"excludedResources": ["pods", 2]}),
                "excludedResources[1]",
            ),
            (json!({"labelSelector": 5}), "labelSelector"),
            (json!({"labelSelector": "app=web"}), "labelSelector"),
            (
                json!({"labelSelector": {"matchLabels": {"app": 1}}}),
                "labelSelector.matchLabels.app",
            ),
            (
                json!({"labelSelector": {"matchLabels": ["app"]}}),
                "labelSelector.matchLabels",
            ),
            (
                json!({"labelSelector": {"matchExpressions": {}}}),
                "labelSelector.matchExpressions",
            ),
            (
                json!({"labelSelector": {"matchExpressions": [7]}}),
                "labelSelector.matchExpressions[0]",
            ),
            (
                json!({"labelSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]}}),
                "labelSelector.matchExpressions[0].values[0]",
            ),
            (
                json!({"labelSelector": {"matchExpressions": [{"key": 3, "operator": "Exists"}]}}),
                "labelSelector.matchExpressions[0].key",
            ),
            (
                json!({"labelSelector": {"matchLabel": {"app": "web"}}}),
                "labelSelector.matchLabel",
            ),
            (
                json!({"orLabelSelectors": [{"matchLabels": {"a": "b"}}]}),
                "orLabelSelectors",
            ),
            (json!([]), "backup spec"),
        ] {
            let err = BackupFilter::from_spec(&spec).unwrap_err();
            assert!(err.contains(field), "{spec}: {err}");
        }
        assert!(
            operation_timeout(&json!({"itemOperationTimeout": 60}))
                .unwrap_err()
                .contains("itemOperationTimeout")
        );
        // What is well typed still works, nulls included.
        for spec in [
            json!({}),
            json!(null),
            json!({"includedNamespaces": null, "labelSelector": null}),
            json!({"includedNamespaces": ["a"], "labelSelector": {"matchLabels": {"app": "web"}}}),
        ] {
            BackupFilter::from_spec(&spec).unwrap();
        }
    }
}
