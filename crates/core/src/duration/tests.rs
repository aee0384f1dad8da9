use super::*;
use proptest::prelude::*;
use sha2::{Digest, Sha256};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const SEC: i64 = 1_000_000_000;
const HOUR: i64 = 3_600 * SEC;

/// A few of Go's answers, written down (the differential test below asks
/// Go itself about these and thousands more).
#[test]
fn parses_as_go_does() {
    for (s, nanos) in [
        ("0", 0),
        ("+0", 0),
        ("-0", 0),
        ("0s", 0),
        ("-0s", 0),
        ("+5m", 5 * 60 * SEC),
        ("-1.5h", -(HOUR + HOUR / 2)),
        ("1μs", 1_000),
        ("1µs", 1_000),
        ("1us", 1_000),
        (".5s", SEC / 2),
        ("5.s", 5 * SEC),
        ("1h2m3.5s", HOUR + 2 * 60 * SEC + 3 * SEC + SEC / 2),
        ("4h0m0s", 4 * HOUR),
        ("1.0000000000000000000001s", SEC),
        ("0.000000001s", 1),
        ("0.0000000009s", 0),
        ("9223372036854775807ns", i64::MAX),
        ("-9223372036854775808ns", i64::MIN),
        ("2562047h", 2_562_047 * HOUR),
        ("2562047h47m16.854775807s", i64::MAX),
        // Go's sum wraps to 0 there (the only place it can), and goes on.
        ("9223372036854775808ns9223372036854775808ns", 0),
        ("-9223372036854775808ns9223372036854775808ns1s", -SEC),
    ] {
        assert_eq!(parse(s), Ok(nanos), "{s:?}");
    }
}

#[test]
fn refuses_as_go_does() {
    let invalid = |s: &str| ParseError::Invalid { input: s.into() };
    let range = |s: &str| ParseError::OutOfRange { input: s.into() };
    let no_unit = |s: &str| ParseError::MissingUnit { input: s.into() };
    let unknown = |u: &str, s: &str| ParseError::UnknownUnit {
        unit: u.into(),
        input: s.into(),
    };
    for (s, err) in [
        ("", invalid("")),
        ("+", invalid("+")),
        ("-", invalid("-")),
        (".s", invalid(".s")),
        (" 1s", invalid(" 1s")),
        ("1s ", unknown("s ", "1s ")),
        ("1", no_unit("1")),
        ("10", no_unit("10")),
        ("1h30", no_unit("1h30")),
        ("00", no_unit("00")),
        ("1x", unknown("x", "1x")),
        ("1e3s", unknown("e", "1e3s")),
        ("1d", unknown("d", "1d")),
        ("4 hours", unknown(" hours", "4 hours")),
        ("١s", invalid("١s")),
        ("9223372036854775808ns", range("9223372036854775808ns")),
        ("2562048h", range("2562048h")),
        ("9999999999999999999999h", range("9999999999999999999999h")),
        (
            "5000000000000000h5000000000000000h",
            range("5000000000000000h5000000000000000h"),
        ),
    ] {
        assert_eq!(parse(s), Err(err), "{s:?}");
    }
}

