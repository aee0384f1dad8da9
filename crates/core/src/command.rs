//! A hook's command as Velero reads one from an annotation, for backup
//! hooks and restore hooks alike.

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
