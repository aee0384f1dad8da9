//! The process's one TLS crypto provider.

/// Installs ring as rustls's process-wide crypto provider, once. Every TLS
/// client iar builds (kube's, the cloud stores', the https plugin
/// fetcher's) takes its provider from there: reqwest is built without one
/// of its own and panics when none is installed, so each place that builds
/// a client calls this first. Safe to call any number of times.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
