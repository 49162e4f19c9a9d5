//! How each answer of the sink settles a piece of a batch: what is taken is counted, what
//! may pass goes again (paced as its failure asks), what is bad is dead-lettered, and a
//! batch the sink rejects whole is halved until the bad rows are found.

use std::time::Duration;

use super::blame::keep_canary;
use super::piece::{Pace, Piece, split};
use super::{Delivery, FatalSinkError, row_bytes};
use crate::control::sink_limit::{Refused, Unit};
use crate::control::unexplained::UnexplainedFailures;
use crate::record::{DeadLetter, Row};
use crate::sink::{ItemOutcome, WriteOutcome};
use crate::stats::{ITEMS, Settled, Stats};

/// After this many throttles in a row a batch may be larger than the sink ever takes at
/// once (its burst): split it rather than livelock on it.
const THROTTLES_BEFORE_SPLIT: u32 = 3;

/// A batch on its way to a final state.
pub(super) struct Settling {
    /// Pieces still to be written, the next at the end.
    pub(super) todo: Vec<Piece>,
    pub(super) dead: Vec<DeadLetter>,
    /// Answers in a row that the sink is down (or fails every request): the outage
    /// backoff's attempt.
    pub(super) outages: u32,
    pub(super) unexplained: UnexplainedFailures,
    /// A row of the batch the sink took: sent again to learn whether it takes writes now.
    pub(super) canary: Option<Row>,
}

impl Settling {
    pub(super) fn new(rows: Vec<Row>, dead: Vec<DeadLetter>) -> Self {
        Settling {
            todo: vec![Piece::new(rows, 0)],
            dead,
            outages: 0,
            unexplained: UnexplainedFailures::default(),
            canary: None,
        }
    }
}

/// The rows of a write the sink answered item by item, sorted by their outcome.
#[derive(Default)]
struct Sorted {
    taken: Vec<Row>,
    inserted: u64,
    duplicates: u64,
    throttled: Vec<Row>,
    throttle_reason: Option<String>,
    failed: Vec<Row>,
    fail_reason: Option<String>,
    unavailable: Vec<Row>,
    unavailable_reason: Option<String>,
}

