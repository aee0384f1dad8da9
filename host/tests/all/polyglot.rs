//! The polyglot example plugins (`polyglot/labels-js`, JavaScript, and
//! `polyglot/labels-py`, Python) behave exactly as the Rust
//! `plugins/labels`: same applies-to, same output, same errors, checked
//! through the real `iar` binary and the library.
//!
//! `polyglot/build.sh` builds them into `target/polyglot`, installing its
//! pinned tools (npm, a Python venv) into the per-machine cache on first use.
//! A machine that cannot install them fails these tests, loudly; set
//! `IAR_SKIP_POLYGLOT=1` to skip them on purpose, except under `CI=true`,
//! where it is not honoured: there the tests run or fail, so a green CI
//! run means they ran.
//!
//! To check another behaviour, add a [`Case`] to [`CASES`]: every case runs
//! every language and compares with Rust byte for byte.
//!
//! The figures in `polyglot/README.md` come from the ignored test
//! [`measure`]:
//! `cargo test -p iar --test all -- --ignored --nocapture polyglot::measure`.

use crate::support::{
    backup, iar, load, never_seen, plugin_settings, pod, pvc, repo, runtime, runtime_with_cache,
    stdout_json,
};
use iar::{NoCluster, Phase, Plugin, Runtime};
use iar_tests::artifacts;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// `target/` (the parent of `CARGO_TARGET_TMPDIR`, `target/tmp`).
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is target/tmp")
        .to_path_buf()
}

/// One labels plugin: its language and its component.
#[derive(Clone, Debug)]
struct Labels {
    lang: &'static str,
    path: PathBuf,
}

/// Whether the polyglot tests skip: when `IAR_SKIP_POLYGLOT` is `1` (the
/// value of `skip`), but never under CI (`ci`, [`iar_apiserver::in_ci`]),
/// where they run or fail.
fn skips(skip: Option<&str>, ci: bool) -> bool {
    skip == Some("1") && !ci
}

/// Writes past the test harness's capture (`eprintln!` is shown only for
/// failing tests), so neither a skip nor an ignored skip is silent.
fn loud(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// The Rust labels plugin, then the JavaScript and Python ones; `None`
/// when `IAR_SKIP_POLYGLOT=1` outside CI ([`skips`]). Built once per test
/// binary (build.sh holds a lock, so parallel test binaries do not race
/// either).
fn all_labels() -> Option<&'static [Labels]> {
    static BUILT: OnceLock<Option<Vec<Labels>>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let skip = std::env::var("IAR_SKIP_POLYGLOT").ok();
            let ci = iar_apiserver::in_ci();
            if skips(skip.as_deref(), ci) {
                return None;
            }
            if skip.is_some() && ci {
                loud(
                    "polyglot: IAR_SKIP_POLYGLOT is not honoured under CI=true; \
                     the polyglot tests run (and fail if their tools cannot be installed)",
                );
            }
            let how_to_skip = if ci {
                "Under CI=true they cannot be skipped."
            } else {
                "Set IAR_SKIP_POLYGLOT=1 to skip these tests."
            };
            let out_dir = target_dir().join("polyglot");
            let script = repo().join("polyglot/build.sh");
            // Its progress (and any install error) goes straight to the
            // terminal; stdout is the components' paths.
            let out = Command::new("bash")
                .arg(&script)
                .arg(&out_dir)
                .stderr(Stdio::inherit())
                .output()
                .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
            assert!(
                out.status.success(),
                "polyglot/build.sh {} failed ({}): its messages are above. It needs \
                 Node.js with npm, Python 3 with venv, and the npm registry and PyPI \
                 for the first install. {how_to_skip}",
                out_dir.display(),
                out.status
            );
            let built = String::from_utf8(out.stdout).expect("paths are UTF-8");
            let find = |name: &str| {
                let path = built
                    .lines()
                    .map(PathBuf::from)
                    .find(|p| p.file_name().is_some_and(|f| f == name))
                    .unwrap_or_else(|| panic!("build.sh did not print {name}: {built}"));
                assert!(path.is_file(), "{} does not exist", path.display());
                path
            };
            let labels = vec![
                Labels {
                    lang: "rust",
                    path: artifacts::LABELS.into(),
                },
                Labels {
                    lang: "javascript",
                    path: find("labels-js.wasm"),
                },
                Labels {
                    lang: "python",
                    path: find("labels-py.wasm"),
                },
            ];
            // Compiling a language engine takes half a minute: fill the
            // compile cache (shared by the binary and `support::runtime`)
            // once, here, instead of in every test and `iar run` at once.
            for l in &labels {
                let out = iar(&["inspect", l.path.to_str().unwrap()]);
                assert!(
                    out.status.success(),
                    "iar inspect {}: {}",
                    l.path.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            Some(labels)
        })
        .as_deref()
}

