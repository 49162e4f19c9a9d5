//! The capacity leases one worker holds, and what it should do next. A sink's capacity is
//! cut into equal partitions; a worker's rate is what it holds × the partition's rate +
//! a small reserved rate. Deadlines are local and conservative: a lease counts only until
//! the moment its grant/renewal was *requested* + ttl − a safety margin, so a worker stops
//! using a lease before the store could have handed it to someone else, whatever the
//! clocks of the workers say.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// The pool as the store sees it, from this worker's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolView {
    /// Members that heartbeated within the ttl, this worker included.
    pub active_members: u32,
    /// Whether some other member wants more and holds less than the fair share.
    pub other_waiting: bool,
    /// Partitions nobody holds (or whose lease expired) right now.
    pub free: u32,
}

/// What the worker should ask the store for now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeasePlan {
    pub acquire: bool,
    pub renew: Vec<u32>,
    pub release: Vec<u32>,
}

#[derive(Debug, Clone)]
pub struct LeaseTable {
    partitions: u32,
    partition_rate: f64,
    reserved: f64,
    ttl: Duration,
    margin: Duration,
    idle_grace: Duration,
    /// partition → local deadline.
    held: BTreeMap<u32, Instant>,
    /// partition → when its last renewal was requested.
    requested: BTreeMap<u32, Instant>,
    idle_since: Option<Instant>,
}

impl LeaseTable {
    pub fn new(
        capacity: f64,
        partitions: u32,
        reserved: f64,
        ttl: Duration,
        idle_grace: Duration,
    ) -> Self {
        assert!(partitions > 0);
        LeaseTable {
            partitions,
            partition_rate: capacity / f64::from(partitions),
            reserved,
            ttl,
            // Enough to cover a slow round trip to the store, never more than a third of the ttl.
            margin: (ttl / 10).clamp(Duration::from_millis(200), ttl / 3),
            idle_grace,
            held: BTreeMap::new(),
            requested: BTreeMap::new(),
            idle_since: None,
        }
    }

    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// Partitions usable at `now`.
    pub fn held(&self, now: Instant) -> Vec<u32> {
        self.held
            .iter()
            .filter(|(_, d)| **d > now)
            .map(|(p, _)| *p)
            .collect()
    }

    /// This worker's rate at `now`: only leases before their local deadline count.
    pub fn rate(&self, now: Instant) -> f64 {
        self.held(now).len() as f64 * self.partition_rate + self.reserved
    }

    /// The store granted (or renewed) `partition` for a request sent at `sent_at`.
    pub fn granted(&mut self, partition: u32, sent_at: Instant) {
        self.held
            .insert(partition, sent_at + self.ttl - self.margin);
        self.requested.insert(partition, sent_at);
    }