#[test]
fn errors_read_as_go_writes_them() {
    assert_eq!(
        parse("1μx").unwrap_err().to_string(),
        r#"time: unknown unit "\xce\xbcx" in duration "1\xce\xbcx""#
    );
    assert_eq!(
        parse("\"1\\").unwrap_err().to_string(),
        r#"time: invalid duration "\"1\\""#
    );
    assert_eq!(
        parse("2").unwrap_err().to_string(),
        r#"time: missing unit in duration "2""#
    );
    assert!(
        parse("2562048h")
            .unwrap_err()
            .to_string()
            .starts_with(r#"time: invalid duration "2562048h": out of range"#)
    );
}

#[test]
fn a_negative_duration_is_refused_for_a_span_of_time() {
    assert_eq!(parse_non_negative("0"), Ok(Duration::ZERO));
    assert_eq!(parse_non_negative("-0s"), Ok(Duration::ZERO));
    assert_eq!(parse_non_negative("+5m"), Ok(Duration::from_secs(300)));
    let err = parse_non_negative("-1.5h").unwrap_err();
    assert_eq!(
        err,
        DurationError::Negative {
            input: "-1.5h".into(),
            nanos: -(HOUR + HOUR / 2)
        }
    );
    assert_eq!(
        err.to_string(),
        r#""-1.5h" is negative (-1h30m0s): it must be zero or more (rule: non-negative-duration)"#
    );
    assert!(matches!(
        parse_non_negative("4 hours"),
        Err(DurationError::Parse(ParseError::UnknownUnit { .. }))
    ));
}

/// Go's own `time.Duration.String` for each of these values.
#[test]
fn formats_as_go_does() {
    for (nanos, go) in [
        (0, "0s"),
        (1, "1ns"),
        (-1, "-1ns"),
        (1_500, "1.5µs"),
        (1_000_000, "1ms"),
        (250_500_000, "250.5ms"),
        (SEC, "1s"),
        (SEC + SEC / 2, "1.5s"),
        (90 * SEC, "1m30s"),
        (HOUR, "1h0m0s"),
        (-2 * HOUR, "-2h0m0s"),
        (720 * HOUR, "720h0m0s"),
        (3661 * SEC + 1, "1h1m1.000000001s"),
        (i64::MAX, "2562047h47m16.854775807s"),
        (i64::MIN, "-2562047h47m16.854775808s"),
    ] {
        assert_eq!(format(nanos), go, "{nanos}");
        assert_eq!(parse(go), Ok(nanos), "{go} reads back");
    }
    assert_eq!(format_std(Duration::new(3661, 1)), "1h1m1.000000001s");
    assert_eq!(
        format_std(Duration::from_nanos(u64::MAX)),
        "5124095h34m33.709551615s"
    );
}

proptest! {
    /// Every value is written so that it reads back, and
    /// `std::time::Duration`s are written as their nanoseconds are.
    #[test]
    fn format_reads_back(nanos in any::<i64>()) {
        prop_assert_eq!(parse(&format(nanos)), Ok(nanos));
        if let Ok(n) = u64::try_from(nanos) {
            prop_assert_eq!(format_std(Duration::from_nanos(n)), format(nanos));
        }
    }

    /// Whatever the input, no panic; a value read is written canonically.
    #[test]
    fn any_text_parses_or_fails_cleanly(s in "[-+]?[0-9.]{0,25}(ns|us|µs|μs|ms|s|m|h|x|)([0-9.]{0,25}(s|m|h))?") {
        if let Ok(n) = parse(&s) {
            prop_assert_eq!(parse(&format(n)), Ok(n));
        }
    }
}

/// The differential test: Go's own `time.ParseDuration`
/// (`tools/go-duration`, built once per Go version and source) and
/// [`parse`] agree on every candidate, a hand-written table of edge cases
/// and a few thousand generated from a fixed seed: the same nanoseconds
/// and, for each, [`format`] writes what Go's `Duration.String` writes;
/// or both refuse, with Go's message (for [`ParseError::OutOfRange`], Go's
/// message begins iar's).
///
/// Without Go the test is skipped, loudly; under `CI=true` it fails.
#[test]
fn agrees_with_go_time_parse_duration() {
    let Some(tool) = go_duration_tool() else {
        return;
    };
    let candidates = candidates();
    let answers = ask_go(&tool, &candidates);
    assert_eq!(answers.len(), candidates.len(), "one answer per candidate");
    let mut disagreements = Vec::new();
    for (s, go) in candidates.iter().zip(&answers) {
        let ours = match parse(s) {
            Ok(n) => format!("{n} {}", format(n)),
            Err(e @ ParseError::OutOfRange { .. }) => {
                let go_message = format!("time: invalid duration {}", Quoted(s));
                assert!(e.to_string().starts_with(&go_message));
                format!("error {go_message}")
            }
            Err(e) => format!("error {e}"),
        };
        if &ours != go {
            disagreements.push(format!("{s:?}: Go {go:?}, iar {ours:?}"));
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} candidates read differently:\n{}",
        disagreements.len(),
        candidates.len(),
        disagreements.join("\n")
    );
}

/// The edge cases by hand, then generated ones.
fn candidates() -> Vec<String> {
    let mut out: Vec<String> = [
        "0",
        "+0",
        "-0",
        "00",
        "0.0",
        "0s",
        "-0s",
        "+5m",
        "-5m",
        "-1.5h",
        "1μs",
        "1µs",
        "1us",
        "1ns",
        "1ms",
        "1s",
        "1m",
        "1h",
        ".5s",
        "5.s",
        ".s",
        "-.s",
        "+.5m",
        "..5s",
        "1..5s",
        "1.5.5s",
        "1h2m3.5s",
        "1h1h",
        "1s1ms1us1ns",
        "9223372036854775807ns",
        "9223372036854775808ns",
        "-9223372036854775808ns",
        "-9223372036854775809ns",
        "18446744073709551616ns",
        "99999999999999999999ns",
        "9223372036854775808ns9223372036854775808ns",
        "9223372036854775808ns9223372036854775808ns1ns",
        "-9223372036854775808ns9223372036854775808ns",
        "9223372036854775807ns9223372036854775808ns",
        "2562047h47m16.854775808s2562047h47m16.854775808s",
        "153722867m280.854775808s153722867m280.854775808s",
        "2562047h",
        "2562048h",
        "-2562047h",
        "-2562048h",
        "2562047h47m16.854775807s",
        "2562047h47m16.854775808s",
        "-2562047h47m16.854775808s",
        "-2562047h47m16.854775809s",
        "2562047.788015215h",
        "9223372036.854775807s",
        "9223372036.854775808s",
        "9223372036854775.807ms",
        "1.0000000000000000000001s",
        "0.000000001s",
        "0.0000000009s",
        "0.9999999999999999999999h",
        "0.3333333333333333333333h",
        "1.00000000000000000000000000000000000000001h",
        "0.1h",
        "0.7h",
        "1.1ns",
        "1.9ns",
        "3.000000001s",
        "",
        "+",
        "-",
        "+-1s",
        "--1s",
        "1",
        "10",
        "1h30",
        "1x",
        "1e3s",
        "1E3s",
        "1d",
        "1w",
        "4 hours",
        "١s",
        "1١s",
        " 1s",
        "1s ",
        "1 s",
        "\t1s",
        "1s\n",
        "1s\r",
        "\r",
        "1\0s",
        "1\u{7f}s",
        "1S",
        "1H",
        "1Ms",
        "1mss",
        "1sm",
        "1µ",
        "1μ",
        "1\u{b5}\u{3bc}s",
        "1\u{fffd}s",
        "\u{fffd}",
        "1\"s",
        "1\\s",
        "0x10s",
        "1_000s",
        "1,5s",
        "∞s",
        "NaNs",
        "infs",
        "4h0m0s",
        "720h0m0s",
        "168h0m0s",
        "30m",
        "250ms",
        "1.5µs",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    // Near every power of ten and the int64 edges, in every unit.
    for (unit, _) in UNITS {
        for n in ["1", "9", "10", "922337203685477580", "9223372036854775807"] {
            out.push(format!("{n}{unit}"));
            out.push(format!("-{n}.5{unit}"));
        }
    }
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    // Any i64, written as nanoseconds: the value and its String().
    for _ in 0..500 {
        out.push(format!("{}ns", rng.next() as i64));
    }
    // Right-shaped: a sign, then numbers with fractions and units.
    for _ in 0..1500 {
        let mut s = String::from(rng.pick(&["", "", "", "-", "+"]));
        let parts = 1 + rng.below(4);
        for _ in 0..parts {
            let n = rng.below(21);
            let int = rng.digits(n);
            let frac = match rng.below(3) {
                0 => String::new(),
                _ => {
                    let n = rng.below(26);
                    format!(".{}", rng.digits(n))
                }
            };
            s += &int;
            s += &frac;
            s += rng.pick(&["ns", "us", "µs", "μs", "ms", "s", "m", "h"]);
        }
        out.push(s);
    }
    // Anything from pieces that make and break durations.
    const PIECES: &[&str] = &[
        "0",
        "1",
        "5",
        "9",
        "00",
        "123",
        "999999999",
        "9223372036854775808",
        ".",
        "..",
        "-",
        "+",
        "ns",
        "us",
        "µs",
        "μs",
        "ms",
        "s",
        "m",
        "h",
        "µ",
        "μ",
        "u",
        "n",
        "x",
        "e",
        "E",
        " ",
        "\t",
        "\u{0}",
        "\u{fffd}",
        "١",
        "\"",
        "\\",
        "é",
    ];
    for _ in 0..1500 {
        let s: String = (0..rng.below(7)).map(|_| rng.pick(PIECES)).collect();
        out.push(s);
    }
    out
}

/// xorshift64*: the same candidates on every run.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }

    fn digits(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| char::from(b'0' + self.below(10) as u8))
            .collect()
    }
}