/// Skips (with a note past the harness's capture) when
/// `IAR_SKIP_POLYGLOT=1` outside CI.
macro_rules! labels_or_skip {
    () => {
        match all_labels() {
            Some(labels) => labels,
            None => {
                loud(&format!(
                    "!!! SKIPPED {}: IAR_SKIP_POLYGLOT=1 !!!",
                    std::thread::current().name().unwrap_or("a polyglot test")
                ));
                return;
            }
        }
    };
}

/// `IAR_SKIP_POLYGLOT=1` skips only outside CI; nothing else skips.
#[test]
fn the_skip_is_not_honoured_under_ci() {
    assert!(skips(Some("1"), false));
    assert!(!skips(Some("1"), true), "CI=true: run or fail");
    for other in [None, Some("0"), Some(""), Some("yes")] {
        assert!(!skips(other, false), "{other:?}");
        assert!(!skips(other, true), "{other:?}");
    }
}

/// Each plugin copied to `target/polyglot/as-labels/<lang>/labels.wasm`:
/// iar names a plugin after its file, and the name is in its output, so
/// the same name makes the outputs comparable byte for byte.
fn as_labels(labels: &[Labels]) -> Vec<Labels> {
    labels
        .iter()
        .map(|l| {
            let dir = target_dir().join("polyglot/as-labels").join(l.lang);
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("labels.wasm");
            let same = std::fs::read(&path).ok() == Some(std::fs::read(&l.path).unwrap());
            if !same {
                // Via a temporary file: tests in parallel may copy at once.
                let tmp = dir.join(format!("labels.wasm.{}", std::process::id()));
                std::fs::copy(&l.path, &tmp).unwrap();
                std::fs::rename(&tmp, &path).unwrap();
            }
            Labels { lang: l.lang, path }
        })
        .collect()
}

/// One `iar run` compared across languages: an item file (under
/// `target/polyglot/items`, written by [`items`]) and `--config` values.
struct Case {
    name: &'static str,
    item: &'static str,
    config: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "labels and annotations",
        item: "pod.json",
        config: &[
            "labels=team=payments, tier=gold",
            "annotations=backup.example.com/owner=sre",
        ],
    },
    Case {
        name: "no config: unchanged",
        item: "pod.json",
        config: &[],
    },
    Case {
        name: "empty lists: unchanged",
        item: "pod.json",
        config: &["labels= , ,", "annotations="],
    },
    Case {
        name: "an existing label is overwritten, values kept verbatim",
        item: "pod.json",
        config: &["labels=app=api,empty=, note = a=b ,owner=Zoë"],
    },
    Case {
        name: "no metadata.labels or annotations yet",
        item: "bare.json",
        config: &["labels=team=payments", "annotations=a=1"],
    },
    Case {
        name: "labels that are not an object are replaced",
        item: "odd-labels.json",
        config: &["labels=team=payments"],
    },
    Case {
        name: "resources narrows: a pod is not applied to",
        item: "pod.json",
        config: &["resources=pvc, deployments.apps", "labels=team=payments"],
    },
    Case {
        name: "resources narrows: a claim is",
        item: "pvc.json",
        config: &["resources=pvc, deployments.apps", "labels=team=payments"],
    },
    Case {
        name: "malformed labels",
        item: "pod.json",
        config: &["labels=team=payments,oops"],
    },
    Case {
        name: "malformed annotations (empty key)",
        item: "pod.json",
        config: &["labels=team=payments", "annotations= =sre"],
    },
];

