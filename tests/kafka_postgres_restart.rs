//! PostgreSQL goes away in the middle of a Kafka → PostgreSQL drain: the worker retries
//! without blaming the records, resumes when the database is back, and loses nothing.
//!
//! A test binary of its own with a single test: cargo runs test binaries one after the
//! other, so the restart of the shared PostgreSQL never overlaps the other tests of this
//! crate. The outage is kept short (about two seconds).

mod kafka_pg_support;

use std::time::Duration;

use kafka_pg_support::*;

const RECORDS: usize = 20_000;

/// `pg_ctlcluster` for the installed cluster (`/etc/postgresql/<version>/main`).
fn pg_ctl(action: &str) {
    let version = std::fs::read_dir("/etc/postgresql")
        .expect("PostgreSQL is installed as a Debian cluster")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .max()
        .expect("a cluster version");
    let status = std::process::Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", &version, "main", action])
        .status()
        .expect("pg_ctlcluster runs");
    assert!(status.success(), "pg_ctlcluster {action} failed");
}

/// Starts PostgreSQL again even if the test fails between stop and start.
struct Restart;

impl Drop for Restart {
    fn drop(&mut self) {
        pg_ctl("start");
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
    load_topic(&config, dir.path(), RECORDS, &[]).await;

    let worker = start_worker(&config, &["--until-empty", "--rate", "2500"]);
    let count = format!("SELECT count(*) FROM {table}");
    wait_for_table(&table, Duration::from_secs(120)).await;
    let before = wait_for_count(&count, 3_000, Duration::from_secs(120)).await;
    assert!(
        before < RECORDS as i64 - 5_000,
        "the outage should land mid-run: {before} rows"
    );

    // Hold the table so writes are in flight when the server goes: the worker must see
    // its statements die (not merely wait for a connection), then retry them.
    let mut locker = pg().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"
    )))
    .execute(&mut locker)
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    {
        let _restart = Restart;
        pg_ctl("stop");
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
    assert_eq!(pg_count(&count).await, RECORDS as i64);
    assert!(
        stderr(&out).contains("sink unavailable"),
        "the worker said why it waited: {}",
        stderr(&out)
    );
    clean_up(&table, &topic).await;
}
