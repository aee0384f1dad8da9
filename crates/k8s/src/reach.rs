//! Reads that are tried again while the API server cannot be reached. A
//! volume backup, a hook or a request must not fail on one dropped
//! connection or one 503 (the fault campaign's API partitions failed
//! volume backups that way); what the API server answers is final.

use std::future::Future;
use std::time::Duration;

/// How long a read is tried again before its error stands: longer than an
/// API server restart, shorter than an agent's silence bound.
pub const READ_PATIENCE: Duration = Duration::from_secs(60);

/// Whether `e` says the API server was not reached, or could not answer
/// for the moment (so a request that changes nothing, or starts nothing
/// until it succeeds, may be sent again).
pub fn unreached(e: &kube::Error) -> bool {
    use kube::client::UpgradeConnectionError as Upgrade;
    match e {
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        kube::Error::UpgradeConnection(Upgrade::ProtocolSwitch(code)) => {
            code.is_server_error() || code.as_u16() == 429
        }
        kube::Error::UpgradeConnection(Upgrade::GetPendingUpgrade(_)) => true,
        _ => false,
    }
}

/// `attempt` until it reaches the API server or `patience` has passed,
/// waiting 0.5 s and then twice as long each time, up to 5 s.
pub async fn until_reached<T, F, Fut>(patience: Duration, mut attempt: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let started = tokio::time::Instant::now();
    let mut wait = Duration::from_millis(500);
    loop {
        match attempt().await {
            Err(e) if unreached(&e) && started.elapsed() + wait < patience => {
                tracing::debug!("API server not reached, trying again in {wait:?}: {e}");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

/// `api.get_opt(name)`, tried again while the API server is unreached,
/// for up to [`READ_PATIENCE`].
pub async fn get_opt<K>(api: &kube::Api<K>, name: &str) -> Result<Option<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    until_reached(READ_PATIENCE, || api.get_opt(name)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    fn api(code: u16) -> kube::Error {
        let mut status = kube::core::Status::failure("", "");
        status.code = code;
        kube::Error::Api(status.boxed())
    }

    #[test]
    fn only_an_unreached_or_overloaded_server_is_tried_again() {
        assert!(unreached(&api(503)));
        assert!(unreached(&api(429)));
        assert!(!unreached(&api(403)));
        assert!(!unreached(&api(404)));
        assert!(!unreached(&api(409)));
    }

    #[tokio::test]
    async fn a_read_is_tried_until_it_is_answered_or_patience_runs_out() {
        let mut calls = 0;
        let got = until_reached(Duration::from_secs(5), || {
            calls += 1;
            let n = calls;
            async move { if n < 3 { Err(api(503)) } else { Ok(n) } }
        })
        .await
        .unwrap();
        assert_eq!(got, 3);
        // A refusal is final at once.
        let mut calls = 0;
        let e = until_reached(Duration::from_secs(5), || {
            calls += 1;
            async { Err::<(), _>(api(403)) }
        })
        .await
        .unwrap_err();
        assert!(!unreached(&e));
        assert_eq!(calls, 1);
        // An API server that never answers: its last error, once patience
        // has run out.
        let e = until_reached(Duration::from_secs(2), || async { Err::<(), _>(api(503)) })
            .await
            .unwrap_err();
        assert!(unreached(&e));
    }
}
