//! A pod's post hooks run once across every process driving the backup
//! (a claim in the store), and run a second time, said, where the first
//! run's outcome is not known: a pod left frozen is the worse of the two
//! failures (the fault campaign's seeds 4429 and 4512).

use super::{BlockWork, LedgerEntry, started};
use crate::backup::hooks::{HookRecord, HookTarget, ResolvedHook, run_hooks};
use iar_core::item::ItemRef;
use iar_core::store::{BackupStore, StoreError};
use std::time::Duration;

/// The rule a second run of post hooks is logged under.
pub const RERUN_RULE: &str = "hook-rerun";

/// The store claim a second run takes: one process re-runs, once.
const AGAIN: &str = "post-again";

/// Waited before a second run of hooks whose first exec's end was lost:
/// what lost it (an API server restarting, a connection reset) is
/// likely still going on at that instant.
const RERUN_PAUSE: Duration = Duration::from_secs(5);

/// Whether `record`'s hook may have run though it did not say how it
/// ended (see [`crate::backup::hooks::outcome_unknown`]).
fn unknown(record: &HookRecord) -> bool {
    crate::backup::hooks::outcome_unknown(std::slice::from_ref(record))
}

/// Whether `pod`'s post hooks of `backup` need no one else: their claim
/// says how they ended, or a second run of them was claimed. A claim
/// still `started` with no second run is owed (its holder may have
/// crashed between claim and exec): whoever runs owed unfreezes waits
/// for it, then runs them again ([`BlockWork::run_owed_posts`]).
pub async fn post_settled(
    store: &BackupStore,
    backup: &str,
    pod: &ItemRef,
) -> Result<bool, StoreError> {
    let what = ["post", pod.namespace.as_str(), pod.name.as_str()];
    Ok(match store.read_claim(backup, &what).await? {
        None => false,
        Some(c) if c["state"].as_str().unwrap_or("started") != "started" => true,
        Some(_) => {
            let again = [AGAIN, pod.namespace.as_str(), pod.name.as_str()];
            store.read_claim(backup, &again).await?.is_some()
        }
    })
}

impl BlockWork {
    /// Runs `pod`'s post hooks if this run wins their claim in the store
    /// (created once, [`BackupStore::claim_once`]), so that of every
    /// process and machine driving the backup, before or after a
    /// takeover, one runs them; records them in the ledger and in the
    /// claim. A claim another process holds is waited for until it says
    /// how the hooks ended (bounded by their timeouts), and past that
    /// bound they are run again ([`BlockWork::run_again`]), as are hooks
    /// whose exec here ended without saying how. `Err` is the backup's
    /// error when they were not run here and their end is not known, or
    /// they failed there.
    pub(super) async fn post_once(
        &self,
        pod: &ItemRef,
        target: &HookTarget,
        hooks: &[ResolvedHook],
    ) -> Result<Vec<HookRecord>, String> {
        let what = ["post", pod.namespace.as_str(), pod.name.as_str()];
        let Some(store) = self.ledger_store.clone() else {
            let post = run_hooks(self.runner.as_ref(), target, hooks, &*self.clock).await;
            return Ok(self.again_if_unknown(pod, target, hooks, post).await);
        };
        // A backup being deleted (or gone) runs no more hooks: a late
        // run's claim would outlive the deletion, and the collection of
        // the claims it races (the fault campaign's seeds 1219, 1231).
        // The deletion itself runs what is owed, before the claims go.
        if !self.deletion && !self.still_stored(&store).await {
            self.claims.release(&self.backup_key, pod);
            return Err(format!(
                "post hooks of pod {}: not run: the backup is being deleted, or gone",
                pod.path()
            ));
        }
        let token = claim_token(store.holder());
        let claim = |state: &str| serde_json::json!({"holder": store.holder(), "token": token, "state": state});
        match claim_hooks(&store, &self.backup, &what, &claim("started"), &token).await {
            Err(e) => {
                self.claims.release(&self.backup_key, pod);
                return Err(format!(
                    "post hooks of pod {}: not run: their claim could not be written to the store: {e} (rule: hook-ledger)",
                    pod.path()
                ));
            }
            Ok(Some(theirs)) => {
                return self
                    .await_their_post(pod, target, hooks, theirs, false)
                    .await;
            }
            Ok(None) => {}
        }
        self.ledger(started(pod, "post")).await;
        let post = run_hooks(self.runner.as_ref(), target, hooks, &*self.clock).await;
        let post = self.again_if_unknown(pod, target, hooks, post).await;
        self.settle(&store, pod, &what, &token, &post).await;
        Ok(post)
    }

