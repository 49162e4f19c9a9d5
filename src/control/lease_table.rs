//! The capacity leases one worker holds, and what it should do next. A sink's capacity is
//! cut into equal partitions; a worker's rate is what it holds × the partition's rate +
//! a small reserved rate, never above the worker's own ceiling (`rate.records_per_second`
//! when it is set). Deadlines are local and conservative: a lease counts only until the
//! moment its grant/renewal was *requested* + ttl − a safety margin, so a worker stops
//! using a lease before the store could have handed it to someone else, whatever the
//! clocks of the workers say.
//!
//! Leases belong to a generation of the pool's definition (capacity, partitions). When the
//! definition changes (`sluice leases resize`), the worker drops every lease of the old
//! generation before it asks for new ones, and the store grants no new-generation lease
//! while an old one is unexpired: old and new leases never add up.
//!
//! A worker keeps only what it uses: the busiest second over a usage window (long enough
//! to see its bursts) says how many leases it needs; leases beyond that, held for a whole
//! window, are given back, and it does not ask again for a window unless it has nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::control::peak_usage::PeakUsage;

/// The rate counts as fully used above this share of it.
const FULLY_USED: f64 = 0.8;

/// A lease used for less than this share of its rate at the peak counts as unused.
const SLACK: f64 = 0.1;

/// What every worker sharing a pool must agree on; kept in the lease store.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolDefinition {
    /// Records per second the sink takes in total.
    pub capacity: f64,
    /// Equal leases the capacity is cut into.
    pub partitions: u32,
    /// Bumped by every change; a lease belongs to the generation it was granted under.
    pub generation: u32,
}

impl PoolDefinition {
    pub fn partition_rate(&self) -> f64 {
        self.capacity / f64::from(self.partitions.max(1))
    }
}

/// The pool as the store sees it, from this worker's point of view.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolView {
    /// Members that heartbeated within the ttl, this worker included.
    pub active_members: u32,
    /// Whether some other member wants more and holds less than the fair share.
    pub other_waiting: bool,
    /// Partitions that can be granted right now (none while old-generation leases live).
    pub free: u32,
    /// The pool's definition now.
    pub definition: PoolDefinition,
    /// The store grants nothing for this long (a Redis store after a restart): the worker
    /// asks again then, not a heartbeat period later.
    pub grants_in: Option<std::time::Duration>,
}

/// What the worker should ask the store for now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeasePlan {
    pub acquire: bool,
    pub renew: Vec<u32>,
    pub release: Vec<u32>,
}

/// This worker's settings, which other workers need not share.
#[derive(Debug, Clone, Copy)]
pub struct WorkerLimits {
    /// Records per second usable without a lease.
    pub reserved: f64,
    /// The worker's own ceiling, if it has one.
    pub ceiling: Option<f64>,
    pub ttl: Duration,
    /// Everything is given back after this long without a backlog.
    pub idle_grace: Duration,
    /// From a lease's local deadline until the sink has seen the last of its records (the
    /// keeper's round, the pipeline's tick, the sink's second): the store's expiry must be
    /// that much later, or the next holder's records and these share a second.
    pub last_use: Duration,
}

#[derive(Debug, Clone)]
pub struct LeaseTable {
    definition: PoolDefinition,
    limits: WorkerLimits,
    margin: Duration,
    /// partition → local deadline.
    held: BTreeMap<u32, Instant>,
    /// partition → when its last renewal was requested.
    requested: BTreeMap<u32, Instant>,
    idle_since: Option<Instant>,
    usage: PeakUsage,
    wants_more: bool,
    /// When a partition was last newly granted.
    last_grant: Option<Instant>,
    /// When leases were last given back for want of use.
    gave_back_at: Option<Instant>,
}

