//! `/healthz`, `/readyz` and `/metrics` for probes and Prometheus.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use iar_backup::phases::PhaseMachine;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What the endpoints report on.
pub struct Health {
    /// Set once the plugins are loaded and the API server has answered.
    pub ready: AtomicBool,
    pub controller: Arc<PhaseMachine>,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(health): State<Arc<Health>>) -> impl IntoResponse {
    if health.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// The registry as it stands: every metric is counted as things change
/// (operations by the operations map, backups by their phase changes), so a
/// scrape copies no operation and takes no backup's lock.
async fn metrics() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        iar_core::metrics::global().encode(),
    )
}

pub fn router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health)
}

/// Serves until the future is dropped; returns the bound address first
/// through `bound` (port 0 picks a free one).
pub async fn serve(
    addr: SocketAddr,
    health: Arc<Health>,
    bound: tokio::sync::oneshot::Sender<SocketAddr>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let _ = bound.send(listener.local_addr()?);
    axum::serve(listener, router(health)).await
}
