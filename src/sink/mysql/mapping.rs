//! An existing table written through `[sink.columns]`: the key column gets the record key,
//! each mapped column the value at its JSON pointer. Values travel as text for the server
//! to convert in strict mode, so a value its column cannot hold is an error (dead-lettered
//! with its number), never a silently truncated or zeroed one — except a fraction, which
//! MySQL rounds into an integer column (a JSON number for one is checked here), and a time
//! with an offset or more fractional digits than its column keeps (see `datetime`).

use serde_json::Value;
use sqlx::MySqlConnection;

use super::tables::compares_bytes;
use super::{datetime, identifier_of, reason};
use crate::record::Row;
use crate::sink::postgres::coerce::integer_within;

/// One mapped column and where its value comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct MappedColumn {
    pub name: String,
    /// JSON pointer into the payload; `""` is the whole payload.
    pub pointer: String,
    pub kind: ColumnKind,
}

/// What a column is, as far as binding JSON to it goes.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnKind {
    /// MySQL's `JSON`, MariaDB's `JSON` alias (LONGTEXT with its `json_valid` check): any
    /// value as JSON text, a string included.
    Json,
    /// TINYINT … BIGINT, signed or unsigned: a JSON number must be integral and within
    /// `min..=max`.
    Integer { min: i128, max: i128 },
    /// DATETIME(p) and TIMESTAMP(p): a string is sent in the column's form.
    DateTime { precision: u32 },
    /// Anything else: the server converts the text.
    Other,
}

impl ColumnKind {
    /// From `information_schema.COLUMNS`' DATA_TYPE, COLUMN_TYPE and DATETIME_PRECISION.
    fn of(data_type: &str, column_type: &str, precision: Option<u32>) -> Self {
        let unsigned = column_type.to_ascii_lowercase().contains("unsigned");
        let bits = match data_type.to_ascii_lowercase().as_str() {
            "json" => return ColumnKind::Json,
            "datetime" | "timestamp" => {
                return ColumnKind::DateTime {
                    precision: precision.unwrap_or(0),
                };
            }
            "tinyint" => 8,
            "smallint" => 16,
            "mediumint" => 24,
            "int" | "integer" => 32,
            "bigint" => 64,
            _ => return ColumnKind::Other,
        };
        let (min, max) = match unsigned {
            true => (0, (1i128 << bits) - 1),
            false => (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1),
        };
        ColumnKind::Integer { min, max }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    pub key_column: String,
    pub columns: Vec<MappedColumn>,
    /// The key column's collation when it holds distinct keys equal (case, accents,
    /// trailing spaces): such a record collides with the stored key and is dead-lettered.
    pub merging_collation: Option<String>,
}

impl Mapping {
    /// The statement's column names, the key's first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.key_column.as_str())
            .chain(self.columns.iter().map(|c| c.name.as_str()))
    }

    /// A row's values in the order of `names`; `None` (NULL) for a missing or null value.
    /// Err: why the row can never go in.
    pub fn values(&self, row: &Row) -> Result<Vec<Option<String>>, String> {
        let payload: Value = serde_json::from_str(&row.payload).unwrap_or(Value::Null);
        std::iter::once(Ok(Some(row.key.clone())))
            .chain(
                self.columns
                    .iter()
                    .map(|column| match payload.pointer(&column.pointer) {
                        None => Ok(None),
                        Some(value) => text(value, &column.kind).map_err(|e| {
                            format!("column {} (from {:?}) {e}", column.name, column.pointer)
                        }),
                    }),
            )
            .collect()
    }
}

/// The text a value is bound as: for a JSON column its JSON text; otherwise a string as
/// it is, a number with every digit of its JSON text (an integer column's normalised:
/// `1e3` is 1000), a boolean as 1 or 0 (MySQL's BOOLEAN is TINYINT(1)), an array or object
/// as its JSON text.
fn text(value: &Value, kind: &ColumnKind) -> Result<Option<String>, String> {
    Ok(match (value, kind) {
        (Value::Null, _) => None,
        (_, ColumnKind::Json) => Some(value.to_string()),
        (Value::Number(n), ColumnKind::Integer { min, max }) => {
            Some(integer_within(&n.to_string(), *min, *max)?.to_string())
        }
        (Value::String(s), ColumnKind::DateTime { precision }) => {
            Some(datetime::column_text(s, *precision)?)
        }
        (Value::String(s), _) => Some(s.clone()),
        (Value::Bool(b), _) => Some(if *b { "1" } else { "0" }.into()),
        (Value::Number(_) | Value::Array(_) | Value::Object(_), _) => Some(value.to_string()),
    })
}

