//! Vector's adaptive-concurrency scenarios (`tests/data/adaptive-concurrency/*.yaml` in
//! vectordotdev/vector), run through sluice's real pipeline, deliveries and limit gate
//! under tokio's paused clock, against a modelled sink: the sim-sink's overload model
//! ([`Overload`]) answering in virtual time: a scenario of minutes runs in well under a
//! second. The sink's jitter, Vegas's probes and the throttle's pause jitter are seeded;
//! where the sink defers, retries' backoff jitter still makes runs differ a little
//! (AIMD 89–90/s at a high rate).
//!
//! As in Vector's harness, a request is one record and the source never runs dry; the
//! sink's concurrency is what it sees in progress (deferred requests included). The
//! figures printed here are the table in docs/concurrency.md.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rand::SeedableRng;
use rand::rngs::StdRng;
use sluice::config::{ConcurrencyAlgorithm, ConcurrencyConfig, RateConfig};
use sluice::control::cadence::Cadence;
use sluice::control::limit::ConcurrencyLimit;
use sluice::control::limit::vegas::VegasLimit;
use sluice::decode::Decoder;
use sluice::pipeline::clock::TokioClock;
use sluice::pipeline::{Pipeline, RunOptions};
use sluice::record::{DeadLetter, Position, Record, Row};
use sluice::sim_sink::overload::{Action, Answer, Overload};
use sluice::sink::{Sink, WriteOutcome};
use sluice::source::{Backlog, Pulled, Source, SourceError};
use sluice::stats::Stats;
use sluice::write::{WritePath, WriteSettings};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Endless records, one per request.
struct Endless {
    next: u64,
}

#[async_trait]
impl Source for Endless {
    async fn pull(&mut self, max: usize) -> Result<Pulled, SourceError> {
        let records = (self.next..self.next + max as u64)
            .map(|i| Record {
                position: Position {
                    lane: 0,
                    start: i,
                    end: i + 1,
                },
                origin: format!("mem:{i}"),
                fallback_key: format!("mem:{i}"),
                payload: format!("{{\"id\":{i}}}").into_bytes(),
                oversize: None,
                context: Default::default(),
            })
            .collect();
        self.next += max as u64;
        Ok(Pulled {
            records,
            caught_up: false,
        })
    }
    async fn ack(&mut self, _positions: &[Position]) -> Result<(), SourceError> {
        Ok(())
    }
    async fn backlog(&mut self) -> Result<Backlog, SourceError> {
        Ok(Backlog::Unknown)
    }
    async fn close(&mut self, _drained: bool) -> Result<(), SourceError> {
        Ok(())
    }
}

/// One request as the sink saw it.
#[derive(Debug, Clone, Copy)]
struct Request {
    /// Since the start of the run.
    at: Duration,
    /// Requests in progress at the sink when it arrived, itself included.
    concurrency: u32,
    /// How long the client waited for the answer (a dropped one: its timeout).
    rtt: Duration,
    /// How long it counted as in progress at the sink (a dropped one: not at all).
    busy: Duration,
    taken: bool,
}

/// The modelled sink: answers as `sluice sim-sink` would with the same overload model,
/// in tokio's (paused) time. A dropped request is never answered: the client's timeout
/// (`sink.timeout` of the http sink) ends it. Once `requests` were taken, the run stops.
struct ModelSink {
    start: Instant,
    overload: Overload,
    timeout: Duration,
    requests: usize,
    done: Mutex<Option<CancellationToken>>,
    /// More requests than this arriving within a second are deferred (Vector's `rate`).
    per_second: Option<usize>,
    arrivals: Mutex<VecDeque<Duration>>,
    in_progress: AtomicU32,
    taken: AtomicUsize,
    rng: Mutex<StdRng>,
    log: Mutex<Vec<Request>>,
}

