//! What a node leaves on the host outside its directory (the bridge, runc's
//! cgroups) and the machine-wide lock that keeps one node at a time.

use super::*;

/// One node per machine at a time: the bridge and the `k8s.io` cgroups
/// are the machine's. A file lock in the cache directory (the kernel
/// releases it if the holder dies), and one node per process (a second
/// flock of the same file in this process would wait for ever).
pub(crate) struct MachineLock {
    pub(super) _file: File,
}

pub(super) static NODE_IN_PROCESS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

impl MachineLock {
    /// The lock, once what a node that died without its shutdown left is
    /// removed (under the lock, so no node is running).
    pub(crate) async fn take() -> Result<MachineLock, StartError> {
        tokio::task::spawn_blocking(|| {
            let lock = MachineLock::acquire()?;
            remove_stale();
            Ok(lock)
        })
        .await
        .expect("the lock thread does not panic")
    }

    pub(super) fn acquire() -> Result<MachineLock, StartError> {
        use std::sync::atomic::Ordering;
        if NODE_IN_PROCESS.swap(true, Ordering::SeqCst) {
            return Err(StartError::Io {
                what: String::from("start a second real node in this process"),
                source: std::io::Error::other("one node per machine: use node::shared()"),
            });
        }
        MachineLock::lock_file().inspect_err(|_| NODE_IN_PROCESS.store(false, Ordering::SeqCst))
    }

    pub(super) fn lock_file() -> Result<MachineLock, StartError> {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir)
            .join("iar");
        fs::create_dir_all(&cache).map_err(StartError::io(format!("create {cache:?}")))?;
        let path = cache.join("node.lock");
        let file = File::create(&path).map_err(StartError::io(format!("create {path:?}")))?;
        // SAFETY: flock(2) on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            loud("iar-apiserver: waiting for another test binary's real node to stop");
            // SAFETY: as above.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
                return Err(StartError::io(format!("lock {path:?}"))(
                    std::io::Error::last_os_error(),
                ));
            }
        }
        Ok(MachineLock { _file: file })
    }
}

