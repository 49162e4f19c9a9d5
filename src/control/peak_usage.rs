//! The highest rate a worker actually used over a window: the busiest one-second span among
//! the samples of a running counter (records pulled). A worker judged by its average would
//! give back leases it needs for its bursts; judged by the peak over a window longer than
//! its bursts' spacing, it keeps what a burst uses and gives back only what it never uses.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// The shortest span a rate is measured over: shorter spans catch a tick's batch, not a rate.
pub const SPAN: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct PeakUsage {
    window: Duration,
    /// (when, counter), oldest first; the oldest lies at least `window` back once full.
    samples: VecDeque<(Instant, u64)>,
}

impl PeakUsage {
    pub fn new(window: Duration) -> Self {
        assert!(window >= SPAN, "the window must hold at least one span");
        PeakUsage {
            window,
            samples: VecDeque::new(),
        }
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    /// The counter read `total` at `now`.
    pub fn record(&mut self, now: Instant, total: u64) {
        self.samples.push_back((now, total));
        // Keep one sample at or before the window's start, so the window stays covered.
        while self.samples.len() > 2 && now.duration_since(self.samples[1].0) >= self.window {
            self.samples.pop_front();
        }
    }

    /// The latest sample.
    pub fn last(&self) -> Option<(Instant, u64)> {
        self.samples.back().copied()
    }

    /// Forgets everything: what was used before says nothing about a new pool definition.
    pub fn reset(&mut self) {
        self.samples.clear();
    }

    /// Whether the samples reach back a whole window from `now`.
    pub fn covers(&self, now: Instant) -> bool {
        self.samples
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) >= self.window)
    }

    /// The highest rate over any span of at least [`SPAN`] between two samples, per second;
    /// `None` until the samples span at least that.
    pub fn peak(&self) -> Option<f64> {
        let mut peak: Option<f64> = None;
        let mut start = 0;
        for end in 1..self.samples.len() {
            let (t_end, n_end) = self.samples[end];
            // The latest start that still leaves a span of at least SPAN.
            while start + 1 < end && t_end.duration_since(self.samples[start + 1].0) >= SPAN {
                start += 1;
            }
            let (t_start, n_start) = self.samples[start];
            let span = t_end.duration_since(t_start);
            if span >= SPAN {
                let rate = n_end.saturating_sub(n_start) as f64 / span.as_secs_f64();
                peak = Some(peak.map_or(rate, |p: f64| p.max(rate)));
            }
        }
        peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::ms;

    #[test]
    fn nothing_to_tell_before_one_span() {
        let t0 = Instant::now();
        let mut u = PeakUsage::new(Duration::from_secs(4));
        u.record(t0, 0);
        u.record(t0 + ms(500), 50);
        assert_eq!(u.peak(), None);
        u.record(t0 + ms(1000), 100);
        assert_eq!(u.peak(), Some(100.0));
        assert!(!u.covers(t0 + ms(1000)));
    }

    #[test]
    fn a_burst_inside_the_window_sets_the_peak() {
        let t0 = Instant::now();
        let mut u = PeakUsage::new(Duration::from_secs(4));
        let mut total = 0;
        // 100 rec/s, then one second at 400 rec/s, then 100 rec/s again.
        for i in 0..=8 {
            total += if i == 3 || i == 4 { 200 } else { 50 };
            u.record(t0 + ms(500 * i), total);
        }
        assert_eq!(u.peak(), Some(400.0));
        assert!(u.covers(t0 + ms(4000)));
    }

    #[test]
    fn a_burst_older_than_the_window_is_forgotten() {
        let t0 = Instant::now();
        let mut u = PeakUsage::new(Duration::from_secs(4));
        let mut total = 0;
        for i in 0..=20 {
            total += if i <= 2 { 200 } else { 50 };
            u.record(t0 + ms(500 * i), total);
        }
        assert_eq!(u.peak(), Some(100.0));
    }

    #[test]
    fn uneven_samples_measure_over_the_span_they_cover() {
        let t0 = Instant::now();
        let mut u = PeakUsage::new(Duration::from_secs(4));
        u.record(t0, 0);
        u.record(t0 + ms(700), 70);
        u.record(t0 + ms(1400), 140);
        u.record(t0 + ms(3400), 340);
        let peak = u.peak().unwrap();
        assert!((peak - 100.0).abs() < 1e-9, "{peak}");
    }

    #[test]
    fn reset_forgets_the_past() {
        let t0 = Instant::now();
        let mut u = PeakUsage::new(Duration::from_secs(2));
        u.record(t0, 0);
        u.record(t0 + ms(2000), 1000);
        assert!(u.covers(t0 + ms(2000)));
        u.reset();
        assert_eq!(u.peak(), None);
        assert!(!u.covers(t0 + ms(2000)));
    }
}
