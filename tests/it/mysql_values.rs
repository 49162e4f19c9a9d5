//! Values a mapped MariaDB table's columns can hold are written exactly; values they cannot
//! are dead-lettered naming the column: integers across every width and signedness
//! (`BIGINT UNSIGNED` up to 2^64 − 1), and RFC 3339 times with `Z` or an offset for
//! DATETIME and TIMESTAMP columns (converted to UTC, never rounded).

use crate::common;
use crate::mysql_support;

use mysql_support::{drain, execute, letters, mysql, mysql_url};

fn figures(out: &std::process::Output) -> (Option<i64>, Option<i64>) {
    assert!(out.status.success(), "{}", common::stderr(out));
    let s = common::summary(out);
    (s["written"].as_i64(), s["dead_lettered"].as_i64())
}

/// A case: key, column, the value's JSON text, what the column then holds as text (`None`:
/// the record is dead-lettered).
type Case = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
);

/// Drains one record per case into `table` (`create` makes it, `columns` maps it) and
/// checks each: stored as expected, or dead-lettered with a reason `names_column` accepts.
fn drain_cases(
    table: &str,
    create: &str,
    columns: &str,
    cases: &[Case],
    names_column: impl Fn(&str, &str) -> bool,
) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(execute(create));
    let lines: Vec<String> = cases
        .iter()
        .map(|(id, col, value, _)| format!("{{\"id\":\"{id}\",\"{col}\":{value}}}"))
        .collect();
    let mapping = format!("key_column = \"id\"\n\n[sink.columns]\n{columns}");
    let out = drain(&mysql_url(), table, &mapping, &lines);
    let refused = cases.iter().filter(|c| c.3.is_none()).count() as i64;
    assert_eq!(
        figures(&out),
        (Some(cases.len() as i64 - refused), Some(refused))
    );
    rt.block_on(async {
        let letters = letters(table).await;
        for (id, col, value, stored) in cases {
            match stored {
                Some(stored) => {
                    let got: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                        "SELECT CAST({col} AS CHAR) FROM {table} WHERE id = ?"
                    )))
                    .bind(id)
                    .fetch_one(&mut mysql().await)
                    .await
                    .unwrap();
                    assert_eq!(got.as_deref(), Some(*stored), "{id} {value}");
                }
                None => {
                    let reason = letters
                        .iter()
                        .find(|(k, _)| k == id)
                        .map(|(_, r)| r.as_str())
                        .unwrap_or_else(|| panic!("{id} {value} not dead-lettered: {letters:?}"));
                    assert!(names_column(reason, col), "{id} {value}: {reason}");
                }
            }
        }
        execute(&format!("DROP TABLE {table}")).await;
    });
}

#[test]
fn integers_fill_their_columns_whole_range_and_no_more() {
    let table = common::unique("my_ints");
    let create = format!(
        "CREATE TABLE {table} (id VARCHAR(20) COLLATE utf8mb4_nopad_bin PRIMARY KEY, \
           u BIGINT UNSIGNED, s BIGINT, t TINYINT UNSIGNED, m MEDIUMINT)"
    );
    let cases: [Case; 16] = [
        // key, column, JSON value, stored (None: dead-lettered)
        ("a1", "u", "0", Some("0")),
        (
            "a2",
            "u",
            "9223372036854775807",
            Some("9223372036854775807"),
        ),
        (
            "a3",
            "u",
            "9223372036854775808",
            Some("9223372036854775808"),
        ),
        (
            "a4",
            "u",
            "18446744073709551615",
            Some("18446744073709551615"),
        ),
        (
            "a5",
            "u",
            "1.8446744073709551615e19",
            Some("18446744073709551615"),
        ),
        (
            "a6",
            "u",
            "\"18446744073709551615\"",
            Some("18446744073709551615"),
        ),
        ("b1", "u", "-1", None),
        ("b2", "u", "18446744073709551616", None),
        ("b3", "u", "\"18446744073709551616\"", None),
        (
            "c1",
            "s",
            "-9223372036854775808",
            Some("-9223372036854775808"),
        ),
        ("c2", "s", "9223372036854775808", None),
        ("d1", "t", "255", Some("255")),
        ("d2", "t", "256", None),
        ("d3", "t", "-1", None),
        ("e1", "m", "-8388608", Some("-8388608")),
        ("e2", "m", "8388608", None),
    ];
    // Refused by sluice (a JSON number) or by the server (a string, error 1264).
    drain_cases(
        &table,
        &create,
        "u = \"/u\"\ns = \"/s\"\nt = \"/t\"\nm = \"/m\"",
        &cases,
        |reason, col| {
            reason.contains(&format!("column {col} (from \"/{col}\")"))
                || reason.starts_with(&format!(
                    "MySQL error 1264: Out of range value for column '{col}'"
                ))
        },
    );
}

/// DATETIME(3), TIMESTAMP(6) and DATETIME(0): `Z` and offsets are converted to UTC in the
/// column's precision; more fractional digits than the column keeps are dead-lettered
/// naming the column, not rounded; a time without an offset is stored as written.
#[test]
fn rfc3339_times_are_stored_in_utc_at_their_columns_precision() {
    let table = common::unique("my_times");
    let create = format!(
        "CREATE TABLE {table} (id VARCHAR(20) COLLATE utf8mb4_nopad_bin PRIMARY KEY, \
           d DATETIME(3) NULL, t TIMESTAMP(6) NULL, d0 DATETIME NULL)"
    );
    let cases: [Case; 11] = [
        (
            "a1",
            "d",
            "\"2024-01-02T03:04:05.123Z\"",
            Some("2024-01-02 03:04:05.123"),
        ),
        (
            "a2",
            "d",
            "\"2024-01-02T05:04:05.1+02:00\"",
            Some("2024-01-02 03:04:05.100"),
        ),
        (
            "a3",
            "d",
            "\"2024-01-02T03:04:05.120000Z\"",
            Some("2024-01-02 03:04:05.120"),
        ),
        (
            "a4",
            "d",
            "\"2024-01-02 03:04:05.5\"",
            Some("2024-01-02 03:04:05.500"),
        ),
        (
            "b1",
            "t",
            "\"2024-06-30T23:59:59.123456-01:00\"",
            Some("2024-07-01 00:59:59.123456"),
        ),
        (
            "b2",
            "t",
            "\"2024-01-02T03:04:05Z\"",
            Some("2024-01-02 03:04:05.000000"),
        ),
        (
            "c1",
            "d0",
            "\"2024-01-02T03:04:05+05:30\"",
            Some("2024-01-01 21:34:05"),
        ),
        ("x1", "d", "\"2024-01-02T03:04:05.1234Z\"", None),
        ("x2", "d0", "\"2024-01-02T03:04:05.5Z\"", None),
        ("x3", "t", "\"2024-01-02T03:04:05.0000001Z\"", None),
        ("x4", "d0", "\"2024-01-02 03:04:05.9\"", None),
    ];
    drain_cases(
        &table,
        &create,
        "d = \"/d\"\nt = \"/t\"\nd0 = \"/d0\"",
        &cases,
        |reason, col| {
            reason.starts_with(&format!("column {col} (from \"/{col}\")"))
                && reason.contains("(not rounded)")
        },
    );
}
