//! `/metrics`, `/healthz` (the process is alive), `/readyz` (source, sink and lease store
//! reachable, not shutting down) and the operator controls under `/control/` on `[telemetry] listen`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::task::JoinHandle;

use crate::health::Health;
use crate::sink::Sink;
use crate::stats::Stats;

#[derive(Clone)]
pub(super) struct Shared {
    pub stats: Arc<Stats>,
    pub sink: Arc<dyn Sink>,
    pub health: Arc<Health>,
    /// The bearer token `/control/` requires; None: open on loopback, refused elsewhere.
    pub token: Option<Arc<str>>,
    /// No token and the listener is not on loopback: anyone who reaches it could pause
    /// or speed up the worker, so the controls are off (metrics and health still served).
    pub controls_off: bool,
}

/// Binds `listen` and serves until the task is aborted; returns the bound address.
pub async fn serve(
    listen: SocketAddr,
    stats: Arc<Stats>,
    sink: Arc<dyn Sink>,
    health: Arc<Health>,
    token: Option<String>,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    super::metrics::handle();
    let controls_off = token.is_none() && !listen.ip().is_loopback();
    if controls_off {
        tracing::warn!(
            "telemetry.listen ({listen}) is not on loopback and no telemetry.token is set: the operator controls (/control, sluice ctl) are refused"
        );
    }
    let shared = Shared {
        stats,
        sink,
        health,
        token: token.map(Arc::from),
        controls_off,
    };
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .nest("/control", super::control::routes(shared.clone()))
        .with_state(shared);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("telemetry server stopped: {e}");
        }
    });
    Ok((addr, task))
}

async fn metrics(State(s): State<Shared>) -> ([(&'static str, &'static str); 1], String) {
    super::metrics::publish_health(&s.health);
    (
        [("content-type", "text/plain; version=0.0.4")],
        super::metrics::render(&s.stats),
    )
}

async fn ready(State(s): State<Shared>) -> (StatusCode, String) {
    if s.stats.stopping.load(Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".into());
    }
    if !s.stats.source_up.load(Relaxed) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "source unreachable\n".into(),
        );
    }
    if let Some(why) = s.stats.lease_outage() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{}\n", crate::redact::redact(&why)),
        );
    }
    if s.stats.dead_letter_outages.load(Relaxed) > 0 {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "dead-letter store failing\n".into(),
        );
    }
    match tokio::time::timeout(Duration::from_secs(2), s.sink.ping()).await {
        Ok(Ok(())) => (StatusCode::OK, "ready\n".into()),
        Ok(Err(e)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("sink unreachable: {}\n", crate::redact::redact(&e)),
        ),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "sink did not answer within 2 s\n".into(),
        ),
    }
}
