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
    loop {
        sweep(ctx, SystemTime::now()).await;
        tokio::time::sleep(ctx.controller.settings.gc_period).await;
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
