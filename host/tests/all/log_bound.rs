//! A plugin that logs its per-call maximum on every item: `iar backup`'s
//! memory and its terminal output are bounded by the backup log's bound,
//! not by what the plugin writes. Measured on the real binary: its peak
//! RSS from the kernel (its own `VmHWM`), its stderr by length.

use crate::support::iar_command;
use iar_tests::artifacts;
use std::process::Stdio;

/// Runs `iar backup` of `items` with `config` and returns its peak RSS
/// (MiB) and its stderr. The peak is the process's own `VmHWM`, read while
/// it runs: `wait4`'s `ru_maxrss` would also count the test binary's pages
/// the child held between fork and exec.
fn peak_of(
    items: &std::path::Path,
    plugins: &std::path::Path,
    store: &std::path::Path,
    config: &str,
    scratch: &std::path::Path,
) -> (u64, Vec<u8>) {
    let stderr_file = scratch.join("stderr");
    let mut child = iar_command(&[
        "backup",
        "flooded",
        "--items",
        items.to_str().unwrap(),
        "--plugins",
        plugins.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
        "--config",
        config,
    ])
    // A compile cache of this test's own: the shared one is written and
    // evicted by tests running beside it, and a compile (about 250 MB for
    // this component) is not what is measured.
    .env("IAR_CACHE_DIR", scratch.join("cache"))
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&stderr_file).unwrap())
    .spawn()
    .unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        // The high-water mark of the running program's own memory.
        let hwm = std::fs::read_to_string(&status_file)
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0);
        peak_kib = peak_kib.max(hwm);
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let stderr = std::fs::read(&stderr_file).unwrap();
    assert!(
        exit.success(),
        "{config}: {exit}: {}",
        String::from_utf8_lossy(&stderr[stderr.len().saturating_sub(4000)..])
    );
    assert!(peak_kib > 0, "{config}: no VmHWM was read");
    (peak_kib / 1024, stderr)
}

/// 300 ConfigMaps, each handed to a plugin that logs 1,000 lines of 4 KiB
/// (1.2 GB of log in all). Before, every line of every call was held
/// until the pass ended and all of it was printed: about 1.5 GB peak and
/// 1.25 GB on the terminal.
#[test]
fn a_log_flood_keeps_memory_and_terminal_output_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let items = dir.path().join("items");
    let plugins = dir.path().join("plugins");
    let store = dir.path().join("store");
    std::fs::create_dir_all(&items).unwrap();
    std::fs::create_dir_all(&plugins).unwrap();
    let mut list = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for i in 0..300 {
        list.push_str(&format!(
            "- apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: cm-{i}, namespace: flood}}\n  data: {{k: v}}\n"
        ));
    }
    std::fs::write(items.join("configmaps.yaml"), list).unwrap();
    std::fs::copy(artifacts::HOSTILE, plugins.join("iar_guest_hostile.wasm")).unwrap();
    // The same backup with a plugin that logs nothing, first: it compiles
    // the component into the shared cache (compiling is not what is
    // measured) and gives the baseline the flood is compared with.
    let (quiet_mib, _) = peak_of(
        &items,
        &plugins,
        &store.join("quiet"),
        "behavior=ok",
        dir.path(),
    );
    let (peak_mib, stderr) = peak_of(
        &items,
        &plugins,
        &store.join("flood"),
        "behavior=log-flood",
        dir.path(),
    );
    eprintln!(
        "log flood: peak RSS {peak_mib} MiB (quiet plugin: {quiet_mib} MiB), stderr {} KiB",
        stderr.len() / 1024
    );
    assert!(peak_mib <= 256, "peak RSS {peak_mib} MiB");
    // What the flood adds is bounded by the log bound, not by 1.2 GB.
    assert!(
        peak_mib <= quiet_mib + 64,
        "the flood added {} MiB",
        peak_mib.saturating_sub(quiet_mib)
    );
    // The head the log keeps in place (1,000 lines of 4 KiB) and a notice.
    assert!(stderr.len() < 8 << 20, "{} bytes on stderr", stderr.len());
    let text = String::from_utf8_lossy(&stderr);
    assert_eq!(text.matches("rule: log-bound").count(), 1, "one notice");
}