impl Drop for MachineLock {
    fn drop(&mut self) {
        NODE_IN_PROCESS.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// What a node that died without its shutdown (its test binary killed)
/// left: the bridge, its containers' cgroups (their ids are the task
/// bundles in its containerd state directory), its directory. Run with
/// the machine's lock held, so no node is running.
pub(super) fn remove_stale() {
    if Path::new("/sys/class/net").join(BRIDGE).exists() {
        remove_bridge(&[]);
        loud(&format!(
            "iar-apiserver: removed bridge {BRIDGE}, left by a node that did not stop"
        ));
    }
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let ours = entry.file_name().to_string_lossy().starts_with(DIR_PREFIX)
            && entry.file_type().is_ok_and(|t| t.is_dir());
        if !ours {
            continue;
        }
        let tasks = dir.join("containerd/state/io.containerd.runtime.v2.task/k8s.io");
        let containers: Vec<String> = fs::read_dir(&tasks)
            .map(|e| {
                e.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        remove_cgroups(&containers, false);
        // The chains its kubelet made: not those another kubelet of the
        // machine had made before it started (it wrote them down).
        if let Ok(before) = fs::read_to_string(dir.join(CHAINS_BEFORE)) {
            remove_kube_chains(&parse_chains(&before));
        }
        let _ = fs::remove_dir_all(&dir);
        loud(&format!(
            "iar-apiserver: removed {dir:?} and the cgroups of its {} containers, left by a node \
             that did not stop",
            containers.len()
        ));
    }
}

/// The namespaces' first process: `unshare`'s child, once it has mounted
/// the namespace's /proc and become the pause binary.
pub(super) fn wait_init(
    namespace: &mut ServerProcess,
    pause: &Path,
) -> Result<libc::pid_t, StartError> {
    let unshare = namespace.pid();
    let children = format!("/proc/{unshare}/task/{unshare}/children");
    let pause = pause.canonicalize().unwrap_or_else(|_| pause.to_path_buf());
    let log = namespace.log.clone();
    let timed_out = |last| StartError::not_ready("node namespace", NAMESPACE_READY, last, &log);
    poll::until(
        Instant::now() + NAMESPACE_READY,
        Duration::from_millis(20),
        || {
            namespace.check_running()?;
            let init = fs::read_to_string(&children)
                .unwrap_or_default()
                .split_whitespace()
                .next()
                .and_then(|p| p.parse::<libc::pid_t>().ok());
            let exe = init.and_then(|init| fs::read_link(format!("/proc/{init}/exe")).ok());
            Ok(match init {
                Some(init) if exe.as_deref() == Some(pause.as_path()) => Ok(init),
                _ => Err(format!("no pause child of unshare ({children})")),
            })
        },
        timed_out,
    )
}

/// `nsenter` into the node's mount namespace (and PID namespace, for the
/// long-running programs), ready for the program and its arguments.
pub(super) fn nsenter(init: libc::pid_t, pid: bool) -> Command {
    let mut command = Command::new("nsenter");
    command.arg("-t").arg(init.to_string()).arg("-m");
    if pid {
        command.arg("-p");
    }
    command.arg("--");
    command
}

/// Runs a short command to its end; `Err` with its output if it fails.
pub(super) fn run(command: &mut Command) -> Result<(), StartError> {
    let what = format!("{command:?}");
    let output = command
        .output()
        .map_err(StartError::io(format!("run {what}")))?;
    if output.status.success() {
        return Ok(());
    }
    Err(StartError::Io {
        what,
        source: std::io::Error::other(format!(
            "{}\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )),
    })
}

/// Every cgroup hierarchy: each v1 controller's and the v2 one.
pub(super) fn cgroup_hierarchies() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut out = Vec::new();
    if root.join("cgroup.controllers").exists() {
        out.push(root.to_path_buf());
    }
    if let Ok(entries) = fs::read_dir(root) {
        for e in entries.flatten() {
            let path = e.path();
            // Symlinks (cpu,cpuacct → cpu) name a hierarchy twice.
            if e.file_type().is_ok_and(|t| t.is_dir()) && path.join("cgroup.procs").exists() {
                out.push(path);
            }
        }
    }
    out
}

/// Removes runc's cgroups of `containers` (`k8s.io/<id>`), waiting for
/// their last processes to go, and the `k8s.io` parents if the node made
/// them.
pub(super) fn remove_cgroups(containers: &[String], existed: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for hierarchy in cgroup_hierarchies() {
        let parent = hierarchy.join("k8s.io");
        if !parent.exists() {
            continue;
        }
        for id in containers {
            let cgroup = parent.join(id);
            // Best effort: past the deadline, the next cgroup.
            let _ = poll::until(
                deadline,
                Duration::from_millis(50),
                || {
                    Ok(match !cgroup.exists() || fs::remove_dir(&cgroup).is_ok() {
                        true => Ok(()),
                        false => Err(String::new()),
                    })
                },
                drop,
            );
        }
        // Only if empty: rmdir(2) of a cgroup with children fails.
        if !existed {
            let _ = fs::remove_dir(&parent);
        }
    }
}

/// The veths on the bridge.
pub(super) fn bridge_ports() -> Vec<String> {
    fs::read_dir(Path::new("/sys/class/net").join(BRIDGE).join("brif"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Deletes the bridge, and `veths` once their pods' network namespaces
/// are gone (the kernel deletes a veth pair with its namespace; this waits
/// for it, and deletes what is left after a while).
pub(super) fn remove_bridge(veths: &[String]) {
    let net = Path::new("/sys/class/net");
    // Best effort: past the deadline, what is left is deleted below.
    let _ = poll::until(
        Instant::now() + Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            Ok(match veths.iter().any(|v| net.join(v).exists()) {
                true => Err(String::new()),
                false => Ok(()),
            })
        },
        drop,
    );
    for name in veths.iter().map(String::as_str).chain([BRIDGE]) {
        if net.join(name).exists() {
            let _ = Command::new("ip").args(["link", "delete", name]).output();
        }
    }
}

/// An iptables chain a kubelet makes: (program, table, chain).
pub(super) type KubeChain = (&'static str, &'static str, String);

/// The programs and tables a kubelet writes its chains into: it runs in
/// the host's network namespace (the node shares it), and at startup it
/// makes `KUBE-IPTABLES-HINT`, `KUBE-KUBELET-CANARY` and `KUBE-FIREWALL`
/// (with jumps from INPUT and OUTPUT) there.
const IPTABLES: [(&str, &[&str]); 2] = [
    ("iptables", &["filter", "nat", "mangle"]),
    ("ip6tables", &["filter", "nat", "mangle"]),
];

/// The file in a node's directory listing [`kube_chains`] as they were
/// before its kubelet started, one `program table chain` per line.
pub(super) const CHAINS_BEFORE: &str = "iptables-before";

pub(super) fn format_chains(chains: &[KubeChain]) -> String {
    chains
        .iter()
        .map(|(p, t, c)| format!("{p} {t} {c}\n"))
        .collect()
}

fn parse_chains(text: &str) -> Vec<KubeChain> {
    let known = |word: &str, among: &[&'static str]| among.iter().copied().find(|w| *w == word);
    text.lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            let program = known(words.next()?, &["iptables", "ip6tables"])?;
            let table = known(words.next()?, &["filter", "nat", "mangle"])?;
            Some((program, table, words.next()?.to_string()))
        })
        .collect()
}

/// Every `KUBE-*` chain now on the host.
pub(super) fn kube_chains() -> Vec<KubeChain> {
    let mut out = Vec::new();
    for (program, tables) in IPTABLES {
        for table in tables {
            for line in iptables_rules(program, table) {
                if let Some(chain) = line.strip_prefix("-N ")
                    && chain.starts_with("KUBE-")
                {
                    out.push((program, *table, chain.to_string()));
                }
            }
        }
    }
    out
}

/// The host's firewall: every rule of each table a kubelet writes to, of
/// both families, as `iptables -S` lists them. For tests that check a node
/// (or a cluster) left it as it found it.
pub fn firewall_rules() -> String {
    let mut out = String::new();
    for (program, tables) in IPTABLES {
        for table in tables {
            out.push_str(&format!("{program} -t {table}:\n"));
            for rule in iptables_rules(program, table) {
                out.push_str(&rule);
                out.push('\n');
            }
        }
    }
    out
}

/// The rules of `table` as `iptables -S` lists them; none if it cannot.
fn iptables_rules(program: &str, table: &str) -> Vec<String> {
    Command::new(program)
        .args(["-w", "5", "-t", table, "-S"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Removes the kubelet's chains that are not in `before`: first every
/// rule that jumps to one, then their rules, then the chains.
pub(super) fn remove_kube_chains(before: &[KubeChain]) {
    let made: Vec<KubeChain> = kube_chains()
        .into_iter()
        .filter(|c| !before.contains(c))
        .collect();
    for (program, table, chain) in &made {
        let jump = format!("-j {chain}");
        for rule in iptables_rules(program, table) {
            let Some(rest) = rule.strip_prefix("-A ") else {
                continue;
            };
            if rule.ends_with(&jump) || rule.contains(&format!("{jump} ")) {
                // `-S` prints a rule as `-A CHAIN spec`, which `-D` takes
                // back; the words have no quoting iptables added.
                let mut args = vec!["-w", "5", "-t", table, "-D"];
                args.extend(rest.split(' '));
                let _ = Command::new(program).args(&args).output();
            }
        }
    }
    for (program, table, chain) in &made {
        let _ = Command::new(program)
            .args(["-w", "5", "-t", table, "-F", chain])
            .output();
    }
    for (program, table, chain) in &made {
        let _ = Command::new(program)
            .args(["-w", "5", "-t", table, "-X", chain])
            .output();
    }
}
