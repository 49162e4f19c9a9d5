//! Gradient2 (as in Netflix concurrency-limits): compares a long-window average latency
//! with the latest one; `gradient = clamp(tolerance × long / short, 0.5, 1)` scales the
//! limit, plus a small queue allowance, smoothed. Tolerates a steady slower sink without
//! collapsing, and recovers the long average after a spell of overload.

use std::time::Duration;

use super::{ConcurrencyLimit, Sample};

/// An exponential average with a plain-average warm-up, as Netflix's ExpAvgMeasurement.
#[derive(Debug, Clone)]
struct ExpAverage {
    window: usize,
    warmup: usize,
    count: usize,
    sum: f64,
    value: f64,
}

impl ExpAverage {
    fn add(&mut self, sample: f64) -> f64 {
        if self.count < self.warmup {
            self.count += 1;
            self.sum += sample;
            self.value = self.sum / self.count as f64;
        } else {
            let f = 2.0 / (self.window as f64 + 1.0);
            self.value = self.value * (1.0 - f) + sample * f;
        }
        self.value
    }
}

#[derive(Debug, Clone)]
pub struct Gradient2Limit {
    estimated: f64,
    min: usize,
    max: usize,
    smoothing: f64,
    tolerance: f64,
    queue: f64,
    long_rtt: ExpAverage,
}

impl Gradient2Limit {
    /// Defaults: initial 20, min 20, max 200, smoothing 0.2, tolerance 1.5, queue 4,
    /// long window 600 samples.
    pub fn new(
        initial: usize,
        min: usize,
        max: usize,
        smoothing: f64,
        tolerance: f64,
        queue: f64,
    ) -> Self {
        Gradient2Limit {
            estimated: initial.max(min).min(max) as f64,
            min,
            max,
            smoothing,
            tolerance,
            queue,
            long_rtt: ExpAverage {
                window: 600,
                warmup: 10,
                count: 0,
                sum: 0.0,
                value: 0.0,
            },
        }
    }
}

impl ConcurrencyLimit for Gradient2Limit {
    fn limit(&self) -> usize {
        self.estimated as usize
    }

    fn on_sample(&mut self, s: Sample) {
        let short = s.rtt.max(Duration::from_nanos(1)).as_secs_f64();
        let long = self.long_rtt.add(short);
        // After a long overload the average lags far behind: let it catch up.
        if long / short > 2.0 {
            self.long_rtt.value *= 0.95;
        }
        if (s.inflight as f64) < self.estimated / 2.0 && !s.dropped {
            return;
        }
        let gradient = if s.dropped {
            0.5
        } else {
            (self.tolerance * long / short).clamp(0.5, 1.0)
        };
        let new = self.estimated * gradient + self.queue;
        let new = self.estimated * (1.0 - self.smoothing) + new * self.smoothing;
        self.estimated = new.max(self.min as f64).min(self.max as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ms: u64, inflight: usize) -> Sample {
        Sample {
            rtt: Duration::from_millis(ms),
            inflight,
            dropped: false,
        }
    }

    #[test]
    fn grows_by_the_queue_allowance_while_latency_holds() {
        let mut l = Gradient2Limit::new(20, 1, 200, 0.2, 1.5, 4.0);
        l.on_sample(sample(100, 20));
        // gradient 1 → 20 + 4, smoothed: 20 × 0.8 + 24 × 0.2 = 20.8
        assert_eq!(l.limit(), 20);
        for _ in 0..10 {
            l.on_sample(sample(100, 30));
        }
        assert!(l.limit() > 25, "{}", l.limit());
    }

    #[test]
    fn shrinks_when_latency_doubles_past_the_tolerance() {
        let mut l = Gradient2Limit::new(50, 1, 200, 0.2, 1.5, 4.0);
        for _ in 0..20 {
            l.on_sample(sample(100, 50));
        }
        let before = l.limit();
        for _ in 0..5 {
            l.on_sample(sample(400, 60));
        }
        assert!(l.limit() < before, "{} !< {before}", l.limit());
    }

    #[test]
    fn ignores_samples_while_app_limited() {
        let mut l = Gradient2Limit::new(40, 1, 200, 0.2, 1.5, 4.0);
        l.on_sample(sample(100, 5));
        assert_eq!(l.limit(), 40);
    }
}