impl LeaseTable {
    pub fn new(definition: PoolDefinition, limits: WorkerLimits) -> Self {
        let (ttl, last_use) = (limits.ttl, limits.last_use);
        LeaseTable {
            definition,
            limits,
            // Enough for a slow round trip to the store, and for what was sent under the
            // lease to leave the sink's second before anyone else may use it; never more
            // than a third of the ttl.
            margin: (ttl / 10).max(last_use).min(ttl / 3),
            held: BTreeMap::new(),
            requested: BTreeMap::new(),
            idle_since: None,
            // Long enough to see bursts spaced up to a ttl (or the idle grace) apart.
            usage: PeakUsage::new(
                ttl.max(limits.idle_grace)
                    .max(crate::control::peak_usage::SPAN),
            ),
            wants_more: false,
            last_grant: None,
            gave_back_at: None,
        }
    }

    pub fn definition(&self) -> PoolDefinition {
        self.definition
    }

    pub fn partitions(&self) -> u32 {
        self.definition.partitions
    }

    /// Partitions usable at `now`.
    pub fn held(&self, now: Instant) -> Vec<u32> {
        self.held
            .iter()
            .filter(|(_, d)| **d > now)
            .map(|(p, _)| *p)
            .collect()
    }

    /// This worker's rate at `now`: only leases before their local deadline count, and
    /// never more than its ceiling.
    pub fn rate(&self, now: Instant) -> f64 {
        let leased =
            self.held(now).len() as f64 * self.definition.partition_rate() + self.limits.reserved;
        match self.limits.ceiling {
            Some(c) => leased.min(c),
            None => leased,
        }
    }

    /// The most leases this worker can use: beyond its ceiling a lease adds nothing.
    pub fn useful(&self) -> u32 {
        match self.limits.ceiling {
            None => self.definition.partitions,
            Some(c) => {
                let needed =
                    ((c - self.limits.reserved).max(0.0) / self.definition.partition_rate()).ceil();
                (needed as u32).min(self.definition.partitions)
            }
        }
    }

    /// The store granted (or renewed) `partition` for a request sent at `sent_at`.
    pub fn granted(&mut self, partition: u32, sent_at: Instant) {
        if !self.held.contains_key(&partition) {
            self.last_grant = Some(sent_at);
        }
        self.held
            .insert(partition, sent_at + self.limits.ttl - self.margin);
        self.requested.insert(partition, sent_at);
    }

    /// The store answered a renewal of `asked`, sent at `sent_at`, with `kept`; the rest
    /// were taken from us (they lapsed and someone else holds them, or their generation
    /// is over).
    pub fn renewed(&mut self, asked: &[u32], kept: &[u32], sent_at: Instant) {
        for p in asked {
            if kept.contains(p) {
                self.granted(*p, sent_at);
            } else {
                self.forget(*p);
            }
        }
    }

    pub fn forget(&mut self, partition: u32) {
        self.held.remove(&partition);
        self.requested.remove(&partition);
    }

