//! A hook's command and error mode as Velero reads them, for backup hooks
//! and restore hooks alike.

use serde_json::Value;

/// What a failed hook does to the hooks after it (Velero's
/// `HookErrorMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum OnError {
    Fail,
    Continue,
}

/// `Fail` or `Continue`, as Velero spells them.
pub fn parse_on_error(s: &str) -> Result<OnError, String> {
    match s {
        "Fail" => Ok(OnError::Fail),
        "Continue" => Ok(OnError::Continue),
        other => Err(format!("{other:?} is not Fail or Continue")),
    }
}

/// A spec's `command`: a non-empty list of strings whose first is not
/// empty.
pub fn command_list(v: Option<&Value>) -> Result<Vec<String>, String> {
    v.and_then(Value::as_array)
        .and_then(|a| {
            a.iter()
                .map(|v| v.as_str().map(String::from))
                .collect::<Option<Vec<_>>>()
        })
        .filter(|c| c.first().is_some_and(|c| !c.is_empty()))
        .ok_or_else(|| "want a non-empty list of strings".to_string())
}

/// A JSON array of strings, or one string that is the whole command (not
/// split on spaces), as Velero's `parseStringToCommand`; an empty command
/// is refused.
pub fn parse_command(s: &str) -> Result<Vec<String>, String> {
    let t = s.trim();
    let command = if t.starts_with('[') {
        serde_json::from_str::<Vec<String>>(t)
            .map_err(|e| format!("not a JSON string array: {e}"))?
    } else {
        vec![s.to_string()]
    };
    if command.is_empty() || command[0].is_empty() {
        return Err("empty command".into());
    }
    Ok(command)
}