impl Delivery {
    /// Settles what `outcome` says of `piece`, sent at `sent_at` with `inflight` writes in
    /// flight.
    pub(super) fn settle(
        &self,
        s: &mut Settling,
        mut piece: Piece,
        outcome: WriteOutcome,
        sent_at: Duration,
        inflight: usize,
    ) -> Result<(), FatalSinkError> {
        match outcome {
            WriteOutcome::Written {
                inserted,
                duplicates,
            } => {
                self.taken(s, &piece.rows, inserted + duplicates, sent_at);
                self.stats.settled(Settled::Written, inserted);
                self.stats.settled(Settled::Duplicate, duplicates);
            }
            WriteOutcome::SkippedBySink {
                inserted,
                duplicates,
                skipped,
            } => {
                self.taken(s, &piece.rows, inserted + duplicates + skipped, sent_at);
                self.stats.settled(Settled::Written, inserted);
                self.stats.settled(Settled::Duplicate, duplicates);
                self.stats.settled(Settled::SkippedBySink, skipped);
            }
            WriteOutcome::Upserted {
                written,
                deleted,
                stale,
                superseded,
                skipped,
            } => {
                self.taken(s, &piece.rows, piece.rows.len() as u64, sent_at);
                self.stats.settled(Settled::Written, written);
                self.stats.settled(Settled::Deleted, deleted);
                self.stats.settled(Settled::Stale, stale);
                self.stats.settled(Settled::Superseded, superseded);
                self.stats.settled(Settled::SkippedBySink, skipped);
            }
            WriteOutcome::Throttled {
                retry_after,
                unit,
                reason,
            } => {
                tracing::debug!(
                    rows = piece.rows.len(),
                    ?retry_after,
                    "sink throttled: {reason}"
                );
                self.throttled(s, piece, retry_after, unit, sent_at, inflight);
            }
            WriteOutcome::Unavailable(reason) => {
                s.outages += 1;
                self.pressure.unavailable();
                Stats::add(&self.stats.retries, 1);
                piece.backoff = self.pressure.outage_wait(s.outages);
                tracing::warn!(wait = ?piece.backoff, "sink unavailable, retrying: {reason}");
                piece.pace = Pace::Retry;
                piece.unanswered = true;
                s.todo.push(piece);
            }
            WriteOutcome::Transient(reason) => self.failed(s, piece, &reason),
            WriteOutcome::ServerError(reason) => self.server_error(s, piece, reason, sent_at),
            WriteOutcome::Unreadable(reason) => self.unreadable(s, piece, reason)?,
            WriteOutcome::Rejected {
                rows: Some(bad),
                reason,
            } => {
                let attempts = piece.attempts + 1;
                let mut keep = Vec::with_capacity(piece.rows.len());
                for (i, row) in piece.rows.into_iter().enumerate() {
                    if bad.contains(&i) {
                        s.dead
                            .push(DeadLetter::from_row(&row, reason.clone(), attempts));
                    } else {
                        keep.push(row);
                    }
                }
                // The sink answered for good: sending the rest is a new request.
                s.todo.push(Piece {
                    throttles: piece.throttles,
                    ..Piece::new(keep, piece.attempts)
                });
            }
            WriteOutcome::Rejected { rows: None, reason } => {
                if piece.rows.len() == 1 {
                    let attempts = piece.attempts + 1;
                    s.dead
                        .push(DeadLetter::from_row(&piece.rows[0], reason, attempts));
                } else {
                    piece.pace = Pace::First;
                    s.todo.extend(split(piece));
                }
            }
            WriteOutcome::Unexplained(reason) => {
                if piece.rows.len() == 1 {
                    let attempts = piece.attempts + 1;
                    let letter = DeadLetter::from_row(&piece.rows[0], reason, attempts);
                    s.unexplained.failed_alone(letter);
                } else {
                    s.unexplained.failed();
                    piece.pace = Pace::First;
                    s.todo.extend(split(piece));
                }
            }
            WriteOutcome::Items {
                items,
                retry_after,
                unit,
            } => {
                if items.len() != piece.rows.len() {
                    let reason = format!(
                        "the sink answered {} items for {} records: which were written cannot be told",
                        items.len(),
                        piece.rows.len()
                    );
                    return self.unreadable(s, piece, reason);
                }
                self.items(s, piece, items, retry_after, unit, sent_at);
            }
            WriteOutcome::Fatal(reason) => return Err(FatalSinkError(reason)),
        }
        Ok(())
    }

    /// The gate cut the write short: its fate is unknown, so it goes again under the limit.
    pub(super) fn cut(&self, s: &mut Settling, mut piece: Piece) {
        Stats::add(&self.stats.retries, 1);
        tracing::debug!(
            rows = piece.rows.len(),
            "write cut short: far more in flight than the limit"
        );
        piece.pace = Pace::Limit;
        piece.unanswered = true;
        s.todo.push(piece);
    }

    /// The sink took `rows` (`records` of them counted), sent at `sent_at`: an outage, if
    /// any, is over.
    fn taken(&self, s: &mut Settling, rows: &[Row], records: u64, sent_at: Duration) {
        s.outages = 0;
        s.unexplained.written();
        self.took_sent_at(sent_at);
        keep_canary(s, rows);
        self.pressure.written(records, row_bytes(rows), sent_at);
    }

