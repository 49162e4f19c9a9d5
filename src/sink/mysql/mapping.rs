//! An existing table written through `[sink.columns]`: the key column gets the record key,
//! each mapped column the value at its JSON pointer, as the text `column::text` gives it
//! for the column's kind (read from `information_schema` at start).

use serde_json::Value;
use sqlx::MySqlConnection;

use super::column::{Described, MysqlColumnKind, text};
use super::tables::compares_bytes;
use super::{identifier_of, reason};
use crate::record::Row;

/// One mapped column and where its value comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct MysqlMappedColumn {
    pub name: String,
    /// JSON pointer into the payload; `""` is the whole payload.
    pub pointer: String,
    pub kind: MysqlColumnKind,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MysqlMapping {
    pub key_column: String,
    pub columns: Vec<MysqlMappedColumn>,
    /// The key column's collation when it holds distinct keys equal (case, accents,
    /// trailing spaces): such a record collides with the stored key and is dead-lettered.
    pub merging_collation: Option<String>,
}

impl MysqlMapping {
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

/// Checks that an existing table can take mapped rows: it exists, every column exists,
/// and the key column alone carries a unique index (or a redelivery would be a second
/// row). `table` is validated, `schema.table` or `table`.
pub async fn inspect(
    conn: &mut MySqlConnection,
    table: &str,
    key_column: &str,
    columns: &[(String, String)],
) -> Result<MysqlMapping, String> {
    let (schema, name) = identifier_of(table);
    let present: Vec<Column> = sqlx::query_as(
        "SELECT CAST(COLUMN_NAME AS CHAR), CAST(DATA_TYPE AS CHAR), CAST(COLUMN_TYPE AS CHAR), \
           CAST(NUMERIC_PRECISION AS UNSIGNED), CAST(NUMERIC_SCALE AS UNSIGNED), \
           CAST(DATETIME_PRECISION AS UNSIGNED), CAST(CHARACTER_MAXIMUM_LENGTH AS UNSIGNED), \
           CAST(CHARACTER_OCTET_LENGTH AS UNSIGNED), CAST(COLLATION_NAME AS CHAR) \
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
            let (present, data_type, column_type, numeric, scale, precision, chars, bytes, _) =
                find(column).expect("checked above");
            let json_valid = format!("json_valid(`{present}`)");
            let kind = if checks.iter().any(|c| c.eq_ignore_ascii_case(&json_valid)) {
                MysqlColumnKind::Json
            } else {
                MysqlColumnKind::of(&Described {
                    data_type: data_type.clone(),
                    column_type: column_type.clone(),
                    numeric_precision: *numeric,
                    numeric_scale: *scale,
                    datetime_precision: *precision,
                    max_chars: *chars,
                    max_bytes: *bytes,
                })
            };
            MysqlMappedColumn {
                name: column.clone(),
                pointer: pointer.clone(),
                kind,
            }
        })
        .collect();
    let collation = find(key_column).and_then(|c| c.8.clone());
    Ok(MysqlMapping {
        key_column: key_column.to_string(),
        columns,
        merging_collation: collation.filter(|c| !compares_bytes(Some(c))),
    })
}

/// A column as `information_schema.COLUMNS` describes it: name, DATA_TYPE, COLUMN_TYPE,
/// NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, CHARACTER_MAXIMUM_LENGTH,
/// CHARACTER_OCTET_LENGTH, COLLATION_NAME.
type Column = (
    String,
    String,
    String,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    Option<String>,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_taken_at_their_pointers_as_text() {
        let column = |name: &str, pointer: &str, json: bool| MysqlMappedColumn {
            name: name.into(),
            pointer: pointer.into(),
            kind: if json {
                MysqlColumnKind::Json
            } else {
                MysqlColumnKind::Other
            },
        };
        let mapping = MysqlMapping {
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
}
