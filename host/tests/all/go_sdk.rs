//! The Go SDK (`go-sdk/`): its ports of `labels`, `pvc-snapshot` and
//! `config-block` (an item block action) pass
//! the Rust plugins' own `iar test` files unchanged and `iar conformance`,
//! the Go labels plugin's `iar run` output is byte-identical to the Rust
//! one's, and hostile Go guests (a goroutine that never yields, runtime
//! panics, a heap growing to the cap) are stopped and reported by rule;
//! the Go labels plugin loads from a ConfigMap by reference on a real API
//! server.
//!
//! `go-sdk/build.sh` builds them with the machine's Go (>= 1.24; the SDK
//! has no module dependencies, so nothing is fetched) into
//! `target/go-sdk`, then `iar componentize`s them with this test's `iar`.

use crate::support::{backup, iar, load, never_seen, plugin_settings, pod, repo, runtime};
use iar::{NoCluster, Phase, Plugin};
use iar_tests::artifacts;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is target/tmp")
        .to_path_buf()
}

/// The components build.sh printed, built once per test binary.
fn built() -> &'static [PathBuf] {
    static BUILT: OnceLock<Vec<PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| {
        crate::support::run_build_script(
            "go-sdk/build.sh",
            &target_dir().join("go-sdk"),
            "Go >= 1.24 on PATH",
        )
    })
}

/// The component named `name` (`labels-go`, `go-spin`, ...).
pub(crate) fn go(name: &str) -> &'static str {
    let file = format!("{name}.wasm");
    built()
        .iter()
        .find(|p| p.file_name().is_some_and(|f| *f == *file))
        .unwrap_or_else(|| panic!("build.sh built no {file}: {:?}", built()))
        .to_str()
        .unwrap()
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn last_stderr_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_rust_plugins_test_files_pass_for_the_go_ports() {
    for (plugin, file) in [
        ("labels", "labels"),
        ("labels", "labels-restore"),
        ("pvc-snapshot", "pvc-snapshot"),
        ("pvc-snapshot", "pvc-snapshot-restore"),
        ("config-block", "config-block"),
    ] {
        let path = repo().join(format!("plugins/{plugin}/tests/{file}.iar-test.yaml"));
        let out = iar(&[
            "test",
            path.to_str().unwrap(),
            "--plugin",
            go(&format!("{plugin}-go")),
        ]);
        assert_ok(&out, &format!("iar test {file} (Go)"));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(" 0 failed"),
            "{file}"
        );
    }
}

#[test]
fn the_go_ports_pass_conformance() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.yaml");
    std::fs::write(&settings, crate::conformance::EVERY_CHANGE).unwrap();
    for name in ["labels-go", "pvc-snapshot-go", "config-block-go"] {
        let settings = settings.to_str().unwrap();
        let out = iar(&["conformance", go(name), "--settings", settings]);
        assert_ok(&out, &format!("iar conformance {name}"));
    }
}

