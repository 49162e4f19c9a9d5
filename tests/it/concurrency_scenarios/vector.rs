//! Vector's adaptive-concurrency scenarios, run by each algorithm against the floors
//! its measured results set.

use super::*;

/// One of Vector's scenarios: its parameters and the published ranges of the mean rate
/// (requests per second) and mean requests in flight at the sink.
struct Scenario {
    name: &'static str,
    requests: usize,
    overload: Overload,
    per_second: Option<usize>,
    /// The most requests per second the sink can take.
    possible: f64,
    rate: Option<(f64, f64)>,
    in_flight: (f64, f64),
    /// AIMD needs a target: just above the unloaded latency (above its jitter's p95).
    aimd_target_ms: u64,
}

fn scenarios() -> Vec<Scenario> {
    let ms100 = Duration::from_millis(100);
    let flat = Overload::knee(ms100, u32::MAX, 2.0, 1.0);
    let with = |f: &dyn Fn(&mut Overload)| {
        let mut o = flat;
        f(&mut o);
        o
    };
    vec![
        Scenario {
            name: "constant link",
            requests: 500,
            overload: flat,
            per_second: None,
            possible: f64::INFINITY,
            rate: None,
            in_flight: (15.0, 16.0),
            aimd_target_ms: 115,
        },
        Scenario {
            name: "jittery link",
            requests: 1000,
            overload: with(&|o| o.latency.jitter = 0.1),
            per_second: None,
            possible: f64::INFINITY,
            rate: Some((70.0, 150.0)),
            in_flight: (8.0, 20.0),
            aimd_target_ms: 150,
        },
        Scenario {
            name: "shallow knee",
            requests: 1000,
            overload: Overload::knee(ms100, 10, 1.1, 1.0),
            per_second: None,
            possible: 100.0,
            rate: Some((87.0, 89.0)),
            in_flight: (9.0, 11.0),
            aimd_target_ms: 115,
        },
        Scenario {
            name: "slow link",
            requests: 200,
            overload: with(&|o| o.latency.linear = 1.0),
            per_second: None,
            possible: 10.0,
            rate: None,
            in_flight: (1.5, 5.0),
            aimd_target_ms: 115,
        },
        Scenario {
            name: "defers at high concurrency",
            requests: 500,
            overload: with(&|o| o.limit = Some((5, Action::Defer))),
            per_second: None,
            possible: 50.0,
            rate: Some((20.0, 44.0)),
            in_flight: (2.4, 5.0),
            aimd_target_ms: 115,
        },
        Scenario {
            name: "drops at high concurrency",
            requests: 500,
            overload: with(&|o| o.limit = Some((5, Action::Drop))),
            per_second: None,
            possible: 50.0,
            rate: Some((15.0, 32.0)),
            in_flight: (1.8, 4.0),
            aimd_target_ms: 115,
        },
        Scenario {
            name: "defers at high rate",
            requests: 1000,
            overload: flat,
            per_second: Some(100),
            possible: 100.0,
            rate: Some((31.0, 75.0)),
            in_flight: (6.0, 9.0),
            aimd_target_ms: 115,
        },
    ]
}

/// Every scenario against `algorithm`, one request per record as in Vector's harness;
/// prints the rows of docs/concurrency.md. `floors` gives, per scenario, the share of the possible rate
/// the algorithm must reach at least; elsewhere the low end of Vector's range, where it
/// publishes one, is the floor.
async fn vector_scenarios(algorithm: ConcurrencyAlgorithm, floors: &[(&str, f64)]) {
    for s in scenarios() {
        let config = limit(algorithm, s.aimd_target_ms);
        let log = run(s.overload, s.per_second, &config, 1, s.requests).await;
        let m = measure(&log, u32::MAX);
        let vector_rate = s.rate.map_or("–".into(), |(lo, hi)| format!("{lo}–{hi}"));
        eprintln!(
            "| {} | {algorithm:?} | {:.1} | {vector_rate} | {:.1} (max {}) | {}–{} | {:.0} | {:.0} |",
            s.name,
            m.rate,
            m.in_flight,
            m.max_in_flight,
            s.in_flight.0,
            s.in_flight.1,
            m.mean_ms,
            m.p95_ms
        );
        let floor = floors.iter().find(|(name, _)| *name == s.name);
        if let (Some((lo, _)), None) = (s.rate, floor) {
            assert!(m.rate >= lo, "{algorithm:?} {}: {:.1}/s", s.name, m.rate);
        }
        if let Some((_, share)) = floor {
            assert!(
                m.rate >= share * s.possible,
                "{algorithm:?} {}: {:.1} of {}/s",
                s.name,
                m.rate,
                s.possible
            );
        }
        // Vector's latency bound for the slow link: a mean round trip within 450 ms.
        assert!(
            m.mean_ms <= 450.0,
            "{algorithm:?} {}: {:.0} ms",
            s.name,
            m.mean_ms
        );
    }
}

