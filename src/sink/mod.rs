//! Sinks: where rows go. A sink writes a whole batch idempotently (a redelivered key is a
//! duplicate, not a second row) and says how it went, so the pipeline can retry, back off,
//! split the batch, or dead-letter — and acknowledge only what is durably written.

pub(crate) mod balanced;
pub(crate) mod column_fit;
pub mod columns;
pub mod dead_letters;
pub mod discovery;
pub mod elasticsearch;
pub mod http;
pub mod identifier;
pub mod mysql;
pub mod open;
pub mod postgres;
pub(crate) mod private_file;
pub mod settings;
pub(crate) mod sql_error;
pub mod sqlite;
pub mod upsert;
pub(crate) mod url_parameters;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::control::backoff::Backoff;
use crate::control::sink_limit::Unit;
use crate::record::{DeadLetter, Row};
use open::open_one;
use settings::SinkSettings;
use tokio_util::sync::CancellationToken;

/// How one write went.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOutcome {
    /// Durably written; `duplicates` keys were already there and were left alone.
    Written { inserted: u64, duplicates: u64 },
    /// Durably written, except `skipped` rows the sink's own code chose not to store (a
    /// PostgreSQL trigger returning NULL, a DO INSTEAD rule): sending them again changes
    /// nothing, so they are settled with the rest and counted apart, never as written
    /// nor as duplicates.
    SkippedBySink {
        inserted: u64,
        duplicates: u64,
        skipped: u64,
    },
    /// Upsert mode: durably written. `written` keys were inserted or updated, `deleted`
    /// keys deleted (a tombstone version stored), `stale` records refused by the guard
    /// because the key already held a version at least as new, `superseded` records left
    /// out because a newer version of their key was in the same batch, `skipped` records
    /// the table's own code did not apply (see [`WriteOutcome::SkippedBySink`]).
    Upserted {
        written: u64,
        deleted: u64,
        stale: u64,
        superseded: u64,
        skipped: u64,
    },
    /// The sink asked us to slow down (HTTP 429/503, a throttling SQLSTATE).
    Throttled {
        retry_after: Option<Duration>,
        /// What the sink counts, when its answer says (`RateLimit-Policy`'s `qu`).
        unit: Option<Unit>,
        reason: String,
    },
    /// The sink cannot be reached or cannot write at all right now (connection refused,
    /// disk full). Not the records' fault: retried without spending their attempts.
    Unavailable(String),
    /// A failure that may pass on retry but may also be caused by the batch (deadlock,
    /// timeout): retried, and after `retry.max_attempts` the records are dead-lettered.
    Transient(String),
    /// The sink will never take some of these rows. `rows` names them when the sink knows
    /// (indexes into the batch); otherwise the batch is split to find them.
    Rejected {
        rows: Option<Vec<usize>>,
        reason: String,
    },
    /// Nothing more can be done (the table is gone, permissions revoked): stop the worker.
    Fatal(String),
    /// A failure no rule explains: it may be some row's doing or everyone's. The batch is
    /// split to find out; a row is dead-lettered only if it fails alone and a write
    /// without it succeeds, otherwise the worker stops.
    Unexplained(String),
    /// The sink failed the request without saying why (HTTP 500): one record's content may
    /// crash it, or it may fail every request. Judged on evidence, as [`Unexplained`]
    /// is, but what nothing explains is an outage here, not a reason to stop: the batch is
    /// halved while the sink takes other records, and a record that failed alone is
    /// dead-lettered only once it has failed `retry.max_attempts` times and a write sent
    /// after one of its failures was taken. Without that evidence the pieces are sent
    /// again after the outage backoff, without limit.
    ///
    /// [`Unexplained`]: WriteOutcome::Unexplained
    ServerError(String),
    /// The sink's answer cannot be matched to the records sent (items in another order,
    /// another number of them, ids the request did not carry, a body that is not the
    /// expected JSON): nothing of the request is acknowledged. Sent again (the keys make a
    /// resend safe); after `retry.max_attempts` such answers in a row the worker stops
    /// rather than guess.
    Unreadable(String),
    /// The sink took part of the batch and answered record by record (a bulk API's 200
    /// with per-item statuses): one [`ItemOutcome`] per row, in the batch's order. Only the
    /// rows not taken are sent again. Built by [`WriteOutcome::from_items`], so it always
    /// holds at least one row that was not written.
    Items {
        items: Vec<ItemOutcome>,
        /// The wait the answer asked for, if any (bulk APIs rarely give one per item).
        retry_after: Option<Duration>,
        unit: Option<Unit>,
    },
}

