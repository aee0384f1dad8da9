//! `iar describe` and `iar get`: a stored backup, and every backup, as
//! the store holds them.

use super::backup::{StoreArg, tokio_runtime};
use anyhow::Context;
use iar::backup::object::{BackupObject, Results};
use iar::backup::volumes::VolumeBackup;
use iar::cluster::writes::CreatedObject;
use iar::operations::Operation;
use iar::store::{BackupFile, BackupStore};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct DescribeArgs {
    name: String,
    /// NAME is a restore (`iar restore`'s), not a backup: its spec,
    /// phase, counts, warnings and errors.
    #[arg(long)]
    restore: bool,
    #[command(flatten)]
    store: StoreArg,
    #[command(flatten)]
    through: super::through_cluster::ThroughCluster,
    /// `json` or `yaml`: the Backup as stored (Velero's
    /// `velero-backup.json`), as `velero backup describe -o` prints it.
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(clap::Args)]
pub struct GetArgs {
    #[command(flatten)]
    store: StoreArg,
    /// `json` or `yaml`: a BackupList of every stored Backup.
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

/// How `describe` and `get` print.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
    Yaml,
}

/// Prints `value` as `output` asks (never `Text`).
fn print_as(output: Output, value: &serde_json::Value) -> anyhow::Result<()> {
    match output {
        Output::Json => outln!("{}", serde_json::to_string_pretty(value)?),
        Output::Yaml => out!("{}", iar::yaml::to_string(value)?),
        Output::Text => unreachable!("text is printed by its command"),
    }
    Ok(())
}

/// A restore's record (its spec and status) and results: as the store
/// keeps them, or (`--cluster`) the Restore resource and its results
/// through a DownloadRequest, with no store credentials.
fn restore_record(args: &DescribeArgs) -> anyhow::Result<(serde_json::Value, Option<Vec<u8>>)> {
    use iar::store::restores::RestoreFile;
    let name = &args.name;
    if args.through.cluster {
        let reader = args.through.connect()?;
        let resource = reader
            .restore(name)?
            .with_context(|| format!("no Restore {name:?} in namespace {}", reader.namespace()))?;
        let record = serde_json::json!({
            "metadata": {"name": name, "namespace": reader.namespace()},
            "spec": resource.spec.fields,
            "status": resource.status.unwrap_or_default(),
        });
        return Ok((record, reader.fetch("RestoreResults", name)?));
    }
    let rt = tokio_runtime()?;
    let store = BackupStore::open_existing(&args.store.store)?;
    let (record, results) = rt.block_on(async {
        let record = store.get_restore(name, RestoreFile::Object).await?;
        let results = store.get_restore(name, RestoreFile::Results).await?;
        anyhow::Ok((record, results))
    })?;
    let record: serde_json::Value = serde_json::from_slice(
        &record.with_context(|| format!("restore {name:?} not found in {}", args.store.store))?,
    )
    .with_context(|| format!("restore {name:?}: its record is not JSON"))?;
    Ok((record, results))
}

