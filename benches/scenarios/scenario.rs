//! One strategy draining the backlog into a fresh emulator (`sluice sim-sink` in this
//! process) that limits one unit, optionally with an outage once a third of the backlog
//! has landed. The emulator's ledger is the authority for what reached the sink; the
//! client adds only its own view of write latency.

use std::path::Path;
use std::time::Duration;

use sluice::sim_sink::{OutageMode, SimSink, SimSinkSettings, SimStats};

use crate::limit::Limit;
use crate::process::run_measured_within;
use crate::strategy::Strategy;

#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub backlog: usize,
    /// What the emulator limits, per second (one second of burst).
    pub limit: Limit,
    /// 503s for this long, starting when a third of the backlog has landed.
    pub outage: Option<Duration>,
}

impl Setup {
    /// How long a run may take before it is stopped and reported unfinished: five times
    /// the drain at the capacity, at least a minute, plus the outage.
    pub fn time_limit(&self) -> Duration {
        let ideal = self.backlog as f64 / self.limit.records_per_second;
        Duration::from_secs_f64((5.0 * ideal).max(60.0)) + self.outage.unwrap_or_default()
    }
}

/// Where an outage fell, on the emulator's clock (its windows count from its start).
#[derive(Debug, Clone, Copy)]
pub struct OutageSpan {
    pub start: Duration,
    pub end: Duration,
}

pub struct Run {
    pub strategy: Strategy,
    pub limit: Limit,
    pub sink: SimStats,
    pub elapsed: Duration,
    /// False when it was stopped at `Setup::time_limit`, its backlog not all landed.
    pub finished: bool,
    pub peak_rss_kib: u64,
    pub write_p50_ms: Option<f64>,
    pub write_p95_ms: Option<f64>,
    pub outage: Option<OutageSpan>,
}

/// Runs `strategy` over `input` (the backlog, `setup.backlog` records) to the end, or
/// until the setup's time limit, and checks that every record landed exactly once as far
/// as the sink's keys go when it finished.
pub async fn run(strategy: Strategy, input: &Path, setup: Setup) -> Run {
    let listen = "127.0.0.1:0".parse().unwrap();
    let mut config = SimSinkSettings::new(listen, setup.limit.capacity);
    config.unit = setup.limit.unit;
    let sim = SimSink::start(config).await.expect("the emulator starts");
    let dir = tempfile::tempdir().unwrap();
    let cmd = strategy.command(input, &sim.ingest_url(), &setup.limit, dir.path());
    let limit = setup.time_limit();
    let child = tokio::task::spawn_blocking(move || run_measured_within(cmd, limit));
    let outage = match setup.outage {
        Some(length) => take_down(&sim, setup.backlog as u64 / 3, length, limit).await,
        None => None,
    };
    let measured = child.await.expect("the run's thread");
    let sink = sim.stats();
    sim.stop().await.unwrap();
    if measured.finished {
        assert_eq!(
            sink.inserted,
            setup.backlog as u64,
            "{}: every record lands",
            strategy.name()
        );
    } else {
        eprintln!(
            "scenarios: {} into {} stopped after {:.0} s, {} of {} landed",
            strategy.name(),
            setup.limit.describe(),
            measured.elapsed.as_secs_f64(),
            sink.inserted,
            setup.backlog
        );
    }
    if let Some(dir) = std::env::var_os("SLUICE_BENCH_LOGS") {
        let name = format!(
            "{}-{}{}.log",
            strategy
                .name()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
            setup.limit.name(),
            if setup.outage.is_some() {
                "-outage"
            } else {
                ""
            }
        );
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(Path::new(&dir).join(name), &measured.output.stderr).unwrap();
    }
    let report = measured.finished.then(|| measured.json());
    let ms = |key: &str| report.as_ref().and_then(|r| r[key].as_f64());
    Run {
        strategy,
        limit: setup.limit,
        elapsed: measured.elapsed,
        finished: measured.finished,
        peak_rss_kib: measured.peak_rss_kib,
        write_p50_ms: ms("write_p50_ms"),
        write_p95_ms: ms("write_p95_ms"),
        sink,
        outage,
    }
}

/// Waits until `landed` records are in, then answers 503 for `length`; gives up after
/// `limit` (a run too slow ever to get there).
async fn take_down(
    sim: &SimSink,
    landed: u64,
    length: Duration,
    limit: Duration,
) -> Option<OutageSpan> {
    let started = tokio::time::Instant::now();
    while sim.stats().inserted < landed {
        if started.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sim.outage(length, OutageMode::Unavailable);
    let start = sim.uptime();
    Some(OutageSpan {
        start,
        end: start + length,
    })
}
