//! Picks the endpoint for the next batch. Only available endpoints are candidates (not
//! marked down, not throttled); those in the worker's zone come first, the others only
//! when none there is available. A failing endpoint is marked down and probed again after
//! an exponential backoff; a throttled one is paused until its Retry-After, alone.

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

    /// `i` answered "slow down": pause it alone until `until`.
    pub fn throttled(&mut self, i: usize, rtt: Duration, until: Instant, now: Instant) {
        self.answered(i, rtt, now);
        let e = &mut self.endpoints[i];
        e.throttled_until = Some(e.throttled_until.map_or(until, |t| t.max(until)));
    }

    /// `i` could not be reached: down until a backoff passes, then probed again.
    pub fn failed(&mut self, i: usize, now: Instant) {
        let e = &mut self.endpoints[i];
        e.in_flight = e.in_flight.saturating_sub(1);
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
        b.failed(1, now);
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
        b.failed(0, now);
        assert_eq!(b.pick(now), Some(1));
        b.failed(1, now);
        assert_eq!(b.pick(now), Some(2), "both zone-A endpoints are down");
    }

    #[test]
    fn a_throttled_endpoint_pauses_alone() {
        let (mut b, now) = balancer(Strategy::P2c, None, &[None, None]);
        let i = b.pick(now).unwrap();
        b.throttled(i, ms(5), now + Duration::from_secs(2), now);
        for _ in 0..50 {
            let j = b.pick(now).unwrap();
            assert_ne!(j, i);
            b.answered(j, ms(5), now);
        }
        let other = 1 - i;
        let j = b.pick(now).unwrap();
        assert_eq!(j, other);
        b.throttled(other, ms(5), now + Duration::from_secs(1), now);
        assert_eq!(b.pick(now), None, "all throttled");
        assert_eq!(b.next_available(), Some(now + Duration::from_secs(1)));
    }
}
