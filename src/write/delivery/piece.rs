//! A piece of a batch on its way to the sink, what it waits for before it goes again, and
//! how a piece is halved.

use std::time::Duration;

use crate::record::Row;

/// What a piece waits for before it is sent, besides the worker's pause (which every
/// write waits out) and `Piece::backoff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pace {
    /// A new request: counted as a first attempt, the base of the retry budget.
    First,
    /// Sent before and failed for a reason that may pass: a retry, paid for by the budget.
    Retry,
    /// The last write was cut short by the limit gate: the gate paces the resend, so it
    /// does not wait for the retry budget (it would, for as long as the sink's timeout).
    Limit,
    /// The sink answered that it is down (503s without Retry-After, one after another):
    /// the outage's pause paces the resend. The retry budget would not: an outage spends
    /// it, and once the sink is back the batches would trickle out at its floor for many
    /// seconds. (A write with no answer — refused, reset, timed out — stays on the budget:
    /// a timeout is as often an overloaded sink, which resends must not pile onto.)
    Outage,
    /// The sink refused these rows item by item while taking others: resent in turn at the
    /// planned rate, not on the retry budget. All refused parts going at once when the
    /// pause ended met the same full sink (a bulk sink at 4x: 11 refused resends in 0.5 s,
    /// which spent the budget and stalled the worker for 10 s).
    Turn,
}

/// A piece of a batch still to be written, with the attempts it has used.
pub(super) struct Piece {
    pub(super) rows: Vec<Row>,
    pub(super) attempts: u32,
    pub(super) throttles: u32,
    pub(super) pace: Pace,
    /// Waited before the piece is paced: the retry or outage backoff its last failure
    /// called for.
    pub(super) backoff: Duration,
    /// The last write of these rows got no answer (timed out, cut, reset): the sink may
    /// have stored them. Sent again only under the concurrency limit, and counted.
    pub(super) unanswered: bool,
    /// The sink pushed these rows back at more writes in flight than it took lately: they
    /// go again once the writes in flight are under the (cut) limit.
    pub(super) within_limit: bool,
    /// When the last request that failed these rows without saying why (a 500) was sent.
    pub(super) failed_at: Option<Duration>,
    /// The sink took a write sent after one of those failures: it works for other records,
    /// so these are suspect.
    pub(super) cleared: bool,
    /// Failures without explanation (500s) of these rows, as this piece.
    pub(super) server_errors: u32,
    /// Halved after this many such failures even without evidence (0: `max_attempts`);
    /// doubled for the halves, so that an outage splits a batch into few pieces.
    pub(super) split_after: u32,
    /// Answers in a row that could not be matched to these rows.
    pub(super) unreadable: u32,
    /// Answers in a row that the part of the sink holding these rows is down: the outage
    /// backoff's attempt.
    pub(super) outage_answers: u32,
    /// A row the sink took, sent again only to learn whether the sink takes writes now.
    pub(super) canary: bool,
    /// The sink's last throttle of these rows said when it would have room for them
    /// (Retry-After): sent again then, they spend that room.
    pub(super) room_told: bool,
}

impl Piece {
    /// Rows not yet tried, or tried and answered for good (a new request).
    pub(super) fn new(rows: Vec<Row>, attempts: u32) -> Self {
        Piece {
            rows,
            attempts,
            throttles: 0,
            pace: Pace::First,
            backoff: Duration::ZERO,
            unanswered: false,
            within_limit: false,
            failed_at: None,
            cleared: false,
            server_errors: 0,
            split_after: 0,
            room_told: false,
            unreadable: 0,
            outage_answers: 0,
            canary: false,
        }
    }

    /// Whether these rows were sent before and not answered for good.
    fn is_retry(&self) -> bool {
        self.pace != Pace::First
    }
}

/// Halves a piece; the halves keep its attempt count, whether they are a retry, whether
/// the sink may hold them and what its failures showed, but start new streaks.
pub(super) fn split(piece: Piece) -> [Piece; 2] {
    let pace = if piece.is_retry() {
        Pace::Retry
    } else {
        Pace::First
    };
    let mut first = piece.rows;
    let second = first.split_off(first.len() / 2);
    let half = |rows| Piece {
        pace,
        unanswered: piece.unanswered,
        failed_at: piece.failed_at,
        cleared: piece.cleared,
        ..Piece::new(rows, piece.attempts)
    };
    // Pieces are popped from the end: push the second half first to keep the order.
    [half(second), half(first)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize) -> Vec<Row> {
        (0..n)
            .map(|i| Row {
                key: format!("k{i}"),
                ..Default::default()
            })
            .collect()
    }

    fn keys(piece: &Piece) -> Vec<&str> {
        piece.rows.iter().map(|r| r.key.as_str()).collect()
    }

    #[test]
    fn halves_of_a_retry_stay_retries_and_keep_their_attempts_in_order() {
        for pace in [Pace::Retry, Pace::Limit, Pace::Outage, Pace::Turn] {
            let piece = Piece {
                pace,
                throttles: 2,
                unanswered: true,
                backoff: Duration::from_secs(1),
                ..Piece::new(rows(5), 3)
            };
            let [second, first] = split(piece);
            assert_eq!(keys(&first), ["k0", "k1"]);
            assert_eq!(keys(&second), ["k2", "k3", "k4"]);
            for half in [&first, &second] {
                assert_eq!(half.pace, Pace::Retry, "from {pace:?}: paid by the budget");
                assert_eq!(half.attempts, 3);
                assert_eq!(half.throttles, 0, "a new throttle streak");
                assert!(half.unanswered, "the sink may hold them");
                assert_eq!(half.backoff, Duration::ZERO, "the backoff was the whole's");
            }
        }
    }

    #[test]
    fn halves_of_a_new_request_are_new_requests() {
        let [second, first] = split(Piece::new(rows(2), 1));
        for half in [&first, &second] {
            assert_eq!(half.pace, Pace::First);
            assert_eq!(half.attempts, 1);
            assert!(!half.unanswered);
        }
    }
}
