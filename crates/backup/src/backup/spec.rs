//! The scalar fields of a Velero Backup `spec` that iar honours: the
//! operation timeout and the ttl, as Go durations.

use iar_core::select::backup_filter::type_name;
use serde_json::Value;
use std::time::Duration;

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

    /// A timeout of the wrong type is an error naming the field.
    #[test]
    fn a_wrongly_typed_operation_timeout_names_the_field() {
        assert!(
            operation_timeout(&json!({"itemOperationTimeout": 60}))
                .unwrap_err()
                .contains("itemOperationTimeout")
        );
    }
}