/// What `iar inspect` shows: contract 1.4.0, the two interfaces the port
/// registers (the world derived from the module), and imports iar's
/// linker provides; pvc-snapshot imports the write and list interfaces it
/// calls, labels does not.
#[test]
fn inspect_shows_the_derived_world() {
    let inspect = |name: &str| {
        let out = iar(&["inspect", go(name)]);
        assert_ok(&out, name);
        crate::support::stdout_json(&out)
    };
    let rust = crate::support::stdout_json(&iar(&["inspect", artifacts::LABELS]));
    let labels = inspect("labels-go");
    assert_eq!(labels["contract"], "iar:plugin@1.4.0");
    assert_eq!(
        labels["interfaces"],
        serde_json::json!(["item-action", "restore-item-action"])
    );
    assert_eq!(labels["appliesTo"], rust["appliesTo"]);
    let imports = |v: &Value| -> Vec<String> {
        v["imports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_str().unwrap().to_string())
            .collect()
    };
    for i in imports(&labels) {
        assert!(
            i.starts_with("iar:plugin/") || i.starts_with("wasi:"),
            "{i}"
        );
        assert!(!i.starts_with("iar:plugin/cluster-"), "{i}");
    }
    assert_eq!(
        inspect("config-block-go")["interfaces"],
        serde_json::json!(["item-block-action"])
    );
    let pvc = imports(&inspect("pvc-snapshot-go"));
    for want in [
        "iar:plugin/cluster-write@1.4.0",
        "iar:plugin/cluster-list@1.4.0",
    ] {
        assert!(pvc.iter().any(|i| i == want), "{want}: {pvc:?}");
    }
}

/// `iar run` prints the same bytes and exits the same for the Go and the
/// Rust labels plugin, backup and restore, changed, unchanged and failing.
/// Each is copied to a file named `labels.wasm`: the plugin's name is in
/// the output.
#[test]
fn run_output_is_byte_identical_to_rust() {
    let dir = target_dir().join("go-sdk/as-labels");
    let copy = |lang: &str, from: &str| {
        let to = dir.join(lang).join("labels.wasm");
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        let tmp = to.with_extension(format!("{}", std::process::id()));
        std::fs::copy(from, &tmp).unwrap();
        std::fs::rename(&tmp, &to).unwrap();
        to
    };
    let rust = copy("rust", artifacts::LABELS);
    let go = copy("go", go("labels-go"));
    let restore = dir.join("restore.yaml");
    std::fs::write(
        &restore,
        "apiVersion: velero.io/v1\nkind: Restore\nmetadata: {name: again, namespace: velero}\nspec:\n  backupName: nightly\n  namespaceMapping: {shop: shop-copy}\n",
    )
    .unwrap();
    let restore_args = ["--restore", "--restore-object", restore.to_str().unwrap()];
    let cases: &[(&str, &[&str], &[&str])] = &[
        (
            "examples/items/pod.yaml",
            &["labels=team=payments, tier=gold", "annotations=by=iar"],
            &[],
        ),
        ("examples/items/pod.yaml", &[], &[]),
        (
            "examples/items/pvc.yaml",
            &["labels=owner=Zoë,note = a=b "],
            &[],
        ),
        (
            "examples/items/pod.yaml",
            &["resources=pvc", "labels=a=b"],
            &[],
        ),
        (
            "examples/items/pod.yaml",
            &["labels=team=payments,oops"],
            &[],
        ),
        ("examples/items/pod.yaml", &[], &restore_args),
        (
            "examples/items/pod.yaml",
            &["restored-from=-"],
            &restore_args,
        ),
    ];
    for (item, config, extra) in cases {
        let run = |plugin: &Path| {
            let mut args = vec![
                "run",
                "--plugin",
                plugin.to_str().unwrap(),
                "--item",
                item,
                "--allow-mutate",
                "*",
            ];
            args.extend(extra.iter());
            for c in *config {
                args.extend(["--config", c]);
            }
            iar(&args)
        };
        let (r, g) = (run(&rust), run(&go));
        assert_eq!(
            (g.status.code(), String::from_utf8_lossy(&g.stdout)),
            (r.status.code(), String::from_utf8_lossy(&r.stdout)),
            "{item} {config:?} {extra:?}: Go (left) and Rust (right) differ; Go stderr: {}",
            String::from_utf8_lossy(&g.stderr)
        );
    }
}

/// Contract 1.4.0's `cluster-catalog` from Go (`host.Resources`,
/// `ServerVersion`, `HomeNamespace`, lifted by hand): with no API server,
/// iar's built-in table, each row whole (its short names and verbs are
/// lists inside a list), no version (rule `no-api-server`), and the home
/// namespace of the backup the call belongs to.
#[test]
fn a_go_plugin_reads_the_cluster_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let backup = dir.path().join("backup.yaml");
    std::fs::write(
        &backup,
        "apiVersion: velero.io/v1\nkind: Backup\nmetadata: {name: nightly, namespace: backup-tools}\nspec: {}\n",
    )
    .unwrap();
    let out = iar(&[
        "run",
        "--plugin",
        go("go-catalog"),
        "--item",
        "examples/items/pod.yaml",
        "--backup",
        backup.to_str().unwrap(),
        "--allow-mutate",
        "*",
    ]);
    assert_ok(&out, "iar run go-catalog");
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let seen: Value = serde_json::from_str(
        printed["finalItem"]["metadata"]["annotations"]["iar.test/catalog"]
            .as_str()
            .expect("annotated"),
    )
    .unwrap();
    assert_eq!(
        seen["count"],
        iar::catalog::Catalog::builtin().iter().count()
    );
    assert_eq!(
        seen["pods"],
        serde_json::json!({"Group": "", "Version": "v1", "Kind": "Pod", "Resource": "pods",
            "Singular": "pod", "ShortNames": ["po"], "Namespaced": true,
            "Verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]})
    );
    assert_eq!(
        seen["version"],
        "error:there is no API server: the cluster is manifests (rule: no-api-server)"
    );
    assert_eq!(seen["home"], "backup-tools");
}

/// A goroutine that never yields holds Go's one thread: the call runs
/// into its CPU deadline, reported with the rule, and the host goes on
/// serving (another Go plugin on the same runtime, and the same plugin's
/// next instance).
#[test]
fn a_goroutine_that_never_yields_is_stopped_at_the_deadline() {
    let out = iar(&[
        "run",
        "--plugin",
        go("go-spin"),
        "--item",
        "examples/items/pod.yaml",
        "--deadline",
        "200ms",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        last_stderr_line(&out),
        "iar: plugin \"go-spin\": execute of pods shop/web-0: ran past its CPU deadline of 200ms and was stopped (rule: cpu-deadline)"
    );

    let runtime = runtime();
    let mut settings = plugin_settings(&[]);
    settings.limits.deadline = Duration::from_millis(200);
    let spin = Plugin::from_file(&runtime, Path::new(go("go-spin")), settings).unwrap();
    let labels = load(&runtime, go("labels-go"), &[("labels", "a=b")]);
    for _ in 0..2 {
        let err = spin
            .instance(Arc::new(NoCluster))
            .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
            .unwrap_err()
            .to_string();
        assert!(err.contains("(rule: cpu-deadline)"), "{err}");
        let out = labels
            .instance(Arc::new(NoCluster))
            .execute(&pod("web-0"), &backup(Phase::Backup), &never_seen)
            .unwrap();
        assert_eq!(out.item.unwrap().value()["metadata"]["labels"]["a"], "b");
    }
}

/// A runtime panic in the plugin's own goroutine is recovered by the SDK
/// into the item's error, with where it happened; one in a goroutine of
/// its own ends the instance (Go exits), a trap with Go's message.
#[test]
fn a_go_panic_fails_the_item_naming_plugin_item_and_place() {
    let out = iar(&[
        "run",
        "--plugin",
        go("go-panic"),
        "--item",
        "examples/items/pod.yaml",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        last_stderr_line(&out),
        "iar: plugin \"go-panic\": execute of pods shop/web-0: returned an error: failed: panic: runtime error: invalid memory address or nil pointer dereference at main.panicker.Execute (iar.dev/sdk/internal/testguests/panic/main.go:28)"
    );
    let out = iar(&[
        "run",
        "--plugin",
        go("go-panic"),
        "--item",
        "examples/items/pod.yaml",
        "--config",
        "goroutine=true",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let line = last_stderr_line(&out);
    assert!(
        line.starts_with("iar: plugin \"go-panic\": execute of pods shop/web-0: trapped:")
            && line.contains("panic: a goroutine panicked on purpose")
            && line.ends_with("(rule: no-trap)"),
        "{line}"
    );
}

/// Go's heap against the default 64 MiB cap: 58 MiB held live fits,
/// growing without end stops at the cap with its rule.
#[test]
fn a_go_heap_runs_into_the_memory_cap() {
    let run = |config: &[&str]| {
        let mut args = vec![
            "run",
            "--plugin",
            go("go-heap"),
            "--item",
            "examples/items/pod.yaml",
            // It annotates the pod with what it held.
            "--allow-mutate",
            "pods",
        ];
        for c in config {
            args.extend(["--config", c]);
        }
        iar(&args)
    };
    let out = run(&["mib=58"]);
    assert_ok(&out, "58 MiB");
    let report = crate::support::stdout_json(&out);
    assert_eq!(
        report["finalItem"]["metadata"]["annotations"]["heap.iar.test/mib"],
        "58"
    );
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(1));
    let line = last_stderr_line(&out);
    assert!(
        line.starts_with(
            "iar: plugin \"go-heap\": execute of pods shop/web-0: tried to grow its memory to "
        ) && line.ends_with("over its cap of 67108864 (rule: memory-cap)"),
        "{line}"
    );
}

/// `iar new --lang go` makes a module outside this checkout that `iar
/// build` builds with the Go toolchain alone (GOPROXY=off: nothing
/// fetched) and whose test file passes, restore case included.
#[test]
fn a_new_go_plugin_builds_outside_the_checkout_and_its_tests_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("team-label");
    let out = iar(&[
        "new",
        "--lang",
        "go",
        "team-label",
        "--path",
        dir.to_str().unwrap(),
    ]);
    assert_ok(&out, "iar new --lang go");
    let go_mod = std::fs::read_to_string(dir.join("go.mod")).unwrap();
    let sdk = repo().join("go-sdk").canonicalize().unwrap();
    assert!(
        go_mod.contains(&format!("replace iar.dev/sdk => {}", sdk.display())),
        "{go_mod}"
    );
    let build = Command::new(crate::support::iar_bin())
        .args(["build", dir.to_str().unwrap()])
        .env("GOPROXY", "off")
        .env("GOFLAGS", "-mod=mod")
        .output()
        .unwrap();
    assert_ok(&build, "iar build of the new plugin");
    assert!(
        String::from_utf8_lossy(&build.stdout).contains("team-label.wasm: "),
        "{}",
        String::from_utf8_lossy(&build.stdout)
    );
    assert!(
        !dir.join("team-label.core.wasm").exists(),
        "the core module is left behind"
    );
    let out = iar(&["test", dir.to_str().unwrap()]);
    assert_ok(&out, "iar test in the new plugin");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("5 cases: 5 passed, 0 failed"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Figures for docs/other-languages.md: size, first compile, load from the
/// compile cache, first call and reused execute of the Go labels plugin
/// beside the Rust one, in one run. Only prints:
/// `cargo test -p iar --test all -- --ignored --nocapture go_sdk::measure`.
#[test]
#[ignore = "measurement; run with --ignored --nocapture"]
fn measure() {
    use std::time::Instant;
    const CALLS: usize = 1_000;
    let config = [("labels", "team=payments, tier=gold")];
    let item = pod("web-0");
    let cache = tempfile::tempdir().unwrap();
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    let us = |d: Duration| format!("{:.1} µs", d.as_secs_f64() * 1e6);
    println!(
        "| plugin | size (bytes) | first load (compile) | cached load | first call | execute median | p99 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (lang, path) in [("rust", artifacts::LABELS), ("go", go("labels-go"))] {
        let load_timed = || {
            let runtime = crate::support::runtime_with_cache(cache.path());
            let started = Instant::now();
            let plugin =
                Plugin::from_file(&runtime, Path::new(path), plugin_settings(&config)).unwrap();
            (plugin, started.elapsed())
        };
        let (_, first) = load_timed();
        let (plugin, cached) = load_timed();
        let mut instance = plugin.instance(Arc::new(NoCluster));
        let started = Instant::now();
        let out = instance
            .execute(&item, &backup(Phase::Backup), &never_seen)
            .unwrap();
        let first_call = started.elapsed();
        assert!(out.item.is_some(), "{lang}: labelled");
        let mut times: Vec<Duration> = (0..CALLS)
            .map(|_| {
                let started = Instant::now();
                instance
                    .execute(&item, &backup(Phase::Backup), &never_seen)
                    .unwrap();
                started.elapsed()
            })
            .collect();
        times.sort();
        println!(
            "| {lang} | {} | {} | {} | {} | {} | {} |",
            std::fs::metadata(path).unwrap().len(),
            ms(first),
            ms(cached),
            ms(first_call),
            us(times[CALLS / 2]),
            us(times[CALLS * 99 / 100]),
        );
    }
}

/// The SDK's pure packages' own Go tests (`go test`, on the machine's own
/// platform: the packages that import the host only build for wasm).
#[test]
fn the_sdks_go_tests_pass() {
    let out = Command::new("go")
        .args(["test", "./names", "./unstructured", "./velero"])
        .current_dir(repo().join("go-sdk"))
        .env("GOTOOLCHAIN", "local")
        .output()
        .expect("running go test");
    assert_ok(&out, "go test in go-sdk");
}

/// `iar componentize --world` builds against a named world of the
/// contract; one the module does not export refuses, naming what is
/// missing; a component or a module without contract exports is refused.
#[test]
fn componentize_with_a_named_world_and_bad_input() {
    let core = go("labels-go").replace("labels-go.wasm", "labels-go.core.wasm");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("labels.wasm");
    let componentize = |input: &str, world: &str| {
        iar(&[
            "componentize",
            input,
            "-o",
            out.to_str().unwrap(),
            "--world",
            world,
        ])
    };
    assert_ok(
        &componentize(&core, "backup-restore-plugin"),
        "backup-restore-plugin",
    );
    let shown = crate::support::stdout_json(&iar(&["inspect", out.to_str().unwrap()]));
    assert_eq!(
        shown["interfaces"],
        serde_json::json!(["item-action", "restore-item-action"])
    );
    let refused = componentize(&core, "block-plugin");
    assert_eq!(refused.status.code(), Some(2));
    let line = last_stderr_line(&refused);
    assert!(
        line.contains("componentizing") && line.contains("item-block-action@1.4.0"),
        "{line}"
    );
    let component = componentize(go("labels-go"), "plugin");
    assert!(
        last_stderr_line(&component)
            .contains("not a core WebAssembly module (it is already a component)"),
        "{}",
        last_stderr_line(&component)
    );
}

/// A Go plugin is registered from a ConfigMap against a real API server
/// (`iar-apiserver`) by reference: at ~3.8 MB it does not fit a
/// ConfigMap's 1 MiB, so `iar plugin configmap` refuses it inline and
/// names `--reference`; with `--reference` (a file under the watcher's
/// reference directory, as `--plugin-reference-dir` sets it) the printed
/// manifest, applied server-side, loads Ready, and the loaded Go labels
/// plugin changes a pod exactly as the Rust one loaded inline beside it
/// with the same settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_plugin_loads_from_a_configmap_by_reference() {
    use iar::k8s::plugins::configmap;
    use iar::k8s::plugins::{PluginRegistry, WatchOptions, watch_with};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, Patch, PatchParams};

    let component = go("labels-go");
    let size = std::fs::metadata(component).unwrap().len() as usize;
    assert!(size > configmap::CONFIGMAP_LIMIT, "{size} bytes");
    let Some(server) = crate::support::server().await else {
        return;
    };
    let client = crate::support::client(server, iar_apiserver::User::Admin).await;
    let namespace = "go-plugin-reference";
    iar_apiserver::create_namespace(&client, namespace).await;

    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.yaml");
    std::fs::write(
        &settings,
        "config: {labels: team=payments}\nallowMutate: [pods]\n",
    )
    .unwrap();
    let reference = dir.path().join("plugins/labels-go.wasm");
    std::fs::create_dir_all(reference.parent().unwrap()).unwrap();
    std::fs::copy(component, &reference).unwrap();
    let manifest = |plugin: &str, name: &str, extra: &[&str]| {
        let mut args = vec![
            "plugin",
            "configmap",
            plugin,
            "--name",
            name,
            "--namespace",
            namespace,
            "--settings",
            settings.to_str().unwrap(),
        ];
        args.extend(extra);
        iar(&args)
    };

    let inline = manifest(component, "labels-go", &[]);
    assert_eq!(inline.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&inline.stderr);
    assert!(
        stderr.contains("--reference") && stderr.contains("configmap-size"),
        "{stderr}"
    );

    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let apply = |out: Output| {
        assert_ok(&out, "iar plugin configmap");
        let cm: ConfigMap = iar::yaml::from_slice(&out.stdout).unwrap();
        let api = api.clone();
        async move {
            let name = cm.metadata.name.clone().unwrap();
            api.patch(&name, &PatchParams::apply("kubectl"), &Patch::Apply(&cm))
                .await
                .expect("server-side apply");
            cm
        }
    };
    let by_reference = apply(manifest(
        component,
        "labels-go",
        &["--reference", reference.to_str().unwrap()],
    ))
    .await;
    assert!(by_reference.binary_data.is_none());
    apply(manifest(artifacts::LABELS, "labels", &[])).await;

    let registry = PluginRegistry::new();
    let options = WatchOptions {
        reference_dir: Some(dir.path().join("plugins")),
        // The operator lets ConfigMap plugins label pods.
        grant_policy: iar::k8s::plugins::GrantPolicy {
            mutable: vec!["pods".into()],
            ..Default::default()
        },
        ..WatchOptions::default()
    };
    let task = tokio::spawn(watch_with(
        client,
        namespace.into(),
        runtime(),
        registry.clone(),
        options,
    ));
    let mut rx = registry.subscribe();
    let loaded = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let set = registry.current();
            if set.get("labels-go").is_some() && set.get("labels").is_some() {
                return set;
            }
            rx.changed().await.unwrap();
        }
    })
    .await
    .expect("labels-go and labels did not both load");
    for name in ["labels-go", "labels"] {
        iar_tests::wait_for("a Ready status", Duration::from_secs(60), || async {
            let annotations = api.get(name).await.unwrap().metadata.annotations;
            match annotations.and_then(|a| a.get("iar.dev/status").cloned()) {
                Some(status) if status == "Ready" => Ok(()),
                status => Err(format!("{name}: status {status:?}")),
            }
        })
        .await;
    }
    task.abort();

    let run = |name: &str| {
        let plugin = loaded.get(name).expect("loaded");
        let out = plugin
            .instance(Arc::new(NoCluster))
            .execute(&pod("web"), &backup(Phase::Backup), &never_seen)
            .expect("runs");
        out.item.expect("changes the pod").into_value()
    };
    let (go_pod, rust_pod) = (run("labels-go"), run("labels"));
    assert_eq!(go_pod["metadata"]["labels"]["team"], "payments");
    assert_eq!(go_pod, rust_pod, "Go (left) and Rust (right) differ");
}
