//! The mapped table on MariaDB: every integer width signed and unsigned, BOOLEAN, DECIMAL
//! of three precisions, FLOAT, DOUBLE and FLOAT(7,4), VARCHAR with a binary and with the
//! default case-insensitive collation, TEXT, CHAR, BLOB, JSON, DATETIME and TIMESTAMP at
//! 0, 3 and 6 fractional digits, DATE. What lands is worked out from the book's MySQL (docs/sinks/mysql.md)
//! mapping: values travel as text for the server in strict mode; sluice refuses what the
//! server would round, cut or zero with a mere note.

use chrono::{NaiveDateTime, NaiveTime};
use serde_json::Value;

use super::drivers::{Driver, Mysql, block_on, depth, mysql_url};
use super::mapped::{Column, Fate, Mapped, Want, conformance};
use super::mapped_values::{fits_decimal, float_of, instant_of, integer_of, number_in};

pub enum My {
    Int(i128, i128),
    Decimal(i64, i64),
    /// FLOAT (single) or DOUBLE; with `(M,D)` its digits.
    Float(bool, Option<(i64, i64)>),
    /// Characters, bytes, and whether it is a CHAR (padded).
    Text(usize, usize, bool),
    Json,
    /// Fractional digits, and whether it is a TIMESTAMP (1970 to 2038 UTC).
    Time(usize, bool),
    Date,
}

fn int(bits: u32, unsigned: bool) -> My {
    match unsigned {
        true => My::Int(0, (1 << bits) - 1),
        false => My::Int(-(1 << (bits - 1)), (1 << (bits - 1)) - 1),
    }
}

struct MariaDb;

/// A connection in UTC, as the sink's sessions are (TIMESTAMP is read in the session's
/// zone).
async fn connect() -> sqlx::MySqlConnection {
    use sqlx::{Connection, Executor};
    let mut c = sqlx::MySqlConnection::connect(&mysql_url()).await.unwrap();
    c.execute("SET time_zone = '+00:00'").await.unwrap();
    c
}

impl Mapped for MariaDb {
    type Type = My;

    fn driver(&self) -> &dyn Driver {
        &Mysql
    }

    fn columns(&self) -> Vec<Column<My>> {
        let c = |name, sql, ty| Column { name, sql, ty };
        vec![
            c("i8", "TINYINT", int(8, false)),
            c("u8", "TINYINT UNSIGNED", int(8, true)),
            c("i16", "SMALLINT", int(16, false)),
            c("u16", "SMALLINT UNSIGNED", int(16, true)),
            c("i24", "MEDIUMINT", int(24, false)),
            c("u24", "MEDIUMINT UNSIGNED", int(24, true)),
            c("i32", "INT", int(32, false)),
            c("u32", "INT UNSIGNED", int(32, true)),
            c("i64", "BIGINT", int(64, false)),
            c("u64", "BIGINT UNSIGNED", int(64, true)),
            c("b", "BOOLEAN", int(8, false)),
            c("d10_2", "DECIMAL(10,2)", My::Decimal(10, 2)),
            c("d65_30", "DECIMAL(65,30)", My::Decimal(65, 30)),
            c("d20", "DECIMAL(20,0)", My::Decimal(20, 0)),
            c("f", "FLOAT", My::Float(true, None)),
            c("g", "DOUBLE", My::Float(false, None)),
            c("f7_4", "FLOAT(7,4)", My::Float(true, Some((7, 4)))),
            c(
                "vb",
                "VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
                My::Text(16, 64, false),
            ),
            c(
                "vc",
                "VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
                My::Text(16, 64, false),
            ),
            c(
                "t",
                "TEXT CHARACTER SET utf8mb4",
                My::Text(65535, 65535, false),
            ),
            c("c", "CHAR(8) CHARACTER SET utf8mb4", My::Text(8, 32, true)),
            c("bl", "BLOB", My::Text(65535, 65535, false)),
            c("j", "JSON", My::Json),
            c("dt0", "DATETIME", My::Time(0, false)),
            c("dt3", "DATETIME(3)", My::Time(3, false)),
            c("dt6", "DATETIME(6)", My::Time(6, false)),
            c("ts0", "TIMESTAMP NULL DEFAULT NULL", My::Time(0, true)),
            c("ts3", "TIMESTAMP(3) NULL DEFAULT NULL", My::Time(3, true)),
            c("ts6", "TIMESTAMP(6) NULL DEFAULT NULL", My::Time(6, true)),
            c("da", "DATE", My::Date),
        ]
    }

    fn create(&self, table: &str) {
        let columns: Vec<String> = self
            .columns()
            .iter()
            .map(|c| format!("`{}` {}", c.name, c.sql))
            .collect();
        let ddl = format!(
            "CREATE TABLE `{table}` (k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin \
             PRIMARY KEY, {}) DEFAULT CHARSET = utf8mb4",
            columns.join(", ")
        );
        block_on(async {
            let mut c = connect().await;
            sqlx::raw_sql(sqlx::AssertSqlSafe(ddl))
                .execute(&mut c)
                .await
        })
        .unwrap();
    }

