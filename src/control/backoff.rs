//! Exponential backoff with full jitter: retries from many workers spread out instead of
//! arriving together and keeping a recovering sink down.

use std::time::Duration;

use rand::RngExt;

#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    factor: f64,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration, factor: f64) -> Self {
        Backoff { min, max, factor }
    }

    /// The ceiling of the wait before retry number `attempt` (1 = first retry):
    /// `min × factor^(attempt-1)`, capped at `max`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let exp = self.factor.powi(attempt.saturating_sub(1).min(1000) as i32);
        let secs = (self.min.as_secs_f64() * exp).min(self.max.as_secs_f64());
        Duration::from_secs_f64(secs)
    }

    /// A wait drawn uniformly from `[min, ceiling(attempt)]`: full jitter, but never below
    /// `min` so a retry storm cannot start from zero-length waits.
    pub fn delay(&self, attempt: u32, rng: &mut impl rand::Rng) -> Duration {
        let hi = self.ceiling(attempt).as_secs_f64();
        let lo = self.min.as_secs_f64().min(hi);
        Duration::from_secs_f64(if hi > lo {
            rng.random_range(lo..=hi)
        } else {
            hi
        })
    }

    /// A wait drawn uniformly from `[ceiling(attempt) / 2, ceiling(attempt)]` (and never
    /// below `min`): "equal jitter". For a pause that stops the whole worker, the guaranteed
    /// half keeps its attempts provably sparse during an outage, while the random half still
    /// keeps many workers from returning together.
    pub fn half_jitter(&self, attempt: u32, rng: &mut impl rand::Rng) -> Duration {
        let hi = self.ceiling(attempt).as_secs_f64();
        let lo = (hi / 2.0).max(self.min.as_secs_f64()).min(hi);
        Duration::from_secs_f64(if hi > lo {
            rng.random_range(lo..=hi)
        } else {
            hi
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn ceilings_grow_by_factor_and_stop_at_max() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(30), 2.0);
        let c: Vec<u128> = (1..=11).map(|a| b.ceiling(a).as_millis()).collect();
        assert_eq!(
            c,
            [
                100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000
            ]
        );
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn delays_stay_within_bounds_and_vary() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(30), 2.0);
        let mut rng = StdRng::seed_from_u64(7);
        for attempt in 1..20 {
            let d: Vec<Duration> = (0..50).map(|_| b.delay(attempt, &mut rng)).collect();
            assert!(
                d.iter()
                    .all(|x| *x >= Duration::from_millis(100) && *x <= b.ceiling(attempt))
            );
            if attempt > 2 {
                assert!(d.iter().any(|x| *x != d[0]), "jittered");
            }
        }
    }

    #[test]
    fn delay_sequence_stays_under_the_ceilings() {
        // One retry sequence, as a delivery draws it: every wait within its attempt's bounds,
        // so the time to reach attempt n is at most the sum of the first n ceilings.
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(30), 2.0);
        for seed in 0..20 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut total = Duration::ZERO;
            for attempt in 1..=12 {
                let d = b.delay(attempt, &mut rng);
                assert!(d >= Duration::from_millis(100) && d <= b.ceiling(attempt));
                total += d;
            }
            let ceilings: Duration = (1..=12).map(|a| b.ceiling(a)).sum();
            assert!(total <= ceilings && total >= Duration::from_millis(1200));
        }
    }

    #[test]
    fn half_jitter_keeps_at_least_half_the_ceiling() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(30), 2.0);
        let mut rng = StdRng::seed_from_u64(11);
        assert_eq!(b.half_jitter(1, &mut rng), Duration::from_millis(100));
        for attempt in 2..16 {
            let c = b.ceiling(attempt);
            let d: Vec<Duration> = (0..50).map(|_| b.half_jitter(attempt, &mut rng)).collect();
            assert!(
                d.iter().all(|x| *x >= c / 2 && *x <= c),
                "attempt {attempt}"
            );
            assert!(d.iter().any(|x| *x != d[0]), "jittered");
        }
    }
}
