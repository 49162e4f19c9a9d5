//! Picks the endpoint for the next batch. Only available endpoints are candidates (not
//! marked down, not throttled); those in the worker's zone come first, the others only
//! when none there is available. A failing endpoint is marked down and probed again after
//! an exponential backoff capped by the configured ceiling (`throttle.max_pause`), so an
//! endpoint that is back is noticed within that time; a throttled one is paused until its
//! Retry-After, alone.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::peak_ewma::PeakEwma;
use crate::control::backoff::Backoff;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    RoundRobin,
    LeastLoaded,
    P2c,
    #[default]
    P2cEwma,
}

#[derive(Debug, Clone)]
pub struct EndpointState {
    pub zone: Option<String>,
    pub in_flight: usize,
    pub latency: PeakEwma,
    /// Unavailable until then: down (connection failures) or throttled.
    pub down_until: Option<Instant>,
    pub throttled_until: Option<Instant>,
    /// The last throttle named its wait (Retry-After) rather than just saying "not now".
    pub throttle_named_wait: bool,
    pub failures: u32,
    pub requests: u64,
}

impl EndpointState {
    fn available(&self, now: Instant) -> bool {
        self.down_until.is_none_or(|t| now >= t) && self.throttled_until.is_none_or(|t| now >= t)
    }

    pub fn is_down(&self, now: Instant) -> bool {
        self.down_until.is_some_and(|t| now < t)
    }
}

pub struct Balancer {
    strategy: Strategy,
    zone: Option<String>,
    endpoints: Vec<EndpointState>,
    next: usize,
    rng: StdRng,
    backoff: Backoff,
}

