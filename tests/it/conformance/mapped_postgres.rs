//! The mapped table on PostgreSQL, strict (the default): each integer type, `numeric`
//! unconstrained, with a precision and scale and with a negative scale, `real`, `double
//! precision`, boolean, text, `varchar(16)`, `char(8)`, jsonb, timestamptz at 6, 0 and
//! 3 fractional digits, timestamp at 6 and 0, date. A value lands only in a column of its own JSON type (docs/sinks/:
//! the type table), exactly — floats rounded to the nearest of their type — or is
//! dead-lettered by sluice naming the column.

use serde_json::Value;

use super::drivers::{Driver, Postgres, block_on, has_nul, pg_url};
use super::mapped::{Column, Fate, Mapped, Want, conformance};
use super::mapped_values::{fits_decimal, float_of, instant_of, integer_of, time_of};

pub enum Pg {
    Int(i128, i128),
    /// numeric, or numeric(precision, scale).
    Numeric(Option<(i64, i64)>),
    /// real (single) or double precision.
    Float(bool),
    Bool,
    /// At most this many characters; and whether it is a char(n) (padded).
    Text(Option<usize>, bool),
    Json,
    /// timestamptz(p).
    Timestamptz(usize),
    /// timestamp(p), without time zone.
    Timestamp(usize),
    Date,
}

struct Pg15;

async fn connect() -> sqlx::PgConnection {
    use sqlx::Connection;
    sqlx::PgConnection::connect(&pg_url()).await.unwrap()
}

impl Mapped for Pg15 {
    type Type = Pg;

    fn driver(&self) -> &dyn Driver {
        &Postgres
    }

    fn columns(&self) -> Vec<Column<Pg>> {
        let c = |name, sql, ty| Column { name, sql, ty };
        vec![
            c("i2", "smallint", Pg::Int(i16::MIN.into(), i16::MAX.into())),
            c("i4", "integer", Pg::Int(i32::MIN.into(), i32::MAX.into())),
            c("i8", "bigint", Pg::Int(i64::MIN.into(), i64::MAX.into())),
            c("nu", "numeric", Pg::Numeric(None)),
            c("n10_2", "numeric(10,2)", Pg::Numeric(Some((10, 2)))),
            c("n2_m3", "numeric(2,-3)", Pg::Numeric(Some((2, -3)))),
            c("r", "real", Pg::Float(true)),
            c("dp", "double precision", Pg::Float(false)),
            c("b", "boolean", Pg::Bool),
            c("t", "text", Pg::Text(None, false)),
            c("vc", "varchar(16)", Pg::Text(Some(16), false)),
            c("c", "char(8)", Pg::Text(Some(8), true)),
            c("j", "jsonb", Pg::Json),
            c("ts", "timestamptz", Pg::Timestamptz(6)),
            c("ts0", "timestamptz(0)", Pg::Timestamptz(0)),
            c("ts3", "timestamptz(3)", Pg::Timestamptz(3)),
            c("tsn", "timestamp", Pg::Timestamp(6)),
            c("tsn0", "timestamp(0)", Pg::Timestamp(0)),
            c("da", "date", Pg::Date),
        ]
    }

    fn create(&self, table: &str) {
        let columns: Vec<String> = self
            .columns()
            .iter()
            .map(|c| format!("{} {}", c.name, c.sql))
            .collect();
        let ddl = format!(
            "CREATE TABLE \"{table}\" (k text PRIMARY KEY, {})",
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

    fn expected(&self, column: &Column<Pg>, value: &Value) -> Fate {
        let row = |w: Want| Fate::Row(Some(w));
        if value.is_null() {
            return Fate::Row(None);
        }
        // Neither text nor jsonb holds NUL.
        if has_nul(value) {
            return Fate::Sluice;
        }
        match (&column.ty, value) {
            (Pg::Json, v) => row(Want::Json(v.clone())),
            (Pg::Int(min, max), Value::Number(n)) => match integer_of(&n.to_string()) {
                Some(i) if (*min..=*max).contains(&i) => row(Want::Number(i.to_string())),
                _ => Fate::Sluice,
            },
            (Pg::Numeric(digits), Value::Number(n)) => {
                let text = n.to_string();
                match digits {
                    Some((p, s)) if !fits_decimal(&text, *p, *s) => Fate::Sluice,
                    _ => row(Want::Number(text)),
                }
            }
            (Pg::Float(single), Value::Number(n)) => match float_of(&n.to_string(), *single) {
                Some(value) => row(Want::Float {
                    value,
                    single: *single,
                }),
                None => Fate::Sluice,
            },
            (Pg::Bool, Value::Bool(b)) => row(Want::Text(b.to_string())),
            (Pg::Text(most, padded), Value::String(s)) => {
                if most.is_some_and(|m| s.chars().count() > m) || (*padded && s.ends_with(' ')) {
                    Fate::Sluice
                } else {
                    row(Want::Text(s.clone()))
                }
            }
            (Pg::Timestamptz(precision), Value::String(s)) => match time_of(s) {
                Some((at, digits, true)) if digits <= *precision => row(Want::Time(at)),
                _ => Fate::Sluice,
            },
            // In UTC when it has an offset, which PostgreSQL would drop.
            (Pg::Timestamp(precision), Value::String(s)) => match instant_of(s) {
                Some((at, digits)) if digits <= *precision => row(Want::Time(at)),
                _ => Fate::Sluice,
            },
            (Pg::Date, Value::String(s)) => match instant_of(s) {
                Some((at, _)) if at.time() == chrono::NaiveTime::MIN => {
                    row(Want::Text(at.date().to_string()))
                }
                _ => Fate::Sluice,
            },
            _ => Fate::Sluice,
        }
    }

    fn quote(&self, name: &str) -> String {
        format!("\"{name}\"")
    }

    fn read(&self, column: &Column<Pg>) -> String {
        let name = column.name;
        match column.ty {
            // to_char gives NULL for ±infinity.
            Pg::Timestamptz(_) => format!(
                "COALESCE(to_char({name} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), {name}::text)"
            ),
            Pg::Timestamp(_) => {
                format!("COALESCE(to_char({name}, 'YYYY-MM-DD HH24:MI:SS.US'), {name}::text)")
            }
            _ => format!("{name}::text"),
        }
    }

    fn refuses_key(&self, key: &str) -> Option<&'static str> {
        Postgres.refuses(key, &Value::Null)
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
fn postgres_mapped_table() {
    conformance(&Pg15, "postgres");
}
