//! Plugins from ConfigMaps: a ConfigMap labelled `iar.dev/plugin` in iar's
//! namespace holds one plugin (inline, or by reference, always with its
//! sha256). [`watch`] keeps a [`PluginRegistry`] in step with them: each
//! change is verified, compiled and smoke-called off the async runtime,
//! then published as a new [`PluginSet`] generation; a bad new version
//! leaves the last good one loaded; each ConfigMap carries its status.
//! The watches are kube-runtime's, retried with a backoff of at most
//! [`MAX_RETRY_DELAY`]; each failure is logged and kept in the registry
//! ([`PluginRegistry::watch_failures`]) until the watch delivers again.
//! What a ConfigMap may grant is bounded by the operator's
//! [`GrantPolicy`]; loads run in parallel, each stage under a timeout.

mod claims;
pub mod configmap;
mod load;
pub mod policy;
pub mod registry;
pub mod status;
mod watcher;
mod watches;

pub use load::{HttpsClientError, LoadFailure, NEVER_READ, Unavailable, read_path};
pub use policy::GrantPolicy;
pub use registry::{PluginRegistry, PluginSet, WatchFailure};
pub use status::Status;
pub use watcher::{
    DEFAULT_COMPILE_TIMEOUT, DEFAULT_READ_TIMEOUT, WatchError, WatchOptions, watch, watch_forever,
    watch_with,
};
pub use watches::MAX_RETRY_DELAY;
