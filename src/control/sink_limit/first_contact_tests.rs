//! Slow start on the fake-clock model of `tests.rs`: what it saves at first contact, and
//! what it costs a worker told the capacity.

use std::time::Duration;

use super::tests::{Setup, drive, ms, report, secs};
use super::*;

/// The scenario bench's (e′): 200 ms ticks, `sink.max_batch` at its default, a
/// 10,000-record backlog. Without first contact the first refused request is a tick at
/// four times the capacity (640 records), and this model sends 1.087 records per
/// delivered, as the bench measured (1.08); with it, a part of a tick is refused (160, at
/// 0.85 s) and a part of a tick at the first guess (103, at 1.5 s), which closes the
/// sample: 1.024, where the bench reads 1.026–1.027 (160, then 101 or 109). Before the
/// first guess's ticks went in parts it was a whole tick (205; the bench 217): 1.034.
#[test]
fn records_limited_sink_over_asked_as_in_the_bench() {
    let setup = Setup {
        run_for: secs(13),
        ..Setup::new(Unit::Records, 800.0, 3200.0)
    };
    let out = drive(setup);
    report("bench e'", &setup, &out);
    assert_eq!(out.binding, Some(Unit::Records));
    assert!(
        out.sent_per_delivered() <= 1.025,
        "{}",
        out.sent_per_delivered()
    );
    assert!(out.rate(secs(6), secs(13)) >= 0.95 * 800.0);
    let without = drive(Setup {
        first_contact: FirstContactParams::NONE,
        ..setup
    });
    assert!(
        out.sent_per_delivered() - 1.0 <= 0.5 * (without.sent_per_delivered() - 1.0),
        "{} against {} without first contact",
        out.sent_per_delivered(),
        without.sent_per_delivered()
    );
}

/// Told the capacity, the ramp reaches it within a second: the first tick at once, an
/// eighth, a quarter, a half, then from 0.6 s every window is on target.
#[test]
fn told_the_capacity_first_contact_reaches_it_within_a_second() {
    let setup = Setup {
        run_for: secs(20),
        ..Setup::new(Unit::Records, 800.0, 800.0)
    };
    let out = drive(setup);
    report("records 1x, 20 s", &setup, &out);
    assert_eq!(out.throttled, 0);
    assert_eq!(
        out.reached(Duration::ZERO, 800.0),
        Some(ms(800)),
        "{:?}",
        &out.windows[..8]
    );
    assert_eq!(
        out.on_target(ms(600), setup.run_for, 800.0),
        1.0,
        "{:?}",
        &out.windows[..8]
    );
}
