//! PostgreSQL goes away in the middle of a Kafka → PostgreSQL drain: the worker retries
//! without blaming the records, resumes when the database is back, and loses nothing.
//!
//! The server that restarts is a cluster of this test's own, so the other tests (which
//! share one binary and run beside this one) keep their PostgreSQL. The outage is kept
//! short (about two seconds).

use crate::kafka_pg_support;
use crate::lease_fleet_support::Cluster;

use std::time::Duration;

use kafka_pg_support::*;
use sqlx::{Connection, PgConnection};

const RECORDS: usize = 20_000;

/// Starts the server again even if the test fails between stop and start.
struct Restart<'a>(&'a Cluster);

impl Drop for Restart<'_> {
    fn drop(&mut self) {
        self.0.start_again();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_mid_run_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("kp_pgrestart");
    let table = topic.clone();
    create_topic(&topic, 4);
    let config = write_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"\nmax_batch = 200",
        "",
    );
    let cluster = Cluster::start("");
    let url = cluster.url();
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace(&pg_url(), &url)).unwrap();
    load_topic(&config, dir.path(), RECORDS, &[]).await;

    let worker = start_worker(&config, &["--until-empty", "--rate", "2500"]);
    let rows = format!("SELECT count(*) FROM {table}");
    let exists = format!("SELECT count(*) FROM pg_tables WHERE tablename = '{table}'");
    assert_eq!(
        wait_for_count_at(&url, &exists, 1, Duration::from_secs(120)).await,
        1,
        "the worker never created {table}"
    );
    let before = wait_for_count_at(&url, &rows, 3_000, Duration::from_secs(120)).await;
    assert!(
        before < RECORDS as i64 - 5_000,
        "the outage should land mid-run: {before} rows"
    );

    // Hold the table so writes are in flight when the server goes: the worker must see
    // its statements die (not merely wait for a connection), then retry them.
    let mut locker = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"
    )))
    .execute(&mut locker)
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    {
        let _restart = Restart(&cluster);
        cluster.stop();
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    drop(locker);

    let out = finish(worker, Duration::from_secs(180)).await;
    assert!(out.status.success(), "worker failed: {}", stderr(&out));
    let s = summary(&out);
    assert!(
        s["retries"].as_u64().unwrap() > 0,
        "the outage was seen: {s}"
    );
    assert_eq!(
        s["dead_lettered"], 0,
        "an outage is not the records' fault: {s}"
    );
    assert_eq!(pg_count_at(&url, &rows).await, RECORDS as i64);
    assert!(
        stderr(&out).contains("sink unavailable"),
        "the worker said why it waited: {}",
        stderr(&out)
    );
    delete_topic(&topic);
}
