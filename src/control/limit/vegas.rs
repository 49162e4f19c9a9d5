//! Vegas (as in Netflix concurrency-limits): estimates the queue at the sink from how much
//! the latency exceeds the no-load latency, `queue = limit × (1 − rtt_noload / rtt)`, and
//! keeps it between alpha and beta. The no-load latency is re-probed now and then, so a
//! sink that got slower for good is not treated as congested forever. Unlike Netflix's
//! probe (which takes the next sample, queueing included, as the new no-load latency and
//! so ratchets the limit up under steady load), a probe here drains to the minimum limit
//! for one round, as BBR's ProbeRTT does, and measures a write that really ran unloaded.

use std::time::Duration;

use super::{ConcurrencyLimit, Sample};

#[derive(Debug, Clone)]
pub struct VegasLimit {
    estimated: f64,
    max: usize,
    min: usize,
    smoothing: f64,
    rtt_noload: Option<Duration>,
    /// Fixed alpha/beta (tests); None = 3·log10(limit) and 6·log10(limit).
    alpha_beta: Option<(f64, f64)>,
    probe_multiplier: f64,
    probe_jitter: f64,
    probe_count: u64,
    /// While probing: the limit to return to.
    probing: Option<f64>,
    rng: u64,
}

/// Netflix's Log10RootFunction: an integer log10, at least 1.
fn log10(limit: f64) -> f64 {
    (limit.max(1.0).log10().floor()).max(1.0)
}

impl VegasLimit {
    /// Defaults: initial 20, max 1000, smoothing 1.0, probe every ~30 × limit samples.
    pub fn new(initial: usize, min: usize, max: usize, smoothing: f64, seed: u64) -> Self {
        let mut v = VegasLimit {
            estimated: initial.max(min).max(1).min(max) as f64,
            max,
            min: min.max(1),
            smoothing,
            rtt_noload: None,
            alpha_beta: None,
            probe_multiplier: 30.0,
            probe_jitter: 1.0,
            probe_count: 0,
            probing: None,
            rng: seed | 1,
        };
        v.reset_probe_jitter();
        v
    }

    pub fn with_alpha_beta(mut self, alpha: f64, beta: f64) -> Self {
        self.alpha_beta = Some((alpha, beta));
        self
    }

    /// A jitter in [0.5, 1) from a xorshift: deterministic for a seed.
    fn reset_probe_jitter(&mut self) {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.probe_jitter = 0.5 + (self.rng >> 11) as f64 / (1u64 << 53) as f64 * 0.5;
    }

    fn update(&mut self, rtt: Duration, inflight: usize, dropped: bool) {
        let limit = self.estimated;
        let noload = self.rtt_noload.expect("set before updating").as_secs_f64();
        let queue = (limit * (1.0 - noload / rtt.as_secs_f64().max(1e-9))).ceil();
        let (alpha, beta) = self
            .alpha_beta
            .unwrap_or((3.0 * log10(limit), 6.0 * log10(limit)));
        let threshold = log10(limit);
        let new = if dropped {
            limit - log10(limit)
        } else if ((inflight * 2) as f64) < limit {
            return; // the limit is not what holds us back
        } else if queue <= threshold {
            limit + beta
        } else if queue < alpha {
            limit + log10(limit)
        } else if queue > beta {
            limit - log10(limit)
        } else {
            return;
        };
        let new = new.clamp(self.min as f64, self.max as f64);
        self.estimated = (1.0 - self.smoothing) * limit + self.smoothing * new;
    }
}

impl ConcurrencyLimit for VegasLimit {
    fn limit(&self) -> usize {
        match self.probing {
            Some(_) => self.min,
            None => self.estimated as usize,
        }
    }

    fn on_sample(&mut self, s: Sample) {
        if let Some(saved) = self.probing {
            // Only a write started while drained tells the unloaded latency.
            if s.inflight <= self.min {
                self.rtt_noload = Some(s.rtt);
                self.estimated = saved;
                self.probing = None;
            }
            return;
        }
        self.probe_count += 1;
        if self.probe_jitter * self.probe_multiplier * self.estimated <= self.probe_count as f64 {
            self.reset_probe_jitter();
            self.probe_count = 0;
            self.probing = Some(self.estimated);
            return;
        }
        match self.rtt_noload {
            Some(noload) if s.rtt >= noload => self.update(s.rtt, s.inflight, s.dropped),
            _ => self.rtt_noload = Some(s.rtt),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn sample(rtt: u64, inflight: usize) -> Sample {
        Sample {
            rtt: ms(rtt),
            inflight,
            dropped: false,
        }
    }

    /// VegasLimitTest.create(): alpha 3, beta 6, smoothing 1.0, initial 10, max 20.
    fn netflix() -> VegasLimit {
        VegasLimit::new(10, 1, 20, 1.0, 42).with_alpha_beta(3.0, 6.0)
    }

    #[test]
    fn netflix_vectors() {
        let mut l = netflix();
        assert_eq!(l.limit(), 10, "initial");
        l.on_sample(sample(10, 10));
        assert_eq!(l.limit(), 10);
        l.on_sample(sample(10, 11));
        assert_eq!(l.limit(), 16, "increase: no queue, limit + beta");

        let mut l = netflix();
        l.on_sample(sample(10, 10));
        l.on_sample(sample(50, 11));
        assert_eq!(l.limit(), 9, "decrease: queue 8 > beta");

        let mut l = netflix();
        l.on_sample(sample(10, 10));
        l.on_sample(sample(14, 14));
        assert_eq!(l.limit(), 10, "no change: queue 3 within [alpha, beta]");
    }

    #[test]
    fn smoothing_and_drops() {
        let mut l = VegasLimit::new(100, 1, 200, 0.5, 7);
        l.on_sample(sample(10, 100));
        assert_eq!(l.limit(), 100);
        l.on_sample(Sample {
            rtt: ms(20),
            inflight: 100,
            dropped: true,
        });
        // 100 − log10(100) = 98, halfway there: 99.
        assert_eq!(l.limit(), 99);
    }

    #[test]
    fn probes_the_unloaded_latency_by_draining_to_the_minimum() {
        let mut l = VegasLimit::new(10, 1, 20, 1.0, 9).with_alpha_beta(3.0, 6.0);
        l.on_sample(sample(10, 10));
        // Enough samples to trigger a probe (jitter × 30 × limit ≤ 300).
        let mut probed = false;
        for _ in 0..400 {
            l.on_sample(sample(14, 14));
            if l.limit() == 1 {
                probed = true;
                break;
            }
        }
        assert!(probed, "a probe drains to the minimum");
        l.on_sample(sample(30, 12));
        assert_eq!(l.limit(), 1, "a loaded write does not end the probe");
        l.on_sample(sample(12, 1));
        assert_eq!(l.limit(), 10, "back to the limit it had");
        assert_eq!(l.rtt_noload, Some(ms(12)));
    }

    #[test]
    fn does_not_grow_while_app_limited() {
        let mut l = netflix();
        l.on_sample(sample(10, 10));
        l.on_sample(sample(10, 4));
        assert_eq!(l.limit(), 10);
    }
}
