//! Go's durations, exactly: [`parse`] is Go's `time.ParseDuration` and
//! [`format`] its `time.Duration.String`, ported from Go 1.26's
//! `src/time/format.go` and `src/time/time.go` (integer nanoseconds, Go's
//! overflow rules, Go's error messages). Velero writes and reads every
//! duration this way (`spec.ttl`, `itemOperationTimeout`, hook timeouts,
//! its own flags), and so does every duration flag of the `iar` CLI: one
//! syntax, `"4h0m0s"`, `"90m"`, `"1.5s"`, `"250ms"`, `"0"`.
//!
//! Go's durations are signed. iar has no use for a negative one (a ttl, a
//! timeout, a period or a lease cannot be), so the callers read them with
//! [`parse_non_negative`], which refuses one under the rule
//! [`NON_NEGATIVE_RULE`]; the field or flag name is the caller's to add.
//!
//! The files plugins and operators write (a plugin's `limits` in its
//! settings YAML, the grant policy, authoring test files) keep humantime's
//! syntax (`"5s"`, `"2m"`, also `"1day"`): they are formats of their own,
//! unchanged here. Every Go duration a Velero user would write there
//! ("5s", "1h30m") reads the same in both; only fractions (`"1.5s"`), a
//! sign and `"0"` are Go's alone.
//!
//! A differential test (`duration/tests.rs`) runs Go's own parser
//! (`tools/go-duration`) on a few thousand strings and checks that both
//! agree on every one.

use std::fmt;
use std::time::Duration;

/// The rule an error for a negative duration names.
pub const NON_NEGATIVE_RULE: &str = "non-negative-duration";

/// Nanoseconds per unit: Go's `unitMap`.
const UNITS: [(&str, u64); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),  // µ, U+00B5 MICRO SIGN
    ("\u{3bc}s", 1_000), // μ, U+03BC GREEK SMALL LETTER MU
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 3_600 * 1_000_000_000),
];

/// 1<<63: the magnitude of `i64::MIN`, the largest a Go duration reaches.
const LIMIT: u64 = 1 << 63;

/// What Go's `time.ParseDuration` refuses, with Go's message. The input is
/// quoted as Go quotes it (non-ASCII and control bytes as `\x..`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Empty, a sign alone, no digits before a unit (`".s"`), or a
    /// character that cannot start a number (`" 1s"`, `"1s "`).
    #[error("time: invalid duration {}", Quoted(input))]
    Invalid { input: String },
    /// Past Go's range, int64 nanoseconds: at most 2562047h47m16.854775807s
    /// (and 2562047h47m16.854775808s negative). Go says only "invalid
    /// duration"; its message is this one's beginning.
    #[error(
        "time: invalid duration {}: out of range (a Go duration is at most 2562047h47m16.854775807s either way)",
        Quoted(input)
    )]
    OutOfRange { input: String },
    /// A number without a unit (`"10"`, `"1h30"`).
    #[error("time: missing unit in duration {}", Quoted(input))]
    MissingUnit { input: String },
    /// A unit other than ns, us, µs, μs, ms, s, m, h (`"1d"`, `"1e3s"`).
    #[error("time: unknown unit {} in duration {}", Quoted(unit), Quoted(input))]
    UnknownUnit { unit: String, input: String },
}

/// What [`parse_non_negative`] refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// Go reads it, but a ttl, timeout, period or lease cannot be negative.
    #[error(
        "{} is negative ({}): it must be zero or more (rule: {NON_NEGATIVE_RULE})",
        Quoted(input),
        format(*nanos)
    )]
    Negative { input: String, nanos: i64 },
    /// A period, lease or timeout of zero: a poll that never sleeps, a
    /// lease already expired, a timeout already past.
    #[error(
        "{} is zero: it must be more than that (rule: {POSITIVE_RULE})",
        Quoted(input)
    )]
    Zero { input: String },
}

/// The rule a zero period, lease or timeout breaks.
pub const POSITIVE_RULE: &str = "duration-positive";