    /// The answer to `piece` cannot be matched to its rows: nothing of it is taken. Sent
    /// again after the retry backoff (the sink may have stored some: a resend is safe by
    /// their keys); after `retry.max_attempts` such answers in a row, the worker stops
    /// rather than guess which were written.
    fn unreadable(
        &self,
        s: &mut Settling,
        mut piece: Piece,
        reason: String,
    ) -> Result<(), FatalSinkError> {
        piece.unreadable += 1;
        if piece.unreadable >= self.max_attempts {
            return Err(FatalSinkError(format!(
                "{reason} ({} answers in a row could not be matched to the records sent: nothing of them was acknowledged)",
                piece.unreadable
            )));
        }
        Stats::add(&self.stats.retries, 1);
        piece.backoff = self.backoff.delay(piece.unreadable, &mut rand::rng());
        tracing::warn!(
            records = piece.rows.len(),
            attempt = piece.unreadable,
            wait = ?piece.backoff,
            "the sink's answer cannot be matched to the records, sending them again: {reason}"
        );
        piece.pace = Pace::Retry;
        piece.unanswered = true;
        s.todo.push(piece);
        Ok(())
    }

    fn throttled(
        &self,
        s: &mut Settling,
        mut piece: Piece,
        retry_after: Option<Duration>,
        unit: Option<Unit>,
        sent_at: Duration,
        inflight: usize,
    ) {
        Stats::add(&self.stats.throttled, 1);
        Stats::add(&self.stats.retries, 1);
        metrics::counter!(ITEMS, "outcome" => "throttled").increment(piece.rows.len() as u64);
        piece.pace = Pace::Retry;
        if retry_after.is_none() && self.gate.explains(inflight) {
            // More in flight than the sink took lately: the concurrency limit answers it
            // (as Vector's ARC does), not a worker-wide pause nor a rate learned from it.
            // Sent again under the limit.
            piece.within_limit = true;
            s.todo.push(piece);
            return;
        }
        // The worker-wide pause this sets is waited out before the next write.
        let outage = self.pressure.throttled(Refused {
            sent_at,
            retry_after,
            hint: unit,
            emptied: false,
            records: piece.rows.len() as u64,
            bytes: row_bytes(&piece.rows),
        });
        if outage {
            piece.pace = Pace::Outage;
        } else {
            piece.throttles += 1;
            piece.room_told = retry_after.is_some();
        }
        // Smaller requests help a sink that counts records or bytes (a batch beyond its
        // burst never fits), not one that counts requests.
        if piece.throttles >= THROTTLES_BEFORE_SPLIT
            && piece.rows.len() > 1
            && self.pressure.binding() != Some(Unit::Requests)
        {
            s.todo.extend(split(piece));
        } else {
            s.todo.push(piece);
        }
    }

    /// A failure that may pass: tried again after the retry backoff until
    /// `retry.max_attempts`, then halved once more (the failure may be one row's doing),
    /// and a row failing alone that often is dead-lettered with `reason`.
    fn failed(&self, s: &mut Settling, mut piece: Piece, reason: &str) {
        piece.attempts += 1;
        if piece.attempts < self.max_attempts {
            Stats::add(&self.stats.retries, 1);
            piece.backoff = self.backoff.delay(piece.attempts, &mut rand::rng());
            tracing::warn!(
                records = piece.rows.len(),
                attempt = piece.attempts,
                wait = ?piece.backoff,
                "sink failed, retrying: {reason}"
            );
            piece.pace = Pace::Retry;
            s.todo.push(piece);
        } else if piece.rows.len() > 1 {
            piece.attempts = self.max_attempts - 1;
            piece.pace = Pace::Retry;
            s.todo.extend(split(piece));
        } else {
            let attempts = piece.attempts;
            s.dead.extend(piece.rows.iter().map(|r| {
                DeadLetter::from_row(
                    r,
                    format!("gave up after {attempts} attempts: {reason}"),
                    attempts,
                )
            }));
        }
    }

