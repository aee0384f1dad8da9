//! Garbage collection in the cluster: the leader sweeps the store every
//! `gc_period` ([`PhaseMachine::collect_garbage`]) and deletes the Backup
//! resource each deleted backup was made for. The data goes first: a
//! resource whose deletion then fails is left with a status and no stored
//! backup, and its next reconcile deletes it ([`Decision::Collected`]).
//!
//! [`PhaseMachine::collect_garbage`]: iar_backup::phases::PhaseMachine::collect_garbage
//! [`Decision::Collected`]: super::reconcile::Decision::Collected

use super::reconcile::Context;
use super::resource::deleted;
use iar_backup::phases::gc::Outcome;
use std::time::SystemTime;

/// Sweeps every `gc_period`, the first at once, for as long as it runs
/// (the leader runs it beside the reconciler).
pub async fn sweep_forever(ctx: &Context) -> std::convert::Infallible {
    let settings = &ctx.controller.settings;
    // The first maintenance one period after this replica leads: a
    // replica that just took over does not prune at once.
    let mut maintain_at = tokio::time::Instant::now() + settings.repository_maintenance_period;
    loop {
        sweep(ctx, SystemTime::now()).await;
        if tokio::time::Instant::now() >= maintain_at {
            maintain_at = match maintain(ctx).await {
                true => tokio::time::Instant::now() + settings.repository_maintenance_period,
                // Put off: tried again at the next sweep.
                false => tokio::time::Instant::now(),
            };
        }
        tokio::time::sleep(
            settings
                .gc_period
                .min(settings.repository_maintenance_period),
        )
        .await;
    }
}

/// One maintenance of the volume repositories; false if put off.
async fn maintain(ctx: &Context) -> bool {
    use iar_backup::phases::maintenance::Maintenance;
    match ctx.controller.maintain_repositories().await {
        Ok(Maintenance::Done(done)) => {
            for m in done {
                match m.outcome {
                    Ok(p) => {
                        tracing::info!(namespace = %m.namespace, packs_removed = p.packs_removed, bytes_unused = p.bytes_unused, "volume repository pruned")
                    }
                    Err(e) => {
                        tracing::error!(namespace = %m.namespace, "volume repository maintenance: {e}")
                    }
                }
            }
            true
        }
        Ok(Maintenance::Deferred { running }) => {
            tracing::info!(backup = %running, "volume repository maintenance put off: a backup is running");
            false
        }
        Ok(Maintenance::NoPassword) => true,
        Err(e) => {
            tracing::error!("{e}");
            true
        }
    }
}

/// One sweep; what it did is logged per backup.
pub async fn sweep(ctx: &Context, now: SystemTime) {
    let swept = match ctx.controller.collect_garbage(now, false).await {
        Ok(swept) => swept,
        Err(e) => {
            tracing::error!("garbage collection: listing the store: {e}; trying again next period");
            return;
        }
    };
    for collected in swept {
        let name = &collected.name;
        match collected.outcome {
            Outcome::Deleted(object) => {
                match deleted(&ctx.api, &object).await {
                    Ok(true) => {
                        tracing::info!(backup = %name, "expired: its Backup resource deleted")
                    }
                    Ok(false) => {}
                    // Its next reconcile finds it without data and retries.
                    Err(e) => {
                        tracing::warn!(backup = %name, "expired, but deleting its Backup resource failed: {e}")
                    }
                }
            }
            Outcome::Failed(reason) => {
                tracing::error!(backup = %name, "garbage collection: {reason}")
            }
            Outcome::Tidied | Outcome::WouldDelete(_) | Outcome::Kept(_) => {}
        }
    }
}
