//! Latency of small batches on the PostgreSQL sink (issue #25 item 4): 400 records in
//! batches of 1, 8 in flight, on the default (created) table and on a mapped table.
//! Prints p50/p90 per batch and the wall time of each run.
//!
//! `cargo run --release --example small_batches -- [postgres-url]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::config::Config;
use sluice::record::Row;
use sluice::sink::Sink;
use sluice::sink::postgres::PostgresSink;
use sluice::sink::postgres::settings::PostgresSettings;
use sluice::sink::settings::SinkBackend;

const RECORDS: usize = 400;
const IN_FLIGHT: usize = 8;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/sluice_test".into());
    let tag = format!("small_batches_{}", std::process::id());
    let mut config = Config::default();
    config.sink.url = url.clone();
    let own = PostgresSettings {
        max_connections: Some(IN_FLIGHT as u32 + 1),
        ..PostgresSettings::default()
    };
    config.sink.backend = SinkBackend::Postgres(own.clone());
    let created_own = own.clone();
    let opening = config.sink_opening();

    config.sink.table = format!("{tag}_created");
    let created = Arc::new(PostgresSink::open(&config.sink, &created_own, &opening).await?);
    report("default (created table)", run(created, "c").await);

    let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await?;
    let mapped_table = format!("{tag}_mapped");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {mapped_table} (key text PRIMARY KEY, doc jsonb)"
    )))
    .execute(&mut admin)
    .await?;
    config.sink.table = mapped_table.clone();
    let mapped_own = PostgresSettings {
        columns: Some([("doc".to_string(), String::new())].into()),
        ..own
    };
    config.sink.backend = SinkBackend::Postgres(mapped_own.clone());
    let mapped = Arc::new(PostgresSink::open(&config.sink, &mapped_own, &opening).await?);
    report("[sink.columns] (mapped table)", run(mapped, "m").await);

    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP TABLE {tag}_created; DROP TABLE {mapped_table}"
    )))
    .execute(&mut admin)
    .await?;
    Ok(())
}

/// Writes the records one per batch from `IN_FLIGHT` tasks; returns each batch's latency
/// and the wall time.
async fn run(sink: Arc<PostgresSink>, prefix: &str) -> (Vec<Duration>, Duration) {
    let began = Instant::now();
    let mut tasks = Vec::new();
    for lane in 0..IN_FLIGHT {
        let sink = sink.clone();
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            for i in (lane..RECORDS).step_by(IN_FLIGHT) {
                let row = Row {
                    key: format!("{prefix}{i}"),
                    payload: format!("{{\"id\":{i},\"note\":\"record number {i}\"}}"),
                    origin: format!("bench:{i}"),
                    ..Default::default()
                };
                let sent = Instant::now();
                let outcome = sink.write(std::slice::from_ref(&row)).await;
                latencies.push(sent.elapsed());
                assert!(
                    matches!(outcome, sluice::sink::WriteOutcome::Written { .. }),
                    "{outcome:?}"
                );
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("a lane finishes"));
    }
    (all, began.elapsed())
}

fn report(name: &str, (mut latencies, wall): (Vec<Duration>, Duration)) {
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "{name}: {} batches in {:.2} s, p50 {:.2} ms, p90 {:.2} ms, max {:.2} ms",
        latencies.len(),
        wall.as_secs_f64(),
        at(0.5).as_secs_f64() * 1000.0,
        at(0.9).as_secs_f64() * 1000.0,
        at(1.0).as_secs_f64() * 1000.0
    );
}
