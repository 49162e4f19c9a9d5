//! Drives one batch to a final state: every row written or dead-lettered. Retries with
//! backoff, waits out throttling, splits a rejected batch to find the bad rows so the good
//! ones still land, and never gives up on a row because the sink is merely unreachable.
//!
//! Throttling is the worker's business, not the batch's: a throttled write is reported to
//! the shared [`Backpressure`], which cuts the rate and pauses every write of the worker;
//! the batch is then sent again as it is. Every retry is paid for by the retry budget.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use super::backpressure::Backpressure;
use super::limit_gate::LimitGate;
use crate::control::backoff::Backoff;
use crate::record::{DeadLetter, Position, Row};
use crate::sink::{Sink, WriteOutcome};
use crate::stats::Stats;
use crate::telemetry::metrics::{REQUESTS, WRITE_SECONDS};
use piece::{Pace, Piece};
use settle::Settling;
use tokio_util::sync::CancellationToken;

/// A batch as the pipeline hands it over: the decoded rows, the records that failed to
/// decode, and the source positions to acknowledge once all of them are settled.
#[derive(Debug, Default)]
pub struct Batch {
    pub rows: Vec<Row>,
    pub dead: Vec<DeadLetter>,
    pub positions: Vec<Position>,
}

#[derive(Debug, thiserror::Error)]
#[error("sink failed for good: {0}")]
pub struct FatalSinkError(pub String);

pub struct Delivery {
    sink: Arc<dyn Sink>,
    backoff: Backoff,
    max_attempts: u32,
    pressure: Arc<Backpressure>,
    gate: Arc<LimitGate>,
    stats: Arc<Stats>,
    /// When the latest write the sink took (whole or in part) was sent, in nanoseconds of
    /// the worker's time: the evidence that the sink works for some records.
    last_taken_sent: AtomicU64,
}

impl Delivery {
    /// Built by [`crate::write::WritePath`], which shares `pressure` and `gate` with
    /// the pipeline; `retry` is the backoff between attempts at a failed batch.
    pub(crate) fn new(
        sink: Arc<dyn Sink>,
        retry: Backoff,
        max_attempts: u32,
        pressure: Arc<Backpressure>,
        gate: Arc<LimitGate>,
        stats: Arc<Stats>,
    ) -> Self {
        Delivery {
            sink,
            backoff: retry,
            max_attempts,
            pressure,
            gate,
            stats,
            last_taken_sent: AtomicU64::new(0),
        }
    }

    /// One write, measured: its latency and outcome feed the concurrency limit and the
    /// metrics. `None` when the gate cut it short: the limit has fallen far below the
    /// writes in flight and this one is overdue (a drop, its fate unknown). A resend after
    /// no answer first waits for a place under the limit, as does a write `within_limit`.
    /// Also returns the writes in flight when it started, itself included.
    async fn write(
        &self,
        rows: &[Row],
        resend: bool,
        within_limit: bool,
    ) -> (Option<WriteOutcome>, usize) {
        if resend {
            Stats::add(&self.stats.resent_unanswered, rows.len() as u64);
        }
        let inflight = if resend || within_limit {
            self.gate.start_within_limit().await
        } else {
            self.gate.started()
        };
        let began = tokio::time::Instant::now();
        let outcome = tokio::select! {
            outcome = self.sink.write(rows) => Some(outcome),
            _ = self.gate.overdue(began) => None,
        };
        let rtt = began.elapsed();
        self.gate
            .finished(rtt, inflight, outcome.as_ref().is_none_or(|o| o.is_drop()));
        metrics::histogram!(WRITE_SECONDS).record(rtt.as_secs_f64());
        self.stats.write_latency.record(rtt);
        let label = outcome.as_ref().map_or("cut", |o| o.label());
        metrics::counter!(REQUESTS, "outcome" => label).increment(1);
        (outcome, inflight)
    }

