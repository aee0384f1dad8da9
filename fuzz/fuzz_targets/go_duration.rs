//! Go durations (`iar::duration`: Go's `time.ParseDuration` and
//! `time.Duration.String`), as Velero writes them in a Backup spec and as
//! every duration flag of the CLI reads them ("4h0m0s", "90m", "1.5s").
//! Agreement with Go itself is `iar_core`'s differential test
//! (`duration::tests::agrees_with_go_time_parse_duration`); this checks
//! properties that hold whatever the input:
//!
//! - nothing panics (an overflow is an error);
//! - a value parsed, written in Go's canonical form (`format`), parses
//!   again to the same value, and its canonical form is a fixed point;
//! - a trailing "0s" changes nothing;
//! - `parse_non_negative` is `parse` with negative values refused;
//! - the first eight bytes, as any i64, are written so that they read back.

#![no_main]

use iar::duration::{DurationError, format, parse, parse_non_negative};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(first) = data.first_chunk::<8>() {
        let nanos = i64::from_le_bytes(*first);
        assert_eq!(parse(&format(nanos)), Ok(nanos), "{nanos}");
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = parse(text);
    match (&parsed, parse_non_negative(text)) {
        (Ok(n), Ok(d)) => assert_eq!(i128::from(*n), d.as_nanos() as i128, "{text:?}"),
        (Ok(n), Err(DurationError::Negative { nanos, .. })) => {
            assert!(*n < 0 && *n == nanos, "{text:?}")
        }
        (Err(e), Err(DurationError::Parse(f))) => assert_eq!(e, &f, "{text:?}"),
        (p, n) => panic!("{text:?}: parse {p:?}, parse_non_negative {n:?}"),
    }
    let Ok(n) = parsed else {
        return;
    };
    let canonical = format(n);
    assert_eq!(parse(&canonical), Ok(n), "{text:?} written {canonical:?}");
    assert_eq!(format(parse(&canonical).unwrap()), canonical);
    let longer = format!("{text}0s");
    assert_eq!(parse(&longer), Ok(n), "{text:?} and {longer:?} differ");
});