    /// The store answered a renewal of `asked`, sent at `sent_at`, with `kept`; the rest
    /// were taken from us (they lapsed and someone else holds them).
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
        self.partitions.div_ceil(active_members.max(1))
    }

    /// Decides the next requests. `wants_more`: the source has a backlog and the current
    /// rate is fully used.
    pub fn plan(&mut self, now: Instant, wants_more: bool, pool: PoolView) -> LeasePlan {
        self.expire(now);
        let held = self.held(now);
        let renew = held
            .iter()
            .copied()
            .filter(|p| {
                self.requested
                    .get(p)
                    .is_none_or(|t| now.duration_since(*t) >= self.ttl / 3)
            })
            .collect();
        if wants_more {
            self.idle_since = None;
        } else if self.idle_since.is_none() {
            self.idle_since = Some(now);
        }
        let idle = self
            .idle_since
            .is_some_and(|t| now.duration_since(t) >= self.idle_grace);
        let share = self.fair_share(pool.active_members);
        let count = held.len() as u32;
        let release: Vec<u32> = if idle {
            held.clone()
        } else if pool.other_waiting && count > share {
            held.iter()
                .rev()
                .take((count - share) as usize)
                .copied()
                .collect()
        } else {
            Vec::new()
        };
        let acquire = wants_more
            && release.is_empty()
            && pool.free > 0
            && count < self.partitions
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
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(15);

    fn table() -> LeaseTable {
        LeaseTable::new(800.0, 8, 10.0, TTL, Duration::from_secs(5))
    }

    fn pool(active: u32, other_waiting: bool, free: u32) -> PoolView {
        PoolView {
            active_members: active,
            other_waiting,
            free,
        }
    }

    #[test]
    fn rate_is_held_leases_times_partition_rate_plus_reserved() {
        let t0 = Instant::now();
        let mut t = table();
        assert_eq!(t.rate(t0), 10.0);
        t.granted(3, t0);
        t.granted(5, t0);
        assert_eq!(t.rate(t0), 210.0);
        t.forget(3);
        assert_eq!(t.rate(t0), 110.0);
    }

    #[test]
    fn a_lease_lapses_locally_before_the_store_could_reassign_it() {
        let t0 = Instant::now();
        let mut t = table();
        t.granted(1, t0);
        // margin = ttl / 10 = 1.5 s
        assert_eq!(t.rate(t0 + Duration::from_millis(13_499)), 110.0);
        assert_eq!(t.rate(t0 + Duration::from_millis(13_500)), 10.0);
        assert_eq!(t.expire(t0 + Duration::from_secs(14)), vec![1]);
        assert!(t.held(t0 + Duration::from_secs(14)).is_empty());
    }

    #[test]
    fn renews_every_third_of_the_ttl_and_keeps_the_lease() {
        let t0 = Instant::now();
        let mut t = table();
        t.granted(2, t0);
        assert!(
            t.plan(t0 + Duration::from_secs(4), true, pool(1, false, 0))
                .renew
                .is_empty()
        );
        let at = t0 + Duration::from_secs(5);
        let plan = t.plan(at, true, pool(1, false, 0));
        assert_eq!(plan.renew, vec![2]);
        t.renewed(&[2], &[2], at);
        assert_eq!(
            t.held(t0 + Duration::from_secs(18)),
            vec![2],
            "renewed at 5 s: good until 18.5 s"
        );
    }

    #[test]
    fn a_renewal_the_store_refused_drops_the_lease() {
        let t0 = Instant::now();
        let mut t = table();
        t.granted(2, t0);
        t.granted(4, t0);
        t.renewed(&[2, 4], &[4], t0 + Duration::from_secs(5));
        assert_eq!(t.held(t0 + Duration::from_secs(6)), vec![4]);
    }

    #[test]
    fn acquires_while_it_has_demand_up_to_the_fair_share_when_others_wait() {
        let t0 = Instant::now();
        let mut t = table();
        assert!(t.plan(t0, true, pool(3, true, 8)).acquire);
        for p in 0..3 {
            t.granted(p, t0);
        }
        // ⌈8/3⌉ = 3: another member waits, so no more.
        assert!(!t.plan(t0, true, pool(3, true, 5)).acquire);
        // Nobody else wants more: take what is free.
        assert!(t.plan(t0, true, pool(3, false, 5)).acquire);
        // Nothing free: nothing to ask for.
        assert!(!t.plan(t0, true, pool(3, false, 0)).acquire);
    }

    #[test]
    fn gives_back_what_exceeds_the_fair_share_when_another_member_waits() {
        let t0 = Instant::now();
        let mut t = table();
        for p in 0..8 {
            t.granted(p, t0);
        }
        let plan = t.plan(t0, true, pool(2, true, 0));
        assert_eq!(plan.release.len(), 4, "⌈8/2⌉ = 4 stay");
        assert!(!plan.acquire);
        assert!(plan.renew.iter().all(|p| !plan.release.contains(p)));
    }

    #[test]
    fn releases_everything_after_the_idle_grace() {
        let t0 = Instant::now();
        let mut t = table();
        t.granted(0, t0);
        t.granted(1, t0);
        assert!(t.plan(t0, false, pool(1, false, 6)).release.is_empty());
        assert!(
            t.plan(t0 + Duration::from_secs(4), false, pool(1, false, 6))
                .release
                .is_empty()
        );
        let plan = t.plan(t0 + Duration::from_secs(5), false, pool(1, false, 6));
        assert_eq!(plan.release, vec![0, 1]);
        assert!(!plan.acquire);
        // Demand again: the idle clock restarts.
        assert!(
            t.plan(t0 + Duration::from_secs(6), true, pool(1, false, 6))
                .release
                .is_empty()
        );
    }

    #[test]
    fn fair_share_rounds_up() {
        let t = table();
        assert_eq!(t.fair_share(3), 3);
        assert_eq!(t.fair_share(1), 8);
        assert_eq!(t.fair_share(0), 8);
        assert_eq!(t.fair_share(9), 1);
    }
}
