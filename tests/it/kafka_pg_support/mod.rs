//! Helpers for the Kafka → PostgreSQL integration tests: unique names, topics on the real
//! broker, configs, the real binary, and direct reads of PostgreSQL and (group_reads) of
//! the group's committed offsets. Services come from `scripts/services.sh` (env vars, same defaults).
#![allow(dead_code, unused_imports)]

use crate::common;
mod group_reads;
pub mod live;

pub use common::{pg_url, stderr, summary, unique};
use group_reads::reader;
pub use group_reads::{committed_offsets, high_watermarks};

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext, Message};
use sqlx::{Connection, PgConnection};
use tokio::process::{Child, Command};

pub fn brokers() -> String {
    std::env::var("SLUICE_TEST_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".into())
}

fn tansu() -> String {
    std::env::var("SLUICE_TEST_TANSU").unwrap_or_else(|_| "tansu".into())
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
    cmd.env(
        "SLUICE_LOG",
        "warn,sluice::source::kafka=info,sluice::shutdown=info",
    )
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
    produce_with(config, input, &[]).await
}

/// [`produce`] with more of its flags (`--value-schema x.avsc`).
pub async fn produce_with(config: &Path, input: &Path, flags: &[&std::ffi::OsStr]) -> u64 {
    let out = sluice()
        .arg("produce")
        .args(flags)
        .arg("--config")
        .arg(config)
        .arg(input)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "produce failed: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Writes `n` records to `dir/in.ndjson` (`negative` as in [`write_records`]) and
/// produces them with `config`'s source; every one must be acknowledged by the broker.
pub async fn load_topic(config: &Path, dir: &Path, n: usize, negative: &[usize]) {
    let input = dir.join("in.ndjson");
    write_records(&input, n, negative);
    assert_eq!(produce(config, &input).await, n as u64);
}

/// SIGTERM to a running worker: it finishes what is in flight and exits.
pub fn terminate(child: &Child) {
    let pid = child.id().expect("still running");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
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
    let pid = child.id();
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(out) => out.unwrap(),
        Err(_) => panic!(
            "worker still running after {limit:?}; its threads:\n{}",
            pid.map_or("(no pid)".into(), stacks)
        ),
    }
}

/// Every thread's stack of a running process (gdb), to show where a worker that does not
/// stop is waiting.
pub fn stacks(pid: u32) -> String {
    let out = std::process::Command::new("gdb")
        .args([
            "-p",
            &pid.to_string(),
            "-batch",
            "-ex",
            "thread apply all bt 30",
        ])
        .output();
    match out {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with('#') || l.starts_with("Thread"))
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("(gdb: {e})"),
    }
}

pub async fn pg() -> PgConnection {
    PgConnection::connect(&pg_url())
        .await
        .expect("PostgreSQL is up")
}

/// One integer from PostgreSQL.
pub async fn pg_count(sql: &str) -> i64 {
    pg_count_at(&pg_url(), sql).await
}

