//! Picks the endpoint for the next batch. Only available endpoints are candidates (not
//! marked down, not throttled, not removed); those in the worker's zone come first, the
//! others only when none there is available. A failing endpoint is marked down and probed
//! again after an exponential backoff capped by the configured ceiling
//! (`throttle.max_pause`), so an endpoint that is back is noticed within that time; a
//! throttled one is paused until its Retry-After, alone. Endpoints join and leave while the
//! worker runs (discovery): one removed gets no new request and its slot is reused once
//! its requests in flight are answered, so the index a request holds stays its endpoint's.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::aperture::{LoadBand, Settings};
use super::peak_ewma::PeakEwma;
use super::ring::{self, Coordinate};
use crate::control::backoff::Backoff;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    RoundRobin,
    LeastLoaded,
    P2c,
    #[default]
    P2cEwma,
    /// P2C by requests in flight within a subset sized by load (`aperture`).
    Aperture,
}

#[derive(Debug, Clone)]
pub struct EndpointState {
    /// What the endpoint is known by across workers (its URL): orders the aperture.
    pub key: String,
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
    /// Gone from discovery: draining its requests in flight, then its slot is free.
    pub removed: bool,
}

impl EndpointState {
    fn available(&self, now: Instant) -> bool {
        !self.removed
            && self.down_until.is_none_or(|t| now >= t)
            && self.throttled_until.is_none_or(|t| now >= t)
    }

    pub fn is_down(&self, now: Instant) -> bool {
        self.down_until.is_some_and(|t| now < t)
    }
}

/// The aperture's state: its size, and how this worker orders the endpoints.
struct ApertureState {
    band: LoadBand,
    /// Deterministic mode's place on the ring; None: random mode.
    coordinate: Option<Coordinate>,
}

pub struct Balancer {
    strategy: Strategy,
    zone: Option<String>,
    endpoints: Vec<EndpointState>,
    initial: Duration,
    decay: Duration,
    next: usize,
    rng: StdRng,
    seed: u64,
    backoff: Backoff,
    aperture: Option<ApertureState>,
    /// Endpoints not removed, in the aperture's order: by key on the ring (every worker
    /// agrees), by a hash of this worker's seed and the key in random mode.
    order: Vec<usize>,
    /// Requests in flight over all endpoints.
    in_flight: usize,
}

impl Balancer {
    /// No endpoints yet (`add` them); `initial` is the latency assumed before any answer.
    pub fn new(
        strategy: Strategy,
        zone: Option<String>,
        initial: Duration,
        decay: Duration,
        backoff: Backoff,
        seed: u64,
    ) -> Self {
        Balancer {
            strategy,
            zone,
            endpoints: Vec::new(),
            initial,
            decay,
            next: 0,
            rng: StdRng::seed_from_u64(seed),
            seed,
            backoff,
            aperture: None,
            order: Vec::new(),
            in_flight: 0,
        }
    }

    /// With `strategy = "aperture"`: the load band, and the ring coordinate in
    /// deterministic mode.
    pub fn with_aperture(
        mut self,
        settings: Settings,
        coordinate: Option<Coordinate>,
        now: Instant,
    ) -> Self {
        self.aperture = Some(ApertureState {
            band: LoadBand::new(settings, now),
            coordinate,
        });
        self
    }

    pub fn endpoints(&self) -> &[EndpointState] {
        &self.endpoints
    }

