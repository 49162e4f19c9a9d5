//! One strategy draining the backlog into a fresh emulator (`sluice sim-sink` in this
//! process), optionally with an outage once a third of the backlog has landed. The
//! emulator's ledger is the authority for what reached the sink; the client adds only
//! its own view of write latency.

use std::path::Path;
use std::time::Duration;

use sluice::sim_sink::{OutageMode, SimSink, SimSinkConfig, SimStats};

use crate::process::run_measured;
use crate::strategy::Strategy;

#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub backlog: usize,
    /// The emulator's records per second (one second of burst).
    pub capacity: f64,
    /// 503s for this long, starting when a third of the backlog has landed.
    pub outage: Option<Duration>,
}

/// Where an outage fell, on the emulator's clock (its windows count from its start).
#[derive(Debug, Clone, Copy)]
pub struct OutageSpan {
    pub start: Duration,
    pub end: Duration,
}

pub struct Run {
    pub strategy: Strategy,
    pub sink: SimStats,
    pub elapsed: Duration,
    pub peak_rss_kib: u64,
    pub write_p50_ms: Option<f64>,
    pub write_p95_ms: Option<f64>,
    pub outage: Option<OutageSpan>,
}

/// Runs `strategy` over `input` (the backlog, `setup.backlog` records) to the end and
/// checks that every record landed exactly once as far as the sink's keys go.
pub async fn run(strategy: Strategy, input: &Path, setup: Setup) -> Run {
    let listen = "127.0.0.1:0".parse().unwrap();
    let sim = SimSink::start(SimSinkConfig::new(listen, setup.capacity))
        .await
        .expect("the emulator starts");
    let dir = tempfile::tempdir().unwrap();
    let cmd = strategy.command(input, &sim.ingest_url(), setup.capacity, dir.path());
    let child = tokio::task::spawn_blocking(move || run_measured(cmd));
    let outage = match setup.outage {
        Some(length) => Some(take_down(&sim, setup.backlog as u64 / 3, length).await),
        None => None,
    };
    let measured = child.await.expect("the run's thread");
    let sink = sim.stats();
    sim.stop().await.unwrap();
    assert_eq!(
        sink.inserted,
        setup.backlog as u64,
        "{}: every record lands",
        strategy.name()
    );
    let report = measured.json();
    let ms = |key: &str| report[key].as_f64();
    Run {
        strategy,
        elapsed: measured.elapsed,
        peak_rss_kib: measured.peak_rss_kib,
        write_p50_ms: ms("write_p50_ms"),
        write_p95_ms: ms("write_p95_ms"),
        sink,
        outage,
    }
}

/// Waits until `landed` records are in, then answers 503 for `length`.
async fn take_down(sim: &SimSink, landed: u64, length: Duration) -> OutageSpan {
    while sim.stats().inserted < landed {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sim.outage(length, OutageMode::Unavailable);
    let start = sim.uptime();
    OutageSpan {
        start,
        end: start + length,
    }
}
