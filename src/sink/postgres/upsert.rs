//! Upsert statements: one per batch, guarded by the version each row keeps.
//!
//! The batch's versions of a key collapse to the newest inside the statement (`DISTINCT
//! ON`, exact `numeric` comparison; PostgreSQL refuses to update one row twice in one
//! statement), in key order, so two batches touching the same keys lock them in the same
//! order and do not deadlock. `ON CONFLICT … DO UPDATE … WHERE stored < incoming` then
//! applies a version only over an older one (or over an equal one that holds another
//! record: ties, see [`guarded`]): `ON CONFLICT` locks the row and re-reads it,
//! so a version written meanwhile by another batch or worker is compared too. A delete is
//! the same upsert with `deleted = true` (the row stays as the tombstone version), so an
//! older version arriving after the delete is refused like any other stale write.

use serde_json::{Map, Value};
use sqlx::postgres::{PgArguments, Postgres};
use sqlx::query::QueryAs;
use sqlx::{Arguments, AssertSqlSafe};

use super::coerce::Coerce;
use super::layout::{MappedColumn, RefusedRows, mapped_object};
use crate::record::Row;
use crate::sink::identifier::quote;

/// A batch's upsert: returns (rows inserted or updated, rows deleted).
pub type Applied = QueryAs<'static, Postgres, (i64, i64), PgArguments>;

/// The table shape an upsert writes and the statement that writes it.
#[derive(Debug, Clone)]
pub enum UpsertLayout {
    /// The table sluice creates, with `version numeric` and `deleted boolean`; a delete
    /// stores a NULL payload.
    Created {
        statement: String,
        not_newer: String,
    },
    /// An existing table: the mapped columns, the version column, and the deleted column
    /// when deletes are configured. A delete sets the mapped columns NULL.
    Mapped {
        statement: String,
        not_newer: String,
        key_column: String,
        version_column: String,
        deleted_column: Option<String>,
        columns: Vec<MappedColumn>,
        coerce: Coerce,
    },
}

