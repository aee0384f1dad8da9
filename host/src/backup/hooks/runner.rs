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

/// How much of a failed hook's stderr is kept.
pub const STDERR_TAIL: usize = 4096;

/// Runs one exec hook for a pod. Implementations must not block the async
/// runtime, and must enforce the hook's timeout.
#[async_trait::async_trait]
pub trait HookRunner: Send + Sync {
    async fn run(&self, target: &HookTarget, hook: &ResolvedHook) -> HookStatus;
}

/// Records every hook as skipped: hooks were not asked to run here.
pub struct SkippingRunner;

#[async_trait::async_trait]
impl HookRunner for SkippingRunner {
    async fn run(&self, _target: &HookTarget, _hook: &ResolvedHook) -> HookStatus {
        HookStatus::Skipped {
            reason: "not run: `iar backup --exec-hooks-locally` runs hooks as local processes; `iar controller` does not run them in pods yet (no pods/exec runner)".into(),
        }
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
    async fn run(&self, target: &HookTarget, hook: &ResolvedHook) -> HookStatus {
        use tokio::io::AsyncReadExt;
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
            .stdout(std::process::Stdio::null())
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
                };
            }
        };
        let pid = child.id();
        let mut stderr = child.stderr.take().expect("stderr is piped");
        // Read stderr while waiting, so a chatty hook cannot fill the pipe
        // and stall; keep only the tail.
        let reader = tokio::spawn(async move {
            let mut kept = Vec::new();
            let mut buf = [0u8; 8192];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > 2 * STDERR_TAIL {
                    kept.drain(..kept.len() - STDERR_TAIL);
                }
            }
            kept
        });
        match tokio::time::timeout(h.timeout, child.wait()).await {
            Ok(Ok(status)) => {
                // The hook's own children may still hold stderr open: end
                // the group so the reader finishes.
                kill_group(pid);
                let stderr = reader.await.unwrap_or_default();
                if status.success() {
                    HookStatus::Succeeded
                } else {
                    HookStatus::Failed {
                        exit_code: status.code(),
                        stderr_tail: tail(&stderr),
                    }
                }
            }
            Ok(Err(e)) => {
                kill_group(pid);
                reader.abort();
                HookStatus::Failed {
                    exit_code: None,
                    stderr_tail: format!("waiting for the hook: {e}"),
                }
            }
            Err(_) => {
                kill_group(pid);
                let _ = child.kill().await;
                reader.abort();
                HookStatus::TimedOut
            }
        }
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