#[async_trait]
impl Sink for ModelSink {
    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        let concurrency = self.in_progress.fetch_add(1, Ordering::SeqCst) + 1;
        let at = self.start.elapsed();
        let mut answer = self
            .overload
            .answer(concurrency, &mut *self.rng.lock().unwrap());
        if let Some(limit) = self.per_second {
            let mut arrivals = self.arrivals.lock().unwrap();
            while arrivals
                .front()
                .is_some_and(|t| at - *t >= Duration::from_secs(1))
            {
                arrivals.pop_front();
            }
            arrivals.push_back(at);
            if arrivals.len() > limit {
                answer = Answer::Defer(self.overload.latency.delay(1));
            }
        }
        let (rtt, busy, outcome) = match answer {
            Answer::Take(delay) => (
                delay,
                delay,
                WriteOutcome::Written {
                    inserted: rows.len() as u64,
                    duplicates: 0,
                },
            ),
            Answer::Defer(delay) => (
                delay,
                delay,
                WriteOutcome::Throttled {
                    retry_after: None,
                    unit: None,
                    reason: "HTTP 429".into(),
                },
            ),
            Answer::Drop => (
                self.timeout,
                Duration::ZERO,
                WriteOutcome::Unavailable("operation timed out".into()),
            ),
        };
        tokio::time::sleep(busy).await;
        self.in_progress.fetch_sub(1, Ordering::SeqCst);
        tokio::time::sleep(rtt - busy).await;
        let taken = matches!(outcome, WriteOutcome::Written { .. });
        self.log.lock().unwrap().push(Request {
            at,
            concurrency,
            rtt,
            busy,
            taken,
        });
        if taken
            && self.taken.fetch_add(1, Ordering::SeqCst) + 1 == self.requests
            && let Some(done) = self.done.lock().unwrap().take()
        {
            done.cancel();
        }
        outcome
    }
    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        WriteOutcome::Written {
            inserted: letters.len() as u64,
            duplicates: 0,
        }
    }
}

/// What a run measured, as Vector's harness does: over the whole run, from the first
/// request until the last of `requests` was taken.
#[derive(Debug)]
struct Measured {
    /// Requests taken per second.
    rate: f64,
    /// Mean requests in progress at the sink (time-weighted), and the most.
    in_flight: f64,
    max_in_flight: u32,
    /// Mean and p95 round trip of the taken requests, milliseconds.
    mean_ms: f64,
    p95_ms: f64,
    /// Share of all requests sent that arrived with more than `knee` in progress.
    past_knee: f64,
}

fn measure(log: &[Request], knee: u32) -> Measured {
    let end = log
        .iter()
        .map(|r| r.at + r.rtt)
        .max()
        .unwrap_or_default()
        .as_secs_f64();
    let taken: Vec<&Request> = log.iter().filter(|r| r.taken).collect();
    let busy: f64 = log.iter().map(|r| r.busy.as_secs_f64()).sum();
    let mut rtts: Vec<f64> = taken.iter().map(|r| r.rtt.as_secs_f64() * 1e3).collect();
    rtts.sort_by(f64::total_cmp);
    let p95_ms = rtts[(rtts.len() * 95).div_ceil(100) - 1];
    let past = log.iter().filter(|r| r.concurrency > knee).count();
    Measured {
        rate: taken.len() as f64 / end,
        in_flight: busy / end,
        max_in_flight: log.iter().map(|r| r.concurrency).max().unwrap_or(0),
        mean_ms: rtts.iter().sum::<f64>() / rtts.len() as f64,
        p95_ms,
        past_knee: past as f64 / log.len() as f64,
    }
}

/// Runs `concurrency` against `overload` until `requests` were taken; records arrive far
/// faster than the sink takes them, `batch` to a request.
async fn run(
    overload: Overload,
    per_second: Option<usize>,
    concurrency: &ConcurrencyConfig,
    batch: usize,
    requests: usize,
) -> Vec<Request> {
    let limit = build(concurrency);
    run_with(overload, per_second, concurrency, limit, batch, requests).await
}

