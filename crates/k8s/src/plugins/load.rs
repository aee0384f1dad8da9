//! Loading one plugin ConfigMap: read the component, check its digest
//! before anything parses it, then [`Plugin::from_bytes`] (world, contract
//! version, compile, link, `applies-to`). Blocking: run it on a blocking
//! thread.

use super::configmap::{self, ConfigMapError, MAX_REFERENCED_BYTES, PluginSpec, Source};
use super::status::Status;
use iar_plugin::plugin::{LoadError, Plugin};
use iar_plugin::runtime::Runtime;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path};
use std::time::Duration;

/// Never read through a path reference, whatever the reference directory:
/// kernel files, devices, and the pod's mounted credentials (the service
/// account token under `/var/run/secrets`, which is `/run/secrets` once
/// the symlink is resolved).
pub const NEVER_READ: [&str; 5] = ["/proc", "/sys", "/dev", "/run/secrets", "/var/run/secrets"];

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
        "ConfigMap {configmap:?}: plugin {plugin:?} belongs to ConfigMap {winner:?}, {why}; this one is not loaded while that one claims the name (rule: plugin-name-unique)"
    )]
    NameConflict {
        configmap: String,
        plugin: String,
        winner: String,
        /// Why the winner wins: created earlier, or the same second and
        /// the smaller uid.
        why: String,
    },
    #[error(
        "ConfigMap {configmap:?}: plugin {plugin:?} asks for more than the grant policy allows: {} (rule: grant-policy)",
        refused.join("; ")
    )]
    GrantRefused {
        configmap: String,
        plugin: String,
        /// What was refused, one entry each, with the policy's bound.
        refused: Vec<String>,
    },
    #[error(
        "ConfigMap {configmap:?}: {stage} took longer than {}; abandoned (rule: load-timeout)",
        humantime::format_duration(*after)
    )]
    TimedOut {
        configmap: String,
        stage: String,
        after: Duration,
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
            LoadFailure::GrantRefused { .. } => Status::GrantRefused,
            LoadFailure::TimedOut { .. } => Status::LoadTimeout,
            LoadFailure::Panicked { .. } => Status::CompileError,
        }
    }
}

/// Reads a component named by a path reference. The path must be a
/// regular file under `dir` (none: path references are refused), with no
/// `.` or `..`, not under [`NEVER_READ`], and still under `dir` once every
/// symlink is resolved. Nothing outside `dir` is even looked at: the
/// lexical checks come first, so the messages say nothing about files the
/// ConfigMap's author could not read. A FIFO or device is refused before
/// it is opened, and opened non-blocking in case it was swapped in since.
pub fn read_path(
    configmap: &str,
    path: &Path,
    dir: Option<&Path>,
) -> Result<Vec<u8>, ConfigMapError> {
    let refused = |reason: String| ConfigMapError::ReferenceRefused {
        configmap: configmap.to_string(),
        reference: path.display().to_string(),
        reason,
    };
    let unavailable = |reason| ConfigMapError::SourceUnavailable {
        configmap: configmap.to_string(),
        reference: path.display().to_string(),
        reason,
    };
    let Some(dir) = dir else {
        return Err(refused(
            "path references are refused: no reference directory is configured (iar controller --plugin-reference-dir)".into(),
        ));
    };
    let never = |p: &Path| NEVER_READ.iter().find(|n| p.starts_with(n)).copied();
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(refused("has a `.` or `..` component".into()));
    }
    if !path.is_absolute() || !path.starts_with(dir) {
        return Err(refused(format!(
            "is not under the reference directory {}",
            dir.display()
        )));
    }
    if let Some(n) = never(path) {
        return Err(refused(format!("is under {n}, which is never read")));
    }
    let canonical_dir = dir
        .canonicalize()
        .map_err(|e| unavailable(Unavailable::Dir(e)))?;
    let canonical = path
        .canonicalize()
        .map_err(|e| unavailable(Unavailable::Io(e)))?;
    if !canonical.starts_with(&canonical_dir) {
        return Err(refused(format!(
            "resolves to a file outside the reference directory {}",
            dir.display()
        )));
    }
    if let Some(n) = never(&canonical) {
        return Err(refused(format!(
            "resolves to a file under {n}, which is never read"
        )));
    }
    let regular = |meta: &std::fs::Metadata| -> Result<(), ConfigMapError> {
        let kind = meta.file_type();
        if kind.is_file() {
            return Ok(());
        }
        use std::os::unix::fs::FileTypeExt;
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_block_device() || kind.is_char_device() {
            "a device"
        } else {
            "not a file"
        };
        Err(refused(format!("is {what}, not a regular file")))
    };
    regular(&std::fs::metadata(&canonical).map_err(|e| unavailable(Unavailable::Io(e)))?)?;
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            // Swapped for a FIFO since the check: opening it does not wait
            // for a writer, and the check below refuses it.
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
            .open(&canonical)
            .map_err(|e| unavailable(Unavailable::Io(e)))?
    };
    regular(
        &file
            .metadata()
            .map_err(|e| unavailable(Unavailable::Io(e)))?,
    )?;
    let mut bytes = Vec::new();
    // One byte over the cap tells "too large" from "exactly the cap".
    file.take(MAX_REFERENCED_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| unavailable(Unavailable::Io(e)))?;
    if bytes.len() as u64 > MAX_REFERENCED_BYTES {
        return Err(unavailable(Unavailable::TooLarge));
    }
    Ok(bytes)
}

