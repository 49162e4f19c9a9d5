//! Failures the sink does not explain (an HTTP 500, a 500 for an item): a record whose
//! content crashes the endpoint, or an endpoint failing every request? A record is blamed
//! only on evidence that the sink works for others — it took a write sent after this
//! record's previous failure — and only once it has failed `retry.max_attempts` times.
//! Without evidence the sink is failing everyone: an outage, waited out with the outage
//! backoff, without limit, and never dead-lettered (a degrading service that fails some
//! requests, then all, must not cost the records caught in it).
//!
//! A piece of several records that fails whole is halved when there is evidence, when its
//! failure is the batch's first since a write went through (one half may go through: the
//! cheapest test), or once it has failed `retry.max_attempts` times, twice that for its
//! halves, and so on (several bad records can keep every piece failing); otherwise it goes
//! to the back of the batch, so that the batch's other pieces are tried first, and waits
//! the outage backoff. An outage costs a request per backoff and splits a batch into a few
//! pieces (about the square root of its requests over `max_attempts`), not into single
//! records.
//!
//! A record left alone in its batch cannot be given evidence by its neighbours: before it
//! is tried again a record of the batch that the sink took is sent again (its key makes
//! that a duplicate, not a second copy), and the answer is the evidence.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::Delivery;
use super::piece::{Pace, Piece, split};
use super::settle::Settling;
use crate::record::{DeadLetter, Row};
use crate::sink::WriteOutcome;
use crate::stats::Stats;

impl Delivery {
    /// The sink took (whole or in part) a write sent at `sent_at`.
    pub(super) fn took_sent_at(&self, sent_at: Duration) {
        self.last_taken_sent.fetch_max(nanos(sent_at), Relaxed);
    }

    /// Whether the sink took a write sent after `at`.
    fn taken_after(&self, at: Duration) -> bool {
        self.last_taken_sent.load(Relaxed) > nanos(at)
    }

    /// What this failure of `piece`, sent at `sent_at`, shows: whether the sink took a
    /// write sent after the piece's previous failure (or `alongside`, in the same answer).
    fn evidence(&self, piece: &mut Piece, sent_at: Duration, alongside: bool) -> bool {
        let evidence = alongside || piece.failed_at.is_some_and(|at| self.taken_after(at));
        piece.failed_at = Some(sent_at);
        evidence
    }

    /// The sink failed `piece` whole without saying why (HTTP 500).
    pub(super) fn server_error(
        &self,
        s: &mut Settling,
        mut piece: Piece,
        reason: String,
        sent_at: Duration,
    ) {
        Stats::add(&self.stats.retries, 1);
        let first = s.outages == 0;
        let evidence = self.evidence(&mut piece, sent_at, false);
        let outage_wait = if evidence {
            Duration::ZERO
        } else {
            s.outages += 1;
            self.pressure.unavailable();
            self.pressure.outage_wait(s.outages)
        };
        piece.server_errors += 1;
        if piece.rows.len() > 1 {
            let forced_at = piece.split_after.max(self.max_attempts);
            if evidence || first || piece.server_errors >= forced_at {
                tracing::debug!(
                    records = piece.rows.len(),
                    evidence,
                    "sink failed without saying why, halving the batch: {reason}"
                );
                piece.pace = if evidence || first {
                    Pace::First
                } else {
                    Pace::Retry
                };
                let forced = !(evidence || first);
                let [mut second, mut first_half] = split(piece);
                if forced {
                    second.split_after = forced_at.saturating_mul(2);
                    first_half.split_after = forced_at.saturating_mul(2);
                }
                first_half.backoff = outage_wait;
                s.todo.push(second);
                s.todo.push(first_half);
            } else {
                tracing::warn!(
                    records = piece.rows.len(),
                    wait = ?outage_wait,
                    "sink failing every request without saying why, retrying: {reason}"
                );
                piece.backoff = outage_wait;
                piece.pace = Pace::Retry;
                self.to_the_back(s, piece);
            }
            return;
        }
        self.failed_alone(s, piece, &reason, evidence, outage_wait);
    }

    /// Rows the sink failed item by item without saying why (a 500 for each), while it
    /// `took_others` of the same write or not.
    pub(super) fn failed_items(
        &self,
        s: &mut Settling,
        mut piece: Piece,
        reason: &str,
        took_others: bool,
        sent_at: Duration,
    ) {
        Stats::add(&self.stats.retries, 1);
        let evidence = self.evidence(&mut piece, sent_at, took_others);
        piece.server_errors += 1;
        let outage_wait = if evidence {
            Duration::ZERO
        } else {
            piece.outage_answers += 1;
            self.pressure.outage_wait(piece.outage_answers)
        };
        self.failed_alone(s, piece, reason, evidence, outage_wait);
    }

    /// Rows each failed on their own: dead-lettered once they have failed
    /// `retry.max_attempts` times and this failure came with evidence; tried again
    /// otherwise, after the retry backoff with evidence and the outage backoff without.
    fn failed_alone(
        &self,
        s: &mut Settling,
        mut piece: Piece,
        reason: &str,
        evidence: bool,
        outage_wait: Duration,
    ) {
        piece.attempts += 1;
        if evidence && piece.attempts >= self.max_attempts {
            let attempts = piece.attempts;
            s.dead.extend(piece.rows.iter().map(|r| {
                DeadLetter::from_row(
                    r,
                    format!(
                        "gave up after {attempts} attempts: {reason} (the sink took other records meanwhile)"
                    ),
                    attempts,
                )
            }));
            return;
        }
        piece.backoff = if evidence {
            self.backoff.delay(piece.attempts, &mut rand::rng())
        } else {
            outage_wait
        };
        tracing::warn!(
            records = piece.rows.len(),
            attempt = piece.attempts,
            wait = ?piece.backoff,
            evidence,
            "sink failed without saying why, retrying: {reason}"
        );
        piece.pace = Pace::Retry;
        self.to_the_back(s, piece);
    }

    /// Puts `piece` behind the batch's other pieces. When every piece left has failed
    /// this way too (none is likely to give evidence), a record of the batch the sink took
    /// goes first, as a canary, in the wait `piece` was to wait.
    fn to_the_back(&self, s: &mut Settling, mut piece: Piece) {
        let hope = s.todo.iter().any(|p| p.server_errors == 0 || p.canary);
        if !hope && let Some(row) = s.canary.clone() {
            let canary = Piece {
                canary: true,
                backoff: std::mem::take(&mut piece.backoff),
                pace: Pace::Retry,
                server_errors: 1,
                ..Piece::new(vec![row], 0)
            };
            s.todo.insert(0, piece);
            s.todo.push(canary);
            return;
        }
        s.todo.insert(0, piece);
    }

    /// A canary's answer: evidence if the sink took it, nothing else (it was settled
    /// before).
    pub(super) fn canary_answered(&self, outcome: &WriteOutcome, sent_at: Duration) {
        let took = match outcome {
            WriteOutcome::Written { .. } | WriteOutcome::Upserted { .. } => true,
            WriteOutcome::Items { items, .. } => items.iter().any(|i| {
                matches!(
                    i,
                    crate::sink::ItemOutcome::Written | crate::sink::ItemOutcome::Duplicate
                )
            }),
            _ => false,
        };
        tracing::debug!(took, "canary answered: {}", outcome.label());
        if took {
            self.took_sent_at(sent_at);
        }
    }
}

/// Keeps a row the sink took, to send again as a canary.
pub(super) fn keep_canary(s: &mut Settling, rows: &[Row]) {
    if s.canary.is_none() {
        s.canary = rows.first().cloned();
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