impl Balancer {
    /// `zones[i]` is endpoint i's zone; `initial` the latency assumed before any answer.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        strategy: Strategy,
        zone: Option<String>,
        zones: Vec<Option<String>>,
        initial: Duration,
        decay: Duration,
        backoff: Backoff,
        seed: u64,
        now: Instant,
    ) -> Self {
        let endpoints = zones
            .into_iter()
            .map(|zone| EndpointState {
                zone,
                in_flight: 0,
                latency: PeakEwma::new(initial, decay, now),
                down_until: None,
                throttled_until: None,
                throttle_named_wait: false,
                failures: 0,
                requests: 0,
            })
            .collect();
        Balancer {
            strategy,
            zone,
            endpoints,
            next: 0,
            rng: StdRng::seed_from_u64(seed),
            backoff,
        }
    }

    pub fn endpoints(&self) -> &[EndpointState] {
        &self.endpoints
    }

    /// Available endpoints, the worker's zone first: only those of the zone while any is.
    fn candidates(&self, now: Instant) -> Vec<usize> {
        let available: Vec<usize> = (0..self.endpoints.len())
            .filter(|&i| self.endpoints[i].available(now))
            .collect();
        let local: Vec<usize> = available
            .iter()
            .copied()
            .filter(|&i| self.zone.is_some() && self.endpoints[i].zone == self.zone)
            .collect();
        if local.is_empty() { available } else { local }
    }

    /// The endpoint for the next request, counted as in flight; None while none is
    /// available (then `next_available` says when one will be).
    pub fn pick(&mut self, now: Instant) -> Option<usize> {
        let c = self.candidates(now);
        let chosen = match (c.len(), self.strategy) {
            (0, _) => return None,
            (1, _) => c[0],
            (_, Strategy::RoundRobin) => {
                let i = c.iter().copied().find(|&i| i >= self.next).unwrap_or(c[0]);
                self.next = i + 1;
                i
            }
            (_, Strategy::LeastLoaded) => *c
                .iter()
                .min_by_key(|&&i| self.endpoints[i].in_flight)
                .expect("non-empty"),
            (n, Strategy::P2c | Strategy::P2cEwma) => {
                let a = self.rng.random_range(0..n);
                let mut b = self.rng.random_range(0..n - 1);
                if b >= a {
                    b += 1;
                }
                let (a, b) = (c[a], c[b]);
                if self.load(b) < self.load(a) { b } else { a }
            }
        };
        let e = &mut self.endpoints[chosen];
        e.in_flight += 1;
        e.requests += 1;
        Some(chosen)
    }

    fn load(&self, i: usize) -> f64 {
        let e = &self.endpoints[i];
        match self.strategy {
            Strategy::P2cEwma => e.latency.load(e.in_flight),
            _ => e.in_flight as f64,
        }
    }

    /// When the earliest unavailable endpoint comes back.
    pub fn next_available(&self) -> Option<Instant> {
        self.endpoints
            .iter()
            .filter_map(|e| match (e.down_until, e.throttled_until) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            })
            .min()
    }

    /// The request to `i` was answered (written, rejected or throttled: it is alive).
    pub fn answered(&mut self, i: usize, rtt: Duration, now: Instant) {
        let e = &mut self.endpoints[i];
        e.in_flight = e.in_flight.saturating_sub(1);
        e.latency.observe(rtt, now);
        e.failures = 0;
        e.down_until = None;
    }

    /// `i` answered "slow down": pause it alone until `until`; `named` says the endpoint
    /// named that wait (Retry-After) rather than the default pause being assumed.
    pub fn throttled(
        &mut self,
        i: usize,
        rtt: Duration,
        until: Instant,
        named: bool,
        now: Instant,
    ) {
        self.answered(i, rtt, now);
        let e = &mut self.endpoints[i];
        e.throttled_until = Some(e.throttled_until.map_or(until, |t| t.max(until)));
        e.throttle_named_wait = named;
    }

    /// Whether every endpoint paused for throttling now named its wait.
    pub fn throttles_named_their_waits(&self, now: Instant) -> bool {
        self.endpoints
            .iter()
            .filter(|e| e.throttled_until.is_some_and(|t| now < t))
            .all(|e| e.throttle_named_wait)
    }

    /// `i` gave no answer after `rtt` (refused, reset, timed out): down until a backoff
    /// passes, then probed again. The time it took counts as latency only when it raises
    /// the estimate: a request that timed out shows the endpoint slow, while a refusal
    /// in a millisecond does not show it fast.
    pub fn failed(&mut self, i: usize, rtt: Duration, now: Instant) {
        let e = &mut self.endpoints[i];
        e.in_flight = e.in_flight.saturating_sub(1);
        if rtt > e.latency.estimate() {
            e.latency.observe(rtt, now);
        }
        e.failures += 1;
        let wait = self.backoff.delay(e.failures, &mut self.rng);
        e.down_until = Some(now + wait);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn balancer(
        strategy: Strategy,
        zone: Option<&str>,
        zones: &[Option<&str>],
    ) -> (Balancer, Instant) {
        let now = Instant::now();
        let b = Balancer::new(
            strategy,
            zone.map(String::from),
            zones.iter().map(|z| z.map(String::from)).collect(),
            ms(50),
            Duration::from_secs(10),
            Backoff::new(ms(100), Duration::from_secs(5), 2.0),
            7,
            now,
        );
        (b, now)
    }

    #[test]
    fn p2c_never_picks_a_down_endpoint() {
        let (mut b, now) = balancer(Strategy::P2c, None, &[None, None, None]);
        b.failed(1, ms(1), now);
        for _ in 0..1000 {
            let i = b.pick(now).unwrap();
            assert_ne!(i, 1);
            b.answered(i, ms(10), now);
        }
        // After its backoff it is probed again.
        let later = now + Duration::from_secs(1);
        assert!((0..100).any(|_| {
            let i = b.pick(later).unwrap();
            b.answered(i, ms(10), later);
            i == 1
        }));
    }

    #[test]
    fn p2c_ewma_sends_most_to_the_fastest() {
        let (mut b, t0) = balancer(Strategy::P2cEwma, None, &[None, None, None]);
        let rtt = [ms(10), ms(50), ms(200)];
        let mut counts = [0; 3];
        // Requests overlap: each answers after its endpoint's latency.
        let mut pending: Vec<(Instant, usize)> = Vec::new();
        let mut now = t0;
        for _ in 0..3000 {
            now += ms(2);
            pending.sort();
            while pending.first().is_some_and(|(t, _)| *t <= now) {
                let (t, i) = pending.remove(0);
                b.answered(i, rtt[i], t);
            }
            let i = b.pick(now).unwrap();
            counts[i] += 1;
            pending.push((now + rtt[i], i));
        }
        assert!(counts[0] > counts[1] && counts[1] > counts[2], "{counts:?}");
    }

    #[test]
    fn round_robin_splits_evenly_and_least_loaded_fills_gaps() {
        let (mut b, now) = balancer(Strategy::RoundRobin, None, &[None, None, None]);
        let mut counts = [0; 3];
        for _ in 0..300 {
            let i = b.pick(now).unwrap();
            counts[i] += 1;
            b.answered(i, ms(10), now);
        }
        assert_eq!(counts, [100, 100, 100]);

        let (mut b, now) = balancer(Strategy::LeastLoaded, None, &[None, None]);
        assert_eq!(b.pick(now), Some(0));
        assert_eq!(b.pick(now), Some(1));
        b.answered(0, ms(1), now);
        assert_eq!(b.pick(now), Some(0));
    }

    #[test]
    fn the_other_zone_gets_nothing_until_the_local_zone_is_down() {
        let zones = [Some("a"), Some("a"), Some("b")];
        let (mut b, now) = balancer(Strategy::P2cEwma, Some("a"), &zones);
        for _ in 0..500 {
            let i = b.pick(now).unwrap();
            assert_ne!(i, 2);
            b.answered(i, ms(10), now);
        }
        b.failed(0, ms(1), now);
        assert_eq!(b.pick(now), Some(1));
        b.failed(1, ms(1), now);
        assert_eq!(b.pick(now), Some(2), "both zone-A endpoints are down");
    }

    #[test]
    fn a_throttled_endpoint_pauses_alone() {
        let (mut b, now) = balancer(Strategy::P2c, None, &[None, None]);
        let i = b.pick(now).unwrap();
        b.throttled(i, ms(5), now + Duration::from_secs(2), true, now);
        for _ in 0..50 {
            let j = b.pick(now).unwrap();
            assert_ne!(j, i);
            b.answered(j, ms(5), now);
        }
        let other = 1 - i;
        let j = b.pick(now).unwrap();
        assert_eq!(j, other);
        b.throttled(other, ms(5), now + Duration::from_secs(1), true, now);
        assert_eq!(b.pick(now), None, "all throttled");
        assert_eq!(b.next_available(), Some(now + Duration::from_secs(1)));
    }

    #[test]
    fn a_refused_endpoint_is_probed_again_within_the_ceiling() {
        // Backoff from 100 ms to 5 s: however long the refusals last, the endpoint is
        // never set aside for longer than the ceiling (it used to grow to 30 s).
        let (mut b, t0) = balancer(Strategy::P2cEwma, None, &[None, None]);
        let mut now = t0;
        for _ in 0..40 {
            b.failed(1, ms(1), now);
            let until = b.endpoints()[1].down_until.unwrap();
            assert!(until - now <= Duration::from_secs(5), "{:?}", until - now);
            now = until;
            assert!(
                !b.endpoints()[1].is_down(now),
                "probed again once the wait is over"
            );
        }
        // Back: its first request is answered and it is a candidate again at once.
        b.answered(1, ms(10), now);
        assert!(!b.endpoints()[1].is_down(now));
        assert!((0..100).any(|_| {
            let i = b.pick(now).unwrap();
            b.answered(i, ms(10), now);
            i == 1
        }));
    }

    #[test]
    fn a_timeout_is_a_latency_sample_and_a_refusal_is_not() {
        let (mut b, now) = balancer(Strategy::P2cEwma, None, &[None, None]);
        b.failed(0, Duration::from_secs(5), now);
        assert_eq!(b.endpoints()[0].latency.estimate(), Duration::from_secs(5));
        b.failed(0, ms(1), now + ms(10));
        assert_eq!(
            b.endpoints()[0].latency.estimate(),
            Duration::from_secs(5),
            "a refusal in a millisecond does not make it look fast"
        );
        // The hung endpoint, once probed again, loses against a fast one.
        let later = now + Duration::from_secs(6);
        b.answered(1, ms(10), later);
        for _ in 0..50 {
            let i = b.pick(later).unwrap();
            assert_eq!(i, 1, "p2c-ewma avoids the endpoint that timed out");
            b.answered(i, ms(10), later);
        }
    }

    #[test]
    fn throttles_without_a_named_wait_are_told_apart() {
        let (mut b, now) = balancer(Strategy::P2c, None, &[None, None]);
        b.throttled(0, ms(5), now + Duration::from_secs(1), false, now);
        b.throttled(1, ms(5), now + Duration::from_secs(3), true, now);
        assert!(!b.throttles_named_their_waits(now));
        // Once the unnamed pause is over, only the named one is in force.
        assert!(b.throttles_named_their_waits(now + Duration::from_secs(2)));
    }
}