/// How one record of a batch went, when the sink answers record by record.
#[derive(Debug, Clone, PartialEq)]
pub enum ItemOutcome {
    Written,
    /// The key was already there (a `create` answered 409).
    Duplicate,
    /// Refused for now (a full write queue, a 429 for this record): sent again, and
    /// counted as push-back in proportion to the share of the batch refused.
    Throttled(String),
    /// Failed without saying why (a 500 for this record): retried with backoff, and
    /// dead-lettered after `retry.max_attempts` only if the sink took other records
    /// meanwhile (in the same answer, or in writes sent after this one failed); a sink
    /// failing every record is out, and its records wait for it.
    Failed(String),
    /// The part of the sink that holds this record is down (an Elasticsearch shard not
    /// active, a 502/503/504 for this item): sent again after the outage backoff, without
    /// limit, never dead-lettered.
    Unavailable(String),
    /// Refused for good (a mapping or parsing error): dead-lettered with the reason.
    Rejected(String),
}

impl ItemOutcome {
    /// The outcome's name, for `sluice_sink_items_total{outcome}`.
    pub fn label(&self) -> &'static str {
        match self {
            ItemOutcome::Written => "written",
            ItemOutcome::Duplicate => "duplicate",
            ItemOutcome::Throttled(_) => "throttled",
            ItemOutcome::Failed(_) => "failed",
            ItemOutcome::Unavailable(_) => "unavailable",
            ItemOutcome::Rejected(_) => "rejected",
        }
    }
}

impl WriteOutcome {
    /// The outcome's name, for metrics labels.
    pub fn label(&self) -> &'static str {
        match self {
            WriteOutcome::Written { .. }
            | WriteOutcome::SkippedBySink { .. }
            | WriteOutcome::Upserted { .. } => "written",
            WriteOutcome::Throttled { .. } => "throttled",
            WriteOutcome::Unavailable(_) => "unavailable",
            WriteOutcome::Transient(_) => "transient",
            WriteOutcome::Rejected { .. } => "rejected",
            WriteOutcome::Fatal(_) => "fatal",
            WriteOutcome::Unexplained(_) => "unexplained",
            WriteOutcome::ServerError(_) => "server_error",
            WriteOutcome::Unreadable(_) => "unreadable",
            WriteOutcome::Items { .. } => "partial",
        }
    }

    /// The answer of a sink that speaks record by record: `Written` when every record was
    /// written or a duplicate, else `Items`.
    pub fn from_items(
        items: Vec<ItemOutcome>,
        retry_after: Option<Duration>,
        unit: Option<Unit>,
    ) -> WriteOutcome {
        let taken = |i: &ItemOutcome| matches!(i, ItemOutcome::Written | ItemOutcome::Duplicate);
        if items.iter().all(taken) {
            let duplicates = items
                .iter()
                .filter(|i| **i == ItemOutcome::Duplicate)
                .count() as u64;
            return WriteOutcome::Written {
                inserted: items.len() as u64 - duplicates,
                duplicates,
            };
        }
        WriteOutcome::Items {
            items,
            retry_after,
            unit,
        }
    }

    /// The sink pushed back or failed to answer: a congestion signal for adaptive limits.
    pub fn is_drop(&self) -> bool {
        matches!(
            self,
            WriteOutcome::Throttled { .. }
                | WriteOutcome::Unavailable(_)
                | WriteOutcome::Transient(_)
                | WriteOutcome::ServerError(_)
        ) || matches!(self, WriteOutcome::Items { items, .. }
            if items.iter().any(|i| matches!(i, ItemOutcome::Throttled(_) | ItemOutcome::Failed(_) | ItemOutcome::Unavailable(_))))
    }
}

#[async_trait]
pub trait Sink: Send + Sync {
    /// Writes `rows` in one transaction (or one request): all or nothing.
    async fn write(&self, rows: &[Row]) -> WriteOutcome;

    /// Checks that the sink answers (for readiness): a trivial query, a HEAD request.
    async fn ping(&self) -> Result<(), String> {
        Ok(())
    }

    /// Stores records that will never be written, with their reasons. Storing the same
    /// letter twice (a redelivered bad record) keeps one.
    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome;
}