    fn expected(&self, column: &Column<My>, value: &Value) -> Fate {
        let row = |w: Want| Fate::Row(Some(w));
        if value.is_null() {
            return Fate::Row(None);
        }
        // What the server is handed for a non-JSON column: the string, the number's
        // text, 1 or 0, the JSON text.
        let number = match value {
            Value::Number(n) => Some(n.to_string()),
            Value::String(s) => number_in(s),
            _ => None,
        };
        let boolean = value.as_bool().map(|b| if b { "1" } else { "0" });
        match (&column.ty, value) {
            (My::Json, v) if depth(v) > 31 => Fate::Server,
            (My::Json, v) => row(Want::Json(v.clone())),
            (My::Int(..) | My::Decimal(..) | My::Float(..), Value::String(_))
                if number.is_none() =>
            {
                Fate::Server
            }
            (My::Int(..) | My::Decimal(..) | My::Float(..), Value::Array(_) | Value::Object(_)) => {
                Fate::Server
            }
            (My::Int(min, max), _) => {
                let text = number.as_deref().or(boolean).unwrap();
                match integer_of(text) {
                    Some(i) if (*min..=*max).contains(&i) => row(Want::Number(i.to_string())),
                    _ => Fate::Sluice,
                }
            }
            (My::Decimal(p, s), _) => {
                let text = number.as_deref().or(boolean).unwrap();
                match fits_decimal(text, *p, *s) {
                    true => row(Want::Number(text.to_string())),
                    false => Fate::Sluice,
                }
            }
            (My::Float(single, digits), _) => {
                let text = number.as_deref().or(boolean).unwrap();
                match (float_of(text, *single), digits) {
                    (None, _) => Fate::Sluice,
                    (Some(_), Some((_, d))) if !fits_decimal(text, i64::MAX / 2, *d) => {
                        Fate::Sluice
                    }
                    (Some(_), Some((m, d))) if !fits_decimal(text, *m, *d) => Fate::Server,
                    (Some(value), _) => row(Want::Float {
                        value,
                        single: *single,
                    }),
                }
            }
            (My::Text(chars, bytes, padded), v) => {
                let (sent, want) = match v {
                    Value::String(s) => (s.clone(), Want::Text(s.clone())),
                    Value::Number(n) => (n.to_string(), Want::Number(n.to_string())),
                    Value::Bool(_) => {
                        (boolean.unwrap().into(), Want::Text(boolean.unwrap().into()))
                    }
                    v => (v.to_string(), Want::Json(v.clone())),
                };
                if sent.chars().count() > *chars
                    || sent.len() > *bytes
                    || (*padded && sent.ends_with(' '))
                {
                    Fate::Sluice
                } else {
                    row(want)
                }
            }
            (My::Time(..) | My::Date, v) if !v.is_string() => Fate::Sluice,
            (My::Time(precision, timestamp), Value::String(s)) => {
                let Some((at, digits)) = instant_of(s) else {
                    return Fate::Server;
                };
                let first = NaiveDateTime::parse_from_str("1970-01-01 00:00:01", "%F %T").unwrap();
                let last = NaiveDateTime::parse_from_str("2038-01-19 03:14:07", "%F %T").unwrap();
                if digits > *precision {
                    Fate::Sluice
                } else if *timestamp && !(first..=last).contains(&at) {
                    Fate::Server
                } else {
                    row(Want::Time(at))
                }
            }
            (My::Date, Value::String(s)) => match instant_of(s) {
                Some((at, _)) if at.time() == NaiveTime::MIN => {
                    row(Want::Text(at.date().to_string()))
                }
                Some(_) => Fate::Sluice,
                // MySQL's date forms are at most 10 characters; a longer one carries more.
                None if s.chars().count() > 10 => Fate::Sluice,
                None => Fate::Server,
            },
            _ => unreachable!("every type is matched above"),
        }
    }

    fn quote(&self, name: &str) -> String {
        format!("`{name}`")
    }

    fn read(&self, column: &Column<My>) -> String {
        let name = column.name;
        match column.ty {
            // A FLOAT's value exactly, as a DOUBLE's shortest text.
            My::Float(..) => format!("CAST(CAST(`{name}` AS DOUBLE) AS CHAR)"),
            _ => format!("CAST(`{name}` AS CHAR CHARACTER SET utf8mb4)"),
        }
    }

    fn refuses_key(&self, key: &str) -> Option<&'static str> {
        (key.chars().count() > 255).then_some("1406")
    }

    fn pairs(&self, sql: String) -> Vec<(String, String)> {
        block_on(async {
            let mut c = connect().await;
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_all(&mut c)
                .await
        })
        .unwrap()
    }
}

#[test]
fn mysql_mapped_table() {
    conformance(&MariaDb, "mysql");
}
