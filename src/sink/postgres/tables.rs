//! The target table as PostgreSQL has it: an existing table inspected before mapped rows
//! go into it, and the tables sluice owns created when they are missing.

use sqlx::postgres::PgPool;
use sqlx::{Connection, Executor};

use super::coerce::ColumnKind;
use crate::sink::identifier::quote;
use crate::sink::upsert::VersionKind;

/// An existing table as the mapped layout needs it.
pub(super) struct Inspected {
    /// `"schema"."table"`, as the search path resolved it.
    pub(super) qualified: String,
    /// Column → what it takes.
    pub(super) kinds: std::collections::HashMap<String, ColumnKind>,
}

/// A column's name, its type's name and category, its type modifier, and for an array
/// its element's name and category.
type Attribute = (String, String, String, i32, Option<String>, Option<String>);

/// Checks that an existing table can take mapped rows: it exists, every column exists,
/// and the key column carries a unique index (or `ON CONFLICT` would fail every batch).
pub(super) async fn inspect(
    pool: &PgPool,
    table: &str,
    key_column: &str,
    columns: &[(String, String)],
) -> Result<Inspected, String> {
    let quoted = quote(table);
    let attributes: Vec<Attribute> = sqlx::query_as(
        "SELECT a.attname::text, t.typname::text, t.typcategory::text, a.atttypmod, \
                    e.typname::text, e.typcategory::text \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A' \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped",
    )
    .bind(&quoted)
    .fetch_all(pool)
    .await
    .map_err(|e| e.to_string())?;
    let present: Vec<String> = attributes.iter().map(|a| a.0.clone()).collect();
    if present.is_empty() {
        return Err(format!(
            "table {table} does not exist; with [sink.columns] sluice writes into an existing table"
        ));
    }
    let wanted = std::iter::once(key_column).chain(columns.iter().map(|(c, _)| c.as_str()));
    let missing: Vec<&str> = wanted.filter(|c| !present.iter().any(|p| p == c)).collect();
    if !missing.is_empty() {
        return Err(format!(
            "table {table} has no column {}",
            missing.join(", ")
        ));
    }
    let unique: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_index i \
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
           WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indnkeyatts = 1 \
             AND i.indpred IS NULL AND a.attname = $2)",
    )
    .bind(&quoted)
    .bind(key_column)
    .fetch_one(pool)
    .await
    .map_err(|e| e.to_string())?;
    if !unique {
        return Err(format!(
            "column {key_column} of {table} has no unique index: redelivered records would be inserted twice (set sink.key_column to the key's column)"
        ));
    }
    let (schema, name): (String, String) = sqlx::query_as(
        "SELECT n.nspname::text, c.relname::text FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)",
    )
    .bind(&quoted)
    .fetch_one(pool)
    .await
    .map_err(|e| e.to_string())?;
    let ident = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let kinds = attributes
        .into_iter()
        .map(
            |(column, typname, category, typmod, element, element_category)| {
                let element = element.as_deref().zip(element_category.as_deref());
                (
                    column,
                    ColumnKind::from_pg(&typname, &category, typmod, element),
                )
            },
        )
        .collect();
    Ok(Inspected {
        qualified: format!("{}.{}", ident(&schema), ident(&name)),
        kinds,
    })
}

/// Upsert into an existing table: the version column takes decimal text (numeric or an
/// integer type), the deleted column is boolean.
pub(super) fn guard_columns(
    table: &Inspected,
    version: &str,
    deleted: Option<&str>,
) -> Result<(), String> {
    if !matches!(
        table.kinds[version],
        ColumnKind::Numeric { .. } | ColumnKind::Integer { .. }
    ) {
        return Err(format!(
            "sink.version_column {version:?} must be numeric or an integer type (timestamps are kept as nanoseconds since the epoch, Kafka offsets as they are)"
        ));
    }
    if let Some(deleted) = deleted
        && table.kinds[deleted] != ColumnKind::Boolean
    {
        return Err(format!(
            "sink.deleted_column {deleted:?} must be boolean (true marks a deleted key)"
        ));
    }
    Ok(())
}