    /// Drops leases past their local deadline; returns them.
    pub fn expire(&mut self, now: Instant) -> Vec<u32> {
        let gone: Vec<u32> = self
            .held
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(p, _)| *p)
            .collect();
        for p in &gone {
            self.forget(*p);
        }
        gone
    }

    /// Fair share: ⌈partitions / active members⌉.
    pub fn fair_share(&self, active_members: u32) -> u32 {
        self.definition.partitions.div_ceil(active_members.max(1))
    }

    /// Takes in what the worker did since the last round: `pulled` is the running count of
    /// records pulled, `backlog` whether the source has more. Returns whether it wants more
    /// leases (to tell the store before [`LeaseTable::plan`]). With a backlog and no lease
    /// it always does: a reserved rate alone may never look "fully used" (at 1 rec/s a
    /// round often pulls nothing), and an idle worker would then stay idle for good.
    pub fn observe(&mut self, now: Instant, pulled: u64, backlog: bool) -> bool {
        let recent = self.recent_rate(now, pulled);
        self.usage.record(now, pulled);
        let current = self.rate(now);
        let count = self.held(now).len() as u32;
        // Holding none is reason enough: a reserved rate alone may be too small to show as
        // fully used (and at 0 nothing is pulled to show anything).
        self.wants_more = backlog
            && count < self.useful()
            && (count == 0 || recent.is_none_or(|r| r >= FULLY_USED * current));
        if backlog {
            self.idle_since = None;
        } else if self.idle_since.is_none() {
            self.idle_since = Some(now);
        }
        self.wants_more
    }

    /// The rate since the previous sample; none in the first round (which then counts as
    /// fully used, so a worker with a backlog starts asking at once).
    fn recent_rate(&self, now: Instant, pulled: u64) -> Option<f64> {
        self.usage.last().map(|(t, n)| {
            pulled.saturating_sub(n) as f64 / now.duration_since(t).as_secs_f64().max(1e-3)
        })
    }

    /// Leases the busiest second of the usage window needed; `None` while the window is
    /// not yet covered or a lease was granted within it (it has not had a chance to show
    /// its use).
    fn needed(&self, now: Instant) -> Option<u32> {
        let window = self.usage.window();
        if !self.usage.covers(now)
            || self
                .last_grant
                .is_some_and(|t| now.duration_since(t) < window)
        {
            return None;
        }
        let peak = self.usage.peak()?;
        let leases = (peak - self.limits.reserved).max(0.0) / self.definition.partition_rate();
        Some((leases - SLACK).ceil().max(0.0) as u32)
    }

    /// Whether `partition`'s last renewal was requested at least `after` before `now`.
    fn renewal_due(&self, partition: u32, now: Instant, after: Duration) -> bool {
        self.requested
            .get(&partition)
            .is_none_or(|t| now.duration_since(*t) >= after)
    }

    /// Whether a lease held at `now` is due for renewal (a third of the ttl after the last).
    pub fn renewals_due(&self, now: Instant) -> bool {
        self.held(now)
            .into_iter()
            .any(|p| self.renewal_due(p, now, self.limits.ttl / 3))
    }

    /// Decides the next requests, from what [`LeaseTable::observe`] saw and the pool.
    pub fn plan(&mut self, now: Instant, pool: PoolView) -> LeasePlan {
        if pool.definition.generation != self.definition.generation {
            // A new definition: stop using every old lease before asking under the new one.
            let release: Vec<u32> = self.held.keys().copied().collect();
            for p in &release {
                self.forget(*p);
            }
            self.definition = pool.definition;
            self.usage.reset();
            self.last_grant = None;
            self.gave_back_at = None;
            return LeasePlan {
                acquire: false,
                renew: Vec::new(),
                release,
            };
        }
        self.expire(now);
        let held = self.held(now);
        // When one is due, those at least half due come along: a worker's leases then fall
        // due together, and one contact renews them all.
        let renew = if self.renewals_due(now) {
            held.iter()
                .copied()
                .filter(|p| self.renewal_due(*p, now, self.limits.ttl / 6))
                .collect()
        } else {
            Vec::new()
        };
        let idle = self
            .idle_since
            .is_some_and(|t| now.duration_since(t) >= self.limits.idle_grace);
        let share = self.fair_share(pool.active_members);
        let count = held.len() as u32;
        let keep = if idle {
            0
        } else {
            let mut keep = count.min(self.useful());
            if pool.other_waiting {
                keep = keep.min(share);
            }
            if let Some(needed) = self.needed(now)
                && needed < keep
            {
                keep = needed;
                self.gave_back_at = Some(now);
            }
            keep
        };
        let release: Vec<u32> = held
            .iter()
            .rev()
            .take((count - keep) as usize)
            .copied()
            .collect();
        let cooling = self
            .gave_back_at
            .is_some_and(|t| now.duration_since(t) < self.usage.window() && self.rate(now) > 0.0);
        let acquire = self.wants_more
            && release.is_empty()
            && !cooling
            && pool.free > 0
            && count < self.definition.partitions
            && (count < share || !pool.other_waiting);
        LeasePlan {
            acquire,
            renew: renew_minus(renew, &release),
            release,
        }
    }
}

fn renew_minus(renew: Vec<u32>, release: &[u32]) -> Vec<u32> {
    renew.into_iter().filter(|p| !release.contains(p)).collect()
}

#[cfg(test)]
mod tests;
