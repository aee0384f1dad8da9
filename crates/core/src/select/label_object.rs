//! A Backup spec's `labelSelector`: a metav1.LabelSelector object
//! (`matchLabels`, `matchExpressions`), read by serde into k8s-openapi's
//! type, checked as apimachinery's `LabelSelectorAsSelector` checks it (so
//! what Velero refuses is refused), and turned into kube's Selector. A
//! selector read wrong would take more or fewer items than asked, so each
//! refusal names the field and the rule broken.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as SelectorObject;
use kube_core::Selector;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::backup_filter::type_name;
use super::labels::{validate_key, validate_value};

const FIELD: &str = "labelSelector";

/// `v` as a Selector; absent or null selects every item, as in Velero.
pub(crate) fn parse(v: Option<&Value>) -> Result<Selector, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Selector::default());
    };
    let Value::Object(obj) = v else {
        return Err(format!(
            "{FIELD} is {}, not an object: a Backup's labelSelector is a metav1.LabelSelector \
             (matchLabels, matchExpressions), not selector text",
            type_name(v)
        ));
    };
    // k8s-openapi skips the fields it does not know: a misspelt
    // `matchLabel` would be dropped and the backup take every item.
    if let Some(other) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "matchLabels" | "matchExpressions"))
    {
        return Err(format!(
            "{FIELD}.{other} is not a selector field (matchLabels, matchExpressions)"
        ));
    }
    let object = SelectorObject::deserialize(v)
        .map_err(|e| misfit(obj).unwrap_or_else(|| format!("{FIELD}: {e}")))?;
    check(&object)?;
    // kube refuses only what `check` refused already (an unknown operator,
    // In/NotIn without values); its reason names no field.
    Selector::try_from(object).map_err(|e| format!("{FIELD}: {e}"))
}

/// What apimachinery's `LabelSelectorAsSelector` refuses, and Velero with
/// it: keys and values that are not label keys and values (kube's
/// Selector checks none, and a value such as `a,b` would read as two in
/// the selector text the server is sent), an unknown operator, In/NotIn
/// without values, Exists/DoesNotExist with values.
fn check(object: &SelectorObject) -> Result<(), String> {
    for (key, value) in object.match_labels.iter().flatten() {
        validate_key(key).map_err(|r| format!("{FIELD}.matchLabels: {r}"))?;
        validate_value(value).map_err(|r| format!("{FIELD}.matchLabels.{key}: {r}"))?;
    }
    for (i, r) in object.match_expressions.iter().flatten().enumerate() {
        let at = format!("{FIELD}.matchExpressions[{i}]");
        validate_key(&r.key).map_err(|e| format!("{at}.key: {e}"))?;
        let op = r.operator.as_str();
        let values = r.values.as_deref().unwrap_or_default();
        match op {
            "In" | "NotIn" if values.is_empty() => {
                return Err(format!(
                    "{at}.values: must be non-empty when the operator is {op}"
                ));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(format!(
                    "{at}.values: must be empty when the operator is {op} (it tests the key alone)"
                ));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => {
                return Err(format!(
                    "{at}.operator: {op:?} is not a label selector operator \
                     (In, NotIn, Exists, DoesNotExist)"
                ));
            }
        }
        for (j, value) in values.iter().enumerate() {
            validate_value(value).map_err(|e| format!("{at}.values[{j}]: {e}"))?;
        }
    }
    Ok(())
}

/// The part of `obj` that does not have its type, named to the entry
/// (`labelSelector.matchExpressions[0].values[1] is a number, not a
/// string`). Serde alone decides what is accepted; this only says where,
/// which serde_json does not track when reading a `Value`. `None` when
/// every part has its type.
fn misfit(obj: &Map<String, Value>) -> Option<String> {
    let wrong = |path: String, v: &Value, want: &str| {
        Some(format!("{path} is {}, not {want}", type_name(v)))
    };
    let present = |name: &str| obj.get(name).filter(|v| !v.is_null());
    match present("matchLabels") {
        None => {}
        Some(Value::Object(m)) => {
            if let Some((k, v)) = m.iter().find(|(_, v)| !v.is_string()) {
                return wrong(format!("{FIELD}.matchLabels.{k}"), v, "a string");
            }
        }
        Some(m) => return wrong(format!("{FIELD}.matchLabels"), m, "an object"),
    }
    let expressions = match present("matchExpressions") {
        None => return None,
        Some(Value::Array(a)) => a,
        Some(e) => return wrong(format!("{FIELD}.matchExpressions"), e, "a list"),
    };
    for (i, e) in expressions.iter().enumerate() {
        let at = format!("{FIELD}.matchExpressions[{i}]");
        let Value::Object(e) = e else {
            return wrong(at, e, "an object");
        };
        // Absent or null, either reads as "" (k8s-openapi's default, Go's
        // zero value), which `check` refuses.
        for name in ["key", "operator"] {
            if let Some(v) = e.get(name).filter(|v| !v.is_string() && !v.is_null()) {
                return wrong(format!("{at}.{name}"), v, "a string");
            }
        }
        match e.get("values").filter(|v| !v.is_null()) {
            None => {}
            Some(Value::Array(values)) => {
                if let Some((j, v)) = values.iter().enumerate().find(|(_, v)| !v.is_string()) {
                    return wrong(format!("{at}.values[{j}]"), v, "a string");
                }
            }
            Some(v) => return wrong(format!("{at}.values"), v, "a list of strings"),
        }
    }
    None
}

#[cfg(test)]
mod tests;
