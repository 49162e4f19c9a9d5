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
use sluice::config::{ConcurrencyAlgorithm, ConcurrencySettings, RateSettings};
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

mod vector;

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
                undecodable: None,
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
    concurrency: &ConcurrencySettings,
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
    concurrency: &ConcurrencySettings,
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
    let rate = RateSettings {
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
fn build(c: &ConcurrencySettings) -> Box<dyn ConcurrencyLimit> {
    match c.algorithm {
        ConcurrencyAlgorithm::Vegas => {
            Box::new(VegasLimit::new(c.initial(), c.min, c.max, c.smoothing, 11))
        }
        _ => c.build(),
    }
}

fn limit(algorithm: ConcurrencyAlgorithm, target_ms: u64) -> ConcurrencySettings {
    ConcurrencySettings {
        algorithm,
        max: 64,
        initial: Some(1),
        target_latency: Duration::from_millis(target_ms),
        ..ConcurrencySettings::default()
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
