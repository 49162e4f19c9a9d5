//! Adaptive concurrency through the real binary against the sink emulator: a hard
//! concurrency limit that defers, and a latency knee (doubling per request past 2) that a
//! limit starting high must not stall on. The real binary drains a file; the emulator
//! counts what it accepted per 200 ms window. The algorithms' figures against Vector's
//! scenarios are measured under a paused clock in `tests/it/concurrency_scenarios.rs`.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use sluice::sim_sink::latency::LatencyModel;
use sluice::sim_sink::{Action, SimSink, SimSinkSettings};

const BATCH: u64 = 20;

struct Outcome {
    summary: serde_json::Value,
    /// The longest time the sink took no record, from its first to its last.
    longest_gap: Duration,
    /// Records the sink took that it already had.
    sink_duplicates: u64,
}

/// The sink emulator's latency: `base` 50 ms up to `knee` in flight, then doubling every
/// `k` more; the worker's `sink.timeout`.
struct Sink {
    knee: u32,
    k: f64,
    timeout: &'static str,
}

/// The runs measure real time on a small machine: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The emulator on its own one-thread runtime, taking any rate, answering per `latency`;
/// `tune` adjusts the rest of its configuration.
fn start_sim(
    latency: LatencyModel,
    tune: impl FnOnce(&mut SimSinkSettings),
) -> (tokio::runtime::Runtime, SimSink) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut cfg = SimSinkSettings::new("127.0.0.1:0".parse().unwrap(), 1_000_000.0);
    cfg.burst = 1_000_000;
    cfg.latency = latency;
    tune(&mut cfg);
    let sim = rt.block_on(SimSink::start(cfg)).unwrap();
    (rt, sim)
}

fn drain_into(sink: &Sink, concurrency: &str, records: usize, time_limit: Duration) -> Outcome {
    let latency = LatencyModel {
        base: Duration::from_millis(50),
        knee: sink.knee,
        factor: 2.0,
        k: sink.k,
        ..LatencyModel::default()
    };
    let (rt, sim) = start_sim(latency, |_| {});
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), records, &[]);
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"http\"\nurl = \"http://{}/ingest\"\nkey = \"/id\"\nmax_batch = {BATCH}\ntimeout = \"{}\"\n\n\
             [sink.dead_letters]\npath = \"dead.ndjson\"\n\n\
             [rate]\nrecords_per_second = 1000000\ntick = \"200ms\"\n\n\
             [concurrency]\n{concurrency}\n\n[shutdown]\ngrace = \"1s\"\n",
            sim.addr(),
            sink.timeout
        ),
    )
    .unwrap();
    let mut child = sluice()
        .current_dir(dir.path())
        .args(DRAIN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() && started.elapsed() < time_limit {
        std::thread::sleep(Duration::from_millis(100));
    }
    if child.try_wait().unwrap().is_none() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
    }
    let out = child.wait_with_output().unwrap();
    let summary = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    let (windows, window_ms, sink_duplicates) = {
        let _g = rt.enter();
        let stats = sim.stats();
        let windows: Vec<u64> = stats.windows.iter().map(|w| w.accepted).collect();
        (windows, stats.window_ms, stats.duplicates)
    };
    let busy: Vec<u64> = windows.into_iter().skip_while(|&n| n == 0).collect();
    let active = busy.len() - busy.iter().rev().take_while(|&&n| n == 0).count();
    let longest_idle = busy[..active]
        .split(|&n| n > 0)
        .map(<[u64]>::len)
        .max()
        .unwrap_or(0);
    let longest_gap = Duration::from_millis(longest_idle as u64 * window_ms);
    let accepted: u64 = busy.iter().sum();
    eprintln!(
        "{concurrency:?}: {summary} {accepted} accepted, \
         {sink_duplicates} already there, longest gap {longest_gap:?}"
    );
    Outcome {
        summary,
        longest_gap,
        sink_duplicates,
    }
}