    /// Writes how `pod`'s post hooks ended to claim `what` (held with
    /// `token`) and to the ledger.
    async fn settle(
        &self,
        store: &BackupStore,
        pod: &ItemRef,
        what: &[&str],
        token: &str,
        post: &[HookRecord],
    ) {
        let entry = LedgerEntry::of(pod, "post", post);
        let claim =
            serde_json::json!({"holder": store.holder(), "token": token, "state": entry.state});
        if let Err(e) = store.update_claim(&self.backup, what, &claim).await {
            self.state()
                .warnings
                .push((pod.namespace.clone(), format!("hook claim: {e}")));
        }
        self.ledger(entry).await;
    }

    /// `post` as it is when every hook's outcome is known; otherwise the
    /// hooks whose exec ended without saying how (and those after them
    /// not run) run a second time, if this process wins the claim on
    /// that second run, and their records replace the first's.
    async fn again_if_unknown(
        &self,
        pod: &ItemRef,
        target: &HookTarget,
        hooks: &[ResolvedHook],
        mut post: Vec<HookRecord>,
    ) -> Vec<HookRecord> {
        let Some(first) = post.iter().position(unknown) else {
            return post;
        };
        let which: Vec<usize> = (first..hooks.len())
            .filter(|&i| post.get(i).is_none_or(unknown))
            .collect();
        let again: Vec<ResolvedHook> = which.iter().map(|&i| hooks[i].clone()).collect();
        let why = format!("the first run's end is not known ({})", post[first]);
        tokio::time::sleep(RERUN_PAUSE).await;
        match self.run_again(pod, target, &again, &why).await {
            Ok(second) => {
                for (i, record) in which.into_iter().zip(second) {
                    match post.get_mut(i) {
                        Some(slot) => *slot = record,
                        None => post.push(record),
                    }
                }
            }
            Err(e) => self.state().errors.push((pod.namespace.clone(), e)),
        }
        post
    }

    /// Runs `hooks` of `pod` a second time, saying so in the backup's
    /// log, when this process wins the store claim on that second run
    /// (without a store, always): `Err` when another has it and has not
    /// said how it ended within the hooks' bound, or the claim cannot be
    /// written. Never a third time.
    async fn run_again(
        &self,
        pod: &ItemRef,
        target: &HookTarget,
        hooks: &[ResolvedHook],
        why: &str,
    ) -> Result<Vec<HookRecord>, String> {
        let what = [AGAIN, pod.namespace.as_str(), pod.name.as_str()];
        let mut token = String::new();
        if let Some(store) = &self.ledger_store {
            token = claim_token(store.holder());
            let claim =
                serde_json::json!({"holder": store.holder(), "token": token, "state": "started"});
            match claim_hooks(store, &self.backup, &what, &claim, &token).await {
                Err(e) => {
                    return Err(format!(
                        "post hooks of pod {}: {why}; not run again: the claim on a second run could not be written to the store: {e} (rule: hook-ledger)",
                        pod.path()
                    ));
                }
                Ok(Some(theirs)) => {
                    return Box::pin(self.await_their_post(pod, target, hooks, theirs, true)).await;
                }
                Ok(None) => {}
            }
        }
        self.state().warnings.push((
            pod.namespace.clone(),
            format!(
                "post hooks of pod {}: {why}; run again, so they may have run twice rather than never (rule: {RERUN_RULE})",
                pod.path()
            ),
        ));
        let second = run_hooks(self.runner.as_ref(), target, hooks, &*self.clock).await;
        if let Some(store) = &self.ledger_store {
            // The first claim (whose holder says how it all ended) and the
            // ledger are the caller's to write.
            let state = LedgerEntry::of(pod, "post", &second).state;
            let claim =
                serde_json::json!({"holder": store.holder(), "token": token, "state": state});
            if let Err(e) = store.update_claim(&self.backup, &what, &claim).await {
                self.state()
                    .warnings
                    .push((pod.namespace.clone(), format!("hook claim: {e}")));
            }
        }
        Ok(second)
    }

