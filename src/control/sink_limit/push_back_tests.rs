//! What one push-back, outage or probe teaches the limit, step by step on a fake clock.

use std::time::Duration;

use super::tests::{ms, shape};
use super::*;

/// A write of 50 records sent at 2 s, refused at once.
fn refused(retry_after: Option<Duration>) -> Refused {
    Refused {
        emptied: false,
        sent_at: ms(2000),
        retry_after,
        hint: None,
        records: 50,
        bytes: 5000,
    }
}

/// 500 rec/s taken for two seconds, then a 429 with Retry-After: a first push-back takes
/// `beta` of the last second's rate, 350 rec/s, held at 339.5.
fn learned_from_a_first_429() -> SinkLimit {
    let mut limit = SinkLimit::new(LimitParams::default());
    for i in 1..=20 {
        limit.on_written(ms(100 * i), ms(100 * i), 50, 5000);
    }
    limit.on_throttle(ms(2000), true, refused(Some(ms(10))));
    assert_eq!(limit.limit(Unit::Records), Some(350.0));
    limit
}

/// After a first 429 at a fine tick the worker sends almost nothing until a push-back can
/// close a sample, in requests of the size it was sending; a write sent meanwhile and
/// refused is judged against what was sent before, not the near-nothing (once the floor
/// became the limit: 3 rec/s against a sink taking 1,000).
#[test]
fn the_wait_after_a_first_429_sends_little_and_teaches_nothing() {
    let fine = BatchShape {
        tick: ms(20),
        ..shape()
    };
    let mut limit = learned_from_a_first_429();
    let quiet = limit.plan(ms(2020), 2000.0, fine);
    assert_eq!(quiet.records_per_second, 100.0, "the floor: 5% of 2,000");
    assert_eq!(quiet.batch, 7, "339.5 rec/s a tick");
    let during = Refused {
        sent_at: ms(2025),
        ..refused(Some(ms(10)))
    };
    limit.on_throttle(ms(2030), true, during);
    // Never above what was being sent: 339.5, held at 97%.
    assert_eq!(limit.limit(Unit::Records), Some(339.5));
    let after = limit.plan(ms(2150), 2000.0, fine).records_per_second;
    assert!((after - 329.315).abs() < 1e-9, "{after}");
}

#[test]
fn an_outage_keeps_the_limit_and_the_worker_climbs_back_within_half_a_second() {
    let mut limit = learned_from_a_first_429();
    assert_eq!(
        limit.plan(ms(2100), 2000.0, shape()).records_per_second,
        339.5
    );
    // Thirty seconds of 503s and refused connections, then a success.
    limit.on_outage();
    limit.on_outage();
    assert_eq!(
        limit.limit(Unit::Records),
        Some(350.0),
        "kept across the outage"
    );
    limit.on_written(ms(32_000), ms(32_000), 50, 5000);
    let at = |t| {
        limit
            .clone()
            .plan(ms(t), 2000.0, shape())
            .records_per_second
    };
    assert!((at(32_000) - 0.7 * 339.5).abs() < 1e-9, "resumes at 70%");
    assert!(at(32_250) > at(32_000) && at(32_250) < 339.5);
    assert!((at(32_350) - 0.9 * 339.5).abs() < 4.0, "90% after 0.35 s");
    assert_eq!(at(32_500), 339.5, "back within half a second");
}

#[test]
fn a_throttle_without_retry_after_is_learned_only_once_a_write_succeeds() {
    let mut limit = SinkLimit::new(LimitParams::default());
    for i in 1..=20 {
        limit.on_written(ms(100 * i), ms(100 * i), 50, 5000);
    }
    // A 503 without Retry-After: maybe overload, maybe the start of an outage.
    limit.on_throttle(ms(2000), true, refused(None));
    assert_eq!(limit.limit(Unit::Records), None, "not yet");
    limit.on_outage();
    limit.on_written(ms(9000), ms(9000), 50, 5000);
    assert_eq!(
        limit.limit(Unit::Records),
        None,
        "it was the outage talking"
    );
    // A 429 without Retry-After followed by a success: overload after all.
    let mut limit = SinkLimit::new(LimitParams::default());
    for i in 1..=20 {
        limit.on_written(ms(100 * i), ms(100 * i), 50, 5000);
    }
    limit.on_throttle(ms(2000), true, refused(None));
    limit.on_written(ms(2100), ms(2100), 50, 5000);
    assert_eq!(limit.limit(Unit::Records), Some(350.0));
}

#[test]
fn a_probe_raises_the_limit_when_the_sink_takes_it() {
    let mut limit = learned_from_a_first_429();
    assert_eq!(
        limit.plan(ms(11_900), 2000.0, shape()).records_per_second,
        339.5
    );
    // Ten seconds of quiet: a one-second probe at 105%.
    assert_eq!(
        limit.plan(ms(12_000), 2000.0, shape()).records_per_second,
        367.5
    );
    assert_eq!(
        limit.plan(ms(12_900), 2000.0, shape()).records_per_second,
        367.5
    );
    // Taken without a throttle: the limit is 5% higher, and held at 97% of it.
    let after = limit.plan(ms(13_000), 2000.0, shape()).records_per_second;
    assert!((after - 0.97 * 367.5).abs() < 1e-9, "{after}");
    assert_eq!(limit.limit(Unit::Records), Some(367.5));
}

