//! AIMD on a latency percentile: +`increase` while the judged latency is under target and
//! the limit is actually used; × `backoff_ratio` when the target is broken or the sink
//! pushes back. Judging a percentile of a window of samples, not each sample, keeps one
//! slow outlier from cutting the limit.

use std::time::Duration;

use super::{ConcurrencyLimit, Sample};

#[derive(Debug, Clone)]
pub struct AimdLimit {
    limit: f64,
    min: usize,
    max: usize,
    increase: f64,
    backoff_ratio: f64,
    target: Duration,
    percentile: f64,
    window: usize,
    rtts: Vec<Duration>,
    max_inflight: usize,
    dropped: bool,
}

impl AimdLimit {
    /// Netflix concurrency-limits' defaults are initial 20, min 20, max 200, ratio 0.9.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        initial: usize,
        min: usize,
        max: usize,
        increase: f64,
        backoff_ratio: f64,
        target: Duration,
        percentile: f64,
        window: usize,
    ) -> Self {
        AimdLimit {
            limit: initial.clamp(min, max) as f64,
            min,
            max,
            increase,
            backoff_ratio,
            target,
            percentile,
            window: window.max(1),
            rtts: Vec::with_capacity(window.max(1)),
            max_inflight: 0,
            dropped: false,
        }
    }

    fn judge(&mut self) {
        self.rtts.sort_unstable();
        let rank =
            ((self.percentile * self.rtts.len() as f64).ceil() as usize).clamp(1, self.rtts.len());
        let judged = self.rtts[rank - 1];
        let current = self.limit;
        if self.dropped || judged > self.target {
            self.limit = (current * self.backoff_ratio).floor();
        } else if self.max_inflight * 2 + 1 >= current as usize {
            self.limit = current + self.increase;
        }
        self.limit = self.limit.clamp(self.min as f64, self.max as f64);
        self.rtts.clear();
        self.max_inflight = 0;
        self.dropped = false;
    }
}

impl ConcurrencyLimit for AimdLimit {
    fn limit(&self) -> usize {
        self.limit as usize
    }

    fn on_sample(&mut self, s: Sample) {
        self.rtts.push(s.rtt);
        self.max_inflight = self.max_inflight.max(s.inflight);
        self.dropped |= s.dropped;
        if self.rtts.len() >= self.window {
            self.judge();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Netflix's AIMDLimit judges each sample against a 5 s timeout: window 1, p100.
    fn netflix(initial: usize, min: usize, max: usize) -> AimdLimit {
        AimdLimit::new(initial, min, max, 1.0, 0.9, Duration::from_secs(5), 1.0, 1)
    }

    #[test]
    fn netflix_vectors() {
        let mut l = netflix(20, 1, 200);
        l.on_sample(Sample {
            rtt: ms(1),
            inflight: 10,
            dropped: false,
        });
        assert_eq!(l.limit(), 21, "increase on success");

        let mut l = netflix(30, 1, 200);
        l.on_sample(Sample {
            rtt: ms(1),
            inflight: 1,
            dropped: true,
        });
        assert_eq!(l.limit(), 27, "decrease on drop");

        let mut l = netflix(21, 0, 21);
        l.on_sample(Sample {
            rtt: ms(1),
            inflight: 10,
            dropped: false,
        });
        assert_eq!(l.limit(), 21, "success at the max stays there");
    }

    #[test]
    fn does_not_grow_an_unused_limit() {
        let mut l = netflix(20, 1, 200);
        l.on_sample(Sample {
            rtt: ms(1),
            inflight: 3,
            dropped: false,
        });
        assert_eq!(l.limit(), 20);
    }

    #[test]
    fn judges_the_percentile_of_a_window_not_each_sample() {
        // p95 of 20 samples is the 19th smallest: one slow outlier does not count.
        let mut l = AimdLimit::new(10, 1, 100, 1.0, 0.9, ms(150), 0.95, 20);
        for i in 0..20 {
            let rtt = if i == 7 { ms(900) } else { ms(100) };
            l.on_sample(Sample {
                rtt,
                inflight: 10,
                dropped: false,
            });
            if i < 19 {
                assert_eq!(l.limit(), 10, "nothing judged before the window is full");
            }
        }
        assert_eq!(l.limit(), 11);
        // Two slow ones in 20 break the p95.
        for i in 0..20 {
            let rtt = if i < 2 { ms(900) } else { ms(100) };
            l.on_sample(Sample {
                rtt,
                inflight: 11,
                dropped: false,
            });
        }
        assert_eq!(l.limit(), 9, "11 × 0.9 rounded down");
    }
}
