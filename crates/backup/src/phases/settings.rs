//! What the phase machine is told by its command line: periods, timeouts,
//! concurrency, where volume data is, how hooks run.

use std::time::Duration;

/// PhaseMachine settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How often progress is polled and persisted (at most once per period
    /// per backup, and always on a phase change).
    pub sync_period: Duration,
    /// Default operation timeout; a backup's `spec.itemOperationTimeout` wins.
    pub operation_timeout: Duration,
    /// Worker threads running item actions.
    pub workers: usize,
    /// How long this process's lease on a backup lasts unrenewed (renewed
    /// every third of it): after a crash, another process may take the
    /// backup over this long after the last renewal.
    pub lease_duration: Duration,
    /// `--volume-data`: one directory per `namespace/pvc` that pod volume
    /// backups read; without it no volume is backed up (a warning says so).
    pub volume_data: Option<std::path::PathBuf>,
    /// How many volume backups run at once.
    pub volume_concurrency: usize,
    /// `--repository-password-file`: volume data goes into its
    /// namespace's restic repository (see `iar-repository`); without it,
    /// into the per-backup chunk format.
    pub repository_password: Option<iar_repository::Password>,
    /// `--repository-maintenance-period`: how often the leader prunes the
    /// volume repositories (Velero's full maintenance: weekly).
    pub repository_maintenance_period: Duration,
    /// `--fs-backup-timeout`: the longest one volume backup may take.
    pub fs_backup_timeout: Duration,
    /// `--exec-hooks-locally`: run backup hooks as local processes;
    /// otherwise through the machine's hook runner (the controller's:
    /// `pods/exec`), or, without one, recorded as skipped with a warning.
    pub exec_hooks_locally: bool,
    /// `--max-hook-timeout`: the longest any hook runs; a pod annotation
    /// or a spec asking for more is clamped to it, with a warning (rule
    /// `hook-timeout-cap`).
    pub max_hook_timeout: Duration,
    /// The ttl of a backup whose spec sets none (or zero): Velero's
    /// `--default-backup-ttl`, 720h.
    pub default_backup_ttl: Duration,
    /// How often the cluster controller's leader sweeps the store for
    /// expired backups (Velero's GC controller: 1h).
    pub gc_period: Duration,
    /// How many backups list the cluster and run their item pass at once;
    /// the others wait their turn (their lease kept). A burst of Backups
    /// queues instead of listing the cluster and taking instances for all
    /// of them at once.
    pub concurrent_passes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            sync_period: Duration::from_secs(10),
            operation_timeout: Duration::from_secs(4 * 3600),
            workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            lease_duration: Duration::from_secs(15),
            volume_data: None,
            volume_concurrency: 4,
            repository_password: None,
            repository_maintenance_period: Duration::from_secs(7 * 24 * 3600),
            fs_backup_timeout: Duration::from_secs(4 * 3600),
            exec_hooks_locally: false,
            max_hook_timeout: crate::backup::hooks::DEFAULT_MAX_TIMEOUT,
            default_backup_ttl: crate::backup::expiry::DEFAULT_TTL,
            gc_period: Duration::from_secs(3600),
            concurrent_passes: 2,
        }
    }
}
