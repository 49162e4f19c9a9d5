//! Counters shared by the pipeline, its deliveries and whoever reports on them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde::Serialize;

use crate::source::Backlog;

#[derive(Debug, Default)]
pub struct Stats {
    pub pulled: AtomicU64,
    pub written: AtomicU64,
    pub duplicates: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub throttled: AtomicU64,
    pub retries: AtomicU64,
    pub batches_in_flight: AtomicU64,
    /// Source progress in bytes (file) or records (queue): consumed so far, and in all.
    pub source_done: AtomicU64,
    pub source_total: AtomicU64,
    pub source_in_bytes: AtomicBool,
    /// The last pull found nothing more to read.
    pub source_caught_up: AtomicBool,
    /// The source is connected (a queue) or readable (a file).
    pub source_up: AtomicBool,
    /// Shutdown was requested: no more pulls.
    pub stopping: AtomicBool,
    /// The cadence's current rate, records/s (f64 bits).
    pub rate_limit: AtomicU64,
    pub concurrency_limit: AtomicU64,
    pub leases_held: AtomicU64,
    /// Throttle signals that cut the rate (at most one per tick; echoes do not count).
    pub rate_cuts: AtomicU64,
    /// The share of the configured rate in force.
    pub rate_multiplier: RateMultiplier,
    /// Throttles that said how long to wait, and the last such wait in milliseconds.
    pub retry_afters: AtomicU64,
    pub last_retry_after_ms: AtomicU64,
    /// Times the whole worker stopped sending because the sink throttled it.
    pub pauses: AtomicU64,
}

/// A share in (0, 1], kept as the bits of an `f64`; 1.0 until throttling changes it.
#[derive(Debug)]
pub struct RateMultiplier(AtomicU64);

impl Default for RateMultiplier {
    fn default() -> Self {
        RateMultiplier(AtomicU64::new(1.0f64.to_bits()))
    }
}

impl RateMultiplier {
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Relaxed))
    }

    pub fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Relaxed);
    }
}

impl Stats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub fn set_backlog(&self, backlog: Backlog) {
        match backlog {
            Backlog::Bytes { done, total } => {
                self.source_in_bytes.store(true, Relaxed);
                self.source_done.store(done, Relaxed);
                self.source_total.store(total, Relaxed);
            }
            Backlog::Records(left) => {
                let done = self.pulled.load(Relaxed);
                self.source_in_bytes.store(false, Relaxed);
                self.source_done.store(done, Relaxed);
                self.source_total.store(done + left, Relaxed);
            }
            Backlog::Unknown => self.source_total.store(0, Relaxed),
        }
    }

    pub fn set_rate_limit(&self, rate: f64) {
        self.rate_limit.store(rate.to_bits(), Relaxed);
    }

    pub fn rate_limit(&self) -> f64 {
        f64::from_bits(self.rate_limit.load(Relaxed))
    }

    /// Whether the source has records waiting, as far as anyone can tell: its backlog
    /// when it reports one, else "the last pull did not catch up".
    pub fn has_backlog(&self) -> bool {
        let total = self.source_total.load(Relaxed);
        if total > 0 {
            total > self.source_done.load(Relaxed)
        } else {
            !self.source_caught_up.load(Relaxed)
        }
    }

    pub fn summary(&self, elapsed: Duration) -> Summary {
        Summary {
            pulled: self.pulled.load(Relaxed),
            written: self.written.load(Relaxed),
            dead_lettered: self.dead_lettered.load(Relaxed),
            duplicates: self.duplicates.load(Relaxed),
            throttled: self.throttled.load(Relaxed),
            retries: self.retries.load(Relaxed),
            elapsed_s: (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
        }
    }
}

/// What a run did, printed at the end (`--summary json` prints exactly this object).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    pub pulled: u64,
    /// Rows newly inserted.
    pub written: u64,
    pub dead_lettered: u64,
    /// Records whose key was already in the sink (redelivery or a repeated load).
    pub duplicates: u64,
    /// Writes the sink answered with "slow down".
    pub throttled: u64,
    /// Writes repeated after a transient failure or a throttle.
    pub retries: u64,
    pub elapsed_s: f64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rate = if self.elapsed_s > 0.0 {
            self.pulled as f64 / self.elapsed_s
        } else {
            0.0
        };
        write!(
            f,
            "pulled {} · written {} · duplicates {} · dead-lettered {} · throttled {} · retries {} · {:.1} s ({:.0} rec/s)",
            self.pulled,
            self.written,
            self.duplicates,
            self.dead_lettered,
            self.throttled,
            self.retries,
            self.elapsed_s,
            rate
        )
    }
}