    /// Waits for the process holding `pod`'s post-hook claim (or, when
    /// `again`, the claim on their second run) to say how they ended, for
    /// as long as they may take and 30 s more; past that, the first
    /// claim's hooks are run again ([`BlockWork::run_again`]): its holder
    /// may have crashed between its claim and its exec.
    async fn await_their_post(
        &self,
        pod: &ItemRef,
        target: &HookTarget,
        hooks: &[ResolvedHook],
        mut claim: serde_json::Value,
        again: bool,
    ) -> Result<Vec<HookRecord>, String> {
        let first = if again { AGAIN } else { "post" };
        let what = [first, pod.namespace.as_str(), pod.name.as_str()];
        let bound =
            hooks.iter().map(|h| h.hook.timeout).sum::<Duration>() + Duration::from_secs(30);
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let holder = claim["holder"]
                .as_str()
                .unwrap_or("another process")
                .to_string();
            match claim["state"].as_str().unwrap_or("started") {
                "started" => {}
                "failed" => {
                    return Err(format!(
                        "post hooks of pod {}: failed in {holder}, which ran them",
                        pod.path()
                    ));
                }
                state => {
                    self.state().warnings.push((
                        pod.namespace.clone(),
                        format!(
                            "post hooks of pod {}: run by {holder} ({state})",
                            pod.path()
                        ),
                    ));
                    return Ok(Vec::new());
                }
            }
            if tokio::time::Instant::now() >= deadline {
                let why = format!(
                    "started by {holder}, which has not said how they ended within {}s",
                    bound.as_secs()
                );
                if again {
                    return Err(format!(
                        "post hooks of pod {}: a second run {why}; not run a third time, so they may not have run (rule: hook-ledger)",
                        pod.path()
                    ));
                }
                let second = self.run_again(pod, target, hooks, &why).await?;
                if let Some(store) = &self.ledger_store {
                    let token = claim_token(store.holder());
                    self.settle(store, pod, &what, &token, &second).await;
                }
                return Ok(second);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            if let Ok(Some(now)) = self
                .ledger_store
                .as_ref()
                .expect("a claim was read from it")
                .read_claim(&self.backup, &what)
                .await
            {
                claim = now;
            }
        }
    }
}

/// Claims hooks `what` of `backup` in the store with `claim` (holding
/// `token`): `Ok(None)` when this run has them, the claim as it is when
/// another has. Asked again after an error (three tries, 2 s apart): the
/// token tells our own claim, created by a try whose answer was lost,
/// from another's.
pub(super) async fn claim_hooks(
    store: &BackupStore,
    backup: &str,
    what: &[&str],
    claim: &serde_json::Value,
    token: &str,
) -> Result<Option<serde_json::Value>, StoreError> {
    let mut tries = 0;
    loop {
        match store.claim_once(backup, what, claim).await {
            Ok(Some(c)) if c["token"] == token => return Ok(None),
            Ok(theirs) => return Ok(theirs),
            Err(e) if tries == 2 => return Err(e),
            Err(_) => {
                tries += 1;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

/// A token no other claim has: this process's holder, a count and the
/// time, so a retried claim knows itself.
pub(super) fn claim_token(holder: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{holder}/{n}/{nanos}")
}
