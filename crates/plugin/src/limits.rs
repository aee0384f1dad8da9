//! What one plugin may consume and return. Every limit is per plugin.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Resource and output limits of one plugin. An unknown field is an error:
/// a misspelt limit must not leave the default in force unnoticed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// CPU deadline of one call (execute, progress, cancel, applies-to,
    /// instantiation). Hitting it traps the guest.
    #[serde(with = "humantime_serde_compat")]
    pub deadline: Duration,
    /// Wall-clock ceiling of one call: time spent in host calls and in
    /// blocking WASI calls (a sleep, a poll on a clock) counts, which the
    /// CPU deadline leaves out. `None` = [`WALL_CLOCK_FACTOR`] × the
    /// deadline. A guest still running or waiting at the ceiling is stopped
    /// (rule `wall-clock`); clock waits are cut short to end there.
    #[serde(with = "humantime_option", skip_serializing_if = "Option::is_none")]
    pub wall_clock: Option<Duration>,
    /// Linear memory of one instance, in bytes.
    pub memory_bytes: usize,
    /// Size of a returned item, in bytes of JSON.
    pub max_item_bytes: usize,
    /// Additional items plus post-operation items of one call.
    pub max_related_items: usize,
    /// Length of an operation id.
    pub max_operation_id_bytes: usize,
    /// Length of a progress description or an error message.
    pub max_message_bytes: usize,
    /// Host log lines one call may write; more are dropped and counted.
    pub max_log_lines: usize,
    /// Guest stdout+stderr bytes kept per call; the rest is dropped and counted.
    pub max_stdio_bytes: usize,
    /// `cluster-get` calls one call may make; the next one stops the call.
    pub max_host_calls: usize,
    /// Objects one plugin may create in one backup (contract 1.2.0), across
    /// all its calls and instances; the next create is refused (rule
    /// `create-limit`).
    pub max_creates_per_backup: usize,
    /// Entries in an instance's WASI resource table (streams, pollables);
    /// a guest that opens more is stopped. wasmtime's own WASI tests use
    /// 1,000.
    pub max_resources: usize,
    /// Which calls share an instance, and so the guest's globals.
    pub isolation: Isolation,
    /// The longest a restore action may ask the restore to wait for its
    /// additional items (`additional-items-ready-timeout`); a longer ask
    /// is cut to it. Velero's own default wait is 10 minutes.
    #[serde(with = "humantime_serde_compat")]
    pub max_ready_wait: Duration,
    /// Additional, post-operation and related items one plugin may name
    /// across all its calls of one backup or restore, in this process; the
    /// call that would pass it is refused (rule `run-budget`).
    pub max_items_per_run: usize,
    /// The total of the ready waits one plugin's restore action may ask
    /// for in one restore (rule `run-budget`): a restore runs one item at
    /// a time, so every wait holds up the whole restore and the next one.
    #[serde(with = "humantime_serde_compat")]
    pub max_ready_wait_per_run: Duration,
    /// Bytes of error text (its own error messages, and the stderr of its
    /// failed calls) one plugin may put into one backup's or restore's
    /// results, in this process; later errors are still reported, with
    /// their text withheld (rule `run-budget`). Inside Velero each error
    /// is kept in the server's memory until the restore ends.
    pub max_error_bytes_per_run: usize,
}

/// How long one wasm instance lives, and so how far a guest's global state
/// can reach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// A fresh instance for every call: nothing one item's call leaves in the
    /// guest's memory is seen by the next. The safe choice for plugins that
    /// handle Secrets.
    Item,
    /// One instance per backup pass: calls of the same backup and phase
    /// share the guest's globals (so a cache in the guest works), but nothing
    /// survives into another backup or another pass.
    #[default]
    Backup,
}

/// An isolation that is neither `item` nor `backup`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown isolation {0:?} (use \"item\" or \"backup\")")]
pub struct UnknownIsolation(pub String);

impl std::str::FromStr for Isolation {
    type Err = UnknownIsolation;
    fn from_str(s: &str) -> Result<Self, UnknownIsolation> {
        match s {
            "item" => Ok(Isolation::Item),
            "backup" => Ok(Isolation::Backup),
            other => Err(UnknownIsolation(other.to_string())),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(10),
            wall_clock: None,
            memory_bytes: 64 << 20,
            max_item_bytes: 4 << 20,
            max_related_items: 10_000,
            max_operation_id_bytes: 1024,
            max_message_bytes: 64 << 10,
            max_log_lines: 1000,
            max_stdio_bytes: 64 << 10,
            max_host_calls: 10_000,
            max_creates_per_backup: 10_000,
            max_resources: 1000,
            isolation: Isolation::Backup,
            max_ready_wait: Duration::from_secs(600),
            max_items_per_run: 100_000,
            max_ready_wait_per_run: Duration::from_secs(1800),
            max_error_bytes_per_run: 1 << 20,
        }
    }
}