/// Verifies and loads one plugin, whose component was read already
/// (`Source::Inline`), with the Velero config it gets.
pub fn load(
    runtime: &Runtime,
    spec: &PluginSpec,
    velero: BTreeMap<String, String>,
) -> Result<Plugin, LoadFailure> {
    let Source::Inline(bytes) = &spec.source else {
        return Err(ConfigMapError::SourceUnavailable {
            configmap: spec.configmap.clone(),
            reference: spec.source.describe(),
            reason: Unavailable::NotRead,
        }
        .into());
    };
    configmap::verify(spec, bytes)?;
    let settings = configmap::merged_settings(spec, velero);
    Plugin::from_bytes(runtime, &spec.name, bytes, settings).map_err(|source| LoadFailure::Load {
        configmap: spec.configmap.clone(),
        source,
    })
}

/// The client https references are fetched with: https only, the
/// platform's roots plus `extra_roots_pem`, and a timeout so a stalled
/// server cannot hold the watcher.
pub(crate) fn https_client(
    extra_roots_pem: Option<&[u8]>,
) -> Result<reqwest::Client, HttpsClientError> {
    iar_core::tls::install_crypto();
    let mut builder = reqwest::Client::builder()
        .https_only(true)
        .connect_timeout(std::time::Duration::from_secs(10))
        .timeout(std::time::Duration::from_secs(120));
    if let Some(pem) = extra_roots_pem {
        let certs =
            reqwest::Certificate::from_pem_bundle(pem).map_err(HttpsClientError::ExtraRoots)?;
        builder = builder.tls_certs_merge(certs);
    }
    builder.build().map_err(HttpsClientError::Build)
}

