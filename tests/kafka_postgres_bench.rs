//! Benchmark, not a test (ignored by default): unthrottled Kafka → PostgreSQL records/s
//! against the raw ceilings measured in the same run — COPY of the same rows straight
//! into PostgreSQL, and consuming the topic with rdkafka alone — and the worker's peak
//! RSS with a small and a large backlog. Run it on the release build:
//!
//! ```sh
//! eval "$(scripts/services.sh)"
//! cargo test --release --test kafka_postgres_bench -- --ignored --nocapture
//! ```
//!
//! `SLUICE_BENCH_SMALL` / `SLUICE_BENCH_LARGE` change the backlogs (default 100,000 and
//! 1,000,000). Targets: sluice ≥ 80% of the slower ceiling; RSS(large) within 10% of
//! RSS(small). Figures are printed; only correctness (every row present) is asserted.

mod kafka_pg_support;

use std::path::Path;
use std::time::{Duration, Instant};

use kafka_pg_support::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

const PARTITIONS: i32 = 4;

fn backlog(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Reads the whole topic with a bare rdkafka consumer, copying each payload as the
/// worker does; records/s from the first message to the last.
async fn consume_only(topic: &str, records: usize) -> f64 {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .set("group.id", format!("{topic}-ceiling"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            list.add_partition_offset(&topic, p, Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&list).unwrap();
        let mut seen = 0usize;
        let mut bytes = 0usize;
        let mut first: Option<Instant> = None;
        let mut last = Instant::now();
        while seen < records {
            match consumer.poll(Duration::from_secs(10)) {
                Some(Ok(m)) => {
                    first.get_or_insert_with(Instant::now);
                    let payload = m.payload().unwrap_or_default().to_vec();
                    bytes += payload.len();
                    seen += 1;
                    last = Instant::now();
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(e)) => panic!("consume-only: {e}"),
                None => panic!("consume-only: stalled at {seen} of {records}"),
            }
        }
        assert!(bytes > 0);
        seen as f64 / (last - first.unwrap()).as_secs_f64()
    })
    .await
    .unwrap()
}

/// COPY of the rows the worker would write (key, payload, source) into a fresh table of
/// the same shape; rows/s of the COPY alone.
async fn copy_ceiling(input: &Path, topic: &str) -> f64 {
    let table = format!("{topic}_copy");
    pg_execute(&format!(
        "CREATE TABLE {table} (key text PRIMARY KEY, payload jsonb NOT NULL, source text, \
         ingested_at timestamptz NOT NULL DEFAULT now())"
    ))
    .await;
    let lines = std::fs::read_to_string(input).unwrap();
    let mut data = Vec::with_capacity(lines.len() * 2);
    let mut rows = 0u64;
    for (i, line) in lines.lines().enumerate() {
        let id: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = id["id"].to_string();
        let source = format!("{topic}/{}/{i}", i % PARTITIONS as usize);
        for (n, field) in [key.as_str(), line, source.as_str()].iter().enumerate() {
            if n > 0 {
                data.push(b'\t');
            }
            copy_escape(field, &mut data);
        }
        data.push(b'\n');
        rows += 1;
    }
    let mut conn = pg().await;
    let started = Instant::now();
    let mut copy = conn
        .copy_in_raw(&format!("COPY {table} (key, payload, source) FROM STDIN"))
        .await
        .unwrap();
    for chunk in data.chunks(1 << 20) {
        copy.send(chunk).await.unwrap();
    }
    let copied = copy.finish().await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(copied, rows);
    pg_execute(&format!("DROP TABLE {table}")).await;
    rows as f64 / elapsed.as_secs_f64()
}

/// COPY text format: backslash, tab, newline and carriage return are escaped.
fn copy_escape(field: &str, out: &mut Vec<u8>) {
    for b in field.bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
}

struct WorkerRun {
    /// Rows over the span of their `ingested_at` (the drain itself, without the join).
    drain_rate: f64,
    /// Rows over the whole process lifetime (connect, group join, drain, exit).
    wall_rate: f64,
    peak_rss_kb: u64,
}

/// Runs the release worker unthrottled under `/usr/bin/time -v` until the topic is empty,
/// in a group and into a table of its own (`run` tells them apart).
async fn run_worker(config: &Path, topic: &str, run: usize, records: usize) -> WorkerRun {
    let table = format!("{topic}_run{run}");
    let started = Instant::now();
    let out = tokio::process::Command::new("/usr/bin/time")
        .arg("-v")
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--until-empty", "--summary", "json", "--config"])
        .arg(config)
        .env("SLUICE_LOG", "warn")
        .env("SLUICE_SOURCE__GROUP", format!("{topic}-run{run}"))
        .env("SLUICE_SINK__TABLE", &table)
        .output()
        .await
        .unwrap();
    let wall = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "worker failed: {err}");
    let s = summary(&out);
    assert_eq!(s["written"].as_u64(), Some(records as u64), "{s}");
    let peak_rss_kb = err
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.trim().parse().ok())
        .expect("/usr/bin/time -v reports the peak RSS");
    assert_eq!(
        pg_count(&format!("SELECT count(*) FROM {table}")).await,
        records as i64
    );
    // `ingested_at` is each batch's transaction start: the rows of all batches but the
    // last were written between the first start and the last one.
    let span_us = pg_count(&format!(
        "SELECT (extract(epoch FROM max(ingested_at) - min(ingested_at)) * 1e6)::bigint FROM {table}"
    ))
    .await;
    let last_batch = pg_count(&format!(
        "SELECT count(*) FROM {table} WHERE ingested_at = (SELECT max(ingested_at) FROM {table})"
    ))
    .await;
    pg_execute(&format!("DROP TABLE {table}")).await;
    WorkerRun {
        drain_rate: (records as i64 - last_batch) as f64 / (span_us.max(1) as f64 / 1e6),
        wall_rate: records as f64 / wall.as_secs_f64(),
        peak_rss_kb,
    }
}

