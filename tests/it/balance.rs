//! Several HTTP endpoints behind one sink: emulators answering at different speeds (three
//! at 10, 50 and 200 ms; the seed's S at 10 ms × their number). The real binary drains a
//! file; each emulator counts what it took and the connections it accepted.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use sluice::sim_sink::latency::LatencyModel;
use sluice::sim_sink::{SimSink, SimSinkSettings};

struct Sinks {
    rt: tokio::runtime::Runtime,
    sims: Vec<Option<SimSink>>,
}

impl Sinks {
    fn start(latencies_ms: &[u64]) -> Sinks {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let sims = latencies_ms
            .iter()
            .map(|ms| {
                let mut cfg = SimSinkSettings::new("127.0.0.1:0".parse().unwrap(), 1_000_000.0);
                cfg.burst = 1_000_000;
                cfg.latency = LatencyModel {
                    base: Duration::from_millis(*ms),
                    knee: 1_000,
                    factor: 2.0,
                    k: 10.0,
                    ..LatencyModel::default()
                };
                Some(rt.block_on(SimSink::start(cfg)).unwrap())
            })
            .collect();
        Sinks { rt, sims }
    }

    fn url(&self, i: usize) -> String {
        format!("http://{}/ingest", self.sims[i].as_ref().unwrap().addr())
    }

    /// Distinct records each emulator stored (0 for a stopped one: counted at the stop).
    fn inserted(&self) -> Vec<u64> {
        let _g = self.rt.enter();
        self.sims
            .iter()
            .map(|s| s.as_ref().map_or(0, |s| s.stats().inserted))
            .collect()
    }

    /// Requests each emulator took, and the connections it accepted.
    fn requests_and_connections(&self) -> (Vec<u64>, Vec<u64>) {
        let _g = self.rt.enter();
        self.sims
            .iter()
            .map(|s| {
                let st = s.as_ref().unwrap().stats();
                (st.requests_accepted, st.connections)
            })
            .unzip()
    }

    fn urls(&self) -> String {
        let all: Vec<String> = (0..self.sims.len())
            .map(|i| format!("{:?}", self.url(i)))
            .collect();
        format!("[{}]", all.join(", "))
    }

    /// Stops endpoint `i`; what it stored, including writes answered while it stopped.
    fn stop(&mut self, i: usize) -> u64 {
        let sim = self.sims[i].take().unwrap();
        self.rt.block_on(sim.stop()).unwrap().inserted
    }
}

fn config(dir: &Path, urls: &str, balance: &str, rate: u32) {
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"http\"\nkey = \"/id\"\nmax_batch = 20\ntimeout = \"5s\"\nurls = {urls}\n\n\
             [sink.balance]\n{balance}\n\n\
             [sink.dead_letters]\npath = \"dead.ndjson\"\n\n\
             [rate]\nrecords_per_second = {rate}\ntick = \"200ms\"\n\n\
             [concurrency]\nmax = 8\n"
        ),
    )
    .unwrap();
}

fn shares(strategy: &str) -> Vec<u64> {
    let sinks = Sinks::start(&[10, 50, 200]);
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3_000, &[]);
    let urls = format!(
        "[{:?}, {:?}, {:?}]",
        sinks.url(0),
        sinks.url(1),
        sinks.url(2)
    );
    // No rate limit to speak of: 8 batches in flight decide, so the drain time shows
    // what each strategy makes of the endpoints' speeds.
    config(
        dir.path(),
        &urls,
        &format!("strategy = {strategy:?}"),
        100_000,
    );
    let out = finish(worker(dir.path(), true), Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr(&out));
    let got = sinks.inserted();
    eprintln!("{strategy}: {got:?} in {} s", summary(&out)["elapsed_s"]);
    assert_eq!(
        got.iter().sum::<u64>(),
        3_000,
        "{strategy}: every record once"
    );
    got
}

