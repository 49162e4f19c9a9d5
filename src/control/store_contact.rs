//! When a worker next talks to its lease store. Between contacts the keeper works from its
//! own deadlines; a contact is due when something needs the store (a renewal, an
//! acquisition, leases to give back) or a heartbeat period has passed. Each period is
//! drawn from 75–100% of the nominal one, so workers started together drift apart; after
//! a failure the next attempt waits the outage backoff (full jitter) whatever is needed,
//! so a fleet whose store restarts comes back spread over the backoff, not all at once.
//! Pure: the caller passes the time and the random source.

use std::time::Duration;

use rand::RngExt;
use tokio::time::Instant;

use crate::control::backoff::Backoff;

#[derive(Debug, Clone)]
pub struct StoreContact {
    period: Duration,
    backoff: Backoff,
    /// The next heartbeat, if nothing is needed before.
    heartbeat_at: Instant,
    /// Failed contacts in a row.
    failures: u32,
    /// While failing: the earliest next attempt.
    retry_at: Option<Instant>,
}

impl StoreContact {
    /// The first contact is due at once.
    pub fn new(period: Duration, backoff: Backoff, now: Instant) -> Self {
        StoreContact {
            period,
            backoff,
            heartbeat_at: now,
            failures: 0,
            retry_at: None,
        }
    }

    /// Whether to talk to the store at `now`; `needed`: the worker has something to ask.
    pub fn due(&self, now: Instant, needed: bool) -> bool {
        match self.retry_at {
            Some(at) => now >= at,
            None => needed || now >= self.heartbeat_at,
        }
    }

    /// The store answered at `now`.
    pub fn answered(&mut self, now: Instant, rng: &mut impl rand::Rng) {
        self.failures = 0;
        self.retry_at = None;
        self.heartbeat_at = now + self.period.mul_f64(rng.random_range(0.75..=1.0));
    }

    /// The store grants nothing before `at`: the next heartbeat comes then (spread over a
    /// tenth of the period after it, so a fleet does not ask all at once), unless one is
    /// due sooner.
    pub fn grants_at(&mut self, at: Instant, rng: &mut impl rand::Rng) {
        let at = at + self.period.mul_f64(rng.random_range(0.0..=0.1));
        self.heartbeat_at = self.heartbeat_at.min(at);
    }

    /// The store did not answer at `now`; returns the wait before the next attempt.
    pub fn failed(&mut self, now: Instant, rng: &mut impl rand::Rng) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let wait = self.backoff.delay(self.failures, rng);
        self.retry_at = Some(now + wait);
        wait
    }

    /// Failed contacts in a row (0: the store answered last).
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const PERIOD: Duration = Duration::from_secs(5);

    fn backoff() -> Backoff {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(5), 2.0)
    }

    #[tokio::test(start_paused = true)]
    async fn heartbeats_come_once_a_period_and_needs_come_at_once() {
        let t0 = Instant::now();
        let mut rng = StdRng::seed_from_u64(1);
        let mut c = StoreContact::new(PERIOD, backoff(), t0);
        assert!(c.due(t0, false), "the first contact is at once");
        c.answered(t0, &mut rng);
        assert!(!c.due(t0 + PERIOD.mul_f64(0.74), false));
        assert!(
            c.due(t0 + PERIOD.mul_f64(0.74), true),
            "a renewal does not wait"
        );
        assert!(
            c.due(t0 + PERIOD, false),
            "a heartbeat at most a period apart"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_that_grants_again_soon_is_asked_then_not_a_period_later() {
        let t0 = Instant::now();
        let mut rng = StdRng::seed_from_u64(5);
        let mut c = StoreContact::new(PERIOD, backoff(), t0);
        c.answered(t0, &mut rng);
        let grants = t0 + Duration::from_secs(2);
        c.grants_at(grants, &mut rng);
        assert!(!c.due(grants - Duration::from_millis(1), false));
        assert!(c.due(grants + PERIOD.mul_f64(0.1), false));
        // Later than the heartbeat: the heartbeat stands.
        let mut c = StoreContact::new(PERIOD, backoff(), t0);
        c.answered(t0, &mut rng);
        c.grants_at(t0 + PERIOD * 3, &mut rng);
        assert!(c.due(t0 + PERIOD, false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_fleet_started_together_spreads_its_heartbeats_over_a_quarter_period() {
        let t0 = Instant::now();
        let mut rng = StdRng::seed_from_u64(7);
        // 200 workers, all answered at the same instant: when is each one's next heartbeat?
        let mut at: Vec<Duration> = (0..200)
            .map(|_| {
                let mut c = StoreContact::new(PERIOD, backoff(), t0);
                c.answered(t0, &mut rng);
                let step = Duration::from_millis(10);
                let mut t = t0;
                while !c.due(t, false) {
                    t += step;
                }
                t - t0
            })
            .collect();
        at.sort();
        assert!(at[0] >= PERIOD.mul_f64(0.75) && at[199] <= PERIOD + Duration::from_millis(10));
        // Without the jitter all 200 would come in one instant; spread uniformly over
        // 1.25 s, a 100 ms holds 16 on average: none holds twice that.
        let busiest = (0..at.len())
            .map(|i| {
                at[i..]
                    .iter()
                    .take_while(|t| **t < at[i] + Duration::from_millis(100))
                    .count()
            })
            .max()
            .unwrap();
        assert!(busiest <= 32, "{busiest} of 200 in one 100 ms: {at:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_store_restart_the_fleet_retries_spread_out_and_needs_do_not_jump_the_queue() {
        let t0 = Instant::now();
        let mut rng = StdRng::seed_from_u64(3);
        let mut fleet: Vec<StoreContact> = (0..200)
            .map(|_| StoreContact::new(PERIOD, backoff(), t0))
            .collect();
        // The store went away: every worker fails, again and again, for 10 s.
        let mut attempts_per_100ms = std::collections::BTreeMap::<u64, u32>::new();
        let mut t = t0;
        while t < t0 + Duration::from_secs(10) {
            for c in &mut fleet {
                if c.due(t, true) {
                    c.failed(t, &mut rng);
                    *attempts_per_100ms
                        .entry((t - t0).as_millis() as u64 / 100)
                        .or_default() += 1;
                }
            }
            t += Duration::from_millis(10);
        }
        assert!(fleet.iter().all(|c| c.failures() >= 4));
        // Once the backoff has grown (past the first second), attempts are spread: no 100 ms
        // sees more than a fifth of the fleet, though every worker "needs" the store.
        let late: Vec<u32> = attempts_per_100ms.range(10..).map(|(_, n)| *n).collect();
        let worst = late.iter().max().copied().unwrap_or(0);
        assert!(worst <= 40, "{worst} attempts in one 100 ms: {late:?}");
        // Answered again: the failures are forgotten, and a need is served at once.
        let c = &mut fleet[0];
        c.answered(t, &mut rng);
        assert_eq!(c.failures(), 0);
        assert!(c.due(t, true));
    }
}
