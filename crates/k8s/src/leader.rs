//! Leader election with a `coordination.k8s.io` Lease, the way
//! client-go's leaderelection does it: the holder renews the Lease every
//! third of its duration; another replica takes it over only once it has
//! gone unrenewed for a whole duration. Every write is a replace carrying
//! the resourceVersion that was read, so of two replicas racing for an
//! expired Lease the API server lets exactly one win.
//!
//! Backups are also leased in the store (`store::lease`), so even a leader
//! that has not yet noticed it was replaced cannot write over the new
//! leader's backup.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("lease {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("lost leadership of lease {namespace}/{name} to {holder:?}")]
    Lost {
        namespace: String,
        name: String,
        holder: String,
    },
}

/// One replica's view of the Lease.
pub struct Elector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    duration: Duration,
}

/// What one attempt found.
#[derive(Debug, PartialEq, Eq)]
pub enum Attempt {
    /// This replica holds the Lease (acquired or renewed).
    Leading,
    /// Another replica holds an unexpired Lease.
    Following { holder: String },
}

impl Elector {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Self {
        Elector {
            api: Api::namespaced(client, namespace),
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            duration,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn api_error(&self, source: kube::Error) -> LeaderError {
        LeaderError::Api {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    fn spec(&self, now: Timestamp, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration.as_secs().max(1) as i32),
            acquire_time: Some(acquired.unwrap_or(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Acquires, renews or observes the Lease, once.
    pub async fn try_lead(&self) -> Result<Attempt, LeaderError> {
        let now = Timestamp::now();
        let Some(current) = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.api_error(e))?
        else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, None, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Leading),
                // Another replica created it first.
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Following {
                    holder: "another replica".into(),
                }),
                Err(e) => Err(self.api_error(e)),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.identity;
        if !ours && !holder.is_empty() && !expired(&spec, now) {
            return Ok(Attempt::Following { holder });
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        let acquired = if ours {
            spec.acquire_time.clone()
        } else {
            None
        };
        let mut next = current.clone();
        next.spec = Some(self.spec(now, acquired, transitions));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
        {
            Ok(_) => Ok(Attempt::Leading),
            // The resourceVersion moved: someone else wrote first.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Following { holder }),
            Err(e) => Err(self.api_error(e)),
        }
    }

    /// Waits until this replica leads, trying every third of the duration.
    pub async fn acquire(&self) -> Result<(), LeaderError> {
        loop {
            match self.try_lead().await {
                Ok(Attempt::Leading) => return Ok(()),
                Ok(Attempt::Following { holder }) => {
                    tracing::debug!(%holder, "not the leader; waiting");
                }
                Err(e) => tracing::warn!("leader election: {e}; retrying"),
            }
            tokio::time::sleep(self.duration / 3).await;
        }
    }

    /// Renews the Lease every third of its duration for as long as it is
    /// held; returns when it is lost, or when renewals have failed for a
    /// whole duration (it may have expired: another replica may lead).
    pub async fn keep(&self) -> LeaderError {
        let mut last_renewed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.duration / 3).await;
            match self.try_lead().await {
                Ok(Attempt::Leading) => last_renewed = tokio::time::Instant::now(),
                Ok(Attempt::Following { holder }) => {
                    return LeaderError::Lost {
                        namespace: self.namespace.clone(),
                        name: self.name.clone(),
                        holder,
                    };
                }
                Err(e) if last_renewed.elapsed() >= self.duration => return e,
                Err(e) => tracing::warn!("renewing the leader lease failed, will retry: {e}"),
            }
        }
    }

    /// Runs `work` while this replica leads: waits to lead, then runs it
    /// until it ends or leadership is lost (then it is dropped where it
    /// stands and the error returned).
    pub async fn run<T>(&self, work: impl Future<Output = T>) -> Result<T, LeaderError> {
        self.acquire().await?;
        tracing::info!(identity = %self.identity, lease = %self.name, "leading");
        tokio::select! {
            out = work => Ok(out),
            lost = self.keep() => Err(lost),
        }
    }
}

/// Whether a Lease went unrenewed for its whole duration.
pub fn expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    let (Some(renewed), Some(seconds)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return true;
    };
    let until = renewed.0 + std::time::Duration::from_secs(seconds.max(0) as u64);
    until < now
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(renewed_secs_ago: i64, duration: i32) -> LeaseSpec {
        let now = Timestamp::now();
        LeaseSpec {
            holder_identity: Some("a".into()),
            renew_time: Some(MicroTime(
                now - std::time::Duration::from_secs(renewed_secs_ago as u64),
            )),
            lease_duration_seconds: Some(duration),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_lease_expires_only_after_its_whole_duration() {
        let now = Timestamp::now();
        assert!(!expired(&spec(5, 15), now));
        assert!(!expired(&spec(14, 15), now));
        assert!(expired(&spec(16, 15), now));
        // A lease with no renew time or duration was never held.
        assert!(expired(&LeaseSpec::default(), now));
    }
}
