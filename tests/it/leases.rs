//! Capacity leases against real PostgreSQL (the lease store) and RabbitMQ (a shared queue):
//! worker processes share one pool and write to the sink emulator, whose capacity
//! (1,000 rec/s) is above the pool's, so the pool is the only limit; the emulator counts
//! what it accepted in every 200 ms window. Also: the pool's stored definition (diverging
//! workers refuse to start, `sluice leases resize`), leases given back for want of use,
//! and the worker's own rate as a ceiling.

use crate::common;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use common::*;
use sluice::sim_sink::{SimSink, SimSinkSettings};

mod pool_definition;
mod redis;

/// The emulator, running on its own runtime for the length of a test.
struct Emulator {
    rt: tokio::runtime::Runtime,
    sim: SimSink,
}

impl Emulator {
    fn start() -> Emulator {
        Emulator::with_burst(1000)
    }

    /// 1,000 rec/s with a bucket of `burst` records.
    fn with_burst(burst: u32) -> Emulator {
        let (rt, sim) = sim_sink(SimSinkSettings {
            burst,
            ..SimSinkSettings::new("127.0.0.1:0".parse().unwrap(), 1000.0)
        });
        Emulator { rt, sim }
    }

    fn url(&self) -> String {
        format!("http://{}/ingest", self.sim.addr())
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
}

/// Records accepted in each 1 s span (five 200 ms windows), sliding by 200 ms.
fn per_second(windows: &[u64]) -> Vec<u64> {
    windows.windows(5).map(|w| w.iter().sum()).collect()
}

/// The index of the first window with anything accepted.
fn first_busy(windows: &[u64]) -> usize {
    windows
        .iter()
        .position(|&n| n > 0)
        .expect("something was accepted")
}

/// The PostgreSQL lease store, reached through `port` (a relay's, or the server's 5432).
fn pg_store(port: u16) -> String {
    pg_url().replace(":5432/", &format!(":{port}/"))
}

/// A 50 ms tick: each worker sends 10 records a tick at 200 rec/s, so a tick landing on
/// either side of a 1 s window's edge moves at most 30 records for three workers — inside
/// the 630 bound. (At 200 ms a straddling tick is 40 records per worker.)
fn config(dir: &Path, queue: &str, pool: &str, store: &str, reserved: f64, sink_url: &str) {
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"amqp\"\nurl = {:?}\nqueue = {queue:?}\n\n\
             [sink]\nkind = \"http\"\nurl = {sink_url:?}\nkey = \"/id\"\nmax_batch = 500\n\n\
             [sink.dead_letters]\npath = \"dead.ndjson\"\n\n\
             [rate]\ntick = \"50ms\"\n\n\
             [leases]\nstore = {store:?}\npool = {pool:?}\ncapacity = 600\npartitions = 6\nttl = \"4s\"\nreserved = {reserved}\nidle_grace = \"3s\"\n",
            amqp_url()
        ),
    )
    .unwrap();
}

/// A pool of `capacity` in `partitions` leases (ttl 4 s), in `dir/file`; `rate` is an
/// optional `[rate]` line beyond the 50 ms tick.
#[allow(clippy::too_many_arguments)]
fn pool_config(
    dir: &Path,
    file: &str,
    queue: &str,
    pool: &str,
    capacity: u32,
    partitions: u32,
    sink_url: &str,
    rate: &str,
) {
    std::fs::write(
        dir.join(file),
        format!(
            "[source]\nkind = \"amqp\"\nurl = {:?}\nqueue = {queue:?}\n\n\
             [sink]\nkind = \"http\"\nurl = {sink_url:?}\nkey = \"/id\"\nmax_batch = 100\n\n\
             [sink.dead_letters]\npath = \"dead.ndjson\"\n\n\
             [rate]\ntick = \"50ms\"\n{rate}\n\n\
             [leases]\nstore = {:?}\npool = {pool:?}\ncapacity = {capacity}\npartitions = {partitions}\nttl = \"4s\"\nidle_grace = \"3s\"\n",
            amqp_url(),
            pg_url(),
        ),
    )
    .unwrap();
}