/// A loaded topic and the config that drains it unthrottled.
async fn prepare(
    dir: &Path,
    name: &str,
    records: usize,
) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let topic = unique(name);
    create_topic(&topic, PARTITIONS as u32);
    let config = write_config(
        dir,
        &topic,
        &format!("{topic}_rows"),
        "key = \"/id\"\nmax_batch = 5000",
        "[concurrency]\nalgorithm = \"fixed\"\nmax = 4",
    );
    let config = {
        let path = dir.join(format!("{name}.toml"));
        std::fs::rename(&config, &path).unwrap();
        let body = std::fs::read_to_string(&path).unwrap().replace(
            "records_per_second = 100000",
            "records_per_second = 10000000",
        );
        std::fs::write(&path, body).unwrap();
        path
    };
    let input = dir.join(format!("{name}.ndjson"));
    write_records(&input, records, &[]);
    let started = Instant::now();
    assert_eq!(produce(&config, &input).await, records as u64);
    eprintln!(
        "bench: produced {records} records to {topic} at {:.0} rec/s",
        records as f64 / started.elapsed().as_secs_f64()
    );
    (topic, config, input)
}

/// The best of `runs` tries: the machine is shared, the best run is the least disturbed.
fn best(runs: &[f64]) -> f64 {
    runs.iter().copied().fold(0.0, f64::max)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: cargo test --release --test kafka_postgres_bench -- --ignored --nocapture"]
async fn kafka_to_postgres_against_its_ceilings() {
    let small = backlog("SLUICE_BENCH_SMALL", 100_000);
    let large = backlog("SLUICE_BENCH_LARGE", 1_000_000);
    let runs = backlog("SLUICE_BENCH_RUNS", 2);
    let dir = tempfile::tempdir().unwrap();
    let (small_topic, small_config, _) = prepare(dir.path(), "kb_small", small).await;
    let (large_topic, large_config, large_input) = prepare(dir.path(), "kb_large", large).await;

    let mut consume = Vec::new();
    let mut copy = Vec::new();
    let mut small_runs = Vec::new();
    let mut large_runs = Vec::new();
    for run in 0..runs {
        consume.push(consume_only(&large_topic, large).await);
        copy.push(copy_ceiling(&large_input, &large_topic).await);
        small_runs.push(run_worker(&small_config, &small_topic, run, small).await);
        large_runs.push(run_worker(&large_config, &large_topic, run, large).await);
    }
    let (consume, copy) = (best(&consume), best(&copy));
    let ceiling = consume.min(copy);
    eprintln!(
        "bench: ceilings ({large} records, best of {runs}): consume-only {consume:.0} rec/s, COPY {copy:.0} rows/s"
    );
    for (n, tries) in [(small, &small_runs), (large, &large_runs)] {
        for run in tries.iter() {
            eprintln!(
                "bench: sluice {n} records: {:.0} rec/s while draining ({:.0}% of the slower ceiling), {:.0} rec/s over the whole run (group join included), peak RSS {} KiB",
                run.drain_rate,
                run.drain_rate / ceiling * 100.0,
                run.wall_rate,
                run.peak_rss_kb
            );
        }
    }
    let drain = best(&large_runs.iter().map(|r| r.drain_rate).collect::<Vec<_>>());
    let ratio = drain / ceiling;
    let peak = |tries: &[WorkerRun]| tries.iter().map(|r| r.peak_rss_kb).max().unwrap_or(0) as f64;
    let rss_growth = peak(&large_runs) / peak(&small_runs) - 1.0;
    eprintln!(
        "bench: throughput target (>= 80% of the slower ceiling, {large} records, best of {runs}): {} ({:.0}%); memory target (highest peak RSS with {large} within 10% of {small}): {} ({:+.1}%)",
        if ratio >= 0.8 { "met" } else { "MISSED" },
        ratio * 100.0,
        if rss_growth <= 0.10 { "met" } else { "MISSED" },
        rss_growth * 100.0
    );
    delete_topic(&small_topic);
    delete_topic(&large_topic);
}
