//! `iar repository check|repair|prune`: the namespaces' volume
//! repositories, looked after by hand (restic's own `check`, its key
//! repair, and a prune the operator asks for). Each takes restic's locks
//! as the controller's maintenance does, so it waits for no one and runs
//! beside no restic prune.

use super::backup::{RepositoryArg, StoreArg, tokio_runtime};
use anyhow::bail;
use iar::repository::{KeyStatus, RepositoryError, VolumeRepository};
use iar::store::BackupStore;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct RepositoryArgs {
    #[command(subcommand)]
    command: RepositoryCommand,
}

#[derive(clap::Subcommand)]
enum RepositoryCommand {
    /// Check repositories as restic's `check` does, and their keys (a key
    /// the password opens that cannot open the repository: left by an
    /// older iar's overtaken creation); exits 1 on any finding.
    Check(Which),
    /// Remove the stray keys `check` reports (never a key the password
    /// does not open, nor one some snapshot or index still needs).
    Repair(Which),
    /// Remove data no snapshot uses (forgotten backups' data). By default
    /// in two phases, safe beside a running backup: unused packs are
    /// deleted by a prune at least 23 h after the one that marked them.
    Prune(PruneArgs),
}

#[derive(clap::Args)]
struct Which {
    /// The namespaces whose repositories to act on (default: every
    /// repository in the store).
    namespaces: Vec<String>,
    /// Also read every pack and check its contents (`check --read-data`).
    #[arg(long)]
    read_data: bool,
    #[command(flatten)]
    store: StoreArg,
    #[command(flatten)]
    repository: RepositoryArg,
}

#[derive(clap::Args)]
struct PruneArgs {
    #[command(flatten)]
    which: Which,
    /// Delete unused packs now rather than in two phases. Only for a
    /// repository no backup writes to: restic's exclusive lock keeps out
    /// iar's and restic's writers for its duration, but not one that
    /// started before another process's stale lock was judged stale.
    #[arg(long)]
    instant: bool,
}

pub fn repository(args: RepositoryArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        RepositoryCommand::Check(which) => each(&which, |repo, which| check(repo, which, false)),
        RepositoryCommand::Repair(which) => each(&which, |repo, which| check(repo, which, true)),
        RepositoryCommand::Prune(args) => each(&args.which, |repo, _| {
            let pruned = repo.prune(args.instant)?;
            outln!(
                "{}: {} packs removed or repacked, {} bytes unused",
                repo.location(),
                pruned.packs_removed,
                pruned.bytes_unused
            );
            Ok(true)
        }),
    }
}

/// Runs `act` on each chosen repository; exit 1 if any says it is
/// unsound or fails.
fn each(
    which: &Which,
    act: impl Fn(&VolumeRepository, &Which) -> Result<bool, RepositoryError>,
) -> anyhow::Result<ExitCode> {
    let Some(password) = which.repository.password()? else {
        bail!(
            "the repositories are encrypted: give --repository-password-file (rule: repository-password)"
        );
    };
    let store = BackupStore::open(&which.store.store)?;
    let rt = tokio_runtime()?;
    let handle = rt.handle().clone();
    let namespaces = if which.namespaces.is_empty() {
        iar::repository::namespaces(&store, &handle)?
    } else {
        which.namespaces.clone()
    };
    if namespaces.is_empty() {
        bail!("no volume repository in {}", store.url());
    }
    let mut sound = true;
    // The repository blocks on the runtime's handle: called from this
    // thread, outside the runtime, as it must be.
    for ns in &namespaces {
        let verdict = VolumeRepository::open(&store, ns, &password, &handle)
            .and_then(|repo| act(&repo, which));
        match verdict {
            Ok(true) => {}
            Ok(false) => sound = false,
            Err(e) => {
                eprintln!("iar: {e}");
                sound = false;
            }
        }
    }
    Ok(if sound {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Checks one repository and its keys; with `repair`, removes stray keys.
fn check(repo: &VolumeRepository, which: &Which, repair: bool) -> Result<bool, RepositoryError> {
    let mut sound = true;
    for report in repo.check_keys(repair)? {
        let line = match (report.status, report.removed) {
            (KeyStatus::Opens | KeyStatus::Other, _) => continue,
            (KeyStatus::Stray, true) => "a stray key: removed",
            (KeyStatus::Stray, false) => {
                "a stray key (the password opens it, it opens nothing): `iar repository repair` removes it"
            }
            (KeyStatus::StrayWithData, _) => {
                "a stray key that some snapshot or index file was written with: kept, those files are unreadable through the repository's own key"
            }
        };
        sound &= report.removed;
        outln!("{}: key {}: {line}", repo.location(), report.id);
    }
    let findings = repo.check(which.read_data)?;
    for f in &findings {
        outln!("{}: {f}", repo.location());
    }
    if sound && findings.is_empty() {
        outln!("{}: sound", repo.location());
    }
    Ok(sound && findings.is_empty())
}
