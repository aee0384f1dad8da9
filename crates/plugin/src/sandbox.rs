//! The world a guest runs in: WASI with no ambient rights, bounded stdio,
//! a memory cap, and the `iar:plugin/host` imports.

use crate::contract::MAX_TABLE_ELEMENTS;
use crate::contract::v1::{host, types};
use crate::limits::Limits;
use iar_core::cluster::writes::{CreatedObject, WriteGrants, WriteScope};
use iar_core::cluster::{ClusterReader, ReadGrants};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::clocks::WasiClocksCtxView;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock;
use wasmtime_wasi::p2::{DynPollable, OutputStream, Pollable, StreamError};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

mod catalog;
mod cluster_calls;
mod runs;

pub use cluster_calls::MAX_LIST_OBJECTS;
pub use runs::RunObject;

/// A guest tried to grow its memory past its cap. Raised from the resource
/// limiter so that the call traps with this error and the boundary can name
/// the rule.
#[derive(Debug, thiserror::Error)]
#[error("memory cap of {limit} bytes exceeded (asked for {requested} bytes)")]
pub struct MemoryCapExceeded {
    pub limit: usize,
    pub requested: usize,
}

/// A guest made more host calls in one call than its plugin's
/// `maxHostCalls`. Raised from the host function, so the call traps with it.
#[derive(Debug, thiserror::Error)]
#[error("made more than {limit} cluster calls (cluster-get, create, delete) in one call")]
pub struct HostCallLimit {
    pub limit: usize,
}

/// A call ran past its wall-clock ceiling: in wasm, in a host call or
/// waiting in WASI. Raised from the epoch callback or a host function, so
/// the call traps with it and the boundary can name the rule.
#[derive(Debug, thiserror::Error)]
#[error("ran past its wall-clock ceiling of {limit:?}")]
pub struct WallClockExceeded {
    pub limit: Duration,
}

/// Caps what one instance holds: its linear memories and its tables
/// together, so that tables cannot grow outside the cap.
pub struct MemoryCap {
    limit: usize,
    /// Bytes of linear memory.
    used: usize,
    /// Bytes of table elements.
    tables: usize,
}

/// What one table element costs the host (a function reference).
pub const TABLE_ELEMENT_BYTES: usize = 8;

impl MemoryCap {
    fn new(limit: usize) -> Self {
        MemoryCap {
            limit,
            used: 0,
            tables: 0,
        }
    }

    fn check(&self, memories: usize, tables: usize) -> wasmtime::Result<()> {
        let requested = memories.saturating_add(tables);
        if requested > self.limit {
            return Err(MemoryCapExceeded {
                limit: self.limit,
                requested,
            }
            .into());
        }
        Ok(())
    }
}

impl wasmtime::ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let requested = self.used - current.min(self.used) + desired;
        self.check(requested, self.tables)?;
        self.used = requested;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > MAX_TABLE_ELEMENTS {
            return Ok(false);
        }
        let current = current.saturating_mul(TABLE_ELEMENT_BYTES);
        let requested =
            self.tables - current.min(self.tables) + desired.saturating_mul(TABLE_ELEMENT_BYTES);
        self.check(self.used, requested)?;
        self.tables = requested;
        Ok(true)
    }
}

/// What a guest wrote to stdout/stderr during one call: kept up to a bound,
/// the rest counted and dropped. Writes never fail, so a chatty guest is not
/// broken by the bound (Rust's `println!` panics when a write fails).
#[derive(Clone, Default)]
pub struct GuestOutput(Arc<Mutex<Captured>>);

#[derive(Default)]
pub struct Captured {
    pub bytes: Vec<u8>,
    pub dropped: usize,
    limit: usize,
}

impl GuestOutput {
    fn new(limit: usize) -> Self {
        GuestOutput(Arc::new(Mutex::new(Captured {
            limit,
            ..Captured::default()
        })))
    }

    /// Takes what was captured since the last call.
    pub fn take(&self) -> (Vec<u8>, usize) {
        let mut c = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let dropped = std::mem::take(&mut c.dropped);
        (std::mem::take(&mut c.bytes), dropped)
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        // Only the p2 stream is used by the p2 bindings this host links.
        Box::new(tokio::io::sink())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: bytes::Bytes) -> Result<(), StreamError> {
        let mut c = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let room = c.limit.saturating_sub(c.bytes.len());
        let keep = bytes.len().min(room);
        c.bytes.extend_from_slice(&bytes[..keep]);
        c.dropped += bytes.len() - keep;
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }
    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(64 << 10)
    }
}

