//! How long the emulated database takes to answer, as the test server of the
//! exponential-backoff article does: `base` up to `knee` concurrent requests, then
//! `base × factor^((concurrency − knee) / k)` — a database that slows down sharply once
//! too many requests compete, which is what makes retry storms self-sustaining.

use std::time::Duration;

/// No answer takes longer than this, however deep the overload.
const LONGEST: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyModel {
    pub base: Duration,
    pub knee: u32,
    pub factor: f64,
    pub k: f64,
}

impl LatencyModel {
    pub fn delay(&self, concurrency: u32) -> Duration {
        if concurrency <= self.knee {
            return self.base;
        }
        let over = f64::from(concurrency - self.knee) / self.k;
        let secs = self.base.as_secs_f64() * self.factor.powf(over);
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
        };
        assert_eq!(m.delay(0), Duration::from_millis(100));
        assert_eq!(m.delay(30), Duration::from_millis(100));
        assert_eq!(m.delay(40), Duration::from_millis(200));
        assert_eq!(m.delay(60), Duration::from_millis(800));
        assert_eq!(m.delay(35), Duration::from_secs_f64(0.1 * 2f64.sqrt()));
        assert_eq!(m.delay(5000), LONGEST);
    }
}