    /// A write answered item by item: the items taken are settled, rejected ones
    /// dead-lettered, refused ones resent in turn, failed ones retried.
    fn items(
        &self,
        s: &mut Settling,
        piece: Piece,
        items: Vec<ItemOutcome>,
        retry_after: Option<Duration>,
        unit: Option<Unit>,
        sent_at: Duration,
    ) {
        let sent = piece.rows.len();
        let attempts = piece.attempts + 1;
        let mut sorted = Sorted::default();
        for (row, item) in piece.rows.into_iter().zip(items) {
            // What was taken is counted once sorted, with the summary's counters.
            if !matches!(item, ItemOutcome::Written | ItemOutcome::Duplicate) {
                metrics::counter!(ITEMS, "outcome" => item.label()).increment(1);
            }
            match item {
                ItemOutcome::Written => {
                    sorted.inserted += 1;
                    sorted.taken.push(row);
                }
                ItemOutcome::Duplicate => {
                    sorted.duplicates += 1;
                    sorted.taken.push(row);
                }
                ItemOutcome::Throttled(reason) => {
                    sorted.throttle_reason.get_or_insert(reason);
                    sorted.throttled.push(row);
                }
                ItemOutcome::Failed(reason) => {
                    sorted.fail_reason.get_or_insert(reason);
                    sorted.failed.push(row);
                }
                ItemOutcome::Unavailable(reason) => {
                    sorted.unavailable_reason.get_or_insert(reason);
                    sorted.unavailable.push(row);
                }
                ItemOutcome::Rejected(reason) => {
                    s.dead.push(DeadLetter::from_row(&row, reason, attempts));
                }
            }
        }
        let took_any = !sorted.taken.is_empty();
        if took_any {
            let taken = sorted.inserted + sorted.duplicates;
            self.taken(s, &sorted.taken, taken, sent_at);
            for (outcome, n) in [
                (Settled::Written, sorted.inserted),
                (Settled::Duplicate, sorted.duplicates),
            ] {
                // A label no item had is not started at 0, as before.
                if n > 0 {
                    self.stats.settled(outcome, n);
                }
            }
        }
        if !sorted.throttled.is_empty() {
            let refused = sorted.throttled;
            Stats::add(&self.stats.throttled, 1);
            Stats::add(&self.stats.throttled_records, refused.len() as u64);
            Stats::add(&self.stats.retries, 1);
            tracing::debug!(
                refused = refused.len(),
                sent,
                "sink refused part of the batch for now: {}",
                sorted.throttle_reason.unwrap_or_default()
            );
            // Only the refused rows go again; the rest are settled. A sink that took part
            // of the batch takes batches of this size: no split.
            let outage = self.pressure.throttled_items(
                Refused {
                    sent_at,
                    retry_after,
                    hint: unit,
                    // Items refused for room: the sink had none left.
                    emptied: true,
                    records: refused.len() as u64,
                    bytes: row_bytes(&refused),
                },
                sent,
            );
            s.todo.push(Piece {
                throttles: piece.throttles + u32::from(!outage),
                pace: if outage { Pace::Outage } else { Pace::Turn },
                ..Piece::new(refused, piece.attempts)
            });
        }
        if !sorted.failed.is_empty() {
            let reason = sorted.fail_reason.unwrap_or_default();
            let failed = Piece {
                failed_at: piece.failed_at,
                server_errors: piece.server_errors,
                ..Piece::new(sorted.failed, piece.attempts)
            };
            self.failed_items(s, failed, &reason, took_any, sent_at);
        }
        if !sorted.unavailable.is_empty() {
            // The part of the sink holding them is down, the rest of it up: waited out
            // at the outage backoff, never dead-lettered, and no news about capacity.
            let outage_answers = piece.outage_answers + 1;
            let wait = self.pressure.outage_wait(outage_answers);
            Stats::add(&self.stats.retries, 1);
            tracing::warn!(
                records = sorted.unavailable.len(),
                ?wait,
                "part of the sink unavailable, retrying: {}",
                sorted.unavailable_reason.unwrap_or_default()
            );
            s.todo.push(Piece {
                outage_answers,
                backoff: wait,
                pace: Pace::Retry,
                ..Piece::new(sorted.unavailable, piece.attempts)
            });
        }
    }
}
