//! The emulator's HTTP face (axum): `POST /ingest` takes a batch in sluice's envelope
//! (a JSON array, or NDJSON with `Content-Type: application/x-ndjson`), `GET /stats`
//! reports, `POST /outage` switches an outage on or off.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::capacity::{BucketUnit, Capacity};
use super::documents::{Documents, Stored};
use super::ledger::{Ledger, SimStats};
use super::outage::{Outage, OutageMode};
use super::overload::{Answer, Overload};
use super::{RetryAfterStyle, SimSinkSettings};
use crate::lock::lock;

pub struct SinkState {
    started: Instant,
    overload: Overload,
    /// Set when the emulator stops: requests it is not answering (dropped) end.
    stopping: tokio::sync::watch::Sender<bool>,
    rng: Mutex<rand::rngs::StdRng>,
    reject_field: Option<String>,
    refuse_share: f64,
    retry_after: RetryAfterStyle,
    unit: BucketUnit,
    /// The configured capacity, for RateLimit-Policy (what `set_capacity` changes later is
    /// not announced: a database that slows down does not say so).
    quota: f64,
    capacity: Mutex<Capacity>,
    outage: Mutex<Outage>,
    ledger: Mutex<Ledger>,
    documents: Option<Documents>,
    in_progress: AtomicU64,
}

impl SinkState {
    pub fn new(config: &SimSinkSettings) -> Self {
        SinkState {
            started: Instant::now(),
            overload: Overload {
                latency: config.latency,
                limit: config.concurrency_limit,
            },
            stopping: tokio::sync::watch::Sender::new(false),
            rng: Mutex::new(rand::make_rng()),
            reject_field: config.reject_field.clone(),
            refuse_share: config.refuse_share,
            retry_after: config.retry_after,
            unit: config.unit,
            quota: config.capacity,
            capacity: Mutex::new(Capacity::new(config.capacity, config.burst)),
            outage: Mutex::new(Outage::default()),
            ledger: Mutex::new(Ledger::default()),
            documents: config.keep_documents.then(Documents::default),
            in_progress: AtomicU64::new(0),
        }
    }

    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn ledger(&self) -> MutexGuard<'_, Ledger> {
        lock(&self.ledger)
    }

    /// The documents stored, when the emulator keeps them.
    pub fn documents(&self) -> Option<&Documents> {
        self.documents.as_ref()
    }

    pub fn set_capacity(&self, rate: f64) {
        lock(&self.capacity).set_rate(rate, self.now());
    }

    /// Ends the requests held without an answer, so that a graceful stop is not kept
    /// waiting by them.
    pub fn release_dropped(&self) {
        self.stopping.send_replace(true);
    }

    pub fn set_outage(&self, length: Duration, mode: OutageMode) {
        lock(&self.outage).set(self.now(), length, mode);
    }
}

impl SinkState {
    /// Counts a request in progress and meets an outage if one is on: `None` then (after
    /// holding the request to the outage's end, in `hang` mode), to be answered 503.
    pub async fn begin(&self) -> Option<InProgress<'_>> {
        let concurrency = self.in_progress.fetch_add(1, Relaxed) + 1;
        let guard = InProgress {
            count: &self.in_progress,
            concurrency,
        };
        let now = self.now();
        self.ledger().request(now, concurrency);
        let outage = lock(&self.outage).active(now);
        if let Some((mode, left)) = outage {
            self.ledger().unavailable();
            if mode == OutageMode::Hang {
                tokio::time::sleep(left).await;
            }
            return None;
        }
        Some(guard)
    }

    /// How the overload model answers a request that met `concurrency` in progress.
    pub fn overload_answer(&self, concurrency: u64) -> Answer {
        self.overload
            .answer(concurrency as u32, &mut *lock(&self.rng))
    }

    pub fn reject_field(&self) -> Option<&str> {
        self.reject_field.as_deref()
    }

    /// Whether the next document is refused at random (`refuse_share`).
    pub fn refused_at_random(&self) -> bool {
        use rand::RngExt;
        self.refuse_share > 0.0 && lock(&self.rng).random_bool(self.refuse_share)
    }

    pub fn capacity(&self) -> &Mutex<Capacity> {
        &self.capacity
    }
}

pub fn router(shared: Arc<SinkState>, bulk: bool) -> Router {
    let router = if bulk {
        Router::new()
            .route("/_bulk", post(super::bulk::bulk))
            .route("/{index}/_bulk", post(super::bulk::bulk))
    } else {
        Router::new().route("/ingest", post(ingest))
    };
    router
        .route("/stats", get(stats))
        .route("/documents", get(documents))
        .route("/outage", post(outage))
        .with_state(shared)
}

/// Counts a request in progress for as long as it lives.
pub struct InProgress<'a> {
    count: &'a AtomicU64,
    /// Requests in progress when this one arrived, itself included.
    pub concurrency: u64,
}

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Relaxed);
    }
}