/// A bulk sink taking 1,000 records/s with room for 200 answers item by item. The first
/// refusal comes before the answer of the write it took whole; at the mark (a round trip
/// on) the first guess counts that write. Between two refusals for room the sink took
/// its capacity: learned whole, though the plan (fresh records only) was far below it
/// while refused items were sent again.
#[test]
fn items_refused_for_room_teach_the_capacity_beyond_the_plan() {
    let bulk = BatchShape {
        max_batch: 200,
        record_bytes: None,
        ..shape()
    };
    let room = |sent_at: Duration, records: u64| Refused {
        sent_at,
        retry_after: None,
        hint: None,
        emptied: true,
        records,
        bytes: 0,
    };
    let mut limit = SinkLimit::new(LimitParams {
        first_contact: FirstContactParams::NONE,
        ..LimitParams::default()
    });
    assert_eq!(limit.plan(ms(0), 4000.0, bulk).records_per_second, 4000.0);
    limit.on_throttle(ms(210), true, room(ms(200), 200));
    limit.on_written(ms(215), ms(215), 200, 0);
    let first = limit.plan(ms(220), 4000.0, bulk);
    // 200 over 0.22 s, beta of it, held at 97%.
    let guess = 200.0 / 0.22 * 0.7 * 0.97;
    assert!((first.records_per_second - guess).abs() < 1e-6, "{first:?}");
    // 100 records every 100 ms taken (fresh and resent), then at 800 ms a write of which
    // 20 were taken, the rest refused for room.
    for i in 0..5 {
        limit.on_written(ms(305 + 100 * i), ms(305 + 100 * i), 100, 0);
    }
    limit.on_written(ms(805), ms(805), 20, 0);
    limit.on_throttle(ms(810), true, room(ms(800), 180));
    let plan = limit.plan(ms(820), 4000.0, bulk);
    // 520 over 0.6 s, held at 97%: far above what was planned.
    assert!(
        (plan.records_per_second - 520.0 / 0.6 * 0.97).abs() < 1e-6,
        "{plan:?}"
    );
    assert!(plan.records_per_second > 1.3 * first.records_per_second);
}

/// A bulk sink that takes nothing between two refusals for room says nothing of its
/// capacity but that the worker is over it: the limit falls by `beta`, not held.
#[test]
fn a_bulk_sink_taking_nothing_between_refusals_lowers_the_limit() {
    let bulk = BatchShape {
        max_batch: 200,
        record_bytes: None,
        ..shape()
    };
    let room = |sent_at: Duration| Refused {
        sent_at,
        retry_after: None,
        hint: None,
        emptied: true,
        records: 200,
        bytes: 0,
    };
    let mut limit = SinkLimit::new(LimitParams::default());
    limit.plan(ms(0), 4000.0, bulk);
    limit.on_throttle(ms(210), true, room(ms(200)));
    limit.on_written(ms(215), ms(215), 200, 0);
    let first = limit.plan(ms(220), 4000.0, bulk).records_per_second;
    limit.on_throttle(ms(500), true, room(ms(490)));
    let next = limit.plan(ms(520), 4000.0, bulk).records_per_second;
    assert!(
        (next - first * 0.7 * 0.97).abs() < 1e-6,
        "{first} -> {next}"
    );
}

/// Without a ceiling of ours (`rate = "auto"` or `"off"`: the cadence at the fastest rate
/// there is) the learned limit still binds: the floor is a share of it, not of that rate.
#[test]
fn without_a_ceiling_the_learned_limit_binds_and_the_floor_is_a_share_of_it() {
    let plan =
        learned_from_a_first_429().plan(ms(2500), crate::settings::bounds::MOST_RATE, shape());
    assert!((plan.records_per_second - 339.5).abs() < 1e-9, "{plan:?}");
    let quiet = learned_from_a_first_429().plan(
        ms(2020),
        crate::settings::bounds::MOST_RATE,
        BatchShape {
            tick: ms(20),
            ..shape()
        },
    );
    assert!(quiet.records_per_second <= 0.05 * 350.0 + 1e-9, "{quiet:?}");
}

/// After the push-back that ended first contact, a coarse tick goes in parts a sample's
/// span apart (100 ms at a 200 ms tick), so the next push-back, which closes the sample,
/// refuses a part of the first guess's tick and not all of it; an outage or four seconds
/// without one end it. The quiet after that first 429 holds fresh records at a coarse
/// tick (a fine one's plan holds them itself). Each push-back learned from is counted: the
/// pipeline plans again at once.
#[test]
fn after_first_contact_a_coarse_tick_goes_in_parts_until_a_sample() {
    let new = || {
        let mut limit = SinkLimit::new(LimitParams::default());
        for i in 1..=20 {
            limit.on_written(ms(100 * i), ms(100 * i), 100, 10_000);
        }
        limit.on_throttle(ms(2000), true, refused(Some(ms(10))));
        assert_eq!(limit.limit(Unit::Records), Some(700.0));
        assert_eq!(limit.lessons(), 1);
        limit
    };
    let mut limit = new();
    assert_eq!(limit.quiet_for(ms(2050), ms(200)), Some(ms(60)));
    assert_eq!(limit.quiet_for(ms(2050), ms(20)), None);
    assert_eq!(limit.quiet_for(ms(2110), ms(200)), None);
    // 679 rec/s: 136 records a tick, in two parts of 68.
    let plan = limit.plan(ms(2200), 2000.0, shape());
    assert_eq!((plan.batch, plan.parts), (136, 2));
    assert_eq!(limit.plan(ms(5900), 2000.0, shape()).parts, 2);
    assert_eq!(limit.plan(ms(6000), 2000.0, shape()).parts, 1);
    let mut limit = new();
    limit.on_outage();
    assert_eq!(limit.plan(ms(2200), 2000.0, shape()).parts, 1);
}
