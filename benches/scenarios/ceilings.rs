//! Throughput ceilings: each path drained by sluice with its limits off, next to what the
//! bare tools do with the same rows in the same run — a hand-written batched INSERT into
//! SQLite or MariaDB, COPY into PostgreSQL, a consumer that only reads the queue. sluice exists to
//! hold a rate below these; they show how much room its own overhead leaves, and whether
//! a slow drain is sluice's fault or the source's or the sink's. Only correctness (every
//! row present) is asserted; the rates are printed.

#[path = "../../tests/it/kafka_pg_support/mod.rs"]
mod kafka_pg_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common;
use futures::StreamExt;
use kafka_pg_support::{
    consume_only, copy_ceiling, delete_topic, drain_rate, pg_count, pg_execute, prepare, produce,
    rate_before_last_batch, unique, write_records,
};
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use sqlx::{Connection as _, MySql, MySqlConnection, QueryBuilder, Sqlite, SqliteConnection};

use crate::process::{Measured, run_measured, sluice};

mod mariadb;
use mariadb::file_mariadb;

const FILE_SQLITE: &str = "File → SQLite";
const KAFKA_POSTGRES: &str = "Kafka → PostgreSQL";
const AMQP_POSTGRES: &str = "AMQP → PostgreSQL";
const FILE_MARIADB: &str = "File → MariaDB";
/// What `scripts/services.sh` exports for each queue path, its own service first.
const KAFKA_POSTGRES_VARS: [&str; 3] = [
    "SLUICE_TEST_KAFKA_BROKERS",
    "SLUICE_TEST_TANSU",
    "SLUICE_TEST_PG_URL",
];
const AMQP_POSTGRES_VARS: [&str; 2] = ["SLUICE_TEST_AMQP_URL", "SLUICE_TEST_PG_URL"];
const FILE_MARIADB_VARS: [&str; 1] = ["SLUICE_TEST_MYSQL_URL"];

/// The worker's shape on the queue paths (as `kafka_pg_support::prepare` writes it).
const MAX_BATCH: usize = 5000;
const CONCURRENCY: usize = 4;
const KAFKA_PARTITIONS: i32 = 4;
/// The prefetch the worker sets at this shape: a batch per slot plus one being pulled.
const WORKER_PREFETCH: u16 = (MAX_BATCH * (CONCURRENCY + 1)) as u16;

/// One sluice run next to one raw ceiling of the same path and rows.
pub struct Ceiling {
    pub path: &'static str,
    pub records: usize,
    pub sluice: SluiceRun,
    /// What the ceiling is: "batched INSERT", "COPY", "consume-only".
    pub raw: &'static str,
    pub raw_rate: f64,
}

#[derive(Clone, Copy)]
pub struct SluiceRun {
    /// Records over the process lifetime: start, connect (and group join), drain, exit.
    pub wall_rate: f64,
    /// Records over the drain itself, from the rows' `ingested_at` (each batch's start);
    /// `None` when every row came in one batch. Comparable with the raw rates, which also
    /// leave out connecting; optimistic by up to the batches still in flight when the
    /// last one started.
    pub drain_rate: Option<f64>,
    pub peak_rss_kib: u64,
}

impl SluiceRun {
    fn new(run: &Measured, records: usize, drain_rate: Option<f64>) -> Self {
        let written = run.json()["written"].as_u64();
        assert_eq!(written, Some(records as u64), "the summary: {}", run.json());
        SluiceRun {
            wall_rate: records as f64 / run.elapsed.as_secs_f64(),
            drain_rate,
            peak_rss_kib: run.peak_rss_kib,
        }
    }
}

/// Measures every path whose services are configured; with `smoke` a missing service
/// fails the run instead of skipping its path.
pub fn measure(records: usize, smoke: bool) -> Vec<Ceiling> {
    measure_only("", records, smoke)
}

