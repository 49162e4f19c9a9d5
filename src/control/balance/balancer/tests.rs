use super::*;

use crate::testing::ms;

fn balancer(strategy: Strategy, zone: Option<&str>, zones: &[Option<&str>]) -> (Balancer, Instant) {
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
