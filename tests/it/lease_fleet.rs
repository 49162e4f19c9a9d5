//! A fleet on one lease pool, against a PostgreSQL cluster of the test's own (initdb,
//! pg_ctl, password authentication): a store whose connections are all taken at start is
//! an outage — the worker runs without leases, /readyz says why, and it joins as soon as a
//! connection is free — while bad credentials or a missing database exit 2 at once.
//!
//! The fleet test is ignored (it starts hundreds of processes for a minute or two):
//!
//!     cargo build --release
//!     FLEET_SLUICE=$PWD/target/release/sluice nice -n -10 \
//!         cargo test --test it lease_fleet:: -- --ignored --nocapture
//!     FLEET_WORKERS=50 FLEET_STORE=redis ...
//!
//! N workers (default 200), each draining a file of its own at 10 rec/s of fair share into
//! one sink emulator, share a pool of N × 10 rec/s in a PostgreSQL cluster at the default
//! `max_connections = 100` or (`FLEET_STORE=redis`) a Redis server of the test's own, which
//! is restarted after the steady part (every lease lost at once): no worker exits before its
//! file is done, no 1 s or 5 s window of the whole run is above 101% of the pool, every
//! worker's share over the steady part is within ±20% of fair, and every record is written
//! once. It prints the store's connections, transactions (Redis: commands) and lease
//! statements (Redis: script calls) per second and CPU. `FLEET_SLUICE` runs another build of sluice (a release
//! build: 200 debug builds overload a 2-core machine); the workers run niced (+5) and the
//! test, its emulator and its store at `nice -n -10`, so that what measures and serves
//! them does not wait for CPU behind 200 clients, which on a fleet run on their own
//! machines.

use crate::common;
use crate::lease_fleet_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::redis::RedisServer;
use common::*;
use lease_fleet_support::{Cluster, PASSWORD};
use sluice::sim_sink::{LatencyModel, SimSink, SimSinkSettings};

/// GET `http://127.0.0.1:{port}/readyz`: its status (0 if unreachable) and body.
fn readyz(port: u16) -> (u16, String) {
    block_on(async {
        match crate::common::http()
            .get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await
        {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(_) => (0, String::new()),
        }
    })
}

/// A file → SQLite worker of 200 records on a pool of 100 rec/s in `store`.
fn busy_worker(dir: &Path, store: &str, telemetry: u16) -> Child {
    write_records(&dir.join("in.ndjson"), 200, &[]);
    write_config(
        dir,
        "in.ndjson",
        100.0,
        &format!(
            "\n[leases]\nstore = {store:?}\npool = \"busy\"\ncapacity = 100\npartitions = 2\nttl = \"3s\"\n\n\
             [telemetry]\nlisten = \"127.0.0.1:{telemetry}\"\n"
        ),
    );
    worker(dir, true)
}

#[test]
fn a_full_store_at_start_is_an_outage_and_the_worker_joins_once_a_connection_is_free() {
    let pg = Cluster::start("max_connections = 3\nsuperuser_reserved_connections = 0\n");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = pg.url();
    // Every connection the server allows, held by someone else.
    let held: Vec<sqlx::PgConnection> = rt.block_on(async {
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(
                <sqlx::PgConnection as sqlx::Connection>::connect(&url)
                    .await
                    .unwrap(),
            );
        }
        held
    });
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = busy_worker(dir.path(), &url, port);
    poll(
        Duration::from_secs(20),
        "/readyz naming the full store",
        || {
            let (status, body) = readyz(port);
            status == 503 && body.contains("53300")
        },
    );
    let (_, body) = readyz(port);
    eprintln!("/readyz while the store is full: {body}");
    assert!(body.contains("lease store"), "{body}");
    // It waits, holding no lease and writing nothing at reserved = 0, and does not exit.
    std::thread::sleep(Duration::from_secs(3));
    assert!(child.try_wait().unwrap().is_none(), "the worker exited");
    assert_eq!(readyz(port).0, 503);
    drop(held);
    let out = finish(child, Duration::from_secs(60));
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    // At reserved = 0 nothing is written without a lease: it joined and took some.
    assert_eq!(summary(&out)["written"], 200, "{log}");
    assert!(log.contains("53300"), "the log says why it waited: {log}");
}