/// The restore half, through `iar run --restore` with the restore in
/// `restore.yaml` (backup `nightly`, namespace `shop` mapped to
/// `shop-copy`), compared the same way.
const RESTORE_CASES: &[Case] = &[
    Case {
        name: "restore: records the backup, in the mapped namespace",
        item: "pod.json",
        config: &[],
    },
    Case {
        name: "restore: the annotation renamed",
        item: "bare.json",
        config: &["restored-from=example.com/from"],
    },
    Case {
        name: "restore: annotations that are not an object are replaced",
        item: "odd-labels.json",
        config: &[],
    },
    Case {
        name: "restore: turned off",
        item: "pod.json",
        config: &["restored-from=-"],
    },
    Case {
        name: "restore: resources narrows",
        item: "pod.json",
        config: &["resources=pvc"],
    },
];

/// Writes the items the cases use; returns their directory.
fn items() -> PathBuf {
    let dir = target_dir().join("polyglot/items");
    std::fs::create_dir_all(&dir).unwrap();
    let bare = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "shop"},
        "data": {"ratio": "0.5", "count": "3"}
    });
    let odd = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": "not-a-map",
                     "annotations": {"kept": "yes"}},
        "spec": {"replicas": 3, "paused": false, "minReadySeconds": 0}
    });
    let pvc = serde_json::json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-web-0", "namespace": "shop"},
        "spec": {"volumeName": "pv-data-web-0", "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound"}
    });
    for (name, value) in [
        ("pod.json", iar_tests::fixtures::pod("shop", "web-0")),
        ("bare.json", bare),
        ("odd-labels.json", odd),
        ("pvc.json", pvc),
    ] {
        let text = serde_json::to_string_pretty(&value).unwrap();
        write_if_changed(&dir.join(name), &text);
    }
    write_if_changed(
        &dir.join("restore.yaml"),
        "apiVersion: velero.io/v1\nkind: Restore\nmetadata: {name: again, namespace: velero}\nspec:\n  backupName: nightly\n  namespaceMapping: {shop: shop-copy}\n",
    );
    dir
}

/// Concurrent test binaries may write the same file: a rename, so no
/// reader sees half of it.
fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }
}

fn run_case(plugin: &Path, items: &Path, case: &Case) -> Output {
    run_with(plugin, items, case, &[])
}

fn run_restore_case(plugin: &Path, items: &Path, case: &Case) -> Output {
    let restore = items.join("restore.yaml");
    run_with(
        plugin,
        items,
        case,
        &["--restore", "--restore-object", restore.to_str().unwrap()],
    )
}

fn run_with(plugin: &Path, items: &Path, case: &Case, extra: &[&str]) -> Output {
    let item = items.join(case.item);
    let mut args = vec![
        "run",
        "--plugin",
        plugin.to_str().unwrap(),
        "--item",
        item.to_str().unwrap(),
        // The ports label whatever they handle (the item-change rules
        // have tests of their own, in cli_mutate).
        "--allow-mutate",
        "*",
    ];
    args.extend(extra);
    for c in case.config {
        args.extend(["--config", c]);
    }
    iar(&args)
}

