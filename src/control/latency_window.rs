//! A canary's latencies over a short window, read as one percentile: one slow query is
//! noise, a slow share of the last second or two is the database. Pure: the time comes in
//! as an argument.

use std::collections::VecDeque;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct LatencyWindow {
    span: Duration,
    /// 0 to 1.
    quantile: f64,
    samples: VecDeque<(Duration, f64)>,
}

impl LatencyWindow {
    pub fn new(span: Duration, quantile: f64) -> Self {
        LatencyWindow {
            span,
            quantile: quantile.clamp(0.0, 1.0),
            samples: VecDeque::new(),
        }
    }

    /// A latency in seconds measured at `now`; samples older than the span are dropped.
    pub fn push(&mut self, now: Duration, seconds: f64) {
        self.samples.push_back((now, seconds));
        while self
            .samples
            .front()
            .is_some_and(|(at, _)| now.saturating_sub(*at) > self.span)
        {
            self.samples.pop_front();
        }
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Forgets every sample: a new baseline is measured from nothing that came before.
    pub fn clear(&mut self) {
        self.samples.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The window's percentile (nearest rank), None while it is empty.
    pub fn value(&self) -> Option<f64> {
        let mut sorted: Vec<f64> = self.samples.iter().map(|(_, v)| *v).collect();
        sorted.sort_by(f64::total_cmp);
        let rank = (self.quantile * sorted.len() as f64).ceil() as usize;
        sorted.get(rank.saturating_sub(1)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_percentile_of_the_last_span_by_nearest_rank() {
        let ms = |n: u64| Duration::from_millis(n);
        let mut w = LatencyWindow::new(ms(2000), 0.9);
        assert_eq!(w.value(), None);
        for i in 0..10 {
            w.push(ms(200 * i), (i + 1) as f64);
        }
        assert_eq!(w.len(), 10);
        assert_eq!(w.value(), Some(9.0), "one outlier of ten is left out");
        // 2.4 s: the first two samples are older than 2 s.
        w.push(ms(2400), 1.0);
        assert_eq!(w.len(), 9);
        assert_eq!(w.value(), Some(10.0));
        let mut median = LatencyWindow::new(ms(2000), 0.5);
        for (i, v) in [5.0, 1.0, 3.0].into_iter().enumerate() {
            median.push(ms(i as u64), v);
        }
        assert_eq!(median.value(), Some(3.0));
    }
}
