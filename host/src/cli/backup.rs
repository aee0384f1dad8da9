//! `iar backup`, `iar resume`, `iar gc`.

use anyhow::{Context, bail};
use iar::backup::object::{BackupObject, BackupPhase};
use iar::phases::{BackupRequest, PhaseMachine, Settings};
use iar::plugin::SettingsFile;
use iar::store::{BackupFile, BackupStore};
use iar::{ClusterReader, ManifestCluster, Plugin, Runtime, RuntimeConfig};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// A local store's overlay, under the prefix Velero's store layout keeps
/// for plugins (pkg/persistence/object_store_layout.go).
pub(super) const LOCAL_OVERLAY: &str = "plugins/iar/cluster-overlay";

/// Moves the overlay a store written by an earlier iar keeps at its
/// top (`cluster-overlay/`, which makes Velero refuse the store) to
/// [`LOCAL_OVERLAY`], once: one rename, so the objects earlier backups
/// created stay theirs. A failure is logged and the new place is used.
fn move_old_overlay(store: &Path, overlay: &Path) {
    let old = store.join("cluster-overlay");
    if !old.is_dir() || overlay.exists() {
        return;
    }
    let moved = overlay
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::rename(&old, overlay));
    match moved {
        Ok(()) => tracing::info!("moved {} to {}", old.display(), overlay.display()),
        Err(e) => tracing::warn!(
            "could not move {} to {}: {e}",
            old.display(),
            overlay.display()
        ),
    }
}

#[derive(clap::Args)]
pub struct StoreArg {
    /// The backup store: a directory, or file://, s3://, gs://, az:// URL.
    #[arg(long, env = "IAR_STORE", default_value = "iar-store")]
    pub(super) store: String,
    /// Where the objects plugins create go when the cluster is manifests
    /// (one YAML file each; edit one to play the controller that would act
    /// on it). Default: `plugins/iar/cluster-overlay` in a local store's
    /// directory (Velero keeps `plugins/` for plugins' own data, and
    /// refuses a store with a top-level directory it does not know),
    /// `iar-overlay` otherwise. Deleting a backup deletes what its plugins
    /// created there.
    #[arg(long, env = "IAR_OVERLAY", value_name = "DIR")]
    pub(super) overlay: Option<PathBuf>,
}

/// The volume repositories' password.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RepositoryArg {
    /// The password of the volume repositories, in a file (a Kubernetes
    /// Secret's key, mounted). With it, pod volume data goes into restic's
    /// repository format, one repository per namespace under
    /// `restic/<namespace>/` of the store: deduplicated across backups and
    /// encrypted. Without it, into the per-backup chunk format
    /// (deprecated).
    #[arg(long, env = "IAR_REPOSITORY_PASSWORD_FILE", value_name = "FILE")]
    pub(super) repository_password_file: Option<PathBuf>,
}

impl RepositoryArg {
    pub(super) fn password(&self) -> anyhow::Result<Option<iar::repository::Password>> {
        self.repository_password_file
            .as_deref()
            .map(iar::repository::Password::from_file)
            .transpose()
            .map_err(anyhow::Error::from)
    }
}

impl StoreArg {
    /// The manifest cluster's overlay directory.
    pub(super) fn overlay(&self) -> PathBuf {
        if let Some(dir) = &self.overlay {
            return dir.clone();
        }
        let local = self.store.strip_prefix("file://").unwrap_or(&self.store);
        if self.store.contains("://") && !self.store.starts_with("file://") {
            PathBuf::from("iar-overlay")
        } else {
            let overlay = Path::new(local).join(LOCAL_OVERLAY);
            move_old_overlay(Path::new(local), &overlay);
            overlay
        }
    }

    /// The manifests `sources` as the cluster, writing to the overlay.
    pub(super) fn cluster(&self, sources: Vec<PathBuf>) -> ManifestCluster {
        ManifestCluster::new(sources).with_overlay(self.overlay())
    }
}

