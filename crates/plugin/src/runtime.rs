//! The wasmtime engine, its sandbox-wide settings, the epoch ticker that
//! enforces CPU deadlines, and the compiled-component cache.

use crate::sandbox::State;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, WasmFeatures};

mod cache;
pub use cache::{DEFAULT_CACHE_MAX_BYTES, ENV_CACHE_MAX_BYTES, cache_max_bytes_from};

/// How often the epoch advances; CPU deadlines are enforced to this grain.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Engine-wide settings (per-plugin limits live in [`crate::Limits`]).
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Where compiled components are cached; `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
    /// The most the cache's entries may add up to, in bytes; past it, the
    /// least recently used are removed when an entry is written.
    pub cache_max_bytes: u64,
    /// wasm stack per call, in bytes. Engine-wide because wasmtime sets it
    /// per engine; deep recursion traps with a stack overflow.
    pub max_wasm_stack: usize,
    /// Instances come from a pool of pre-reserved slots (wasmtime's pooling
    /// allocator) whose pages stay resident between instances and are reset
    /// in place, rather than from fresh mappings: a fresh instance costs
    /// about half as much (see docs/performance.md). On by
    /// default. The pool caps live instances at [`POOL_INSTANCES`]; when it
    /// cannot be set up (address space, or a kernel without `PAGEMAP_SCAN`,
    /// before Linux 6.7) the runtime allocates on demand and logs why.
    pub pooling: bool,
}

/// Component instances alive at once with the pooling allocator (each
/// worker holds one per plugin it has called).
pub const POOL_INSTANCES: u32 = 1000;

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: default_cache_dir(),
            cache_max_bytes: default_cache_max_bytes(),
            max_wasm_stack: 512 << 10,
            pooling: true,
        }
    }
}

/// `$IAR_CACHE_DIR`, else `$XDG_CACHE_HOME/iar`, else `~/.cache/iar`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("IAR_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("iar"))
}

/// `$IAR_CACHE_MAX_BYTES` (`512MiB`, `2GiB`), else
/// [`DEFAULT_CACHE_MAX_BYTES`] (1 GiB). A value that is not a size is
/// warned about and the default used.
pub fn default_cache_max_bytes() -> u64 {
    let value = std::env::var(ENV_CACHE_MAX_BYTES).ok();
    cache_max_bytes_from(value.as_deref()).unwrap_or_else(|e| {
        tracing::warn!("{e}; the compile cache is bounded at {DEFAULT_CACHE_MAX_BYTES} bytes");
        DEFAULT_CACHE_MAX_BYTES
    })
}

/// Proposals iar does not use, turned off in the engine and in the
/// validator. Threads and shared memories first: wasmtime's
/// `ResourceLimiter` is not consulted for shared memories, so they would
/// slip past the memory cap. The others widen what a guest can do (64-bit
/// or tiny-page memories, stack switching, GC heaps, exceptions, async
/// component intrinsics) with nothing any plugin needs; a wasm32-wasip2
/// guest built by rustc uses none of them (the tests load every guest).
pub const DISABLED_FEATURES: WasmFeatures = WasmFeatures::THREADS
    .union(WasmFeatures::SHARED_EVERYTHING_THREADS)
    .union(WasmFeatures::MEMORY64)
    .union(WasmFeatures::CUSTOM_PAGE_SIZES)
    .union(WasmFeatures::WIDE_ARITHMETIC)
    .union(WasmFeatures::STACK_SWITCHING)
    .union(WasmFeatures::GC)
    .union(WasmFeatures::FUNCTION_REFERENCES)
    .union(WasmFeatures::EXCEPTIONS)
    .union(WasmFeatures::LEGACY_EXCEPTIONS)
    .union(WasmFeatures::CM_ASYNC)
    .union(WasmFeatures::CM_MORE_ASYNC_BUILTINS)
    .union(WasmFeatures::CM_ASYNC_STACKFUL)
    .union(WasmFeatures::CM_THREADING)
    .union(WasmFeatures::CM_ERROR_CONTEXT)
    .union(WasmFeatures::CM_GC)
    .union(WasmFeatures::CM64)
    .union(WasmFeatures::MEMORY_CONTROL);

/// What the load-time validator accepts: its defaults minus
/// [`DISABLED_FEATURES`], the same set the engine compiles.
pub fn validator_features() -> WasmFeatures {
    WasmFeatures::default().difference(DISABLED_FEATURES)
}

/// How a runtime allocates instances.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allocation {
    /// From the instance pool, slots reset in place.
    Pooled,
    /// Fresh mappings per instance; with the reason the pool could not be
    /// set up, when it was asked for.
    OnDemand(Option<String>),
}

impl std::fmt::Display for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Allocation::Pooled => write!(f, "pooled ({POOL_INSTANCES} instances at most)"),
            Allocation::OnDemand(None) => f.write_str("on demand"),
            Allocation::OnDemand(Some(why)) => write!(f, "on demand (no pool: {why})"),
        }
    }
}

struct Inner {
    engine: Engine,
    linker: Linker<State>,
    cache: Option<cache::CompileCache>,
    cache_refused: Option<String>,
    allocation: Allocation,
    compiles: AtomicUsize,
    cache_hits: AtomicUsize,
}

/// The runtime: one engine, one linker, shared by every plugin. Cheap to
/// clone.
#[derive(Clone)]
pub struct Runtime(Arc<Inner>);

impl Runtime {
    pub fn new(config: RuntimeConfig) -> anyhow::Result<Runtime> {
        let mut c = Config::new();
        c.wasm_component_model(true)
            .epoch_interruption(true)
            .max_wasm_stack(config.max_wasm_stack)
            .cranelift_opt_level(wasmtime::OptLevel::Speed)
            .wasm_features(DISABLED_FEATURES, false);
        if std::env::var_os("IAR_PERFMAP").is_some() {
            // For `perf record`: JIT code named in /tmp/perf-<pid>.map.
            c.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let (engine, allocation) = match config.pooling {
            true => {
                let mut pooled = c.clone();
                pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pool()));
                match Engine::new(&pooled) {
                    Ok(engine) => (engine, Allocation::Pooled),
                    Err(e) => {
                        let reason = format!("{e:#}");
                        tracing::warn!(
                            "no instance pool ({reason}); instances are allocated on demand"
                        );
                        (Engine::new(&c)?, Allocation::OnDemand(Some(reason)))
                    }
                }
            }
            false => (Engine::new(&c)?, Allocation::OnDemand(None)),
        };
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        // The monotonic clock again, over WASI's own: its waits end at the
        // call's wall-clock ceiling (see `BoundedClock`).
        linker.allow_shadowing(true);
        wasmtime_wasi::p2::bindings::clocks::monotonic_clock::add_to_linker::<
            State,
            crate::sandbox::BoundedClock,
        >(&mut linker, State::bounded_clock)?;
        linker.allow_shadowing(false);
        crate::contract::v1::Plugin::add_to_linker::<_, wasmtime::component::HasSelf<State>>(
            &mut linker,
            |s| s,
        )?;
        // 1.2.0's cluster-list, for plugins of any 1.x exports that import it.
        crate::contract::since_v1_2::cluster_list::add_to_linker::<
            _,
            wasmtime::component::HasSelf<State>,
        >(&mut linker, |s| s)?;
        // 1.4.0's runs, cluster-catalog and cluster-write (a 1.2.0 writer's
        // create and delete are found in it), likewise.
        crate::contract::since_v1_4::Additions::add_to_linker::<
            _,
            wasmtime::component::HasSelf<State>,
        >(&mut linker, |s| s)?;
        spawn_epoch_ticker(&engine);
        let (cache, cache_refused) = match config.cache_dir {
            None => (None, None),
            Some(dir) => match cache::dir_trusted(&dir) {
                Ok(()) => (
                    Some(cache::CompileCache::new(
                        dir,
                        config.cache_max_bytes,
                        &engine,
                    )),
                    None,
                ),
                Err(reason) => {
                    tracing::warn!(
                        dir = %dir.display(),
                        "not using the compile cache: {reason}; every plugin is compiled"
                    );
                    (None, Some(reason))
                }
            },
        };
        Ok(Runtime(Arc::new(Inner {
            engine,
            linker,
            cache,
            cache_refused,
            allocation,
            compiles: AtomicUsize::new(0),
            cache_hits: AtomicUsize::new(0),
        })))
    }

    /// Where instances' memories come from.
    pub fn allocation(&self) -> &Allocation {
        &self.0.allocation
    }

    pub fn engine(&self) -> &Engine {
        &self.0.engine
    }

    pub(crate) fn linker(&self) -> &Linker<State> {
        &self.0.linker
    }

    /// How many components this runtime compiled (cache misses).
    pub fn compiles(&self) -> usize {
        self.0.compiles.load(Ordering::Relaxed)
    }

    /// How many components were loaded from the on-disk cache.
    pub fn cache_hits(&self) -> usize {
        self.0.cache_hits.load(Ordering::Relaxed)
    }

    /// The cache directory in use; `None` when there is none or it was
    /// refused.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.0.cache.as_ref().map(|c| c.dir())
    }

    /// Why the configured cache directory was refused (also logged as a
    /// warning at startup).
    pub fn cache_refused(&self) -> Option<&str> {
        self.0.cache_refused.as_deref()
    }

    /// Compiles a component, or loads it from the cache, where it is keyed
    /// by the content digest (`digest`, the component's sha256) and the
    /// engine's compatibility hash (see [`cache`]).
    pub(crate) fn compile(&self, bytes: &[u8], digest: &str) -> anyhow::Result<Component> {
        let cache = self.0.cache.as_ref();
        if let Some(component) = cache.and_then(|c| c.load(&self.0.engine, digest)) {
            self.0.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(component);
        }
        let component = Component::new(&self.0.engine, bytes)?;
        self.0.compiles.fetch_add(1, Ordering::Relaxed);
        if let Some(cache) = cache {
            cache.store(&component, digest);
        }
        Ok(component)
    }
}

/// Written pages of a linear memory kept resident when its slot is freed:
/// a call on the bench Pod writes a few hundred KiB (the top of the shadow
/// stack, data, heap); more is returned to the kernel.
const KEEP_RESIDENT: usize = 2 << 20;

/// The same for tables: a plugin's function tables are a few KiB, and
/// resetting them with `madvise` instead was an eighth of a fresh instance.
const TABLE_KEEP_RESIDENT: usize = 64 << 10;

/// The pooling allocator's slots. Each memory slot reserves address space
/// for a 4 GiB wasm32 memory (nothing is committed until used, and a slot's
/// pages are reset when its instance is dropped), so the per-plugin memory
/// cap, enforced by the store's limiter, stays the only bound a guest sees;
/// tables are sized to what the limiter allows.
fn pool() -> PoolingAllocationConfig {
    let mut p = PoolingAllocationConfig::default();
    p.total_component_instances(POOL_INSTANCES)
        .total_core_instances(POOL_INSTANCES * 8)
        .total_memories(POOL_INSTANCES * 2)
        .total_tables(POOL_INSTANCES * 4)
        .max_memories_per_module(4)
        .max_tables_per_module(8)
        // Per component as well (unlimited in wasmtime by default): the
        // load-time check (`ComponentShape::check_limits`) refuses more
        // with a rule name; these keep the pool itself from being the
        // only other bound.
        .max_core_instances_per_component(crate::contract::MAX_CORE_INSTANCES)
        .max_memories_per_component(crate::contract::MAX_MEMORIES)
        .max_tables_per_component(crate::contract::MAX_TABLES)
        .table_elements(crate::contract::MAX_TABLE_ELEMENTS)
        .max_memory_size(1 << 32)
        // A core instance's own state grows with its functions (32 bytes
        // of each function's reference): Velero's restore actions built
        // for wasip1 (62,867 functions) need 2 MB, over wasmtime's 1 MiB
        // default, and failed to load after their compile. Address space
        // only: nothing is committed until an instance uses it.
        .max_core_instance_size(4 << 20)
        // And a component's context with its core instances' state.
        .max_component_instance_size(4 << 20)
        // A dropped instance's slot is reset in place: the kernel's
        // PAGEMAP_SCAN names the pages the guest wrote, and those (up to
        // KEEP_RESIDENT) are copied back from the memory image or zeroed,
        // so the next instance takes no page faults on them. Without the
        // scan, keeping memory resident means zeroing all of it, which
        // cost more than the faults it saves (measured: docs/decisions.md),
        // so the scan is required and its absence falls back to on demand.
        .pagemap_scan(wasmtime::Enabled::Yes)
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(TABLE_KEEP_RESIDENT)
        // Idle slots each keep up to KEEP_RESIDENT of written pages; this
        // bounds what idle slots hold to 64 MiB beyond the live ones.
        .max_unused_warm_slots(32);
    p
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until the engine is
/// dropped. A call's deadline is a number of ticks.
fn spawn_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("iar-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .expect("spawning the epoch thread");
}

/// Ticks for a deadline, rounded up, at least one.
pub(crate) fn deadline_ticks(deadline: Duration) -> u64 {
    let tick = EPOCH_TICK.as_nanos();
    (deadline.as_nanos().div_ceil(tick)).max(1) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component holding one core module with a shared memory (1 page,
    /// max 1, flags 0x03 = has-max | shared), written byte by byte.
    const SHARED_MEMORY_COMPONENT: &[u8] =
        b"\0asm\x0d\0\x01\0\x01\x0e\0asm\x01\0\0\0\x05\x04\x01\x03\x01\x01";

    /// Threads are off in the engine and in the validator alike: the
    /// compiler itself refuses a shared memory, so the load-time check is
    /// not the only line of defence.
    #[test]
    fn shared_memories_are_refused_by_engine_and_validator() {
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: None,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let err = Component::new(runtime.engine(), SHARED_MEMORY_COMPONENT).unwrap_err();
        assert!(format!("{err:#}").contains("threads"), "{err:#}");
        let Err(err) = wasmparser::Validator::new_with_features(validator_features())
            .validate_all(SHARED_MEMORY_COMPONENT)
        else {
            panic!("the validator accepted a shared memory");
        };
        assert!(err.to_string().contains("threads"), "{err}");
        assert!(
            crate::contract::ComponentShape::declares_shared_memory(SHARED_MEMORY_COMPONENT)
                .unwrap()
        );
    }

    /// Linux's major and minor version, from `uname -r` (`6.18.44-…`).
    fn kernel_version() -> Option<(u32, u32)> {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
        let mut parts = release.trim().split(['.', '-']);
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    }

    /// The default runtime pools instances wherever the kernel can scan for
    /// written pages (PAGEMAP_SCAN, Linux 6.7), and says why not elsewhere;
    /// asked not to, it allocates on demand.
    #[test]
    fn default_runtime_pools_instances_where_the_kernel_allows() {
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: None,
            ..RuntimeConfig::default()
        })
        .unwrap();
        match kernel_version() {
            Some(v) if v >= (6, 7) => assert_eq!(runtime.allocation(), &Allocation::Pooled),
            _ => assert!(
                matches!(runtime.allocation(), Allocation::OnDemand(Some(_))),
                "{}",
                runtime.allocation()
            ),
        }
        let on_demand = Runtime::new(RuntimeConfig {
            cache_dir: None,
            pooling: false,
            ..RuntimeConfig::default()
        })
        .unwrap();
        assert_eq!(on_demand.allocation(), &Allocation::OnDemand(None));
    }
}
