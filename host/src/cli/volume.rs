//! `iar volume restore`: a pod volume's files back from a backup, every
//! chunk checked against its digest. Velero restores file-system data only
//! from its own PodVolumeBackups, so this is how iar's volume data comes
//! back.

use super::backup::{RepositoryArg, StoreArg, tokio_runtime};
use anyhow::{Context, bail};
use iar::backup::volumes::{EntryKind, RestoreOptions, VolumeBackup, VolumePhase, restore_volume};
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
    let store = BackupStore::open(&args.store.store)?;
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
    let (VolumePhase::Completed, Some(manifest)) = (&found.phase, &found.manifest_key) else {
        bail!(
            "volume backup {} did not complete ({:?}: {}); nothing to restore",
            found.describe(),
            found.phase,
            found.error.as_deref().unwrap_or("no reason given")
        );
    };
    std::fs::create_dir_all(&args.to).with_context(|| format!("creating {}", args.to.display()))?;
    if std::fs::read_dir(&args.to)?.next().is_some() {
        bail!(
            "{} is not empty; restore into an empty directory",
            args.to.display()
        );
    }
    let restored = rt
        .block_on(restore_volume(
            &store,
            &args.backup,
            manifest,
            &args.to,
            &RestoreOptions {
                preserve_owner: args.preserve_owner,
                repository_password: args.repository.password()?,
            },
        ))
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("restoring {} from backup {:?}", args.volume, args.backup))?;
    let files = restored
        .entries
        .iter()
        .filter(|e| e.kind == EntryKind::File);
    let (count, bytes) = files.fold((0, 0), |(n, b), e| (n + 1, b + e.size));
    outln!(
        "restored {} of backup {}: {count} files, {bytes} bytes into {} (every chunk's digest checked)",
        args.volume,
        args.backup,
        args.to.display()
    );
    for s in &restored.skipped {
        outln!("  not in the backup: {:?}: {}", s.path, s.reason);
    }
    Ok(ExitCode::SUCCESS)
}
