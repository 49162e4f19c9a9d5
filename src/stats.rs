//! Counters shared by the pipeline, its deliveries and whoever reports on them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde::Serialize;

use crate::atomic_f64::AtomicF64;
use crate::control::bounded_by::{Bound, BoundedBy, ceiling_all_along, describe};
use crate::control::sink_limit::Unit;
use crate::source::Backlog;

#[derive(Debug, Default)]
pub struct Stats {
    pub pulled: AtomicU64,
    pub written: AtomicU64,
    pub duplicates: AtomicU64,
    /// Upsert mode: keys deleted; records refused by the version guard; records dropped
    /// for a newer version of their key in the same batch.
    pub deleted: AtomicU64,
    pub stale: AtomicU64,
    pub superseded: AtomicU64,
    /// Records the sink's own code chose not to store (a trigger returning NULL).
    pub skipped_by_sink: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub throttled: AtomicU64,
    /// Records a sink answering record by record refused for now (and were sent again).
    pub throttled_records: AtomicU64,
    pub retries: AtomicU64,
    /// Rows sent again after a write that got no answer.
    pub resent_unanswered: AtomicU64,
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
    /// Batches waiting for the dead-letter store to take their letters (it is failing).
    pub dead_letter_outages: AtomicU64,
    /// The cadence's current rate, records/s.
    pub rate_limit: AtomicF64,
    pub concurrency_limit: AtomicU64,
    pub leases_held: AtomicU64,
    /// Fresh throttle signals (at most one per tick; echoes do not count).
    pub rate_cuts: AtomicU64,
    /// What the sink takes per second as learned, per unit; 0 while unknown.
    pub sink_limits: SinkLimits,
    /// The unit bounding the rate: 0 none, else 1 + its index in [`Unit::ALL`].
    pub sink_limit_binding: AtomicU64,
    /// Records per request in the current plan.
    pub batch_records: AtomicU64,
    /// The share of the configured rate in force (1.0 until throttling changes it).
    pub rate_multiplier: AtomicF64,
    /// Throttles that said how long to wait, and the last such wait in milliseconds.
    pub retry_afters: AtomicU64,
    pub last_retry_after_ms: AtomicU64,
    /// Times the whole worker stopped sending because the sink throttled it.
    pub pauses: AtomicU64,
    /// Sink write latencies, for the p50/p95 in the summary.
    pub write_latency: LatencyHistogram,
    /// Records left in the source when the run ended (None inside: it cannot tell).
    pub remaining: std::sync::OnceLock<Option<u64>>,
    /// The run stopped because `--deadline` passed.
    pub deadline_reached: AtomicBool,
    /// New writes are held by a health probe or the operator: the leases see no demand.
    pub held: AtomicBool,
    /// What bounded the rate, tick by tick.
    pub bounded_by: std::sync::Mutex<BoundedBy>,
    /// Why the lease store cannot be used now (the worker holds no lease): /readyz says it.
    lease_outage: std::sync::Mutex<Option<String>>,
}

/// Records settled per outcome, `outcome` its label; [`Stats::settled`] counts them.
pub const ITEMS: &str = "sluice_sink_items_total";

/// What became of records the sink took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Written,
    Duplicate,
    Deleted,
    Stale,
    Superseded,
    SkippedBySink,
}

impl Settled {
    /// Its label in [`ITEMS`].
    pub fn label(self) -> &'static str {
        match self {
            Settled::Written => "written",
            Settled::Duplicate => "duplicate",
            Settled::Deleted => "deleted",
            Settled::Stale => "stale",
            Settled::Superseded => "superseded",
            Settled::SkippedBySink => "skipped_by_sink",
        }
    }
}

/// Latencies in buckets 5% apart from 0.1 ms to about 2 minutes: percentiles within 5%,
/// in constant memory, updated without locks.
#[derive(Debug)]
pub struct LatencyHistogram {
    buckets: Vec<AtomicU64>,
}

