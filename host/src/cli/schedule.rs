//! `iar schedule`: Velero's schedules in the manifest mode, for a CronJob
//! or a systemd timer that fires more often than the schedule. It prints
//! the name of the backup due now (`<schedule>-<UTC yyyyMMddHHmmss>`, as
//! Velero names them) and exits 0, or says when the next one is due and
//! exits 3; the caller then runs `iar backup` with that name. The last
//! run is read from the store (the newest backup of that name pattern):
//! missed runs are not caught up, one backup is made, as in Velero.

use super::backup::tokio_runtime;
use iar::backup::schedule::{Cron, Runs, backup_name};
use iar::store::BackupStore;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

/// The exit code of a schedule that is not due.
pub const NOT_DUE: u8 = 3;

#[derive(clap::Args)]
pub struct ScheduleArgs {
    /// The schedule's name: its backups are `NAME-<timestamp>`.
    name: String,
    /// A cron expression, as Velero's `--schedule`: five fields (UTC),
    /// `@daily`, `@every 6h`.
    #[arg(long)]
    schedule: String,
    /// The backup store the schedule's backups are in.
    #[arg(long, env = "IAR_STORE", default_value = "iar-store")]
    store: String,
}

pub fn schedule(args: ScheduleArgs) -> anyhow::Result<ExitCode> {
    let cron = Cron::parse(&args.schedule)
        .map_err(|e| anyhow::anyhow!("--schedule {:?}: {e}", args.schedule))?;
    iar::names::dns_subdomain(&backup_name(&args.name, SystemTime::now()))
        .map_err(|e| anyhow::anyhow!("schedule name {:?}: {e} (rule: backup-name)", args.name))?;
    let rt = tokio_runtime()?;
    // A store not made yet has no backups: the first run is due.
    let names = match BackupStore::open_existing(&args.store) {
        Ok(store) => rt.block_on(store.list_backups())?,
        Err(_) => Vec::new(),
    };
    let runs = Runs {
        created: None,
        last_backup: last_run(&args.name, &names),
        last_skipped: None,
    };
    let now = SystemTime::now();
    if runs.due(&cron, now) {
        outln!("{}", backup_name(&args.name, now));
        return Ok(ExitCode::SUCCESS);
    }
    match runs.next(&cron) {
        Some(next) => eprintln!(
            "iar: schedule {}: not due; next run at {} (in {}s)",
            args.name,
            humantime::format_rfc3339_seconds(next),
            next.duration_since(now).unwrap_or(Duration::ZERO).as_secs()
        ),
        None => eprintln!(
            "iar: schedule {}: {:?} never comes round",
            args.name, args.schedule
        ),
    }
    Ok(ExitCode::from(NOT_DUE))
}

/// When the newest of `names` that is `NAME-<yyyyMMddHHmmss>` was made.
fn last_run(name: &str, names: &[String]) -> Option<SystemTime> {
    names
        .iter()
        .filter_map(|n| n.strip_prefix(name)?.strip_prefix('-'))
        .filter(|stamp| stamp.len() == 14 && stamp.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|s| {
            let text = format!(
                "{}-{}-{}T{}:{}:{}Z",
                &s[0..4],
                &s[4..6],
                &s[6..8],
                &s[8..10],
                &s[10..12],
                &s[12..14]
            );
            humantime::parse_rfc3339(&text).ok()
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_run_is_the_newest_backup_of_the_schedule() {
        let names = [
            "nightly-20261204010000",
            "nightly-20261205010003",
            "nightly-manual",
            "nightlyx-20261206010000",
            "other-20261206010000",
        ]
        .map(String::from);
        assert_eq!(
            last_run("nightly", &names),
            Some(humantime::parse_rfc3339("2026-12-05T01:00:03Z").unwrap())
        );
        assert_eq!(last_run("weekly", &names), None);
    }
}
