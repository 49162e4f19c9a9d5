//! The scenario bench: the same backlog drained into `sluice sim-sink` by what a user
//! would write instead and by sluice, side by side, against a sink that limits records,
//! one that limits requests and one that limits request-body bytes (see `limit.rs` for
//! how each strategy is told the capacity in those units), plus an outage and the
//! throughput ceilings of the real paths. `cargo bench --bench scenarios` runs it in full
//! (10,000 records into 800 rec/s, 5,000 into 4 requests/s, 10,000 into 800 records' worth
//! of bytes/s, a 30 s outage in each, 100,000-record ceilings) and prints markdown tables;
//! plots go to `target/scenarios/`. Under `cargo test` it runs a small smoke variant and
//! checks its results, so the bench cannot silently rot.
//!
//! `SLUICE_BENCH_CEILING_RECORDS` changes the ceilings' backlog. To compare two builds of
//! sluice in one session, `SLUICE_BENCH_STRATEGIES=sluice,sluice-4x` runs only those
//! strategies (and no ceilings) and `SLUICE_BENCH_SLUICE=path` drains with that binary.
//! `SLUICE_BENCH_CEILINGS=mariadb` measures only the ceilings whose path names it
//! (case-insensitive), and no scenarios: one path's row without the ten minutes.
//! `SLUICE_BENCH_UNITS=requests` (comma-separated: records, requests, bytes) runs only the
//! scenarios of those sinks. `SLUICE_BENCH_LOG=debug` sets the workers' log level (warn),
//! and `SLUICE_BENCH_LOGS=dir` keeps each run's log there, named by strategy, unit and
//! outage.

mod ceilings;
/// The integration tests' helpers, which `ceilings` reaches through `kafka_pg_support`.
#[path = "../../tests/it/common/mod.rs"]
mod common;
mod limit;
mod plot;
mod process;
mod report;
mod scenario;
mod strategy;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use limit::Limit;
use scenario::{Run, Setup};
use sluice::sim_sink::{SimSink, SimSinkSettings};
use strategy::Strategy;

struct Mode {
    smoke: bool,
    /// Records per second a client sending batches of 100 can deliver, in every unit.
    records_per_second: f64,
    backlog: usize,
    /// The requests-limited sink: requests per second and the backlog.
    requests: f64,
    requests_backlog: usize,
    outage: Duration,
    /// Units whose scenario also runs with an outage.
    outage_units: &'static [&'static str],
    ceiling_records: usize,
    /// The strategies to run: all, or those `SLUICE_BENCH_STRATEGIES` names.
    strategies: Vec<Strategy>,
}

impl Mode {
    fn full() -> Self {
        Mode {
            smoke: false,
            records_per_second: 800.0,
            backlog: 10_000,
            requests: 4.0,
            requests_backlog: 5_000,
            outage: Duration::from_secs(30),
            outage_units: &["records", "requests", "bytes"],
            ceiling_records: std::env::var("SLUICE_BENCH_CEILING_RECORDS")
                .ok()
                .map(|v| v.parse().expect("SLUICE_BENCH_CEILING_RECORDS is a number"))
                .unwrap_or(100_000),
            strategies: Strategy::chosen(),
        }
    }

    /// Small backlogs: the requests-limited one (400 records, 1 s at 4 requests/s) ends
    /// about when a worker sending a request per tick (5/s) has spent the emulator's
    /// burst, so it costs seconds even for a worker that cannot find that limit.
    fn smoke() -> Self {
        Mode {
            smoke: true,
            records_per_second: 400.0,
            backlog: 1_000,
            requests: 4.0,
            requests_backlog: 400,
            outage: Duration::from_secs(2),
            outage_units: &["records"],
            ceiling_records: 2_000,
            strategies: Strategy::ALL.to_vec(),
        }
    }

