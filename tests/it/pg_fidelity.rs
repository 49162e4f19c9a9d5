//! What reaches PostgreSQL through `[sink.columns]`: every JSON type into every common
//! column type, strict and lenient, compared cell by cell with the table in docs/sinks/postgres.md; numbers
//! keep every digit; tables named after types work.

use crate::common;

use common::*;
use sqlx::Connection;

/// A cell's expected outcome: stored as this text (`col::text`, UTC), NULL, or a dead letter.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Text(String),
    Null,
    Dead,
}

const BIG: &str = "123456789012345678901234567890";
const TINY: &str = "1.0000000000000000001";
const UUID: &str = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";

/// (case, JSON text).
const CASES: &[(&str, &str)] = &[
    ("null", "null"),
    ("true", "true"),
    ("one", "1"),
    ("int", "42"),
    ("frac", "1.5"),
    ("big", BIG),
    ("tiny", TINY),
    ("exp", "1e3"),
    ("huge", "1e400"),
    ("s_num", "\"42\""),
    ("s_yes", "\"yes\""),
    ("s_ts", "\"2024-05-01T12:00:00Z\""),
    ("s_uuid", "\"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\""),
    ("s_arr", "\"{p,q}\""),
    ("s_csv", "\"a,b\""),
    ("arr", "[\"p\",\"q\"]"),
    ("obj", "{\"a\":1.10}"),
];

/// (column, type).
const COLUMNS: &[(&str, &str)] = &[
    ("c_numeric", "numeric"),
    ("c_bigint", "bigint"),
    ("c_int", "int"),
    ("c_boolean", "boolean"),
    ("c_timestamptz", "timestamptz"),
    ("c_jsonb", "jsonb"),
    ("c_text", "text"),
    ("c_text_arr", "text[]"),
    ("c_uuid", "uuid"),
];

/// The table in docs/sinks/postgres.md, one cell per (column, case): `strict / lenient`, written
/// `D` (dead letter), `N` (NULL), `=` (same as strict), or the stored text.
fn expected(column: &str, case: &str, lenient: bool) -> Cell {
    let huge = format!("1{}", "0".repeat(400));
    let (strict, loose): (&str, &str) = match (column, case) {
        (_, "null") => ("N", "="),
        ("c_numeric", "one") => ("1", "="),
        ("c_numeric", "int") => ("42", "="),
        ("c_numeric", "frac") => ("1.5", "="),
        ("c_numeric", "big") => (BIG, "="),
        ("c_numeric", "tiny") => (TINY, "="),
        ("c_numeric", "exp") => ("1000", "="),
        ("c_numeric", "huge") => (&huge, "="),
        ("c_numeric", "s_num") => ("D", "42"),
        ("c_bigint" | "c_int", "one") => ("1", "="),
        ("c_bigint" | "c_int", "int") => ("42", "="),
        ("c_bigint" | "c_int", "exp") => ("1000", "="),
        ("c_bigint" | "c_int", "s_num") => ("D", "42"),
        ("c_boolean", "true") => ("true", "="),
        ("c_boolean", "one" | "s_yes") => ("D", "true"),
        ("c_timestamptz", "s_ts") => ("2024-05-01 12:00:00+00", "="),
        ("c_jsonb", "true") => ("true", "="),
        ("c_jsonb", "one") => ("1", "="),
        ("c_jsonb", "int") => ("42", "="),
        ("c_jsonb", "frac") => ("1.5", "="),
        ("c_jsonb", "big") => (BIG, "="),
        ("c_jsonb", "tiny") => (TINY, "="),
        ("c_jsonb", "exp") => ("1000", "="),
        ("c_jsonb", "huge") => (&huge, "="),
        ("c_jsonb", "s_num") => ("\"42\"", "="),
        ("c_jsonb", "s_yes") => ("\"yes\"", "="),
        ("c_jsonb", "s_ts") => ("\"2024-05-01T12:00:00Z\"", "="),
        ("c_jsonb", "s_uuid") => ("\"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\"", "="),
        ("c_jsonb", "s_arr") => ("\"{p,q}\"", "="),
        ("c_jsonb", "s_csv") => ("\"a,b\"", "="),
        ("c_jsonb", "arr") => ("[\"p\", \"q\"]", "="),
        ("c_jsonb", "obj") => ("{\"a\": 1.10}", "="),
        ("c_text", "true") => ("D", "true"),
        ("c_text", "one") => ("D", "1"),
        ("c_text", "int") => ("D", "42"),
        ("c_text", "frac") => ("D", "1.5"),
        ("c_text", "big") => ("D", BIG),
        ("c_text", "tiny") => ("D", TINY),
        // The exponent keeps its digits and gains a sign.
        ("c_text", "exp") => ("D", "1e+3"),
        ("c_text", "huge") => ("D", "1e+400"),
        ("c_text", "s_num") => ("42", "="),
        ("c_text", "s_yes") => ("yes", "="),
        ("c_text", "s_ts") => ("2024-05-01T12:00:00Z", "="),
        ("c_text", "s_uuid") => (UUID, "="),
        ("c_text", "s_arr") => ("{p,q}", "="),
        ("c_text", "s_csv") => ("a,b", "="),
        ("c_text", "arr") => ("D", "[\"p\",\"q\"]"),
        ("c_text", "obj") => ("D", "{\"a\":1.10}"),
        ("c_text_arr", "arr") => ("{p,q}", "="),
        ("c_text_arr", "s_arr") => ("D", "{p,q}"),
        ("c_uuid", "s_uuid") => (UUID, "="),
        _ => ("D", "="),
    };
    let text = match (lenient, loose) {
        (true, "=") | (false, _) => strict,
        (true, loose) => loose,
    };
    match text {
        "D" => Cell::Dead,
        "N" => Cell::Null,
        t => Cell::Text(t.to_string()),
    }
}