#[test]
fn p2c_ewma_favours_the_fast_endpoint_and_round_robin_splits_evenly() {
    let ewma = shares("p2c-ewma");
    assert!(
        ewma[0] > ewma[1] && ewma[1] > ewma[2],
        "fastest most, slowest least: {ewma:?}"
    );
    let rr = shares("round-robin");
    for n in &rr {
        assert!((900..=1_100).contains(n), "even split: {rr:?}");
    }
    // The two others are measured alongside (shares printed); every record lands once.
    shares("least-loaded");
    shares("p2c");
}

#[test]
fn losing_an_endpoint_loses_nothing() {
    let mut sinks = Sinks::start(&[10, 10, 10]);
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 4_000, &[]);
    let urls = format!(
        "[{:?}, {:?}, {:?}]",
        sinks.url(0),
        sinks.url(1),
        sinks.url(2)
    );
    config(dir.path(), &urls, "strategy = \"p2c-ewma\"", 1_000);
    let child = worker(dir.path(), true);
    std::thread::sleep(Duration::from_millis(1_500));
    let before = sinks.stop(1);
    assert!(before > 0, "the stopped endpoint had a share");
    let out = finish(child, Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr(&out));
    let after = sinks.inserted();
    // Keys the stopped one took may be sent again elsewhere: at least every key lands.
    assert!(
        after[0] + after[2] + before >= 4_000,
        "{after:?} + {before}"
    );
    let s = summary(&out);
    assert_eq!(s["dead_lettered"], 0);
    assert_eq!(
        s["written"].as_u64().unwrap() + s["duplicates"].as_u64().unwrap(),
        4_000
    );
}

#[test]
fn the_other_zone_is_used_only_when_the_local_one_is_down() {
    let mut sinks = Sinks::start(&[10, 10, 10]);
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3_000, &[]);
    let urls = format!(
        "[{{ url = {:?}, zone = \"a\" }}, {{ url = {:?}, zone = \"a\" }}, {{ url = {:?}, zone = \"b\" }}]",
        sinks.url(0),
        sinks.url(1),
        sinks.url(2)
    );
    config(
        dir.path(),
        &urls,
        "strategy = \"p2c-ewma\"\nzone = \"a\"",
        1_000,
    );
    let child = worker(dir.path(), true);
    std::thread::sleep(Duration::from_millis(1_200));
    assert_eq!(sinks.inserted()[2], 0, "zone b idle while zone a is up");
    let a0 = sinks.stop(0);
    let a1 = sinks.stop(1);
    let out = finish(child, Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr(&out));
    let b = sinks.inserted()[2];
    assert!(b > 0, "zone b took over");
    assert!(a0 + a1 + b >= 3_000, "{a0} + {a1} + {b}");
}

#[test]
fn postgres_endpoints_fail_over() {
    // Two ways to the same database: one direct, one through a relay that is cut mid-run.
    let relay = CuttableRelay::start("127.0.0.1:5432");
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 5_000, &[]);
    let table = unique("sluice_balanced");
    let direct = pg_url();
    let relayed = pg_url().replace(":5432/", &format!(":{}/", relay.port));
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"postgres\"\nurls = [{direct:?}, {relayed:?}]\ntable = {table:?}\nkey = \"/id\"\nmax_batch = 50\n\n\
             [sink.balance]\nstrategy = \"round-robin\"\n\n\
             [rate]\nrecords_per_second = 2500\n"
        ),
    )
    .unwrap();
    let child = worker(dir.path(), true);
    std::thread::sleep(Duration::from_millis(1_000));
    relay.cut();
    let out = finish(child, Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    // A batch committed through the relay just before the cut loses its answer and is
    // sent again on the direct way, where it counts as duplicates: every record either
    // way, none dead-lettered, and the table holds each exactly once (below).
    assert_eq!(
        s["written"].as_u64().unwrap() + s["duplicates"].as_u64().unwrap(),
        5_000,
        "{s}"
    );
    assert_eq!(s["dead_lettered"], 0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n: i64 = rt.block_on(async {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&direct)
            .await
            .unwrap();
        let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select count(*) from \"{table}\""
        )))
        .fetch_one(&mut conn)
        .await
        .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("drop table \"{table}\"")))
            .execute(&mut conn)
            .await
            .unwrap();
        n
    });
    assert_eq!(n, 5_000);
}

