//! A piece of a batch on its way to the sink, and how a piece is halved.

use crate::record::Row;

/// A piece of a batch still to be written, with the attempts it has used.
pub(super) struct Piece {
    pub(super) rows: Vec<Row>,
    pub(super) attempts: u32,
    pub(super) throttles: u32,
    /// These rows were sent before and failed for a reason that may pass: sending them
    /// again is a retry (budgeted), not a new request.
    pub(super) retry: bool,
    /// The last write of these rows got no answer (timed out, cut, reset): the sink may
    /// have stored them. Sent again only under the concurrency limit, and counted.
    pub(super) unanswered: bool,
    /// The sink pushed these rows back at more writes in flight than it took lately: they
    /// go again once the writes in flight are under the (cut) limit.
    pub(super) within_limit: bool,
    /// The last write was cut short by the limit gate: the gate paces the resend, so it
    /// does not wait for the retry budget (it would, for as long as the sink's timeout).
    pub(super) cut: bool,
    /// The sink answered that it is down (503s without Retry-After, one after another):
    /// the outage's backoff paces the resend. The retry budget would not: an outage spends
    /// it, and once the sink is back the batches would trickle out at its floor for many
    /// seconds. (A write with no answer — refused, reset, timed out — stays on the budget:
    /// a timeout is as often an overloaded sink, which resends must not pile onto.)
    pub(super) outage: bool,
    /// The sink refused these rows item by item while taking others: resent in turn at the
    /// planned rate, not on the retry budget. All refused parts going at once when the
    /// pause ended met the same full sink (a bulk sink at 4x: 11 refused resends in 0.5 s,
    /// which spent the budget and stalled the worker for 10 s).
    pub(super) refused_items: bool,
}

/// Halves a piece; the halves keep its attempt count but start a new throttle streak.
pub(super) fn split(piece: Piece) -> [Piece; 2] {
    let mut first = piece.rows;
    let second = first.split_off(first.len() / 2);
    let half = |rows| Piece {
        rows,
        attempts: piece.attempts,
        throttles: 0,
        retry: piece.retry,
        unanswered: piece.unanswered,
        cut: false,
        within_limit: false,
        outage: false,
        refused_items: false,
    };
    // Pieces are popped from the end: push the second half first to keep the order.
    [half(second), half(first)]
}
