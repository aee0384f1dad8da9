//! Where hooks run: [`LocalProcessRunner`] runs each as a local process
//! (`--exec-hooks-locally`), [`SkippingRunner`] records them as skipped.
//!
//! A local hook finds the pod's volume data through its environment:
//! `IAR_VOLUME_DIR_<VOLUME>` for each volume of the pod that has a data
//! directory (the name upper-cased, every character other than `A-Z0-9`
//! turned into `_`), plus `IAR_VOLUME_DATA` (the root), `IAR_POD_NAMESPACE`,
//! `IAR_POD_NAME`, `IAR_CONTAINER`, `IAR_HOOK_PHASE`. Its working
//! directory is the root. Environment variables rather than a working
//! directory per volume because a pod has several volumes and one hook may
//! touch any of them, as a command exec'd in the container would.

use std::path::PathBuf;

use super::{HookStatus, HookTarget, ResolvedHook};

/// How much of a hook's stdout and of its stderr is kept.
pub const STDERR_TAIL: usize = 4096;

/// What a hook printed: the last [`STDERR_TAIL`] bytes of each stream, for
/// the backup's log (Velero logs both).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HookOutput {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub stdout: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub stderr: String,
}

impl HookOutput {
    pub fn is_empty(&self) -> bool {
        self.stdout.is_empty() && self.stderr.is_empty()
    }

    /// Each stream that printed something, as `(stream, text)` for one
    /// line of the backup's log: its control characters (newlines, carriage
    /// returns, terminal escapes) escaped as a plugin's log lines are
    /// ([`iar_plugin::sandbox::one_line`]), so a hook cannot forge a line or
    /// colour the terminal of whoever reads `iar logs`.
    pub fn log_lines(&self) -> impl Iterator<Item = (&'static str, String)> + '_ {
        [("stdout", &self.stdout), ("stderr", &self.stderr)]
            .into_iter()
            .filter(|(_, text)| !text.is_empty())
            .map(|(stream, text)| {
                (
                    stream,
                    iar_plugin::sandbox::one_line(text.trim_end().to_string()),
                )
            })
    }
}

/// One hook's run: how it ended and what it printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookRun {
    pub status: HookStatus,
    pub output: HookOutput,
}

impl From<HookStatus> for HookRun {
    fn from(status: HookStatus) -> Self {
        HookRun {
            status,
            output: HookOutput::default(),
        }
    }
}

/// Runs one exec hook for a pod. Implementations must not block the async
/// runtime, and must enforce the hook's timeout.
#[async_trait::async_trait]
pub trait HookRunner: Send + Sync {
    async fn run(&self, target: &HookTarget, hook: &ResolvedHook) -> HookRun;
}

/// Keeps the last [`STDERR_TAIL`] bytes of a stream read in pieces.
#[derive(Default)]
pub struct Tail(Vec<u8>);

impl Tail {
    pub fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
        if self.0.len() > 2 * STDERR_TAIL {
            self.0.drain(..self.0.len() - STDERR_TAIL);
        }
    }

    /// The tail as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        tail(&self.0)
    }

    /// Reads `stream` to its end (or its first error), keeping the tail.
    pub async fn of(mut stream: impl tokio::io::AsyncRead + Unpin) -> Tail {
        use tokio::io::AsyncReadExt;
        let mut kept = Tail::default();
        let mut buf = [0u8; 8192];
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                break;
            }
            kept.push(&buf[..n]);
        }
        kept
    }
}

/// Records every hook as skipped: hooks were not asked to run here.
pub struct SkippingRunner;

#[async_trait::async_trait]
impl HookRunner for SkippingRunner {
    async fn run(&self, _target: &HookTarget, _hook: &ResolvedHook) -> HookRun {
        HookStatus::Skipped {
            reason: "not run: this backup runs over manifests; `iar backup --exec-hooks-locally` runs hooks as local processes, `iar controller` runs them in the pod's container (pods/exec)".into(),
        }
        .into()
    }
}

/// A hook's `PATH` when iar's own environment has none.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The variables a hook gets besides its `IAR_*` ones; every other variable
/// of iar's environment is withheld.
pub const HOOK_ENV: [&str; 2] = ["PATH", "LANG"];

/// Runs each hook's command as a local process (argv as given, no shell),
/// in its own process group so that a timeout kills everything it started.
/// Its environment is cleared first (see the module's documentation).
pub struct LocalProcessRunner {
    /// `--volume-data`: the working directory, `IAR_VOLUME_DATA`.
    pub volume_data: PathBuf,
}

/// `IAR_VOLUME_DIR_` + the volume name with every character other than
/// `A-Z0-9` as `_`, upper-cased.
pub fn volume_env_name(volume: &str) -> String {
    let mut s = String::from("IAR_VOLUME_DIR_");
    s.extend(volume.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    s
}

fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_TAIL);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

#[async_trait::async_trait]
impl HookRunner for LocalProcessRunner {
    async fn run(&self, target: &HookTarget, hook: &ResolvedHook) -> HookRun {
        let h = &hook.hook;
        let mut cmd = tokio::process::Command::new(&h.command[0]);
        let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
        cmd.args(&h.command[1..])
            .env_clear()
            .env("PATH", path)
            .env("LANG", "C.UTF-8")
            .current_dir(&self.volume_data)
            .env("IAR_VOLUME_DATA", &self.volume_data)
            .env("IAR_POD_NAMESPACE", &target.pod.namespace)
            .env("IAR_POD_NAME", &target.pod.name)
            .env("IAR_CONTAINER", &h.container)
            .env("IAR_HOOK_PHASE", hook.phase.prefix())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        for (volume, dir) in &target.volume_dirs {
            cmd.env(volume_env_name(volume), dir);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return HookStatus::Failed {
                    exit_code: None,
                    stderr_tail: format!("cannot start {:?}: {e}", h.command[0]),
                }
                .into();
            }
        };
        let pid = child.id();
        // Read both streams while waiting, so a chatty hook cannot fill a
        // pipe and stall; keep only the tails.
        let stdout = tokio::spawn(Tail::of(child.stdout.take().expect("stdout is piped")));
        let stderr = tokio::spawn(Tail::of(child.stderr.take().expect("stderr is piped")));
        let status = match tokio::time::timeout(h.timeout, child.wait()).await {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => {
                kill_group(pid);
                stdout.abort();
                stderr.abort();
                return HookStatus::Failed {
                    exit_code: None,
                    stderr_tail: format!("waiting for the hook: {e}"),
                }
                .into();
            }
            Err(_) => {
                kill_group(pid);
                let _ = child.kill().await;
                stdout.abort();
                stderr.abort();
                return HookStatus::TimedOut.into();
            }
        };
        // The hook's own children may still hold its streams open: end the
        // group so the readers finish.
        kill_group(pid);
        let output = HookOutput {
            stdout: stdout.await.unwrap_or_default().text(),
            stderr: stderr.await.unwrap_or_default().text(),
        };
        let status = if status.success() {
            HookStatus::Succeeded
        } else {
            HookStatus::Failed {
                exit_code: status.code(),
                stderr_tail: output.stderr.clone(),
            }
        };
        HookRun { status, output }
    }
}

/// SIGKILL to the process group the hook leads (it was started with
/// `process_group(0)`, so its group id is its pid). The group is ours alone.
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: kill(2) with a negative pid signals that process group; it
        // touches no memory of ours.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}