const LATENCY_BUCKETS: usize = 290;
const LATENCY_FIRST_S: f64 = 1e-4;
const LATENCY_GROWTH: f64 = 1.05;

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: (0..LATENCY_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl LatencyHistogram {
    pub fn record(&self, latency: Duration) {
        let s = latency.as_secs_f64().max(LATENCY_FIRST_S);
        let i = ((s / LATENCY_FIRST_S).ln() / LATENCY_GROWTH.ln()).ceil() as usize;
        self.buckets[i.min(LATENCY_BUCKETS - 1)].fetch_add(1, Relaxed);
    }

    /// The latency below which `q` of the writes finished (bucket upper bound); None if
    /// nothing was recorded.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(Duration::from_secs_f64(
                    LATENCY_FIRST_S * LATENCY_GROWTH.powi(i as i32),
                ));
            }
        }
        None
    }
}

/// One learned limit per unit, 0 while unknown.
#[derive(Debug)]
pub struct SinkLimits([AtomicF64; 3]);

impl Default for SinkLimits {
    fn default() -> Self {
        SinkLimits([
            AtomicF64::new(0.0),
            AtomicF64::new(0.0),
            AtomicF64::new(0.0),
        ])
    }
}

impl Stats {
    /// Sets (or clears, with None) why the lease store cannot be used now.
    pub fn set_lease_outage(&self, why: Option<String>) {
        *crate::lock::lock(&self.lease_outage) = why;
    }