/// What `backup` and `resume` share: the plugins, the store, the timings.
#[derive(clap::Args)]
pub struct RunnerArgs {
    /// A directory of plugins (*.wasm); `NAME.yaml` beside `NAME.wasm` holds
    /// its settings (config, limits, allowRead). Without it the backup runs
    /// no plugin, as a Velero backup with none installed.
    #[arg(long)]
    plugins: Option<PathBuf>,
    #[command(flatten)]
    store: StoreArg,
    /// How often operation progress is polled and persisted.
    #[arg(long, value_parser = iar::duration::parse_positive, default_value = "10s")]
    sync_period: Duration,
    /// Operation timeout, unless the spec sets itemOperationTimeout.
    #[arg(long, value_parser = iar::duration::parse_positive, default_value = "4h")]
    operation_timeout: Duration,
    /// A plugin setting, `key=value` for every plugin or `PLUGIN:key=value` for one
    /// (added to the plugin's NAME.yaml settings).
    #[arg(long = "config", value_name = "KEY=VALUE")]
    config: Vec<String>,
    /// How long this process's lease on the backup lasts without renewal
    /// (renewed every third of it). Another process may take over a backup
    /// whose holder died this long after its last renewal.
    #[arg(long, env = "IAR_LEASE_DURATION", value_parser = iar::duration::parse_positive, default_value = "15s")]
    lease_duration: Duration,
    /// Item-block workers: how many blocks have their actions run at once
    /// (default: the number of cores).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    workers: Option<u16>,
    /// Pod volume data: one directory per `namespace/pvc` (and
    /// `namespace/.pods/POD/VOLUME` for other volumes). Volumes chosen for a
    /// file-system backup are read from here into the store. A relative
    /// path is taken from the current directory (hooks run inside it).
    #[arg(long, value_name = "DIR", value_parser = absolute)]
    volume_data: Option<PathBuf>,
    #[command(flatten)]
    repository: RepositoryArg,
    /// How many volume backups run at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    volume_concurrency: u16,
    /// The longest one volume backup may take (Velero's
    /// --fs-backup-timeout); past it the volume fails (rule
    /// fs-backup-timeout).
    #[arg(long, value_parser = iar::duration::parse_positive, default_value = "4h")]
    fs_backup_timeout: Duration,
    /// Run backup hooks as local processes (argv as given, in DIR of
    /// --volume-data); without it hooks are recorded as skipped, with a warning.
    #[arg(long)]
    exec_hooks_locally: bool,
    /// The longest any backup hook runs. A pod annotation
    /// (`pre.hook.backup.velero.io/timeout`, `post.`) or a spec hook asking
    /// for more runs with this instead, and a warning says so (rule
    /// hook-timeout-cap).
    #[arg(long, value_parser = parse_max_hook_timeout, default_value = "30m")]
    max_hook_timeout: Duration,
}

/// `--max-hook-timeout`: a duration of at least one second (a cap of zero
/// would time every hook out at once).
pub(super) fn parse_max_hook_timeout(s: &str) -> Result<Duration, String> {
    let d = iar::duration::parse_non_negative(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(1) {
        return Err(format!("{s} is shorter than 1s: every hook would time out"));
    }
    Ok(d)
}

#[derive(clap::Args)]
pub struct BackupArgs {
    /// The backup's name.
    name: String,
    /// A manifest file or directory: the items to back up, and the cluster
    /// that cluster-get and finalize read (edit them to play a controller).
    /// Repeat the flag for more (`--items a --items b`): one value each, so
    /// that `--items DIR NAME` does not take the name for a second path.
    #[arg(long, required = true, num_args = 1)]
    items: Vec<PathBuf>,
    /// A Velero Backup object, or just its spec (YAML or JSON).
    #[arg(long)]
    spec: Option<PathBuf>,
    /// How long the backup is kept ("720h", "24h0m0s"): sets the spec's
    /// ttl. Unset or 0: 720h. `iar gc` deletes it after.
    #[arg(long, value_parser = iar::duration::parse_non_negative)]
    ttl: Option<Duration>,
    #[command(flatten)]
    runner: RunnerArgs,
}

#[derive(clap::Args)]
pub struct GcArgs {
    /// List what would be deleted, and delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// How long this process's lease on a backup it deletes lasts
    /// without renewal.
    #[arg(long, env = "IAR_LEASE_DURATION", value_parser = iar::duration::parse_positive, default_value = "15s")]
    lease_duration: Duration,
    #[command(flatten)]
    store: StoreArg,
    /// For the volume snapshots the deleted backups hold.
    #[command(flatten)]
    repository: RepositoryArg,
    #[command(flatten)]
    cluster: ClusterArg,
}

#[derive(clap::Args)]
pub struct ResumeArgs {
    /// The backup to continue.
    name: String,
    #[command(flatten)]
    runner: RunnerArgs,
}

/// Loads every plugin in a directory, in name order. One that fails to load
/// is an error naming it: a backup must not silently run without an action.
pub fn load_plugins(
    runtime: &Runtime,
    dir: &Path,
    config: &[String],
) -> anyhow::Result<Vec<Plugin>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading plugin directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
        .collect();
    paths.sort();
    let names: Vec<String> = paths
        .iter()
        .map(|p| iar::plugin::name_from_path(p))
        .collect();
    super::run::check_config_plugins(config, &names)?;
    let mut plugins = Vec::new();
    for path in paths {
        let sidecar = path.with_extension("yaml");
        let extra = super::run::plugin_config(config, &iar::plugin::name_from_path(&path))?;
        let settings = SettingsFile::read_or_default(&sidecar)?
            .into_settings(extra)
            .map_err(anyhow::Error::msg)?;
        plugins.push(Plugin::from_file(runtime, &path, settings)?);
    }
    if plugins.is_empty() {
        // Velero takes a backup with no plugins too; an empty directory is
        // more likely a mistake, so it is said.
        tracing::warn!(
            "no plugins (*.wasm) in {}; backing up without any",
            dir.display()
        );
    }
    Ok(plugins)
}