/// One integer from the PostgreSQL at `url` (a test's own cluster).
pub async fn pg_count_at(url: &str, sql: &str) -> i64 {
    let mut conn = PgConnection::connect(url).await.expect("PostgreSQL is up");
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

/// Waits at most `limit` for `table` to exist: a worker creates it when it opens the sink.
pub async fn wait_for_table(table: &str, limit: Duration) {
    let started = Instant::now();
    let exists = format!("SELECT count(*) FROM pg_tables WHERE tablename = '{table}'");
    while pg_count(&exists).await == 0 {
        assert!(
            started.elapsed() < limit,
            "the worker never created {table}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Drops a test's table and deletes its topic.
pub async fn clean_up(table: &str, topic: &str) {
    pg_execute(&format!("DROP TABLE {table}")).await;
    delete_topic(topic);
}

/// Polls until `sql` counts at least `n` (or `limit` passes); returns the last count.
pub async fn wait_for_count(sql: &str, n: i64, limit: Duration) -> i64 {
    wait_for_count_at(&pg_url(), sql, n, limit).await
}

/// As [`wait_for_count`], against the PostgreSQL at `url`.
pub async fn wait_for_count_at(url: &str, sql: &str, n: i64, limit: Duration) -> i64 {
    let started = Instant::now();
    loop {
        let count = pg_count_at(url, sql).await;
        if count >= n || started.elapsed() > limit {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A loaded topic of `partitions` and the config that drains it unthrottled (fixed
/// concurrency 4, batches of 5,000); returns (topic, config, the NDJSON produced).
pub async fn prepare(
    dir: &Path,
    name: &str,
    records: usize,
    partitions: i32,
) -> (String, PathBuf, PathBuf) {
    let topic = unique(name);
    create_topic(&topic, partitions as u32);
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

/// The consume-only ceiling: reads the whole topic with a bare rdkafka consumer, copying
/// each payload as the worker does; records/s from the first message to the last.
pub async fn consume_only(topic: &str, records: usize, partitions: i32) -> f64 {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer = reader(&topic, "ceiling", partitions);
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

/// The COPY ceiling: COPY of the rows the worker would write from `input` (key, payload,
/// source `{topic}/{partition}/{line}`) into a fresh table of the same shape, dropped
/// afterwards; rows/s of the COPY alone.
pub async fn copy_ceiling(input: &Path, topic: &str, partitions: i32) -> f64 {
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
        let source = format!("{topic}/{}/{i}", i % partitions as usize);
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

/// Rows/s of the drain itself (without connecting, joining a group or exiting), from the
/// `ingested_at` of a sluice table holding `records` rows. `ingested_at` is each batch's
/// transaction start, so the rows of all batches but the last were written between the
/// first start and the last one; `None` when every row came in one batch.
pub async fn drain_rate(table: &str, records: usize) -> Option<f64> {
    let span_us = pg_count(&format!(
        "SELECT (extract(epoch FROM max(ingested_at) - min(ingested_at)) * 1e6)::bigint FROM {table}"
    ))
    .await;
    let last_batch = pg_count(&format!(
        "SELECT count(*) FROM {table} WHERE ingested_at = (SELECT max(ingested_at) FROM {table})"
    ))
    .await;
    rate_before_last_batch(records, last_batch, span_us)
}

/// Rows/s of all batches but the last over the `span_us` between the first batch's start
/// and the last one's.
pub fn rate_before_last_batch(records: usize, last_batch: i64, span_us: i64) -> Option<f64> {
    let before_last = records as i64 - last_batch;
    (before_last > 0).then(|| before_last as f64 / (span_us.max(1) as f64 / 1e6))
}

/// Counts failed deliveries: a load must be complete for a test to mean anything.
struct Failures(Arc<AtomicU64>);

impl ClientContext for Failures {}

impl ProducerContext for Failures {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Produces (key, partition, value) messages in order, a `None` value as a tombstone
/// (which `sluice produce` cannot send). No retries: a retry could reorder a partition;
/// a failed delivery fails the test instead. Blocking: call it from `spawn_blocking`.
pub fn produce_keyed(topic: &str, messages: &[(String, i32, Option<String>)]) {
    produce_bytes(
        topic,
        messages.iter().map(|(key, partition, value)| {
            (
                Some(key.as_bytes()),
                *partition,
                value.as_deref().map(str::as_bytes),
            )
        }),
    );
}

/// Produces (key, partition, value) messages as bytes, in order, a `None` key unkeyed and
/// a `None` value as a tombstone; as [`produce_keyed`], no retries, every one delivered.
pub fn produce_bytes<'a>(
    topic: &str,
    messages: impl IntoIterator<Item = (Option<&'a [u8]>, i32, Option<&'a [u8]>)>,
) {
    let failures = Arc::new(AtomicU64::new(0));
    let producer: BaseProducer<Failures> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("message.send.max.retries", "0")
        .create_with_context(Failures(failures.clone()))
        .unwrap();
    for (key, partition, value) in messages {
        loop {
            let mut record = BaseRecord::<[u8], [u8]>::to(topic).partition(partition);
            if let Some(key) = key {
                record = record.key(key);
            }
            if let Some(value) = value {
                record = record.payload(value);
            }
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    producer.poll(Duration::from_millis(20));
                }
                Err((err, _)) => panic!("producing to {topic}: {err}"),
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "every message delivered"
    );
}

/// Starts a worker with `args`, lets it write `after` rows, then holds the table locked so
/// its next batches are pulled but cannot be written and kills it (SIGKILL: no chance to
/// commit or close) while they are in flight; ends the writes it left waiting unwritten.
/// Returns the rows at the kill, asserted to lie between `after` and `records`.
pub async fn kill_mid_drain(
    config: &Path,
    table: &str,
    args: &[&str],
    after: i64,
    records: i64,
    limit: Duration,
) -> i64 {
    let mut first = start_worker(config, args);
    let count = format!("SELECT count(*) FROM {table}");
    wait_for_table(table, limit).await;
    wait_for_count(&count, after, limit).await;
    let mut locker = pg().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"
    )))
    .execute(&mut locker)
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    // The dead worker's inserts still wait for the lock server-side: end them unwritten.
    let blocked = pg_count(&format!(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_locks \
         WHERE relation = '{table}'::regclass AND NOT granted"
    ))
    .await;
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut locker)
        .await
        .unwrap();
    assert!(blocked > 0, "writes were in flight at the kill");
    let at_kill = pg_count(&count).await;
    assert!(
        (after..records).contains(&at_kill),
        "the kill should land mid-drain: {at_kill} rows"
    );
    at_kill
}

/// The rerun after [`kill_mid_drain`] (which left `at_kill` rows): it succeeds, writes
/// exactly the `records` the killed worker had not, and leaves the group's committed
/// offsets at the topic's high watermarks. Returns its summary.
pub async fn rerun_after_kill(
    config: &Path,
    topic: &str,
    partitions: i32,
    at_kill: i64,
    records: i64,
    limit: Duration,
) -> serde_json::Value {
    let out = finish(start_worker(config, &["--until-empty"]), limit).await;
    assert!(
        out.status.success(),
        "restart failed: {}",
        common::stderr(&out)
    );
    let s = common::summary(&out);
    assert_eq!(
        s["written"].as_i64().unwrap() + at_kill,
        records,
        "the restart writes exactly what was missing: {s}"
    );
    let committed = committed_offsets(topic, &format!("{topic}-workers"), partitions).await;
    let high = high_watermarks(topic, partitions).await;
    assert_eq!(high.iter().sum::<i64>(), records, "{high:?}");
    assert_eq!(
        committed, high,
        "committed offsets end at the high watermarks"
    );
    s
}
