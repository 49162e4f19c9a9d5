use super::*;

const TTL: Duration = Duration::from_secs(15);
/// The default configuration's: a 500 ms round, a 200 ms tick, the sink's second.
const LAST_USE: Duration = Duration::from_millis(1700);

fn definition(capacity: f64, partitions: u32, generation: u32) -> PoolDefinition {
    PoolDefinition {
        capacity,
        partitions,
        generation,
    }
}

fn limits(ttl: Duration, ceiling: Option<f64>) -> WorkerLimits {
    WorkerLimits {
        reserved: 10.0,
        ceiling,
        ttl,
        idle_grace: Duration::from_secs(5),
        last_use: LAST_USE,
    }
}

fn table() -> LeaseTable {
    LeaseTable::new(definition(800.0, 8, 1), limits(TTL, None))
}

fn pool(active: u32, other_waiting: bool, free: u32) -> PoolView {
    PoolView {
        active_members: active,
        other_waiting,
        free,
        definition: definition(800.0, 8, 1),
        grants_in: None,
    }
}

fn s(n: f64) -> Duration {
    Duration::from_secs_f64(n)
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
    // margin = 1.7 s (more than ttl / 10 = 1.5 s): the keeper's round, the pipeline's
    // tick and the last second's records are over before the store's ttl is.
    assert_eq!(t.rate(t0 + Duration::from_millis(13_299)), 110.0);
    assert_eq!(t.rate(t0 + Duration::from_millis(13_300)), 10.0);
    assert_eq!(t.expire(t0 + Duration::from_secs(14)), vec![1]);
    assert!(t.held(t0 + Duration::from_secs(14)).is_empty());
}

#[test]
fn a_short_ttl_keeps_two_thirds_of_it_and_a_long_one_a_tenth_less() {
    let at = |ttl: u64| {
        let t0 = Instant::now();
        let mut t = LeaseTable::new(
            definition(800.0, 8, 1),
            limits(Duration::from_secs(ttl), None),
        );
        t.granted(1, t0);
        (1..=ttl * 100)
            .map(|cs| t0 + Duration::from_millis(cs * 10))
            .find(|now| t.rate(*now) == 10.0)
            .map(|now| now.duration_since(t0))
    };
    assert_eq!(at(3), Some(Duration::from_secs(2)));
    assert_eq!(at(4), Some(Duration::from_millis(2670)));
    assert_eq!(at(60), Some(Duration::from_secs(54)));
}

#[test]
fn renews_every_third_of_the_ttl_and_keeps_the_lease() {
    let t0 = Instant::now();
    let mut t = table();
    t.granted(2, t0);
    assert!(
        t.plan(t0 + Duration::from_secs(4), pool(1, false, 0))
            .renew
            .is_empty()
    );
    let at = t0 + Duration::from_secs(5);
    let plan = t.plan(at, pool(1, false, 0));
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
    assert!(t.observe(t0, 0, true), "nothing held: it wants some");
    assert!(t.plan(t0, pool(3, true, 8)).acquire);
    for p in 0..3 {
        t.granted(p, t0);
    }
    // 310 rec/s fully used.
    assert!(t.observe(t0 + s(1.0), 310, true));
    // ⌈8/3⌉ = 3: another member waits, so no more.
    assert!(!t.plan(t0 + s(1.0), pool(3, true, 5)).acquire);
    // Nobody else wants more: take what is free.
    assert!(t.plan(t0 + s(1.0), pool(3, false, 5)).acquire);
    // Nothing free: nothing to ask for.
    assert!(!t.plan(t0 + s(1.0), pool(3, false, 0)).acquire);
    // Not fully used: no more.
    assert!(!t.observe(t0 + s(2.0), 310 + 200, true));
    assert!(!t.plan(t0 + s(2.0), pool(3, false, 5)).acquire);
    // No backlog: no more.
    assert!(!t.observe(t0 + s(3.0), 510 + 310, false));
}

#[test]
fn holding_nothing_with_a_backlog_is_reason_enough_to_ask() {
    let t0 = Instant::now();
    let mut t = table();
    t.observe(t0, 0, true);
    // Reserved 10 rec/s, nothing pulled: still asks.
    assert!(t.observe(t0 + s(1.0), 0, true));
    assert!(!t.observe(t0 + s(2.0), 0, false), "nothing waiting: never");
}

#[test]
fn gives_back_what_exceeds_the_fair_share_when_another_member_waits() {
    let t0 = Instant::now();
    let mut t = table();
    for p in 0..8 {
        t.granted(p, t0);
    }
    t.observe(t0, 0, true);
    let plan = t.plan(t0, pool(2, true, 0));
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
    t.observe(t0, 0, false);
    assert!(t.plan(t0, pool(1, false, 6)).release.is_empty());
    t.observe(t0 + s(4.0), 0, false);
    assert!(t.plan(t0 + s(4.0), pool(1, false, 6)).release.is_empty());
    t.observe(t0 + s(5.0), 0, false);
    let plan = t.plan(t0 + s(5.0), pool(1, false, 6));
    assert_eq!(plan.release, vec![1, 0]);
    assert!(!plan.acquire);
    // A backlog again: the idle clock restarts.
    t.granted(0, t0 + s(6.0));
    t.observe(t0 + s(6.0), 0, true);
    assert!(t.plan(t0 + s(6.0), pool(1, false, 6)).release.is_empty());
}