/// One line a guest sent to the host log.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GuestLog {
    pub level: &'static str,
    pub message: String,
}

/// A guest's log message as one line of text: control characters
/// (newlines, carriage returns, escapes) are written as escapes, so a
/// plugin cannot forge a line of the backup's log or colour a terminal.
pub fn one_line(message: String) -> String {
    if !message.chars().any(char::is_control) {
        return message;
    }
    let mut clean = String::with_capacity(message.len() + 8);
    for c in message.chars() {
        if c.is_control() {
            clean.extend(c.escape_default());
        } else {
            clean.push(c);
        }
    }
    clean
}

impl GuestLog {
    /// The line as a backup's log holds it: `plugin NAME: LEVEL: message`.
    pub fn line(&self, plugin: &str) -> String {
        format!("{PLUGIN_LINE}{plugin}: {}: {}", self.level, self.message)
    }
}

const PLUGIN_LINE: &str = "plugin ";

/// The plugin that wrote a line made by [`GuestLog::line`]; `None` for the
/// host's own lines. A plugin name has no `:` or space, and a message has
/// no line breaks, so the prefix cannot be forged from inside a message.
pub fn plugin_of_line(line: &str) -> Option<&str> {
    let rest = line.strip_prefix(PLUGIN_LINE)?;
    let (name, _) = rest.split_once(": ")?;
    (!name.is_empty() && !name.contains(' ')).then_some(name)
}

/// Longest log line kept; longer ones are cut.
const MAX_LOG_LINE: usize = 4096;

/// Everything a plugin instance's store holds.
pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) memory: MemoryCap,
    pub(crate) stdout: GuestOutput,
    pub(crate) stderr: GuestOutput,
    pub(crate) logs: Vec<GuestLog>,
    pub(crate) logs_dropped: usize,
    max_log_lines: usize,
    host_calls: usize,
    max_host_calls: usize,
    /// `maxCreatesPerBackup`.
    pub(crate) max_creates: usize,
    /// The largest object a create may send (the plugin's maxItemBytes).
    max_item_bytes: usize,
    /// When the current call (or instantiation) started, and how much of
    /// its wall-clock time was spent in host calls: the epoch callback
    /// charges the guest only for the difference.
    call_started: Instant,
    host_time: Duration,
    /// When the guest called into the host, while it is there, and how
    /// deep host calls are nested.
    in_host_since: Option<Instant>,
    host_depth: u32,
    deadline: Duration,
    /// The call's wall-clock ceiling, counted from `call_started`.
    wall_clock: Duration,
    config: Arc<BTreeMap<String, String>>,
    grants: Arc<ReadGrants>,
    write_grants: Arc<WriteGrants>,
    cluster: Arc<dyn ClusterReader>,
    /// Who the current call writes as (plugin, backup, call), set before
    /// the host enters the guest.
    pub(crate) write_scope: WriteScope,
    /// Objects created since the caller last took them, whatever became of
    /// the call: a trap after a create must not lose the record.
    pub(crate) created: Vec<CreatedObject>,
    /// The whole Backup or Restore of the current call (contract 1.4.0's
    /// `runs`), set before the host enters the guest.
    pub(crate) run_object: RunObject,
    /// The namespace of the call's Backup or Restore (1.4.0's
    /// `cluster-catalog.home-namespace`); "" outside a run.
    pub(crate) home_namespace: String,
}

impl State {
    /// A guest's world: no preopened directories, no environment, one
    /// argument (a fixed program name, `iar-plugin`: Go libraries such as
    /// klog read `os.Args[0]` in their init and panic without it), no network (WASI's socket address check denies all by
    /// default), stdin closed, stdout/stderr captured and bounded.
    pub fn new(
        limits: &Limits,
        config: Arc<BTreeMap<String, String>>,
        grants: Arc<ReadGrants>,
        write_grants: Arc<WriteGrants>,
        cluster: Arc<dyn ClusterReader>,
    ) -> State {
        let stdout = GuestOutput::new(limits.max_stdio_bytes);
        let stderr = GuestOutput::new(limits.max_stdio_bytes);
        let wasi = WasiCtx::builder()
            .arg("iar-plugin")
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_blocking_current_thread(true)
            .allow_tcp(false)
            .allow_udp(false)
            .build();
        let mut table = ResourceTable::new();
        // Every WASI stream, pollable or error a guest holds is an entry
        // here; past the cap, opening one more fails with
        // `ResourceTableError::Full`, which traps the call.
        table.set_max_capacity(limits.max_resources);
        State {
            wasi,
            table,
            memory: MemoryCap::new(limits.memory_bytes),
            stdout,
            stderr,
            logs: Vec::new(),
            logs_dropped: 0,
            max_log_lines: limits.max_log_lines,
            host_calls: 0,
            max_host_calls: limits.max_host_calls,
            max_creates: limits.max_creates_per_backup,
            max_item_bytes: limits.max_item_bytes,
            call_started: Instant::now(),
            host_time: Duration::ZERO,
            in_host_since: None,
            host_depth: 0,
            deadline: limits.deadline,
            wall_clock: limits.wall_clock_ceiling(),
            config,
            grants,
            write_grants,
            cluster,
            write_scope: WriteScope::default(),
            created: Vec::new(),
            run_object: RunObject::None,
            home_namespace: String::new(),
        }
    }
}

