//! `/healthz`, `/readyz` and `/metrics` for probes and Prometheus.

use crate::controller::Controller;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What the endpoints report on.
pub struct Health {
    /// Set once the plugins are loaded and the API server has answered.
    pub ready: AtomicBool,
    pub controller: Arc<Controller>,
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

async fn metrics(State(health): State<Arc<Health>>) -> impl IntoResponse {
    // Operations by phase, counted at scrape time from the live map.
    let mut by_phase: BTreeMap<String, i64> = BTreeMap::new();
    for backup in health.controller.operations.backups() {
        for op in health
            .controller
            .operations
            .get(&backup)
            .await
            .unwrap_or_default()
        {
            *by_phase
                .entry(format!("{:?}", op.status.phase))
                .or_default() += 1;
        }
    }
    let counts: Vec<(String, i64)> = by_phase.into_iter().collect();
    let m = crate::metrics::global();
    m.set_operations(&counts);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.encode(),
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