#[test]
fn fair_share_rounds_up() {
    let t = table();
    assert_eq!(t.fair_share(3), 3);
    assert_eq!(t.fair_share(1), 8);
    assert_eq!(t.fair_share(0), 8);
    assert_eq!(t.fair_share(9), 1);
}

#[test]
fn a_new_generation_drops_every_old_lease_before_asking_again() {
    let t0 = Instant::now();
    // 300 rec/s in 3 leases of 100; resized to 600 in 6 leases of 100.
    let mut t = LeaseTable::new(definition(300.0, 3, 1), limits(TTL, None));
    for p in 0..3 {
        t.granted(p, t0);
    }
    t.observe(t0, 0, true);
    let new = definition(600.0, 6, 2);
    let view = PoolView {
        active_members: 1,
        other_waiting: false,
        free: 6,
        definition: new,
        grants_in: None,
    };
    let plan = t.plan(t0, view);
    assert_eq!(plan.release, vec![0, 1, 2]);
    assert!(
        !plan.acquire,
        "not in the round that gives the old ones back"
    );
    assert!(plan.renew.is_empty());
    assert_eq!(t.rate(t0), 10.0, "nothing old is used any more");
    assert_eq!(t.definition(), new);
    t.observe(t0 + s(0.5), 0, true);
    assert!(t.plan(t0 + s(0.5), view).acquire);
    t.granted(5, t0 + s(0.5));
    assert_eq!(t.rate(t0 + s(0.5)), 110.0);
    // A shrink: 200 rec/s in 4 leases of 50.
    let shrunk = PoolView {
        definition: definition(200.0, 4, 3),
        ..view
    };
    assert_eq!(t.plan(t0 + s(1.0), shrunk).release, vec![5]);
    t.granted(1, t0 + s(1.5));
    assert_eq!(t.rate(t0 + s(1.5)), 60.0);
}

#[test]
fn the_workers_own_rate_caps_what_its_leases_give() {
    let t0 = Instant::now();
    // Leases of 100 rec/s, 10 reserved, a ceiling of 150: two leases are all it can use.
    let mut t = LeaseTable::new(definition(800.0, 8, 1), limits(TTL, Some(150.0)));
    assert_eq!(t.useful(), 2);
    assert_eq!(t.rate(t0), 10.0);
    t.granted(0, t0);
    assert_eq!(t.rate(t0), 110.0);
    assert!(t.observe(t0 + s(1.0), 110, true));
    assert!(t.plan(t0 + s(1.0), pool(1, false, 7)).acquire);
    t.granted(1, t0 + s(1.0));
    assert_eq!(t.rate(t0 + s(1.0)), 150.0, "210 capped at 150");
    // Fully used at its ceiling, it still wants nothing more.
    assert!(!t.observe(t0 + s(2.0), 260, true));
    assert!(!t.plan(t0 + s(2.0), pool(1, false, 6)).acquire);
    // A ceiling below the reserved rate needs no lease at all.
    let t = LeaseTable::new(definition(800.0, 8, 1), limits(TTL, Some(5.0)));
    assert_eq!(t.useful(), 0);
    assert_eq!(t.rate(t0), 5.0);
}

/// One keeper round every 0.5 s: the pipeline pulled at `used(t)` rec/s (capped by the
/// table's rate), the store renews everything and grants while something is free.
fn simulate(
    t: &mut LeaseTable,
    t0: Instant,
    from: f64,
    to: f64,
    pulled: &mut f64,
    used: impl Fn(f64) -> f64,
    pool_of: impl Fn(u32) -> PoolView,
) -> Vec<(f64, usize)> {
    let mut held = Vec::new();
    let mut at = from;
    while at <= to {
        let now = t0 + s(at);
        *pulled += used(at).min(t.rate(now)) * 0.5;
        t.observe(now, *pulled as u64, true);
        let count = t.held(now).len() as u32;
        let plan = t.plan(now, pool_of(count));
        for p in &plan.release {
            t.forget(*p);
        }
        t.renewed(&plan.renew, &plan.renew, now);
        if plan.acquire {
            let free = (0..8).find(|p| !t.held(now).contains(p)).unwrap();
            t.granted(free, now);
        }
        held.push((at, t.held(now).len()));
        at += 0.5;
    }
    held
}