/// `iar run` gives byte-identical stdout and the same exit status for the
/// Rust, JavaScript and Python plugins, for every case.
#[test]
fn run_output_is_byte_identical_to_rust() {
    let labels = as_labels(labels_or_skip!());
    let items = items();
    let mut failures = Vec::new();
    let backup = CASES
        .iter()
        .map(|c| (c, run_case as fn(&Path, &Path, &Case) -> Output));
    let restore = RESTORE_CASES
        .iter()
        .map(|c| (c, run_restore_case as fn(&Path, &Path, &Case) -> Output));
    for (case, run) in backup.chain(restore) {
        let rust = run(&labels[0].path, &items, case);
        let rust_json = stdout_json(&rust);
        assert!(
            rust_json["results"].is_array(),
            "{}: rust: {rust_json}",
            case.name
        );
        for other in &labels[1..] {
            let got = run(&other.path, &items, case);
            if got.stdout != rust.stdout || got.status.code() != rust.status.code() {
                failures.push(format!(
                    "case {:?}, {}: exit {:?} (rust {:?})\n--- rust stdout\n{}\n--- {} stdout\n{}\n--- {} stderr\n{}",
                    case.name,
                    other.lang,
                    got.status.code(),
                    rust.status.code(),
                    String::from_utf8_lossy(&rust.stdout),
                    other.lang,
                    String::from_utf8_lossy(&got.stdout),
                    other.lang,
                    String::from_utf8_lossy(&got.stderr),
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The restore cases check what they say: the annotation in the mapped
/// namespace, renamed, replacing a non-object, off, and not applied.
#[test]
fn restore_cases_mean_what_they_say() {
    let labels = as_labels(labels_or_skip!());
    let items = items();
    for l in &labels {
        let run = |i: usize| stdout_json(&run_restore_case(&l.path, &items, &RESTORE_CASES[i]));
        let first = run(0);
        assert_eq!(
            first["finalItem"]["metadata"]["namespace"], "shop-copy",
            "{}",
            l.lang
        );
        assert_eq!(
            first["finalItem"]["metadata"]["annotations"]["iar.dev/restored-from"], "nightly",
            "{}: {first}",
            l.lang
        );
        let renamed = run(1);
        assert_eq!(
            renamed["finalItem"]["metadata"]["annotations"]["example.com/from"], "nightly",
            "{}",
            l.lang
        );
        let odd = run(2);
        assert_eq!(
            odd["finalItem"]["metadata"]["annotations"],
            serde_json::json!({"kept": "yes", "iar.dev/restored-from": "nightly"}),
            "{}",
            l.lang
        );
        assert!(
            run(3)["results"][0]["output"]["item"].is_null(),
            "{}",
            l.lang
        );
        assert_eq!(run(4)["results"][0]["applies"], false, "{}", l.lang);
    }
}

/// The cases check what they say, so that "identical" is not "identically
/// broken": labels are added, an unchanged item stays unchanged, errors
/// name the bad entry, and resources narrow.
#[test]
fn run_cases_mean_what_they_say() {
    let labels = as_labels(labels_or_skip!());
    let items = items();
    for l in &labels {
        let run = |i: usize| {
            let out = run_case(&l.path, &items, &CASES[i]);
            (out.status.code(), stdout_json(&out))
        };
        let ctx = |i: usize| format!("{}: {}", l.lang, CASES[i].name);

        let (code, out) = run(0);
        assert_eq!(code, Some(0), "{}", ctx(0));
        let item = &out["results"][0]["output"]["item"];
        assert_eq!(item["metadata"]["labels"]["team"], "payments", "{}", ctx(0));
        assert_eq!(item["metadata"]["labels"]["tier"], "gold", "{}", ctx(0));
        assert_eq!(item["metadata"]["labels"]["app"], "web", "{}", ctx(0));
        assert_eq!(
            item["metadata"]["annotations"]["backup.example.com/owner"],
            "sre",
            "{}",
            ctx(0)
        );
        assert_eq!(out["finalItem"], *item, "{}", ctx(0));

        let input: Value =
            serde_json::from_str(&std::fs::read_to_string(items.join("pod.json")).unwrap())
                .unwrap();
        for i in [1, 2] {
            let (code, out) = run(i);
            assert_eq!(code, Some(0), "{}", ctx(i));
            assert_eq!(
                out["results"][0]["output"]["item"],
                Value::Null,
                "{}",
                ctx(i)
            );
            assert_eq!(out["finalItem"], input, "{}: unchanged", ctx(i));
        }

        let (_, out) = run(3);
        let got = &out["finalItem"]["metadata"]["labels"];
        assert_eq!(got["app"], "api", "{}", ctx(3));
        assert_eq!(got["empty"], "", "{}", ctx(3));
        assert_eq!(got["note"], "a=b", "{}", ctx(3));
        assert_eq!(got["owner"], "Zoë", "{}", ctx(3));

        let (_, out) = run(5);
        let meta = &out["finalItem"]["metadata"];
        assert_eq!(meta["labels"], serde_json::json!({"team": "payments"}));
        assert_eq!(meta["annotations"]["kept"], "yes", "{}", ctx(5));

        let (_, out) = run(6);
        assert_eq!(out["results"][0]["applies"], false, "{}", ctx(6));
        let (_, out) = run(7);
        assert_eq!(out["results"][0]["applies"], true, "{}", ctx(7));

        for (i, bad) in [
            (8, r#"config labels: "oops" is not key=value"#),
            (9, r#"config annotations: " =sre" is not key=value"#),
        ] {
            let (code, out) = run(i);
            assert_eq!(code, Some(1), "{}", ctx(i));
            let message = out["results"][0]["error"]["message"].as_str().unwrap();
            assert!(message.ends_with(bad), "{}: {message}", ctx(i));
        }
    }
}

/// `iar inspect` reads each plugin: contract 1.3.0, the item-action and
/// restore-item-action interfaces, the Rust plugin's applies-to, and
/// imports that iar's linker provides (the JavaScript one imports only the
/// host).
#[test]
fn inspect_matches_rust() {
    let labels = labels_or_skip!();
    let shown: Vec<Value> = labels
        .iter()
        .map(|l| {
            let out = iar(&["inspect", l.path.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "iar inspect {}: {}",
                l.lang,
                String::from_utf8_lossy(&out.stderr)
            );
            stdout_json(&out)
        })
        .collect();
    for (l, s) in labels.iter().zip(&shown) {
        assert_eq!(s["contract"], "iar:plugin@1.3.0", "{}", l.lang);
        assert_eq!(
            s["interfaces"],
            serde_json::json!(["item-action", "restore-item-action"]),
            "{}",
            l.lang
        );
        assert_eq!(
            s["restoreAppliesTo"], shown[0]["restoreAppliesTo"],
            "{}",
            l.lang
        );
        assert_eq!(s["appliesTo"], shown[0]["appliesTo"], "{}", l.lang);
        assert_eq!(s["blockAppliesTo"], Value::Null, "{}", l.lang);
        let imports: Vec<&str> = s["imports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_str().unwrap())
            .collect();
        for import in &imports {
            assert!(
                import.starts_with("iar:plugin/") || import.starts_with("wasi:"),
                "{}: unexpected import {import}",
                l.lang
            );
        }
        if l.lang == "javascript" {
            assert_eq!(
                imports,
                ["iar:plugin/types@1.3.0", "iar:plugin/host@1.3.0"],
                "build.sh disables every optional WASI feature of componentize-js"
            );
        }
    }
}

/// Through the library: applies-to with `resources` equals Rust's, and the
/// error of a malformed config is Rust's word for word (bar the name).
#[test]
fn library_applies_to_and_errors_match_rust() {
    let labels = labels_or_skip!();
    let runtime = runtime();
    for config in [
        &[][..],
        &[("resources", " pvc,deployments.apps ,, pods")][..],
    ] {
        let rust = load(&runtime, artifacts::LABELS, config);
        for l in &labels[1..] {
            let other = load(&runtime, l.path.to_str().unwrap(), config);
            assert_eq!(other.applies_to(), rust.applies_to(), "{}", l.lang);
            assert_eq!(other.applies(&pod("web-0")), rust.applies(&pod("web-0")));
            assert_eq!(
                other.applies(&pvc("data", true)),
                rust.applies(&pvc("data", true))
            );
        }
    }
    let error = |path: &str| {
        let plugin = load(&runtime, path, &[("annotations", "owner=sre,=x")]);
        let err = plugin
            .instance(Arc::new(NoCluster))
            .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
            .unwrap_err()
            .to_string();
        err.replacen(plugin.name(), "NAME", 1)
    };
    let rust = error(artifacts::LABELS);
    assert!(rust.contains(r#""=x" is not key=value"#), "{rust}");
    for l in &labels[1..] {
        assert_eq!(error(l.path.to_str().unwrap()), rust, "{}", l.lang);
    }
}

/// Figures for polyglot/README.md: size, first compile, cached load,
/// instantiation and execute latency of each labels plugin, in one run.
/// No assertions on time: it only prints.
#[test]
#[ignore = "measurement; run with --ignored --nocapture"]
fn measure() {
    let labels = labels_or_skip!();
    const CALLS: usize = 1_000;
    let config = [("labels", "team=payments, tier=gold")];
    let item = pod("web-0");
    let cache = tempfile::tempdir().unwrap();
    let runtime = || runtime_with_cache(cache.path());
    let load_timed = |runtime: &Runtime, path: &Path| {
        let started = Instant::now();
        let plugin = Plugin::from_file(runtime, path, plugin_settings(&config))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        (plugin, started.elapsed())
    };
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    let us = |d: Duration| format!("{:.1} µs", d.as_secs_f64() * 1e6);

    println!(
        "| plugin | size (bytes) | > 1 MiB | first load (compile) | cached load | first call (instantiate + execute) | execute median | execute p99 |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    for l in labels {
        let size = std::fs::metadata(&l.path).unwrap().len();
        // A fresh runtime per load, so the second load reads the on-disk
        // cache as a new process would.
        let (_, first) = load_timed(&runtime(), &l.path);
        let (plugin, cached) = load_timed(&runtime(), &l.path);
        let mut instance = plugin.instance(Arc::new(NoCluster));
        let started = Instant::now();
        let out = instance
            .execute(&item, &backup(Phase::Backup), &never_seen)
            .unwrap();
        let first_call = started.elapsed();
        assert!(out.item.is_some(), "{}: the labels were added", l.lang);
        let mut times: Vec<Duration> = (0..CALLS)
            .map(|_| {
                let started = Instant::now();
                instance
                    .execute(&item, &backup(Phase::Backup), &never_seen)
                    .unwrap();
                started.elapsed()
            })
            .collect();
        assert_eq!(instance.instantiations(), 1, "one reused instance");
        times.sort();
        println!(
            "| {} | {size} | {} | {} | {} | {} | {} | {} |",
            l.lang,
            if size > 1 << 20 { "yes" } else { "no" },
            ms(first),
            ms(cached),
            ms(first_call),
            us(times[CALLS / 2]),
            us(times[CALLS * 99 / 100]),
        );
    }
}

/// The Rust labels plugin's own test files pass against each port too:
/// `iar test FILE --plugin PORT` (the files' cases, their fixtures and
/// expected errors, unchanged), the restore half's included.
#[test]
fn the_labels_test_file_passes_for_every_language() {
    let labels = labels_or_skip!();
    for (l, name) in labels
        .iter()
        .flat_map(|l| ["labels", "labels-restore"].map(|n| (l, n)))
    {
        let file = repo().join(format!("plugins/labels/tests/{name}.iar-test.yaml"));
        let out = iar(&[
            "test",
            file.to_str().unwrap(),
            "--plugin",
            l.path.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "iar test (labels in {}): {}{}",
            l.lang,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
