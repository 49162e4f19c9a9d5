//! Peak-EWMA latency (Finagle, tower): jumps up at once on a slow response, decays toward
//! faster ones with a time constant. Used as `latency × (in-flight + 1)`, it steers work
//! away from an endpoint the moment it slows down and back only as it proves fast again.

use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct PeakEwma {
    decay: Duration,
    /// Seconds.
    estimate: f64,
    stamp: Instant,
}

impl PeakEwma {
    /// `initial`: the latency assumed before anything was measured.
    pub fn new(initial: Duration, decay: Duration, now: Instant) -> Self {
        PeakEwma {
            decay,
            estimate: initial.as_secs_f64(),
            stamp: now,
        }
    }

    pub fn observe(&mut self, rtt: Duration, now: Instant) {
        let rtt = rtt.as_secs_f64();
        if rtt > self.estimate {
            self.estimate = rtt;
        } else {
            let w = self.weight(now);
            self.estimate = self.estimate * w + rtt * (1.0 - w);
        }
        self.stamp = self.stamp.max(now);
    }

    /// The share of the old estimate kept after the time since the last observation.
    fn weight(&self, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.stamp).as_secs_f64();
        (-elapsed / self.decay.as_secs_f64().max(1e-9)).exp()
    }

    pub fn estimate(&self) -> Duration {
        Duration::from_secs_f64(self.estimate)
    }

    /// The load an endpoint shows: estimated latency × (requests in flight + 1).
    pub fn load(&self, in_flight: usize) -> f64 {
        self.estimate * (in_flight as f64 + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::ms;

    #[test]
    fn rises_at_once_and_decays_with_the_configured_time() {
        let t0 = Instant::now();
        let mut e = PeakEwma::new(ms(10), Duration::from_secs(10), t0);
        e.observe(ms(10), t0);
        e.observe(ms(200), t0 + ms(1));
        assert_eq!(e.estimate(), ms(200), "a slow response counts at once");
        // A fast response 10 s (one decay time) later keeps e^-1 of the peak.
        e.observe(ms(10), t0 + ms(1) + Duration::from_secs(10));
        let expected = 0.200 * (-1f64).exp() + 0.010 * (1.0 - (-1f64).exp());
        assert!(
            (e.estimate().as_secs_f64() - expected).abs() < 1e-6,
            "{:?}",
            e.estimate()
        );
        // Fast responses in quick succession barely move it.
        let before = e.estimate();
        e.observe(ms(10), t0 + Duration::from_secs(10) + ms(2));
        assert!(before - e.estimate() < ms(1));
    }

    #[test]
    fn load_scales_with_work_in_flight() {
        let e = PeakEwma::new(ms(50), Duration::from_secs(10), Instant::now());
        assert!((e.load(0) - 0.05).abs() < 1e-9);
        assert!((e.load(3) - 0.2).abs() < 1e-9);
    }
}