/// As [`measure`], only the paths whose name contains `only` (case-insensitive).
pub fn measure_only(only: &str, records: usize, smoke: bool) -> Vec<Ceiling> {
    let only = only.to_lowercase();
    let chosen = |path: &str| path.to_lowercase().contains(&only);
    let mut rows = Vec::new();
    if chosen(FILE_SQLITE) {
        rows.extend(file_sqlite(records));
    }
    if chosen(KAFKA_POSTGRES) && services_configured(KAFKA_POSTGRES, &KAFKA_POSTGRES_VARS, smoke) {
        rows.extend(kafka_postgres(records));
    }
    if chosen(AMQP_POSTGRES) && services_configured(AMQP_POSTGRES, &AMQP_POSTGRES_VARS, smoke) {
        rows.extend(amqp_postgres(records));
    }
    if chosen(FILE_MARIADB) && services_configured(FILE_MARIADB, &FILE_MARIADB_VARS, smoke) {
        rows.extend(file_mariadb(records));
    }
    rows
}

/// One row per (path, ceiling). `sluice / raw` divides the draining rate (the whole-run
/// rate when there is none) by the ceiling, as both leave out connecting and exiting.
pub fn table(rows: &[Ceiling]) -> String {
    let mut out = String::from(
        "| path | records | sluice rec/s (whole run) | sluice rec/s (draining) | raw ceiling | raw rec/s | sluice / raw | sluice peak RSS MiB |\n\
         |---|---:|---:|---:|---|---:|---:|---:|\n",
    );
    for row in rows {
        let s = row.sluice;
        let draining = s.drain_rate.map_or("—".into(), |r| format!("{r:.0}"));
        out.push_str(&format!(
            "| {} | {} | {:.0} | {draining} | {} | {:.0} | {:.2} | {:.1} |\n",
            row.path,
            row.records,
            s.wall_rate,
            row.raw,
            row.raw_rate,
            s.drain_rate.unwrap_or(s.wall_rate) / row.raw_rate,
            s.peak_rss_kib as f64 / 1024.0
        ));
    }
    out
}

/// Whether every variable `path` needs is set; when one is not, a smoke run panics and a
/// full run skips the path with a line on stderr.
fn services_configured(path: &str, vars: &[&str], smoke: bool) -> bool {
    let Some(missing) = vars.iter().find(|v| std::env::var_os(v).is_none()) else {
        return true;
    };
    let why = format!("{missing} unset; run eval \"$(scripts/services.sh)\" first");
    assert!(!smoke, "ceilings: {path} needs its services: {why}");
    eprintln!("ceilings: {path} skipped: {why}");
    false
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().expect("a tokio runtime")
}

fn file_sqlite(records: usize) -> Vec<Ceiling> {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.ndjson");
    crate::write_backlog(&input, records);
    let raw_rate = raw_insert(&input, &dir.path().join("raw.db"));
    vec![Ceiling {
        path: FILE_SQLITE,
        records,
        sluice: sluice_into_sqlite(dir.path(), records),
        raw: "batched INSERT",
        raw_rate,
    }]
}