    /// Endpoints not removed.
    pub fn live(&self) -> impl Iterator<Item = usize> + '_ {
        self.order.iter().copied()
    }

    /// Adds an endpoint; its index is a free slot's (one removed and drained) or a new one.
    pub fn add(&mut self, key: String, zone: Option<String>, now: Instant) -> usize {
        let state = EndpointState {
            key,
            zone,
            in_flight: 0,
            latency: PeakEwma::new(self.initial, self.decay, now),
            down_until: None,
            throttled_until: None,
            throttle_named_wait: false,
            failures: 0,
            requests: 0,
            removed: false,
        };
        let i = match self.endpoints.iter().position(|e| self.is_free(e)) {
            Some(i) => {
                self.endpoints[i] = state;
                i
            }
            None => {
                self.endpoints.push(state);
                self.endpoints.len() - 1
            }
        };
        self.reorder();
        i
    }

    /// No new request goes to `i`; those in flight are answered as usual.
    pub fn remove(&mut self, i: usize) {
        self.endpoints[i].removed = true;
        self.reorder();
    }

    /// Removed and drained: nothing holds its index any more.
    pub fn is_free(&self, e: &EndpointState) -> bool {
        e.removed && e.in_flight == 0
    }

    fn reorder(&mut self) {
        let mut live: Vec<usize> = (0..self.endpoints.len())
            .filter(|&i| !self.endpoints[i].removed)
            .collect();
        let deterministic = self
            .aperture
            .as_ref()
            .is_some_and(|a| a.coordinate.is_some());
        if deterministic {
            live.sort_by(|&a, &b| self.endpoints[a].key.cmp(&self.endpoints[b].key));
        } else {
            live.sort_by_key(|&i| {
                let mut h = DefaultHasher::new();
                (self.seed, &self.endpoints[i].key).hash(&mut h);
                h.finish()
            });
        }
        self.order = live;
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

    /// The aperture's endpoints with their weights (the share of each one's ring slice in
    /// the arc; 1 in random mode), available or not; None without an aperture.
    pub fn aperture(&self) -> Option<Vec<(usize, f64)>> {
        let a = self.aperture.as_ref()?;
        let size = a.band.size(self.order.len());
        Some(match a.coordinate {
            Some(coord) => ring::arc(coord, self.order.len(), size)
                .into_iter()
                .map(|(pos, w)| (self.order[pos], w))
                .collect(),
            None => self.order.iter().take(size).map(|&i| (i, 1.0)).collect(),
        })
    }

    /// The aperture's available endpoints. Random mode skips unavailable ones for the next
    /// in its order, so an endpoint that is down is stood in for; a ring arc with none
    /// available falls back on every available endpoint rather than on none.
    fn aperture_candidates(&self, available: &[usize]) -> Vec<(usize, f64)> {
        let Some(a) = self.aperture.as_ref() else {
            return available.iter().map(|&i| (i, 1.0)).collect();
        };
        let mut is_available = vec![false; self.endpoints.len()];
        for &i in available {
            is_available[i] = true;
        }
        let size = a.band.size(self.order.len());
        let members: Vec<(usize, f64)> = match a.coordinate {
            Some(_) => self
                .aperture()
                .unwrap_or_default()
                .into_iter()
                .filter(|(i, _)| is_available[*i])
                .collect(),
            None => self
                .order
                .iter()
                .filter(|&&i| is_available[i])
                .take(size)
                .map(|&i| (i, 1.0))
                .collect(),
        };
        if members.is_empty() {
            available.iter().map(|&i| (i, 1.0)).collect()
        } else {
            members
        }
    }

    /// Two draws by weight (distinct when there are two), the one with fewer requests in
    /// flight per unit of weight wins: an endpoint half inside the arc takes half a share.
    fn weighted_p2c(&mut self, members: &[(usize, f64)]) -> usize {
        let draw = |rng: &mut StdRng, skip: Option<usize>| {
            let total: f64 = members
                .iter()
                .enumerate()
                .filter(|(k, _)| Some(*k) != skip)
                .map(|(_, (_, w))| w)
                .sum();
            let mut x = rng.random_range(0.0..total);
            for (k, (_, w)) in members.iter().enumerate() {
                if Some(k) == skip {
                    continue;
                }
                if x < *w {
                    return k;
                }
                x -= w;
            }
            members.len() - 1 - usize::from(skip == Some(members.len() - 1))
        };
        if members.len() == 1 {
            return members[0].0;
        }
        let a = draw(&mut self.rng, None);
        let b = draw(&mut self.rng, Some(a));
        let load = |k: usize| self.endpoints[members[k].0].in_flight as f64 / members[k].1;
        if load(b) < load(a) {
            members[b].0
        } else {
            members[a].0
        }
    }

    /// The endpoint for the next request, counted as in flight; None while none is
    /// available (then `next_available` says when one will be).
    pub fn pick(&mut self, now: Instant) -> Option<usize> {
        let c = self.candidates(now);
        let chosen = match (c.len(), self.strategy) {
            (0, _) => return None,
            (_, Strategy::Aperture) => {
                let members = self.aperture_candidates(&c);
                self.weighted_p2c(&members)
            }
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
        self.in_flight_changed(1, now);
        Some(chosen)
    }

    fn in_flight_changed(&mut self, up: isize, now: Instant) {
        self.in_flight = self.in_flight.saturating_add_signed(up);
        let live = self.order.len();
        if let Some(a) = self.aperture.as_mut() {
            a.band.update(self.in_flight, live, now);
        }
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
            .filter(|e| !e.removed)
            .filter_map(|e| match (e.down_until, e.throttled_until) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            })
            .min()
    }

    /// Whether every endpoint not removed is down (true when there is none).
    pub fn all_down(&self, now: Instant) -> bool {
        self.order.iter().all(|&i| self.endpoints[i].is_down(now))
    }

    fn settle(&mut self, i: usize, now: Instant) {
        let e = &mut self.endpoints[i];
        e.in_flight = e.in_flight.saturating_sub(1);
        self.in_flight_changed(-1, now);
    }

    /// The request to `i` was answered (written, rejected or throttled: it is alive).
    pub fn answered(&mut self, i: usize, rtt: Duration, now: Instant) {
        self.settle(i, now);
        let e = &mut self.endpoints[i];
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
            .filter(|e| !e.removed)
            .filter(|e| e.throttled_until.is_some_and(|t| now < t))
            .all(|e| e.throttle_named_wait)
    }

    /// `i` gave no answer after `rtt` (refused, reset, timed out): down until a backoff
    /// passes, then probed again. The time it took counts as latency only when it raises
    /// the estimate: a request that timed out shows the endpoint slow, while a refusal
    /// in a millisecond does not show it fast.
    pub fn failed(&mut self, i: usize, rtt: Duration, now: Instant) {
        self.settle(i, now);
        let e = &mut self.endpoints[i];
        if rtt > e.latency.estimate() {
            e.latency.observe(rtt, now);
        }
        e.failures += 1;
        let wait = self.backoff.delay(e.failures, &mut self.rng);
        e.down_until = Some(now + wait);
    }
}

#[cfg(test)]
mod tests;