/// The wall-clock ceiling, when a plugin's settings leave it unset, as a
/// multiple of its CPU deadline: generous for a plugin that waits on the
/// cluster, short of "for ever" for one that sleeps.
pub const WALL_CLOCK_FACTOR: u32 = 10;

impl Limits {
    /// The wall-clock ceiling in force: the setting, else
    /// [`WALL_CLOCK_FACTOR`] × the deadline.
    pub fn wall_clock_ceiling(&self) -> Duration {
        self.wall_clock
            .unwrap_or_else(|| self.deadline.saturating_mul(WALL_CLOCK_FACTOR))
    }
}

/// An optional duration, written as [`humantime_serde_compat`] writes one.
mod humantime_option {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::humantime_serde_compat::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| humantime::parse_duration(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// Durations in settings files are written as humans do: "10s", "500ms".
pub mod humantime_serde_compat {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

/// A byte size that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ByteSizeError {
    #[error("{0:?} is not a byte size")]
    NotASize(String),
    #[error("unknown size unit {0:?} (use B, KiB, MiB, GiB)")]
    Unit(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
}

/// Parses a byte size: "64MiB", "512KiB", "1GiB", "1000".
pub fn parse_bytes(s: &str) -> Result<usize, ByteSizeError> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| ByteSizeError::NotASize(s.to_string()))?;
    let mult = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "Ki" => 1 << 10,
        "M" | "MiB" | "Mi" => 1 << 20,
        "G" | "GiB" | "Gi" => 1 << 30,
        other => return Err(ByteSizeError::Unit(other.to_string())),
    };
    n.checked_mul(mult)
        .ok_or_else(|| ByteSizeError::TooLarge(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("512Ki"), Ok(512 << 10));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert!(
            parse_bytes("12 parsecs")
                .unwrap_err()
                .to_string()
                .contains("unknown size unit")
        );
        assert!(parse_bytes("MiB").is_err());
    }

    #[test]
    fn limits_read_from_yaml() {
        let l: Limits =
            iar_core::yaml::from_str("deadline: 250ms\nmemoryBytes: 1048576\n").unwrap();
        assert_eq!(l.deadline, Duration::from_millis(250));
        assert_eq!(l.memory_bytes, 1 << 20);
        assert_eq!(l.max_item_bytes, Limits::default().max_item_bytes);
        assert_eq!(l.isolation, Isolation::Backup, "backup is the default");
    }

    /// The wall-clock ceiling reads as a duration and defaults to ten
    /// deadlines.
    #[test]
    fn wall_clock_defaults_to_ten_deadlines() {
        let l: Limits = iar_core::yaml::from_str("deadline: 250ms\n").unwrap();
        assert_eq!(l.wall_clock_ceiling(), Duration::from_millis(2500));
        let l: Limits = iar_core::yaml::from_str("deadline: 250ms\nwallClock: 1s\n").unwrap();
        assert_eq!(l.wall_clock_ceiling(), Duration::from_secs(1));
        assert!(iar_core::yaml::from_str::<Limits>("wallClock: soon\n").is_err());
    }

    /// A misspelt limit (`memoryByte`) is an error naming it, in a settings
    /// file too, not a cap silently left at its default.
    #[test]
    fn a_misspelt_limit_is_an_error() {
        let err = iar_core::yaml::from_str::<Limits>("memoryByte: 1048576\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("memoryByte"), "{err}");
        let err = crate::plugin::SettingsFile::parse("limits:\n  memoryByte: 1048576\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `memoryByte`"), "{err}");
    }

    /// The isolation setting reads from settings files in lower case and
    /// from the CLI's `--isolation`, and a typo is an error, not a default.
    #[test]
    fn isolation_reads_from_yaml_and_flags() {
        let l: Limits = iar_core::yaml::from_str("isolation: item\nmaxHostCalls: 5\n").unwrap();
        assert_eq!((l.isolation, l.max_host_calls), (Isolation::Item, 5));
        assert!(iar_core::yaml::from_str::<Limits>("isolation: none\n").is_err());
        assert_eq!("backup".parse(), Ok(Isolation::Backup));
        assert!("Item".parse::<Isolation>().is_err());
    }
}