    /// Settles the batch; returns the positions that may now be acknowledged.
    pub async fn deliver(&self, batch: Batch) -> Result<Vec<Position>, FatalSinkError> {
        self.deliver_until(batch, CancellationToken::new()).await
    }

    /// As [`Delivery::deliver`], but once `stop` fires a batch that is only waiting to be
    /// sent (a throttle pause, the retry budget, a backoff) is given up: no positions are
    /// returned, so nothing is acknowledged and the source delivers it again next run. A
    /// write already on the wire is waited for.
    pub async fn deliver_until(
        &self,
        batch: Batch,
        stop: CancellationToken,
    ) -> Result<Vec<Position>, FatalSinkError> {
        let mut s = Settling::new(batch.rows, batch.dead);
        while let Some(mut piece) = s.todo.pop() {
            if piece.rows.is_empty() {
                continue;
            }
            let Some(sent_at) = until(&stop, self.pace(&mut piece)).await else {
                tracing::info!(
                    records = batch.positions.len(),
                    "shutdown while waiting to retry: left unacknowledged, to be delivered again"
                );
                return Ok(Vec::new());
            };
            if piece.canary {
                if let (Some(outcome), _) = self.write(&piece.rows, false, false).await {
                    self.canary_answered(&outcome, sent_at);
                }
                continue;
            }
            let resend = std::mem::take(&mut piece.unanswered);
            let within_limit = std::mem::take(&mut piece.within_limit);
            match self.write(&piece.rows, resend, within_limit).await {
                (Some(outcome), inflight) => {
                    self.settle(&mut s, piece, outcome, sent_at, inflight)?
                }
                (None, _) => self.cut(&mut s, piece),
            }
        }
        let Settling {
            mut dead,
            unexplained,
            ..
        } = s;
        dead.extend(unexplained.verdict().map_err(FatalSinkError)?);
        // Reasons quote the sink's answers, which may echo what the request carried (its
        // headers, a token): whichever store keeps them, no configured secret reaches it.
        for letter in &mut dead {
            letter.reason = crate::redact::redact(&letter.reason);
        }
        self.store_dead_letters(&dead).await?;
        Ok(batch.positions)
    }

    /// Waits until `piece` may go: its backoff, then what its pace asks, then the worker's
    /// pause. Returns when it is sent, in the worker's time.
    async fn pace(&self, piece: &mut Piece) -> std::time::Duration {
        let backoff = std::mem::take(&mut piece.backoff);
        if !backoff.is_zero() {
            tokio::time::sleep(backoff).await;
        }
        match piece.pace {
            Pace::First => self.pressure.first_attempt(),
            Pace::Retry => self.pressure.retry_permit(piece.rows.len()).await,
            Pace::Turn => self.pressure.resend_turn(piece.rows.len()).await,
            Pace::Limit | Pace::Outage => {}
        }
        let at = self.pressure.clear_to_send().await;
        // A throttle without Retry-After (a sink deferring beyond its concurrency) says
        // nothing of its room, and restarting the cadence at each resend cost 5% of the
        // rate in Vector's "defers at high rate" scenario.
        if std::mem::take(&mut piece.room_told) && piece.pace == Pace::Retry {
            self.pressure.resent_after_throttle(at);
        }
        at
    }
}

/// Waits for `wait` unless `stop` fires first (a wait that is over at once always wins);
/// `None` when stopped.
async fn until<T>(
    stop: &CancellationToken,
    wait: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        biased;
        done = wait => Some(done),
        _ = stop.cancelled() => None,
    }
}

/// What a request carries of its rows, as the sink's byte limit counts it (near enough:
/// the body adds an envelope per row).
pub fn row_bytes(rows: &[Row]) -> u64 {
    rows.iter()
        .map(|r| (r.key.len() + r.payload.len()) as u64)
        .sum()
}

mod blame;
mod dead_letter_store;
#[cfg(test)]
mod item_tests;
#[cfg(test)]
mod outage_tests;
mod piece;
mod settle;
#[cfg(test)]
mod tests;
