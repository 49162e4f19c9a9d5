//! What the worker's own bookkeeping (cadence, backpressure, concurrency limit, stats) costs
//! per record outside of I/O, to hold against a sink's per-row cost.
//! Run with `cargo bench --bench bookkeeping`.

use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use governor::clock::{Clock, FakeRelativeClock};
use sluice::config::{
    Backoffs, ConcurrencyAlgorithm, ConcurrencySettings, RateSettings, RetrySettings,
    ThrottleSettings,
};
use sluice::control::cadence::Cadence;
use sluice::control::target_rate::TargetRate;
use sluice::pipeline::clock::TokioClock;
use sluice::stats::Stats;
use sluice::telemetry::metrics::{REQUESTS, WRITE_SECONDS};
use sluice::write::backpressure::Backpressure;
use sluice::write::limit_gate::LimitGate;

const TICK: Duration = Duration::from_millis(200);
const MAX_BATCH: u64 = 1000;

/// (name, records per second): at a 200 ms tick, each tick's quantum is one batch.
const SHAPES: [(&str, f64); 2] = [("20_per_tick", 100.0), ("1000_per_batch", 5000.0)];

const ALGORITHMS: [(&str, ConcurrencyAlgorithm); 4] = [
    ("fixed", ConcurrencyAlgorithm::Fixed),
    ("aimd", ConcurrencyAlgorithm::Aimd),
    ("vegas", ConcurrencyAlgorithm::Vegas),
    ("gradient2", ConcurrencyAlgorithm::Gradient2),
];

/// One worker's control state, wired as `cli` wires it. The cadence runs on a fake clock
/// advanced a tick per batch, so its bucket refills exactly without sleeping; everything
/// else reads the real clock, as in production.
struct Worker {
    clock: FakeRelativeClock,
    cadence: Cadence<FakeRelativeClock>,
    target_rate: TargetRate,
    pressure: Backpressure,
    gate: LimitGate,
    stats: Arc<Stats>,
    max_in_flight: usize,
    writes: u64,
}

impl Worker {
    fn new(rate: f64, algorithm: ConcurrencyAlgorithm) -> Self {
        let concurrency = ConcurrencySettings {
            algorithm,
            ..ConcurrencySettings::default()
        };
        let rate_config = RateSettings {
            records_per_second: sluice::config::RecordsPerSecond::Fixed(rate),
            tick: TICK,
        };
        let stats = Arc::new(Stats::default());
        let clock = FakeRelativeClock::default();
        let cadence = Cadence::new(rate, TICK, clock.clone());
        let pressure = Backpressure::new(
            &ThrottleSettings::default(),
            &RetrySettings::default(),
            &rate_config,
            Backoffs::new(&RetrySettings::default(), &ThrottleSettings::default()).outage,
            stats.clone(),
        );
        pressure.set_ceiling(cadence.rate());
        let gate = LimitGate::new(concurrency.build());
        // The other batches in flight: every sample then reports a full pipeline, which
        // takes the adaptive limits through their whole update instead of an early return.
        for _ in 1..concurrency.initial() {
            gate.started();
        }
        Worker {
            clock,
            target_rate: TargetRate::new(cadence.rate()),
            cadence,
            pressure,
            gate,
            stats,
            max_in_flight: concurrency.max,
            writes: 0,
        }
    }

    /// One tick and the batch it grants, in the order `Pipeline::run` and
    /// `Delivery::write` make these calls; returns the records granted.
    fn tick_and_batch(&mut self) -> u64 {
        self.clock.advance(TICK);
        let quantum = u64::from(self.cadence.quantum());
        let fresh = quantum - self.pressure.settle_owed(quantum);
        let mut allowance = if self.pressure.is_paused() { 0 } else { fresh };
        self.stats.source_up.store(true, Relaxed);

        let limit = self.gate.limit().min(self.max_in_flight);
        self.stats.concurrency_limit.store(limit as u64, Relaxed);
        let mut granted = 0;
        if limit > 0 && !self.pressure.is_paused() {
            granted = u64::from(self.cadence.take(allowance.min(MAX_BATCH) as u32));
            allowance -= granted;
            self.stats.source_caught_up.store(false, Relaxed);
            self.stats.source_up.store(true, Relaxed);
            Stats::add(&self.stats.pulled, granted);
        }
        black_box(allowance);

        let quantum = self.cadence.quantum();
        self.pressure.set_ceiling(self.target_rate.get());
        let plan = self
            .pressure
            .plan(self.cadence.tick(), MAX_BATCH as usize, None);
        self.cadence.set_rate(plan.records_per_second);
        self.stats.rate_limit.set(self.cadence.rate());
        black_box(self.cadence.quantum() != quantum);
        self.stats.batches_in_flight.store(1, Relaxed);

        self.pressure.first_attempt();
        let sent_at = black_box(ready(self.pressure.clear_to_send()));
        let inflight = self.gate.started();
        let rtt = self.next_rtt();
        self.gate.finished(rtt, inflight, false);
        metrics::histogram!(WRITE_SECONDS).record(rtt.as_secs_f64());
        self.stats.write_latency.record(rtt);
        metrics::counter!(REQUESTS, "outcome" => "written").increment(1);
        self.pressure.written(granted, granted * 100, sent_at);
        Stats::add(&self.stats.written, granted);
        Stats::add(&self.stats.duplicates, 0);
        granted
    }

    /// 40–60 ms, with every 32nd write past aimd's 200 ms target so the limits move both
    /// ways.
    fn next_rtt(&mut self) -> Duration {
        self.writes += 1;
        if self.writes.is_multiple_of(32) {
            Duration::from_millis(250)
        } else {
            Duration::from_millis(40 + self.writes * 7 % 21)
        }
    }
}

/// Polls a future that must finish at once (the worker is never paused here).
fn ready<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the future was expected to be ready"),
    }
}

fn bench_shapes(c: &mut Criterion, group: &str, algorithms: &[(&str, ConcurrencyAlgorithm)]) {
    for (shape, rate) in SHAPES {
        let mut g = c.benchmark_group(format!("{group}/{shape}"));
        let records = (rate * TICK.as_secs_f64()) as u64;
        g.throughput(Throughput::Elements(records));
        for &(name, algorithm) in algorithms {
            let mut worker = Worker::new(rate, algorithm);
            assert_eq!(worker.tick_and_batch(), records, "a full quantum per tick");
            g.bench_function(BenchmarkId::from_parameter(name), |b| {
                b.iter(|| worker.tick_and_batch())
            });
        }
        g.finish();
    }
}

/// Without a metrics recorder, as when `telemetry.listen` is unset: the metrics calls are
/// no-ops.
fn batches(c: &mut Criterion) {
    bench_shapes(c, "batch", &ALGORITHMS);
}

/// With the Prometheus recorder the telemetry server installs. It is process-wide, so this
/// runs after every case that must go without it.
fn batches_with_prometheus(c: &mut Criterion) {
    sluice::telemetry::metrics::handle();
    bench_shapes(c, "batch_prometheus", &ALGORITHMS[..1]);
}

/// What the fake clock leaves out: production's cadence reads `TokioClock` twice per take.
fn clocks(c: &mut Criterion) {
    let mut g = c.benchmark_group("clock_now");
    let tokio = TokioClock::default();
    g.bench_function("tokio", |b| b.iter(|| tokio.now()));
    let fake = FakeRelativeClock::default();
    g.bench_function("fake", |b| b.iter(|| fake.now()));
    g.finish();
}

criterion_group!(benches, batches, clocks, batches_with_prometheus);
criterion_main!(benches);