async fn ingest(State(s): State<Arc<SinkState>>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(in_progress) = s.begin().await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "outage").into_response();
    };
    let now = s.now();

    let items = match read_items(&headers, &body) {
        Ok(items) => items,
        Err((status, message)) => {
            s.ledger().malformed();
            return (status, message).into_response();
        }
    };
    let n = items.len() as u64;
    let bytes = body.len() as u64;
    s.ledger().received(now, n, bytes);
    if let Some(field) = &s.reject_field {
        let bad: Vec<usize> = items
            .iter()
            .enumerate()
            .filter(|(_, item)| item.record.get(field.as_str()).is_some())
            .map(|(i, _)| i)
            .collect();
        if !bad.is_empty() {
            s.ledger().malformed();
            let message = format!("records {bad:?} carry the field {field:?}");
            return (StatusCode::UNPROCESSABLE_ENTITY, message).into_response();
        }
    }

    let answer = s.overload_answer(in_progress.concurrency);
    match answer {
        Answer::Take(_) => {}
        Answer::Defer(delay) => {
            s.ledger().throttled(now, n);
            tokio::time::sleep(delay).await;
            return (
                StatusCode::TOO_MANY_REQUESTS,
                "too many requests in progress",
            )
                .into_response();
        }
        Answer::Drop => {
            // As in Vector's harness, a request the sink ignores no longer loads it.
            drop(in_progress);
            s.ledger().dropped();
            let mut stopping = s.stopping.subscribe();
            let _ = stopping.wait_for(|stop| *stop).await;
            return (StatusCode::SERVICE_UNAVAILABLE, "stopping").into_response();
        }
    }
    let verdict = lock(&s.capacity).try_take(s.unit.cost(n, bytes), now);
    if let Err(wait) = verdict {
        s.ledger().throttled(now, n);
        return throttled(wait, s.retry_after, s.quota, s.unit);
    }
    let keys = items.iter().map(|i| i.key.as_str());
    let (inserted, duplicates) = s.ledger().accept(now, bytes, keys);
    if let Some(documents) = s.documents() {
        for item in items {
            documents.keep_first(Stored {
                key: item.key,
                index: None,
                source: item.source,
                record: item.record,
            });
        }
    }
    // Stored before the answer: a client that gives up waiting has still written.
    if let Answer::Take(delay) = answer {
        tokio::time::sleep(delay).await;
    }
    Json(json!({"inserted": inserted, "duplicates": duplicates})).into_response()
}

/// One record in sluice's envelope.
#[derive(Deserialize)]
struct Item {
    key: String,
    #[serde(default)]
    source: Option<String>,
    record: Value,
}

fn read_items(headers: &HeaderMap, body: &[u8]) -> Result<Vec<Item>, (StatusCode, String)> {
    let ndjson = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-ndjson"));
    let values: Vec<Value> = if ndjson {
        body.split(|b| *b == b'\n')
            .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
            .map(serde_json::from_slice)
            .collect::<Result<_, _>>()
    } else {
        serde_json::from_slice(body)
    }
    .map_err(|e| (StatusCode::BAD_REQUEST, format!("unreadable body: {e}")))?;
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            // From the value's text, not `from_value`: that turns a `-0` into `0`, and a
            // record must be stored as it came.
            serde_json::from_str(&v.to_string()).map_err(|e| {
                (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("record {i} is not {{\"key\": string, \"record\": …}}: {e}"),
                )
            })
        })
        .collect()
}

/// A 429 in `style`. Only the `ratelimit` style names the unit counted (its policy's
/// `qu`); the others leave the client to find out which unit it exceeded.
fn throttled(wait: Duration, style: RetryAfterStyle, quota: f64, unit: BucketUnit) -> Response {
    let whole_seconds = wait.as_secs_f64().ceil() as u64;
    let mut response = (StatusCode::TOO_MANY_REQUESTS, "over capacity").into_response();
    let h = response.headers_mut();
    let mut set = |name: &'static str, value: String| {
        h.insert(name, HeaderValue::from_str(&value).expect("ASCII header"));
    };
    match style {
        RetryAfterStyle::Millis => {
            set("retry-after", whole_seconds.to_string());
            let millis = (wait.as_secs_f64() * 1000.0).ceil() as u64;
            set("x-ms-retry-after-ms", millis.to_string());
        }
        RetryAfterStyle::Seconds => set("retry-after", whole_seconds.to_string()),
        RetryAfterStyle::Ratelimit => {
            set("ratelimit", format!("\"sim\";r=0;t={whole_seconds}"));
            let q = quota.round().max(1.0) as u64;
            let qu = unit.quota_unit();
            set("ratelimit-policy", format!("\"sim\";q={q};w=1;qu=\"{qu}\""));
        }
        RetryAfterStyle::None => {}
    }
    response
}

async fn documents(State(s): State<Arc<SinkState>>) -> Json<Vec<Stored>> {
    Json(s.documents().map_or_else(Vec::new, Documents::all))
}

async fn stats(State(s): State<Arc<SinkState>>) -> Json<SimStats> {
    Json(s.ledger().stats())
}

#[derive(Deserialize)]
struct OutageRequest {
    seconds: f64,
    #[serde(default)]
    mode: OutageMode,
}

async fn outage(State(s): State<Arc<SinkState>>, Json(req): Json<OutageRequest>) -> Response {
    match Duration::try_from_secs_f64(req.seconds) {
        Ok(length) => {
            s.set_outage(length, req.mode);
            Json(json!({"seconds": req.seconds, "mode": req.mode})).into_response()
        }
        Err(_) => (StatusCode::UNPROCESSABLE_ENTITY, "seconds must be ≥ 0").into_response(),
    }
}
