//! How long the emulated database takes to answer, as the test server of the
//! exponential-backoff article does: `base` up to `knee` concurrent requests, then
//! `base × factor^((concurrency − knee) / k)` — a database that slows down sharply once
//! too many requests compete, which is what makes retry storms self-sustaining. Two terms
//! from Vector's adaptive-concurrency harness come on top: a linear slowdown of
//! `base × linear` per concurrent request beyond the first (a link whose throughput does
//! not grow with concurrency), and a jitter of `base × jitter × Exp(1)`.

use std::time::Duration;

/// No answer takes longer than this, however deep the overload.
const LONGEST: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyModel {
    pub base: Duration,
    pub knee: u32,
    pub factor: f64,
    pub k: f64,
    /// Added per concurrent request beyond the first, as a share of `base`.
    pub linear: f64,
    /// Mean of the exponentially distributed extra time, as a share of `base`.
    pub jitter: f64,
}

impl Default for LatencyModel {
    /// 5 ms up to 30 concurrent requests, then twice as slow for every 10 more.
    fn default() -> Self {
        LatencyModel {
            base: Duration::from_millis(5),
            knee: 30,
            factor: 2.0,
            k: 10.0,
            linear: 0.0,
            jitter: 0.0,
        }
    }
}

impl LatencyModel {
    /// The answer time at `concurrency`, without jitter.
    pub fn delay(&self, concurrency: u32) -> Duration {
        self.delay_drawn(concurrency, 0.0)
    }

    /// The answer time at `concurrency` with `exp1` drawn from Exp(1) for the jitter.
    pub fn delay_drawn(&self, concurrency: u32, exp1: f64) -> Duration {
        let over = f64::from(concurrency.saturating_sub(self.knee)) / self.k;
        let extra = self.linear * f64::from(concurrency.saturating_sub(1)) + self.jitter * exp1;
        let secs = self.base.as_secs_f64() * (self.factor.powf(over) + extra);
        Duration::try_from_secs_f64(secs)
            .unwrap_or(LONGEST)
            .min(LONGEST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_up_to_the_knee_then_exponential() {
        let m = LatencyModel {
            base: Duration::from_millis(100),
            knee: 30,
            factor: 2.0,
            k: 10.0,
            ..LatencyModel::default()
        };
        assert_eq!(m.delay(0), Duration::from_millis(100));
        assert_eq!(m.delay(30), Duration::from_millis(100));
        assert_eq!(m.delay(40), Duration::from_millis(200));
        assert_eq!(m.delay(60), Duration::from_millis(800));
        assert_eq!(m.delay(35), Duration::from_secs_f64(0.1 * 2f64.sqrt()));
        assert_eq!(m.delay(5000), LONGEST);
    }

    /// Vector's slow link (scale 1.0: 100 ms more per request in flight) and shallow knee
    /// (×1.1 per request past 10).
    #[test]
    fn vectors_linear_and_shallow_knee_terms() {
        let slow = LatencyModel {
            base: Duration::from_millis(100),
            knee: u32::MAX,
            linear: 1.0,
            ..LatencyModel::default()
        };
        assert_eq!(slow.delay(1), Duration::from_millis(100));
        assert_eq!(slow.delay(4), Duration::from_millis(400));
        let shallow = LatencyModel {
            base: Duration::from_millis(100),
            knee: 10,
            factor: 1.1,
            k: 1.0,
            ..LatencyModel::default()
        };
        assert_eq!(
            shallow.delay(12),
            Duration::from_secs_f64(0.1 * 1.1f64.powi(2))
        );
        let jittery = LatencyModel {
            jitter: 0.1,
            ..shallow
        };
        assert_eq!(jittery.delay_drawn(1, 2.0), Duration::from_millis(120));
    }
}
