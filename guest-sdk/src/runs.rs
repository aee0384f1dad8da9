//! Contract 1.4.0's `runs`: the whole Backup or Restore the current call
//! belongs to, for a plugin that needs more of it than the [`crate::Backup`]
//! a call is given (its labels and annotations, its status and start time).
//! A plugin that never calls these imports nothing of 1.4.0 and loads on
//! older hosts.

use crate::bindings_v1_4::iar::plugin::runs;
use serde_json::Value;

/// The Backup of the current backup action's or block action's call, as
/// JSON (Velero's `velero.io/v1` `Backup`: metadata, spec, status);
/// `None` in `applies_to` and in a restore's calls. The same text for every
/// call of one pass: parse it once per backup uid and phase.
pub fn backup_object() -> Option<Value> {
    runs::backup().and_then(|text| serde_json::from_str(&text).ok())
}

/// The Restore of the current restore action's call, as JSON; `None` in
/// `applies_to` and in a backup's calls.
pub fn restore_object() -> Option<Value> {
    runs::restore().and_then(|text| serde_json::from_str(&text).ok())
}
