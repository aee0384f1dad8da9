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

/// Whether `e` says a request never started anything: no connection to
/// the API server could be made, or it answered an upgrade (an exec) with
/// an error status instead of switching protocols (the kubelet starts a
/// command only on a switched stream). Only then may a request that
/// starts something be sent again: a connection lost after the request
/// went out may follow a start (the fault campaign's seed 1001: an
/// unfreeze run twice across a kube-apiserver restart).
pub fn never_started(e: &kube::Error) -> bool {
    use kube::client::UpgradeConnectionError as Upgrade;
    match e {
        kube::Error::Service(source) => source
            .downcast_ref::<hyper_util::client::legacy::Error>()
            .is_some_and(|e| e.is_connect()),
        kube::Error::UpgradeConnection(Upgrade::ProtocolSwitch(code)) => {
            code.is_server_error() || code.as_u16() == 429
        }
        _ => false,
    }
}

/// `attempt` until it reaches the API server or `patience` has passed,
/// waiting 0.5 s and then twice as long each time, up to 5 s.
pub async fn until_reached<T, F, Fut>(patience: Duration, attempt: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    until(patience, unreached, attempt).await
}

/// `attempt` while its error is one `again` allows, until `patience` has
/// passed, waiting 0.5 s and then twice as long each time, up to 5 s.
pub async fn until<T, F, Fut>(
    patience: Duration,
    again: fn(&kube::Error) -> bool,
    attempt: F,
) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let backoff = Backoff {
        patience,
        again,
        longest: Duration::from_secs(5),
    };
    backoff
        .run(attempt, |wait, e| {
            tracing::debug!("API server not reached, trying again in {wait:?}: {e}")
        })
        .await
}

/// How [`until`] and [`at_start`] try again: while `again` allows the
/// error and `patience` has not passed, waiting 0.5 s and then twice as
/// long each time, up to `longest`.
struct Backoff {
    patience: Duration,
    again: fn(&kube::Error) -> bool,
    longest: Duration,
}

impl Backoff {
    async fn run<T, F, Fut>(
        &self,
        mut attempt: F,
        said: impl Fn(Duration, &kube::Error),
    ) -> Result<T, kube::Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let started = tokio::time::Instant::now();
        let mut wait = Duration::from_millis(500);
        loop {
            match attempt().await {
                Err(e) if (self.again)(&e) && started.elapsed() + wait < self.patience => {
                    said(wait, &e);
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(self.longest);
                }
                other => return other,
            }
        }
    }
}

/// How long a process that is starting (the node agent, the controller)
/// waits for the API server before it gives up and exits, for its
/// kubelet to start it again.
pub const START_PATIENCE: Duration = Duration::from_secs(600);

/// `attempt`, the first request of a process that is starting, tried
/// again while the API server is unreached, for up to
/// [`START_PATIENCE`], each failure said: a node agent that exited when
/// its first list met an API server outage or a partition left its node
/// without volume backups until something restarted it (the fault
/// campaign's seeds 3614 and 3620; a kubelet's crash-loop backoff grows
/// to five minutes). An answer (a refusal included) is final at once.
pub async fn at_start<T, F, Fut>(what: &str, attempt: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let backoff = Backoff {
        patience: START_PATIENCE,
        again: unreached,
        longest: Duration::from_secs(10),
    };
    backoff
        .run(attempt, |wait, e| {
            tracing::warn!(
                "{what}: the API server was not reached, trying again in {}: {e}",
                humantime::format_duration(wait)
            )
        })
        .await
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

    /// A connection never made started nothing: a start may be sent
    /// again. An answer (any status) or an upgrade refused with a client
    /// error is final; a refused upgrade with a server error switched no
    /// stream, so started nothing either.
    #[tokio::test]
    async fn only_a_request_that_never_left_may_start_twice() {
        use kube::client::UpgradeConnectionError as Upgrade;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Bound and dropped: nothing listens there now.
        let config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(client, "shop");
        let refused = pods.get("db-0").await.unwrap_err();
        assert!(never_started(&refused), "{refused:?}");
        assert!(unreached(&refused), "{refused:?}");
        assert!(!never_started(&api(503)));
        let switch = |code: u16| {
            kube::Error::UpgradeConnection(Upgrade::ProtocolSwitch(
                http::StatusCode::from_u16(code).unwrap(),
            ))
        };
        assert!(never_started(&switch(500)));
        assert!(!never_started(&switch(403)));
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