/// The kind of version recorded for `table`, if any.
pub(super) async fn stored_version_kind(
    pool: &PgPool,
    table: &str,
) -> Result<Option<VersionKind>, String> {
    let name: Option<String> =
        sqlx::query_scalar("SELECT kind FROM sluice_version_kinds WHERE target = $1")
            .bind(table)
            .fetch_optional(pool)
            .await
            .map_err(|e| e.to_string())?;
    Ok(name.as_deref().and_then(VersionKind::from_name))
}

/// Creates the records table (when sluice owns its shape) and the dead-letter table; in
/// upsert mode the version and deleted columns (added to a table an insert-mode run
/// created: its rows have no version, so any version replaces them) and the table of
/// version kinds. Serialised by an advisory lock: `CREATE TABLE IF NOT EXISTS` from
/// workers starting together can otherwise fail on the type catalogue.
pub(super) async fn create_tables(
    pool: &PgPool,
    table: Option<&str>,
    upsert: bool,
) -> Result<(), sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let mut tx = conn.begin().await?;
    tx.execute("SELECT pg_advisory_xact_lock(hashtext('sluice: create tables'))")
        .await?;
    if let Some(table) = table {
        let ddl = if upsert {
            format!(
                "CREATE TABLE IF NOT EXISTS {} (
                    key text PRIMARY KEY,
                    payload jsonb,
                    source text,
                    ingested_at timestamptz NOT NULL DEFAULT now(),
                    version numeric,
                    deleted boolean NOT NULL DEFAULT false
                )",
                quote(table)
            )
        } else {
            format!(
                "CREATE TABLE IF NOT EXISTS {} (
                    key text PRIMARY KEY,
                    payload jsonb NOT NULL,
                    source text,
                    ingested_at timestamptz NOT NULL DEFAULT now()
                )",
                quote(table)
            )
        };
        tx.execute(sqlx::AssertSqlSafe(ddl)).await?;
        if upsert {
            let guarded: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_attribute \
                 WHERE attrelid = to_regclass($1) AND attname IN ('version', 'deleted') \
                   AND NOT attisdropped",
            )
            .bind(quote(table))
            .fetch_one(&mut *tx)
            .await?;
            if guarded < 2 {
                let ddl = format!(
                    "ALTER TABLE {} ADD COLUMN IF NOT EXISTS version numeric, \
                       ADD COLUMN IF NOT EXISTS deleted boolean NOT NULL DEFAULT false, \
                       ALTER COLUMN payload DROP NOT NULL",
                    quote(table)
                );
                tx.execute(sqlx::AssertSqlSafe(ddl)).await?;
            }
        }
    }
    if upsert {
        tx.execute(
            "CREATE TABLE IF NOT EXISTS sluice_version_kinds (
                target text PRIMARY KEY,
                kind text NOT NULL
            )",
        )
        .await?;
    }
    tx.execute(
        "CREATE TABLE IF NOT EXISTS sluice_dead_letters (
            id bigserial PRIMARY KEY,
            fingerprint text NOT NULL UNIQUE,
            position text NOT NULL,
            key text,
            raw bytea NOT NULL,
            reason text NOT NULL,
            attempts integer NOT NULL,
            failed_at timestamptz NOT NULL DEFAULT now(),
            target text,
            source_key bytea,
            headers text
        )",
    )
    .await?;
    // A table from an earlier version gains the context columns; its letters stay. Only
    // then: ALTER TABLE would wait for every running worker's dead-letter inserts.
    let present: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = 'sluice_dead_letters' \
           AND column_name IN ('target', 'source_key', 'headers')",
    )
    .fetch_one(&mut *tx)
    .await?;
    if present < 3 {
        tx.execute(
            "ALTER TABLE sluice_dead_letters \
               ADD COLUMN IF NOT EXISTS target text, \
               ADD COLUMN IF NOT EXISTS source_key bytea, \
               ADD COLUMN IF NOT EXISTS headers text",
        )
        .await?;
    }
    tx.commit().await
}