/// A restore: its record and its results ([`restore_record`]).
fn describe_restore(args: &DescribeArgs) -> anyhow::Result<ExitCode> {
    let name = &args.name;
    let (record, results) = restore_record(args)?;
    let results: Results = match results {
        Some(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("restore {name:?}: its results are not JSON"))?,
        None => Results::default(),
    };
    if args.output != Output::Text {
        return print_as(args.output, &record).map(|()| ExitCode::SUCCESS);
    }
    let field = |ptr: &str| {
        record
            .pointer(ptr)
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .unwrap_or_else(|| "-".into())
    };
    outln!("Name:         {name}");
    outln!("Backup:       {}", field("/spec/backupName"));
    outln!("Phase:        {}", field("/status/phase"));
    if let Some(mapping) = record
        .pointer("/spec/namespaceMapping")
        .filter(|v| !v.is_null())
    {
        outln!("Mapping:      {mapping}");
    }
    outln!("Started:      {}", field("/status/startTimestamp"));
    outln!("Completed:    {}", field("/status/completionTimestamp"));
    outln!(
        "Items:        {} of {} restored",
        field("/status/progress/itemsRestored"),
        field("/status/progress/totalItems")
    );
    if let Some(hooks) = record.pointer("/status/hookStatus") {
        let count = |key: &str| {
            hooks
                .get(key)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
        };
        outln!(
            "Hooks:        {} attempted, {} failed",
            count("hooksAttempted"),
            count("hooksFailed")
        );
    }
    if let Some(volumes) = record.pointer("/status/podVolumeRestores") {
        let count = |key: &str| {
            volumes
                .get(key)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
        };
        outln!(
            "Pod volumes:  {} restored, {} failed",
            count("completed"),
            count("failed")
        );
    }
    for (label, set) in [
        ("Errors:", &results.errors),
        ("Warnings:", &results.warnings),
    ] {
        outln!("{label:<13} {}", set.count());
        for line in set.lines() {
            outln!("  {line}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn describe(args: DescribeArgs) -> anyhow::Result<ExitCode> {
    if args.restore {
        return describe_restore(&args);
    }
    let name = &args.name;
    let (object, results, ops, volumes, created) = if args.through.cluster {
        through_cluster(&args.through, name)?
    } else {
        from_store(&args.store.store, name)?
    };
    if args.output != Output::Text {
        print_as(args.output, &serde_json::to_value(&object)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let s = &object.status;
    outln!("Name:         {}", object.metadata.name);
    outln!("Phase:        {}", s.phase);
    for (label, key) in [
        ("Namespaces:", "includedNamespaces"),
        ("Excluded:", "excludedNamespaces"),
        ("Resources:", "includedResources"),
        ("Excluded:", "excludedResources"),
    ] {
        if let Some(list) = object.spec.get(key).and_then(|v| v.as_array())
            && !list.is_empty()
        {
            let names: Vec<&str> = list.iter().filter_map(|v| v.as_str()).collect();
            outln!("{label:<13} {}", names.join(", "));
        }
    }
    if let Some(selector) = object.spec.get("labelSelector").filter(|v| !v.is_null()) {
        outln!("Selector:     {selector}");
    }
    if !s.failure_reason.is_empty() {
        outln!("Failure:      {}", s.failure_reason);
    }
    outln!(
        "Started:      {}",
        s.start_timestamp.as_deref().unwrap_or("-")
    );
    outln!(
        "Completed:    {}",
        s.completion_timestamp.as_deref().unwrap_or("-")
    );
    outln!("Expires:      {}", expires_in(&object));
    if let Some(hooks) = &s.hook_status {
        outln!(
            "Hooks:        {} attempted, {} failed",
            hooks.hooks_attempted,
            hooks.hooks_failed
        );
    }
    outln!(
        "Items:        {} of {} backed up",
        s.progress.items_backed_up,
        s.progress.total_items
    );
    outln!(
        "Operations:   {} attempted, {} completed, {} failed",
        s.backup_item_operations_attempted,
        s.backup_item_operations_completed,
        s.backup_item_operations_failed
    );
    outln!("Errors:       {}", results.errors.count());
    for e in results.errors.all() {
        outln!("  {e}");
    }
    outln!("Warnings:     {}", results.warnings.count());
    for w in results.warnings.all() {
        outln!("  {w}");
    }
    if !ops.is_empty() {
        outln!(
            "\n{:<28} {:<24} {:<40} {:<11} {:>9}  DESCRIPTION",
            "OPERATION",
            "PLUGIN",
            "ITEM",
            "PHASE",
            "PROGRESS"
        );
        for op in &ops {
            let progress = if op.status.n_total > 0 {
                format!("{}/{}", op.status.n_completed, op.status.n_total)
            } else {
                "-".into()
            };
            let detail = if op.status.error.is_empty() {
                &op.status.description
            } else {
                &op.status.error
            };
            outln!(
                "{:<28} {:<24} {:<40} {:<11} {:>9}  {}",
                op.spec.operation_id,
                op.spec.backup_item_action,
                op.spec.resource_identifier.to_string(),
                format!("{:?}", op.status.phase),
                progress,
                detail
            );
        }
    }
    if !volumes.is_empty() {
        outln!(
            "\n{:<48} {:<11} {:>21}  {:<20} ERROR",
            "VOLUME BACKUP",
            "PHASE",
            "BYTES",
            "SNAPSHOT"
        );
        for v in &volumes {
            // A repository snapshot as restic names it (`restic -r
            // .../restic/NS snapshots`): the repository and the short id.
            let snapshot = match v.manifest_key.as_deref() {
                Some(key) => match iar::backup::volumes::parse_snapshot_key(key) {
                    Some((ns, id)) => format!("restic/{ns} {}", &id[..8]),
                    None => "chunks".to_string(),
                },
                None => "-".to_string(),
            };
            outln!(
                "{:<48} {:<11} {:>21}  {:<20} {}",
                format!("{}/{}/{}", v.pod_namespace, v.pod_name, v.volume),
                format!("{:?}", v.phase),
                format!("{}/{}", v.bytes_done, v.bytes_total),
                snapshot,
                v.error.as_ref().map_or("", |_| v.reason())
            );
            // What it left out, each with its rule: a restore lacks it.
            for line in v.skipped_lines() {
                outln!("  left out {line}");
            }
        }
    }
    if !created.is_empty() {
        // Where each is now: in the overlay when the cluster was manifests.
        let overlay = args.store.overlay();
        outln!("\n{:<64} {:<24} WHERE", "CREATED IN THE CLUSTER", "PLUGIN");
        for c in &created {
            let file = iar::cluster::overlay::path_of(&overlay, &c.id);
            let place = if file.exists() {
                file.display().to_string()
            } else {
                format!("uid {}", c.uid)
            };
            outln!("{:<64} {:<24} {}", c.id.to_string(), c.plugin, place);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `describe` prints of a backup.
type Described = (
    BackupObject,
    Results,
    Vec<Operation>,
    Vec<VolumeBackup>,
    Vec<CreatedObject>,
);

fn from_store(url: &str, name: &str) -> anyhow::Result<Described> {
    let rt = tokio_runtime()?;
    let store = BackupStore::open_existing(url)?;
    let (object, results, ops, volumes, created) = rt.block_on(async {
        let object: Option<BackupObject> = store.get_json(name, BackupFile::Metadata).await?;
        let results: Option<Results> = store.get_json(name, BackupFile::Results).await?;
        let ops: Option<Vec<Operation>> = store.get_json(name, BackupFile::ItemOperations).await?;
        // As the blocks ended, or while they wait, as they progress.
        let volumes: Option<Vec<VolumeBackup>> =
            match store.get_json(name, BackupFile::VolumeBackups).await? {
                Some(ended) => Some(ended),
                None => store.get_json(name, BackupFile::VolumeProgress).await?,
            };
        let created: Option<Vec<CreatedObject>> =
            store.get_json(name, BackupFile::CreatedObjects).await?;
        anyhow::Ok((object, results, ops, volumes, created))
    })?;
    let object = object.with_context(|| format!("backup {name:?} not found in {url}"))?;
    Ok((
        object,
        results.unwrap_or_default(),
        ops.unwrap_or_default(),
        volumes.unwrap_or_default(),
        created.unwrap_or_default(),
    ))
}

/// The Backup resource's status from the API server, its results and
/// operations through DownloadRequests: no store credentials needed.
fn through_cluster(
    through: &super::through_cluster::ThroughCluster,
    name: &str,
) -> anyhow::Result<Described> {
    let reader = through.connect()?;
    let resource = reader
        .backup(name)?
        .with_context(|| format!("no Backup {name:?} in namespace {}", reader.namespace()))?;
    let object = BackupObject {
        api_version: "velero.io/v1".into(),
        kind: "Backup".into(),
        metadata: iar::backup::object::ObjectMeta {
            name: name.to_string(),
            namespace: reader.namespace().to_string(),
            uid: resource.metadata.uid.clone().unwrap_or_default(),
            creation_timestamp: resource
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string()),
            labels: Default::default(),
            annotations: Default::default(),
        },
        spec: resource.spec.to_value(),
        status: resource.status.clone().unwrap_or_default(),
    };
    // A backup that has not written them yet has none: nothing to list.
    let results: Results = match reader.fetch("BackupResults", name)? {
        Some(b) => serde_json::from_slice(&b).context("the backup's results")?,
        None => Results::default(),
    };
    let ops: Vec<Operation> = match reader.fetch("BackupItemOperations", name)? {
        Some(b) => serde_json::from_slice(&b).context("the backup's operations")?,
        None => Vec::new(),
    };
    Ok((object, results, ops, Vec::new(), Vec::new()))
}

pub fn get(args: GetArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio_runtime()?;
    let store = BackupStore::open_existing(&args.store.store)?;
    let rows = rt.block_on(async {
        let mut rows = Vec::new();
        for name in store.list_backups().await? {
            let object: Option<BackupObject> = store.get_json(&name, BackupFile::Metadata).await?;
            rows.push((name, object));
        }
        anyhow::Ok(rows)
    })?;
    if args.output != Output::Text {
        let items: Vec<serde_json::Value> = rows
            .iter()
            .filter_map(|(_, o)| o.as_ref())
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?;
        let list = serde_json::json!({
            "apiVersion": "velero.io/v1",
            "kind": "BackupList",
            "items": items,
        });
        print_as(args.output, &list)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{:<24} {:<42} {:>6} {:>8}  {:<20}  EXPIRES",
        "NAME",
        "PHASE",
        "ERRORS",
        "WARNINGS",
        "STARTED"
    );
    for (name, object) in rows {
        match object {
            Some(o) => outln!(
                "{:<24} {:<42} {:>6} {:>8}  {:<20}  {}",
                name,
                o.status.phase.to_string(),
                o.status.errors,
                o.status.warnings,
                o.status.start_timestamp.as_deref().unwrap_or("-"),
                expires(&o)
            ),
            None => outln!("{name:<24} (no velero-backup.json)"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The expiration as `describe` and `get` show it: "never" for a backup
/// stored before iar had expiry.
fn expires(object: &BackupObject) -> &str {
    object.status.expiration.as_deref().unwrap_or("never")
}

/// The expiration with how far off it is, as `velero backup describe`
/// says it ("… (in 29d 23h)", "… (expired)").
fn expires_in(object: &BackupObject) -> String {
    let at = expires(object);
    let Ok(when) = humantime::parse_rfc3339_weak(at) else {
        return at.to_string();
    };
    match when.duration_since(std::time::SystemTime::now()) {
        Ok(left) => format!("{at} (in {})", rough(left)),
        Err(_) => format!("{at} (expired)"),
    }
}

/// A duration to its two largest units: "29d 23h", "5m 2s".
fn rough(d: std::time::Duration) -> String {
    let s = d.as_secs();
    let (days, hours, minutes, seconds) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{seconds}s"),
        (0, 0, _) => format!("{minutes}m {seconds}s"),
        (0, _, _) => format!("{hours}h {minutes}m"),
        _ => format!("{days}d {hours}h"),
    }
}
