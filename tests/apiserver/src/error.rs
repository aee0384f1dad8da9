//! Why an API server did not start.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{path:?} is not an executable file")]
    BadBinaryPath { path: PathBuf },
    #[error("building with {script:?} failed ({status}); its output is above")]
    BuildFailed {
        script: PathBuf,
        status: std::process::ExitStatus,
    },
    #[error("no etcd binary for this platform: {0}")]
    NoEtcd(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} exited during startup ({status}); last lines of {log:?}:\n{tail}")]
    Exited {
        program: &'static str,
        status: std::process::ExitStatus,
        log: PathBuf,
        tail: String,
    },
    #[error("{program} was not ready after {waited:?} ({last}); last lines of {log:?}:\n{tail}")]
    NotReady {
        program: &'static str,
        waited: Duration,
        last: String,
        log: PathBuf,
        tail: String,
    },
    /// What a real node ([`crate::node`]) needs and this machine lacks: a
    /// reason to skip (or, under `CI=true`, to fail), not a bug.
    #[error("the real node cannot run here: {0}")]
    Unavailable(String),
    #[error("kube client for {context}: {source}")]
    Client {
        context: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl StartError {
    /// [`StartError::NotReady`], with the last lines of `log`.
    pub(crate) fn not_ready(
        program: &'static str,
        waited: Duration,
        last: String,
        log: &std::path::Path,
    ) -> StartError {
        StartError::NotReady {
            program,
            waited,
            last,
            tail: crate::process::log_tail(log),
            log: log.to_path_buf(),
        }
    }

    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StartError {
        let what = what.into();
        move |source| StartError::Io { what, source }
    }

    /// A port taken between choosing it and binding it: worth a retry with
    /// fresh ports.
    pub(crate) fn is_port_race(&self) -> bool {
        match self {
            StartError::Exited { tail, .. } | StartError::NotReady { tail, .. } => {
                tail.contains("address already in use")
            }
            _ => false,
        }
    }
}