/// Checks that an existing table can take mapped rows: it exists, every column exists,
/// and the key column alone carries a unique index (or a redelivery would be a second
/// row). `table` is validated, `schema.table` or `table`.
pub async fn inspect(
    conn: &mut MySqlConnection,
    table: &str,
    key_column: &str,
    columns: &[(String, String)],
) -> Result<Mapping, String> {
    let (schema, name) = identifier_of(table);
    let present: Vec<Column> = sqlx::query_as(
        "SELECT CAST(COLUMN_NAME AS CHAR), CAST(DATA_TYPE AS CHAR), CAST(COLUMN_TYPE AS CHAR), \
           CAST(DATETIME_PRECISION AS UNSIGNED), CAST(COLLATION_NAME AS CHAR) \
         FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
    )
    .bind(schema)
    .bind(name)
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| reason(&e))?;
    if present.is_empty() {
        return Err(format!(
            "table {table} does not exist; with [sink.columns] sluice writes into an existing table"
        ));
    }
    // Column names are case-insensitive in MySQL.
    let find = |c: &str| present.iter().find(|p| p.0.eq_ignore_ascii_case(c));
    let wanted = std::iter::once(key_column).chain(columns.iter().map(|(c, _)| c.as_str()));
    let missing: Vec<&str> = wanted.filter(|c| find(c).is_none()).collect();
    if !missing.is_empty() {
        return Err(format!(
            "table {table} has no column {}",
            missing.join(", ")
        ));
    }
    let unique: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.STATISTICS s \
         WHERE s.TABLE_SCHEMA = COALESCE(?, DATABASE()) AND s.TABLE_NAME = ? \
           AND s.NON_UNIQUE = 0 AND s.SEQ_IN_INDEX = 1 AND s.COLUMN_NAME = ? \
           AND NOT EXISTS (SELECT 1 FROM information_schema.STATISTICS t \
             WHERE t.TABLE_SCHEMA = s.TABLE_SCHEMA AND t.TABLE_NAME = s.TABLE_NAME \
               AND t.INDEX_NAME = s.INDEX_NAME AND t.SEQ_IN_INDEX = 2)",
    )
    .bind(schema)
    .bind(name)
    .bind(key_column)
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| reason(&e))?;
    if unique == 0 {
        return Err(format!(
            "column {key_column} of {table} has no unique index of its own: redelivered records would be inserted twice (set sink.key_column to the key's column)"
        ));
    }
    // MariaDB's JSON is LONGTEXT with a column check `json_valid(`name`)`.
    let mariadb: bool = sqlx::query_scalar("SELECT VERSION() LIKE '%MariaDB%'")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| reason(&e))?;
    let checks: Vec<String> = if mariadb {
        sqlx::query_scalar(
            "SELECT CAST(CHECK_CLAUSE AS CHAR) FROM information_schema.CHECK_CONSTRAINTS \
             WHERE CONSTRAINT_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
        )
        .bind(schema)
        .bind(name)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| reason(&e))?
    } else {
        Vec::new()
    };
    let columns = columns
        .iter()
        .map(|(column, pointer)| {
            let (present, data_type, column_type, precision, _) =
                find(column).expect("checked above");
            let json_valid = format!("json_valid(`{present}`)");
            let kind = if checks.iter().any(|c| c.eq_ignore_ascii_case(&json_valid)) {
                ColumnKind::Json
            } else {
                let precision = precision.and_then(|p| u32::try_from(p).ok());
                ColumnKind::of(data_type, column_type, precision)
            };
            MappedColumn {
                name: column.clone(),
                pointer: pointer.clone(),
                kind,
            }
        })
        .collect();
    let collation = find(key_column).and_then(|c| c.4.clone());
    Ok(Mapping {
        key_column: key_column.to_string(),
        columns,
        merging_collation: collation.filter(|c| !compares_bytes(Some(c))),
    })
}

