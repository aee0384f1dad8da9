//! `iar controller` and `iar crd`.

use anyhow::Context;
use iar::k8s::controller::{Options, Plugins, run};
use iar::k8s::plugins::{GrantPolicy, PluginRegistry, WatchOptions};
use iar::phases::Settings;
use iar::store::BackupStore;
use iar::{Runtime, RuntimeConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub struct ControllerArgs {
    /// The namespace iar runs in: its Backups, plugin ConfigMaps and
    /// leader Lease.
    #[arg(long, env = "IAR_NAMESPACE", default_value = "iar-system")]
    namespace: String,
    /// The backup store: a directory, or file://, s3://, gs://, az:// URL.
    #[arg(long, env = "IAR_STORE")]
    store: String,
    /// Plugins from a directory (*.wasm, NAME.yaml settings), as for
    /// `iar backup`, besides those registered as ConfigMaps.
    #[arg(long, value_name = "DIR")]
    plugins: Option<PathBuf>,
    /// The grant policy (YAML): what any plugin ConfigMap may grant its
    /// plugin (readable resources, maximum limits, isolation). Without
    /// it: every resource but Secrets, limits up to 4x the defaults. Not
    /// applied to --plugins, which are the operator's own.
    #[arg(long, value_name = "FILE")]
    grant_policy: Option<PathBuf>,
    /// The directory a plugin ConfigMap's `data.reference` path must be
    /// in (a volume mounted for plugins). Without it, path references are
    /// refused; https references work either way.
    #[arg(long, value_name = "DIR")]
    plugin_reference_dir: Option<PathBuf>,
    /// How long reading one plugin's component (https or file) may take.
    #[arg(long, value_parser = iar::duration::parse_positive, default_value = "60s")]
    plugin_read_timeout: Duration,
    /// How long verifying, compiling and calling applies-to of one plugin
    /// may take, once a compile slot is free.
    #[arg(long, value_parser = iar::duration::parse_positive, default_value = "5m")]
    plugin_compile_timeout: Duration,
    /// Where /healthz, /readyz and /metrics are served: `IP:PORT`, or an
    /// IP alone for port 8080 (what deploy/ passes: the pod's IP, from the
    /// downward API). Loopback by default, so that `iar controller` run
    /// outside a pod serves no one else.
    #[arg(long, env = "IAR_LISTEN", value_parser = parse_listen, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// How many backups list the cluster and run their plugins at once;
    /// more wait their turn (a burst of Backups queues).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    concurrent_backups: u16,
    /// The leader-election Lease's name.
    #[arg(long, default_value = "iar-controller")]
    lease_name: String,
    /// This replica's identity in the Lease (the pod name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// How long leadership lasts unrenewed (renewed every third of it).
    #[arg(long, value_parser = iar::duration::parse_positive, default_value = "15s")]
    leader_lease: Duration,
    /// On SIGTERM, how long the backup steps running may finish before
    /// the replica exits (a first pass cut short ends its backup Failed);
    /// keep it under the pod's terminationGracePeriodSeconds (30s).
    #[arg(long, value_parser = iar::duration::parse_non_negative, default_value = "25s")]
    drain: Duration,
    /// How long a backup's lease in the store lasts unrenewed.
    #[arg(long, value_parser = iar::duration::parse_positive, default_value = "15s")]
    lease_duration: Duration,
    /// How often operation progress is polled and persisted.
    #[arg(long, value_parser = iar::duration::parse_positive, default_value = "10s")]
    sync_period: Duration,
    /// Operation timeout, unless the spec sets itemOperationTimeout.
    #[arg(long, value_parser = iar::duration::parse_positive, default_value = "4h")]
    operation_timeout: Duration,
    /// Item-block workers per backup (default: the number of cores).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    workers: Option<u16>,
    /// The ttl of a Backup whose spec sets none (or 0) (Velero's
    /// --default-backup-ttl).
    #[arg(long, value_parser = iar::duration::parse_non_negative, default_value = "720h0m0s")]
    default_backup_ttl: Duration,
    /// How often the leader deletes expired backups from the store, and
    /// their Backup resources.
    #[arg(long, value_parser = iar::duration::parse_positive, default_value = "1h")]
    gc_period: Duration,
    /// How often the leader prunes the volume repositories (Velero's full
    /// repository maintenance: weekly). Put off while a backup runs.
    #[arg(long, value_parser = iar::duration::parse_positive, default_value = "168h")]
    repository_maintenance_period: Duration,
    /// For the volume snapshots of the backups the leader deletes, and
    /// for the repositories' maintenance.
    #[command(flatten)]
    repository: super::backup::RepositoryArg,
    /// How long the node agent of a pod's node may say nothing about a
    /// volume backup (not take it, or stop reporting) before it fails.
    /// At least 10s: agents report every 5s while they work.
    #[arg(long, value_parser = parse_silence, default_value = "2m")]
    volume_agent_silence: Duration,
    /// The longest any backup hook runs in a pod. A pod annotation
    /// (`pre.hook.backup.velero.io/timeout`, `post.`) or a spec hook asking
    /// for more runs with this instead, and a warning says so (rule
    /// hook-timeout-cap).
    #[arg(long, value_parser = super::backup::parse_max_hook_timeout, default_value = "30m")]
    max_hook_timeout: Duration,
    /// The image a restored pod's `restore-wait` init container runs while
    /// the node agent fills its volumes: iar's own (deploy/ sets it).
    #[arg(long, env = "IAR_RESTORE_HELPER_IMAGE", default_value = "iar:0.1.0")]
    restore_helper_image: String,
    /// How long one pod volume's restore may take (Velero's
    /// --pod-volume-operation-timeout).
    #[arg(long, value_parser = iar::duration::parse_positive, default_value = "4h")]
    pod_volume_operation_timeout: Duration,
}

fn parse_silence(s: &str) -> Result<Duration, String> {
    let d = iar::duration::parse_non_negative(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(10) {
        return Err(format!(
            "{s} is shorter than 10s: node agents report every 5s, so a working one would be failed"
        ));
    }
    Ok(d)
}

/// `IP:PORT` (`[v6]:PORT`), or a bare IPv4 or IPv6 address for port 8080:
/// `status.podIP` cannot be bracketed or given a port in a pod spec.
fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .or_else(|_| {
            s.parse::<std::net::IpAddr>()
                .map(|ip| SocketAddr::new(ip, 8080))
        })
        .map_err(|_| format!("{s:?} is neither IP:PORT nor an IP address"))
}

pub fn controller(args: ControllerArgs) -> anyhow::Result<ExitCode> {
    let grant_policy = match &args.grant_policy {
        Some(path) => GrantPolicy::read(path)?,
        None => GrantPolicy::default(),
    };
    if let Some(dir) = &args.plugin_reference_dir {
        anyhow::ensure!(
            dir.is_absolute() && dir.is_dir(),
            "--plugin-reference-dir {}: not an absolute path to a directory",
            dir.display()
        );
    }
    tracing::info!(
        readable = ?grant_policy.readable,
        isolation = ?grant_policy.isolation,
        "grant policy for plugin ConfigMaps ({}); at most {:?}",
        args.grant_policy
            .as_ref()
            .map_or("the defaults".into(), |p| p.display().to_string()),
        grant_policy.max_limits
    );
    let watch = WatchOptions {
        grant_policy,
        reference_dir: args.plugin_reference_dir.clone(),
        read_timeout: args.plugin_read_timeout,
        compile_timeout: args.plugin_compile_timeout,
        ..WatchOptions::default()
    };
    let runtime = Runtime::new(RuntimeConfig::default()).context("starting the wasm runtime")?;
    tracing::info!(instances = %runtime.allocation(), "wasm runtime started");
    let file_plugins = match &args.plugins {
        Some(dir) => super::backup::load_plugins(&runtime, dir, &[])?,
        None => Vec::new(),
    };
    let defaults = Settings::default();
    let settings = Settings {
        sync_period: args.sync_period,
        operation_timeout: args.operation_timeout,
        lease_duration: args.lease_duration,
        workers: args.workers.map_or(defaults.workers, usize::from),
        default_backup_ttl: args.default_backup_ttl,
        gc_period: args.gc_period,
        repository_maintenance_period: args.repository_maintenance_period,
        repository_password: args.repository.password()?,
        concurrent_passes: usize::from(args.concurrent_backups),
        max_hook_timeout: args.max_hook_timeout,
        ..defaults
    };
    let identity = args.identity.clone().unwrap_or_else(|| {
        format!(
            "{}-{}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "iar".into()),
            std::process::id()
        )
    });
    let store = BackupStore::open(&args.store)?;
    let options = Options {
        namespace: args.namespace.clone(),
        listen: args.listen,
        lease_name: args.lease_name.clone(),
        identity,
        leader_lease: args.leader_lease,
        settings,
        store,
        volume_agent_silence: args.volume_agent_silence,
        restore_helper_image: args.restore_helper_image,
        pod_volume_timeout: args.pod_volume_operation_timeout,
        // Kubernetes stops a pod with SIGTERM (and a terminal with ^C):
        // the replica gives its backups back before it exits.
        shutdown: Some(Box::pin(terminated())),
        drain: args.drain,
    };
    let tokio = super::backup::tokio_runtime()?;
    tokio.block_on(async move {
        let client = iar::k8s::client()
            .await
            .context("connecting to the API server")?;
        iar::k8s::version::check(&client).await?;
        let plugins = Plugins {
            runtime,
            registry: PluginRegistry::new(),
            files: file_plugins,
            watch,
        };
        run(client, options, plugins, None).await?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
pub struct CrdArgs {}

pub fn crd(_args: CrdArgs) -> anyhow::Result<ExitCode> {
    out!("{}", iar::k8s::crd::definitions_yaml());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: ControllerArgs,
    }

    /// Outside a pod, and without IAR_LISTEN, probes and metrics listen on
    /// loopback only (before: 0.0.0.0:8080, every interface); deploy/
    /// passes the pod's IP, a bare address that means port 8080.
    #[test]
    fn the_listen_address_is_loopback_unless_given() {
        if std::env::var_os("IAR_LISTEN").is_none() {
            let cli = Cli::try_parse_from(["iar", "--store", "s"]).unwrap();
            assert_eq!(cli.args.listen, "127.0.0.1:8080".parse().unwrap());
            assert!(cli.args.listen.ip().is_loopback());
        }
        for (given, want) in [
            ("10.1.2.3", "10.1.2.3:8080"),
            ("fd00::1", "[fd00::1]:8080"),
            ("0.0.0.0:9090", "0.0.0.0:9090"),
            ("[::1]:81", "[::1]:81"),
        ] {
            assert_eq!(
                parse_listen(given).unwrap(),
                want.parse().unwrap(),
                "{given}"
            );
        }
        assert!(parse_listen("pod-ip").is_err());
    }

    /// Every duration flag reads Go's syntax (as Velero's flags do), "0"
    /// and fractions included, and refuses a negative one naming the flag
    /// and the rule.
    #[test]
    fn duration_flags_are_go_durations_and_not_negative() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from([&["iar", "--store", "s"], args].concat()).map(|c| c.args)
        };
        let args = parse(&[
            "--default-backup-ttl",
            "0",
            "--gc-period",
            "1.5h",
            "--sync-period",
            "+250ms",
            "--leader-lease",
            "15000μs",
            "--volume-agent-silence",
            "1m0s",
        ])
        .unwrap();
        assert_eq!(args.default_backup_ttl, Duration::ZERO);
        assert_eq!(args.gc_period, Duration::from_secs(5400));
        assert_eq!(args.sync_period, Duration::from_millis(250));
        assert_eq!(args.leader_lease, Duration::from_millis(15));
        assert_eq!(args.volume_agent_silence, Duration::from_secs(60));
        let defaults = parse(&[]).unwrap();
        assert_eq!(defaults.default_backup_ttl, Duration::from_secs(720 * 3600));
        assert_eq!(defaults.plugin_compile_timeout, Duration::from_secs(300));

        let err = parse(&["--gc-period=-1h"]).err().unwrap().to_string();
        assert!(
            err.contains("--gc-period") && err.contains("rule: non-negative-duration"),
            "{err}"
        );
        let err = parse(&["--operation-timeout", "4 hours"])
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("--operation-timeout") && err.contains("time: unknown unit"),
            "{err}"
        );
        let err = parse(&["--volume-agent-silence=-1m"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("is negative"), "{err}");
    }
}

/// Resolves on SIGTERM (how Kubernetes stops a pod) or ^C. In a `FROM
/// scratch` image iar is PID 1, which the kernel spares SIGTERM unless it
/// has a handler: without this, every stop waits out the grace period.
async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        },
        Err(e) => {
            tracing::warn!("no SIGTERM handler ({e}); stopping on ^C only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[derive(clap::Args)]
pub struct NodeAgentArgs {
    /// Where the volume backup requests are: the controller's namespace.
    #[arg(long, env = "IAR_NAMESPACE", default_value = "iar-system")]
    namespace: String,
    /// This node's name (the downward API's `spec.nodeName`).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// The kubelet's root directory, mounted read-only.
    #[arg(long, default_value = "/var/lib/kubelet")]
    kubelet_root: PathBuf,
    /// The backup store: the controller's `--store`, exactly.
    #[arg(long, env = "IAR_STORE")]
    store: String,
    /// Volumes read at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    /// Of those, at most this many from one namespace, so one tenant's
    /// slow volumes never hold every permit (default: half of
    /// --concurrency, at least 1).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    concurrency_per_namespace: Option<u16>,
    /// The longest one volume backup may take (Velero's
    /// --fs-backup-timeout); past it the volume fails (rule
    /// fs-backup-timeout) and its permit is free.
    #[arg(long, value_parser = iar::duration::parse_positive, default_value = "4h")]
    fs_backup_timeout: Duration,
    #[command(flatten)]
    repository: super::backup::RepositoryArg,
}

/// `iar node-agent`: backs up the pod volumes of one node.
pub fn node_agent(args: NodeAgentArgs) -> anyhow::Result<ExitCode> {
    use iar::k8s::node_agent::{AgentOptions, run};
    anyhow::ensure!(
        args.kubelet_root.is_dir(),
        "--kubelet-root {}: not a directory",
        args.kubelet_root.display()
    );
    let options = AgentOptions {
        namespace: args.namespace,
        node: args.node_name,
        kubelet_root: args.kubelet_root,
        store: BackupStore::open(&args.store)?,
        concurrency: usize::from(args.concurrency),
        per_namespace: args.concurrency_per_namespace.map(usize::from),
        fs_backup_timeout: args.fs_backup_timeout,
        repository: args.repository.password()?,
    };
    let tokio = super::backup::tokio_runtime()?;
    tokio.block_on(async move {
        let client = iar::k8s::client_reading_within(iar::k8s::node_agent::READ_PATIENCE)
            .await
            .context("connecting to the API server")?;
        iar::k8s::version::check(&client).await?;
        // Stopped, the agent just exits: the volume backups it was reading
        // are failed, with that reason, by the agent that starts next.
        tokio::select! {
            served = run(client, options) => served?,
            _ = terminated() => tracing::info!("stopping on SIGTERM"),
        }
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}
