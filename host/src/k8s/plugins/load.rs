//! Loading one plugin ConfigMap: read the component, check its digest
//! before anything parses it, then [`Plugin::from_bytes`] (world, contract
//! version, compile, link, `applies-to`). Blocking: run it on a blocking
//! thread.

use super::configmap::{self, ConfigMapError, MAX_REFERENCED_BYTES, PluginSpec, Source};
use super::status::Status;
use crate::engine::Runtime;
use crate::plugin::{LoadError, Plugin};
use std::collections::BTreeMap;
use std::io::Read;

/// Why a plugin ConfigMap did not (re)load. The previous version, if any,
/// stays loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadFailure {
    #[error(transparent)]
    ConfigMap(#[from] ConfigMapError),
    #[error("ConfigMap {configmap:?}: {source}")]
    Load {
        configmap: String,
        #[source]
        source: LoadError,
    },
    #[error(
        "ConfigMap {configmap:?}: plugin {plugin:?} is already loaded from ConfigMap {other:?} (rule: plugin-name-unique)"
    )]
    NameConflict {
        configmap: String,
        plugin: String,
        other: String,
    },
    #[error("ConfigMap {configmap:?}: loading the plugin panicked: {reason} (rule: host-panic)")]
    Panicked { configmap: String, reason: String },
}

impl LoadFailure {
    pub fn status(&self) -> Status {
        match self {
            LoadFailure::ConfigMap(e) => Status::of_configmap_error(e),
            LoadFailure::Load { source, .. } => Status::of_load_error(source),
            LoadFailure::NameConflict { .. } => Status::NameConflict,
            LoadFailure::Panicked { .. } => Status::CompileError,
        }
    }
}

/// Reads the component a spec names.
fn read(spec: &PluginSpec) -> Result<Vec<u8>, ConfigMapError> {
    let unavailable = |reason: String| ConfigMapError::SourceUnavailable {
        configmap: spec.configmap.clone(),
        reference: spec.source.describe(),
        reason,
    };
    match &spec.source {
        Source::Inline(bytes) => Ok(bytes.clone()),
        Source::Path(path) => {
            let file = std::fs::File::open(path).map_err(|e| unavailable(e.to_string()))?;
            let mut bytes = Vec::new();
            // One byte over the cap tells "too large" from "exactly the cap".
            file.take(MAX_REFERENCED_BYTES + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| unavailable(e.to_string()))?;
            if bytes.len() as u64 > MAX_REFERENCED_BYTES {
                return Err(unavailable(format!(
                    "larger than {MAX_REFERENCED_BYTES} bytes"
                )));
            }
            Ok(bytes)
        }
        // Fetched on the async side by `fetch` before the blocking load.
        Source::Url(_) => Err(unavailable("not fetched".into())),
    }
}

/// Reads, verifies and loads one plugin with the Velero config it gets.
pub fn load(
    runtime: &Runtime,
    spec: &PluginSpec,
    velero: BTreeMap<String, String>,
) -> Result<Plugin, LoadFailure> {
    let bytes = read(spec)?;
    configmap::verify(spec, &bytes)?;
    let settings = configmap::merged_settings(spec, velero);
    Plugin::from_bytes(runtime, &spec.name, &bytes, settings).map_err(|source| LoadFailure::Load {
        configmap: spec.configmap.clone(),
        source,
    })
}

/// The client https references are fetched with: https only, the
/// platform's roots plus `extra_roots_pem`, and a timeout so a stalled
/// server cannot hold the watcher.
pub(crate) fn https_client(extra_roots_pem: Option<&[u8]>) -> Result<reqwest::Client, String> {
    crate::k8s::install_crypto();
    let mut builder = reqwest::Client::builder()
        .https_only(true)
        .connect_timeout(std::time::Duration::from_secs(10))
        .timeout(std::time::Duration::from_secs(120));
    if let Some(pem) = extra_roots_pem {
        let certs = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| format!("extra root certificates: {e}"))?;
        builder = builder.tls_certs_merge(certs);
    }
    builder
        .build()
        .map_err(|e| format!("the https client: {e}"))
}

/// Downloads a component named by an https reference, at most
/// [`MAX_REFERENCED_BYTES`].
pub(crate) async fn fetch(
    client: &reqwest::Client,
    configmap: &str,
    url: &str,
) -> Result<Vec<u8>, ConfigMapError> {
    let unavailable = |reason: String| ConfigMapError::SourceUnavailable {
        configmap: configmap.to_string(),
        reference: url.to_string(),
        reason,
    };
    let mut response = client
        .get(url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| unavailable(format!("{e:#}")))?;
    let too_large = || unavailable(format!("larger than {MAX_REFERENCED_BYTES} bytes"));
    if response
        .content_length()
        .is_some_and(|n| n > MAX_REFERENCED_BYTES)
    {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| unavailable(format!("{e:#}")))?
    {
        bytes.extend_from_slice(&chunk);
        if bytes.len() as u64 > MAX_REFERENCED_BYTES {
            return Err(too_large());
        }
    }
    Ok(bytes)
}