/// Runs the tool on `candidates` (hex, one per line): one answer a line.
fn ask_go(tool: &Path, candidates: &[String]) -> Vec<String> {
    let mut child = Command::new(tool)
        .arg("-hex")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("run {tool:?}: {e}"));
    let mut input = String::new();
    for s in candidates {
        input += &hex::encode(s);
        input += "\n";
    }
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(output.status.success(), "{tool:?}: {}", output.status);
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// `tools/go-duration` built, once per Go version and source, into
/// `${XDG_CACHE_HOME:-~/.cache}/iar/go-duration-<key>/`. `None` (the test
/// skipped, loudly) without Go; under `CI=true` that fails instead.
fn go_duration_tool() -> Option<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/go-duration");
    let go = |args: &[&str]| {
        Command::new("go")
            .args(args)
            .current_dir(&source)
            .env("GOTOOLCHAIN", "local")
            .env("GOWORK", "off")
            .env("CGO_ENABLED", "0")
            .stdin(Stdio::null())
            .output()
    };
    let version = match go(&["version"]) {
        Ok(out) if out.status.success() => out.stdout,
        outcome => {
            let what = match outcome {
                Ok(out) => format!("`go version` exited with {}", out.status),
                Err(e) => format!("`go`: {e}"),
            };
            let why = format!("{what}, so Go's time.ParseDuration cannot be asked");
            assert!(
                !is_ci(),
                "CI=true, so this fails instead of skipping: {why}"
            );
            eprintln!("SKIPPED agrees_with_go_time_parse_duration: {why}");
            return None;
        }
    };
    let mut key = Sha256::new();
    key.update(&version);
    for file in ["go.mod", "main.go"] {
        let text = std::fs::read(source.join(file)).unwrap();
        key.update((text.len() as u64).to_le_bytes());
        key.update(&text);
    }
    let key = hex::encode(&key.finalize()[..6]);
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .expect("HOME or XDG_CACHE_HOME is set");
    let dir = cache.join(format!("iar/go-duration-{key}"));
    let tool = dir.join("go-duration");
    if tool.is_file() {
        return Some(tool);
    }
    std::fs::create_dir_all(&dir).unwrap();
    // Built aside, then renamed: a concurrent run never sees half a binary.
    let tmp = dir.join(format!("go-duration.{}.tmp", std::process::id()));
    let tmp_arg = tmp.to_str().unwrap();
    let out = go(&["build", "-trimpath", "-o", tmp_arg, "."]).unwrap();
    assert!(
        out.status.success(),
        "go build in {source:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &tool).unwrap();
    Some(tool)
}

/// `CI=true` (or `1`), as GitHub Actions, GitLab and most CI systems set.
fn is_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}