/// The tail both shapes share: apply over an older version, or over the same version
/// when the row holds another record (`content`: the columns a write sets besides the
/// version, compared as text, so every column type compares); count what applied.
///
/// The tie rule: on equal versions the later record in source order wins. Within a
/// statement the later copy is kept (`newest`, `DISTINCT ON … n DESC`); across statements
/// the later record is also the later write, since the pipeline writes a key's batches in
/// source order (`pipeline::key_order`). A redelivered record finds its own content and
/// is left alone (stale), so a replay after a crash rewrites nothing it had written, and an
/// earlier record replayed over a later one is set right when the later one follows.
fn guarded(
    returning: &str,
    insert: &str,
    key: &str,
    assign: &[String],
    version: &str,
    content: &[String],
) -> String {
    let text = |side: &str| {
        content
            .iter()
            .map(|c| format!("{side}.{c}::text"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{insert} ON CONFLICT ({key}) DO UPDATE SET {} \
         WHERE t.{version} IS NULL OR t.{version} < excluded.{version} \
         OR (t.{version} = excluded.{version} AND ({}) IS DISTINCT FROM ({})) \
         RETURNING {returning}",
        assign.join(", "),
        text("t"),
        text("excluded"),
    )
}

impl UpsertLayout {
    pub fn created(table: &str) -> Self {
        let table = quote(table);
        let apply = guarded(
            "t.deleted",
            &format!(
                "INSERT INTO {table} AS t (key, payload, source, version, deleted) \
                 SELECT key, payload::jsonb, source, version, deleted FROM newest"
            ),
            "key",
            &[
                "payload = excluded.payload".into(),
                "source = excluded.source".into(),
                "version = excluded.version".into(),
                "deleted = excluded.deleted".into(),
                "ingested_at = now()".into(),
            ],
            "version",
            &["payload".into(), "source".into(), "deleted".into()],
        );
        UpsertLayout::Created {
            statement: format!(
                "WITH b AS (SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], \
                   $4::text[]::numeric[], $5::bool[]) WITH ORDINALITY AS b(key, payload, source, version, deleted, n)), \
                 newest AS (SELECT DISTINCT ON (key) key, payload, source, version, deleted \
                   FROM b ORDER BY key, version DESC, n DESC), \
                 applied AS ({apply}) \
                 SELECT count(*) FILTER (WHERE NOT deleted), count(*) FILTER (WHERE deleted) FROM applied"
            ),
            not_newer: format!(
                "SELECT count(*) FROM (SELECT DISTINCT ON (key) key, version \
                   FROM UNNEST($1::text[], $2::text[]::numeric[]) AS b(key, version) \
                   ORDER BY key, version DESC) b \
                 WHERE NOT EXISTS (SELECT 1 FROM {table} t \
                   WHERE t.key = b.key AND t.version >= b.version)"
            ),
        }
    }

    /// `table`: schema-qualified and quoted; column names are validated identifiers.
    pub fn mapped(
        table: &str,
        key_column: &str,
        version_column: &str,
        deleted_column: Option<&str>,
        columns: Vec<MappedColumn>,
        coerce: Coerce,
    ) -> Self {
        let written: Vec<String> = columns
            .iter()
            .map(|c| c.name.as_str())
            .chain(std::iter::once(version_column))
            .chain(deleted_column)
            .map(quote)
            .collect();
        let names: Vec<String> = std::iter::once(quote(key_column))
            .chain(written.iter().cloned())
            .collect();
        let assign: Vec<String> = written
            .iter()
            .map(|n| format!("{n} = excluded.{n}"))
            .collect();
        let content: Vec<String> = written
            .iter()
            .filter(|n| **n != quote(version_column))
            .cloned()
            .collect();
        let (key, version) = (quote(key_column), quote(version_column));
        let deleted = deleted_column.map_or("false".to_string(), |d| format!("t.{}", quote(d)));
        let apply = guarded(
            &format!("{deleted} AS d"),
            &format!(
                "INSERT INTO {table} AS t ({}) SELECT {} FROM newest",
                names.join(", "),
                names.join(", ")
            ),
            &key,
            &assign,
            &version,
            &content,
        );
        UpsertLayout::Mapped {
            statement: format!(
                "WITH b AS (SELECT r.*, e.sluice_n FROM \
                   jsonb_array_elements($1::text::jsonb) WITH ORDINALITY AS e(doc, sluice_n), \
                   LATERAL jsonb_populate_record(NULL::{table}, e.doc) AS r), \
                 newest AS (SELECT DISTINCT ON ({key}) * FROM b \
                   ORDER BY {key}, {version} DESC, sluice_n DESC), \
                 applied AS ({apply}) \
                 SELECT count(*) FILTER (WHERE NOT d), count(*) FILTER (WHERE d) FROM applied"
            ),
            not_newer: format!(
                "SELECT count(*) FROM (SELECT DISTINCT ON ({key}) {key}, {version} \
                   FROM jsonb_populate_recordset(NULL::{table}, $1::text::jsonb) AS b \
                   ORDER BY {key}, {version} DESC) b \
                 WHERE NOT EXISTS (SELECT 1 FROM {table} t \
                   WHERE t.{key} = b.{key} AND t.{version} >= b.{version})"
            ),
            key_column: key_column.to_string(),
            version_column: version_column.to_string(),
            deleted_column: deleted_column.map(str::to_string),
            columns,
            coerce,
        }
    }

    pub fn statement(&self) -> &str {
        match self {
            UpsertLayout::Created { statement, .. } | UpsertLayout::Mapped { statement, .. } => {
                statement
            }
        }
    }

    /// The batch's upsert with its arguments bound, or the rows that cannot go in. Every
    /// row carries a version (the decoder gives one to each in upsert mode).
    pub fn upsert(&self, rows: &[Row]) -> Result<Applied, RefusedRows> {
        let encoding = |e: sqlx::error::BoxDynError| RefusedRows {
            rows: Vec::new(),
            reason: format!("cannot encode the batch: {e}"),
        };
        let kept = newest(rows);
        let rows: Vec<&Row> = kept.iter().map(|&i| &rows[i]).collect();
        let mut args = PgArguments::default();
        match self {
            UpsertLayout::Created { statement, .. } => {
                let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
                let payloads: Vec<Option<&str>> = rows
                    .iter()
                    .map(|r| (!r.delete).then_some(r.payload.as_str()))
                    .collect();
                let origins: Vec<&str> = rows.iter().map(|r| r.origin.as_str()).collect();
                let versions: Vec<&str> = rows.iter().map(|r| version(r)).collect();
                let deleted: Vec<bool> = rows.iter().map(|r| r.delete).collect();
                args.add(keys).map_err(encoding)?;
                args.add(payloads).map_err(encoding)?;
                args.add(origins).map_err(encoding)?;
                // Decimal text, cast server-side: exact whatever its size.
                args.add(versions).map_err(encoding)?;
                args.add(deleted).map_err(encoding)?;
                Ok(sqlx::query_as_with(AssertSqlSafe(statement.clone()), args))
            }
            UpsertLayout::Mapped {
                statement,
                key_column,
                version_column,
                deleted_column,
                columns,
                coerce,
                ..
            } => {
                let mut objects = Vec::with_capacity(rows.len());
                let mut refused: Option<RefusedRows> = None;
                for (i, row) in rows.iter().enumerate() {
                    let object = if row.delete {
                        let mut object = Map::new();
                        object.insert(key_column.clone(), Value::String(row.key.clone()));
                        Ok(Value::Object(object))
                    } else {
                        mapped_object(row, key_column, columns, *coerce)
                    };
                    let i = kept[i];
                    match object {
                        Ok(Value::Object(mut object)) => {
                            let number = serde_json::from_str(version(row)).unwrap_or(Value::Null);
                            object.insert(version_column.clone(), number);
                            if let Some(deleted) = deleted_column {
                                object.insert(deleted.clone(), Value::Bool(row.delete));
                            }
                            objects.push(Value::Object(object));
                        }
                        Ok(_) => unreachable!("a mapped row is an object"),
                        Err(reason) => RefusedRows::note(&mut refused, i, reason),
                    }
                }
                if let Some(refused) = refused {
                    return Err(refused);
                }
                args.add(Value::Array(objects).to_string())
                    .map_err(encoding)?;
                Ok(sqlx::query_as_with(AssertSqlSafe(statement.clone()), args))
            }
        }
    }
}

impl UpsertLayout {
    /// How many of the batch's keys the table holds in no version at least as new as the
    /// batch's newest: after the upsert, those it did not apply were skipped by the
    /// table's own code (a trigger returning NULL), not stale.
    pub fn not_newer(&self, rows: &[Row]) -> Result<NotNewer, sqlx::Error> {
        let mut args = PgArguments::default();
        let keys = rows.iter().map(|r| r.key.as_str());
        let sql = match self {
            UpsertLayout::Created { not_newer, .. } => {
                args.add(keys.collect::<Vec<_>>())
                    .map_err(sqlx::Error::Encode)?;
                let versions: Vec<&str> = rows.iter().map(version).collect();
                args.add(versions).map_err(sqlx::Error::Encode)?;
                not_newer.clone()
            }
            UpsertLayout::Mapped {
                not_newer,
                key_column,
                version_column,
                ..
            } => {
                let objects: Vec<Value> = rows
                    .iter()
                    .map(|r| {
                        let number = serde_json::from_str(version(r)).unwrap_or(Value::Null);
                        Value::Object(Map::from_iter([
                            (key_column.clone(), Value::String(r.key.clone())),
                            (version_column.clone(), number),
                        ]))
                    })
                    .collect();
                args.add(Value::Array(objects).to_string())
                    .map_err(sqlx::Error::Encode)?;
                not_newer.clone()
            }
        };
        Ok(sqlx::query_scalar_with(AssertSqlSafe(sql), args))
    }
}

/// Counts keys the table holds in no version at least as new.
pub type NotNewer = sqlx::query::QueryScalar<'static, Postgres, i64, PgArguments>;

/// A row's version as decimal text ("" without one).
fn version(row: &Row) -> &str {
    row.version.as_ref().map_or("", |v| v.numeric.as_str())
}

/// The rows worth sending, in batch order: of the versions of a key only the newest (the
/// later one on a tie), when the batch's versions are integers (offsets, timestamps,
/// integral numbers) and compare here; otherwise every row, and `DISTINCT ON` picks in
/// the statement. Superseded rows never reach the wire: a batch from a partition often
/// holds several versions of a key.
fn newest(rows: &[Row]) -> Vec<usize> {
    let integers: Option<Vec<i128>> = rows
        .iter()
        .map(|r| r.version.as_ref().and_then(|v| v.numeric.parse().ok()))
        .collect();
    let Some(integers) = integers else {
        return (0..rows.len()).collect();
    };
    let mut newest: std::collections::HashMap<&str, usize> =
        std::collections::HashMap::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        newest
            .entry(row.key.as_str())
            .and_modify(|kept| {
                if integers[i] >= integers[*kept] {
                    *kept = i;
                }
            })
            .or_insert(i);
    }
    let mut kept: Vec<usize> = newest.into_values().collect();
    kept.sort_unstable();
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::postgres::coerce::ColumnKind;

    fn row(key: &str, version: &str) -> Row {
        Row {
            key: key.into(),
            version: Some(crate::sink::upsert::Version {
                kind: crate::sink::upsert::VersionKind::Number,
                numeric: version.into(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_batch_keeps_the_newest_version_of_each_key() {
        let rows = [
            row("a", "5"),
            row("b", "1"),
            row("a", "3"),
            row("b", "2"),
            row("a", "5"),
        ];
        assert_eq!(newest(&rows), vec![3, 4], "b's 2, a's later 5");
        let fractions = [row("a", "1.5"), row("a", "1.25")];
        assert_eq!(newest(&fractions), vec![0, 1], "left to the statement");
    }

    #[test]
    fn the_guard_compares_versions_and_names_are_quoted() {
        let created = UpsertLayout::created("ingest.state");
        let sql = created.statement();
        assert!(
            sql.contains("INSERT INTO \"ingest\".\"state\" AS t"),
            "{sql}"
        );
        assert!(sql.contains("DISTINCT ON (key)"), "{sql}");
        assert!(
            sql.contains("WHERE t.version IS NULL OR t.version < excluded.version"),
            "{sql}"
        );
        assert!(
            sql.contains("OR (t.version = excluded.version AND (t.payload::text, t.source::text, t.deleted::text) IS DISTINCT FROM (excluded.payload::text, excluded.source::text, excluded.deleted::text))"),
            "{sql}"
        );
        let columns = vec![MappedColumn {
            name: "level".into(),
            pointer: "/level".into(),
            kind: ColumnKind::Integer { min: 0, max: 100 },
        }];
        let mapped = UpsertLayout::mapped(
            "\"public\".\"stock\"",
            "sku",
            "rev",
            Some("gone"),
            columns,
            Coerce::Strict,
        );
        let sql = mapped.statement();
        assert!(
            sql.contains(
                "INSERT INTO \"public\".\"stock\" AS t (\"sku\", \"level\", \"rev\", \"gone\")"
            ),
            "{sql}"
        );
        assert!(
            sql.contains("\"level\" = excluded.\"level\", \"rev\" = excluded.\"rev\", \"gone\" = excluded.\"gone\""),
            "{sql}"
        );
        assert!(sql.contains("t.\"rev\" < excluded.\"rev\""), "{sql}");
        assert!(
            sql.contains("OR (t.\"rev\" = excluded.\"rev\" AND (t.\"level\"::text, t.\"gone\"::text) IS DISTINCT FROM (excluded.\"level\"::text, excluded.\"gone\"::text))"),
            "a tie applies over another record's content: {sql}"
        );
    }
}
