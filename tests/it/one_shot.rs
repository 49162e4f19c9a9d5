//! One-shot jobs always end: `--until-empty` drains what the source held when the run
//! began while a producer outpaces the sink (Kafka, RabbitMQ, file), `--deadline` stops a
//! long drain on time and a rerun completes it, and `--direct-assignment` starts a Kafka
//! load without a group join. Real broker, queue and databases.

use crate::kafka_pg_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{amqp_publish_bodies, amqp_url, sqlite_count};
use kafka_pg_support::live::*;
use kafka_pg_support::*;

/// A producer writes 5,000 rec/s into the topic from the moment the worker has taken its
/// bound; the worker may write 1,500 rec/s. It ends with exactly the 3,000 records there
/// at start written and committed, the rest left (and counted); a rerun after the
/// producer stops takes the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_until_empty_ends_at_the_offsets_taken_at_start() {
    const AT_START: usize = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("os_kafka");
    let table = topic.clone();
    create_topic(&topic, 2);
    let config = write_config(dir.path(), &topic, &table, "key = \"/id\"", "");
    load_topic(&config, dir.path(), AT_START, &[]).await;

    let mut worker = run_worker(&config, &["--until-empty", "--rate", "1500"]);
    let (bounds_taken, log) =
        watch_stderr(worker.stderr.take().unwrap(), "up to its end as of now");
    wait_for(&bounds_taken, 2, "both partitions' bounds").await;
    let flood = KafkaFlood::start(&topic, 1_000_000, 5_000);
    let (status, stdout) = exit_of(worker).await;
    let log = log.join().unwrap();
    let late = flood.stop();
    assert!(status.success(), "{log}");
    let s = json_summary(&stdout);
    let ends = logged_ends(&log, 2);
    assert_eq!(ends.iter().sum::<u64>(), AT_START as u64, "{log}");
    assert_eq!(s["written"], AT_START, "{s}");
    assert_eq!(
        pg_count(&format!(
            "SELECT count(*) FROM {table} WHERE (payload->>'id')::bigint <= {AT_START}"
        ))
        .await,
        AT_START as i64
    );
    assert_eq!(
        pg_count(&format!("SELECT count(*) FROM {table}")).await,
        AT_START as i64,
        "nothing produced after the start was written"
    );
    let committed = committed_offsets(&topic, &format!("{topic}-workers"), 2).await;
    assert_eq!(
        committed.iter().map(|&c| c as u64).collect::<Vec<_>>(),
        ends,
        "committed exactly up to the bound"
    );
    assert!(
        late > 2_000,
        "the producer outpaced the sink: {late} late records"
    );
    let remaining = s["remaining"].as_u64().expect("remaining counted");
    assert!(
        remaining > 0 && remaining <= late,
        "remaining {remaining} of {late} late records: {s}"
    );
    eprintln!(
        "kafka: {AT_START} at start written, {late} produced meanwhile, {remaining} left at exit; {s}"
    );

    let rest = run_worker(&config, &["--until-empty"]);
    let (status, stdout) = exit_of(rest).await;
    assert!(status.success());
    assert_eq!(json_summary(&stdout)["remaining"], 0);
    assert_eq!(
        pg_count(&format!("SELECT count(*) FROM {table}")).await,
        (AT_START as u64 + late) as i64,
        "the rerun took the rest"
    );
    clean_up(&table, &topic).await;
}

/// The same on RabbitMQ: the queue's depth when the worker connected is what it takes.
#[test]
fn amqp_until_empty_ends_at_the_depth_taken_at_start() {
    const AT_START: usize = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("os_amqp");
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"amqp\"\nurl = {:?}\nqueue = {queue:?}\n\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://{}\"\nkey = \"/id\"\nmax_batch = 200\n\n[rate]\nrecords_per_second = 1000\ntick = \"100ms\"\n",
            amqp_url(),
            dir.path().join("out.db").display()
        ),
    )
    .unwrap();
    let early: Vec<String> = (0..AT_START)
        .map(|i| format!("{{\"id\":\"e{i}\"}}"))
        .collect();
    amqp_publish_bodies(&queue, &early);

    let mut worker = run_worker(&config, &["--until-empty"]);
    let (bound_taken, log) = watch_stderr(worker.stderr.take().unwrap(), "messages ready now");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(wait_for(&bound_taken, 1, "the bound"));
    // 3,000 rec/s against the worker's 1,000 until it exits.
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let (queue, stop) = (queue.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let bodies: Vec<String> = (n..n + 300)
                    .map(|i| format!("{{\"id\":\"l{i}\"}}"))
                    .collect();
                amqp_publish_bodies(&queue, &bodies);
                n += 300;
                std::thread::sleep(Duration::from_millis(100));
            }
            n
        })
    };
    let (status, stdout) = rt.block_on(exit_of(worker));
    stop.store(true, Ordering::Relaxed);
    let late = flood.join().unwrap();
    let log = log.join().unwrap();
    assert!(status.success(), "{log}");
    assert!(
        log.contains(&format!("taking the {AT_START} messages ready now")),
        "{log}"
    );
    let s = json_summary(&stdout);
    assert_eq!(s["written"], AT_START, "{s}");
    let db = dir.path().join("out.db");
    assert_eq!(
        sqlite_count(&db, "SELECT count(*) FROM records WHERE key LIKE 'e%'"),
        AT_START as i64
    );
    assert_eq!(
        sqlite_count(&db, "SELECT count(*) FROM records"),
        AT_START as i64
    );
    assert!(
        late > AT_START,
        "the producer outpaced the sink: {late} late messages"
    );
    let remaining = s["remaining"].as_u64().expect("remaining counted");
    assert!(
        remaining > 0 && remaining <= late as u64,
        "{remaining} of {late}: {s}"
    );
    eprintln!(
        "amqp: {AT_START} at start written, {late} published meanwhile, {remaining} left at exit"
    );
    let (ready, unacked) = crate::common::amqp_queue_counts(&queue);
    assert_eq!(
        (ready, unacked),
        (late as u64, 0),
        "every late message is still queued"
    );
}

