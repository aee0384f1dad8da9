//! Benchmarks, not tests (ignored; they assert no time): Velero's own
//! server against itself with a Go plugin and with iar's wasm plugin, and
//! iar's controller against Velero's server, on the same API server and S3
//! server, in one run. Run one alone, in a release build, with nothing else
//! running:
//!
//! `cargo test --release -p iar --test all velero_bench:: -- --ignored --nocapture --test-threads 1`
//!
//! `BENCH_OBJECTS` and `BENCH_ROUNDS` set the size and the rounds; rounds
//! are interleaved, servers restarted between kinds (not timed).

use crate::support::*;
use crate::velero::*;
use iar_apiserver::{ApiServer, User};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| v.parse().expect("a number"))
}

/// Resident set size, bytes, of a process and its direct children (Velero's
/// plugin processes), from /proc.
fn rss_with_children(pid: u32) -> u64 {
    let rss = |pid: &str| -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            })
            .unwrap_or(0)
            * 1024
    };
    let mut total = rss(&pid.to_string());
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{name}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so after the ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            total += rss(&name);
        }
    }
    total
}

/// Samples [`rss_with_children`] every 50 ms until dropped; `peak` is the
/// largest total seen.
struct RssSampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let (peak, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let thread = {
            let (peak, stop) = (peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(rss_with_children(pid), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        RssSampler {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    fn peak_mib(mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Relaxed) as f64 / (1024.0 * 1024.0)
    }
}

/// The API server, tools, S3 server, Velero's namespace and location, and a
/// namespace of `objects` ConfigMaps, created in parallel.
struct Bench {
    server: &'static ApiServer,
    tools: PathBuf,
    client: kube::Client,
    work: tempfile::TempDir,
    endpoint: String,
    _s3: iar_tests::s3::Gateway,
    velero_ns: &'static str,
    app: &'static str,
    objects: usize,
}

async fn bench(velero_ns: &'static str, app: &'static str, objects: usize) -> Option<Bench> {
    use futures::StreamExt;
    let server = server().await?;
    let tools = tools()?;
    let work = tempfile::tempdir().unwrap();
    let (s3, endpoint) = s3_server(&tools, &work.path().join("s3"));
    std::fs::create_dir_all(work.path().join("s3/iar")).unwrap();
    let client = client(server, User::Admin).await;
    install_crds(&tools, &client).await;
    iar_apiserver::create_namespace(&client, velero_ns).await;
    iar_apiserver::create_namespace(&client, app).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), app);
    futures::stream::iter(0..objects)
        .map(|i| {
            let configmaps = configmaps.clone();
            async move {
                let cm = serde_json::from_value(json!({
                    "metadata": {"name": format!("cm-{i:05}"), "labels": {"app": "bench"}},
                    "data": {"greeting": "hello", "index": i.to_string()}
                }))
                .unwrap();
                configmaps
                    .create(&PostParams::default(), &cm)
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    create_location(&client, velero_ns, &endpoint).await;
    Some(Bench {
        server,
        tools,
        client,
        work,
        endpoint,
        _s3: s3,
        velero_ns,
        app,
        objects,
    })
}

/// The Go labels plugin of bench/velero/plugin (Velero's plugin framework),
/// built with Go's caches.
fn go_plugin(work: &Path) -> PathBuf {
    let out = work.join("iar-bench-labels");
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg("./plugin")
        .current_dir(repo().join("bench/velero"))
        .env("GOWORK", "off")
        .status()
        .unwrap();
    assert!(built.success(), "building bench/velero/plugin");
    out
}

/// The wasm `labels` plugin set to make the Go plugin's change.
fn wasm_plugins(work: &Path) -> PathBuf {
    let dir = work.join("wasm-plugins");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(iar_tests::artifacts::LABELS, dir.join("labels.wasm")).unwrap();
    std::fs::write(
        dir.join("labels.yaml"),
        "config: {labels: team=payments}\nallowMutate: ['*', serviceaccounts]\n",
    )
    .unwrap();
    dir
}

#[derive(Clone, Copy, PartialEq)]
enum Plugin {
    None,
    Go,
    Wasm,
}

impl Bench {
    fn plugins(&self) -> PathBuf {
        self.work.path().join("plugins")
    }

    /// One Velero backup of the namespace with `plugin` installed in a
    /// freshly started server: wall time and the peak RSS of the server
    /// and its plugin processes.
    /// A Velero server started afresh with `plugin` in its plugin
    /// directory, its location available: the server, its RSS sampler and
    /// its log.
    async fn start(
        &self,
        plugin: Plugin,
        go: &Path,
        wasm: &Path,
    ) -> (Running, RssSampler, PathBuf) {
        let plugins = self.plugins();
        let _ = std::fs::remove_dir_all(&plugins);
        velero_plugins(&self.tools, self.work.path());
        match plugin {
            Plugin::Go => {
                std::fs::copy(go, plugins.join("iar-bench-labels")).unwrap();
            }
            Plugin::Wasm => {
                let out = iar(&[
                    "plugin",
                    "velero-install",
                    "--to",
                    plugins.to_str().unwrap(),
                    "--plugins",
                    wasm.to_str().unwrap(),
                ]);
                assert!(out.status.success(), "{}", text(&out));
            }
            Plugin::None => {}
        }
        let log = self.work.path().join("velero-server.log");
        let since = std::time::SystemTime::now() - Duration::from_secs(1);
        let velero = velero_server(
            &self.tools,
            self.server,
            self.work.path(),
            self.velero_ns,
            "",
        );
        let sampler = RssSampler::start(velero.0.id());
        wait_location_available(&self.client, self.velero_ns, since, &log).await;
        (velero, sampler, log)
    }

    /// One Velero restore of backup `from` into a new namespace with
    /// `plugin` installed in a freshly started server: wall time and peak
    /// RSS, as for a backup.
    async fn restore(
        &self,
        plugin: Plugin,
        from: &str,
        name: &str,
        go: &Path,
        wasm: &Path,
    ) -> (f64, f64) {
        let (velero, sampler, log) = self.start(plugin, go, wasm).await;
        let target = format!("{}-{name}", self.app);
        let started = Instant::now();
        let (status, results) = velero_restore(
            &self.client,
            self.velero_ns,
            name,
            json!({"backupName": from, "namespaceMapping": {self.app: &target},
                "includedResources": ["configmaps"]}),
            &self.work.path().join("s3"),
            &log,
        )
        .await;
        let wall = started.elapsed().as_secs_f64();
        let peak = sampler.peak_mib();
        assert_eq!(status["phase"], "Completed", "{status}\n{results}");
        let restored = Api::<ConfigMap>::namespaced(self.client.clone(), &target)
            .get("cm-00000")
            .await
            .unwrap();
        let from_backup = restored
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("iar.dev/restored-from"))
            .cloned();
        match plugin {
            Plugin::None => assert_eq!(from_backup, None),
            _ => assert_eq!(from_backup.as_deref(), Some(from)),
        }
        drop(velero);
        (wall, peak)
    }

    async fn velero(&self, plugin: Plugin, name: &str, go: &Path, wasm: &Path) -> (f64, f64) {
        let (velero, sampler, log) = self.start(plugin, go, wasm).await;
        let started = Instant::now();
        let status = velero_backup(&self.client, self.velero_ns, name, self.app, &log).await;
        let wall = started.elapsed().as_secs_f64();
        let peak = sampler.peak_mib();
        if status["status"]["phase"] != "Completed" {
            panic!("{}\n{}", status["status"], tail(&log));
        }
        let backed_up = status["status"]["progress"]["itemsBackedUp"]
            .as_u64()
            .unwrap_or_default();
        assert!(backed_up > self.objects as u64, "{}", status["status"]);
        let entries = tarball(
            &self
                .work
                .path()
                .join("s3")
                .join(BUCKET)
                .join(format!("backups/{name}/{name}.tar.gz")),
        );
        let sample = entry(
            &entries,
            &format!("resources/configmaps/namespaces/{}/cm-00000.json", self.app),
        );
        if plugin != Plugin::None {
            assert_eq!(sample["metadata"]["labels"]["team"], "payments");
        }
        drop(velero);
        (wall, peak)
    }

    /// One backup of the namespace by a freshly started `iar controller`
    /// (store on the same S3 server, its own bucket), with the wasm
    /// plugin or none: wall time and the controller's peak RSS.
    async fn iar_controller(&self, plugin: Plugin, name: &str, wasm: &Path) -> (f64, f64) {
        // A namespace per run: a killed controller's leader Lease would make
        // the next one wait for it to expire.
        let iar_ns = &format!("iar-{name}");
        iar_apiserver::create_namespace(&self.client, iar_ns).await;
        let plugins = match plugin {
            Plugin::Wasm => wasm.to_path_buf(),
            _ => {
                let empty = self.work.path().join("no-plugins");
                std::fs::create_dir_all(&empty).unwrap();
                empty
            }
        };
        let log = std::fs::File::create(self.work.path().join("iar-controller.log")).unwrap();
        let child = iar_command(&[
            "controller",
            "--namespace",
            iar_ns,
            "--listen",
            "127.0.0.1:0",
        ])
        // A bucket of its own: Velero finds a location whose bucket holds
        // directories it does not know Unavailable.
        .args(["--store", "s3://iar"])
        .arg("--plugins")
        .arg(&plugins)
        .args(["--sync-period", "200ms"])
        .env("KUBECONFIG", self.server.kubeconfig())
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_ENDPOINT", &self.endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1")
        .env("IAR_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("iar controller");
        let controller = Running(child);
        let sampler = RssSampler::start(controller.0.id());
        let log_path = self.work.path().join("iar-controller.log");
        // Ready, as Velero's server is once its location is Available: it
        // leads (its plugins are loaded before it campaigns).
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(self.client.clone(), iar_ns);
        wait_for_or_log("iar to lead", &log_path, Duration::from_secs(60), || {
            let leases = leases.clone();
            async move {
                leases
                    .get_opt("iar-controller")
                    .await
                    .ok()
                    .flatten()
                    .and_then(|l| l.spec?.holder_identity)
            }
        })
        .await;
        let ar = resource("iar.dev", "v1", "Backup", "backups");
        let started = Instant::now();
        create(
            &self.client,
            &ar,
            iar_ns,
            json!({"apiVersion": "iar.dev/v1", "kind": "Backup",
                "metadata": {"name": name, "namespace": iar_ns},
                "spec": {"includedNamespaces": [self.app]}}),
        )
        .await;
        let backups: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), iar_ns, &ar);
        let done = wait_for_or_log(
            &format!("iar backup {name}"),
            &log_path,
            Duration::from_secs(600),
            || {
                let backups = backups.clone();
                async move {
                    backups.get(name).await.ok().filter(|b| {
                        matches!(
                            b.data["status"]["phase"].as_str(),
                            Some("Completed" | "PartiallyFailed" | "Failed")
                        )
                    })
                }
            },
        )
        .await;
        let wall = started.elapsed().as_secs_f64();
        let peak = sampler.peak_mib();
        assert_eq!(
            done.data["status"]["phase"], "Completed",
            "{}",
            done.data["status"]
        );
        let backed_up = done.data["status"]["progress"]["itemsBackedUp"]
            .as_u64()
            .unwrap_or_default();
        assert!(backed_up > self.objects as u64, "{}", done.data["status"]);
        let entries = tarball(
            &self
                .work
                .path()
                .join(format!("s3/iar/backups/{name}/{name}.tar.gz")),
        );
        let sample = entry(
            &entries,
            &format!("resources/configmaps/namespaces/{}/cm-00000.json", self.app),
        );
        if plugin == Plugin::Wasm {
            assert_eq!(sample["metadata"]["labels"]["team"], "payments");
        }
        drop(controller);
        (wall, peak)
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Prints rows of `(label, walls, peaks)` as one table, ratios against the
/// first row.
fn print_table(title: &str, objects: usize, rows: &[(&str, Vec<f64>, Vec<f64>)]) {
    println!("{title}");
    println!("| run | wall (s) | objects/s | peak RSS (MiB) | wall ÷ first |");
    println!("|---|---|---|---|---|");
    let first = median(&rows[0].1);
    for (label, walls, peaks) in rows {
        let (w, p) = (median(walls), median(peaks));
        println!(
            "| {label} | {w:.2} | {:.0} | {p:.0} | {:.2}× |",
            objects as f64 / w,
            w / first
        );
    }
    println!("(all runs: {rows:?})");
}

/// Velero's restore of one backup of `BENCH_OBJECTS` ConfigMaps into a new
/// namespace, with no restore action, with the Go plugin's restore action
/// and with the wasm `labels` plugin's (iar.dev/restored-from on each),
/// hosted by iar: issue 39's comparison.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run it alone, with --ignored --nocapture"]
async fn velero_restore_with_go_and_wasm_plugins() {
    let objects = env_or("BENCH_OBJECTS", 1000);
    let rounds = env_or("BENCH_ROUNDS", 3);
    let _one = ONE_VELERO.lock().await;
    let Some(b) = bench("velero-bench-r", "bench-restore", objects).await else {
        return;
    };
    // A restore reads Velero's own Deployment (its image, for restore
    // helpers), as the server test's does.
    velero_deployment(&b.client, b.velero_ns).await;
    let (go, wasm) = (go_plugin(b.work.path()), wasm_plugins(b.work.path()));
    b.velero(Plugin::None, "source", &go, &wasm).await;
    let mut rows = vec![
        ("Velero restore, no action", vec![], vec![]),
        ("Velero + Go restore action", vec![], vec![]),
        ("Velero + iar (wasm) restore action", vec![], vec![]),
    ];
    for round in 0..rounds {
        for (i, plugin) in [Plugin::None, Plugin::Go, Plugin::Wasm]
            .into_iter()
            .enumerate()
        {
            let name = format!("r{i}-{round}");
            let (wall, peak) = b.restore(plugin, "source", &name, &go, &wasm).await;
            rows[i].1.push(wall);
            rows[i].2.push(peak);
        }
    }
    print_table(
        &format!(
            "Velero v1.18.3 restore of {objects} ConfigMaps into a new namespace, {rounds} interleaved rounds, medians:"
        ),
        objects,
        &rows,
    );
}

/// A Velero server's backup of one namespace with no item action, with the
/// Go labels plugin, and with the wasm `labels` plugin hosted by iar.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run it alone, with --ignored --nocapture"]
async fn velero_server_with_go_and_wasm_plugins() {
    let objects = env_or("BENCH_OBJECTS", 1000);
    let rounds = env_or("BENCH_ROUNDS", 3);
    let _one = ONE_VELERO.lock().await;
    let Some(b) = bench("velero-bench", "bench-objects", objects).await else {
        return;
    };
    let (go, wasm) = (go_plugin(b.work.path()), wasm_plugins(b.work.path()));
    let mut rows = vec![
        ("Velero, no plugin", vec![], vec![]),
        ("Velero + Go plugin", vec![], vec![]),
        ("Velero + iar (wasm)", vec![], vec![]),
    ];
    for round in 0..rounds {
        for (i, plugin) in [Plugin::None, Plugin::Go, Plugin::Wasm]
            .into_iter()
            .enumerate()
        {
            let (wall, peak) = b.velero(plugin, &format!("v{i}-{round}"), &go, &wasm).await;
            rows[i].1.push(wall);
            rows[i].2.push(peak);
        }
    }
    print_table(
        &format!(
            "Velero v1.18.3 backup of {objects} ConfigMaps (+ namespace), {rounds} interleaved rounds, medians:"
        ),
        objects,
        &rows,
    );
}

/// iar's controller against Velero's server on the same cluster: the same
/// namespace backed up by each, with the plugin (Go for Velero, wasm for
/// iar) and with none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run it alone, with --ignored --nocapture"]
async fn iar_controller_against_velero_server() {
    let objects = env_or("BENCH_OBJECTS", 5000);
    let rounds = env_or("BENCH_ROUNDS", 3);
    let _one = ONE_VELERO.lock().await;
    let Some(b) = bench("velero-vs", "vs-objects", objects).await else {
        return;
    };
    crate::controller::install_crds(&b.client).await;
    let (go, wasm) = (go_plugin(b.work.path()), wasm_plugins(b.work.path()));
    let mut rows = vec![
        ("Velero, no plugin", vec![], vec![]),
        ("Velero + Go labels", vec![], vec![]),
        ("iar controller, no plugin", vec![], vec![]),
        ("iar controller + wasm labels", vec![], vec![]),
    ];
    for round in 0..rounds {
        for (i, row) in rows.iter_mut().enumerate() {
            let name = format!("vs{i}-{round}");
            let (wall, peak) = match i {
                0 => b.velero(Plugin::None, &name, &go, &wasm).await,
                1 => b.velero(Plugin::Go, &name, &go, &wasm).await,
                2 => b.iar_controller(Plugin::None, &name, &wasm).await,
                _ => b.iar_controller(Plugin::Wasm, &name, &wasm).await,
            };
            row.1.push(wall);
            row.2.push(peak);
        }
    }
    print_table(
        &format!(
            "One namespace of {objects} ConfigMaps (+ namespace), same API server and S3 server, {rounds} interleaved rounds, medians:"
        ),
        objects,
        &rows,
    );
    let m = |i: usize| median(&rows[i].1);
    let p = |i: usize| median(&rows[i].2);
    println!(
        "with the plugin: iar throughput ÷ Velero's {:.2}×, iar peak RSS ÷ Velero's {:.2}×; without: {:.2}×, {:.2}×",
        m(1) / m(3),
        p(3) / p(1),
        m(0) / m(2),
        p(2) / p(0)
    );
}
