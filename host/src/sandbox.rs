//! The world a guest runs in: WASI with no ambient rights, bounded stdio,
//! a memory cap, and the `iar:plugin/host` imports.

use crate::cluster::{ClusterReader, ReadGrants};
use crate::contract::v1::{host, types};
use crate::item::ItemRef;
use crate::limits::Limits;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

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
#[error("made more than {limit} cluster-get calls in one call")]
pub struct HostCallLimit {
    pub limit: usize,
}

/// Caps the total linear memory of one instance.
pub struct MemoryCap {
    limit: usize,
    used: usize,
}

impl wasmtime::ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let requested = self.used - current.min(self.used) + desired;
        if requested > self.limit {
            return Err(MemoryCapExceeded {
                limit: self.limit,
                requested,
            }
            .into());
        }
        self.used = requested;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// Elements a guest's table may grow to.
pub const MAX_TABLE_ELEMENTS: usize = 100_000;

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
    /// When the current call (or instantiation) started, and how much of
    /// its wall-clock time was spent in host calls: the epoch callback
    /// charges the guest only for the difference.
    call_started: Instant,
    host_time: Duration,
    deadline: Duration,
    config: Arc<BTreeMap<String, String>>,
    grants: Arc<ReadGrants>,
    cluster: Arc<dyn ClusterReader>,
}

impl State {
    /// A guest's world: no preopened directories, no environment, no
    /// arguments, no network (WASI's socket address check denies all by
    /// default), stdin closed, stdout/stderr captured and bounded.
    pub fn new(
        limits: &Limits,
        config: Arc<BTreeMap<String, String>>,
        grants: Arc<ReadGrants>,
        cluster: Arc<dyn ClusterReader>,
    ) -> State {
        let stdout = GuestOutput::new(limits.max_stdio_bytes);
        let stderr = GuestOutput::new(limits.max_stdio_bytes);
        let wasi = WasiCtx::builder()
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
            memory: MemoryCap {
                limit: limits.memory_bytes,
                used: 0,
            },
            stdout,
            stderr,
            logs: Vec::new(),
            logs_dropped: 0,
            max_log_lines: limits.max_log_lines,
            host_calls: 0,
            max_host_calls: limits.max_host_calls,
            call_started: Instant::now(),
            host_time: Duration::ZERO,
            deadline: limits.deadline,
            config,
            grants,
            cluster,
        }
    }
}

impl State {
    /// Starts the per-call accounting: the deadline clock, host time, and
    /// the host-call count.
    pub(crate) fn begin_call(&mut self) {
        self.call_started = Instant::now();
        self.host_time = Duration::ZERO;
        self.host_calls = 0;
    }

    /// The guest's share of the current call so far: wall-clock time minus
    /// time spent in host calls (waiting on the cluster is not the plugin's
    /// fault, so it does not count against its deadline).
    pub(crate) fn guest_time(&self) -> Duration {
        self.call_started.elapsed().saturating_sub(self.host_time)
    }

    pub(crate) fn deadline(&self) -> Duration {
        self.deadline
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
        let mut message = message;
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
        self.host_calls += 1;
        if self.host_calls > self.max_host_calls {
            return Err(HostCallLimit {
                limit: self.max_host_calls,
            }
            .into());
        }
        let id = ItemRef {
            group: id.group,
            resource: id.resource,
            namespace: id.namespace,
            name: id.name,
        };
        if !self.grants.allows(&id.group_resource()) {
            return Ok(Err(format!(
                "reading {} is not granted to this plugin",
                id.group_resource()
            )));
        }
        let started = Instant::now();
        let answer = self.cluster.get_json(&id).map(|v| v.map(|t| t.to_string()));
        self.host_time += started.elapsed();
        Ok(answer)
    }
}
