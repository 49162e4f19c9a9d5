//! Drives one batch to a final state: every row written or dead-lettered. Retries with
//! backoff, waits out throttling, splits a rejected batch to find the bad rows so the good
//! ones still land, and never gives up on a row because the sink is merely unreachable.
//!
//! Throttling is the worker's business, not the batch's: a throttled write is reported to
//! the shared [`Backpressure`], which cuts the rate and pauses every write of the worker;
//! the batch is then sent again as it is. Every retry is paid for by the retry budget.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use crate::backpressure::Backpressure;
use crate::config::{RateConfig, RetryConfig, ThrottleConfig};
use crate::control::backoff::Backoff;
use crate::control::limit::fixed::FixedLimit;
use crate::control::limit::gate::LimitGate;
use crate::control::sink_limit::{Refused, Unit};
use crate::control::unexplained::UnexplainedFailures;
use crate::record::{DeadLetter, Position, Row};
use crate::shutdown::Shutdown;
use crate::sink::{ItemOutcome, Sink, WriteOutcome};
use crate::stats::Stats;
use crate::telemetry::metrics::{ITEMS, REQUESTS, WRITE_SECONDS};

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

/// A piece of a batch still to be written, with the attempts it has used.
struct Piece {
    rows: Vec<Row>,
    attempts: u32,
    throttles: u32,
    /// These rows were sent before and failed for a reason that may pass: sending them
    /// again is a retry (budgeted), not a new request.
    retry: bool,
    /// The last write of these rows got no answer (timed out, cut, reset): the sink may
    /// have stored them. Sent again only under the concurrency limit, and counted.
    unanswered: bool,
    /// The sink pushed these rows back at more writes in flight than it took lately: they
    /// go again once the writes in flight are under the (cut) limit.
    within_limit: bool,
    /// The last write was cut short by the limit gate: the gate paces the resend, so it
    /// does not wait for the retry budget (it would, for as long as the sink's timeout).
    cut: bool,
    /// The sink answered that it is down (503s without Retry-After, one after another):
    /// the outage's backoff paces the resend. The retry budget would not: an outage spends
    /// it, and once the sink is back the batches would trickle out at its floor for many
    /// seconds. (A write with no answer — refused, reset, timed out — stays on the budget:
    /// a timeout is as often an overloaded sink, which resends must not pile onto.)
    outage: bool,
}

impl Delivery {
    /// A delivery with the default `[throttle]` and `[rate]` settings; the pipeline sets the
    /// ceiling to its cadence's rate. The worker shares one configured [`Backpressure`]
    /// among its deliveries through [`Delivery::with_backpressure`].
    pub fn new(sink: Arc<dyn Sink>, retry: &RetryConfig, stats: Arc<Stats>) -> Self {
        let pressure = Backpressure::new(
            &ThrottleConfig::default(),
            retry,
            &RateConfig::default(),
            stats.clone(),
        );
        Delivery {
            sink,
            backoff: Backoff::new(retry.min_delay, retry.max_delay, retry.factor),
            max_attempts: retry.max_attempts,
            pressure: Arc::new(pressure),
            gate: Arc::new(LimitGate::new(Box::new(FixedLimit(usize::MAX)))),
            stats,
        }
    }

    pub fn with_backpressure(self, pressure: Arc<Backpressure>) -> Self {
        Delivery { pressure, ..self }
    }

    /// Reports every write to `gate`, whose limit the pipeline then admits batches by.
    pub fn with_limit(self, gate: Arc<LimitGate>) -> Self {
        Delivery { gate, ..self }
    }