/// As [`run`], with this limit.
async fn run_with(
    overload: Overload,
    per_second: Option<usize>,
    concurrency: &ConcurrencyConfig,
    limit: Box<dyn ConcurrencyLimit>,
    batch: usize,
    requests: usize,
) -> Vec<Request> {
    let stopped = CancellationToken::new();
    let trigger = stopped.clone();
    let sink = Arc::new(ModelSink {
        start: Instant::now(),
        overload,
        timeout: Duration::from_secs(1),
        requests,
        per_second,
        arrivals: Mutex::new(VecDeque::new()),
        done: Mutex::new(Some(trigger)),
        in_progress: AtomicU32::new(0),
        taken: AtomicUsize::new(0),
        rng: Mutex::new(StdRng::seed_from_u64(7)),
        log: Mutex::new(Vec::new()),
    });
    let stats = Arc::new(Stats::default());
    let rate = RateConfig {
        records_per_second: 1_000_000.0.into(),
        tick: Duration::from_millis(200),
    };
    let settings = WriteSettings {
        rate: rate.clone(),
        concurrency: concurrency.clone(),
        ..WriteSettings::default()
    };
    let pipeline = Pipeline::new(
        Box::new(Endless { next: 0 }),
        Decoder::new(Some("/id".into())),
        Cadence::new(
            rate.records_per_second.cadence_rate(),
            rate.tick,
            TokioClock::default(),
        ),
        WritePath::with_limit(sink.clone(), &settings, limit, stats.clone()).seeded(3),
        stats,
        RunOptions {
            until_empty: false,
            max_records: None,
            max_batch: batch,
            max_batch_bytes: None,
            max_in_flight: concurrency.max,
            grace: Duration::from_secs(5),
            capacity_by_share: None,
            rate_ceiling: None,
        },
    );
    let _ = pipeline.run(stopped).await;
    sink.log.lock().unwrap().clone()
}

/// The configured limit; Vegas with a fixed seed for its probe jitter (the worker seeds
/// it at random), so that a run is the same every time.
fn build(c: &ConcurrencyConfig) -> Box<dyn ConcurrencyLimit> {
    match c.algorithm {
        ConcurrencyAlgorithm::Vegas => {
            Box::new(VegasLimit::new(c.initial(), c.min, c.max, c.smoothing, 11))
        }
        _ => c.build(),
    }
}

fn limit(algorithm: ConcurrencyAlgorithm, target_ms: u64) -> ConcurrencyConfig {
    ConcurrencyConfig {
        algorithm,
        max: 64,
        initial: Some(1),
        target_latency: Duration::from_millis(target_ms),
        ..ConcurrencyConfig::default()
    }
}

/// The knee: 50 ms up to 8 in flight, twice as slow for every 2 more (71 ms at
/// 9), AIMD's target between the two; a little jitter, as a real sink has. Goodput
/// within 10% of the knee's (8 × 20 records per 50 ms), p95 within 10% of the target,
/// and fewer than 5% of the writes past the knee.
#[tokio::test(start_paused = true)]
async fn aimd_keeps_a_flat_then_steep_knee_full_without_breaking_its_target() {
    let mut overload = Overload::knee(Duration::from_millis(50), 8, 2.0, 2.0);
    overload.latency.jitter = 0.02;
    let log = run(
        overload,
        None,
        &limit(ConcurrencyAlgorithm::Aimd, 60),
        20,
        5_000,
    )
    .await;
    let m = measure(&log, 8);
    eprintln!("{m:?}");
    let knee = 8.0 / 0.050;
    assert!(m.rate >= 0.9 * knee, "{:.1} of {knee} requests/s", m.rate);
    assert!(m.p95_ms <= 66.0, "p95 {:.1} ms", m.p95_ms);
    assert!(
        m.past_knee < 0.05,
        "{:.1}% past the knee",
        m.past_knee * 100.0
    );
}

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