async fn pg() -> sqlx::PgConnection {
    let mut conn = sqlx::PgConnection::connect(&pg_url()).await.unwrap();
    sqlx::raw_sql("SET TIME ZONE 'UTC'")
        .execute(&mut conn)
        .await
        .unwrap();
    conn
}

async fn execute(sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&mut pg().await)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Drains `records` from a file into `table` through `sink_extra` (columns, coerce).
fn drain(dir: &std::path::Path, records: &str, table: &str, sink_extra: &str) -> serde_json::Value {
    std::fs::write(dir.join("in.ndjson"), records).unwrap();
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"postgres\"\nurl = \"{}\"\ntable = \"{table}\"\nkey = \"/id\"\n{sink_extra}\n\n\
             [rate]\nrecords_per_second = 100000\ntick = \"200ms\"\n",
            pg_url()
        ),
    )
    .unwrap();
    let _ = std::fs::remove_file(dir.join("in.ndjson.sluice-checkpoint"));
    let out = run_in(dir, DRAIN);
    assert!(out.status.success(), "sluice failed: {}", stderr(&out));
    summary(&out)
}

async fn every_cell_matches_the_table(lenient: bool) {
    let dir = tempfile::tempdir().unwrap();
    let table = unique(if lenient { "fid_lenient" } else { "fid_strict" });
    let columns: Vec<String> = COLUMNS.iter().map(|(c, t)| format!("{c} {t}")).collect();
    execute(&format!(
        "CREATE TABLE {table} (id text PRIMARY KEY, {})",
        columns.join(", ")
    ))
    .await;
    let mut records = String::new();
    for (column, _) in COLUMNS {
        for (case, json) in CASES {
            records.push_str(&format!(
                "{{\"id\":\"{table}:{column}:{case}\",\"{column}\":{json}}}\n"
            ));
        }
    }
    let mapping: Vec<String> = COLUMNS
        .iter()
        .map(|(c, _)| format!("{c} = \"/{c}\""))
        .collect();
    let mode = if lenient { "lenient" } else { "strict" };
    let summary = drain(
        dir.path(),
        &records,
        &table,
        &format!(
            "key_column = \"id\"\ncoerce = \"{mode}\"\nmax_batch = 50\n[sink.columns]\n{}",
            mapping.join("\n")
        ),
    );

    let mut conn = pg().await;
    let mut mismatches = Vec::new();
    let mut dead = 0;
    for (column, _) in COLUMNS {
        for (case, _) in CASES {
            let key = format!("{table}:{column}:{case}");
            let stored: Option<(Option<String>,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {column}::text FROM {table} WHERE id = $1"
            )))
            .bind(&key)
            .fetch_optional(&mut conn)
            .await
            .unwrap();
            let letters: i64 =
                sqlx::query_scalar("SELECT count(*) FROM sluice_dead_letters WHERE key = $1")
                    .bind(&key)
                    .fetch_one(&mut conn)
                    .await
                    .unwrap();
            let got = match (stored, letters) {
                (Some((Some(text),)), 0) => Cell::Text(text),
                (Some((None,)), 0) => Cell::Null,
                (None, 1) => Cell::Dead,
                other => panic!("{key}: neither one row nor one dead letter: {other:?}"),
            };
            if got == Cell::Dead {
                dead += 1;
            }
            let want = expected(column, case, lenient);
            if got != want {
                mismatches.push(format!("{column} × {case}: want {want:?}, got {got:?}"));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{mode}: {} cells differ from the table:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert_eq!(summary["dead_lettered"].as_u64(), Some(dead), "{summary}");

    // A dead letter holds the record as it came, every digit included.
    let raw: Vec<u8> = sqlx::query_scalar("SELECT raw FROM sluice_dead_letters WHERE key = $1")
        .bind(format!("{table}:c_bigint:big"))
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&raw).contains(&format!(":{BIG}}}")),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    execute(&format!(
        "DROP TABLE {table}; DELETE FROM sluice_dead_letters WHERE key LIKE '{table}:%'"
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_mapping_matches_the_table_cell_by_cell() {
    every_cell_matches_the_table(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lenient_mapping_matches_the_table_cell_by_cell() {
    every_cell_matches_the_table(true).await;
}

/// Without `[sink.columns]` the created table's jsonb payload keeps every digit too, and
/// `1e400` (valid JSON) is written, not dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_created_table_keeps_every_digit() {
    let dir = tempfile::tempdir().unwrap();
    let table = unique("fid_created");
    let records = format!(
        "{{\"id\":\"a\",\"big\":{BIG},\"tiny\":{TINY},\"huge\":1e400}}\n{{\"id\":{BIG}}}\n"
    );
    let summary = drain(dir.path(), &records, &table, "");
    assert_eq!(
        (
            summary["written"].as_u64(),
            summary["dead_lettered"].as_u64()
        ),
        (Some(2), Some(0)),
        "{summary}"
    );
    let mut conn = pg().await;
    let (big, tiny, huge): (String, String, String) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT payload->>'big', payload->>'tiny', payload->>'huge' FROM {table} WHERE key = 'a'"
    )))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!((big.as_str(), tiny.as_str()), (BIG, TINY));
    assert_eq!(huge, format!("1{}", "0".repeat(400)));
    let keyed: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM {table} WHERE key = '{BIG}'"
    )))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(keyed, 1, "a numeric key keeps its digits");
    execute(&format!("DROP TABLE {table}")).await;
}