/// Go's `time.ParseDuration`: the signed number of nanoseconds `s` means.
///
/// A possibly signed sequence of decimal numbers, each with an optional
/// fraction and a unit: `"300ms"`, `"-1.5h"`, `"2h45m"`, `".5s"`, `"5.s"`,
/// and `"0"` (with or without a sign) alone without a unit. No spaces, no
/// exponent, only ASCII digits. Integer arithmetic in nanoseconds, with
/// Go's one float: a fraction is scaled by `f64` as Go scales it (exact
/// to the nanosecond up to hours), and digits of a fraction past what 63
/// bits hold are ignored, as Go ignores them.
pub fn parse(s: &str) -> Result<i64, ParseError> {
    let input = s;
    let invalid = || ParseError::Invalid {
        input: input.into(),
    };
    let out_of_range = || ParseError::OutOfRange {
        input: input.into(),
    };
    let mut s = s;
    let mut neg = false;
    if let Some(rest) = s.strip_prefix(['-', '+']) {
        neg = s.starts_with('-');
        s = rest;
    }
    // Special case: "0" (after a sign) alone is zero, without a unit.
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut d: u64 = 0;
    while !s.is_empty() {
        // The next character must be [0-9.].
        if !s.starts_with(|c: char| c == '.' || c.is_ascii_digit()) {
            return Err(invalid());
        }
        // [0-9]*
        let before = s.len();
        let (mut v, rest) = leading_int(s).ok_or_else(out_of_range)?;
        s = rest;
        let pre = before != s.len();
        // (\.[0-9]*)?
        let (mut f, mut scale, mut post) = (0, 1.0, false);
        if let Some(rest) = s.strip_prefix('.') {
            let before = rest.len();
            (f, scale, s) = leading_fraction(rest);
            post = before != s.len();
        }
        if !pre && !post {
            // No digits ("." before the unit, ".s", "-.s").
            return Err(invalid());
        }
        // The unit: everything up to the next number. Every byte it stops
        // at is ASCII, so the split falls between characters.
        let end = s
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if end == 0 {
            return Err(ParseError::MissingUnit {
                input: input.into(),
            });
        }
        let (u, rest) = s.split_at(end);
        s = rest;
        let Some(&(_, unit)) = UNITS.iter().find(|(name, _)| *name == u) else {
            return Err(ParseError::UnknownUnit {
                unit: u.into(),
                input: input.into(),
            });
        };
        if v > LIMIT / unit {
            return Err(out_of_range());
        }
        v *= unit;
        if f > 0 {
            // Go's float: f * unit / scale is at most 3.6e12 (a fraction of
            // an hour in nanoseconds), which f64 holds to the nanosecond;
            // the cast truncates as Go's conversion does.
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(out_of_range());
            }
        }
        // Both at most 1<<63, so the sum wraps a u64 only when both are
        // exactly 1<<63, to 0: Go 1.26 wraps there too and goes on
        // ("9223372036854775808ns9223372036854775808ns" is 0 for Go, and so
        // for Velero reading the same spec), so iar wraps as well (found
        // by the fuzzer as an overflow panic; the differential test holds
        // it to Go's answer).
        d = d.wrapping_add(v);
        if d > LIMIT {
            return Err(out_of_range());
        }
    }
    if neg {
        // 1<<63 negated is i64::MIN, as in Go.
        return Ok((d as i64).wrapping_neg());
    }
    i64::try_from(d).map_err(|_| out_of_range())
}

/// [`parse`], for a span of time: a negative duration is refused (rule
/// [`NON_NEGATIVE_RULE`]). `"-0s"` is zero, and so accepted.
pub fn parse_non_negative(s: &str) -> Result<Duration, DurationError> {
    let nanos = parse(s)?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| DurationError::Negative {
            input: s.into(),
            nanos,
        })
}

/// [`parse_non_negative`], and more than zero: for periods, leases and
/// timeouts, where zero is a panic, a lease lost at once or a timeout
/// already past, not a choice.
pub fn parse_positive(s: &str) -> Result<Duration, DurationError> {
    let d = parse_non_negative(s)?;
    if d.is_zero() {
        return Err(DurationError::Zero { input: s.into() });
    }
    Ok(d)
}

