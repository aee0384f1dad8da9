//! `iar logs` and `iar delete`: Velero's `backup logs` and `backup delete`
//! for a store iar (or Velero) wrote.

use super::backup::{RepositoryArg, StoreArg, store_only, tokio_runtime};
use anyhow::Context as _;
use iar::phases::gc::{Kept, Outcome};
use iar::store::BackupStore;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub struct LogsArgs {
    /// The backup whose log to print.
    name: String,
    /// NAME is a restore (`iar restore`'s): print its log.
    #[arg(long)]
    restore: bool,
    #[command(flatten)]
    store: StoreArg,
    #[command(flatten)]
    through: super::through_cluster::ThroughCluster,
}

#[derive(clap::Args)]
pub struct DeleteArgs {
    /// The backup to delete: its data, then its object, then its leases.
    name: String,
    /// Say what would be deleted, and delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// How long this process's lease on the backup lasts without renewal.
    #[arg(long, env = "IAR_LEASE_DURATION", value_parser = iar::duration::parse_positive, default_value = "15s")]
    lease_duration: Duration,
    #[command(flatten)]
    store: StoreArg,
    /// For the volume snapshots the backup holds.
    #[command(flatten)]
    repository: RepositoryArg,
    #[command(flatten)]
    cluster: super::backup::ClusterArg,
}

/// Prints a backup's log from the store, one line per line written.
pub fn logs(args: LogsArgs) -> anyhow::Result<ExitCode> {
    if args.through.cluster {
        let kind = if args.restore {
            "RestoreLog"
        } else {
            "BackupLog"
        };
        let reader = args.through.connect()?;
        let log = reader.fetch(kind, &args.name)?.with_context(|| {
            format!(
                "{} {:?} has no such file in the store: no log (asked through the controller in {})",
                if args.restore { "restore" } else { "backup" },
                args.name,
                reader.namespace()
            )
        })?;
        out!("{}", String::from_utf8_lossy(&log));
        if !log.ends_with(b"\n") && !log.is_empty() {
            outln!();
        }
        return Ok(ExitCode::SUCCESS);
    }
    let store = BackupStore::open_existing(&args.store.store)?;
    if args.restore {
        let log = tokio_runtime()?
            .block_on(store.get_restore(&args.name, iar::store::restores::RestoreFile::Logs))?;
        let log =
            log.with_context(|| format!("restore {:?} has no log in {}", args.name, store.url()))?;
        out!("{}", String::from_utf8_lossy(&log));
        return Ok(ExitCode::SUCCESS);
    }
    let lines = tokio_runtime()?.block_on(store.get_logs(&args.name))?;
    let Some(lines) = lines else {
        anyhow::bail!("backup {:?} has no log in {}", args.name, store.url());
    };
    for line in lines {
        outln!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Deletes one backup now, expired or not, in the crash-safe order `iar gc`
/// uses. A backup still running is refused (exit 1); so is one that does
/// not exist.
pub fn delete(args: DeleteArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio_runtime()?;
    let live = args.cluster.cluster.then_some(&runtime);
    let machine = store_only(&args.store, args.lease_duration, &args.repository, live)?;
    let name = &args.name;
    let outcome = runtime.block_on(machine.delete_backup(name, args.dry_run))?;
    match outcome {
        Outcome::Deleted(o) => outln!("deleted {name} ({})", o.status.phase),
        Outcome::WouldDelete(o) => outln!("would delete {name} ({})", o.status.phase),
        Outcome::Tidied => outln!(
            "deleted {name} (what an interrupted deletion, or a first pass that never stored its object, left)"
        ),
        Outcome::Kept(Kept::Running(phase)) => {
            outln!(
                "not deleted: backup {name} is still running (phase {phase}); delete it once it has ended"
            );
            return Ok(ExitCode::from(1));
        }
        Outcome::Kept(Kept::NoObject) => {
            outln!("not deleted: no backup {name} in the store");
            return Ok(ExitCode::from(1));
        }
        Outcome::Kept(Kept::UnfreezeOwed) => {
            outln!(
                "not deleted: backup {name}'s hook ledger owes a pod's post hooks (an unfreeze), which this command cannot run; `iar controller` runs them and then deletes it (rule: hook-ledger)"
            );
            return Ok(ExitCode::from(1));
        }
        Outcome::Kept(other) => {
            outln!("not deleted: {other:?}");
            return Ok(ExitCode::from(1));
        }
        Outcome::Failed(reason) => {
            outln!("failed {name}: {reason}");
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}
