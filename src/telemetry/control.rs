//! The operator controls: `GET /control/status`, `POST /control/pause`, `/control/resume`,
//! `/control/rate` and `/control/batch` (JSON `{"value": N}`, or `null` to go back to the
//! configuration). Every request needs `Authorization: Bearer <telemetry.token>` when a
//! token is set; a change applies from the pipeline's next tick and is logged with the
//! address it came from.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::server::Shared;
use crate::health::ProbeView;
use crate::health::controls::ControlState;

/// What `sluice ctl status` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    pub controls: ControlState,
    /// Why new writes are held, if they are: a probe's name or "operator".
    pub held_by: Option<String>,
    pub rate_limit: f64,
    /// Records per batch in the current plan.
    pub batch_records: u64,
    pub written: u64,
    pub probes: Vec<ProbeView>,
}

/// The body of `/control/rate` and `/control/batch`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetValue {
    pub value: Option<f64>,
}

pub(super) fn routes(shared: Shared) -> Router<Shared> {
    Router::new()
        .route("/status", get(status))
        .route("/pause", post(pause))
        .route("/resume", post(resume))
        .route("/rate", post(rate))
        .route("/batch", post(batch))
        .layer(middleware::from_fn_with_state(shared, authorize))
}

/// Both sides hashed, so the comparison takes the same time whatever matches.
fn same(a: &str, b: &str) -> bool {
    Sha256::digest(a.as_bytes()) == Sha256::digest(b.as_bytes())
}

async fn authorize(State(s): State<Shared>, request: Request, next: Next) -> Response {
    if s.controls_off {
        return (
            StatusCode::FORBIDDEN,
            "operator controls are off: the listener is not on loopback and no bearer token (telemetry.token) is set\n",
        )
            .into_response();
    }
    if let Some(token) = &s.token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| same(g, token)) {
            tracing::warn!(
                path = %request.uri().path(),
                "operator control refused: missing or wrong bearer token"
            );
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "a bearer token (telemetry.token) is required\n",
            )
                .into_response();
        }
    }
    next.run(request).await
}

fn origin(peer: SocketAddr) -> String {
    format!("http from {peer}")
}

async fn status(State(s): State<Shared>) -> Json<Status> {
    Json(Status {
        controls: s.health.controls().get(),
        held_by: s.health.held_by(),
        rate_limit: s.stats.rate_limit.get(),
        batch_records: s
            .stats
            .batch_records
            .load(std::sync::atomic::Ordering::Relaxed),
        written: s.stats.written.load(std::sync::atomic::Ordering::Relaxed),
        probes: s.health.probes(),
    })
}

async fn pause(
    State(s): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Json<ControlState> {
    s.health.controls().pause(&origin(peer));
    Json(s.health.controls().get())
}

async fn resume(
    State(s): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Json<ControlState> {
    s.health.controls().resume(&origin(peer));
    Json(s.health.controls().get())
}

async fn rate(
    State(s): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(set): Json<SetValue>,
) -> Result<Json<ControlState>, (StatusCode, String)> {
    s.health
        .controls()
        .set_rate(set.value, &origin(peer))
        .map_err(|e| (StatusCode::BAD_REQUEST, e))?;
    Ok(Json(s.health.controls().get()))
}

async fn batch(
    State(s): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(set): Json<SetValue>,
) -> Result<Json<ControlState>, (StatusCode, String)> {
    let batch = set
        .value
        .map(batch_size)
        .transpose()
        .map_err(|e| (StatusCode::BAD_REQUEST, e))?;
    s.health
        .controls()
        .set_batch(batch, &origin(peer))
        .map_err(|e| (StatusCode::BAD_REQUEST, e))?;
    Ok(Json(s.health.controls().get()))
}

/// A batch size as `/control/batch` and `sluice ctl batch` take it: a whole number of
/// records from 1 to the most a batch may hold.
pub fn batch_size(value: f64) -> Result<usize, String> {
    let most = crate::settings::bounds::MOST_BATCH;
    if value.fract() == 0.0 && (1.0..=most as f64).contains(&value) {
        Ok(value as usize)
    } else {
        Err(format!(
            "a batch size is a whole number of records from 1 to {most}, got {value}"
        ))
    }
}
