//! Capacity leases against real PostgreSQL (the lease store) and RabbitMQ (a shared queue):
//! three worker processes share one pool; the sink (SQLite here, with `ingested_at` per
//! row) shows how much was accepted in each second.

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn config(dir: &Path, queue: &str, pool: &str, store_port: u16, reserved: f64) {
    let store = pg_url().replace(":5432/", &format!(":{store_port}/"));
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"amqp\"\nurl = {:?}\nqueue = {queue:?}\n\n\
             [sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\nkey = \"/id\"\nmax_batch = 500\n\n\
             [rate]\ntick = \"200ms\"\n\n\
             [leases]\nstore = {store:?}\npool = {pool:?}\ncapacity = 600\npartitions = 6\nttl = \"4s\"\nreserved = {reserved}\nidle_grace = \"3s\"\n",
            amqp_url()
        ),
    )
    .unwrap();
}

fn worker(dir: &Path, until_empty: bool) -> Child {
    let mut args = vec!["run", "-c", "sluice.toml", "--summary", "json"];
    if until_empty {
        args.push("--until-empty");
    }
    sluice()
        .current_dir(dir)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Rows accepted per wall-clock second, in order.
fn per_second(db: &Path) -> Vec<(String, i64)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = format!("sqlite://{}", db.display());
        let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        sqlx::query_as(
            "select substr(ingested_at, 1, 19) as s, count(*) from records group by s order by s",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
    })
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
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_lease_share");
    amqp_publish(&queue, 30_000);
    config(dir.path(), &queue, &unique("pool"), 5432, 0.0);
    let workers: Vec<Child> = (0..3).map(|_| worker(dir.path(), true)).collect();
    let mut shares = Vec::new();
    for w in workers {
        let out = w.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        shares.push(summary(&out)["written"].as_i64().unwrap());
    }
    assert_eq!(shares.iter().sum::<i64>(), 30_000, "{shares:?}");
    for s in &shares {
        assert!(*s >= 4_500, "every worker writes at least 15%: {shares:?}");
    }
    let windows = per_second(&dir.path().join("out.db"));
    let steady = &windows[3..windows.len() - 1];
    let peak = steady.iter().map(|(_, n)| *n).max().unwrap();
    eprintln!(
        "accepted per second: {:?}",
        windows.iter().map(|(_, n)| n).collect::<Vec<_>>()
    );
    assert!(
        peak <= 630,
        "the pool's 600 rec/s was exceeded: {windows:?}"
    );
    let mut sorted: Vec<i64> = steady.iter().map(|(_, n)| *n).collect();
    sorted.sort();
    assert!(
        sorted[sorted.len() / 2] >= 450,
        "the pool was mostly used: {windows:?}"
    );
}

#[test]
fn a_dead_workers_partitions_go_to_the_others_within_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_lease_kill");
    amqp_publish(&queue, 60_000);
    config(dir.path(), &queue, &unique("pool"), 5432, 0.0);
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
    let relay = CuttableRelay::start("127.0.0.1:5432");
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_lease_outage");
    amqp_publish(&queue, 60_000);
    config(dir.path(), &queue, &unique("pool"), relay.port, 20.0);
    let workers: Vec<Child> = (0..3).map(|_| worker(dir.path(), false)).collect();
    std::thread::sleep(Duration::from_secs(8));
    let cut_at = chrono::Utc::now();
    relay.cut();
    std::thread::sleep(Duration::from_secs(20));
    let restored_at = chrono::Utc::now();
    relay.restore();
    std::thread::sleep(Duration::from_secs(10));
    for w in workers {
        let out = stop(w);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let fmt = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let windows = per_second(&dir.path().join("out.db"));
    eprintln!(
        "accepted per second: {:?}",
        windows.iter().map(|(_, n)| n).collect::<Vec<_>>()
    );
    let lapsed = fmt(cut_at + chrono::Duration::seconds(4 + 1));
    let during: Vec<i64> = windows
        .iter()
        .filter(|(s, _)| *s >= lapsed && *s < fmt(restored_at))
        .map(|(_, n)| *n)
        .collect();
    assert!(during.len() >= 10, "{windows:?}");
    assert!(
        during.iter().all(|&n| n <= 3 * 20 + 10),
        "rate fell to 3 × reserved within ttl: {during:?}"
    );
    assert!(
        during.iter().sum::<i64>() > 0,
        "reserved capacity kept the workers going"
    );
    let recovered = fmt(restored_at + chrono::Duration::seconds(4));
    let after: Vec<i64> = windows
        .iter()
        .filter(|(s, _)| *s >= recovered)
        .map(|(_, n)| *n)
        .collect();
    assert!(
        after.iter().any(|&n| n >= 400),
        "capacity came back: {after:?}"
    );
}
