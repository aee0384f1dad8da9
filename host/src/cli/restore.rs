//! `iar restore`: a backup's objects back into a cluster (`--cluster`, the
//! API server the environment reaches) or into a directory of manifests
//! (`--to DIR`, one YAML file per object, for `kubectl apply -f DIR -R`),
//! as Velero's `restore create --from-backup` restores them.

use super::backup::load_plugins;
use anyhow::Context as _;
use iar::cluster::ClusterReader;
use iar::plugin::RestoreRef;
use iar::restore::hooks::post::PodExec;
use iar::restore::spec::RestoreSpec;
use iar::store::BackupStore;
use iar::store::restores::RestoreFile;
use serde_json::{Map, Value, json};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::SystemTime;

#[derive(clap::Args)]
pub struct RestoreArgs {
    /// The restore's name; by default the backup's, a dash and the UTC
    /// time (yyyyMMddHHmmss), as Velero's CLI names one.
    name: Option<String>,
    /// The backup to restore (Completed or PartiallyFailed).
    #[arg(long, value_name = "BACKUP")]
    from_backup: Option<String>,
    /// A Velero Restore object, or its spec (YAML or JSON); the flags
    /// below add to it.
    #[arg(long, value_name = "FILE")]
    spec: Option<PathBuf>,
    /// Only these namespaces (as backed up; globs as Velero's).
    #[arg(long, value_delimiter = ',', value_name = "NS")]
    include_namespaces: Vec<String>,
    /// Not these namespaces.
    #[arg(long, value_delimiter = ',', value_name = "NS")]
    exclude_namespaces: Vec<String>,
    /// Only these resources (`configmaps`, `deployments.apps`).
    #[arg(long, value_delimiter = ',', value_name = "RESOURCE")]
    include_resources: Vec<String>,
    /// Not these resources.
    #[arg(long, value_delimiter = ',', value_name = "RESOURCE")]
    exclude_resources: Vec<String>,
    /// Restore namespace SRC into DST: `SRC1:DST1,SRC2:DST2`.
    #[arg(long, value_delimiter = ',', value_name = "SRC:DST")]
    namespace_mappings: Vec<String>,
    /// Only objects with these labels: `key=value,key2=value2`.
    #[arg(long, short = 'l', value_name = "KEY=VALUE,...")]
    selector: Option<String>,
    /// Whether to restore cluster-scoped objects (by default: when every
    /// namespace is restored).
    #[arg(long)]
    include_cluster_resources: Option<bool>,
    /// `none` leaves an object that already exists (a warning when it
    /// differs); `update` replaces it with the backed-up one.
    #[arg(long, value_name = "none|update")]
    existing_resource_policy: Option<String>,
    /// Whether to restore the backup's CSI volume snapshots (Velero's
    /// `--restore-volumes`, `restorePVs`): `false` restores none.
    #[arg(long, value_name = "BOOL")]
    restore_volumes: Option<bool>,
    /// Keep Services' node ports instead of letting the cluster assign new
    /// ones.
    #[arg(long)]
    preserve_nodeports: bool,
    /// A directory of plugins (*.wasm); the restore actions among them run
    /// on the objects they apply to.
    #[arg(long)]
    plugins: Option<PathBuf>,
    /// A plugin setting, `KEY=VALUE` (every plugin) or `PLUGIN:KEY=VALUE`.
    #[arg(long = "config", value_name = "KEY=VALUE")]
    config: Vec<String>,
    /// The backup store: a directory, or file://, s3://, gs://, az:// URL.
    #[arg(long, env = "IAR_STORE", default_value = "iar-store")]
    store: String,
    /// Write the restored objects under DIR (one YAML file each,
    /// `<resource>.<group>/<namespace>/<name>.yaml`) instead of creating
    /// them; an object whose file is there already is left.
    #[arg(long, value_name = "DIR", required_unless_present = "cluster")]
    to: Option<PathBuf>,
    /// Create the objects in the cluster the environment reaches
    /// (KUBECONFIG, ~/.kube/config, or the pod's service account).
    #[arg(long, conflicts_with = "to")]
    cluster: bool,
}

/// The spec the file and the flags make.
fn build_spec(args: &RestoreArgs) -> anyhow::Result<Value> {
    let mut spec = match &args.spec {
        Some(path) => {
            let doc = super::run::read_one_object(path)?;
            let spec = if doc.get("kind").and_then(Value::as_str) == Some("Restore") {
                doc.get("spec").cloned().unwrap_or_else(|| json!({}))
            } else {
                doc
            };
            match spec {
                Value::Object(m) => m,
                _ => anyhow::bail!("{}: not a Restore spec (an object)", path.display()),
            }
        }
        None => Map::new(),
    };
    let mut set = |key: &str, v: Value| {
        spec.insert(key.to_string(), v);
    };
    if let Some(b) = &args.from_backup {
        set("backupName", json!(b));
    }
    for (key, list) in [
        ("includedNamespaces", &args.include_namespaces),
        ("excludedNamespaces", &args.exclude_namespaces),
        ("includedResources", &args.include_resources),
        ("excludedResources", &args.exclude_resources),
    ] {
        if !list.is_empty() {
            set(key, json!(list));
        }
    }
    if !args.namespace_mappings.is_empty() {
        let mut mapping = Map::new();
        for pair in &args.namespace_mappings {
            let (from, to) = pair
                .split_once(':')
                .with_context(|| format!("--namespace-mappings {pair:?}: expected SRC:DST"))?;
            mapping.insert(from.to_string(), json!(to));
        }
        set("namespaceMapping", Value::Object(mapping));
    }
    if let Some(selector) = &args.selector {
        let mut labels = Map::new();
        for pair in selector.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').with_context(|| {
                format!("--selector {pair:?}: expected key=value (set-based selectors go in --spec's labelSelector)")
            })?;
            labels.insert(k.trim().to_string(), json!(v.trim()));
        }
        set("labelSelector", json!({ "matchLabels": labels }));
    }
    if let Some(b) = args.include_cluster_resources {
        set("includeClusterResources", json!(b));
    }
    if let Some(b) = args.restore_volumes {
        set("restorePVs", json!(b));
    }
    if let Some(p) = &args.existing_resource_policy {
        set("existingResourcePolicy", json!(p));
    }
    if args.preserve_nodeports {
        set("preserveNodePorts", json!(true));
    }
    Ok(Value::Object(spec))
}

