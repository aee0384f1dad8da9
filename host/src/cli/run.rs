//! `iar run`: plugins on one item, no cluster needed.

use anyhow::{Context, bail};
use iar::catalog::Catalog;
use iar::plugin::{CallError, Phase, RestoreRef};
use iar::{
    BackupRef, ClusterReader, Item, ManifestCluster, NoCluster, Plugin, PluginSettings, Runtime,
    RuntimeConfig,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args)]
pub struct RunArgs {
    /// A plugin's .wasm file; repeat to run several, in order.
    #[arg(long = "plugin", required = true)]
    plugins: Vec<PathBuf>,
    /// The item: a YAML or JSON manifest holding one object.
    #[arg(long)]
    item: PathBuf,
    /// A Velero Backup object (YAML or JSON) the calls belong to.
    #[arg(long)]
    backup: Option<PathBuf>,
    /// Which pass of the backup to run.
    #[arg(long, value_enum, default_value = "backup")]
    phase: PhaseArg,
    /// A plugin setting, `key=value` for every plugin or `PLUGIN:key=value` for one.
    #[arg(long = "config", value_name = "KEY=VALUE")]
    config: Vec<String>,
    /// A directory (or file) of manifests that `cluster-get` answers from.
    #[arg(long)]
    cluster: Option<PathBuf>,
    /// Answer the plugins' cluster calls (get, list, discovery, /version)
    /// from the cluster the environment reaches (KUBECONFIG, ~/.kube/config,
    /// or the pod's service account) instead of manifests. Writes there
    /// only what `--allow-write` grants (none by default), under
    /// cluster-write's rules.
    #[arg(long, conflicts_with_all = ["cluster", "overlay"])]
    live_cluster: bool,
    /// Call progress for this operation id instead of execute.
    #[arg(long, value_name = "OPERATION_ID")]
    progress: Option<String>,
    /// Call get-related-items (contract 1.1.0 item-block-action) instead of
    /// execute, and print the related items' identifiers.
    #[arg(long, conflicts_with = "progress")]
    related: bool,
    /// Call the restore action (contract 1.3.0 restore-item-action)
    /// instead of the backup action: `--item` is the item as backed up,
    /// given to the plugin as Velero gives it (status and server-set
    /// metadata dropped, in its backed-up namespace; `finalItem` is in the
    /// mapped one); with `--progress`, a restore operation's progress.
    #[arg(long, conflicts_with = "related")]
    restore: bool,
    /// A Velero Restore object (YAML or JSON) for `--restore`: its
    /// `spec.namespaceMapping` is applied to the item after the actions,
    /// and its filters hold the additional items they name.
    #[arg(long, value_name = "FILE", requires = "restore")]
    restore_object: Option<PathBuf>,
    /// CPU deadline of each call.
    #[arg(long, value_parser = iar::duration::parse_non_negative)]
    deadline: Option<Duration>,
    /// Memory cap of each instance ("64MiB").
    #[arg(long, value_parser = iar::limits::parse_bytes)]
    memory: Option<usize>,
    /// Instance lifetime: `item` (fresh per call) or `backup` (per pass).
    #[arg(long)]
    isolation: Option<iar::Isolation>,
    /// Resources (globs over `resource.group`) plugins may read with cluster-get,
    /// and be handed as the item (a Secret only with the exact entry `secrets`);
    /// default: all but secrets.
    #[arg(long = "allow-read", value_name = "RESOURCE")]
    allow_read: Vec<String>,
    /// Resources (exact `resource.group`) plugins may create and delete
    /// (contract 1.2.0's cluster-write); default none.
    #[arg(long = "allow-write", value_name = "RESOURCE")]
    allow_write: Vec<String>,
    /// Resources whose items plugins may change (globs over
    /// `resource.group`; RBAC, webhook configurations, Secrets and
    /// ServiceAccounts only by exact name; a pod's security fields only by
    /// `RESOURCE/security`); default none: a changed item is refused.
    #[arg(long = "allow-mutate", value_name = "RESOURCE")]
    allow_mutate: Vec<String>,
    /// Where objects plugins create go, one YAML file each, read back by
    /// later lookups (and later runs given the same directory); without
    /// it, creates are refused (rule cluster-read-only).
    #[arg(long, value_name = "DIR")]
    overlay: Option<PathBuf>,
    /// Write every cluster-get and its answer to this YAML file, for an
    /// `iar test` case to `replay:`.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PhaseArg {
    Backup,
    Finalize,
}

