//! The wasmtime engine, its sandbox-wide settings, the epoch ticker that
//! enforces CPU deadlines, and the compiled-component cache.

use crate::sandbox::State;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

/// How often the epoch advances; CPU deadlines are enforced to this grain.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Engine-wide settings (per-plugin limits live in [`crate::Limits`]).
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Where compiled components are cached; `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
    /// wasm stack per call, in bytes. Engine-wide because wasmtime sets it
    /// per engine; deep recursion traps with a stack overflow.
    pub max_wasm_stack: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: default_cache_dir(),
            max_wasm_stack: 512 << 10,
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

struct Inner {
    engine: Engine,
    linker: Linker<State>,
    cache_dir: Option<PathBuf>,
    engine_key: String,
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
            .cranelift_opt_level(wasmtime::OptLevel::Speed);
        let engine = Engine::new(&c)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        crate::contract::v1::Plugin::add_to_linker::<_, wasmtime::component::HasSelf<State>>(
            &mut linker,
            |s| s,
        )?;
        spawn_epoch_ticker(&engine);
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        Ok(Runtime(Arc::new(Inner {
            engine,
            linker,
            cache_dir: config.cache_dir,
            engine_key: format!("{:016x}", h.finish()),
            compiles: AtomicUsize::new(0),
            cache_hits: AtomicUsize::new(0),
        })))
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

    fn cache_path(&self, digest: &str) -> Option<PathBuf> {
        let dir = self.0.cache_dir.as_ref()?;
        Some(dir.join(format!("{digest}-{}.cwasm", self.0.engine_key)))
    }

    /// Compiles a component, or loads it from the cache keyed by the
    /// content digest and the engine's compatibility hash.
    pub(crate) fn compile(&self, bytes: &[u8], digest: &str) -> anyhow::Result<Component> {
        let path = self.cache_path(digest);
        if let Some(path) = path.as_deref().filter(|p| p.exists()) {
            // Read into memory rather than mmap the file: a cache file
            // truncated under a running host (another process, an operator)
            // would otherwise crash it with SIGBUS.
            let loaded = std::fs::read(path)
                .map_err(anyhow::Error::from)
                .and_then(|bytes| {
                    // SAFETY: the cache directory is written only by this
                    // function, from components this engine compiled; wasmtime
                    // checks the engine compatibility header and fails on a
                    // mismatch. A file that fails to load is recompiled.
                    unsafe { Component::deserialize(&self.0.engine, bytes) }
                        .map_err(anyhow::Error::from)
                });
            match loaded {
                Ok(component) => {
                    self.0.cache_hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(component);
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), "ignoring unusable cached component: {e}")
                }
            }
        }
        let component = Component::new(&self.0.engine, bytes)?;
        self.0.compiles.fetch_add(1, Ordering::Relaxed);
        if let Some(path) = path
            && let Err(e) = write_atomically(&path, &component.serialize()?)
        {
            tracing::warn!(path = %path.display(), "could not cache compiled component: {e}");
        }
        Ok(component)
    }
}

/// Writes through a temporary file in the same directory and renames it into
/// place, so a reader never sees a partial file.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
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