#[test]
fn bad_credentials_or_a_missing_database_exit_2_at_once() {
    let pg = Cluster::start("");
    for (url, code) in [
        (pg.url_as("not-the-password", "postgres"), "28P01"),
        (pg.url_as(PASSWORD, "no_such_database"), "3D000"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let child = busy_worker(dir.path(), &url, free_port());
        let out = finish(child, Duration::from_secs(15));
        let log = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{code}: {log}");
        assert!(log.contains(code), "{log}");
    }
}

/// The sink emulator on a runtime of its own, far faster than the pool and never slowed
/// by concurrency.
struct Emulator {
    rt: tokio::runtime::Runtime,
    sim: SimSink,
}

impl Emulator {
    fn start(capacity: f64) -> Emulator {
        let (rt, sim) = sim_sink(SimSinkSettings {
            burst: capacity as u32,
            // A fleet's requests arrive together: the emulator must not slow down for
            // them (by default it does beyond 30 at once).
            latency: LatencyModel {
                knee: 10_000,
                ..LatencyModel::default()
            },
            ..SimSinkSettings::new("127.0.0.1:0".parse().unwrap(), capacity)
        });
        Emulator { rt, sim }
    }

    /// Records accepted per 200 ms window since the emulator started.
    fn windows(&self) -> Vec<u64> {
        let _guard = self.rt.enter();
        self.sim
            .stats()
            .windows
            .iter()
            .map(|w| w.accepted)
            .collect()
    }

    /// Records stored so far (cheap: no key is copied).
    fn inserted(&self) -> u64 {
        let _guard = self.rt.enter();
        self.sim.stats().inserted
    }

    /// Keys stored so far, by the worker that wrote them (`w{j}-…`).
    fn per_worker(&self) -> BTreeMap<usize, u64> {
        let _guard = self.rt.enter();
        self.sim
            .count_keys(|key| key[1..key.find('-').unwrap()].parse().unwrap())
    }
}

/// What the store did between two readings.
#[derive(Debug, Clone, Copy)]
struct StoreReading {
    at: Instant,
    commits: i64,
    calls: i64,
    cpu_s: f64,
}

/// The fleet's lease store.
enum Store {
    Pg(Cluster),
    Redis(RedisServer),
}

impl Store {
    fn start() -> Store {
        match std::env::var("FLEET_STORE").as_deref() {
            Ok("redis") => {
                let r = RedisServer::start();
                // A fresh server grants nothing for a ttl (15 s) and a second after its
                // start: whatever leases it held before may still be in use.
                std::thread::sleep(Duration::from_secs(17));
                Store::Redis(r)
            }
            Ok("postgres") | Err(_) => {
                let pg = Cluster::start("shared_preload_libraries = 'pg_stat_statements'\n");
                pg::execute(&pg.url(), "CREATE EXTENSION pg_stat_statements");
                assert_eq!(
                    pg::texts(&pg.url(), "SHOW max_connections"),
                    vec!["100".to_string()]
                );
                Store::Pg(pg)
            }
            Ok(other) => panic!("FLEET_STORE={other}: postgres or redis"),
        }
    }

    fn url(&self) -> String {
        match self {
            Store::Pg(pg) => pg.url(),
            Store::Redis(r) => r.url(),
        }
    }

    /// Redis's `INFO` fields, as numbers.
    fn redis_info(r: &RedisServer) -> BTreeMap<String, f64> {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &r.port.to_string(), "INFO", "all"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut info = BTreeMap::new();
        for line in text.lines() {
            let Some((k, v)) = line.trim().split_once(':') else {
                continue;
            };
            if let Some(calls) = v.strip_prefix("calls=") {
                let calls = calls.split(',').next().unwrap_or("0");
                info.insert(k.to_string(), calls.parse().unwrap_or(0.0));
            } else if let Ok(n) = v.parse() {
                info.insert(k.to_string(), n);
            }
        }
        info
    }

    fn reading(&self) -> StoreReading {
        match self {
            Store::Pg(pg) => {
                let url = pg.url();
                StoreReading {
                    at: Instant::now(),
                    commits: pg::count(
                        &url,
                        "SELECT sum(xact_commit)::int8 FROM pg_stat_database WHERE datname = 'postgres'",
                    ),
                    calls: pg::count(
                        &url,
                        "SELECT coalesce(sum(calls), 0)::int8 FROM pg_stat_statements \
                         WHERE query ILIKE '%sluice_lease%'",
                    ),
                    cpu_s: pg.cpu_seconds(),
                }
            }
            Store::Redis(r) => {
                let info = Store::redis_info(r);
                let n = |k: &str| info.get(k).copied().unwrap_or(0.0);
                StoreReading {
                    at: Instant::now(),
                    commits: n("total_commands_processed") as i64,
                    calls: (n("cmdstat_evalsha") + n("cmdstat_eval")) as i64,
                    cpu_s: n("used_cpu_sys") + n("used_cpu_user"),
                }
            }
        }
    }

    /// Client connections now, not counting the one asking.
    fn connections(&self) -> i64 {
        match self {
            Store::Pg(pg) => {
                pg::count(
                    &pg.url(),
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'",
                ) - 1
            }
            Store::Redis(r) => Store::redis_info(r)["connected_clients"] as i64 - 1,
        }
    }
}

#[test]
#[ignore = "long: FLEET_WORKERS (default 200) worker processes for about two minutes"]
fn a_fleet_shares_one_pool_on_a_store_at_the_default_max_connections() {
    let n: usize = std::env::var("FLEET_WORKERS")
        .map(|v| v.parse().unwrap())
        .unwrap_or(200);
    let fair = 10.0; // rec/s per worker
    let capacity = fair * n as f64;
    let run = Duration::from_secs(60);
    let per_worker = (fair * run.as_secs_f64()) as usize;
    let mut store = Store::start();
    let sim = Emulator::start(capacity * 5.0);
    let sink = format!("http://{}/ingest", sim.sim.addr());
    let dirs: Vec<tempfile::TempDir> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
    for (j, dir) in dirs.iter().enumerate() {
        let body: String = (0..per_worker)
            .map(|i| format!("{{\"id\":\"w{j}-{i}\",\"n\":{i}}}\n"))
            .collect();
        std::fs::write(dir.path().join("in.ndjson"), body).unwrap();
        std::fs::write(
            dir.path().join("sluice.toml"),
            format!(
                "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
                 [sink]\nkind = \"http\"\nurl = {sink:?}\nkey = \"/id\"\n\n\
                 [sink.dead_letters]\npath = \"dead.ndjson\"\n\n\
                 [rate]\ntick = \"200ms\"\n\n\
                 [leases]\nstore = {:?}\npool = \"fleet\"\ncapacity = {capacity}\npartitions = {}\n",
                store.url(),
                2 * n
            ),
        )
        .unwrap();
    }
    let started = Instant::now();
    let mut workers: Vec<Option<Child>> = dirs
        .iter()
        .map(|d| {
            Some(
                // Niced: the emulator, which timestamps what it accepts, and the store
                // must not wait for CPU behind 200 workers (a stalled emulator counts a
                // window's records in the next one: a 1 s span above the pool that no
                // worker sent).
                sluice_at("nice")
                    .arg("-n5")
                    .arg(
                        std::env::var_os("FLEET_SLUICE")
                            .unwrap_or_else(|| env!("CARGO_BIN_EXE_sluice").into()),
                    )
                    .current_dir(d.path())
                    .args(DRAIN)
                    .stdout(Stdio::piped())
                    // To a file: a pipe nobody reads until the end could fill and stall it.
                    .stderr(std::fs::File::create(d.path().join("log")).unwrap())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    eprintln!("{n} workers started in {:?}", started.elapsed());
    // Steady part: from 20 s (the first renewals are done) to 45 s (before anyone is done).
    let (t1, t2) = (Duration::from_secs(20), Duration::from_secs(45));
    let mut peak_connections = 0;
    let mut first = None;
    let mut last = None;
    let mut shares_at = Vec::new();
    let mut restarted = None;
    let mut outputs = Vec::new();
    while workers.iter().any(Option::is_some) {
        let elapsed = started.elapsed();
        let running: Vec<usize> = (0..n).filter(|j| workers[*j].is_some()).collect();
        if elapsed.as_secs().is_multiple_of(10) && elapsed.subsec_millis() < 500 {
            eprintln!(
                "{elapsed:?}: {} running, {} records written, {} connections",
                running.len(),
                sim.inserted(),
                store.connections()
            );
        }
        assert!(
            elapsed < run * 3,
            "the fleet did not finish in {:?}: {} still running, worker {}'s log: {}",
            run * 3,
            running.len(),
            running[0],
            std::fs::read_to_string(dirs[running[0]].path().join("log")).unwrap_or_default()
        );
        peak_connections = peak_connections.max(store.connections());
        if elapsed >= t1 && first.is_none() {
            first = Some(store.reading());
            shares_at.push((Instant::now(), sim.per_worker()));
        }
        if elapsed >= t2 && last.is_none() {
            last = Some(store.reading());
            shares_at.push((Instant::now(), sim.per_worker()));
            if let Store::Redis(r) = &mut store {
                // Every lease lost at once, while every worker still has records to write.
                r.restart();
                restarted = Some(elapsed);
                eprintln!("{elapsed:?}: Redis restarted");
            }
        }
        for (j, slot) in workers.iter_mut().enumerate() {
            if slot
                .as_mut()
                .is_some_and(|c| c.try_wait().unwrap().is_some())
            {
                let out = slot.take().unwrap().wait_with_output().unwrap();
                outputs.push((j, elapsed, out));
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut done: Vec<f64> = outputs.iter().map(|(_, at, _)| at.as_secs_f64()).collect();
    done.sort_by(f64::total_cmp);
    eprintln!(
        "workers done: first at {:.1} s, median {:.1} s, last {:.1} s",
        done[0],
        done[done.len() / 2],
        done[done.len() - 1]
    );
    for (j, at, out) in &outputs {
        assert!(
            out.status.success(),
            "worker {j} exited at {at:?}: {}",
            std::fs::read_to_string(dirs[*j].path().join("log")).unwrap_or_default()
        );
        assert_eq!(summary(out)["written"], per_worker as u64, "worker {j}");
    }
    let (first, last) = (first.unwrap(), last.unwrap());
    let span = last.at.duration_since(first.at).as_secs_f64();
    eprintln!(
        "store, {n} workers: peak {peak_connections} connections; {:.1} transactions/s, \
         {:.1} lease statements/s ({:.2} per worker), CPU {:.1}% of a core",
        (last.commits - first.commits) as f64 / span,
        (last.calls - first.calls) as f64 / span,
        (last.calls - first.calls) as f64 / span / n as f64,
        100.0 * (last.cpu_s - first.cpu_s) / span,
    );
    // Every 1 s span (five 200 ms windows, sliding by 200 ms) at most 101% of the pool.
    let windows = sim.windows();
    let seconds: Vec<u64> = windows.windows(5).map(|w| w.iter().sum()).collect();
    let peak = *seconds.iter().max().unwrap();
    let peak_at = seconds.iter().position(|s| *s == peak).unwrap();
    let busy: Vec<u64> = seconds.iter().copied().filter(|&s| s > 0).collect();
    let mut sorted = busy.clone();
    sorted.sort();
    eprintln!(
        "200 ms windows around the peak: {:?}",
        &windows[peak_at.saturating_sub(10)..(peak_at + 15).min(windows.len())]
    );
    eprintln!(
        "per 1 s: peak {peak} ({:.1}% of the pool) at {:.1} s of {:.1} s, median {} of {capacity}",
        100.0 * peak as f64 / capacity,
        peak_at as f64 / 5.0,
        seconds.len() as f64 / 5.0,
        sorted[sorted.len() / 2]
    );
    if let Some(at) = restarted {
        // From the restart on: when the pool was back in use (90%), and the peak.
        let from = windows.len().min(5 * at.as_secs() as usize);
        let after = &seconds[from.min(seconds.len())..];
        let idle = after.iter().position(|&s| (s as f64) < 0.1 * capacity);
        let back = idle.and_then(|i| {
            after[i..]
                .iter()
                .position(|&s| s as f64 >= 0.9 * capacity)
                .map(|b| i + b)
        });
        let at_s =
            |i: Option<usize>| i.map_or("never".into(), |i| format!("{:.1} s", i as f64 / 5.0));
        eprintln!(
            "Redis restarted at {at:?}: pool under 10% {} later, back at 90% {} later; peak after it {}",
            at_s(idle),
            at_s(back),
            after.iter().max().copied().unwrap_or(0)
        );
    }
    // Over 5 s a late delivery (a starved process, a full run queue) evens out: if 1 s
    // spans exceed the pool and 5 s spans do not, the excess came late, not from leases.
    let five: Vec<u64> = windows.windows(25).map(|w| w.iter().sum()).collect();
    eprintln!(
        "per 5 s: peak {} ({:.1}% of the pool)",
        five.iter().max().unwrap(),
        100.0 * *five.iter().max().unwrap() as f64 / (5.0 * capacity)
    );
    let steady = &seconds[5 * t1.as_secs() as usize..5 * t2.as_secs() as usize];
    eprintln!(
        "per 1 s from {t1:?} to {t2:?}: {}–{} of {capacity}",
        steady.iter().min().unwrap(),
        steady.iter().max().unwrap()
    );
    // Shares over the steady part, against the fair share of what was written then.
    let ((from, before), (to, after)) = (&shares_at[0], &shares_at[1]);
    let deltas: Vec<f64> = (0..n)
        .map(|j| {
            (after.get(&j).copied().unwrap_or(0) - before.get(&j).copied().unwrap_or(0)) as f64
        })
        .collect();
    // Over the time between the two readings (the loop reads late by up to a turn).
    let fair_share = fair * to.duration_since(*from).as_secs_f64();
    let (lo, hi) = deltas
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), d| (lo.min(*d), hi.max(*d)));
    let used: f64 = deltas.iter().sum::<f64>() / (fair_share * n as f64);
    eprintln!(
        "steady shares: {:.0}–{:.0} records against a fair {fair_share:.0} ({:.0}%–{:.0}%); pool {:.1}% used",
        lo,
        hi,
        100.0 * lo / fair_share,
        100.0 * hi / fair_share,
        100.0 * used
    );
    // Every 1 s span at most 101% of the pool, over the whole run (starts, the Redis
    // restart and the fleet's end included). A worker's bucket alone allows rate·T + its
    // tick's quantum + 1 in a span T — 13 in 1 s at 10 rec/s — and what brought the fleet's
    // ticks into step (a stall of this machine) put up to 20% more than the pool into one
    // second (102.0–103.8% in three runs before, 119.6% in one with a stall). Each worker now
    // holds every second to its rate, and gives a lease back a second after its last use:
    // the sum holds the pool in every second but for a delivery late across a window's edge.
    let five_peak = *five.iter().max().unwrap() as f64;
    assert!(
        five_peak <= 5.0 * capacity * 1.01,
        "the pool of {capacity} rec/s was exceeded over 5 s: {five_peak}"
    );
    assert!(
        peak as f64 <= capacity * 1.01,
        "the pool of {capacity} rec/s was exceeded in a second: {peak} at {:.1} s (steady part: {steady:?})",
        peak_at as f64 / 5.0
    );
    for (j, d) in deltas.iter().enumerate() {
        assert!(
            (*d - fair_share).abs() <= 0.2 * fair_share,
            "worker {j} wrote {d} in the steady part, fair is {fair_share}: {deltas:?}"
        );
    }
    let stats = {
        let _guard = sim.rt.enter();
        sim.sim.stats()
    };
    assert_eq!(
        stats.inserted,
        (n * per_worker) as u64,
        "every record written"
    );
    assert_eq!(stats.duplicates, 0, "and once");
}
