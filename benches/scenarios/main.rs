//! The scenario bench: the same backlog drained into `sluice sim-sink` by what a user
//! would write instead and by sluice, side by side, plus an outage and the throughput
//! ceilings of the real paths. `cargo bench --bench scenarios` runs it in full (10,000
//! records into 800 rec/s, a 30 s outage, 100,000-record ceilings) and prints markdown
//! tables; plots go to `target/scenarios/`. Under `cargo test` it runs a small smoke
//! variant and checks its results, so the bench cannot silently rot.
//!
//! `SLUICE_BENCH_CEILING_RECORDS` changes the ceilings' backlog.

mod ceilings;
mod plot;
mod process;
mod report;
mod scenario;
mod strategy;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use scenario::{Run, Setup};
use strategy::Strategy;

struct Mode {
    smoke: bool,
    setup: Setup,
    ceiling_records: usize,
}

impl Mode {
    fn full() -> Self {
        Mode {
            smoke: false,
            setup: Setup {
                backlog: 10_000,
                capacity: 800.0,
                outage: None,
            },
            ceiling_records: std::env::var("SLUICE_BENCH_CEILING_RECORDS")
                .ok()
                .map(|v| v.parse().expect("SLUICE_BENCH_CEILING_RECORDS is a number"))
                .unwrap_or(100_000),
        }
    }

    fn smoke() -> Self {
        Mode {
            smoke: true,
            setup: Setup {
                backlog: 1_000,
                capacity: 400.0,
                outage: None,
            },
            ceiling_records: 2_000,
        }
    }

    fn outage(&self) -> Setup {
        let length = if self.smoke { 2 } else { 30 };
        Setup {
            outage: Some(Duration::from_secs(length)),
            ..self.setup
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

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--strategy") {
        return strategy::child_main(&args);
    }
    // `cargo bench` passes --bench; `cargo test` does not.
    let mode = if args.iter().any(|a| a == "--bench") {
        Mode::full()
    } else {
        report::self_check();
        Mode::smoke()
    };
    let started = Instant::now();
    let Setup {
        backlog, capacity, ..
    } = mode.setup;
    println!(
        "## Scenarios: {backlog} records into sluice sim-sink at {capacity} rec/s{}\n\nMachine: {}\n",
        if mode.smoke { " (smoke)" } else { "" },
        machine()
    );
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("backlog.ndjson");
    write_backlog(&input, backlog);
    let runtime = tokio::runtime::Runtime::new().unwrap();

    let drains: Vec<Run> = runtime.block_on(async {
        let mut runs = Vec::new();
        for s in Strategy::ALL {
            runs.push(scenario::run(s, &input, mode.setup).await);
        }
        runs
    });
    println!("{}", report::drain_table(&drains, capacity));

    let outages = runtime.block_on(outage_runs(&input, mode.outage()));
    let length = mode.outage().outage.unwrap().as_secs();
    println!(
        "Outage: {length} s of 503 once a third of the backlog has landed.\n\n{}",
        report::outage_table(&outages, capacity)
    );

    let out = mode.out_dir();
    plot::windows_svg(
        &drains,
        capacity,
        &format!("records per 200 ms window: {backlog} records into {capacity} rec/s"),
        &out.join("drain.svg"),
    );
    plot::windows_svg(
        &outages,
        capacity,
        &format!("the same with {length} s of 503 once a third has landed"),
        &out.join("outage.svg"),
    );
    println!(
        "Plots: {}, {}\n",
        out.join("drain.svg").display(),
        out.join("outage.svg").display()
    );

    let ceilings = ceilings::measure(mode.ceiling_records, mode.smoke);
    println!(
        "## Throughput ceilings, limits off\n\n{}",
        ceilings::table(&ceilings)
    );
    println!("Bench time: {:.0} s", started.elapsed().as_secs_f64());
    if mode.smoke {
        check_smoke(&drains, &outages, &out);
    }
}

/// The naive strategy alone (it keeps both cores busy while the sink is down), then the
/// others together: their load is small, and one at a time would take minutes.
async fn outage_runs(input: &Path, setup: Setup) -> Vec<Run> {
    let mut runs = vec![scenario::run(Strategy::Naive, input, setup).await];
    let rest = Strategy::ALL[1..]
        .iter()
        .map(|&s| scenario::run(s, input, setup));
    runs.extend(futures::future::join_all(rest).await);
    runs
}

/// What the smoke run must show for the bench to be trusted: every strategy delivered
/// everything (checked per run), the retry storm is visible, sluice is not part of it.
fn check_smoke(drains: &[Run], outages: &[Run], out: &Path) {
    let find = |runs: &[Run], s: Strategy| {
        let run = runs.iter().find(|r| r.strategy == s).unwrap();
        run.sink.requests
    };
    assert!(
        find(drains, Strategy::Sluice) < find(drains, Strategy::Naive),
        "sluice sends fewer requests than the naive client"
    );
    assert!(
        find(outages, Strategy::Sluice) < find(outages, Strategy::Naive),
        "sluice sends fewer requests through an outage than the naive client"
    );
    for plot in ["drain.svg", "outage.svg"] {
        let svg = std::fs::read_to_string(out.join(plot)).unwrap();
        for s in Strategy::ALL {
            assert!(
                svg.contains(s.label()),
                "{plot} has a panel for {}",
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