fn worker_with(dir: &Path, file: &str) -> Child {
    sluice()
        .current_dir(dir)
        .args(["run", "-c", file, "--summary", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn holders_of(dir: &Path, file: &str) -> serde_json::Value {
    let out = run_in(dir, &["leases", "-c", file, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Polls `leases --json` until `done` holds; fails after `within`.
fn wait_for(
    dir: &Path,
    file: &str,
    within: Duration,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let doc = holders_of(dir, file);
        if done(&doc) {
            return doc;
        }
        assert!(Instant::now() < deadline, "{what} within {within:?}: {doc}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn lease_holders(dir: &Path) -> serde_json::Value {
    let out = run_in(dir, &["leases", "-c", "sluice.toml", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Partitions held (unexpired) per holder pid.
fn held_by_pid(doc: &serde_json::Value) -> std::collections::BTreeMap<u32, usize> {
    let mut m = std::collections::BTreeMap::new();
    for l in doc["leases"].as_array().unwrap() {
        if l["expires_in_s"].as_f64().unwrap() > 0.0 {
            let holder = l["holder"].as_str().unwrap();
            let pid: u32 = holder.rsplit('-').nth(1).unwrap().parse().unwrap();
            *m.entry(pid).or_insert(0) += 1;
        }
    }
    m
}

fn stop(mut child: Child) -> std::process::Output {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(40);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn three_workers_share_the_pool_without_exceeding_it() {
    // 25 s at the pool's 600 rec/s: the first 3 s to settle, then ~20 s of steady shares.
    share_the_pool(&pg_store(5432), 3, 15_000);
}

/// PgBouncer in transaction mode (started by scripts/services.sh) between the workers and
/// the store: each transaction may run on another server connection, so nothing may
/// outlive one — and the pooler refuses clients that set `extra_float_digits` at start-up,
/// as sqlx does unless told not to (every worker then ran at its reserved rate, 0, for good).
#[test]
fn two_workers_share_a_pool_kept_behind_pgbouncer_in_transaction_mode() {
    let store = std::env::var("SLUICE_TEST_PGBOUNCER_URL")
        .expect("SLUICE_TEST_PGBOUNCER_URL (scripts/services.sh starts PgBouncer)");
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), "q", "p", &store, 0.0, "http://127.0.0.1:9/");
    let check = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    let said = stderr(&check);
    assert!(
        said.contains("lease table sluice_lease_pools: present")
            && !said
                .lines()
                .any(|l| l.starts_with("FAIL") && l.contains("lease")),
        "sluice check reads the lease tables through PgBouncer: {said}"
    );
    share_the_pool(&store, 2, 6_000);
}

/// `workers` drain one queue of `total` records on a pool in `store`: together never above
/// it, each writing a fair part, every record once.
fn share_the_pool(store: &str, workers: usize, total: i64) {
    let sim = Emulator::start();
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_lease_share");
    amqp_publish(&queue, total as usize);
    config(dir.path(), &queue, &unique("pool"), store, 0.0, &sim.url());
    let workers: Vec<Child> = (0..workers).map(|_| worker(dir.path(), true)).collect();
    let mut shares = Vec::new();
    for w in workers {
        let out = w.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        shares.push(summary(&out)["written"].as_i64().unwrap());
    }
    assert_eq!(shares.iter().sum::<i64>(), total, "{shares:?}");
    // 45% of a fair part (15% of the whole for three).
    let least = total * 45 / (100 * shares.len() as i64);
    for s in &shares {
        assert!(
            *s >= least,
            "every worker writes at least 45% of its fair part: {shares:?}"
        );
    }
    let windows = sim.windows();
    let start = first_busy(&windows);
    let seconds = per_second(&windows[start..]);
    eprintln!("accepted per 1 s (sliding by 200 ms): {seconds:?}");
    // After the first 3 s, until the queue runs dry (the last second is partly empty).
    let steady = &seconds[15..seconds.len() - 5];
    let peak = *steady.iter().max().unwrap();
    assert!(
        peak <= 630,
        "the pool's 600 rec/s was exceeded: {peak} in {steady:?}"
    );
    let mut sorted = steady.to_vec();
    sorted.sort();
    assert!(
        sorted[sorted.len() / 2] >= 540,
        "the pool was mostly used: {steady:?}"
    );
}

#[test]
fn a_dead_workers_partitions_go_to_the_others_within_ttl() {
    let sim = Emulator::start();
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_lease_kill");
    amqp_publish(&queue, 60_000);
    config(
        dir.path(),
        &queue,
        &unique("pool"),
        &pg_store(5432),
        0.0,
        &sim.url(),
    );
    let mut workers: Vec<Child> = (0..3).map(|_| worker(dir.path(), false)).collect();
    // Wait until the whole pool is held.
    let deadline = Instant::now() + Duration::from_secs(30);
    while held_by_pid(&lease_holders(dir.path()))
        .values()
        .sum::<usize>()
        < 6
    {
        assert!(Instant::now() < deadline, "the pool was never fully held");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut victim = workers.remove(0);
    let victim_pid = victim.id();
    let before = held_by_pid(&lease_holders(dir.path()));
    victim.kill().unwrap();
    victim.wait().unwrap();
    let killed_at = Instant::now();
    loop {
        let held = held_by_pid(&lease_holders(dir.path()));
        if !held.contains_key(&victim_pid) && held.values().sum::<usize>() == 6 {
            break;
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(4 + 2),
            "partitions not re-divided within ttl + 2 s: before {before:?}, now {held:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "re-divided in {:?} (held before: {before:?})",
        killed_at.elapsed()
    );
    for w in workers {
        let out = stop(w);
        assert!(out.status.success(), "{}", stderr(&out));
    }
}

#[test]
fn an_unreachable_store_drops_every_worker_to_its_reserved_rate_and_back() {
    let sim = Emulator::start();
    let relay = CuttableRelay::start("127.0.0.1:5432");
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_lease_outage");
    amqp_publish(&queue, 60_000);
    config(
        dir.path(),
        &queue,
        &unique("pool"),
        &pg_store(relay.port),
        20.0,
        &sim.url(),
    );
    let workers: Vec<Child> = (0..3).map(|_| worker(dir.path(), false)).collect();
    std::thread::sleep(Duration::from_secs(6));
    let cut_at = sim.windows().len();
    relay.cut();
    std::thread::sleep(Duration::from_secs(13));
    let restored_at = sim.windows().len();
    relay.restore();
    std::thread::sleep(Duration::from_secs(8));
    for w in workers {
        let out = stop(w);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let windows = sim.windows();
    let seconds = per_second(&windows);
    eprintln!("accepted per 1 s (sliding by 200 ms): {seconds:?}");
    // From ttl + 1 s after the cut until the store is back: 3 workers × 20 rec/s reserved.
    let during = &seconds[cut_at + 5 * 5..restored_at - 5];
    assert!(during.len() >= 30, "{seconds:?}");
    assert!(
        during.iter().all(|&n| n <= 3 * 20 + 10),
        "rate fell to 3 × reserved within ttl: {during:?}"
    );
    assert!(
        during.iter().all(|&n| n > 0),
        "reserved capacity kept the workers going: {during:?}"
    );
    let after = &seconds[restored_at + 4 * 5..];
    assert!(
        after.iter().any(|&n| n >= 540),
        "capacity came back: {after:?}"
    );
}
