//! Go durations as Velero writes them in a Backup spec
//! (`iar::backup::spec::parse_go_duration`, "4h0m0s", "90m", "1.5s").
//!
//! Properties: it never panics (overflow must be an error), and a duration
//! that parses is unchanged by a trailing "0s".

#![no_main]

use iar::backup::spec::parse_go_duration;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = parse_go_duration(text) {
        let longer = format!("{}0s", text.trim());
        assert_eq!(
            parse_go_duration(&longer),
            Ok(d),
            "{text:?} and {longer:?} differ"
        );
    }
});