/// What one run of the seed's experiment left on the emulators.
struct Run {
    requests: Vec<u64>,
    connections: Vec<u64>,
    elapsed_s: f64,
}

impl Run {
    fn used(&self) -> usize {
        self.requests.iter().filter(|&&n| n > 0).count()
    }
}

/// The seed's experiment: S emulators, endpoint i answering in 10 ms × (i + 1), `in_flight`
/// batches of 10 records at once, `batches` batches; `balance` is `[sink.balance]`.
fn experiment(s: usize, balance: &str, in_flight: usize, batches: usize) -> Run {
    let latencies: Vec<u64> = (1..=s as u64).map(|i| 10 * i).collect();
    let sinks = Sinks::start(&latencies);
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), batches * 10, &[]);
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"http\"\nkey = \"/id\"\nmax_batch = 10\ntimeout = \"5s\"\nurls = {}\n\n\
             [sink.balance]\n{balance}\n\n\
             [sink.dead_letters]\npath = \"dead.ndjson\"\n\n\
             [rate]\nrecords_per_second = 1000000\ntick = \"20ms\"\n\n\
             [concurrency]\nmax = {in_flight}\n",
            sinks.urls()
        ),
    )
    .unwrap();
    let out = finish(worker(dir.path(), true), Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(
        s["written"],
        batches as u64 * 10,
        "{balance}: every record once"
    );
    let (requests, connections) = sinks.requests_and_connections();
    Run {
        requests,
        connections,
        elapsed_s: s["elapsed_s"].as_f64().unwrap_or(0.0),
    }
}

/// Runs every strategy on S endpoints and prints the distribution; returns the runs by
/// name.
fn distribution(s: usize, batches: usize) -> Vec<(String, Run)> {
    // The load band is smoothed over 200 ms instead of Finagle's 5 s so that the busy run
    // shows the subset widening even when its first endpoint is the 10 ms one and the run
    // lasts 0.4 s (over 1 s it stayed on that one endpoint).
    let aperture = "strategy = \"aperture\"\n[sink.balance.aperture]\nwindow = \"200ms\"";
    let cases = [
        ("round-robin", "strategy = \"round-robin\"", s),
        ("least-loaded", "strategy = \"least-loaded\"", s),
        ("p2c", "strategy = \"p2c\"", s),
        ("p2c-ewma", "strategy = \"p2c-ewma\"", s),
        ("aperture", aperture, s),
        ("aperture, 1 in flight", aperture, 1),
        ("p2c, 1 in flight", "strategy = \"p2c\"", 1),
    ];
    let mut runs = Vec::new();
    eprintln!("S = {s}: requests per endpoint (10 ms × 1..{s}); connections opened; time");
    for (name, balance, in_flight) in cases {
        // One at a time, a slow endpoint takes up to 300 ms a batch: a short run says enough.
        let n = if in_flight == 1 { 20 } else { batches };
        let run = experiment(s, balance, in_flight, n);
        eprintln!(
            "{name:>22} | {:?} | used {:>2} | connections {:>3} | {:.1} s",
            run.requests,
            run.used(),
            run.connections.iter().sum::<u64>(),
            run.elapsed_s
        );
        runs.push((name.to_string(), run));
    }
    runs
}

fn by_name<'a>(runs: &'a [(String, Run)], name: &str) -> &'a Run {
    &runs.iter().find(|(n, _)| n == name).unwrap().1
}

