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

/// Once learned, the rate holds 90% of the gateway or more, in full requests.
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
        assert_eq!(out.binding, Some(Unit::Requests), "asked {ceiling}");
    }
}

/// The bench's drain, 5,000 records, at least 85% of the 400 rec/s the gateway allows in
/// batches of 100, told or asked four times (266 and 321 rec/s on this model before the
/// experiments changed; 347 and 357 after). Told the capacity, the first 3.4 s go as
/// requests of 80 (a tick's worth), and of 10 to 40 in slow start, before any push-back can
/// say that requests are what the gateway counts.
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
        assert!(
            5_000.0 / took.as_secs_f64() >= 0.85 * 400.0,
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
