//! Writes the store itself refuses once their lease has ended.
//!
//! The fence ([`super::fence`]) checks a backup's lease just before each
//! write; a write held up on the way (a partition that delays packets and
//! then delivers them, a proxy that buffers) still lands after another
//! process took the lease over, and overwrites what that process wrote.
//! The fault campaign's lease audit saw it (seed 2014: a results file
//! arrived 5 s after a takeover). S3 cannot make a PUT conditional on
//! another object (the lease), but it does enforce one deadline on every
//! request it authorises: a presigned URL's `X-Amz-Expires`, checked when
//! the request arrives. So a fenced write goes as a PUT to a URL presigned
//! to expire no later than the writer's lease; the store refuses it after
//! that, and a taker acts only after it.

use bytes::Bytes;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::signer::{Method, Signer};
use object_store::{ClientConfigKey, HeaderValue};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// What the deadline writer could not do.
#[derive(Debug)]
pub(super) enum DeadlineError {
    /// The deadline passed (here, or at the store, which refused it).
    Passed(String),
    /// The store refused it for another reason, or never answered.
    Failed(object_store::Error),
}

/// PUTs through presigned URLs, for an S3 store.
#[derive(Clone)]
pub struct DeadlineWriter {
    signer: Arc<dyn Signer>,
    /// The store's path within the bucket (the URL's), which the signer,
    /// working on the whole bucket, does not apply.
    prefix: Path,
    client: reqwest::Client,
}

impl std::fmt::Debug for DeadlineWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadlineWriter")
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// The client options a plain HTTP client would not honour as object_store
/// does: with any of them set, writes keep to the fence alone.
const CLIENT_OPTIONS_OWN_CLIENT_LACKS: [ClientConfigKey; 5] = [
    ClientConfigKey::AllowInvalidCertificates,
    ClientConfigKey::NoSystemCertificates,
    ClientConfigKey::ProxyUrl,
    ClientConfigKey::ProxyCaCertificate,
    ClientConfigKey::DefaultContentType,
];

impl DeadlineWriter {
    /// For `s3` as `builder` configured it, or `None` where a presigned
    /// PUT would not write what object_store's own PUT writes: server-side
    /// encryption headers, request-payer, or client options (certificates,
    /// proxies) a plain client lacks.
    pub fn for_s3(
        builder: &AmazonS3Builder,
        s3: Arc<AmazonS3>,
        prefix: Path,
        user_agent: Option<HeaderValue>,
    ) -> Option<Self> {
        let set = |key: AmazonS3ConfigKey| {
            builder
                .get_config_value(&key)
                .is_some_and(|v| !v.is_empty() && v != "false")
        };
        // object_store does not name its encryption keys' type outside.
        let encryption = "aws_server_side_encryption".parse::<AmazonS3ConfigKey>();
        if encryption.is_ok_and(set)
            || set(AmazonS3ConfigKey::RequestPayer)
            || CLIENT_OPTIONS_OWN_CLIENT_LACKS
                .into_iter()
                .any(|k| set(AmazonS3ConfigKey::Client(k)))
        {
            return None;
        }
        crate::tls::install_crypto();
        let agent = user_agent.unwrap_or_else(|| {
            HeaderValue::from_static(concat!("iar/", env!("CARGO_PKG_VERSION")))
        });
        let client = reqwest::Client::builder()
            .user_agent(agent)
            .connect_timeout(Duration::from_secs(5))
            .build()
            .ok()?;
        Some(DeadlineWriter {
            signer: s3,
            prefix,
            client,
        })
    }

    /// A URL anyone holding it may GET `path` by, for `expires`: what a
    /// DownloadRequest answers with, as Velero's server does.
    pub(super) async fn signed_get(
        &self,
        path: &Path,
        expires: Duration,
    ) -> object_store::Result<url::Url> {
        let full: Path = self.prefix.parts().chain(path.parts()).collect();
        self.signer.signed_url(Method::GET, &full, expires).await
    }

    /// Writes `bytes` at `path` if the store takes it before `deadline`
    /// (as `now` tells the time); retried as the store's other requests
    /// are ([`super::retry_config`]), never past the deadline.
    pub(super) async fn put_by(
        &self,
        path: &Path,
        bytes: Bytes,
        deadline: SystemTime,
        now: impl Fn() -> SystemTime,
    ) -> Result<(), DeadlineError> {
        let full: Path = self.prefix.parts().chain(path.parts()).collect();
        let backoff = super::retry_config().backoff;
        let mut wait = backoff.init_backoff;
        let mut last_failure = None;
        loop {
            let left = deadline.duration_since(now()).unwrap_or_default();
            // Whole seconds from the signature's time, itself whole
            // seconds: floored, the URL never outlives the lease.
            let expires = Duration::from_secs(left.as_secs());
            if expires.is_zero() {
                return Err(DeadlineError::Passed(match last_failure {
                    Some(e) => format!("its lease ended before the store took the write ({e})"),
                    None => "its lease has under a second left".into(),
                }));
            }
            let url = self
                .signer
                .signed_url(Method::PUT, &full, expires)
                .await
                .map_err(DeadlineError::Failed)?;
            let answer = self
                .client
                .put(url)
                .body(bytes.clone())
                // Waiting longer for the answer is no use: the store will
                // have refused the write by then.
                .timeout(left + Duration::from_secs(1))
                .send()
                .await;
            let failure = match answer {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => {
                    let status = r.status();
                    let body = r.text().await.unwrap_or_default();
                    if status.as_u16() == 403 && body.contains("xpired") {
                        return Err(DeadlineError::Passed(format!(
                            "the store refused the write after its lease ended: {status}"
                        )));
                    }
                    if status.is_client_error() && status.as_u16() != 408 && status.as_u16() != 429
                    {
                        return Err(DeadlineError::Failed(generic(format!(
                            "PUT {full}: {status}: {body}"
                        ))));
                    }
                    format!("{status}")
                }
                Err(e) => e.to_string(),
            };
            last_failure = Some(failure);
            let left = deadline.duration_since(now()).unwrap_or_default();
            tokio::time::sleep(wait.min(left)).await;
            wait = (wait.mul_f64(backoff.base)).min(backoff.max_backoff);
        }
    }
}

fn generic(message: String) -> object_store::Error {
    object_store::Error::Generic {
        store: "S3",
        source: message.into(),
    }
}
