//! Helpers for the Kafka → PostgreSQL integration tests: unique names, topics on the real
//! broker, configs, the real binary, and direct reads of PostgreSQL and of the group's
//! committed offsets. Services come from `scripts/services.sh` (env vars, same defaults).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use sqlx::{Connection, PgConnection};
use tokio::process::{Child, Command};

pub fn pg_url() -> String {
    std::env::var("SLUICE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/sluice_test".into())
}

pub fn brokers() -> String {
    std::env::var("SLUICE_TEST_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".into())
}

fn tansu() -> String {
    std::env::var("SLUICE_TEST_TANSU").unwrap_or_else(|_| "tansu".into())
}

/// A name no other test (or earlier run) uses: `prefix_<pid>_<random>`.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}_{}_{nanos:x}", std::process::id())
}

pub fn create_topic(topic: &str, partitions: u32) {
    let out = std::process::Command::new(tansu())
        .args(["topic", "create", "--broker"])
        .arg(format!("tcp://{}", brokers()))
        .args(["--partitions", &partitions.to_string(), topic])
        .output()
        .expect("tansu runs (see scripts/services.sh)");
    assert!(
        out.status.success(),
        "creating topic {topic}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Deletes a test's topic: the broker keeps everything in memory.
pub fn delete_topic(topic: &str) {
    let out = std::process::Command::new(tansu())
        .args(["topic", "delete", "--broker"])
        .arg(format!("tcp://{}", brokers()))
        .arg(topic)
        .output()
        .expect("tansu runs (see scripts/services.sh)");
    assert!(
        out.status.success(),
        "deleting topic {topic}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A Kafka → PostgreSQL config in `dir`; `extra` is appended (more keys or tables).
pub fn write_config(
    dir: &Path,
    topic: &str,
    table: &str,
    sink_extra: &str,
    extra: &str,
) -> PathBuf {
    let path = dir.join("sluice.toml");
    std::fs::write(
        &path,
        format!(
            "[source]\nkind = \"kafka\"\nbrokers = \"{}\"\ntopic = \"{topic}\"\ngroup = \"{topic}-workers\"\n\n\
             [sink]\nkind = \"postgres\"\nurl = \"{}\"\ntable = \"{table}\"\n{sink_extra}\n\n\
             [rate]\nrecords_per_second = 100000\ntick = \"200ms\"\n\n\
             [retry]\nmin_delay = \"100ms\"\nmax_delay = \"2s\"\nfactor = 2.0\nmax_attempts = 4\n{extra}",
            brokers(),
            pg_url()
        ),
    )
    .unwrap();
    path
}

pub fn sluice() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.env("SLUICE_LOG", "warn,sluice::source::kafka=info")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// Writes `n` records `{"id": i, "amount": …, "note": …}` (i from 1); `amount` is -1 for
/// the ids in `negative`.
pub fn write_records(path: &Path, n: usize, negative: &[usize]) {
    let mut body = String::with_capacity(n * 64);
    for i in 1..=n {
        let amount = if negative.contains(&i) { -1 } else { i as i64 };
        body.push_str(&format!(
            "{{\"id\":{i},\"amount\":{amount},\"note\":\"record number {i}\"}}\n"
        ));
    }
    std::fs::write(path, body).unwrap();
}

/// Loads `input` into the configured topic with `sluice produce`; returns how many the
/// command reported delivered.
pub async fn produce(config: &Path, input: &Path) -> u64 {
    let out = sluice()
        .arg("produce")
        .arg("--config")
        .arg(config)
        .arg(input)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "produce failed: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Starts `sluice run --summary json` with `args`.
pub fn start_worker(config: &Path, args: &[&str]) -> Child {
    sluice()
        .arg("run")
        .arg("--config")
        .arg(config)
        .args(["--summary", "json"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits at most `limit` for a worker; panics (with its output) if it is still running.
pub async fn finish(child: Child, limit: Duration) -> Output {
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(out) => out.unwrap(),
        Err(_) => panic!("worker still running after {limit:?}"),
    }
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn summary(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no summary; stderr: {}", stderr(o)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("summary {line:?}: {e}"))
}

pub async fn pg() -> PgConnection {
    PgConnection::connect(&pg_url())
        .await
        .expect("PostgreSQL is up")
}

/// One integer from PostgreSQL.
pub async fn pg_count(sql: &str) -> i64 {
    let mut conn = pg().await;
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

pub async fn pg_execute(sql: &str) {
    let mut conn = pg().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Polls until `sql` counts at least `n` (or `limit` passes); returns the last count.
pub async fn wait_for_count(sql: &str, n: i64, limit: Duration) -> i64 {
    let started = Instant::now();
    loop {
        let count = pg_count(sql).await;
        if count >= n || started.elapsed() > limit {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The offsets the group committed, per partition (-1 when none).
pub async fn committed_offsets(topic: &str, group: &str, partitions: i32) -> Vec<i64> {
    let (topic, group) = (topic.to_string(), group.to_string());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        for p in 0..partitions {
            list.add_partition(&topic, p);
        }
        let committed = consumer
            .committed_offsets(list, Duration::from_secs(10))
            .unwrap();
        (0..partitions)
            .map(
                |p| match committed.find_partition(&topic, p).unwrap().offset() {
                    Offset::Offset(o) => o,
                    _ => -1,
                },
            )
            .collect()
    })
    .await
    .unwrap()
}

/// Each partition's high watermark, found by reading it to its end (the broker's own
/// ListOffsets answer is not trusted: Tansu's was wrong when measured).
pub async fn high_watermarks(topic: &str, partitions: i32) -> Vec<i64> {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            // assign() needs a group; this one never commits.
            .set("group.id", format!("{topic}-reader"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        for p in 0..partitions {
            list.add_partition_offset(&topic, p, Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&list).unwrap();
        let mut high = vec![0i64; partitions as usize];
        let mut ended = vec![false; partitions as usize];
        let started = Instant::now();
        while ended.iter().any(|e| !e) {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "reading {topic} to its end"
            );
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    high[m.partition() as usize] = m.offset() + 1;
                    ended[m.partition() as usize] = false;
                }
                Some(Err(KafkaError::PartitionEOF(p))) => ended[p as usize] = true,
                Some(Err(e)) => panic!("reading {topic}: {e}"),
                None => {}
            }
        }
        high
    })
    .await
    .unwrap()
}