impl State {
    /// Starts the per-call accounting: the deadline clock, host time, and
    /// the host-call count.
    pub(crate) fn begin_call(&mut self) {
        self.call_started = Instant::now();
        self.host_time = Duration::ZERO;
        self.in_host_since = None;
        self.host_depth = 0;
        self.host_calls = 0;
    }

    /// Times the guest's calls into the host (wasmtime's call hook). Host
    /// calls nest: a host function returning a string calls the guest's
    /// allocator, which may call the host again (a `memory.grow`), so only
    /// the outermost call is timed.
    pub(crate) fn on_call_hook(&mut self, hook: wasmtime::CallHook) {
        match hook {
            wasmtime::CallHook::CallingHost => {
                self.host_depth += 1;
                if self.host_depth == 1 {
                    self.in_host_since = Some(Instant::now());
                }
            }
            wasmtime::CallHook::ReturningFromHost => {
                self.host_depth = self.host_depth.saturating_sub(1);
                if self.host_depth == 0
                    && let Some(since) = self.in_host_since.take()
                {
                    self.host_time += since.elapsed();
                }
            }
            _ => {}
        }
    }

    /// The guest's share of the current call so far: wall-clock time minus
    /// time spent in host calls (waiting on the cluster is not the plugin's
    /// fault, and a guest waiting in WASI is not running, so neither counts
    /// against its CPU deadline; both count against the wall-clock
    /// ceiling).
    pub(crate) fn guest_time(&self) -> Duration {
        self.call_started.elapsed().saturating_sub(self.host_time)
    }

    pub(crate) fn deadline(&self) -> Duration {
        self.deadline
    }

    pub(crate) fn wall_clock(&self) -> Duration {
        self.wall_clock
    }

    /// What is left of the call's wall-clock ceiling; `None` once it has
    /// passed.
    pub(crate) fn wall_left(&self) -> Option<Duration> {
        self.wall_clock
            .checked_sub(self.call_started.elapsed())
            .filter(|left| !left.is_zero())
    }

    /// The ceiling as an error, for a host function to trap with.
    fn past_ceiling(&self) -> wasmtime::Error {
        WallClockExceeded {
            limit: self.wall_clock,
        }
        .into()
    }

    /// The monotonic clock as the guest sees it, its waits bounded by what
    /// is left of the call's ceiling.
    pub(crate) fn bounded_clock(&mut self) -> BoundedClockView<'_> {
        let left = self.wall_left();
        let limit = self.wall_clock;
        BoundedClockView {
            clocks: WasiClocksCtxView {
                ctx: self.wasi.clocks(),
                table: &mut self.table,
            },
            left,
            limit,
        }
    }
}

/// `wasi:clocks/monotonic-clock` with every subscription cut at the
/// call's wall-clock ceiling. wasmtime's epoch interruption reaches a
/// guest only while wasm runs; a guest blocked in `poll` on a clock would
/// otherwise wait as long as it asked (`std::thread::sleep(Duration::MAX)`
/// waits for ever). Cut here, the wait ends at the ceiling, and the epoch
/// callback or the end of the call traps it. Clocks are the only WASI
/// waits a guest has: no files, no sockets, stdin closed, and stdout and
/// stderr never block.
pub(crate) struct BoundedClock;

impl wasmtime::component::HasData for BoundedClock {
    type Data<'a> = BoundedClockView<'a>;
}

pub(crate) struct BoundedClockView<'a> {
    clocks: WasiClocksCtxView<'a>,
    left: Option<Duration>,
    limit: Duration,
}

