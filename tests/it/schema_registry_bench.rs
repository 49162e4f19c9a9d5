//! Benchmark, not a test (ignored by default): Kafka → PostgreSQL with Avro values (through
//! the registry) against the same records as JSON, drained alternately in the same run by
//! the same build, unthrottled. Target: Avro ≥ 80% of JSON. Run it on a release build:
//!
//! ```sh
//! eval "$(scripts/services.sh)"
//! cargo build --release
//! SLUICE_BENCH_BIN=$PWD/target/release/sluice cargo test --test it schema_registry_bench:: -- --ignored --nocapture
//! ```
//!
//! `SLUICE_BENCH_AVRO` sets the records per topic (default 100,000). Figures are printed;
//! only correctness (every row present, the decoded rows equal to the JSON ones) is asserted.

use crate::common;
use crate::kafka_pg_support::{
    brokers, create_topic, delete_topic, drain_rate, pg_count, pg_execute, unique,
};
use crate::schema_registry_support::registry::TestRegistry;

use std::path::{Path, PathBuf};
use std::time::Duration;

const SCHEMA: &str = r#"{"type": "record", "name": "Order", "namespace": "bench", "fields": [
  {"name": "id", "type": "long"},
  {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 18, "scale": 2}},
  {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
  {"name": "note", "type": ["null", "string"]},
  {"name": "qty", "type": "int"}
]}"#;

fn program() -> PathBuf {
    std::env::var_os("SLUICE_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_sluice").into())
}

fn config(dir: &Path, topic: &str, group: &str, table: &str, avro: Option<&str>) -> PathBuf {
    let formats = match avro {
        Some(url) => format!(
            "\n[source.value]\nformat = \"avro\"\n\n[source.schema_registry]\nurl = \"{url}\"\n"
        ),
        None => String::new(),
    };
    let path = dir.join(format!("{group}.toml"));
    std::fs::write(
        &path,
        format!(
            "[source]\nkind = \"kafka\"\nbrokers = \"{}\"\ntopic = \"{topic}\"\ngroup = \"{group}\"\n{formats}\n\
             [sink]\nkind = \"postgres\"\nurl = \"{}\"\ntable = \"{table}\"\nkey = \"/id\"\n\n\
             [rate]\nrecords_per_second = \"off\"\n",
            brokers(),
            common::pg_url()
        ),
    )
    .unwrap();
    path
}

fn run(config: &Path, args: &[&str]) -> std::process::Output {
    let out = common::sluice_at(program())
        .args(args)
        .arg("-c")
        .arg(config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", args, common::stderr(&out));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn avro_values_against_the_same_records_as_json() {
    let records: usize = std::env::var("SLUICE_BENCH_AVRO")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().unwrap();
    let registry = TestRegistry::spawn();
    let input = dir.path().join("in.ndjson");
    let mut lines = String::new();
    for i in 1..=records {
        let note = if i % 3 == 0 {
            "null".to_string()
        } else {
            format!("\"order number {i}\"")
        };
        lines.push_str(&format!(
            "{{\"amount\":{}.{:02},\"at\":\"2024-03-01T12:{:02}:{:02}.{:03}Z\",\"id\":{i},\"note\":{note},\"qty\":{},\"status\":\"{}\"}}\n",
            i * 7,
            i % 100,
            (i / 60) % 60,
            i % 60,
            i % 1000,
            i % 50,
            ["NEW", "PAID", "SHIPPED"][i % 3]
        ));
    }
    std::fs::write(&input, lines).unwrap();
    let schema = dir.path().join("order.avsc");
    std::fs::write(&schema, SCHEMA).unwrap();
    let json_topic = unique("bench_json");
    let avro_topic = unique("bench_avro");
    create_topic(&json_topic, 4);
    create_topic(&avro_topic, 4);
    let url = registry.url();
    let load_json = config(dir.path(), &json_topic, "load_json", "unused", None);
    let load_avro = config(dir.path(), &avro_topic, "load_avro", "unused", Some(&url));
    run(&load_json, &["produce", input.to_str().unwrap()]);
    run(
        &load_avro,
        &[
            "produce",
            "--value-schema",
            schema.to_str().unwrap(),
            input.to_str().unwrap(),
        ],
    );
    let mut rates: Vec<(&str, f64, f64)> = Vec::new();
    for round in 0..3 {
        for (kind, topic, avro) in [
            ("json", &json_topic, None),
            ("avro", &avro_topic, Some(url.as_str())),
        ] {
            let table = format!("{topic}_r{round}");
            let group = format!("{topic}_g{round}");
            let cfg = config(dir.path(), topic, &group, &table, avro);
            let started = std::time::Instant::now();
            run(&cfg, &["run", "--until-empty"]);
            let wall = records as f64 / started.elapsed().as_secs_f64();
            let rows = pg_count(&format!("SELECT count(*) FROM {table}")).await;
            assert_eq!(rows, records as i64, "{kind} round {round}");
            let rate = drain_rate(&table, records).await.unwrap_or(f64::NAN);
            println!("{kind} round {round}: drain {rate:.0} rows/s, wall {wall:.0} rows/s");
            rates.push((kind, rate, wall));
        }
    }
    // The decoded Avro rows are the JSON rows.
    let differ = pg_count(&format!(
        "SELECT count(*) FROM {json_topic}_r0 j FULL JOIN {avro_topic}_r0 a USING (key) WHERE j.payload IS DISTINCT FROM a.payload"
    ))
    .await;
    assert_eq!(differ, 0, "Avro rows that differ from their JSON twins");
    let median = |kind: &str, wall: bool| {
        let mut v: Vec<f64> = rates
            .iter()
            .filter(|r| r.0 == kind)
            .map(|r| if wall { r.2 } else { r.1 })
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (json, avro) = (median("json", false), median("avro", false));
    let (json_wall, avro_wall) = (median("json", true), median("avro", true));
    println!(
        "median drain: json {json:.0} rows/s, avro {avro:.0} rows/s: avro/json {:.2}; wall: json {json_wall:.0}, avro {avro_wall:.0}: {:.2}",
        avro / json,
        avro_wall / json_wall
    );
    for round in 0..3 {
        for topic in [&json_topic, &avro_topic] {
            pg_execute(&format!("DROP TABLE IF EXISTS {topic}_r{round}")).await;
        }
    }
    delete_topic(&json_topic);
    delete_topic(&avro_topic);
    tokio::time::sleep(Duration::from_millis(10)).await;
}