fn read_spec(path: Option<&Path>) -> anyhow::Result<serde_json::Value> {
    let Some(path) = path else {
        return Ok(serde_json::json!({}));
    };
    let doc = super::run::read_one_object(path)?;
    // A whole Backup object, or a bare spec.
    Ok(
        if doc.get("kind").and_then(|k| k.as_str()) == Some("Backup") {
            doc.get("spec").cloned().unwrap_or_default()
        } else {
            doc
        },
    )
}

fn exit_for(phase: BackupPhase) -> ExitCode {
    match phase {
        BackupPhase::Completed => ExitCode::SUCCESS,
        BackupPhase::PartiallyFailed => ExitCode::from(1),
        _ => ExitCode::from(2),
    }
}

/// The async runtime of every long-running command. Its threads get 8 MiB
/// of stack rather than 2: the controller's futures nest deep (kube's
/// client stack under a reconcile under the phase machine), and an
/// overflow aborts the whole process; the fault campaign's in-process
/// replicas, built for debugging, overflowed 2 MiB twice. Untouched
/// stack costs no memory.
pub(super) fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(8 << 20)
        .build()?)
}

/// The phase machine over `cluster` (the manifests the backup reads).
fn controller(args: &RunnerArgs, cluster: ManifestCluster) -> anyhow::Result<PhaseMachine> {
    let runtime = Runtime::new(RuntimeConfig::default()).context("starting the wasm runtime")?;
    let plugins = match &args.plugins {
        Some(dir) => load_plugins(&runtime, dir, &args.config)?,
        None => Vec::new(),
    };
    let store = BackupStore::open(&args.store.store)?;
    let cluster = Arc::new(cluster);
    let defaults = Settings::default();
    let settings = Settings {
        sync_period: args.sync_period,
        operation_timeout: args.operation_timeout,
        lease_duration: args.lease_duration,
        workers: args.workers.map_or(defaults.workers, usize::from),
        volume_data: args.volume_data.clone(),
        volume_concurrency: args.volume_concurrency.into(),
        repository_password: args.repository.password()?,
        fs_backup_timeout: args.fs_backup_timeout,
        exec_hooks_locally: args.exec_hooks_locally,
        max_hook_timeout: args.max_hook_timeout,
        ..defaults
    };
    Ok(PhaseMachine::new(plugins, store, cluster, settings)
        .with_observer(super::progress::observer()))
}