/// Tables named after types or keywords, created by sluice or existing with
/// `[sink.columns]` (strict and lenient). Each gets its own schema, first on the search
/// path, so the bare name is what the configuration says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_named_after_types_work() {
    for name in ["money", "interval", "user", "order"] {
        for sink_extra in [
            "",
            "key_column = \"id\"\n[sink.columns]\namount = \"/amount\"",
            "key_column = \"id\"\ncoerce = \"lenient\"\n[sink.columns]\namount = \"/amount\"",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let schema = unique("fid_names");
            execute(&format!("CREATE SCHEMA {schema}")).await;
            if !sink_extra.is_empty() {
                execute(&format!(
                    "CREATE TABLE {schema}.\"{name}\" (id text PRIMARY KEY, amount numeric)"
                ))
                .await;
            }
            // The database's search path is not ours to change: the schema comes first
            // through the connection's options.
            let url = format!("{}?options=-csearch_path%3D{schema},public", pg_url());
            let records = format!("{{\"id\":\"a\",\"amount\":{TINY}}}\n");
            std::fs::write(dir.path().join("in.ndjson"), records).unwrap();
            std::fs::write(
                dir.path().join("sluice.toml"),
                format!(
                    "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
                     [sink]\nkind = \"postgres\"\nurl = \"{url}\"\ntable = \"{name}\"\nkey = \"/id\"\n{sink_extra}\n\n\
                     [rate]\nrecords_per_second = 100000\n"
                ),
            )
            .unwrap();
            let check = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
            assert!(
                check.status.success(),
                "check {name} {sink_extra:?}: {}",
                stderr(&check)
            );
            let out = run_in(dir.path(), DRAIN);
            assert!(
                out.status.success(),
                "{name} {sink_extra:?}: {}",
                stderr(&out)
            );
            assert_eq!(summary(&out)["written"].as_u64(), Some(1), "{name}");
            let column = if sink_extra.is_empty() {
                "payload->>'amount'"
            } else {
                "amount::text"
            };
            let stored: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT {column} FROM {schema}.\"{name}\""
            )))
            .fetch_one(&mut pg().await)
            .await
            .unwrap();
            assert_eq!(stored, TINY, "{name} {sink_extra:?}");
            execute(&format!("DROP SCHEMA {schema} CASCADE")).await;
        }
    }
}