pub(crate) fn read_one_object(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut docs = iar::manifests::parse_documents(path, &text)?;
    if docs.len() != 1 {
        bail!(
            "{}: expected exactly one object, found {}",
            path.display(),
            docs.len()
        );
    }
    Ok(docs.remove(0))
}

fn backup_ref(path: Option<&Path>, phase: Phase) -> anyhow::Result<BackupRef> {
    let obj = match path {
        Some(p) => read_one_object(p)?,
        None => json!({}),
    };
    let field = |ptr: &str, default: &str| {
        obj.pointer(ptr)
            .and_then(Value::as_str)
            .unwrap_or(default)
            .to_string()
    };
    Ok(BackupRef {
        // The file as it is (`runs.backup`); without one, the host builds
        // the least Velero's type needs.
        object: path.map(|_| Arc::from(obj.to_string())),
        name: field("/metadata/name", "iar-run"),
        namespace: field("/metadata/namespace", "velero"),
        uid: field("/metadata/uid", "00000000-0000-0000-0000-000000000000"),
        spec: obj.get("spec").cloned().unwrap_or_else(|| json!({})),
        phase,
    })
}

fn restore_ref(path: Option<&Path>) -> anyhow::Result<RestoreRef> {
    let obj = match path {
        Some(p) => read_one_object(p)?,
        None => json!({"spec": {"backupName": "iar-run"}}),
    };
    let field = |ptr: &str, default: &str| {
        obj.pointer(ptr)
            .and_then(Value::as_str)
            .unwrap_or(default)
            .to_string()
    };
    Ok(RestoreRef {
        object: path.map(|_| Arc::from(obj.to_string())),
        name: field("/metadata/name", "iar-run-restore"),
        namespace: field("/metadata/namespace", "velero"),
        uid: field("/metadata/uid", "00000000-0000-0000-0000-000000000001"),
        spec: obj.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

/// Splits `--config` values into per-plugin maps.
pub(crate) fn plugin_config(
    pairs: &[String],
    plugin: &str,
) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for pair in pairs {
        let (key, value) = pair.split_once('=').with_context(|| {
            format!("--config {pair:?}: expected KEY=VALUE or PLUGIN:KEY=VALUE")
        })?;
        match key.split_once(':') {
            Some((p, k)) if p == plugin => {
                out.insert(k.to_string(), value.to_string());
            }
            Some(_) => {}
            None => {
                out.insert(key.to_string(), value.to_string());
            }
        }
    }
    Ok(out)
}

/// Refuses a `PLUGIN:KEY=VALUE` whose PLUGIN is none of `names` (the
/// plugins this command runs): a setting for a plugin that is not there
/// would otherwise be dropped without a word.
pub(crate) fn check_config_plugins(pairs: &[String], names: &[String]) -> anyhow::Result<()> {
    for pair in pairs {
        let Some((key, _)) = pair.split_once('=') else {
            continue;
        };
        if let Some((plugin, _)) = key.split_once(':')
            && !names.iter().any(|n| n == plugin)
        {
            anyhow::bail!(
                "--config {pair:?}: no plugin named {plugin:?} here (plugins: {}); a plugin is named after its file, labels.wasm is \"labels\"",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            );
        }
    }
    Ok(())
}

fn error_json(e: &CallError) -> Value {
    json!({ "rule": e.violation.rule(), "message": e.to_string() })
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let runtime = Runtime::new(RuntimeConfig::default()).context("starting the wasm runtime")?;
    let phase = match args.phase {
        PhaseArg::Backup => Phase::Backup,
        PhaseArg::Finalize => Phase::Finalize,
    };
    let backup = backup_ref(args.backup.as_deref(), phase)?;
    let mut item = Item::from_value(read_one_object(&args.item)?, Catalog::builtin())
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.item.display()))?;
    let restore = match args.restore {
        true => Some(restore_ref(args.restore_object.as_deref())?),
        false => None,
    };
    // A restore's actions see the item as Velero hands it to them; what
    // was backed up stays beside it.
    let from_backup = item.clone();
    if let Some(r) = &restore {
        item = r
            .as_restored(&from_backup)
            .map_err(|e| anyhow::anyhow!("{}: as restored: {e}", args.item.display()))?;
    }
    // The live cluster's client lives on this runtime; plugin calls block
    // on it from this thread, outside it.
    let kube_runtime = match args.live_cluster {
        true => Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .context("starting the cluster client's runtime")?,
        ),
        false => None,
    };
    let cluster: Arc<dyn ClusterReader> = match (&kube_runtime, &args.cluster, &args.overlay) {
        (Some(rt), _, _) => Arc::new(super::backup::live_cluster(rt)?),
        (None, Some(dir), Some(overlay)) => {
            Arc::new(ManifestCluster::new(vec![dir.clone()]).with_overlay(overlay.clone()))
        }
        (None, None, Some(overlay)) => {
            Arc::new(ManifestCluster::new(Vec::new()).with_overlay(overlay.clone()))
        }
        (None, Some(dir), None) => Arc::new(ManifestCluster::new(vec![dir.clone()])),
        (None, None, None) => Arc::new(NoCluster),
    };
    let recorder = args.record.as_ref().map(|_| {
        Arc::new(iar::authoring::stubs::RecordingCluster::new(
            cluster.clone(),
        ))
    });
    let cluster: Arc<dyn ClusterReader> = match &recorder {
        Some(r) => r.clone(),
        None => cluster,
    };
    let grants = if args.allow_read.is_empty() {
        iar::ReadGrants::default()
    } else {
        iar::ReadGrants::only(&args.allow_read).map_err(anyhow::Error::msg)?
    };

    let write_grants =
        iar::cluster::writes::WriteGrants::only(&args.allow_write).map_err(anyhow::Error::msg)?;
    let mutate_grants =
        iar::cluster::mutate::MutateGrants::only(&args.allow_mutate).map_err(anyhow::Error::msg)?;

    let names: Vec<String> = args
        .plugins
        .iter()
        .map(|p| iar::plugin::name_from_path(p))
        .collect();
    check_config_plugins(&args.config, &names)?;
    let mut results = Vec::new();
    let mut failed = Vec::new();
    for path in &args.plugins {
        let name = iar::plugin::name_from_path(path);
        let mut settings = PluginSettings {
            config: plugin_config(&args.config, &name)?,
            grants: grants.clone(),
            write_grants: write_grants.clone(),
            mutate_grants: mutate_grants.clone(),
            // Its applies-to reads the cluster its calls will.
            load_cluster: iar::plugin::LoadCluster(Some(cluster.clone())),
            ..PluginSettings::default()
        };
        if let Some(d) = args.deadline {
            settings.limits.deadline = d;
        }
        if let Some(m) = args.memory {
            settings.limits.memory_bytes = m;
        }
        if let Some(i) = args.isolation {
            settings.limits.isolation = i;
        }
        let plugin = match Plugin::from_file(&runtime, path, settings) {
            Ok(p) => p,
            Err(e) => {
                failed.push(e.to_string());
                results.push(json!({ "plugin": name, "error": { "rule": "load", "message": e.to_string() } }));
                continue;
            }
        };
        let (interface, call) = match (args.related, args.restore) {
            (true, _) => (
                iar::plugin::Interface::ItemBlockAction,
                iar::plugin::Call::GetRelatedItems,
            ),
            (_, true) => (
                iar::plugin::Interface::RestoreItemAction,
                iar::plugin::Call::RestoreExecute,
            ),
            _ => (
                iar::plugin::Interface::ItemAction,
                iar::plugin::Call::Execute,
            ),
        };
        if interface != iar::plugin::Interface::ItemAction && !plugin.exports(interface) {
            results.push(json!({ "plugin": name, "applies": false,
                "reason": format!("does not export {interface}") }));
            continue;
        }
        let applies = match interface {
            iar::plugin::Interface::ItemBlockAction => plugin.block_applies(&item),
            // Velero picks restore actions by the item's target namespace.
            iar::plugin::Interface::RestoreItemAction => match &restore {
                Some(r) => plugin.restore_applies(&r.mapped(&item)?),
                None => plugin.restore_applies(&item),
            },
            iar::plugin::Interface::ItemAction => plugin.applies(&item),
        };
        if !applies {
            let mut entry = json!({ "plugin": name, "applies": false });
            // Said, so that a plugin its grants keep from an item is not
            // mistaken for one whose selector skips it.
            if !plugin.may_read(&item, call) {
                entry["reason"] = json!(format!(
                    "its read grants do not allow {} (rule: {})",
                    item.id.group_resource(),
                    iar::plugin::READ_GRANT_RULE
                ));
            }
            results.push(entry);
            continue;
        }
        let mut instance = plugin.instance(cluster.clone());
        let outcome = match (&args.progress, &restore) {
            _ if args.related => instance
                .get_related_items(&item, &backup)
                .map(|ids| json!({ "related": ids })),
            (Some(op), Some(r)) => instance
                .restore_progress(op, &item.id, r)
                .map(|p| json!({ "progress": p })),
            (None, Some(r)) => instance
                .restore_execute(&item, &from_backup, r, &|_| false)
                .map(|out| {
                    if let Some(changed) = &out.item {
                        item = changed.clone();
                    }
                    json!({ "output": out })
                }),
            (Some(op), None) => instance
                .progress(op, &item.id, &backup)
                .map(|p| json!({ "progress": p })),
            (None, None) => instance.execute(&item, &backup, &|_| false).map(|out| {
                if let Some(changed) = &out.item {
                    // The next plugin sees the item as this one left it, as in Velero.
                    item = changed.clone();
                }
                json!({ "output": out })
            }),
        };
        let logs = instance.take_logs();
        let mut entry = json!({ "plugin": name, "applies": true, "logs": logs });
        let created = instance.take_created();
        if !created.is_empty() {
            entry["created"] = json!(created);
        }
        match outcome {
            Ok(Value::Object(fields)) => entry.as_object_mut().expect("object").extend(fields),
            Ok(_) => unreachable!("outcomes are objects"),
            Err(e) => {
                failed.push(e.to_string());
                entry["error"] = error_json(&e);
            }
        }
        results.push(entry);
    }
    // The item as the restore creates it: in its mapped namespace.
    let final_item = match &restore {
        Some(r) => r.mapped(&item)?,
        None => item.clone(),
    };
    let report = json!({
        "item": final_item.id,
        "phase": match restore {
            Some(_) => json!("restore"),
            None => json!(backup.phase),
        },
        "results": results,
        "finalItem": final_item.value(),
    });
    outln!("{}", serde_json::to_string_pretty(&report)?);
    if let (Some(path), Some(recorder)) = (&args.record, &recorder) {
        let text = format!(
            "# cluster-get answers recorded by `iar run`; replay them in an iar test case with `replay:`\n{}",
            iar::yaml::to_string(&recorder.recording())?
        );
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(first) = failed.first() {
        let more = if failed.len() > 1 {
            format!(" (and {} more)", failed.len() - 1)
        } else {
            String::new()
        };
        eprintln!("iar: {}{more}", super::one_line(first));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