/// Shown with credentials masked, whatever the URL or the driver's message holds.
#[derive(Debug, thiserror::Error)]
#[error("cannot open sink {}: {}", crate::redact::redact(.url), crate::redact::redact(.message))]
pub struct SinkError {
    pub url: String,
    pub message: String,
    /// The sink answered that it cannot take writes *now* (a maintenance window, a
    /// server starting up): `run` waits for it instead of failing.
    pub not_now: bool,
}

/// Opens the sink, waiting while it answers that it cannot take writes now (a
/// maintenance window, a server starting up) — the same outage a running worker waits
/// out — with backoff capped at `throttle.max_pause`. `None` when shutdown
/// was requested first: nothing was pulled, so nothing is lost.
pub async fn open_when_ready(
    settings: &SinkSettings,
    opening: &SinkOpening,
    shutdown: &CancellationToken,
) -> Result<Option<Arc<dyn Sink>>, SinkError> {
    let backoff = &opening.outage;
    let mut attempt = 0;
    loop {
        match open(settings, opening).await {
            Ok(sink) => return Ok(Some(sink)),
            Err(e) if e.not_now => {
                attempt += 1;
                let wait = backoff.delay(attempt, &mut rand::rng());
                tracing::warn!(?wait, "sink not available yet, waiting: {e}");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.cancelled() => return Ok(None),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// How a sink is opened, besides its settings: what the rest of the configuration asks
/// of it.
#[derive(Debug, Clone)]
pub struct SinkOpening {
    /// The most writes in flight (`concurrency.max`): a database pool holds one more
    /// connection than that, unless `max_connections` says otherwise.
    pub most_in_flight: usize,
    /// The longest wait an HTTP endpoint may ask for (`retry.max_delay`).
    pub longest_wait: Duration,
    /// While the sink is out: between attempts to open it, and to probe a down endpoint.
    pub outage: Backoff,
}

/// Opens the sink `settings` describe and creates its tables if missing.
pub async fn open(
    settings: &SinkSettings,
    opening: &SinkOpening,
) -> Result<Arc<dyn Sink>, SinkError> {
    if settings.urls.is_empty() && settings.discovery.file.is_none() {
        return open_one(settings, opening).await;
    }
    let coordinate = settings
        .balance
        .aperture
        .coordinate(&|v| std::env::var(v).ok())
        .map_err(|e| SinkError {
            url: "sink.balance.aperture".into(),
            message: e.to_string(),
            not_now: false,
        })?;
    let mut discovery = discovery::Discovery::new(settings)?;
    let wanted = discovery.resolve().await;
    if wanted.is_empty() {
        return Err(SinkError {
            url: "sink.urls".into(),
            message: "discovery found no endpoint yet".into(),
            not_now: true,
        });
    }
    let mut endpoints = Vec::with_capacity(wanted.len());
    for w in &wanted {
        endpoints.push(open_endpoint(settings, opening, w).await?);
    }
    let sink = Arc::new(balanced::BalancedSink::new(
        endpoints,
        &settings.balance,
        coordinate,
        opening.outage.clone(),
    ));
    if discovery.is_dynamic() {
        discovery.spawn(Arc::downgrade(&sink), settings.clone(), opening.clone());
    }
    Ok(sink)
}

/// One endpoint of a balanced sink: the sink configured, at `wanted`'s URL. Labelled by
/// name or host:port (metrics are unauthenticated).
async fn open_endpoint(
    settings: &SinkSettings,
    opening: &SinkOpening,
    wanted: &discovery::Wanted,
) -> Result<balanced::Endpoint, SinkError> {
    let mut one = settings.clone();
    one.url = wanted.url.clone();
    one.urls.clear();
    one.discovery = Default::default();
    Ok(balanced::Endpoint {
        sink: open_one(&one, opening).await?,
        key: wanted.url.clone(),
        name: wanted
            .name
            .clone()
            .unwrap_or_else(|| crate::redact::endpoint_label(&wanted.url)),
        zone: wanted.zone.clone(),
    })
}

/// Readiness of a database sink: a trivial query through its pool.
pub async fn ping_pool<'c, E>(pool: E) -> Result<(), String>
where
    E: sqlx::Executor<'c>,
{
    sqlx::raw_sql("SELECT 1")
        .execute(pool)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A stable identity for a dead letter: the same record failing again on the way to the
/// same target is one letter; the same record bound for another table (another pipeline
/// sharing the store) is another.
pub fn dead_letter_fingerprint(target: &str, letter: &DeadLetter) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(target.as_bytes());
    h.update([0]);
    h.update(letter.origin.as_bytes());
    h.update([0]);
    h.update(&letter.raw);
    hex::encode(&h.finalize()[..16])
}
