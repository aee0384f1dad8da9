//! iar, the item action runtime: runs Kubernetes backup item actions
//! (Velero's BackupItemAction v2) as sandboxed WebAssembly components.
//!
//! Data flows one way: sources (files, a cluster) → [`plugin`] (the
//! host/guest boundary) → results. Nothing outside [`plugin`], [`runtime`]
//! and [`sandbox`] knows wasm exists.

// Boundary errors carry the plugin, the item and the rule by design; they are
// returned off the hot path, so their size is not worth boxing.
#![allow(clippy::result_large_err)]

/// The process allocator, for every binary built on this crate (`iar`, its
/// tests, benchmarks and examples alike). A backup allocates and frees
/// millions of small strings and maps (items, plugin calls, results) across
/// worker threads; with glibc's malloc, malloc, free and their consolidation
/// were the largest cost of a 10,000-item backup outside the plugins, and
/// three plugins added a third more of it (docs/decisions.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mi_option_purge_delay in mimalloc's option enum (mimalloc.h, v2 and
/// v3 alike); libmimalloc-sys names only some options. A test checks it
/// by the option's documented default.
#[cfg(feature = "mimalloc")]
const PURGE_DELAY_OPTION: libmimalloc_sys::mi_option_t = 15;

/// Gives freed memory back to the system at once rather than a second (ten
/// for whole arenas) later: a backup frees as it goes (each block's items
/// once written), and with the delay the resident set kept what had been
/// freed meanwhile (100,000 items: 115 MB peak against 92 MB, items/s the
/// same; docs/performance.md). `MIMALLOC_PURGE_DELAY` in the environment
/// still decides, as for any mimalloc program. Called first thing in
/// `main`; a no-op without the `mimalloc` feature.
pub fn tune_allocator() {
    #[cfg(feature = "mimalloc")]
    {
        // SAFETY: sets an option (an atomic store in mimalloc);
        // `set_default` leaves a value the environment gave alone.
        unsafe { libmimalloc_sys::mi_option_set_default(PURGE_DELAY_OPTION, 0) };
    }
}

#[cfg(all(test, feature = "mimalloc"))]
mod allocator_tests {
    /// The option set is the purge delay: before, it reads mimalloc v3's
    /// documented default (1,000 ms), after, 0. An upgrade that moved the
    /// enum would fail here rather than silently set another option.
    #[test]
    fn tune_allocator_sets_the_purge_delay() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: reads an option.
        let get = || unsafe { libmimalloc_sys::mi_option_get(super::PURGE_DELAY_OPTION) };
        assert_eq!(get(), 1000);
        super::tune_allocator();
        assert_eq!(get(), 0);
    }
}

// The layers, each a crate of its own (docs/decisions.md, "Crates and
// their direction"), under the module names they had when they were one
// crate: `iar::select`, `iar::k8s`, ... keep working for the binary, the
// tests, the benchmarks and the fuzz targets.
pub use iar_authoring as authoring;
pub use iar_backup::{backup, phases};
pub use iar_core::{
    catalog, cluster, duration, identifier, item, item_scan, manifests, metrics, names, operations,
    results, select, spool, store, tls, yaml,
};
pub use iar_k8s as k8s;
pub use iar_plugin::{contract, limits, plugin, runtime, sandbox};
pub use iar_repository as repository;
pub use iar_restore as restore;
pub use iar_velero as velero_plugin;

pub use iar_core::{
    ClusterReader, Item, ItemRef, ItemRefFields, ManifestCluster, NoCluster, ReadGrants,
};
pub use iar_plugin::{
    Allocation, BackupRef, CallError, Isolation, Limits, LoadError, Phase, Plugin, PluginInstance,
    PluginSettings, Runtime, RuntimeConfig, Violation,
};
