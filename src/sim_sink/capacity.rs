//! The emulated database's capacity: a token bucket refilled at `rate` per second up to
//! `burst`, full at start, counting one [`BucketUnit`] — records, requests or request-body bytes,
//! the three things real sinks limit (a database's rows, an API gateway's requests, a
//! Kinesis-style byte quota). A request takes its cost in tokens, all or none.

use std::time::Duration;

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

/// What the bucket counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BucketUnit {
    /// Each record in the request costs one token.
    #[default]
    Records,
    /// Each request costs one token, whatever it carries.
    Requests,
    /// Each byte of the HTTP request body costs one token.
    Bytes,
}

impl BucketUnit {
    /// Tokens a request of `records` records in `body_bytes` bytes costs.
    pub fn cost(self, records: u64, body_bytes: u64) -> u64 {
        match self {
            BucketUnit::Records => records,
            BucketUnit::Requests => 1,
            BucketUnit::Bytes => body_bytes,
        }
    }

    /// For messages: "rec/s", "req/s", "B/s".
    pub fn per_second(self) -> &'static str {
        match self {
            BucketUnit::Records => "rec/s",
            BucketUnit::Requests => "req/s",
            BucketUnit::Bytes => "B/s",
        }
    }

    /// The quota unit of the IETF RateLimit-Policy field (draft-ietf-httpapi-ratelimit-headers
    /// defines "requests" and "content-bytes"; "records" is this emulator's extension).
    pub fn quota_unit(self) -> &'static str {
        match self {
            BucketUnit::Records => "records",
            BucketUnit::Requests => "requests",
            BucketUnit::Bytes => "content-bytes",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Capacity {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Duration,
}

/// Shortfalls below this many tokens are rounding, not a shortage.
const TOKEN_RESIDUE: f64 = 1e-9;

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

    /// Takes `n` tokens if the bucket holds them now; otherwise says how long until it
    /// will. A request costing more than the burst never fits: the answer is then the time
    /// to fill the bucket, as a database answers a batch beyond its per-request budget —
    /// the client has to split it.
    pub fn try_take(&mut self, n: u64, now: Duration) -> Result<(), Duration> {
        self.refill(now);
        let n = n as f64;
        // A float's residue short of a whole token is a token: refusing it would answer
        // "wait 0 ns", and a client taking that at its word would spin.
        if n <= self.tokens + TOKEN_RESIDUE {
            self.tokens -= n;
            return Ok(());
        }
        let missing = n.min(self.burst) - self.tokens;
        let wait = if missing > 0.0 {
            missing / self.rate
        } else {
            self.burst / self.rate
        };
        // Rounded up to the nanosecond: rounded down, a shortfall of a float's residue
        // would be "wait 0 ns" again (82,640 bytes/s: residues above `TOKEN_RESIDUE`).
        Err(Duration::from_nanos((wait * 1e9).ceil() as u64))
    }

    /// Takes as many of `n` tokens as the bucket holds now (a write queue taking the
    /// documents it has room for); returns how many.
    pub fn take_up_to(&mut self, n: u64, now: Duration) -> u64 {
        self.refill(now);
        let taken = ((self.tokens + TOKEN_RESIDUE).floor() as u64).min(n);
        self.tokens -= taken as f64;
        taken
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

    use crate::testing::ms;

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

    /// Refilled in steps whose sum misses a whole token by a float's residue, the bucket
    /// still holds that token: refused, it would answer "retry in 0 ns".
    #[test]
    fn a_residue_short_of_a_token_is_a_token() {
        let mut c = Capacity::new(4.0, 4);
        let mut at = Duration::ZERO;
        let mut refused = Vec::new();
        for _ in 0..16 {
            at += ms(200);
            if let Err(wait) = c.try_take(1, at) {
                refused.push(wait);
            }
        }
        assert!(refused.iter().all(|w| !w.is_zero()), "{refused:?}");
        assert_eq!(c.take_up_to(1, at + ms(250)), 1);
    }

    /// At a byte-sized rate a float's residue exceeds `TOKEN_RESIDUE`: the wait is rounded
    /// up, so the write fits once it has passed (rounded down it was 0 ns, and the
    /// fake-clock model of a bytes-limited sink at 82,640 bytes/s spun on it).
    #[test]
    fn a_refused_write_fits_once_its_wait_has_passed() {
        for k in 0..40 {
            let mut c = Capacity::new(80_000.0 * (1.0 + 0.011 * f64::from(k)), 80_000);
            let mut at = Duration::ZERO;
            for _ in 0..400 {
                at += ms(20);
                if let Err(wait) = c.try_take(6_700, at) {
                    assert!(!wait.is_zero(), "rate {}", c.rate);
                    at += wait;
                    assert_eq!(c.try_take(6_700, at), Ok(()), "rate {}", c.rate);
                }
            }
        }
    }

    #[test]
    fn never_beyond_the_burst() {
        let mut c = Capacity::new(800.0, 160);
        assert_eq!(c.try_take(0, ms(0)), Ok(()));
        assert_eq!(c.try_take(161, ms(10_000)), Err(ms(200)));
        assert_eq!(c.try_take(160, ms(10_000)), Ok(()));
        assert_eq!(c.try_take(161, ms(10_000)), Err(ms(200)));
    }

    /// Feeds `requests` of `records` records in `bytes` bytes each, one every `every`, to a
    /// bucket counting `unit`; returns how many were taken.
    fn taken(unit: BucketUnit, rate: f64, burst: u32, records: u64, bytes: u64, every: u64) -> u64 {
        let mut c = Capacity::new(rate, burst);
        (0..1000u64)
            .filter(|i| c.try_take(unit.cost(records, bytes), ms(every * i)).is_ok())
            .count() as u64
    }

    #[test]
    fn records_count_the_records_whatever_the_requests() {
        // 20 requests/s of 50 records in 2 kB into 500 rec/s: from the first ask to the
        // last (49.95 s) 24,975 records earned plus the burst of 1,000, in 50s: 519.
        assert_eq!(taken(BucketUnit::Records, 500.0, 1000, 50, 2000, 50), 519);
        // The same records in one request a second go through whole.
        assert_eq!(
            taken(BucketUnit::Records, 500.0, 1000, 500, 20_000, 1000),
            1000
        );
    }

    #[test]
    fn requests_count_one_each_whatever_they_carry() {
        // 20 requests/s, burst 10, asked 50 a second: over 19.98 s, 399.6 earned plus the
        // burst; the same with 1 record or 1000 in each.
        assert_eq!(taken(BucketUnit::Requests, 20.0, 10, 1, 60, 20), 409);
        assert_eq!(taken(BucketUnit::Requests, 20.0, 10, 1000, 60_000, 20), 409);
        // Asked at the limit or below, nothing is refused.
        assert_eq!(taken(BucketUnit::Requests, 20.0, 10, 100, 6000, 50), 1000);
        let mut c = Capacity::new(20.0, 10);
        for _ in 0..10 {
            assert_eq!(
                c.try_take(BucketUnit::Requests.cost(5000, 1 << 20), ms(0)),
                Ok(())
            );
        }
        // The eleventh waits for one token: 50 ms at 20/s.
        assert_eq!(c.try_take(1, ms(0)), Err(ms(50)));
    }

    #[test]
    fn bytes_count_the_body() {
        // 10 kB/s, burst 10 kB, bodies of 1 kB every 50 ms (20 kB/s asked): over 49.95 s,
        // 499.5 kB earned plus the burst; whatever the records they hold.
        assert_eq!(taken(BucketUnit::Bytes, 10_000.0, 10_000, 1, 1000, 50), 509);
        assert_eq!(
            taken(BucketUnit::Bytes, 10_000.0, 10_000, 40, 1000, 50),
            509
        );
        // 2 kB every 100 ms over 99.9 s: 1,009 kB in bodies of 2 kB.
        assert_eq!(
            taken(BucketUnit::Bytes, 10_000.0, 10_000, 1, 2000, 100),
            504
        );
    }

    #[test]
    fn a_request_over_the_burst_waits_for_a_full_bucket_in_any_unit() {
        // 10 kB/s, burst 4 kB: a 5 kB body never fits; the answer is the time to fill.
        let mut c = Capacity::new(10_000.0, 4000);
        assert_eq!(
            c.try_take(BucketUnit::Bytes.cost(1, 5000), ms(0)),
            Err(ms(400))
        );
        assert_eq!(c.try_take(BucketUnit::Bytes.cost(1, 4000), ms(0)), Ok(()));
        assert_eq!(
            c.try_take(BucketUnit::Bytes.cost(1, 5000), ms(0)),
            Err(ms(400))
        );
        // A request is never over a burst of requests.
        let mut c = Capacity::new(1.0, 1);
        assert_eq!(
            c.try_take(BucketUnit::Requests.cost(1_000_000, 1 << 30), ms(0)),
            Ok(())
        );
    }
}
