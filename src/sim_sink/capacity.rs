//! The emulated database's capacity: a token bucket of records, refilled at `rate` per
//! second up to `burst`, full at start. A request takes one token per record, all or none.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Capacity {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Duration,
}

impl Capacity {
    pub fn new(rate: f64, burst: u32) -> Self {
        assert!(
            rate > 0.0 && burst > 0,
            "capacity and burst must be positive"
        );
        Capacity {
            rate,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            at: Duration::ZERO,
        }
    }

    /// Takes `n` records' worth if the bucket holds it now; otherwise says how long until
    /// it will. A request larger than the burst never fits: the answer is then the time to
    /// fill the bucket, as a database answers a batch beyond its per-request budget — the
    /// client has to split it.
    pub fn try_take(&mut self, n: u64, now: Duration) -> Result<(), Duration> {
        self.refill(now);
        let n = n as f64;
        if n <= self.tokens {
            self.tokens -= n;
            return Ok(());
        }
        let missing = n.min(self.burst) - self.tokens;
        let wait = if missing > 0.0 {
            missing / self.rate
        } else {
            self.burst / self.rate
        };
        Err(Duration::from_secs_f64(wait))
    }

    /// From `now` on, refills at `rate` (what was earned until then at the old rate stays).
    pub fn set_rate(&mut self, rate: f64, now: Duration) {
        assert!(rate > 0.0, "capacity must be positive");
        self.refill(now);
        self.rate = rate;
    }

    fn refill(&mut self, now: Duration) {
        if now > self.at {
            let gained = (now - self.at).as_secs_f64() * self.rate;
            self.tokens = (self.tokens + gained).min(self.burst);
            self.at = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn full_at_start_then_capacity_per_second() {
        let mut c = Capacity::new(800.0, 160);
        assert_eq!(c.try_take(160, ms(0)), Ok(()));
        assert_eq!(
            c.try_take(1, ms(0)),
            Err(Duration::from_secs_f64(1.0 / 800.0))
        );
        // 100 ms later: 80 records' worth.
        assert_eq!(c.try_take(100, ms(100)), Err(Duration::from_millis(25)));
        assert_eq!(c.try_take(80, ms(100)), Ok(()));
        // Over ten seconds of steady asks, 800 per second and no more.
        let mut taken = 0;
        for i in 1..=100u64 {
            if c.try_take(80, ms(100 + 100 * i)).is_ok() {
                taken += 80;
            }
        }
        assert_eq!(taken, 8000);
    }

    #[test]
    fn a_new_rate_applies_from_the_moment_it_is_set() {
        let mut c = Capacity::new(800.0, 160);
        assert_eq!(c.try_take(160, ms(0)), Ok(()));
        c.set_rate(100.0, ms(100));
        // 80 earned at 800/s before the change, 10 more at 100/s in the next 100 ms.
        assert_eq!(c.try_take(90, ms(200)), Ok(()));
        assert_eq!(c.try_take(10, ms(200)), Err(ms(100)));
    }

    #[test]
    fn never_beyond_the_burst() {
        let mut c = Capacity::new(800.0, 160);
        assert_eq!(c.try_take(0, ms(0)), Ok(()));
        assert_eq!(c.try_take(161, ms(10_000)), Err(ms(200)));
        assert_eq!(c.try_take(160, ms(10_000)), Ok(()));
        assert_eq!(c.try_take(161, ms(10_000)), Err(ms(200)));
    }
}
