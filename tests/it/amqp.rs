//! RabbitMQ source against the real broker: competing workers, crashes, broker-side
//! connection loss, and the prefetch bound.

use crate::common;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::*;

fn config(dir: &Path, queue: &str, rate: f64) {
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"amqp\"\nurl = {:?}\nqueue = {queue:?}\n\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\nkey = \"/id\"\nmax_batch = 500\n\n[rate]\nrecords_per_second = {rate}\ntick = \"200ms\"\n\n[retry]\nmin_delay = \"100ms\"\nmax_delay = \"2s\"\n",
            amqp_url()
        ),
    )
    .unwrap();
}

fn rows(dir: &Path) -> i64 {
    sqlite_count(&dir.join("out.db"), "select count(*) from records")
}

fn distinct(dir: &Path) -> i64 {
    sqlite_count(
        &dir.join("out.db"),
        "select count(distinct key) from records",
    )
}

#[test]
fn three_competing_workers_write_every_message_once() {
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_compete");
    amqp_publish(&queue, 20_000);
    config(dir.path(), &queue, 20_000.0);
    let workers: Vec<Child> = (0..3).map(|_| worker(dir.path(), true)).collect();
    let mut written = 0;
    for w in workers {
        let out = finish(w, Duration::from_secs(120));
        assert!(out.status.success(), "{}", stderr(&out));
        written += summary(&out)["written"].as_i64().unwrap();
    }
    assert_eq!(rows(dir.path()), 20_000);
    assert_eq!(distinct(dir.path()), 20_000);
    assert_eq!(written, 20_000, "no worker wrote a row another one wrote");
    assert_eq!(amqp_queue_counts(&queue), (0, 0));
}

#[test]
fn kill_9_mid_drain_loses_nothing_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_kill");
    amqp_publish(&queue, 20_000);
    config(dir.path(), &queue, 5_000.0);
    let mut victim = worker(dir.path(), true);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(dir.path().join("out.db").exists()
        && std::panic::catch_unwind(|| rows(dir.path())).unwrap_or(0) >= 3_000)
    {
        assert!(Instant::now() < deadline, "no progress");
        std::thread::sleep(Duration::from_millis(50));
    }
    victim.kill().unwrap();
    victim.wait().unwrap();
    assert!(
        rows(dir.path()) < 20_000,
        "killed too late to prove anything"
    );
    let out = finish(worker(dir.path(), true), Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr(&out));
    let (rows, queued) = (rows(dir.path()), amqp_queue_counts(&queue));
    assert_eq!(
        rows,
        20_000,
        "left in the queue (ready, unacknowledged): {queued:?}; the rerun said {}",
        summary(&out)
    );
    assert_eq!(distinct(dir.path()), 20_000);
    assert_eq!(queued, (0, 0));
}

#[test]
fn survives_the_broker_closing_every_connection() {
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_blip");
    amqp_publish(&queue, 10_000);
    // 10 s of draining: the blip (two rabbitmqctl calls, a second or more each on a busy
    // machine) must land while the worker still runs.
    config(dir.path(), &queue, 1_000.0);
    let w = worker(dir.path(), true);
    std::thread::sleep(Duration::from_millis(1_500));
    // Only this worker's connections: closing every connection on the shared broker
    // would also cut the other tests running beside this one.
    let listed = Command::new("rabbitmqctl")
        .args([
            "-q",
            "--no-table-headers",
            "list_connections",
            "pid",
            "client_properties",
        ])
        .output()
        .unwrap();
    assert!(listed.status.success());
    let name = format!("sluice: {queue}");
    let pids: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter(|line| line.contains(&name))
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(
        !pids.is_empty(),
        "the worker's connection is listed as {name:?}"
    );
    for pid in pids {
        let closed = Command::new("rabbitmqctl")
            .args(["-q", "close_connection", &pid, "sluice test: broker blip"])
            .status()
            .unwrap();
        assert!(closed.success());
    }
    let out = finish(w, Duration::from_secs(120));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("reconnect"),
        "the worker noticed the loss: {}",
        stderr(&out)
    );
    assert_eq!(rows(dir.path()), 10_000);
    assert_eq!(distinct(dir.path()), 10_000);
    assert_eq!(amqp_queue_counts(&queue), (0, 0));
}

