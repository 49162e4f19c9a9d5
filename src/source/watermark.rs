//! The committed position of one lane: batches finish out of order, but a source may only
//! advance its checkpoint/commit over records that are all written or dead-lettered.

use std::collections::BTreeMap;

/// Tracks spans handed out in order and acknowledged in any order.
#[derive(Debug, Clone)]
pub struct Watermark {
    /// Everything before this is acknowledged.
    committed: u64,
    /// Pulled spans not yet folded into `committed`: start (clamped to `committed`) →
    /// (end, acked, the start it was pulled with).
    spans: BTreeMap<u64, (u64, bool, u64)>,
}

impl Watermark {
    pub fn new(committed: u64) -> Self {
        Watermark {
            committed,
            spans: BTreeMap::new(),
        }
    }

    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// Spans handed out and not yet folded into `committed`.
    pub fn outstanding(&self) -> usize {
        self.spans.values().filter(|(_, acked, _)| !acked).count()
    }

    /// Records that `[start, end)` was handed out. Gaps before it (skipped offsets, such as
    /// Kafka transaction markers) are bridged when it is acknowledged.
    pub fn pulled(&mut self, start: u64, end: u64) {
        debug_assert!(end >= start);
        if end <= self.committed {
            return;
        }
        self.spans
            .insert(start.max(self.committed), (end, false, start));
    }

    /// Marks a span acknowledged; returns the new committed position if it moved.
    pub fn ack(&mut self, start: u64) -> Option<u64> {
        // Only the span pulled with this start: a stale ack (of a span already folded in)
        // must not mark the span that now begins at `committed`.
        let key = start.max(self.committed);
        match self.spans.get_mut(&key) {
            Some(span) if span.2 == start => span.1 = true,
            _ => return None,
        }
        let before = self.committed;
        while let Some((&start, &(end, acked, _))) = self.spans.first_key_value() {
            if !acked {
                break;
            }
            debug_assert!(start >= self.committed || end <= self.committed);
            self.committed = self.committed.max(end);
            self.spans.pop_first();
        }
        (self.committed != before).then_some(self.committed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advances_only_over_contiguous_acks() {
        let mut w = Watermark::new(0);
        for i in 0..5 {
            w.pulled(i * 10, i * 10 + 10);
        }
        assert_eq!(w.ack(20), None);
        assert_eq!(w.ack(10), None);
        assert_eq!(w.committed(), 0);
        assert_eq!(w.ack(0), Some(30));
        assert_eq!(w.outstanding(), 2);
        assert_eq!(w.ack(40), None);
        assert_eq!(w.ack(30), Some(50));
        assert_eq!(w.outstanding(), 0);
    }

    #[test]
    fn bridges_gaps_between_spans() {
        let mut w = Watermark::new(100);
        w.pulled(102, 103);
        w.pulled(105, 106);
        assert_eq!(w.ack(105), None);
        assert_eq!(w.ack(102), Some(106));
    }

    #[test]
    fn a_stale_ack_does_not_acknowledge_the_next_span() {
        let mut w = Watermark::new(0);
        w.pulled(0, 10);
        w.pulled(10, 20);
        assert_eq!(w.ack(0), Some(10));
        assert_eq!(w.ack(0), None, "acked twice");
        assert_eq!(w.committed(), 10);
        assert_eq!(w.outstanding(), 1, "the span at 10 is still unwritten");
        assert_eq!(w.ack(10), Some(20));
    }

    #[test]
    fn ignores_redelivered_spans_below_the_watermark() {
        let mut w = Watermark::new(50);
        w.pulled(10, 11);
        assert_eq!(w.outstanding(), 0);
        assert_eq!(w.ack(10), None);
    }
}