pub fn backup(args: BackupArgs) -> anyhow::Result<ExitCode> {
    let mut spec = read_spec(args.spec.as_deref())?;
    if let Some(ttl) = args.ttl {
        let Some(fields) = spec.as_object_mut() else {
            bail!("--ttl: the spec in {:?} is not an object", args.spec);
        };
        fields.insert(
            "ttl".into(),
            iar::backup::spec::format_go_duration(ttl).into(),
        );
    }
    // Every item file is read now, before the backup exists: a mistyped
    // path or a file that does not parse would otherwise leave a Failed
    // backup holding the name until it expires.
    let rt = tokio_runtime()?;
    let everything =
        iar::select::BackupFilter::from_spec(&serde_json::json!({})).map_err(anyhow::Error::msg)?;
    // Read into the cluster the backup then lists: its parse cache keeps
    // them, so the first pass does not read them again.
    let cluster = args.runner.store.cluster(args.items.clone());
    rt.block_on(cluster.list(&everything))
        .map_err(|e| anyhow::anyhow!("--items: {e}; no backup was created"))?;
    let c = controller(&args.runner, cluster)?;
    let request = BackupRequest {
        labels: Default::default(),
        name: args.name.clone(),
        namespace: "velero".into(),
        spec,
        sources: args.items,
        annotations: [(
            iar::backup::object::CONFIG_ANNOTATION.to_string(),
            serde_json::to_string(&args.runner.config)?,
        )]
        .into(),
    };
    let object = rt.block_on(c.run_backup(request));
    super::progress::finish();
    let object = object?;
    outln!(
        "Backup {:?} {}: {}, {} (iar describe {} --store {})",
        object.metadata.name,
        object.status.phase,
        counted(object.status.errors, "error"),
        counted(object.status.warnings, "warning"),
        object.metadata.name,
        args.runner.store.store
    );
    Ok(exit_for(object.status.phase))
}