#[test]
fn unacknowledged_messages_stay_within_the_prefetch_bound() {
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_prefetch");
    amqp_publish(&queue, 3_000);
    config(dir.path(), &queue, 100.0);
    let mut w = worker(dir.path(), false);
    // 100/s with a 200 ms tick: 20 per batch, 4 batches in flight + 1 being pulled.
    let bound = 20 * (4 + 1);
    let mut peak = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(6) {
        let (_, unacked) = amqp_queue_counts(&queue);
        peak = peak.max(unacked);
        std::thread::sleep(Duration::from_millis(200));
    }
    w.kill().unwrap();
    w.wait().unwrap();
    eprintln!("peak unacknowledged: {peak} (bound {bound})");
    assert!(peak > 0, "the worker was consuming");
    assert!(
        peak <= bound,
        "{peak} unacknowledged > prefetch bound {bound}"
    );
}

#[test]
fn produce_publishes_every_line_with_confirms_and_run_drains_them() {
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_produce");
    write_records(&dir.path().join("in.ndjson"), 2_500, &[]);
    config(dir.path(), &queue, 50_000.0);
    let out = run_in(dir.path(), &["produce", "-c", "sluice.toml", "in.ndjson"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2500"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(amqp_queue_counts(&queue), (2_500, 0));
    let out = finish(worker(dir.path(), true), Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(rows(dir.path()), 2_500);
    assert_eq!(amqp_queue_counts(&queue), (0, 0));
}

/// A key longer than an AMQP message id holds (255 bytes) is no reason to stop: produce
/// publishes every line (the id is the key's digest) and the worker, keying by the payload,
/// writes each record under its full key.
#[test]
fn produce_loads_a_key_too_long_for_a_message_id() {
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_long_key");
    let long = "k".repeat(300);
    std::fs::write(
        dir.path().join("in.ndjson"),
        format!("{{\"id\":\"a\"}}\n{{\"id\":\"{long}\"}}\n{{\"id\":\"b\"}}\n"),
    )
    .unwrap();
    config(dir.path(), &queue, 1_000.0);
    let out = run_in(dir.path(), &["produce", "-c", "sluice.toml", "in.ndjson"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "3");
    let out = finish(worker(dir.path(), true), Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(rows(dir.path()), 3);
    assert_eq!(
        sqlite_count(
            &dir.path().join("out.db"),
            &format!("select count(*) from records where key = '{long}'")
        ),
        1
    );
}

/// The broker stops answering just as a one-shot run ends (every row written): its
/// connection stays open and passes nothing, as behind a frozen host. The run ends all
/// the same, its goodbye (cancel, hand back, count) given up after 10 s without an
/// answer — before, it waited on the broker until heartbeats noticed, or for good; and a
/// reconnect meanwhile (the backlog asked of a frozen broker) waits out the freeze.
#[test]
fn a_broker_that_stops_answering_does_not_hold_a_one_shot_run() {
    const N: usize = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_frozen");
    amqp_publish(&queue, N);
    let relay = CuttableRelay::start("127.0.0.1:5672");
    config(dir.path(), &queue, 20_000.0);
    let text = std::fs::read_to_string(dir.path().join("sluice.toml")).unwrap();
    let through = format!("amqp://guest:guest@127.0.0.1:{}/%2f", relay.port);
    std::fs::write(
        dir.path().join("sluice.toml"),
        text.replace(&format!("{:?}", amqp_url()), &format!("{through:?}")),
    )
    .unwrap();
    let worker = worker(dir.path(), true);
    // The table may not be there yet: no rows then.
    poll(Duration::from_secs(60), "every row written", || {
        std::panic::catch_unwind(|| rows(dir.path())).unwrap_or(0) == N as i64
    });
    relay.freeze();
    let frozen = Instant::now();
    std::thread::sleep(Duration::from_secs(15));
    relay.thaw();
    let out = finish(worker, Duration::from_secs(45));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        frozen.elapsed() < Duration::from_secs(55),
        "{:?}",
        frozen.elapsed()
    );
    assert_eq!(distinct(dir.path()), N as i64);
    assert_eq!(rows(dir.path()), N as i64);
}
