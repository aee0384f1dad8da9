//! DownloadRequests (`downloadrequests.iar.dev`), as Velero's: someone
//! who may create one in the controller's namespace, but holds no
//! credentials for the bucket, asks for a backup's log, results or
//! contents (or a restore's log or results); the leader answers with a
//! URL the store signed for ten minutes (`iar logs NAME --cluster`, `iar
//! describe NAME --cluster`). Answered requests are deleted once their
//! URL has expired. A target iar does not keep, a name that is no object
//! name, or a store that signs no URLs ends the request `Failed` with
//! its reason (iar's own phase: Velero's would stay `New` for ever).

use super::crd::{DownloadRequest, DownloadTarget};
use iar_core::store::restores::RestoreFile;
use iar_core::store::{BackupFile, BackupStore, Download};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;
use std::time::{Duration, SystemTime};

/// How long a signed URL reads, as Velero's server signs them.
pub const URL_LIFETIME: Duration = Duration::from_secs(600);
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How a refused request says the file is not there ([`ThroughController::fetch`]
/// reads it back as `None`).
const NO_SUCH_FILE: &str = "has no such file in the store";

/// The store key a target names, or why there is none.
pub fn key_of(target: &DownloadTarget) -> Result<String, String> {
    iar_core::names::dns_subdomain(&target.name)
        .map_err(|e| format!("target name {:?}: {e} (rule: download-target)", target.name))?;
    let name = target.name.as_str();
    Ok(match target.kind.as_str() {
        "BackupLog" => BackupFile::Logs.key(name),
        "BackupContents" => BackupFile::Contents.key(name),
        "BackupResults" => BackupFile::Results.key(name),
        "BackupItemOperations" => BackupFile::ItemOperations.key(name),
        "BackupResourceList" => BackupFile::ResourceList.key(name),
        "RestoreLog" => RestoreFile::Logs.key(name),
        "RestoreResults" => RestoreFile::Results.key(name),
        other => {
            return Err(format!(
                "target kind {other:?} is not one iar keeps (BackupLog, BackupContents, BackupResults, BackupItemOperations, BackupResourceList, RestoreLog, RestoreResults) (rule: download-target)"
            ));
        }
    })
}

/// Answers the namespace's DownloadRequests for as long as it runs (the
/// leader's term).
pub async fn answer_forever(
    client: kube::Client,
    namespace: String,
    store: BackupStore,
) -> std::convert::Infallible {
    let api = Api::<DownloadRequest>::namespaced(client, &namespace);
    loop {
        if let Err(e) = tick(&api, &store).await {
            tracing::warn!("download requests: {e}");
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

async fn tick(api: &Api<DownloadRequest>, store: &BackupStore) -> Result<(), kube::Error> {
    let now = SystemTime::now();
    let listed = api.list(&ListParams::default()).await?;
    for request in listed {
        let name = request.name_any();
        let status = request.status.clone().unwrap_or_default();
        match status.phase.as_deref() {
            None | Some("New") => {
                let answer = answer(store, &request.spec.target).await;
                let status = match answer {
                    Ok(url) => json!({"phase": "Processed", "downloadURL": url,
                                      "expiration": rfc3339(now + URL_LIFETIME)}),
                    Err(reason) => {
                        tracing::info!(request = %name, "download refused: {reason}");
                        json!({"phase": "Failed", "reason": reason,
                               "expiration": rfc3339(now + URL_LIFETIME)})
                    }
                };
                super::resource::patch_status(api, &name, None, &status).await?;
            }
            _ => {
                let expired = status
                    .expiration
                    .as_deref()
                    .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
                    .is_none_or(|t| t <= now);
                if expired {
                    let _ = api.delete(&name, &DeleteParams::default()).await;
                }
            }
        }
    }
    Ok(())
}

async fn answer(store: &BackupStore, target: &DownloadTarget) -> Result<String, String> {
    let key = key_of(target)?;
    match store.download_url(&key, URL_LIFETIME).await {
        Ok(Download::Url(url)) => Ok(url.to_string()),
        Ok(Download::NotFound) => Err(format!(
            "{} {:?} {NO_SUCH_FILE} ({key})",
            if target.kind.starts_with("Restore") {
                "restore"
            } else {
                "backup"
            },
            target.name
        )),
        Ok(Download::Unsigned) => Err(format!(
            "the store {} signs no download URLs here (S3 without server-side encryption, request-payer or custom client options does); read it with the store's credentials: iar logs/describe --store",
            store.url()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// A backup's or restore's files read through the controller of a
/// namespace, with no credentials for the bucket: what `iar logs` and
/// `iar describe` print with `--cluster`.
pub struct ThroughController {
    client: kube::Client,
    namespace: String,
}

impl ThroughController {
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        ThroughController {
            client,
            namespace: namespace.to_string(),
        }
    }

    /// The namespace whose controller answers.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `kind` of `name`, through the URL the controller answers a
    /// DownloadRequest with, ungzipped (bounded as the store's own reads)
    /// where the store gzips it; `None` when the store has no such file.
    /// The request is deleted once answered.
    pub async fn fetch(&self, kind: &str, name: &str) -> Result<Option<Vec<u8>>, String> {
        use kube::api::{ObjectMeta, PostParams};
        let namespace = &self.namespace;
        let target = DownloadTarget {
            kind: kind.into(),
            name: name.into(),
        };
        key_of(&target)?;
        let api = Api::<DownloadRequest>::namespaced(self.client.clone(), namespace);
        let mut request = DownloadRequest::new("", super::crd::DownloadRequestSpec { target });
        request.metadata = ObjectMeta {
            generate_name: Some(format!("{}-", &name[..name.len().min(40)])),
            ..ObjectMeta::default()
        };
        let made = api
            .create(&PostParams::default(), &request)
            .await
            .map_err(|e| format!("creating a DownloadRequest in {namespace}: {e}"))?;
        let made = made.name_any();
        let answered = async {
            let until = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                let got = api
                    .get(&made)
                    .await
                    .map_err(|e| format!("reading DownloadRequest {namespace}/{made}: {e}"))?;
                let status = got.status.unwrap_or_default();
                match status.phase.as_deref() {
                    Some("Processed") => {
                        return status.download_url.map(Some).ok_or_else(|| {
                            format!("DownloadRequest {made}: Processed without a URL")
                        });
                    }
                    Some("Failed") => {
                        let reason = status.reason.unwrap_or_default();
                        return if reason.contains(NO_SUCH_FILE) {
                            Ok(None)
                        } else {
                            Err(reason)
                        };
                    }
                    _ if std::time::Instant::now() > until => {
                        return Err(format!(
                            "no controller answered DownloadRequest {namespace}/{made} within 60 s (is iar controller running in {namespace}?)"
                        ));
                    }
                    _ => tokio::time::sleep(Duration::from_millis(250)).await,
                }
            }
        }
        .await;
        let _ = api.delete(&made, &DeleteParams::default()).await;
        let Some(url) = answered? else {
            return Ok(None);
        };
        iar_core::tls::install_crypto();
        let body = reqwest::Client::new()
            .get(&url)
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| format!("reading {kind} of {name:?} through its URL: {e}"))?
            .bytes()
            .await
            .map_err(|e| format!("reading {kind} of {name:?} through its URL: {e}"))?;
        if kind == "BackupContents" {
            return Ok(Some(body.to_vec()));
        }
        iar_core::store::gz::gunzip_at_most(&body, iar_core::store::gz::JSON_MAX)
            .map(Some)
            .map_err(|e| format!("{kind} of {name:?}: {e}"))
    }

    /// The Backup resource `name`, if there is one.
    pub async fn backup(&self, name: &str) -> Result<Option<super::crd::Backup>, String> {
        Api::<super::crd::Backup>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(name)
            .await
            .map_err(|e| format!("reading Backup {}/{name}: {e}", self.namespace))
    }

    /// The Restore resource `name`, if there is one.
    pub async fn restore(&self, name: &str) -> Result<Option<super::crd::Restore>, String> {
        Api::<super::crd::Restore>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(name)
            .await
            .map_err(|e| format!("reading Restore {}/{name}: {e}", self.namespace))
    }
}