/// Go's `leadingInt`: the leading `[0-9]*` of `s` and what follows it;
/// `None` past 1<<63.
fn leading_int(s: &str) -> Option<(u64, &str)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let mut x: u64 = 0;
    for c in s[..digits].bytes() {
        if x > LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(c - b'0');
        if x > LIMIT {
            return None;
        }
    }
    Some((x, &s[digits..]))
}

/// Go's `leadingFraction`: the leading `[0-9]*` of `s` as `x / scale`, and
/// what follows it. Digits past what fits are consumed and dropped, not an
/// error (they are below a nanosecond).
fn leading_fraction(s: &str) -> (u64, f64, &str) {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (mut x, mut scale) = (0u64, 1.0f64);
    for c in s[..digits].bytes() {
        if x > (LIMIT - 1) / 10 {
            break;
        }
        let y = x * 10 + u64::from(c - b'0');
        if y > LIMIT {
            break;
        }
        x = y;
        scale *= 10.0;
    }
    (x, scale, &s[digits..])
}

/// Go's `time.Duration.String`: `"720h0m0s"`, `"1m30s"`, `"1.5s"`,
/// `"250ms"`, `"1.5µs"` (U+00B5), `"-2h0m0s"`, `"0s"`. [`parse`] reads
/// back every value it writes.
pub fn format(nanos: i64) -> String {
    format_magnitude(nanos < 0, u128::from(nanos.unsigned_abs()))
}

/// [`format`] for a `std::time::Duration`. One beyond Go's range (over
/// 2562047h47m16.854775807s, which no flag or field iar reads can be) is
/// written the same way, with more hours.
pub fn format_std(d: Duration) -> String {
    format_magnitude(false, d.as_nanos())
}

/// Go's `Duration.format`, written forwards.
fn format_magnitude(neg: bool, u: u128) -> String {
    let sign = if neg { "-" } else { "" };
    if u == 0 {
        return "0s".into();
    }
    if u < 1_000_000_000 {
        // Under a second: one unit, with a fraction ("1.2ms").
        let (unit, prec) = match u {
            u if u < 1_000 => ("ns", 0),
            u if u < 1_000_000 => ("\u{b5}s", 3),
            _ => ("ms", 6),
        };
        let (whole, frac) = fraction(u, prec);
        return format!("{sign}{whole}{frac}{unit}");
    }
    let (secs, frac) = fraction(u, 9);
    let (mins, hours) = (secs / 60, secs / 3600);
    match (hours, mins) {
        (0, 0) => format!("{sign}{secs}{frac}s"),
        (0, m) => format!("{sign}{m}m{}{frac}s", secs % 60),
        (h, _) => format!("{sign}{h}h{}m{}{frac}s", mins % 60, secs % 60),
    }
}

/// Go's `fmtFrac`: `v` split into its whole part and `prec` decimals,
/// written as ".5" with trailing zeros (and the point) dropped.
fn fraction(v: u128, prec: u32) -> (u128, String) {
    let per = 10u128.pow(prec);
    let (whole, frac) = (v / per, v % per);
    if frac == 0 {
        return (whole, String::new());
    }
    let digits = format!("{frac:0width$}", width = prec as usize);
    (whole, format!(".{}", digits.trim_end_matches('0')))
}

/// A string as Go's `time` package quotes it in an error: in double
/// quotes, `"` and `\` escaped by a backslash, and each byte of a
/// non-ASCII or control character as `\x..`.
struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for c in self.0.chars() {
            if !c.is_ascii() || c < ' ' {
                let mut buf = [0; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    write!(f, "\\x{b:02x}")?;
                }
            } else {
                if c == '"' || c == '\\' {
                    f.write_str("\\")?;
                }
                write!(f, "{c}")?;
            }
        }
        f.write_str("\"")
    }
}

#[cfg(test)]
mod tests;
