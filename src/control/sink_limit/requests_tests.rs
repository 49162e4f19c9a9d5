//! The scenario bench's requests-limited sink on the model: 4 requests/s (burst 4), told
//! 400 rec/s at a 200 ms tick with `sink.max_batch = 100` — one request per tick is
//! already 5/s — and asked four times that. The bench drains 5,000 records: what the
//! learning costs shows in how long that takes, not only in the rate once learned.

use super::tests::{Setup, drive, report, secs};
use super::*;

/// The gateway, 30 s of it, and a worker asked `ceiling` records per second.
fn gateway(ceiling: f64) -> Setup {
    Setup {
        burst: 4,
        max_batch: 100,
        run_for: secs(30),
        ..Setup::new(Unit::Requests, 4.0, ceiling)
    }
}

/// Once learned, the rate holds 90% of the gateway or more, in full requests. Told the
/// capacity, whole batches from the end of slow start: 4 requests/s, never refused.
#[test]
fn requests_limited_sink_below_one_request_per_tick() {
    for ceiling in [400.0, 1600.0] {
        let setup = gateway(ceiling);
        let out = drive(setup);
        report("requests 4/s", &setup, &out);
        assert!(
            out.rate(secs(15), secs(30)) >= 0.9 * 400.0,
            "asked {ceiling}"
        );
        assert!(out.throttled_share() <= 0.05, "asked {ceiling}");
        assert!(out.sent_per_delivered() <= 1.03, "asked {ceiling}");
        if ceiling > 400.0 {
            assert_eq!(out.binding, Some(Unit::Requests), "asked {ceiling}");
        } else {
            assert_eq!(out.throttled, 0, "told");
            assert_eq!(out.batches[5..], [100; 146], "told");
        }
    }
}

/// The bench's drain, 5,000 records, of the 400 rec/s the gateway allows in batches of
/// 100: told, at least 92% (266 rec/s on this model before the experiments changed, 347
/// after, 373 with whole batches — slow start's 10, 20 and 40 records are what it lacks);
/// asked four times, at least 85% (321, then 357).
#[test]
fn the_benchs_drain_of_a_requests_limited_sink() {
    for ceiling in [400.0, 1600.0] {
        let out = drive(gateway(ceiling));
        let took = out.drained_by(5_000).expect("drained");
        eprintln!(
            "asked {ceiling}: 5,000 records by {took:?}: {:.0} rec/s; sent/delivered {:.4}",
            5_000.0 / took.as_secs_f64(),
            out.sent_per_delivered()
        );
        let least = if ceiling > 400.0 { 0.85 } else { 0.92 };
        assert!(
            5_000.0 / took.as_secs_f64() >= least * 400.0,
            "asked {ceiling}: {took:?}"
        );
    }
}

/// A records limit learned against the gateway (a first push-back misread, or remembered
/// from such a run): each second one request of five is refused and taken a tick later,
/// so the sink takes every record sent and re-learning records changes nothing. The
/// repeats show it is not records: an experiment finds requests (held 64 rec/s for the
/// whole minute before).
#[test]
fn a_records_limit_learned_against_a_request_gateway_is_unlearned() {
    for remembered in [60.0, 100.0, 200.0] {
        let out = drive(Setup {
            remembered: Some((Unit::Records, remembered)),
            run_for: secs(60),
            ..gateway(1600.0)
        });
        let late = out.rate(secs(30), secs(60));
        assert_eq!(out.binding, Some(Unit::Requests), "from {remembered}");
        assert!(late >= 0.9 * 400.0, "from {remembered}: {late:.0} rec/s");
    }
}

/// Whole batches are never larger than a quarter over a request the sink took: asked 640
/// records a tick with `sink.max_batch = 1000` and no slow start, a sink with a burst of 800
/// took the first 640 and would have refused every batch of 1,000 after it (640 records
/// delivered in a minute).
#[test]
fn whole_batches_stay_near_what_the_sink_took() {
    let out = drive(Setup {
        first_contact: FirstContactParams::NONE,
        ..Setup::new(Unit::Records, 800.0, 3200.0)
    });
    assert!(out.rate(secs(30), secs(60)) >= 0.9 * 800.0, "{out:?}");
    assert!(
        out.batches.iter().all(|&b| b < 1000),
        "{:?}",
        &out.batches[..10]
    );
}