    pub fn lease_outage(&self) -> Option<String> {
        crate::lock::lock(&self.lease_outage).clone()
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// Counts `n` records settled as `outcome`, in these counters and in [`ITEMS`] by the
    /// same call, so the summary and the metrics cannot disagree.
    pub fn settled(&self, outcome: Settled, n: u64) {
        metrics::counter!(ITEMS, "outcome" => outcome.label()).increment(n);
        let counter = match outcome {
            Settled::Written => &self.written,
            Settled::Duplicate => &self.duplicates,
            Settled::Deleted => &self.deleted,
            Settled::Stale => &self.stale,
            Settled::Superseded => &self.superseded,
            Settled::SkippedBySink => &self.skipped_by_sink,
        };
        Stats::add(counter, n);
    }

    pub fn sink_limit(&self, unit: Unit) -> &AtomicF64 {
        &self.sink_limits.0[unit as usize]
    }

    /// The unit bounding the rate now, if any.
    pub fn binding_unit(&self) -> Option<Unit> {
        let i = self.sink_limit_binding.load(Relaxed) as usize;
        i.checked_sub(1).and_then(|i| Unit::ALL.get(i).copied())
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

    /// Whether the source has records waiting, as far as anyone can tell: its backlog
    /// says so, or the last pull (or look at the source) found more than it took. Either
    /// may be stale; the one that saw records wins.
    pub fn has_backlog(&self) -> bool {
        let total = self.source_total.load(Relaxed);
        total > self.source_done.load(Relaxed) || !self.source_caught_up.load(Relaxed)
    }

    pub fn summary(&self, elapsed: Duration) -> Summary {
        Summary {
            pulled: self.pulled.load(Relaxed),
            written: self.written.load(Relaxed),
            dead_lettered: self.dead_lettered.load(Relaxed),
            duplicates: self.duplicates.load(Relaxed),
            deleted: self.deleted.load(Relaxed),
            stale: self.stale.load(Relaxed),
            superseded: self.superseded.load(Relaxed),
            skipped_by_sink: self.skipped_by_sink.load(Relaxed),
            throttled: self.throttled.load(Relaxed),
            throttled_records: self.throttled_records.load(Relaxed),
            retries: self.retries.load(Relaxed),
            resent_unanswered: self.resent_unanswered.load(Relaxed),
            write_p50_ms: self.write_latency.quantile(0.5).map(ms),
            write_p95_ms: self.write_latency.quantile(0.95).map(ms),
            elapsed_s: (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
            remaining: self.remaining.get().copied().flatten(),
            deadline_reached: self.deadline_reached.load(Relaxed),
            bounded_by: crate::lock::lock(&self.bounded_by).bounds(),
            error: None,
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
    /// Upsert mode: keys deleted (a tombstone version stored).
    pub deleted: u64,
    /// Upsert mode: records the version guard refused because their key already held a
    /// version at least as new: batches that completed out of order, redelivery after a
    /// crash, versions that arrived shuffled.
    pub stale: u64,
    /// Upsert mode: records left out because a newer version of their key was in the same
    /// batch (PostgreSQL updates a row once per statement).
    pub superseded: u64,
    /// Records the sink took but its own code chose not to store: a PostgreSQL trigger
    /// returning NULL, a DO INSTEAD rule. Neither written nor duplicates; acknowledged,
    /// since sending them again changes nothing.
    pub skipped_by_sink: u64,
    /// Writes the sink answered with "slow down".
    pub throttled: u64,
    /// Records a bulk answer refused for now and that were sent again alone (the rest of
    /// their request was taken).
    pub throttled_records: u64,
    /// Writes repeated after a transient failure or a throttle.
    pub retries: u64,
    /// Rows sent again after a write that got no answer (timed out, cut short, reset,
    /// refused): the sink may have stored them already, so they can come back as
    /// `duplicates`. An upper bound on the duplicates the worker itself caused.
    pub resent_unanswered: u64,
    /// Sink write latency percentiles (within 5%), milliseconds.
    pub write_p50_ms: Option<f64>,
    pub write_p95_ms: Option<f64>,
    pub elapsed_s: f64,
    /// What the next run will read, records pulled and never settled included (Kafka: end
    /// offsets − committed offsets of the partitions held; RabbitMQ: ready messages once
    /// the unsettled ones are back; file: lines from the checkpoint on); null when unknown.
    pub remaining: Option<u64>,
    /// `--deadline` stopped the run before the source was drained.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deadline_reached: bool,
    /// What bounded the rate and for what share of the run, the largest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bounded_by: Vec<Bound>,
    /// Why the run failed (exit 1 or 2); absent when it succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
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
            "pulled {} · written {} · duplicates {}{}{} · dead-lettered {} · throttled {} · retries {} · resent unanswered {} · {:.1} s ({:.0} rec/s){}{}{}",
            self.pulled,
            self.written,
            self.duplicates,
            if self.skipped_by_sink > 0 {
                format!(" · skipped by the sink {}", self.skipped_by_sink)
            } else {
                String::new()
            },
            if self.deleted + self.stale + self.superseded > 0 {
                format!(
                    " · deleted {} · stale {} · superseded {}",
                    self.deleted, self.stale, self.superseded
                )
            } else {
                String::new()
            },
            self.dead_lettered,
            self.throttled,
            self.retries,
            self.resent_unanswered,
            self.elapsed_s,
            rate,
            self.remaining
                .map_or(String::new(), |n| format!(" · {n} left in the source")),
            if self.deadline_reached {
                " · stopped at the deadline"
            } else {
                ""
            },
            if self.bounded_by.is_empty() {
                String::new()
            } else {
                let whole = if ceiling_all_along(&self.bounded_by) {
                    " (the whole run: raise it, or set it to \"auto\")"
                } else {
                    ""
                };
                format!(" · bounded by: {}{whole}", describe(&self.bounded_by))
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_percentiles_are_within_five_percent() {
        let h = LatencyHistogram::default();
        assert_eq!(h.quantile(0.5), None);
        for ms in 1..=100 {
            h.record(Duration::from_millis(ms));
        }
        let p50 = h.quantile(0.5).unwrap().as_secs_f64() * 1000.0;
        let p95 = h.quantile(0.95).unwrap().as_secs_f64() * 1000.0;
        assert!((50.0..=52.5).contains(&p50), "{p50}");
        assert!((95.0..=99.75).contains(&p95), "{p95}");
        h.record(Duration::from_secs(3600));
        assert!(
            h.quantile(1.0).unwrap() >= Duration::from_secs(100),
            "the last bucket takes the rest"
        );
    }
}