/// The namespace a command-line restore is said to run in (its record's,
/// and where Velero's change-storage-class ConfigMap is read): iar's own,
/// as deploy/ makes it.
const RESTORE_NAMESPACE: &str = "iar";

pub fn restore(args: RestoreArgs) -> anyhow::Result<ExitCode> {
    let spec_value = build_spec(&args)?;
    let spec = RestoreSpec::from_value(&spec_value).map_err(anyhow::Error::msg)?;
    let started = SystemTime::now();
    let name = match &args.name {
        Some(n) => n.clone(),
        None => format!(
            "{}-{}",
            spec.backup_name,
            humantime::format_rfc3339_seconds(started)
                .to_string()
                .replace(['-', ':', 'T', 'Z'], "")
        ),
    };
    iar::names::dns_subdomain(&name)
        .map_err(|e| anyhow::anyhow!("restore name {name:?}: {e} (rule: restore-name)"))?;
    let runtime = super::backup::tokio_runtime()?;
    let store = BackupStore::open_existing(&args.store)?;
    if runtime
        .block_on(store.get_restore(&name, RestoreFile::Object))?
        .is_some()
    {
        anyhow::bail!(
            "restore {name:?} already exists in {}; name another (iar restore NAME --from-backup ...)",
            args.store
        );
    }
    let backup = &spec.backup_name;
    let loaded = runtime
        .block_on(iar::restore::stored::load(&store, backup))
        .map_err(anyhow::Error::msg)?;

    let plugins = match &args.plugins {
        Some(dir) => {
            let wasm = iar::Runtime::new(iar::RuntimeConfig::default())
                .context("starting the wasm runtime")?;
            load_plugins(&wasm, dir, &args.config)?
        }
        None => Vec::new(),
    };
    // Into a cluster, restored pods' exec hooks run in their containers,
    // and Velero's change-storage-class and change-image-name ConfigMaps
    // in the restore's namespace apply; into a directory there is neither.
    let mut configs = Default::default();
    let (cluster, exec): (Arc<dyn ClusterReader>, Option<Arc<dyn PodExec>>) = if args.cluster {
        let client = super::backup::cluster_client(&runtime)?;
        let handle = runtime.handle().clone();
        configs = runtime
            .block_on(iar::k8s::restores::velero_configs_in(
                &client,
                RESTORE_NAMESPACE,
            ))
            .map_err(anyhow::Error::msg)?;
        (
            Arc::new(iar::k8s::live::LiveCluster::new(
                client.clone(),
                handle.clone(),
            )),
            Some(Arc::new(iar::k8s::exec::RestoreHookExec::new(
                client, handle,
            ))),
        )
    } else {
        let dir = args.to.clone().expect("clap: --to without --cluster");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        (
            Arc::new(iar::ManifestCluster::new(Vec::new()).with_overlay(dir)),
            None,
        )
    };
    let restore_ref = RestoreRef {
        object: None,
        name: name.clone(),
        namespace: RESTORE_NAMESPACE.into(),
        uid: iar::restore::new_uid(&name, started),
        spec: spec.raw.clone(),
    };
    let outcome = iar::restore::stored::restore(
        iar::restore::Context {
            spec: &spec,
            restore: restore_ref.clone(),
            cluster,
            plugins: &plugins,
            stop: None,
            exec,
            configs,
            pod_volumes: None,
        },
        loaded,
    );
    let phase = outcome.phase();
    let status = iar::restore::stored::status(&outcome, started, SystemTime::now());
    runtime.block_on(iar::restore::stored::save(
        &store,
        &restore_ref,
        &outcome,
        &status,
    ))?;
    let results = &outcome.results;
    outln!(
        "Restore {name} from backup {backup}: {phase} ({} of {} objects restored, {} already there; {} warnings, {} errors)",
        outcome.restored,
        outcome.selected,
        outcome.existing,
        results.warnings.count(),
        results.errors.count()
    );
    for line in results.warnings.lines() {
        outln!("  warning: {line}");
    }
    for line in results.errors.lines() {
        outln!("  error: {line}");
    }
    Ok(match phase {
        "Completed" => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}