#[tokio::test(start_paused = true)]
async fn vector_scenarios_aimd() {
    vector_scenarios(
        ConcurrencyAlgorithm::Aimd,
        &[
            ("shallow knee", 0.95),
            ("defers at high concurrency", 0.93),
            ("drops at high concurrency", 0.94),
            ("defers at high rate", 0.85),
        ],
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn vector_scenarios_vegas() {
    // Rounds judged as one, a drop cut unsmoothed by what was pushed back and the level
    // pushed back probed ever more rarely: at a hard limit 41.0–41.7/s (27 before), at a
    // rate limit 57.0/s (26.1 before, under Vector's 31). A deferral the writes in flight
    // explain no longer pauses the worker: 47.7/s at the hard limit (41.0 before). No
    // drain to the minimum while writes still run at the no-load latency: 49.2/s there,
    // 40.3/s dropping (37.8), 59.4/s at the rate limit (57.0). No growth while a write is
    // stalled (a drop not yet timed out): 48.0–48.5/s dropping. A +beta that overshot
    // taken back whole: 95.3/s on the shallow knee (89.5).
    vector_scenarios(
        ConcurrencyAlgorithm::Vegas,
        &[
            ("shallow knee", 0.94),
            ("defers at high concurrency", 0.9),
            ("drops at high concurrency", 0.94),
            ("defers at high rate", 0.55),
        ],
    )
    .await;
}

/// Vegas against a rate limit with other seeds of its probe jitter: 59.4–59.8 requests/s
/// on each (12.6–51.6 over seeds 1–5 and 11 before, when it climbed to 60 in flight and
/// the deferrals came in a burst; Vector's floor is 31).
#[tokio::test(start_paused = true)]
async fn vegas_meets_vectors_floor_at_a_rate_limit_whatever_its_probe_seed() {
    let s = scenarios()
        .into_iter()
        .find(|s| s.name == "defers at high rate")
        .unwrap();
    let config = limit(ConcurrencyAlgorithm::Vegas, s.aimd_target_ms);
    for seed in 1..=5 {
        let limit = VegasLimit::new(
            config.initial(),
            config.min,
            config.max,
            config.smoothing,
            seed,
        );
        let log = run_with(
            s.overload,
            s.per_second,
            &config,
            Box::new(limit),
            1,
            s.requests,
        )
        .await;
        let m = measure(&log, u32::MAX);
        eprintln!("vegas, seed {seed}: {:.1}/s", m.rate);
        assert!(m.rate >= 0.55 * s.possible, "seed {seed}: {:.1}/s", m.rate);
    }
}

#[tokio::test(start_paused = true)]
async fn vector_scenarios_gradient2() {
    // Growth only within 1.05 × the long average and a start by one per round: 93/s on
    // the shallow knee at 12 in flight, p95 133 ms (75.3/s, p95 380 ms before). A round
    // with drops cut by what was pushed back and that level probed ever more rarely: at a
    // hard limit 43.2/s deferring, 42.8/s dropping (33.9 and 37.6 before); 49.0/s
    // deferring once a deferral the writes in flight explain no longer pauses the worker.
    // No growth while a write is stalled: 48.2–48.3/s dropping. The start's last step
    // undone when it bought latency only: 95.0/s on the shallow knee at 11–12 in flight.
    vector_scenarios(
        ConcurrencyAlgorithm::Gradient2,
        &[
            ("shallow knee", 0.94),
            ("defers at high concurrency", 0.9),
            ("drops at high concurrency", 0.94),
        ],
    )
    .await;
}