#[test]
fn a_worker_that_cannot_use_its_leases_gives_them_back_within_two_ttl() {
    let t0 = Instant::now();
    let ttl = Duration::from_secs(4);
    let mut t = LeaseTable::new(
        definition(800.0, 8, 1),
        WorkerLimits {
            reserved: 0.0,
            ..limits(ttl, None)
        },
    );
    let mut pulled = 0.0;
    let alone = |held: u32| PoolView {
        active_members: 1,
        other_waiting: false,
        free: 8 - held,
        definition: definition(800.0, 8, 1),
        grants_in: None,
    };
    // A fast sink: it takes all 8 and uses them.
    let held = simulate(&mut t, t0, 0.0, 10.0, &mut pulled, |_| 1000.0, alone);
    assert_eq!(held.last().unwrap().1, 8, "{held:?}");
    // The sink slows to 150 rec/s at 10 s.
    let held = simulate(&mut t, t0, 10.5, 30.0, &mut pulled, |_| 150.0, alone);
    let down = held.iter().find(|(_, n)| *n == 2).expect("gave back to 2");
    assert!(
        down.0 <= 10.0 + 2.0 * 4.0,
        "gave back within two ttl: {held:?}"
    );
    assert!(
        held.iter()
            .filter(|(at, _)| *at > down.0)
            .all(|(_, n)| *n <= 3),
        "it does not take them back: {held:?}"
    );
}

#[test]
fn a_burst_within_the_window_keeps_the_leases_it_needs() {
    let t0 = Instant::now();
    let ttl = Duration::from_secs(4);
    let mut t = LeaseTable::new(
        definition(800.0, 8, 1),
        WorkerLimits {
            reserved: 0.0,
            ..limits(ttl, None)
        },
    );
    let mut pulled = 0.0;
    let alone = |held: u32| PoolView {
        active_members: 1,
        other_waiting: false,
        free: 8 - held,
        definition: definition(800.0, 8, 1),
        grants_in: None,
    };
    simulate(&mut t, t0, 0.0, 10.0, &mut pulled, |_| 400.0, alone);
    let before = t.held(t0 + s(10.0)).len();
    assert!(before >= 4, "{before}");
    // Mostly 100 rec/s, with a 1.5 s burst at full speed every 3 s: an average would
    // keep 2 or 3 leases, the peak keeps all it had.
    let held = simulate(
        &mut t,
        t0,
        10.5,
        40.0,
        &mut pulled,
        |at| if at % 3.0 < 1.5 { 1000.0 } else { 100.0 },
        alone,
    );
    assert!(held.iter().all(|(_, n)| *n >= before), "{held:?}");
}

#[test]
fn a_fresh_lease_is_not_judged_before_a_whole_window() {
    let t0 = Instant::now();
    let mut t = LeaseTable::new(
        definition(800.0, 8, 1),
        WorkerLimits {
            reserved: 0.0,
            ..limits(Duration::from_secs(4), None)
        },
    );
    t.observe(t0, 0, true);
    t.granted(0, t0);
    t.granted(1, t0 + s(3.0));
    // 100 rec/s; the window is 5 s (the idle grace): the lease granted at 3 s is not
    // judged before 8 s.
    for i in 1..=15 {
        let at = f64::from(i) * 0.5;
        t.observe(t0 + s(at), (100.0 * at) as u64, true);
        let plan = t.plan(t0 + s(at), pool(1, false, 6));
        t.renewed(&plan.renew, &plan.renew, t0 + s(at));
        assert!(plan.release.is_empty(), "at {at}: {plan:?}");
    }
    t.observe(t0 + s(8.0), 800, true);
    assert_eq!(t.plan(t0 + s(8.0), pool(1, false, 6)).release, vec![1]);
}

#[test]
fn a_worker_with_a_backlog_and_no_lease_asks_whatever_its_reserved_rate() {
    let t0 = Instant::now();
    let mut t = table();
    assert_eq!(t.rate(t0), 10.0, "reserved only");
    // Rounds that pulled nothing at the reserved rate, as after an idle spell.
    assert!(t.observe(t0, 500, true));
    assert!(t.observe(t0 + Duration::from_millis(500), 500, true));
    assert!(t.observe(t0 + Duration::from_secs(1), 500, true));
    // Holding a lease, an unused rate is no reason to ask for more.
    t.granted(0, t0 + Duration::from_secs(1));
    assert!(!t.observe(t0 + Duration::from_millis(1500), 500, true));
    // No backlog: never.
    t.forget(0);
    assert!(!t.observe(t0 + Duration::from_secs(2), 500, false));
}

#[test]
fn leases_taken_apart_are_renewed_together_once_one_is_due() {
    let t0 = Instant::now();
    let mut t = table();
    t.granted(2, t0);
    t.granted(4, t0 + Duration::from_secs(3));
    // At 5 s lease 2 is due (a third of 15 s) and lease 4, 2 s old, is under half due.
    let plan = t.plan(t0 + Duration::from_secs(5), pool(1, false, 0));
    assert_eq!(plan.renew, vec![2]);
    // Had lease 4 been at least half due (2.5 s), it would have come along.
    let plan = t.plan(t0 + Duration::from_millis(5500), pool(1, false, 0));
    assert_eq!(plan.renew, vec![2, 4]);
    t.renewed(&[2, 4], &[2, 4], t0 + Duration::from_millis(5500));
    assert!(
        t.plan(t0 + Duration::from_secs(10), pool(1, false, 0))
            .renew
            .is_empty()
    );
    assert_eq!(
        t.plan(t0 + Duration::from_millis(10500), pool(1, false, 0))
            .renew,
        vec![2, 4],
        "due together from then on"
    );
}