/// Refuses a resume whose `--plugins` lacks a plugin (by name and digest)
/// the backup recorded when it started.
fn missing_plugins(
    rt: &tokio::runtime::Runtime,
    store: &BackupStore,
    args: &ResumeArgs,
) -> anyhow::Result<()> {
    let Some(recorded) = rt.block_on(iar::phases::recorded_plugins(store, &args.name))? else {
        return Ok(());
    };
    if recorded.is_empty() {
        return Ok(());
    }
    let loaded: Vec<(String, String)> = match &args.runner.plugins {
        Some(dir) => {
            let runtime =
                Runtime::new(RuntimeConfig::default()).context("starting the wasm runtime")?;
            load_plugins(&runtime, dir, &args.runner.config)?
                .iter()
                .map(|p| (p.name().to_string(), p.digest().to_string()))
                .collect()
        }
        None => Vec::new(),
    };
    let missing: Vec<String> = recorded
        .iter()
        .filter(|r| !loaded.contains(r))
        .map(|(name, digest)| format!("{name} (sha256:{digest})"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "backup {:?} started with plugins {} that {}: pass the --plugins directory it ran with; without them its pending operations would fail for good (rule: pinned-plugin-set). Nothing was changed",
        args.name,
        missing.join(", "),
        match &args.runner.plugins {
            Some(dir) => format!("{} does not hold", dir.display()),
            None => "are not loaded (no --plugins)".to_string(),
        }
    )
}

pub fn resume(args: ResumeArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio_runtime()?;
    let store = BackupStore::open_existing(&args.runner.store.store)?;
    let object: BackupObject = rt
        .block_on(store.get_json(&args.name, BackupFile::Metadata))?
        .with_context(|| {
            format!(
                "backup {:?} not found in {}",
                args.name, args.runner.store.store
            )
        })?;
    // Waiting and finalizing read the cluster: its recorded sources must
    // still be there. New/InProgress only become Failed, and a terminal
    // backup is only shown, so neither needs them; but a first pass cut
    // short may owe its pods' unfreezes, which are resolved on the pods
    // of its sources while they are there.
    let sources = match object.status.phase {
        BackupPhase::New => Vec::new(),
        BackupPhase::InProgress => iar::phases::recorded_sources(&object).unwrap_or_default(),
        // Ended, or being deleted (resume refuses it, saying so).
        phase if !phase.is_running() => Vec::new(),
        _ => iar::phases::recorded_sources(&object)?,
    };
    // Finalize must run with the settings the backup started with.
    let mut runner = args.runner;
    if runner.config.is_empty()
        && let Some(saved) = object
            .metadata
            .annotations
            .get(iar::backup::object::CONFIG_ANNOTATION)
    {
        runner.config =
            serde_json::from_str(saved).context("the backup's recorded plugin config")?;
    }
    let args = ResumeArgs {
        name: args.name,
        runner,
    };
    // Waiting and finalizing poll and finalize through the plugins the
    // backup started with: without them every pending operation would
    // fail for good (rule pinned-plugin-set). Refused before anything
    // changes, naming what is missing.
    if object.status.phase.is_running()
        && !matches!(
            object.status.phase,
            BackupPhase::New | BackupPhase::InProgress
        )
    {
        missing_plugins(&rt, &store, &args)?;
    }
    let c = controller(&args.runner, args.runner.store.cluster(sources))?;
    let object = rt.block_on(c.resume(&args.name));
    super::progress::finish();
    let object = object?;
    outln!(
        "Backup {:?} {}: {}, {}",
        object.metadata.name,
        object.status.phase,
        counted(object.status.errors, "error"),
        counted(object.status.warnings, "warning")
    );
    Ok(exit_for(object.status.phase))
}

/// A phase machine with no plugins, for the commands that read and delete
/// store files (`gc`, `delete`); its cluster is the overlay alone, so that
/// deleting a backup deletes what its plugins created there.
pub(super) fn store_only(
    store_arg: &StoreArg,
    lease_duration: Duration,
    repository: &RepositoryArg,
    live: Option<&tokio::runtime::Runtime>,
) -> anyhow::Result<PhaseMachine> {
    let store = BackupStore::open(&store_arg.store)?;
    let settings = Settings {
        lease_duration,
        repository_password: repository.password()?,
        ..Settings::default()
    };
    // With --cluster, what a controller's backups created is deleted from
    // the cluster the environment's kubeconfig reaches; without, the
    // manifests' overlay (a controller's backup that created objects is
    // then refused, rule created-in-cluster).
    let cluster: Arc<dyn iar::cluster::ClusterReader> = match live {
        Some(runtime) => Arc::new(live_cluster(runtime)?),
        None => Arc::new(store_arg.cluster(Vec::new())),
    };
    Ok(PhaseMachine::new(Vec::new(), store, cluster, settings))
}

/// A client of the cluster the environment reaches, for a command's
/// `--cluster`.
pub(super) fn cluster_client(
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<iar::k8s::Client> {
    runtime
        .block_on(iar::k8s::client())
        .context("--cluster: no cluster from KUBECONFIG, ~/.kube/config or a service account")
}

/// The cluster the environment reaches, for a command's `--cluster`.
pub(super) fn live_cluster(
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<iar::k8s::live::LiveCluster> {
    Ok(iar::k8s::live::LiveCluster::new(
        cluster_client(runtime)?,
        runtime.handle().clone(),
    ))
}

/// `--cluster` of `iar delete` and `iar gc`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ClusterArg {
    /// Delete what the backups' plugins created (pvc-snapshot's
    /// VolumeSnapshots) in the cluster the environment reaches (KUBECONFIG,
    /// ~/.kube/config, or the pod's service account): needed for a
    /// controller's backups whose plugins created objects, which are
    /// refused without it (rule created-in-cluster).
    #[arg(long)]
    pub(super) cluster: bool,
}

/// One garbage-collection sweep: each expired backup that has ended is
/// deleted; one line per backup deleted (or that would be) or failed.
/// Exits 1 if any failed.
pub fn gc(args: GcArgs) -> anyhow::Result<ExitCode> {
    use iar::phases::gc::Outcome;
    let runtime = tokio_runtime()?;
    let live = args.cluster.cluster.then_some(&runtime);
    let c = store_only(&args.store, args.lease_duration, &args.repository, live)?;
    let swept = runtime.block_on(c.collect_garbage(std::time::SystemTime::now(), args.dry_run))?;
    let (mut deleted, mut failed, mut kept) = (0, 0, 0);
    for collected in &swept {
        let name = &collected.name;
        let gone = |o: &BackupObject| {
            format!(
                "{name} ({}, expired {})",
                o.status.phase,
                o.status.expiration.as_deref().unwrap_or("-")
            )
        };
        match &collected.outcome {
            Outcome::Deleted(o) => {
                deleted += 1;
                outln!("deleted {}", gone(o));
            }
            Outcome::WouldDelete(o) => {
                deleted += 1;
                outln!("would delete {}", gone(o));
            }
            Outcome::Tidied => {
                deleted += 1;
                outln!(
                    "deleted {name} (what an interrupted deletion, or a first pass that never stored its object, left)"
                );
            }
            Outcome::Failed(reason) => {
                failed += 1;
                outln!("failed {name}: {reason}");
            }
            Outcome::Kept(_) => kept += 1,
        }
    }
    let verb = if args.dry_run {
        "would be deleted"
    } else {
        "deleted"
    };
    outln!("{deleted} {verb}, {failed} failed, {kept} kept");
    Ok(if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `path` from the current directory: hooks run inside `--volume-data`
/// and get its volumes' directories in `$IAR_VOLUME_DIR_*`, which a
/// relative path would point nowhere from there.
fn absolute(path: &str) -> Result<PathBuf, String> {
    std::path::absolute(path).map_err(|e| format!("{path}: {e}"))
}

/// `n` and `noun`, plural unless one: "1 error", "0 warnings".
pub(crate) fn counted(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::{BackupArgs, LOCAL_OVERLAY, StoreArg};
    use clap::Parser;
    use std::time::Duration;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: BackupArgs,
    }

    /// `--ttl 0` (what its help offers) and the rest of Go's syntax; a
    /// negative ttl (`--ttl=-24h`: clap takes `-24h` alone for a flag) is
    /// refused, naming the flag and the rule.
    #[test]
    fn ttl_and_timeouts_are_go_durations() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from([&["iar", "b", "--items", "i"], args].concat()).map(|c| c.args)
        };
        let args = parse(&["--ttl", "0", "--operation-timeout", "+1.5h"]).unwrap();
        assert_eq!(args.ttl, Some(Duration::ZERO));
        assert_eq!(args.runner.operation_timeout, Duration::from_secs(5400));
        assert_eq!(parse(&["--ttl=-0s"]).unwrap().ttl, Some(Duration::ZERO));
        let err = parse(&["--ttl=-24h"]).err().unwrap().to_string();
        assert!(
            err.contains("--ttl") && err.contains("rule: non-negative-duration"),
            "{err}"
        );
        let err = parse(&["--max-hook-timeout", "0.5s"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("shorter than 1s"), "{err}");
        // A zero period or lease is refused before a backup exists (a
        // zero sync period panicked mid-backup, a zero lease failed it).
        for flag in ["--sync-period", "--lease-duration", "--operation-timeout"] {
            let err = parse(&[flag, "0s"]).err().unwrap().to_string();
            assert!(
                err.contains(flag) && err.contains("rule: duration-positive"),
                "{err}"
            );
        }
    }

    /// A store with the old top-level `cluster-overlay/` (which Velero
    /// refuses) gets it moved under `plugins/iar/` with its objects, once;
    /// a remote store's overlay stays outside the store.
    #[test]
    fn an_old_top_level_overlay_moves_under_plugins() {
        let store = tempfile::tempdir().unwrap();
        let old = store.path().join("cluster-overlay/volumesnapshots/shop");
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(old.join("snap.yaml"), "kind: VolumeSnapshot\n").unwrap();
        let arg = StoreArg {
            store: store.path().to_str().unwrap().to_string(),
            overlay: None,
        };
        let overlay = arg.overlay();
        assert_eq!(overlay, store.path().join(LOCAL_OVERLAY));
        assert_eq!(
            std::fs::read_to_string(overlay.join("volumesnapshots/shop/snap.yaml")).unwrap(),
            "kind: VolumeSnapshot\n"
        );
        assert!(!store.path().join("cluster-overlay").exists());
        let top: Vec<_> = std::fs::read_dir(store.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(top, ["plugins"]);
        assert_eq!(arg.overlay(), overlay, "the second call finds it moved");

        let remote = StoreArg {
            store: "s3://bucket/prefix".into(),
            overlay: None,
        };
        assert_eq!(remote.overlay(), std::path::Path::new("iar-overlay"));
    }

    #[test]
    fn counts_read_as_english() {
        assert_eq!(super::counted(1u64, "error"), "1 error");
        assert_eq!(super::counted(0u64, "warning"), "0 warnings");
        assert_eq!(super::counted(2u64, "error"), "2 errors");
    }
}