/// Why the client for https references could not be made.
#[derive(Debug, thiserror::Error)]
pub enum HttpsClientError {
    #[error("extra root certificates: {0}")]
    ExtraRoots(#[source] reqwest::Error),
    #[error("the https client: {0}")]
    Build(#[source] reqwest::Error),
}

/// Why a referenced component could not be read (a path or an https URL).
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    #[error("the reference directory: {0}")]
    Dir(#[source] std::io::Error),
    #[error("{0}")]
    Io(#[source] std::io::Error),
    #[error("{0:#}")]
    Http(#[source] reqwest::Error),
    #[error("larger than {MAX_REFERENCED_BYTES} bytes")]
    TooLarge,
    /// Loaded before its bytes were fetched.
    #[error("not read")]
    NotRead,
}

/// Downloads a component named by an https reference, at most
/// [`MAX_REFERENCED_BYTES`].
pub(crate) async fn fetch(
    client: &reqwest::Client,
    configmap: &str,
    url: &str,
) -> Result<Vec<u8>, ConfigMapError> {
    let unavailable = |reason| ConfigMapError::SourceUnavailable {
        configmap: configmap.to_string(),
        reference: url.to_string(),
        reason,
    };
    let mut response = client
        .get(url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| unavailable(Unavailable::Http(e)))?;
    let too_large = || unavailable(Unavailable::TooLarge);
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
        .map_err(|e| unavailable(Unavailable::Http(e)))?
    {
        bytes.extend_from_slice(&chunk);
        if bytes.len() as u64 > MAX_REFERENCED_BYTES {
            return Err(too_large());
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(r: Result<Vec<u8>, ConfigMapError>) -> (String, String) {
        let e = r.expect_err("refused");
        (e.rule().to_string(), e.to_string())
    }

    #[test]
    fn path_references_need_a_directory_and_stay_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("p.wasm"), b"bytes").unwrap();
        assert_eq!(
            read_path("cm", &d.join("p.wasm"), Some(d)).unwrap(),
            b"bytes"
        );

        let (r, m) = rule(read_path("cm", &d.join("p.wasm"), None));
        assert_eq!(r, "reference-dir");
        assert!(m.contains("--plugin-reference-dir"), "{m}");

        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("token"), b"secret").unwrap();
        // Lexically outside, through `..`, through a symlink.
        for path in [
            outside.path().join("token"),
            d.join("..")
                .join(outside.path().file_name().unwrap())
                .join("token"),
        ] {
            let (r, m) = rule(read_path("cm", &path, Some(d)));
            assert_eq!(r, "reference-dir", "{m}");
        }
        std::os::unix::fs::symlink(outside.path().join("token"), d.join("link.wasm")).unwrap();
        let (r, m) = rule(read_path("cm", &d.join("link.wasm"), Some(d)));
        assert_eq!(r, "reference-dir");
        assert!(m.contains("resolves to a file outside"), "{m}");
        assert!(
            !m.contains(&outside.path().display().to_string()),
            "says nothing of where: {m}"
        );
        // A symlink that stays inside is fine.
        std::os::unix::fs::symlink(d.join("p.wasm"), d.join("alias.wasm")).unwrap();
        assert_eq!(
            read_path("cm", &d.join("alias.wasm"), Some(d)).unwrap(),
            b"bytes"
        );
    }

    #[test]
    fn fifos_devices_proc_and_tokens_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let fifo = d.join("fifo.wasm");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer: opening it blocking would hang this test.
        let (r, m) = rule(read_path("cm", &fifo, Some(d)));
        assert_eq!(r, "reference-dir");
        assert!(m.contains("a FIFO, not a regular file"), "{m}");
        std::fs::create_dir(d.join("sub")).unwrap();
        let (_, m) = rule(read_path("cm", &d.join("sub"), Some(d)));
        assert!(m.contains("a directory"), "{m}");
        std::os::unix::fs::symlink("/dev/zero", d.join("zero.wasm")).unwrap();
        let (r, _) = rule(read_path("cm", &d.join("zero.wasm"), Some(d)));
        assert_eq!(r, "reference-dir");

        // Even with `/` as the directory.
        let root = Path::new("/");
        for path in [
            "/proc/self/environ",
            "/dev/zero",
            "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "/run/secrets/kubernetes.io/serviceaccount/token",
        ] {
            let (r, m) = rule(read_path("cm", Path::new(path), Some(root)));
            assert_eq!(r, "reference-dir", "{path}: {m}");
            assert!(m.contains("never read"), "{m}");
        }
        std::os::unix::fs::symlink("/proc/self/environ", d.join("env.wasm")).unwrap();
        let (r, m) = rule(read_path("cm", &d.join("env.wasm"), Some(root)));
        assert_eq!(r, "reference-dir");
        assert!(m.contains("never read"), "{m}");
    }
}
