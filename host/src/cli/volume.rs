//! `iar volume restore`: a pod volume's files back from a backup, every
//! chunk checked against its digest. Velero restores file-system data only
//! from its own PodVolumeBackups, so this is how iar's volume data comes
//! back.

use super::backup::{RepositoryArg, StoreArg, tokio_runtime};
use anyhow::{Context, bail};
use iar::backup::volumes::{RestoreOptions, VolumeBackup, VolumePhase};
use iar::store::{BackupFile, BackupStore};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct VolumeArgs {
    #[command(subcommand)]
    command: VolumeCommand,
}

#[derive(clap::Subcommand)]
enum VolumeCommand {
    /// Write one pod volume's files from a backup into a directory.
    Restore(RestoreArgs),
}

#[derive(clap::Args)]
struct RestoreArgs {
    /// The backup that holds the volume.
    backup: String,
    /// The volume, as NAMESPACE/POD/VOLUME (the pod's volume name).
    volume: String,
    /// The directory to write the files into (created; must be empty).
    /// Nothing is written outside it: no symlink is followed, nothing
    /// existing is replaced.
    #[arg(long)]
    to: PathBuf,
    /// Restore the files' owners as recorded, and with them setuid,
    /// setgid and sticky bits (root only, as `tar --same-owner`); without
    /// it those bits are dropped and files belong to whoever restores.
    #[arg(long)]
    preserve_owner: bool,
    #[command(flatten)]
    store: StoreArg,
    #[command(flatten)]
    repository: RepositoryArg,
}

pub fn volume(args: VolumeArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        VolumeCommand::Restore(args) => restore(args),
    }
}

fn restore(args: RestoreArgs) -> anyhow::Result<ExitCode> {
    let Some((namespace, pod, volume)) = args
        .volume
        .split_once('/')
        .and_then(|(ns, rest)| rest.split_once('/').map(|(pod, v)| (ns, pod, v)))
        .filter(|(ns, pod, v)| {
            !ns.is_empty() && !pod.is_empty() && !v.is_empty() && !v.contains('/')
        })
    else {
        bail!("volume {:?}: expected NAMESPACE/POD/VOLUME", args.volume);
    };
    if args.preserve_owner && !rustix::process::geteuid().is_root() {
        bail!("--preserve-owner restores owners, which only root can do");
    }
    let store = BackupStore::open_existing(&args.store.store)?;
    let rt = tokio_runtime()?;
    let backups: Vec<VolumeBackup> = rt
        .block_on(store.get_json(&args.backup, BackupFile::VolumeBackups))?
        .unwrap_or_default();
    let Some(found) = backups
        .iter()
        .find(|v| v.pod_namespace == namespace && v.pod_name == pod && v.volume == volume)
    else {
        let mut known: Vec<String> = backups
            .iter()
            .map(|v| format!("{}/{}/{}", v.pod_namespace, v.pod_name, v.volume))
            .collect();
        known.sort();
        bail!(
            "backup {:?} has no volume backup of {}; it has: {}",
            args.backup,
            args.volume,
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        );
    };
    // The library checks the record again (Completed, its data its own
    // volume's); this says so before anything is created.
    if found.phase != VolumePhase::Completed || found.manifest_key.is_none() {
        bail!(
            "volume backup {} did not complete ({:?}: {}); nothing to restore",
            found.describe(),
            found.phase,
            found.reason()
        );
    }
    std::fs::create_dir_all(&args.to).with_context(|| format!("creating {}", args.to.display()))?;
    if std::fs::read_dir(&args.to)?.next().is_some() {
        bail!(
            "{} is not empty; restore into an empty directory",
            args.to.display()
        );
    }
    let options = RestoreOptions {
        preserve_owner: args.preserve_owner,
        repository_password: args.repository.password()?,
    };
    let restored = rt
        .block_on(options.restore_record(&store, found, &args.to))
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("restoring {} from backup {:?}", args.volume, args.backup))?;
    // On stderr, each on its line: what the backup left out (a warning of
    // the backup every restore of it repeats), what came back without
    // some metadata, what did not come back.
    for s in &restored.skipped {
        eprintln!("iar: left out by the backup: {:?}: {}", s.path, s.reason);
    }
    for w in &restored.warnings {
        eprintln!("iar: warning: {w}");
    }
    for f in &restored.not_restored {
        eprintln!("iar: not restored: {f}");
    }
    let left_out = match restored.skipped.len() {
        0 => "the backup left nothing out".to_string(),
        n => format!("the backup left out {n} entries (listed above)"),
    };
    outln!(
        "restored {} of backup {}: {} files, {} bytes into {} (every chunk's digest checked); {left_out}",
        args.volume,
        args.backup,
        restored.files,
        restored.bytes,
        args.to.display()
    );
    if let Some(e) = restored.error() {
        bail!(
            "restoring {} from backup {:?}: {e}",
            args.volume,
            args.backup
        );
    }
    Ok(ExitCode::SUCCESS)
}