    /// Plots go beside the build: `target/scenarios/` (`target/scenarios-smoke/`).
    fn out_dir(&self) -> PathBuf {
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap();
        let dir = target.join(if self.smoke {
            "scenarios-smoke"
        } else {
            "scenarios"
        });
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}

/// One scenario: its sink's limit and its backlog file.
struct Scenario {
    setup: Setup,
    input: PathBuf,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--strategy") {
        return strategy::child_main(&args);
    }
    // `cargo bench` passes --bench; `cargo test` does not.
    let mode = if args.iter().any(|a| a == "--bench") {
        Mode::full()
    } else {
        Mode::smoke()
    };
    let started = Instant::now();
    if let Ok(only) = std::env::var("SLUICE_BENCH_CEILINGS") {
        let ceilings = ceilings::measure_only(&only, mode.ceiling_records, mode.smoke);
        println!(
            "## Throughput ceilings, limits off\n\nMachine: {}\n\n{}",
            machine(),
            ceilings::table(&ceilings)
        );
        return;
    }
    println!(
        "## Scenarios{}\n\nMachine: {}\n",
        if mode.smoke { " (smoke)" } else { "" },
        machine()
    );
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let scenarios = runtime.block_on(scenarios(&mode, dir.path()));
    let out = mode.out_dir();
    let mut checked = Vec::new();
    let units = std::env::var("SLUICE_BENCH_UNITS").ok();
    for Scenario { setup, input } in &scenarios {
        let name = setup.limit.name();
        if units
            .as_deref()
            .is_some_and(|u| !u.split(',').any(|u| u.trim() == name))
        {
            continue;
        }
        let drains: Vec<Run> = runtime.block_on(async {
            let mut runs = Vec::new();
            for &s in &mode.strategies {
                runs.push(scenario::run(s, input, *setup).await);
            }
            runs
        });
        let title = format!("{} records into {}", setup.backlog, setup.limit.describe());
        println!(
            "### {}-limited: {title}\n\n{}",
            capitalized(name),
            report::drain_table(&drains)
        );
        let drain_svg = out.join(plot_name("drain", name));
        plot::windows_svg(
            &drains,
            &format!("records per 200 ms window: {title}"),
            &drain_svg,
        );
        let mut plots = vec![drain_svg];
        let outages = if mode.outage_units.contains(&name) {
            let setup = Setup {
                outage: Some(mode.outage),
                ..*setup
            };
            let outages = runtime.block_on(outage_runs(&mode.strategies, input, setup));
            println!(
                "Outage, {name}-limited: {} s of 503 once a third of the backlog has landed.\n\n{}",
                mode.outage.as_secs(),
                report::outage_table(&outages)
            );
            let svg = out.join(plot_name("outage", name));
            plot::windows_svg(
                &outages,
                &format!(
                    "the same with {} s of 503 once a third has landed",
                    mode.outage.as_secs()
                ),
                &svg,
            );
            plots.push(svg);
            outages
        } else {
            Vec::new()
        };
        let shown: Vec<String> = plots.iter().map(|p| p.display().to_string()).collect();
        println!("Plots: {}\n", shown.join(", "));
        checked.push((drains, outages, plots));
    }

    if mode.strategies.len() == Strategy::ALL.len() {
        let ceilings = ceilings::measure(mode.ceiling_records, mode.smoke);
        println!(
            "## Throughput ceilings, limits off\n\n{}",
            ceilings::table(&ceilings)
        );
    }
    println!("Bench time: {:.0} s", started.elapsed().as_secs_f64());
    if mode.smoke {
        for (drains, outages, plots) in &checked {
            check_smoke(drains, outages, plots);
        }
    }
}

/// The three scenarios, each with its backlog written to a file of its own (all named
/// `backlog.ndjson`, so sluice's envelope is as large in each).
async fn scenarios(mode: &Mode, dir: &Path) -> Vec<Scenario> {
    let input = |name: &str, backlog: usize| {
        let path = dir.join(name).join("backlog.ndjson");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        write_backlog(&path, backlog);
        path
    };
    let records = input("records", mode.backlog);
    let requests = input("requests", mode.requests_backlog);
    let bytes = input("bytes", mode.backlog);
    let per_record = sluice_bytes_per_record(&bytes).await;
    let scenario = |limit: Limit, backlog: usize, input: PathBuf| Scenario {
        setup: Setup {
            backlog,
            limit,
            outage: None,
        },
        input,
    };
    vec![
        scenario(
            Limit::records(mode.records_per_second),
            mode.backlog,
            records,
        ),
        scenario(
            Limit::requests(mode.requests),
            mode.requests_backlog,
            requests,
        ),
        scenario(
            Limit::bytes(mode.records_per_second, per_record),
            mode.backlog,
            bytes,
        ),
    ]
}

