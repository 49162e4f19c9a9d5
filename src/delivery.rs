//! Drives one batch to a final state: every row written or dead-lettered. Retries with
//! backoff, waits out throttling, splits a rejected batch to find the bad rows so the good
//! ones still land, and never gives up on a row because the sink is merely unreachable.
//!
//! Throttling is the worker's business, not the batch's: a throttled write is reported to
//! the shared [`Backpressure`], which cuts the rate and pauses every write of the worker;
//! the batch is then sent again as it is. Every retry is paid for by the retry budget.

use std::sync::Arc;

use crate::backpressure::Backpressure;
use crate::control::backoff::Backoff;
use crate::control::limit::gate::LimitGate;
use crate::control::sink_limit::{Refused, Unit};
use crate::control::unexplained::UnexplainedFailures;
use crate::record::{DeadLetter, Position, Row};
use crate::shutdown::Shutdown;
use crate::sink::{ItemOutcome, Sink, WriteOutcome};
use crate::stats::Stats;
use crate::telemetry::metrics::{ITEMS, REQUESTS, WRITE_SECONDS};
use piece::{Piece, split};

/// After this many throttles in a row a batch may be larger than the sink ever takes at
/// once (its burst): split it rather than livelock on it.
const THROTTLES_BEFORE_SPLIT: u32 = 3;

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
}