/// The SQLite ceiling: what a hand-written loop does with the same file and table shape —
/// parse each line, take its key, multi-row INSERT 1,000 rows per transaction.
fn raw_insert(input: &Path, db: &Path) -> f64 {
    runtime().block_on(async {
        let url = format!("sqlite://{}?mode=rwc", db.display());
        let mut conn = SqliteConnection::connect(&url).await.unwrap();
        sqlx::raw_sql(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
             CREATE TABLE records (key TEXT PRIMARY KEY, payload TEXT NOT NULL, source TEXT, ingested_at TEXT)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        let started = Instant::now();
        let text = std::fs::read_to_string(input).unwrap();
        let rows: Vec<(String, &str, String)> = text
            .lines()
            .enumerate()
            .map(|(i, line)| {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                (v["id"].as_str().unwrap().to_string(), line, format!("in:{i}"))
            })
            .collect();
        for chunk in rows.chunks(1000) {
            let mut tx = conn.begin().await.unwrap();
            let mut q = QueryBuilder::<Sqlite>::new("INSERT INTO records (key, payload, source) ");
            q.push_values(chunk, |mut b, (k, p, s)| {
                b.push_bind(k.as_str()).push_bind(*p).push_bind(s.as_str());
            });
            q.push(" ON CONFLICT(key) DO NOTHING");
            q.build().execute(&mut *tx).await.unwrap();
            tx.commit().await.unwrap();
        }
        rows.len() as f64 / started.elapsed().as_secs_f64()
    })
}

/// sluice over `dir/in.ndjson` into `dir/out.db`, unthrottled.
fn sluice_into_sqlite(dir: &Path, records: usize) -> SluiceRun {
    std::fs::write(
        dir.join("sluice.toml"),
        "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\nkey = \"/id\"\nmax_batch = 1000\n[rate]\nrecords_per_second = 1000000000\ntick = \"200ms\"\n[concurrency]\nmax = 4\n",
    )
    .unwrap();
    let mut cmd = sluice();
    cmd.current_dir(dir).args(common::DRAIN);
    let run = run_measured(cmd);
    let db = dir.join("out.db");
    let count = common::sqlite_count(&db, "SELECT count(*) FROM records");
    assert_eq!(count, records as i64, "rows in {}", db.display());
    SluiceRun::new(&run, records, sqlite_drain_rate(&db, records))
}

/// As `kafka_pg_support::drain_rate`, from SQLite's millisecond `ingested_at`.
fn sqlite_drain_rate(db: &Path, records: usize) -> Option<f64> {
    let span_us = common::sqlite_count(
        db,
        "SELECT CAST((julianday(max(ingested_at)) - julianday(min(ingested_at))) * 86400e6 AS INTEGER) FROM records",
    );
    let last_batch = common::sqlite_count(
        db,
        "SELECT count(*) FROM records WHERE ingested_at = (SELECT max(ingested_at) FROM records)",
    );
    rate_before_last_batch(records, last_batch, span_us)
}

fn kafka_postgres(records: usize) -> Vec<Ceiling> {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let (topic, config, input) =
        rt.block_on(prepare(dir.path(), "ceil_kafka", records, KAFKA_PARTITIONS));
    let consume_rate = rt.block_on(consume_only(&topic, records, KAFKA_PARTITIONS));
    let copy_rate = rt.block_on(copy_ceiling(&input, &topic, KAFKA_PARTITIONS));
    let run = sluice_into_postgres(&rt, &config, &format!("{topic}_rows"), records);
    delete_topic(&topic);
    against_postgres_ceilings(KAFKA_POSTGRES, records, run, copy_rate, consume_rate)
}

fn amqp_postgres(records: usize) -> Vec<Ceiling> {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("rows.ndjson");
    write_records(&input, records, &[]);
    let queue = unique("ceil_amqp");
    // The bare consumer drains a queue of its own, loaded with the same records. It runs
    // last: right after a load the broker is still busy persisting it.
    let bare_queue = format!("{queue}_bare");
    let config = amqp_config(dir.path(), &queue);
    rt.block_on(load_queue(&config, &input, records));
    rt.block_on(load_queue(
        &amqp_config(dir.path(), &bare_queue),
        &input,
        records,
    ));
    let copy_rate = rt.block_on(copy_ceiling(&input, &queue, 1));
    let run = sluice_into_postgres(&rt, &config, &format!("{queue}_rows"), records);
    let consume_rate = rt.block_on(amqp_consume_only(&bare_queue, records));
    rt.block_on(delete_queues(&[&queue, &bare_queue]));
    against_postgres_ceilings(AMQP_POSTGRES, records, run, copy_rate, consume_rate)
}

fn against_postgres_ceilings(
    path: &'static str,
    records: usize,
    sluice: SluiceRun,
    copy_rate: f64,
    consume_rate: f64,
) -> Vec<Ceiling> {
    [("COPY", copy_rate), ("consume-only", consume_rate)]
        .into_iter()
        .map(|(raw, raw_rate)| Ceiling {
            path,
            records,
            sluice,
            raw,
            raw_rate,
        })
        .collect()
}

/// Runs sluice with `config` until its source is empty, checks that `table` holds every
/// record, then drops it.
fn sluice_into_postgres(
    rt: &tokio::runtime::Runtime,
    config: &Path,
    table: &str,
    records: usize,
) -> SluiceRun {
    let mut cmd = sluice();
    cmd.args(["run", "--until-empty", "--summary", "json", "--config"])
        .arg(config);
    let run = run_measured(cmd);
    let drain_rate = rt.block_on(async {
        let count = pg_count(&format!("SELECT count(*) FROM {table}")).await;
        assert_eq!(count, records as i64, "rows in {table}");
        let rate = drain_rate(table, records).await;
        pg_execute(&format!("DROP TABLE {table}")).await;
        rate
    });
    SluiceRun::new(&run, records, drain_rate)
}

/// An unthrottled RabbitMQ → PostgreSQL config in `dir`, named after its queue; its
/// batches and concurrency are those of the Kafka config.
fn amqp_config(dir: &Path, queue: &str) -> PathBuf {
    let path = dir.join(format!("{queue}.toml"));
    std::fs::write(
        &path,
        format!(
            "[source]\nkind = \"amqp\"\nurl = {:?}\nqueue = {queue:?}\n\n\
             [sink]\nkind = \"postgres\"\nurl = {:?}\ntable = \"{queue}_rows\"\nkey = \"/id\"\nmax_batch = {MAX_BATCH}\n\n\
             [rate]\nrecords_per_second = 10000000\ntick = \"200ms\"\n\n\
             [concurrency]\nalgorithm = \"fixed\"\nmax = {CONCURRENCY}\n",
            common::amqp_url(),
            kafka_pg_support::pg_url()
        ),
    )
    .unwrap();
    path
}

/// Publishes `input` to the config's queue with `sluice produce` (pipelined confirms).
async fn load_queue(config: &Path, input: &Path, records: usize) {
    let started = Instant::now();
    assert_eq!(produce(config, input).await, records as u64);
    eprintln!(
        "ceilings: loaded {records} records into queue {} at {:.0} rec/s",
        config.file_stem().unwrap().to_string_lossy(),
        records as f64 / started.elapsed().as_secs_f64()
    );
}

async fn amqp_connect() -> Connection {
    let url = common::amqp_url();
    Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ at {url} is up: {e}"))
}

/// The consume-only ceiling of a queue: a bare lapin consumer with the worker's prefetch
/// that acks every message the way the worker does, one multiple-ack per batch (an ack
/// frame per message is more work for the broker than the worker asks of it); records/s
/// from the first delivery to the last ack.
async fn amqp_consume_only(queue: &str, records: usize) -> f64 {
    let conn = amqp_connect().await;
    let channel = conn.create_channel().await.unwrap();
    channel
        .basic_qos(WORKER_PREFETCH, BasicQosOptions { global: true })
        .await
        .unwrap();
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut first: Option<Instant> = None;
    let mut bytes = 0usize;
    for seen in 1..=records {
        let delivery = tokio::time::timeout(Duration::from_secs(10), consumer.next())
            .await
            .unwrap_or_else(|_| panic!("consume-only: stalled at {seen} of {records}"))
            .expect("the consumer stays open")
            .expect("a delivery");
        first.get_or_insert_with(Instant::now);
        bytes += delivery.data.len();
        if seen % MAX_BATCH == 0 || seen == records {
            let up_to_this_one = BasicAckOptions { multiple: true };
            channel
                .basic_ack(delivery.delivery_tag, up_to_this_one)
                .await
                .unwrap();
        }
    }
    let elapsed = first.unwrap().elapsed();
    assert!(bytes > 0);
    let _ = conn.close(200, "consume-only done".into()).await;
    records as f64 / elapsed.as_secs_f64()
}

async fn delete_queues(queues: &[&str]) {
    let conn = amqp_connect().await;
    let channel = conn.create_channel().await.unwrap();
    for queue in queues {
        channel
            .queue_delete((*queue).into(), QueueDeleteOptions::default())
            .await
            .unwrap_or_else(|e| panic!("deleting queue {queue}: {e}"));
    }
    let _ = conn.close(200, "ceilings done".into()).await;
}