/// Body bytes per record of sluice's envelope for `input`: a drain at full speed into an
/// emulator that limits nothing.
async fn sluice_bytes_per_record(input: &Path) -> f64 {
    let mut config = SimSinkSettings::new("127.0.0.1:0".parse().unwrap(), 1e9);
    config.burst = u32::MAX;
    let sim = SimSink::start(config).await.expect("the emulator starts");
    let dir = tempfile::tempdir().unwrap();
    let cmd = strategy::sluice_run(input, &sim.ingest_url(), 1e6, None, dir.path());
    tokio::task::spawn_blocking(move || process::run_measured(cmd))
        .await
        .expect("the calibration's thread");
    let stats = sim.stats();
    sim.stop().await.unwrap();
    stats.bytes_accepted as f64 / stats.accepted as f64
}

fn plot_name(kind: &str, unit: &str) -> String {
    // The records scenario keeps the plots' original names (the book links them).
    if unit == "records" {
        format!("{kind}.svg")
    } else {
        format!("{kind}-{unit}.svg")
    }
}

fn capitalized(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map_or(String::new(), |c| c.to_uppercase().chain(chars).collect())
}

/// The naive strategy alone (it keeps both cores busy while the sink is down), then the
/// others together: their load is small, and one at a time would take minutes.
async fn outage_runs(strategies: &[Strategy], input: &Path, setup: Setup) -> Vec<Run> {
    let mut runs = Vec::new();
    if strategies.contains(&Strategy::Naive) {
        runs.push(scenario::run(Strategy::Naive, input, setup).await);
    }
    let rest = strategies
        .iter()
        .filter(|&&s| s != Strategy::Naive)
        .map(|&s| scenario::run(s, input, setup));
    runs.extend(futures::future::join_all(rest).await);
    runs
}

/// What the smoke run must show for the bench to be trusted: every strategy delivered
/// everything in time in every unit (checked per run: every record once), every plot has
/// a panel per strategy; against the records-limited sink the retry storm is visible and
/// sluice is not part of it. The other units assert nothing about sluice's figures: what
/// it achieves there is the controller's business, measured by tests/it/sink_limit.rs.
fn check_smoke(drains: &[Run], outages: &[Run], plots: &[PathBuf]) {
    for run in drains.iter().chain(outages) {
        assert!(
            run.finished,
            "{} into {} finished in time",
            run.strategy.name(),
            run.limit.describe()
        );
    }
    let requests = |runs: &[Run], s: Strategy| {
        let run = runs.iter().find(|r| r.strategy == s).unwrap();
        run.sink.requests
    };
    if drains[0].limit.name() == "records" {
        assert!(
            requests(drains, Strategy::Sluice) < requests(drains, Strategy::Naive),
            "sluice sends fewer requests than the naive client"
        );
        assert!(
            requests(outages, Strategy::Sluice) < requests(outages, Strategy::Naive),
            "sluice sends fewer requests through an outage than the naive client"
        );
    }
    for plot in plots {
        let svg = std::fs::read_to_string(plot).unwrap();
        for s in Strategy::ALL {
            assert!(
                svg.contains(s.label()),
                "{} has a panel for {}",
                plot.display(),
                s.name()
            );
        }
    }
}

/// The backlog: NDJSON orders keyed by `id`.
fn write_backlog(path: &Path, n: usize) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..n {
        writeln!(
            f,
            "{{\"id\":\"ord-{i:08}\",\"customer\":\"c-{:04}\",\"amount\":{}.{:02},\"currency\":\"EUR\"}}",
            i % 2000,
            i % 500,
            i % 100
        )
        .unwrap();
    }
}

/// CPU model, cores and memory, for the tables' header.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    format!("{model}, {cores} cores, {mem_gib:.0} GiB")
}