impl Delivery {
    /// Built by [`crate::write_path::WritePath`], which shares `pressure` and `gate` with
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
        self.deliver_until(batch, Shutdown::never()).await
    }

    /// As [`Delivery::deliver`], but once `stop` fires a batch that is only waiting to be
    /// sent (a throttle pause, the retry budget, a backoff) is given up: no positions are
    /// returned, so nothing is acknowledged and the source delivers it again next run. A
    /// write already on the wire is waited for.
    pub async fn deliver_until(
        &self,
        batch: Batch,
        mut stop: Shutdown,
    ) -> Result<Vec<Position>, FatalSinkError> {
        let records = batch.positions.len();
        let abandoned = || {
            tracing::info!(
                records,
                "shutdown while waiting to retry: left unacknowledged, to be delivered again"
            );
            Ok(Vec::new())
        };
        let mut dead = batch.dead;
        let mut todo = vec![Piece {
            rows: batch.rows,
            attempts: 0,
            throttles: 0,
            retry: false,
            unanswered: false,
            cut: false,
            within_limit: false,
            outage: false,
            refused_items: false,
        }];
        let mut outage = 0u32;
        let mut unexplained = UnexplainedFailures::default();
        while let Some(mut piece) = todo.pop() {
            if piece.rows.is_empty() {
                continue;
            }
            if std::mem::take(&mut piece.cut) {
                // Paced by the limit gate instead.
            } else if std::mem::take(&mut piece.outage) {
                // Paced by the outage's backoff instead.
            } else if std::mem::take(&mut piece.refused_items) {
                if until(&mut stop, self.pressure.resend_turn(piece.rows.len()))
                    .await
                    .is_none()
                {
                    return abandoned();
                }
            } else if piece.retry {
                if until(&mut stop, self.pressure.retry_permit(piece.rows.len()))
                    .await
                    .is_none()
                {
                    return abandoned();
                }
            } else {
                self.pressure.first_attempt();
            }
            let Some(sent_at) = until(&mut stop, self.pressure.clear_to_send()).await else {
                return abandoned();
            };
            let resend = std::mem::take(&mut piece.unanswered);
            let within_limit = std::mem::take(&mut piece.within_limit);
            let (outcome, inflight) = self.write(&piece.rows, resend, within_limit).await;
            let Some(outcome) = outcome else {
                Stats::add(&self.stats.retries, 1);
                tracing::debug!(
                    rows = piece.rows.len(),
                    "write cut short: far more in flight than the limit"
                );
                piece.retry = true;
                piece.unanswered = true;
                piece.cut = true;
                todo.push(piece);
                continue;
            };
            match outcome {
                WriteOutcome::Written {
                    inserted,
                    duplicates,
                } => {
                    outage = 0;
                    unexplained.written();
                    self.pressure
                        .written(inserted + duplicates, row_bytes(&piece.rows));
                    metrics::counter!(ITEMS, "outcome" => "written").increment(inserted);
                    metrics::counter!(ITEMS, "outcome" => "duplicate").increment(duplicates);
                    Stats::add(&self.stats.written, inserted);
                    Stats::add(&self.stats.duplicates, duplicates);
                }
                WriteOutcome::Upserted {
                    written,
                    deleted,
                    stale,
                    superseded,
                } => {
                    outage = 0;
                    unexplained.written();
                    self.pressure
                        .written(piece.rows.len() as u64, row_bytes(&piece.rows));
                    metrics::counter!(ITEMS, "outcome" => "written").increment(written);
                    metrics::counter!(ITEMS, "outcome" => "deleted").increment(deleted);
                    metrics::counter!(ITEMS, "outcome" => "stale").increment(stale);
                    metrics::counter!(ITEMS, "outcome" => "superseded").increment(superseded);
                    Stats::add(&self.stats.written, written);
                    Stats::add(&self.stats.deleted, deleted);
                    Stats::add(&self.stats.stale, stale);
                    Stats::add(&self.stats.superseded, superseded);
                }
                WriteOutcome::Throttled {
                    retry_after,
                    unit,
                    reason,
                } => {
                    Stats::add(&self.stats.throttled, 1);
                    Stats::add(&self.stats.retries, 1);
                    metrics::counter!(ITEMS, "outcome" => "throttled")
                        .increment(piece.rows.len() as u64);
                    piece.retry = true;
                    tracing::debug!(
                        rows = piece.rows.len(),
                        ?retry_after,
                        "sink throttled: {reason}"
                    );
                    if retry_after.is_none() && self.gate.explains(inflight) {
                        // More in flight than the sink took lately: the concurrency limit
                        // answers it (as Vector's ARC does), not a worker-wide pause nor a
                        // rate learned from it. Sent again under the limit.
                        piece.within_limit = true;
                        todo.push(piece);
                        continue;
                    }
                    // The worker-wide pause this sets is waited out before the next write.
                    piece.outage = self.pressure.throttled(Refused {
                        sent_at,
                        retry_after,
                        hint: unit,
                        emptied: false,
                        records: piece.rows.len() as u64,
                        bytes: row_bytes(&piece.rows),
                    });
                    if !piece.outage {
                        piece.throttles += 1;
                    }
                    // Smaller requests help a sink that counts records or bytes (a batch
                    // beyond its burst never fits), not one that counts requests.
                    if piece.throttles >= THROTTLES_BEFORE_SPLIT
                        && piece.rows.len() > 1
                        && self.pressure.binding() != Some(Unit::Requests)
                    {
                        todo.extend(split(piece));
                    } else {
                        todo.push(piece);
                    }
                }
                WriteOutcome::Unavailable(reason) => {
                    outage += 1;
                    self.pressure.unavailable();
                    Stats::add(&self.stats.retries, 1);
                    let wait = self.pressure.outage_wait(outage);
                    tracing::warn!(?wait, "sink unavailable, retrying: {reason}");
                    if until(&mut stop, tokio::time::sleep(wait)).await.is_none() {
                        return abandoned();
                    }
                    piece.retry = true;
                    piece.unanswered = true;
                    todo.push(piece);
                }
                WriteOutcome::Transient(reason) => {
                    piece.attempts += 1;
                    if piece.attempts < self.max_attempts {
                        Stats::add(&self.stats.retries, 1);
                        let wait = self.backoff.delay(piece.attempts, &mut rand::rng());
                        tracing::warn!(
                            attempt = piece.attempts,
                            ?wait,
                            "transient sink error: {reason}"
                        );
                        if until(&mut stop, tokio::time::sleep(wait)).await.is_none() {
                            return abandoned();
                        }
                        piece.retry = true;
                        todo.push(piece);
                    } else if piece.rows.len() > 1 {
                        // Give each half one more try: the failure may be one row's doing.
                        let halves = split(Piece {
                            attempts: self.max_attempts - 1,
                            retry: true,
                            ..piece
                        });
                        todo.extend(halves);
                    } else {
                        let attempts = piece.attempts;
                        dead.extend(piece.rows.iter().map(|r| {
                            DeadLetter::from_row(
                                r,
                                format!("gave up after {attempts} attempts: {reason}"),
                                attempts,
                            )
                        }));
                    }
                }
                WriteOutcome::Rejected {
                    rows: Some(bad),
                    reason,
                } => {
                    let attempts = piece.attempts + 1;
                    let mut keep = Vec::with_capacity(piece.rows.len());
                    for (i, row) in piece.rows.into_iter().enumerate() {
                        if bad.contains(&i) {
                            dead.push(DeadLetter::from_row(&row, reason.clone(), attempts));
                        } else {
                            keep.push(row);
                        }
                    }
                    // The sink answered for good: sending the rest is a new request.
                    todo.push(Piece {
                        rows: keep,
                        retry: false,
                        ..piece
                    });
                }
                WriteOutcome::Rejected { rows: None, reason } => {
                    if piece.rows.len() == 1 {
                        dead.push(DeadLetter::from_row(
                            &piece.rows[0],
                            reason,
                            piece.attempts + 1,
                        ));
                    } else {
                        todo.extend(split(Piece {
                            retry: false,
                            ..piece
                        }));
                    }
                }
                WriteOutcome::Unexplained(reason) => {
                    if piece.rows.len() == 1 {
                        unexplained.failed_alone(DeadLetter::from_row(
                            &piece.rows[0],
                            reason,
                            piece.attempts + 1,
                        ));
                    } else {
                        unexplained.failed();
                        todo.extend(split(Piece {
                            retry: false,
                            ..piece
                        }));
                    }
                }
                WriteOutcome::Items {
                    items,
                    retry_after,
                    unit,
                } => {
                    if items.len() != piece.rows.len() {
                        return Err(FatalSinkError(format!(
                            "the sink answered {} items for {} records: which were written cannot be told",
                            items.len(),
                            piece.rows.len()
                        )));
                    }
                    let sent = piece.rows.len();
                    let attempts = piece.attempts + 1;
                    let mut taken = Vec::new();
                    let (mut inserted, mut duplicates) = (0, 0);
                    let (mut throttled, mut failed) = (Vec::new(), Vec::new());
                    let (mut throttle_reason, mut fail_reason) = (None, None);
                    for (row, item) in piece.rows.into_iter().zip(items) {
                        metrics::counter!(ITEMS, "outcome" => item.label()).increment(1);
                        match item {
                            ItemOutcome::Written => {
                                inserted += 1;
                                taken.push(row);
                            }
                            ItemOutcome::Duplicate => {
                                duplicates += 1;
                                taken.push(row);
                            }
                            ItemOutcome::Throttled(reason) => {
                                throttle_reason.get_or_insert(reason);
                                throttled.push(row);
                            }
                            ItemOutcome::Failed(reason) => {
                                fail_reason.get_or_insert(reason);
                                failed.push(row);
                            }
                            ItemOutcome::Rejected(reason) => {
                                dead.push(DeadLetter::from_row(&row, reason, attempts));
                            }
                        }
                    }
                    if !taken.is_empty() {
                        outage = 0;
                        unexplained.written();
                        self.pressure
                            .written(inserted + duplicates, row_bytes(&taken));
                        Stats::add(&self.stats.written, inserted);
                        Stats::add(&self.stats.duplicates, duplicates);
                    }
                    if !throttled.is_empty() {
                        Stats::add(&self.stats.throttled, 1);
                        Stats::add(&self.stats.throttled_records, throttled.len() as u64);
                        Stats::add(&self.stats.retries, 1);
                        let share = throttled.len() as f64 / sent as f64;
                        tracing::debug!(
                            refused = throttled.len(),
                            sent,
                            "sink refused part of the batch for now: {}",
                            throttle_reason.unwrap_or_default()
                        );
                        // Only the refused rows go again; the rest are settled. A sink that
                        // took part of the batch takes batches of this size: no split.
                        let outage = self.pressure.throttled_share(
                            Refused {
                                sent_at,
                                retry_after,
                                hint: unit,
                                // Items refused for room: the sink had none left.
                                emptied: true,
                                records: throttled.len() as u64,
                                bytes: row_bytes(&throttled),
                            },
                            share,
                        );
                        todo.push(Piece {
                            rows: throttled,
                            attempts: piece.attempts,
                            throttles: piece.throttles + u32::from(!outage),
                            retry: true,
                            unanswered: false,
                            cut: false,
                            within_limit: false,
                            outage,
                            refused_items: !outage,
                        });
                    }
                    if !failed.is_empty() {
                        let reason = fail_reason.unwrap_or_default();
                        if attempts < self.max_attempts {
                            Stats::add(&self.stats.retries, 1);
                            let wait = self.backoff.delay(attempts, &mut rand::rng());
                            tracing::warn!(
                                records = failed.len(),
                                attempt = attempts,
                                ?wait,
                                "sink failed some records, retrying them: {reason}"
                            );
                            if until(&mut stop, tokio::time::sleep(wait)).await.is_none() {
                                return abandoned();
                            }
                            todo.push(Piece {
                                rows: failed,
                                attempts,
                                throttles: 0,
                                retry: true,
                                unanswered: false,
                                cut: false,
                                within_limit: false,
                                outage: false,
                                refused_items: false,
                            });
                        } else {
                            dead.extend(failed.iter().map(|r| {
                                DeadLetter::from_row(
                                    r,
                                    format!("gave up after {attempts} attempts: {reason}"),
                                    attempts,
                                )
                            }));
                        }
                    }
                }
                WriteOutcome::Fatal(reason) => return Err(FatalSinkError(reason)),
            }
        }
        dead.extend(unexplained.verdict().map_err(FatalSinkError)?);
        self.store_dead_letters(&dead).await?;
        Ok(batch.positions)
    }
}

/// Waits for `wait` unless `stop` fires first (a wait that is over at once always wins);
/// `None` when stopped.
async fn until<T>(stop: &mut Shutdown, wait: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        done = wait => Some(done),
        _ = stop.requested() => None,
    }
}

/// What a request carries of its rows, as the sink's byte limit counts it (near enough:
/// the body adds an envelope per row).
pub fn row_bytes(rows: &[Row]) -> u64 {
    rows.iter()
        .map(|r| (r.key.len() + r.payload.len()) as u64)
        .sum()
}

mod dead_letter_store;
#[cfg(test)]
mod item_tests;
mod piece;
#[cfg(test)]
mod tests;