impl BoundedClockView<'_> {
    /// Waits as long as asked, or until the ceiling, whichever is sooner;
    /// past the ceiling, no new wait: the call traps.
    fn subscribe(&mut self, asked: Duration) -> wasmtime::Result<Resource<DynPollable>> {
        let Some(left) = self.left else {
            return Err(WallClockExceeded { limit: self.limit }.into());
        };
        let nanos = u64::try_from(asked.min(left).as_nanos()).unwrap_or(u64::MAX);
        monotonic_clock::Host::subscribe_duration(&mut self.clocks, nanos)
    }
}

impl monotonic_clock::Host for BoundedClockView<'_> {
    fn now(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        monotonic_clock::Host::now(&mut self.clocks)
    }

    fn resolution(&mut self) -> wasmtime::Result<monotonic_clock::Duration> {
        monotonic_clock::Host::resolution(&mut self.clocks)
    }

    fn subscribe_instant(
        &mut self,
        when: monotonic_clock::Instant,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let now = monotonic_clock::Host::now(&mut self.clocks)?;
        self.subscribe(Duration::from_nanos(when.saturating_sub(now)))
    }

    fn subscribe_duration(
        &mut self,
        duration: monotonic_clock::Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.subscribe(Duration::from_nanos(duration))
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for State {}

impl host::Host for State {
    fn log(&mut self, level: host::Level, message: String) {
        if self.logs.len() >= self.max_log_lines {
            self.logs_dropped += 1;
            return;
        }
        let mut message = one_line(message);
        if message.len() > MAX_LOG_LINE {
            let mut cut = MAX_LOG_LINE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let level = match level {
            host::Level::Trace => "trace",
            host::Level::Debug => "debug",
            host::Level::Info => "info",
            host::Level::Warn => "warn",
            host::Level::Error => "error",
        };
        self.logs.push(GuestLog { level, message });
    }

    fn config(&mut self, key: String) -> Option<String> {
        self.config.get(&key).cloned()
    }

    fn cluster_get(
        &mut self,
        id: types::ResourceIdentifier,
    ) -> wasmtime::Result<Result<Option<String>, String>> {
        self.count_host_call()?;
        let id = cluster_calls::to_ref(id);
        // Checked before the grant and before any lookup: the grant looks
        // at the group and resource only, and every part reaches a URL.
        if let Err(e) = Self::identifier("cluster-get", &id) {
            return Ok(Err(e));
        }
        if let Err(e) = self.may_read(&id.group_resource()) {
            return self.read_own(&id, e);
        }
        // A lookup waits at most what is left of the call's ceiling; one
        // that cannot finish in it stops the call.
        let budget = self.budget()?;
        let answer = self
            .cluster
            .get_json_within(&id, budget)
            .map(|v| v.map(|t| t.to_string()))
            .map_err(|e| e.to_string());
        self.still_within()?;
        Ok(answer)
    }
}

impl State {
    /// Contract 1.4.0's read-own: an object this plugin created for this
    /// backup may be read back without a read grant (a generated Secret),
    /// from the calls that may write it and within its write grant. Every
    /// other answer is `refused`, the same text whether the object is
    /// missing, someone else's or unreadable.
    fn read_own(
        &mut self,
        id: &iar_core::item::ItemRef,
        refused: String,
    ) -> wasmtime::Result<Result<Option<String>, String>> {
        if self.write_scope.call == iar_core::cluster::writes::WriteCall::None
            || !self.write_grants.allows(&id.group_resource())
        {
            return Ok(Err(refused));
        }
        Ok(match self.read_object(id)? {
            Ok(Some((text, value)))
                if iar_core::cluster::writes::is_own(&value, &self.write_scope) =>
            {
                Ok(Some(text.to_string()))
            }
            _ => Err(refused),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    /// A message with a newline and an ANSI escape cannot start a line of
    /// its own in the backup's log.
    #[test]
    fn log_messages_are_one_line_without_control_characters() {
        let forged = "done\n2026-12-01T00:00:00Z backup=b error: forged\r\u{1b}[31m".to_string();
        let clean = one_line(forged);
        assert!(!clean.chars().any(char::is_control), "{clean}");
        assert_eq!(
            clean,
            "done\\n2026-12-01T00:00:00Z backup=b error: forged\\r\\u{1b}[31m"
        );
        assert_eq!(one_line("plain ünïcode".into()), "plain ünïcode");
    }
}