/// Vector's "defers at high concurrency" through the real binary and HTTP: the emulator
/// answers 429 (no Retry-After) to requests beyond 5 in progress, 20 ms each, so at most
/// 250 requests per second. AIMD must find the limit and hold it: every record written
/// once, few requests deferred, and the sink kept busy. (The control loop's figures are
/// measured under a paused clock in `tests/it/concurrency_scenarios.rs`; this run checks the
/// wiring, with generous bounds.)
#[test]
fn aimd_holds_a_hard_concurrency_limit_through_http() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let latency = LatencyModel {
        base: Duration::from_millis(20),
        knee: u32::MAX,
        ..LatencyModel::default()
    };
    let (rt, sim) = start_sim(latency, |cfg| {
        cfg.concurrency_limit = Some((5, Action::Defer))
    });
    let dir = tempfile::tempdir().unwrap();
    let records = 3_000;
    write_records(&dir.path().join("in.ndjson"), records, &[]);
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"http\"\nurl = \"{}\"\nkey = \"/id\"\nmax_batch = 5\ntimeout = \"2s\"\n\n\
             [sink.dead_letters]\npath = \"dead.ndjson\"\n\n\
             [rate]\nrecords_per_second = 1000000\n\n\
             [concurrency]\nalgorithm = \"aimd\"\nmax = 64\ninitial = 1\ntarget_latency = \"40ms\"\n",
            sim.ingest_url()
        ),
    )
    .unwrap();
    let out = run_in(dir.path(), DRAIN);
    let summary = summary(&out);
    let stats = {
        let _g = rt.enter();
        sim.stats()
    };
    eprintln!(
        "{summary}; sink: {} requests, {} deferred, most in progress {}",
        stats.requests, stats.rejected, stats.max_concurrency
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary["written"], records as u64);
    assert_eq!(stats.inserted, records as u64);
    assert!(
        stats.rejected * 10 < stats.requests,
        "{} of {} requests deferred",
        stats.rejected,
        stats.requests
    );
    // 600 requests at up to 250/s take 2.4 s; a busy machine gets 5 × that.
    let elapsed = summary["elapsed_s"].as_f64().unwrap();
    assert!(elapsed < 12.0, "{elapsed} s");
}

/// Issue 25: gradient2 told to start at 32 against a sink whose latency doubles for every
/// request past 2 in flight. Without cuts the limit fell to 2–3 while the batches already
/// sent each waited for their 10 s timeout and were then all sent again together: writes
/// came in bursts 10 s apart and every resend was a duplicate. With cuts a write far over
/// the fallen limit is given up after 4 good round trips and sent again only under the
/// limit. The sink stores a request when it arrives, so resends after no answer are
/// duplicates: the summary counts them.
#[test]
fn gradient2_from_32_past_a_knee_of_2_does_not_stall() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let sink = Sink {
        knee: 2,
        k: 1.0,
        timeout: "10s",
    };
    let records = 2_000;
    let gradient2 = "algorithm = \"gradient2\"\nmax = 64\ninitial = 32";
    // The stall this guards against: 1,000 records without cuts took 54 s, mostly stalled
    // (its longest gap 10.8 s; 3.4 s in its first 20 s), so twice as many records with
    // cuts would show the stall if cuts stopped working (2,000 took 18 s; 4,000 took 29 s).
    let old = drain_into(
        &sink,
        &format!("{gradient2}\ncut_overdue = false"),
        records / 2,
        Duration::from_secs(120),
    );
    let new = drain_into(&sink, gradient2, records, Duration::from_secs(120));
    for (name, run) in [("without cuts", &old), ("with cuts", &new)] {
        eprintln!(
            "{name}: {} s, longest gap {:?}, duplicates {} (sink: {}), resent unanswered {}",
            run.summary["elapsed_s"],
            run.longest_gap,
            run.summary["duplicates"],
            run.sink_duplicates,
            run.summary["resent_unanswered"],
        );
    }
    let written = new.summary["written"].as_u64().unwrap();
    let duplicates = new.summary["duplicates"].as_u64().unwrap();
    assert_eq!(written + duplicates, records as u64);
    assert_eq!(new.summary["dead_lettered"], 0);
    assert!(
        new.longest_gap < Duration::from_secs(5),
        "no stall: {:?}",
        new.longest_gap
    );
    // Every duplicate the sink saw came from a resend the summary owned up to.
    assert!(
        new.summary["resent_unanswered"].as_u64().unwrap() >= new.sink_duplicates,
        "{}",
        new.summary
    );
    assert!(
        old.longest_gap >= Duration::from_secs(5),
        "the stall this guards against: {:?}",
        old.longest_gap
    );
}