    pub fn gate(&self) -> Arc<LimitGate> {
        self.gate.clone()
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

    pub fn backpressure(&self) -> Arc<Backpressure> {
        self.pressure.clone()
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

    /// Dead letters must be stored before the batch is acknowledged; their table takes
    /// anything, so only an outage or a fatal error can stand in the way. A store that keeps
    /// failing is an outage: retried without limit, the worker not ready meanwhile.
    async fn store_dead_letters(&self, dead: &[DeadLetter]) -> Result<(), FatalSinkError> {
        if dead.is_empty() {
            return Ok(());
        }
        let mut attempt = 0;
        let outcome = loop {
            match self.sink.dead_letter(dead).await {
                WriteOutcome::Written { .. } | WriteOutcome::Upserted { .. } => {
                    Stats::add(&self.stats.dead_lettered, dead.len() as u64);
                    break Ok(());
                }
                WriteOutcome::Fatal(reason)
                | WriteOutcome::Unexplained(reason)
                | WriteOutcome::Rejected { reason, .. } => {
                    break Err(FatalSinkError(format!(
                        "cannot store dead letters: {reason}"
                    )));
                }
                WriteOutcome::Items { .. } => {
                    break Err(FatalSinkError(
                        "cannot store dead letters: the store took only some of them".into(),
                    ));
                }
                WriteOutcome::Throttled { reason, .. }
                | WriteOutcome::Unavailable(reason)
                | WriteOutcome::Transient(reason) => {
                    if attempt == 0 {
                        self.stats.dead_letter_outages.fetch_add(1, Relaxed);
                    }
                    attempt += 1;
                    Stats::add(&self.stats.retries, 1);
                    let wait = self.backoff.delay(attempt, &mut rand::rng());
                    tracing::warn!(
                        letters = dead.len(),
                        ?wait,
                        "storing dead letters failed, retrying; their records stay unacknowledged: {reason}"
                    );
                    tokio::time::sleep(wait).await;
                }
            }
        };
        if attempt > 0 {
            self.stats.dead_letter_outages.fetch_sub(1, Relaxed);
        }
        outcome
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

/// Halves a piece; the halves keep its attempt count but start a new throttle streak.
fn split(piece: Piece) -> [Piece; 2] {
    let mut first = piece.rows;
    let second = first.split_off(first.len() / 2);
    // Pieces are popped from the end: push the second half first to keep the order.
    [
        Piece {
            rows: second,
            attempts: piece.attempts,
            throttles: 0,
            retry: piece.retry,
            unanswered: piece.unanswered,
            cut: false,
            within_limit: false,
            outage: false,
        },
        Piece {
            rows: first,
            attempts: piece.attempts,
            throttles: 0,
            retry: piece.retry,
            unanswered: piece.unanswered,
            cut: false,
            within_limit: false,
            outage: false,
        },
    ]
}

/// What a request carries of its rows, as the sink's byte limit counts it (near enough:
/// the body adds an envelope per row).
pub fn row_bytes(rows: &[Row]) -> u64 {
    rows.iter()
        .map(|r| (r.key.len() + r.payload.len()) as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use std::sync::Mutex;
    use std::sync::atomic::Ordering::Relaxed;

    /// A test sink's dead-letter store: (key, reason) of each letter, all taken.
    fn keep_dead_letters(
        dead: &Mutex<Vec<(String, String)>>,
        letters: &[DeadLetter],
    ) -> WriteOutcome {
        dead.lock().unwrap().extend(
            letters
                .iter()
                .map(|l| (l.key.clone().unwrap_or_default(), l.reason.clone())),
        );
        WriteOutcome::Written {
            inserted: letters.len() as u64,
            duplicates: 0,
        }
    }

    /// A sink with rules: rows whose payload contains "bad" are rejected (the whole batch
    /// fails, as a database constraint would), rows whose payload contains "odd" fail
    /// unexplained (as a trigger raising an unknown SQLSTATE would); the first `throttles`
    /// writes are throttled; writes of more than `burst` rows are throttled forever; the
    /// first `transients` writes fail transiently; when `broken`, every write fails
    /// unexplained (as a schema problem no rule knows would).
    #[derive(Default)]
    struct RuleSink {
        throttles: Mutex<u32>,
        transients: Mutex<u32>,
        burst: Option<usize>,
        broken: bool,
        /// The Retry-After of the first `throttles` answers.
        throttle_wait: Option<std::time::Duration>,
        written: Mutex<Vec<String>>,
        dead: Mutex<Vec<(String, String)>>,
        calls: Mutex<u32>,
        /// The dead-letter store refuses this many times (a full disk).
        store_failures: Mutex<u32>,
    }

    #[async_trait]
    impl Sink for RuleSink {
        async fn write(&self, rows: &[Row]) -> WriteOutcome {
            *self.calls.lock().unwrap() += 1;
            if self.burst.is_some_and(|b| rows.len() > b) {
                return WriteOutcome::Throttled {
                    retry_after: Some(std::time::Duration::from_millis(50)),
                    unit: None,
                    reason: "burst".into(),
                };
            }
            let mut t = self.throttles.lock().unwrap();
            if *t > 0 {
                *t -= 1;
                return WriteOutcome::Throttled {
                    retry_after: self.throttle_wait,
                    unit: None,
                    reason: "429".into(),
                };
            }
            let mut tr = self.transients.lock().unwrap();
            if *tr > 0 {
                *tr -= 1;
                return WriteOutcome::Transient("deadlock".into());
            }
            if self.broken {
                return WriteOutcome::Unexplained("SQLSTATE XX000: broken".into());
            }
            if rows.iter().any(|r| r.payload.contains("odd")) {
                return WriteOutcome::Unexplained("SQLSTATE ZZ001: odd row".into());
            }
            if rows.iter().any(|r| r.payload.contains("bad")) {
                return WriteOutcome::Rejected {
                    rows: None,
                    reason: "check constraint".into(),
                };
            }
            self.written
                .lock()
                .unwrap()
                .extend(rows.iter().map(|r| r.key.clone()));
            WriteOutcome::Written {
                inserted: rows.len() as u64,
                duplicates: 0,
            }
        }
        async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
            let mut failures = self.store_failures.lock().unwrap();
            if *failures > 0 {
                *failures -= 1;
                return WriteOutcome::Unavailable("No space left on device".into());
            }
            keep_dead_letters(&self.dead, letters)
        }
    }

    fn rows(n: usize, bad: &[usize]) -> Vec<Row> {
        rows_marked(n, bad, "bad")
    }

    /// `n` rows; those at `marked` carry `mark` in their payload.
    fn rows_marked(n: usize, marked: &[usize], mark: &str) -> Vec<Row> {
        (0..n)
            .map(|i| Row {
                key: format!("k{i}"),
                payload: if marked.contains(&i) {
                    format!("{{\"{mark}\":1}}")
                } else {
                    "{}".into()
                },
                origin: format!("t:{i}"),
                ..Default::default()
            })
            .collect()
    }

    fn delivery(sink: Arc<RuleSink>, max_attempts: u32) -> (Delivery, Arc<Stats>) {
        let stats = Arc::new(Stats::default());
        let retry = RetryConfig {
            max_attempts,
            ..RetryConfig::default()
        };
        (Delivery::new(sink, &retry, stats.clone()), stats)
    }

    #[tokio::test(start_paused = true)]
    async fn bisection_isolates_bad_rows_and_writes_the_rest() {
        let sink = Arc::new(RuleSink::default());
        let (d, stats) = delivery(sink.clone(), 8);
        let positions = vec![Position {
            lane: 0,
            start: 0,
            end: 1,
        }];
        let batch = Batch {
            rows: rows(100, &[7, 42, 43, 99]),
            dead: vec![],
            positions: positions.clone(),
        };
        assert_eq!(d.deliver(batch).await.unwrap(), positions);
        assert_eq!(sink.written.lock().unwrap().len(), 96);
        let dead: Vec<String> = sink
            .dead
            .lock()
            .unwrap()
            .iter()
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(dead, ["k7", "k42", "k43", "k99"]);
        assert_eq!(stats.dead_lettered.load(Relaxed), 4);
        let calls = *sink.calls.lock().unwrap();
        assert!(calls < 60, "bisection, not row by row: {calls} writes");
    }

    #[tokio::test(start_paused = true)]
    async fn throttled_batches_wait_and_retry_as_they_are() {
        let sink = Arc::new(RuleSink {
            throttles: Mutex::new(2),
            ..Default::default()
        });
        let (d, stats) = delivery(sink.clone(), 8);
        d.deliver(Batch {
            rows: rows(10, &[]),
            ..Default::default()
        })
        .await
        .unwrap();
        assert_eq!(sink.written.lock().unwrap().len(), 10);
        assert_eq!(
            *sink.calls.lock().unwrap(),
            3,
            "two throttles then one write of the whole batch"
        );
        assert_eq!(stats.throttled.load(Relaxed), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_larger_than_the_burst_is_split_instead_of_livelocking() {
        let sink = Arc::new(RuleSink {
            burst: Some(16),
            ..Default::default()
        });
        let (d, _) = delivery(sink.clone(), 8);
        d.deliver(Batch {
            rows: rows(100, &[]),
            ..Default::default()
        })
        .await
        .unwrap();
        let mut written = sink.written.lock().unwrap().clone();
        written.sort();
        written.dedup();
        assert_eq!(written.len(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_retry_then_dead_letter_after_max_attempts() {
        let sink = Arc::new(RuleSink {
            transients: Mutex::new(2),
            ..Default::default()
        });
        let (d, stats) = delivery(sink.clone(), 8);
        d.deliver(Batch {
            rows: rows(5, &[]),
            ..Default::default()
        })
        .await
        .unwrap();
        assert_eq!(sink.written.lock().unwrap().len(), 5);
        assert_eq!(stats.retries.load(Relaxed), 2);

        let sink = Arc::new(RuleSink {
            transients: Mutex::new(1000),
            ..Default::default()
        });
        let (d, _) = delivery(sink.clone(), 3);
        d.deliver(Batch {
            rows: rows(2, &[]),
            ..Default::default()
        })
        .await
        .unwrap();
        let dead = sink.dead.lock().unwrap().clone();
        assert_eq!(dead.len(), 2);
        assert!(
            dead[0].1.contains("gave up after 3 attempts: deadlock"),
            "{dead:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn unexplained_errors_of_some_rows_are_isolated_and_dead_lettered() {
        let sink = Arc::new(RuleSink::default());
        let (d, stats) = delivery(sink.clone(), 8);
        d.deliver(Batch {
            rows: rows_marked(100, &[0, 31, 99], "odd"),
            ..Default::default()
        })
        .await
        .unwrap();
        assert_eq!(sink.written.lock().unwrap().len(), 97);
        let dead = sink.dead.lock().unwrap().clone();
        let keys: Vec<&str> = dead.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["k0", "k31", "k99"]);
        assert!(
            dead.iter().all(|(_, r)| r == "SQLSTATE ZZ001: odd row"),
            "{dead:?}"
        );
        assert_eq!(stats.dead_lettered.load(Relaxed), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unexplained_error_that_hits_every_row_stops_without_dead_letters() {
        let sink = Arc::new(RuleSink {
            broken: true,
            ..Default::default()
        });
        let (d, _) = delivery(sink.clone(), 8);
        let err = d
            .deliver(Batch {
                rows: rows(64, &[]),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(err.0.contains("SQLSTATE XX000: broken"), "{err}");
        assert!(err.0.contains("not a row's fault"), "{err}");
        assert!(sink.dead.lock().unwrap().is_empty());
        assert!(sink.written.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn every_row_failing_unexplained_is_no_row_error_even_with_one_row_or_all_odd() {
        for batch in [
            rows_marked(1, &[0], "odd"),
            rows_marked(5, &[0, 1, 2, 3, 4], "odd"),
        ] {
            let sink = Arc::new(RuleSink::default());
            let (d, _) = delivery(sink.clone(), 8);
            let result = d
                .deliver(Batch {
                    rows: batch,
                    ..Default::default()
                })
                .await;
            assert!(result.is_err(), "no write succeeded, so no row is to blame");
            assert!(sink.dead.lock().unwrap().is_empty());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_during_a_throttle_pause_leaves_the_batch_unacknowledged_at_once() {
        let sink = Arc::new(RuleSink {
            throttles: Mutex::new(u32::MAX),
            throttle_wait: Some(std::time::Duration::from_secs(30)),
            ..Default::default()
        });
        let (d, _) = delivery(sink.clone(), 8);
        let d = Arc::new(d);
        let (stop, stopped) = crate::shutdown::channel();
        let task = tokio::spawn({
            let d = d.clone();
            async move {
                d.deliver_until(
                    Batch {
                        rows: rows(10, &[]),
                        dead: vec![],
                        positions: vec![Position {
                            lane: 0,
                            start: 0,
                            end: 10,
                        }],
                    },
                    stopped,
                )
                .await
            }
        });
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        assert_eq!(*sink.calls.lock().unwrap(), 1, "sent once, then paused");
        let asked = tokio::time::Instant::now();
        stop.trigger();
        let acked = task.await.unwrap().unwrap();
        assert_eq!(asked.elapsed(), std::time::Duration::ZERO, "no waiting out");
        assert!(acked.is_empty(), "nothing acknowledged: {acked:?}");
        assert_eq!(*sink.calls.lock().unwrap(), 1, "not sent again");
        assert!(sink.written.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_that_need_not_wait_is_still_written_after_shutdown() {
        let sink = Arc::new(RuleSink::default());
        let (d, _) = delivery(sink.clone(), 8);
        let (stop, stopped) = crate::shutdown::channel();
        stop.trigger();
        let positions = vec![Position {
            lane: 0,
            start: 0,
            end: 3,
        }];
        let acked = d
            .deliver_until(
                Batch {
                    rows: rows(3, &[]),
                    dead: vec![],
                    positions: positions.clone(),
                },
                stopped,
            )
            .await
            .unwrap();
        assert_eq!(acked, positions);
        assert_eq!(sink.written.lock().unwrap().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_during_an_outage_backoff_gives_the_batch_up() {
        struct Down;
        #[async_trait]
        impl Sink for Down {
            async fn write(&self, _: &[Row]) -> WriteOutcome {
                WriteOutcome::Unavailable("connection refused".into())
            }
            async fn dead_letter(&self, _: &[DeadLetter]) -> WriteOutcome {
                WriteOutcome::Unavailable("connection refused".into())
            }
        }
        let stats = Arc::new(Stats::default());
        let d = Delivery::new(Arc::new(Down), &RetryConfig::default(), stats);
        let (stop, stopped) = crate::shutdown::channel();
        let started = tokio::time::Instant::now();
        let task = tokio::spawn(async move {
            d.deliver_until(
                Batch {
                    rows: rows(2, &[]),
                    dead: vec![],
                    positions: vec![Position {
                        lane: 0,
                        start: 0,
                        end: 2,
                    }],
                },
                stopped,
            )
            .await
        });
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        stop.trigger();
        assert!(task.await.unwrap().unwrap().is_empty());
        assert_eq!(started.elapsed(), std::time::Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_dead_letter_store_holds_the_batch_until_it_takes_the_letters() {
        let sink = Arc::new(RuleSink {
            store_failures: Mutex::new(1000),
            ..Default::default()
        });
        let (d, stats) = delivery(sink.clone(), 8);
        let d = Arc::new(d);
        let positions = vec![Position {
            lane: 0,
            start: 0,
            end: 1,
        }];
        let batch = Batch {
            rows: rows(4, &[2]),
            dead: vec![],
            positions: positions.clone(),
        };
        let task = tokio::spawn({
            let d = d.clone();
            async move { d.deliver(batch).await }
        });
        // An hour of a full disk: never settled, never counted, the worker not ready.
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        assert!(!task.is_finished());
        assert_eq!(stats.dead_lettered.load(Relaxed), 0);
        assert_eq!(stats.dead_letter_outages.load(Relaxed), 1);
        assert!(
            *sink.store_failures.lock().unwrap() < 900,
            "retried all along"
        );
        *sink.store_failures.lock().unwrap() = 0;
        assert_eq!(task.await.unwrap().unwrap(), positions);
        assert_eq!(stats.dead_lettered.load(Relaxed), 1);
        assert_eq!(stats.dead_letter_outages.load(Relaxed), 0);
        assert_eq!(sink.dead.lock().unwrap().len(), 1);
    }

    /// Answers record by record, as a bulk API does: takes at most `room` records per write
    /// and refuses the rest for now; rejects rows marked "bad" for good; fails rows marked
    /// "flaky" the first time and rows marked "down" every time.
    #[derive(Default)]
    struct ItemSink {
        room: usize,
        sent: Mutex<Vec<String>>,
        refused: Mutex<Vec<String>>,
        written: Mutex<Vec<String>>,
        flaked: Mutex<Vec<String>>,
        dead: Mutex<Vec<(String, String)>>,
    }

    #[async_trait]
    impl Sink for ItemSink {
        async fn write(&self, rows: &[Row]) -> WriteOutcome {
            let mut room = self.room;
            let items = rows
                .iter()
                .map(|r| {
                    self.sent.lock().unwrap().push(r.key.clone());
                    if r.payload.contains("bad") {
                        return ItemOutcome::Rejected("mapper_parsing_exception: bad".into());
                    }
                    if r.payload.contains("down") {
                        return ItemOutcome::Failed("HTTP 503 for this item".into());
                    }
                    let mut flaked = self.flaked.lock().unwrap();
                    if r.payload.contains("flaky") && !flaked.contains(&r.key) {
                        flaked.push(r.key.clone());
                        return ItemOutcome::Failed("HTTP 500 for this item".into());
                    }
                    if room == 0 {
                        self.refused.lock().unwrap().push(r.key.clone());
                        return ItemOutcome::Throttled("es_rejected_execution_exception".into());
                    }
                    room -= 1;
                    let mut written = self.written.lock().unwrap();
                    if written.contains(&r.key) {
                        ItemOutcome::Duplicate
                    } else {
                        written.push(r.key.clone());
                        ItemOutcome::Written
                    }
                })
                .collect();
            WriteOutcome::from_items(items, None, None)
        }
        async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
            keep_dead_letters(&self.dead, letters)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_items_refused_go_again_and_the_batch_settles_at_item_granularity() {
        let sink = Arc::new(ItemSink {
            room: 30,
            ..Default::default()
        });
        let stats = Arc::new(Stats::default());
        let retry = RetryConfig {
            max_attempts: 3,
            ..RetryConfig::default()
        };
        let d = Delivery::new(sink.clone(), &retry, stats.clone());
        let mut rows = rows_marked(100, &[3, 50], "bad");
        rows[10].payload = r#"{"flaky":1}"#.into();
        rows[77].payload = r#"{"down":1}"#.into();
        let positions = vec![Position {
            lane: 0,
            start: 0,
            end: 100,
        }];
        let acked = d
            .deliver(Batch {
                rows,
                dead: vec![],
                positions: positions.clone(),
            })
            .await
            .unwrap();
        assert_eq!(acked, positions);

        let mut written = sink.written.lock().unwrap().clone();
        written.sort();
        let mut expected: Vec<String> = (0..100)
            .filter(|i| ![3, 50, 77].contains(i))
            .map(|i| format!("k{i}"))
            .collect();
        expected.sort();
        assert_eq!(written, expected, "every good record once");
        let dead = sink.dead.lock().unwrap().clone();
        let dead_keys: Vec<&str> = dead.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(dead_keys, ["k3", "k50", "k77"]);
        assert_eq!(dead[0].1, "mapper_parsing_exception: bad");
        assert_eq!(
            dead[2].1,
            "gave up after 3 attempts: HTTP 503 for this item"
        );

        // Nothing taken was sent again: every send beyond the first of each record answers
        // a refusal, a failure, or the record that never works.
        let sent = sink.sent.lock().unwrap().len();
        let refused = sink.refused.lock().unwrap().len();
        assert_eq!(
            sent,
            100 + refused + 1 + 2,
            "{sent} sent, {refused} refused"
        );
        assert!(refused >= 60, "three writes at most 30 each: {refused}");
        assert_eq!(stats.written.load(Relaxed), 97);
        assert_eq!(stats.duplicates.load(Relaxed), 0);
        assert_eq!(stats.dead_lettered.load(Relaxed), 3);
        assert_eq!(stats.throttled_records.load(Relaxed), refused as u64);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_that_does_not_match_the_batch_acknowledges_nothing() {
        struct Short;
        #[async_trait]
        impl Sink for Short {
            async fn write(&self, _: &[Row]) -> WriteOutcome {
                WriteOutcome::from_items(
                    vec![ItemOutcome::Written, ItemOutcome::Throttled("429".into())],
                    None,
                    None,
                )
            }
            async fn dead_letter(&self, _: &[DeadLetter]) -> WriteOutcome {
                unreachable!()
            }
        }
        let d = Delivery::new(
            Arc::new(Short),
            &RetryConfig::default(),
            Arc::new(Stats::default()),
        );
        let err = d
            .deliver(Batch {
                rows: rows(3, &[]),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(err.0.contains("2 items for 3 records"), "{err}");
    }
}
