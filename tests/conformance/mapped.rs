//! A mapped table (`[sink.columns]`): each record puts one value into one typed column, and
//! each lands as its column's documented form (README, the PostgreSQL type table, strict)
//! or is dead-lettered naming the column.

use std::collections::BTreeMap;

use serde_json::Value;

use super::corpus::Line;
use super::drivers::{Driver, Postgres, block_on, pg_url};
use super::expect::{decimal, same};
use super::run::{Workdir, count};

const COLUMNS: &[&str] = &["i", "d", "s", "b", "ts", "j"];

const VALUES: &[&str] = &[
    "0",
    "-0",
    "42",
    "1e3",
    "1000.0",
    "12.5",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "0.123456789012345678901234567890",
    "1e400",
    "\"42\"",
    "\"text\"",
    "\"\"",
    "true",
    "false",
    "null",
    "[1,2]",
    "{\"a\":1}",
    "\"2024-05-01T10:00:00Z\"",
    "\"2024-05-01T10:00:00+02:00\"",
    "\"2024-05-01T10:00:00.123456Z\"",
    "\"2024-05-01T10:00:00.123456789Z\"",
    "\"2024-05-01T10:00:00\"",
];

/// What a column holds of `value` (as text, `None` for NULL), or the dead letter's reason.
fn expected(column: &str, value: &Value) -> Result<Option<String>, String> {
    let refused = || Err(format!("column {column} (from \"/{column}\")"));
    if value.is_null() {
        return Ok(None);
    }
    match (column, value) {
        ("j", v) => Ok(Some(v.to_string())),
        ("i", Value::Number(n)) => {
            let (negative, digits, exp) = decimal(&n.to_string());
            if exp < 0 || digits.len() as i64 + exp > 19 {
                return refused();
            }
            let text = format!(
                "{}{digits}{}",
                if negative { "-" } else { "" },
                "0".repeat(exp as usize)
            );
            let text = if digits.is_empty() { "0".into() } else { text };
            match text.parse::<i64>() {
                Ok(_) => Ok(Some(text)),
                Err(_) => refused(),
            }
        }
        ("d", Value::Number(n)) => Ok(Some(n.to_string())),
        ("s", Value::String(s)) => Ok(Some(s.clone())),
        ("b", Value::Bool(b)) => Ok(Some(b.to_string())),
        ("ts", Value::String(s)) => match chrono::DateTime::parse_from_rfc3339(s) {
            Ok(at) if at.timestamp_subsec_nanos() % 1000 == 0 => {
                Ok(Some(at.timestamp_micros().to_string()))
            }
            _ => refused(),
        },
        _ => refused(),
    }
}

fn corpus() -> Vec<(String, String, Value, Line)> {
    let mut out = Vec::new();
    for column in COLUMNS {
        for (i, v) in VALUES.iter().enumerate() {
            let id = format!("c-{column}-{i}");
            let case = format!("mapped/{column}={v}");
            let text = format!("{{\"id\":\"{id}\",\"{column}\":{v}}}");
            let value: Value = serde_json::from_str(v).unwrap();
            out.push((
                id,
                column.to_string(),
                value,
                Line {
                    case,
                    bytes: text.into_bytes(),
                },
            ));
        }
    }
    out
}

fn stored(table: &str) -> BTreeMap<String, Vec<Option<String>>> {
    block_on(async {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(&pg_url()).await.unwrap();
        let sql = format!(
            "SELECT k, ARRAY[i::text, d::text, s, b::text, \
             (extract(epoch FROM ts) * 1000000)::numeric::text, j::text] FROM \"{table}\""
        );
        sqlx::query_as::<_, (String, Vec<Option<String>>)>(sqlx::AssertSqlSafe(sql))
            .fetch_all(&mut c)
            .await
            .unwrap()
            .into_iter()
            .collect()
    })
}

fn matches(column: &str, got: &Option<String>, want: &Option<String>) -> bool {
    match (column, got, want) {
        (_, None, None) => true,
        ("d" | "ts", Some(g), Some(w)) => decimal(g) == decimal(w),
        ("j", Some(g), Some(w)) => same(
            &serde_json::from_str(g).unwrap(),
            &serde_json::from_str(w).unwrap(),
            true,
        ),
        (_, Some(g), Some(w)) => g == w,
        _ => false,
    }
}

#[test]
fn postgres_mapped_table() {
    let table = super::common::unique("conf_mapped");
    block_on(async {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(&pg_url()).await.unwrap();
        let ddl = format!(
            "CREATE TABLE \"{table}\" (k text PRIMARY KEY, i bigint, d numeric, s text, \
             b boolean, ts timestamptz, j jsonb)"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(ddl))
            .execute(&mut c)
            .await
            .unwrap();
    });
    let cases = corpus();
    let lines: Vec<Line> = cases
        .iter()
        .map(|(_, _, _, l)| Line {
            case: l.case.clone(),
            bytes: l.bytes.clone(),
        })
        .collect();
    let wd = Workdir::new(&lines);
    let columns: String = COLUMNS
        .iter()
        .map(|c| format!("{c} = \"/{c}\"\n"))
        .collect();
    let sink = format!(
        "{}\nkey_column = \"k\"\n\n[sink.columns]\n{columns}",
        Postgres.sink(&table)
    );
    wd.config(&sink, 1_000_000.0, 7, 4);
    let mut failures = Vec::new();
    let want: Vec<_> = cases
        .iter()
        .map(|(id, column, value, line)| (id, column, expected(column, value), line))
        .collect();
    let rows_wanted = want.iter().filter(|w| w.2.is_ok()).count() as u64;
    for round in ["first run", "rerun"] {
        match wd.drain() {
            Ok(s) => {
                let (written, duplicates) = if round == "first run" {
                    (rows_wanted, 0)
                } else {
                    (0, rows_wanted)
                };
                let got = (count(&s, "written"), count(&s, "duplicates"));
                if got != (written, duplicates) {
                    failures.push(format!("{round}: written/duplicates {got:?}: {s}"));
                }
            }
            Err(e) => failures.push(format!("{round}: {e}")),
        }
        wd.forget_checkpoint();
    }
    let rows = stored(&table);
    let letters = Postgres.letters(wd.path(), &table);
    for (id, column, fate, line) in &want {
        let at = COLUMNS.iter().position(|c| c == column).unwrap();
        match fate {
            Ok(value) => match rows.get(*id) {
                None => failures.push(format!("{}: no row", line.case)),
                Some(r) if !matches(column, &r[at], value) => failures.push(format!(
                    "{}: stored {:?}, expected {value:?}",
                    line.case, r[at]
                )),
                Some(r) if r.iter().enumerate().any(|(i, v)| i != at && v.is_some()) => {
                    failures.push(format!("{}: other columns not NULL: {r:?}", line.case))
                }
                Some(_) => {}
            },
            Err(why) => {
                let n = letters
                    .iter()
                    .filter(|l| l.raw == line.bytes && l.reason.contains(why.as_str()))
                    .count();
                if n != 1 || rows.contains_key(*id) {
                    failures.push(format!("{}: {n} dead letters naming {why:?}", line.case));
                }
            }
        }
    }
    Postgres.clean_up(&table);
    eprintln!(
        "mapped: {} records ({rows_wanted} rows); {} differences",
        want.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