/// A file that grows while the load runs: lines there at start are written, later ones
/// are left (the checkpoint stays for the next run, which takes them).
#[test]
fn file_until_empty_ends_at_the_size_taken_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.ndjson");
    crate::common::write_records(&input, 1_000, &[]);
    let config = crate::common::write_config(dir.path(), "in.ndjson", 2000.0, "");
    let mut worker = run_worker(&config, &["--until-empty"]);
    let (bound_taken, log) = watch_stderr(worker.stderr.take().unwrap(), "its size now");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(wait_for(&bound_taken, 1, "the bound"));
    // Appends 4,000 lines/s (twice the worker's rate) while it runs.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (input, stop) = (input.clone(), stop.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&input)
                .unwrap();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let mut chunk = String::new();
                for i in n..n + 400 {
                    chunk.push_str(&format!("{{\"id\":\"late{i}\"}}\n"));
                }
                f.write_all(chunk.as_bytes()).unwrap();
                n += 400;
                std::thread::sleep(Duration::from_millis(100));
            }
            n
        })
    };
    let (status, stdout) = rt.block_on(exit_of(worker));
    stop.store(true, Ordering::Relaxed);
    let late = writer.join().unwrap();
    let log = log.join().unwrap();
    assert!(status.success(), "{log}");
    let s = json_summary(&stdout);
    let db = dir.path().join("out.db");
    assert_eq!(s["written"], 1_000, "{s}");
    assert_eq!(sqlite_count(&db, "SELECT count(*) FROM records"), 1_000);
    assert!(late >= 1_000, "the writer outpaced the sink: {late}");
    let remaining = s["remaining"].as_u64().unwrap();
    assert!(
        remaining > 0 && remaining <= late as u64,
        "{remaining} of {late}: {s}"
    );
    assert!(
        dir.path().join("in.ndjson.sluice-checkpoint").exists(),
        "kept for the next run"
    );
    // The old behaviour is still there: to the end, whatever arrived meanwhile.
    let again = crate::common::run_in(
        dir.path(),
        &[
            "run",
            "-c",
            "sluice.toml",
            "--until-empty=caught-up",
            "--summary",
            "json",
            "--rate",
            "100000",
        ],
    );
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(
        sqlite_count(&db, "SELECT count(*) FROM records"),
        1_000 + late as i64
    );
    assert_eq!(
        summary(&again)["duplicates"],
        0,
        "the rerun resumed at the checkpoint"
    );
}

/// `--deadline` ends a drain that would take 10 s after 2 s, exit 0, with what is left
/// in the summary; a rerun writes the rest and nothing is lost or written twice.
#[test]
fn a_deadline_stops_a_long_drain_on_time_and_a_rerun_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    crate::common::write_records(&dir.path().join("in.ndjson"), 5_000, &[]);
    crate::common::write_config(dir.path(), "in.ndjson", 500.0, "");
    let started = Instant::now();
    let out = crate::common::run_in(
        dir.path(),
        &[
            "run",
            "-c",
            "sluice.toml",
            "--until-empty",
            "--deadline",
            "2s",
            "--summary",
            "json",
        ],
    );
    let took = started.elapsed();
    assert!(out.status.success(), "{}", stderr(&out));
    let s = summary(&out);
    assert_eq!(s["deadline_reached"], true, "{s}");
    let written = s["written"].as_u64().unwrap();
    assert_eq!(
        s["pulled"].as_u64().unwrap(),
        written,
        "in-flight batches finished: {s}"
    );
    assert!((500..=1_500).contains(&written), "{s}");
    assert_eq!(s["remaining"].as_u64().unwrap(), 5_000 - written, "{s}");
    assert!(
        took < Duration::from_secs(8),
        "ended {took:?} after start, deadline 2 s"
    );
    let db = dir.path().join("out.db");
    assert_eq!(
        sqlite_count(&db, "SELECT count(*) FROM records"),
        written as i64
    );

    let again = crate::common::run_in(
        dir.path(),
        &[crate::common::DRAIN, &["--rate", "100000"]].concat(),
    );
    assert!(again.status.success(), "{}", stderr(&again));
    let s = summary(&again);
    assert_eq!(s["written"].as_u64().unwrap(), 5_000 - written, "{s}");
    assert_eq!(s["duplicates"], 0, "{s}");
    assert_eq!(s["remaining"], 0, "{s}");
    assert_eq!(sqlite_count(&db, "SELECT count(*) FROM records"), 5_000);
}
