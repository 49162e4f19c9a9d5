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
        let mut b = Balancer::new(
            strategy,
            zone.map(String::from),
            ms(50),
            Duration::from_secs(10),
            Backoff::new(ms(100), Duration::from_secs(5), 2.0),
            7,
        );
        for (i, z) in zones.iter().enumerate() {
            b.add(format!("e{i}"), z.map(String::from), now);
        }
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

    fn aperture(mode: Option<Coordinate>, endpoints: usize, settings: Settings) -> Balancer {
        let now = Instant::now();
        let mut b = Balancer::new(
            Strategy::Aperture,
            None,
            ms(50),
            Duration::from_secs(10),
            Backoff::new(ms(100), Duration::from_secs(5), 2.0),
            u64::from(mode.map_or(3, |c| c.index)),
        )
        .with_aperture(settings, mode, now);
        for j in 0..endpoints {
            b.add(format!("http://10.0.0.{j}:9200/"), None, now);
        }
        b
    }

    /// Keeps `in_flight` requests going for `secs` seconds, each answered after
    /// `latency(endpoint)`, on a fake clock from `t0`; counts the requests per endpoint and
    /// checks that each went to an endpoint of the aperture as it stood.
    fn drive(
        b: &mut Balancer,
        t0: Instant,
        in_flight: usize,
        secs: u64,
        latency: impl Fn(usize) -> Duration,
    ) -> Vec<u64> {
        let mut counts = vec![0; b.endpoints().len()];
        let mut pending: Vec<(Instant, usize)> = Vec::new();
        let mut now = t0;
        while now < t0 + Duration::from_secs(secs) {
            while pending.len() < in_flight {
                let members = b.aperture().unwrap();
                let i = b.pick(now).unwrap();
                assert!(
                    members.iter().any(|(m, _)| *m == i),
                    "{i} outside {members:?}"
                );
                counts[i] += 1;
                pending.push((now + latency(i), i));
            }
            pending.sort();
            let (t, i) = pending.remove(0);
            now = t;
            b.answered(i, latency(i), now);
        }
        counts
    }

    #[test]
    fn random_aperture_keeps_to_a_few_endpoints_at_low_load_and_widens_under_load() {
        let mut b = aperture(None, 30, Settings::default());
        let t0 = Instant::now();
        let quiet = drive(&mut b, t0, 1, 10, |_| ms(10));
        let used = quiet.iter().filter(|&&n| n > 0).count();
        assert!(used <= 2, "one in flight: {quiet:?}");
        // 20 in flight: at most 2 per endpoint of the subset, so at least 10 of them.
        let busy = drive(&mut b, t0 + Duration::from_secs(10), 20, 20, |_| ms(10));
        let size = b.aperture().unwrap().len();
        assert!((10..=11).contains(&size), "{size}");
        assert!(busy.iter().filter(|&&n| n > 0).count() >= 10, "{busy:?}");
        // Bounded by max.
        let mut b = aperture(
            None,
            30,
            Settings {
                min: 3,
                max: Some(6),
                ..Settings::default()
            },
        );
        drive(&mut b, t0, 40, 10, |_| ms(10));
        assert_eq!(b.aperture().unwrap().len(), 6);
    }

    #[test]
    fn a_down_endpoint_in_the_random_aperture_is_stood_in_for() {
        let mut b = aperture(None, 10, Settings::default());
        let now = Instant::now();
        let (first, _) = b.aperture().unwrap()[0];
        let i = b.pick(now).unwrap();
        assert_eq!(i, first, "an aperture of one");
        b.failed(i, ms(1), now);
        for _ in 0..20 {
            let i = b.pick(now).unwrap();
            assert_ne!(i, first);
            b.answered(i, ms(1), now);
        }
    }

    #[test]
    fn deterministic_aperture_six_workers_thirty_endpoints() {
        // Six workers, each with 4 requests in flight to 30 endpoints answering in 10 ms.
        let t0 = Instant::now();
        let mut total = vec![0u64; 30];
        for w in 0..6 {
            let coord = Coordinate { index: w, count: 6 };
            let mut b = aperture(Some(coord), 30, Settings::default());
            let counts = drive(&mut b, t0, 4, 10, |_| ms(10));
            let touched = counts.iter().filter(|&&n| n > 0).count();
            let size = b.aperture().unwrap().len();
            assert!(
                touched <= size,
                "worker {w}: {touched} > its aperture {size}"
            );
            assert_eq!(size, 5, "one worker slice of the ring holds 5 endpoints");
            for (t, c) in total.iter_mut().zip(&counts) {
                *t += c;
            }
        }
        let mean = total.iter().sum::<u64>() as f64 / 30.0;
        let max = *total.iter().max().unwrap() as f64;
        eprintln!("6 workers × 30 endpoints: {total:?}, busiest {max} / mean {mean:.0}");
        assert!(total.iter().all(|&n| n > 0), "{total:?}");
        assert!(max <= 1.5 * mean, "busiest {max} vs mean {mean}: {total:?}");
    }

    #[test]
    fn deterministic_aperture_covers_the_ring_by_key_order_whatever_the_insertion_order() {
        let coord = Coordinate { index: 1, count: 3 };
        let now = Instant::now();
        let mut b = aperture(Some(coord), 0, Settings::default());
        for j in [5, 2, 0, 4, 1, 3] {
            b.add(format!("e{j}"), None, now);
        }
        let mut keys: Vec<String> = b
            .aperture()
            .unwrap()
            .iter()
            .map(|(i, _)| b.endpoints()[*i].key.clone())
            .collect();
        keys.sort();
        assert_eq!(keys, ["e2", "e3"], "the second third of e0..e5");
    }

    #[test]
    fn a_removed_endpoint_gets_nothing_new_and_its_slot_waits_for_its_requests() {
        let (mut b, now) = balancer(Strategy::RoundRobin, None, &[None, None]);
        let i = b.pick(now).unwrap();
        b.remove(i);
        for _ in 0..20 {
            let j = b.pick(now).unwrap();
            assert_ne!(j, i);
            b.answered(j, ms(1), now);
        }
        // Still in flight: a new endpoint takes another slot.
        let k = b.add("new".into(), None, now);
        assert_ne!(k, i);
        b.answered(i, ms(1), now);
        assert_eq!(
            b.add("newer".into(), None, now),
            i,
            "drained: the slot is reused"
        );
        assert_eq!(b.endpoints()[i].key, "newer");
        assert_eq!(b.live().count(), 3);
    }
}