#[test]
fn the_seeds_experiment_with_5_and_30_endpoints() {
    for (s, batches) in [(5, 150), (30, 300)] {
        let runs = distribution(s, batches);
        let rr = by_name(&runs, "round-robin");
        let even = (batches / s) as u64;
        assert!(
            rr.requests.iter().all(|&n| n.abs_diff(even) <= 1),
            "S = {s}: round robin splits evenly: {:?}",
            rr.requests
        );
        let ewma = by_name(&runs, "p2c-ewma");
        assert!(
            ewma.requests[0] > ewma.requests[s - 1],
            "S = {s}: the fastest gets more than the slowest: {:?}",
            ewma.requests
        );
        // Aperture: a subset at low load, more of them under load.
        let quiet = by_name(&runs, "aperture, 1 in flight");
        let busy = by_name(&runs, "aperture");
        assert!(quiet.used() <= 2, "S = {s}: {:?}", quiet.requests);
        assert!(
            busy.used() > quiet.used(),
            "S = {s}: {:?} vs {:?}",
            busy.requests,
            quiet.requests
        );
        // Without aperture a quiet worker still spreads over (and connects to) them all.
        let p2c_quiet = by_name(&runs, "p2c, 1 in flight");
        assert!(
            quiet.connections.iter().sum::<u64>() < p2c_quiet.connections.iter().sum::<u64>(),
            "S = {s}: connections with aperture {:?}, without {:?}",
            quiet.connections,
            p2c_quiet.connections
        );
    }
}

#[test]
fn deterministic_aperture_gives_each_worker_its_arc_of_the_ring() {
    // Three workers, six endpoints, one after the other: each keeps to its third of the
    // ring (two endpoints, by URL order; an aperture of at most 2 fits in one third),
    // and together they reach all six.
    let sinks = Sinks::start(&[10; 6]);
    let mut order: Vec<usize> = (0..6).collect();
    order.sort_by_key(|&i| sinks.url(i));
    let mut before = vec![0; 6];
    for index in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        write_records(&dir.path().join("in.ndjson"), 400, &[]);
        // Worker 0 names its place in the config, the others through the variables.
        let place = if index == 0 {
            "worker_index = 0\nworker_count = 3\n"
        } else {
            ""
        };
        config(
            dir.path(),
            &sinks.urls(),
            &format!(
                "strategy = \"aperture\"\n[sink.balance.aperture]\nmode = \"deterministic\"\nmax = 2\n{place}"
            ),
            100_000,
        );
        let mut cmd = sluice();
        if index > 0 {
            cmd.env("SLUICE_WORKER_INDEX", index.to_string())
                .env("SLUICE_WORKER_COUNT", "3");
        }
        let child = cmd
            .current_dir(dir.path())
            .args(DRAIN)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = finish(child, Duration::from_secs(60));
        assert!(out.status.success(), "{}", stderr(&out));
        let (_, connections) = sinks.requests_and_connections();
        let now = sinks.inserted();
        let got: Vec<usize> = (0..6).filter(|&i| now[i] > before[i]).collect();
        let mut arc = vec![order[2 * index], order[2 * index + 1]];
        arc.sort();
        eprintln!(
            "worker {index}: endpoints {got:?} (its arc {arc:?}); connections so far {connections:?}"
        );
        assert_eq!(got, arc, "worker {index} keeps to its arc");
        before = now;
    }
    assert!(before.iter().all(|&n| n > 0), "{before:?}");

    // The same worker without aperture connects to every endpoint.
    let (_, opened) = sinks.requests_and_connections();
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 400, &[]);
    config(dir.path(), &sinks.urls(), "strategy = \"p2c\"", 100_000);
    let out = finish(worker(dir.path(), true), Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    let (_, now) = sinks.requests_and_connections();
    let p2c: Vec<u64> = now.iter().zip(&opened).map(|(a, b)| a - b).collect();
    eprintln!("p2c worker: connections {p2c:?}");
    assert_eq!(p2c.iter().filter(|&&n| n > 0).count(), 6, "{p2c:?}");
}
