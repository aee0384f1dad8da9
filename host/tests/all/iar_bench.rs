//! `iar bench` prints a warm and a fresh row for a real plugin (no timing
//! assertions: the machine's speed is not the test's business).

use crate::support::iar;
use iar_tests::artifacts;

#[test]
fn bench_prints_warm_and_fresh_rows() {
    let out = iar(&[
        "bench",
        artifacts::LABELS,
        "--item",
        "examples/items/pod.yaml",
        "--config",
        "labels=team=a",
        "--iterations",
        "20",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        "plugin iar_plugin_labels, execute of pods shop/web-0, 20 calls per row"
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["instance", "median", "p99", "calls/s"]
    );
    for (line, label) in lines[2..4].iter().zip(["warm", "fresh"]) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[0], label, "{stdout}");
        assert!(cols[5].parse::<f64>().unwrap() > 0.0, "{stdout}");
    }
    // The workspace links its plugins with a 2 MiB initial memory, so no
    // note about it follows.
    assert!(lines[4].starts_with("instances: "), "{stdout}");
    assert_eq!(lines.len(), 5, "{stdout}");
}

#[test]
fn bench_refuses_an_item_the_plugin_does_not_select() {
    let out = iar(&[
        "bench",
        artifacts::PVC_SNAPSHOT,
        "--item",
        "examples/items/pod.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not apply to pods shop/web-0"));
}
