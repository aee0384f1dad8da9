//! The server processes: spawned in process groups of their own, logged to
//! files, killed as whole groups.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;

use crate::error::StartError;

/// One running server program.
pub(crate) struct ServerProcess {
    pub(crate) program: &'static str,
    pub(crate) child: Child,
    pub(crate) log: PathBuf,
}

impl ServerProcess {
    /// Starts `command` with stdout and stderr appended to `log`, in a new
    /// process group, killed by the kernel if this test process dies.
    pub(crate) fn spawn(
        program: &'static str,
        mut command: Command,
        log: PathBuf,
    ) -> Result<ServerProcess, StartError> {
        // Appended to: a restarted program's log follows its first run's.
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(StartError::io(format!("create {log:?}")))?;
        let err = out
            .try_clone()
            .map_err(StartError::io(format!("clone {log:?}")))?;
        command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its own group, so a kill reaches anything it forks, and a
            // Ctrl-C meant for cargo does not race our teardown.
            .process_group(0);
        die_with_parent(&mut command);
        let child = spawner_spawn(command).map_err(StartError::io(format!("spawn {program}")))?;
        Ok(ServerProcess {
            program,
            child,
            log,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Err` with the log's tail if the process has already exited.
    pub(crate) fn check_running(&mut self) -> Result<(), StartError> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(StartError::Exited {
                program: self.program,
                status,
                log: self.log.clone(),
                tail: log_tail(&self.log),
            }),
            Ok(None) => Ok(()),
            Err(e) => Err(StartError::Io {
                what: format!("wait for {}", self.program),
                source: e,
            }),
        }
    }

    /// Kills the whole process group and reaps the child.
    pub(crate) fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // The group id is the child's pid (process_group(0)).
            let group = -(self.child.id() as libc::pid_t);
            // SAFETY: kill(2) with a negative pid signals that process group;
            // it touches no memory of ours.
            unsafe { libc::kill(group, libc::SIGKILL) };
        }
        let _ = self.child.wait();
    }
}

/// The last lines of a log file, for error messages.
pub(crate) fn log_tail(path: &Path) -> String {
    const MAX: u64 = 4096;
    let Ok(mut file) = File::open(path) else {
        return String::from("(no log)");
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(MAX)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A loopback port free at the time of asking. Another process may take it
/// before the server binds it; startup retries with fresh ports then.
pub(crate) fn free_port() -> Result<u16, StartError> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(StartError::io("bind a loopback port"))
}

/// Asks the kernel to SIGKILL the child when its parent thread exits, so a
/// test binary killed by a signal (where no destructor or exit handler runs)
/// leaves no servers behind.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (prctl, getppid).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("parent exited during spawn"));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut Command) {}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Spawns `command` from one thread that lives as long as the process.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits,
/// not the process; test threads and tokio's blocking threads come and go,
/// so the servers are forked from this one thread instead.
fn spawner_spawn(command: Command) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("iar-apiserver-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("spawn the server spawner thread");
        tx
    });
    let (reply, result) = mpsc::channel();
    spawner
        .send((command, reply))
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    result
        .recv()
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}