/// A column as `information_schema.COLUMNS` describes it: name, DATA_TYPE, COLUMN_TYPE,
/// DATETIME_PRECISION, COLLATION_NAME.
type Column = (String, String, String, Option<u64>, Option<String>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_taken_at_their_pointers_as_text() {
        let column = |name: &str, pointer: &str, json: bool| MappedColumn {
            name: name.into(),
            pointer: pointer.into(),
            kind: if json {
                ColumnKind::Json
            } else {
                ColumnKind::Other
            },
        };
        let mapping = Mapping {
            key_column: "id".into(),
            columns: vec![
                column("amount", "/o/amount", false),
                column("big", "/big", false),
                column("note", "/note", false),
                column("missing", "/nope", false),
                column("ok", "/ok", false),
                column("name", "/name", false),
                column("name_json", "/name", true),
                column("doc", "", true),
            ],
            merging_collation: None,
        };
        let row = Row {
            key: "7".into(),
            payload: r#"{"o":{"amount":12.50},"big":123456789012345678901234567890,"note":null,"ok":true,"name":"a\"b"}"#.into(),
            origin: "t/0/1".into(),
            ..Default::default()
        };
        let values = mapping.values(&row).unwrap();
        let text: Vec<Option<&str>> = values.iter().map(|v| v.as_deref()).collect();
        assert_eq!(
            text[..7],
            [
                Some("7"),
                Some("12.50"),
                Some("123456789012345678901234567890"),
                None,
                None,
                Some("1"),
                Some("a\"b"),
            ]
        );
        assert_eq!(text[7], Some(r#""a\"b""#));
        let doc: Value = serde_json::from_str(text[8].unwrap()).unwrap();
        assert_eq!(doc["o"]["amount"].to_string(), "12.50");
        assert_eq!(
            mapping.names().collect::<Vec<_>>(),
            [
                "id",
                "amount",
                "big",
                "note",
                "missing",
                "ok",
                "name",
                "name_json",
                "doc"
            ]
        );
    }

    #[test]
    fn integer_columns_refuse_fractions_that_mysql_would_round() {
        let int = ColumnKind::of("int", "int(11)", None);
        let json = |t: &str| serde_json::from_str::<Value>(t).unwrap();
        assert_eq!(text(&json("1e3"), &int).unwrap().as_deref(), Some("1000"));
        assert_eq!(text(&json("\"12\""), &int).unwrap().as_deref(), Some("12"));
        assert!(
            text(&json("12.5"), &int)
                .unwrap_err()
                .contains("not an integer")
        );
        assert!(text(&json("3000000000"), &int).is_err());
        assert_eq!(
            text(&json("12.5"), &ColumnKind::Other).unwrap().as_deref(),
            Some("12.5")
        );
    }

    #[test]
    fn every_integer_width_and_signedness_takes_its_whole_range() {
        let json = |t: &str| serde_json::from_str::<Value>(t).unwrap();
        for (data_type, bits) in [
            ("tinyint", 8),
            ("smallint", 16),
            ("mediumint", 24),
            ("int", 32),
            ("integer", 32),
            ("bigint", 64),
        ] {
            let signed = ColumnKind::of(data_type, &format!("{data_type}(20)"), None);
            let unsigned = ColumnKind::of(data_type, &format!("{data_type}(20) unsigned"), None);
            let (low, high) = (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1);
            let most = (1i128 << bits) - 1;
            for (kind, fits, beyond) in [
                (&signed, [low, high], [low - 1, high + 1]),
                (&unsigned, [0, most], [-1, most + 1]),
            ] {
                for v in fits {
                    let sent = text(&json(&v.to_string()), kind).unwrap();
                    assert_eq!(sent, Some(v.to_string()), "{data_type} {kind:?}");
                }
                for v in beyond {
                    let e = text(&json(&v.to_string()), kind).unwrap_err();
                    assert!(e.contains("out of range"), "{data_type} {v}: {e}");
                }
            }
        }
        let zerofill = ColumnKind::of("bigint", "bigint(20) unsigned zerofill", None);
        assert_eq!(
            text(&json("18446744073709551615"), &zerofill)
                .unwrap()
                .as_deref(),
            Some("18446744073709551615")
        );
        assert_eq!(
            ColumnKind::of("varchar", "varchar(5)", None),
            ColumnKind::Other
        );
    }

    #[test]
    fn time_columns_get_utc_in_their_precision() {
        let kind = ColumnKind::of("timestamp", "timestamp(3)", Some(3));
        assert_eq!(kind, ColumnKind::DateTime { precision: 3 });
        let json = |t: &str| serde_json::from_str::<Value>(t).unwrap();
        assert_eq!(
            text(&json("\"2024-01-02T03:04:05.5+01:00\""), &kind)
                .unwrap()
                .as_deref(),
            Some("2024-01-02 02:04:05.500")
        );
        assert!(text(&json("\"2024-01-02T03:04:05.5555Z\""), &kind).is_err());
    }
}
