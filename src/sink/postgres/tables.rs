//! The target table as PostgreSQL has it: an existing table inspected before mapped rows
//! go into it, and the tables a run uses with the rights it uses on each (the tables
//! sluice owns are created when missing, see [`super::catalog`]).

use sqlx::postgres::PgPool;

use super::catalog::{Right, TableUse};
use super::coerce::ColumnKind;
use super::settings::PostgresSettings;
use super::sqlstate::describe;
use crate::sink::identifier::quote;
use crate::sink::settings::SinkSettings;
use crate::sink::upsert::{SinkMode, VersionKind};

/// The records table as the configuration describes it.
pub struct Target {
    pub table: String,
    pub upsert: bool,
    /// With `[sink.columns]`: an existing table.
    pub mapped: Option<Mapping>,
}

/// How records go into an existing table.
pub struct Mapping {
    pub key_column: String,
    /// Column → JSON pointer.
    pub columns: Vec<(String, String)>,
    /// Upsert mode: where each row keeps its version, and the column marking a delete
    /// (when deletes are configured).
    pub version_column: String,
    pub deleted_column: Option<String>,
}

impl Target {
    pub fn of(sink: &SinkSettings, own: &PostgresSettings) -> Target {
        let deletes = sink.delete_on_tombstone || sink.delete_flag.is_some();
        Target {
            table: sink.table.clone(),
            upsert: sink.mode == SinkMode::Upsert,
            mapped: own.columns.as_ref().map(|columns| Mapping {
                key_column: sink.key_column().to_string(),
                columns: columns
                    .iter()
                    .map(|(c, p)| (c.clone(), p.clone()))
                    .collect(),
                version_column: own
                    .version_column
                    .clone()
                    .unwrap_or_else(|| "version".into()),
                deleted_column: deletes.then(|| {
                    own.deleted_column
                        .clone()
                        .unwrap_or_else(|| "deleted".into())
                }),
            }),
        }
    }

    /// Every table a run uses, with what it does there: the records table, the
    /// dead-letter table, and in upsert mode the table of version kinds.
    pub fn uses(&self) -> Vec<TableUse> {
        let mut uses = vec![self.records()];
        if self.upsert {
            uses.push(TableUse {
                rights: vec![
                    (Right::Select, names(&["target", "kind"])),
                    (Right::Insert, names(&["target", "kind"])),
                ],
                ..TableUse::owned(
                    "sluice_version_kinds",
                    "version-kind table",
                    VERSION_KINDS.into(),
                    &[],
                )
            });
        }
        uses.push(dead_letter_table());
        uses
    }

    /// The records table: COPY and `INSERT … ON CONFLICT (key) DO NOTHING` insert and read
    /// the key (the conflict target, and telling a duplicate from a row a trigger
    /// skipped); an upsert also updates, and reads the stored version.
    fn records(&self) -> TableUse {
        let (key, written, versioned): (String, Vec<String>, Vec<String>) = match &self.mapped {
            None => (
                "key".into(),
                names(&["payload", "source"]),
                names(&["version", "deleted"]),
            ),
            Some(m) => (
                m.key_column.clone(),
                m.columns.iter().map(|(c, _)| c.clone()).collect(),
                std::iter::once(m.version_column.clone())
                    .chain(m.deleted_column.clone())
                    .collect(),
            ),
        };
        let inserted: Vec<String> = std::iter::once(key.clone())
            .chain(written.iter().cloned())
            .chain(self.upsert.then(|| versioned.clone()).into_iter().flatten())
            .collect();
        let mut rights = vec![(Right::Insert, inserted)];
        if self.upsert {
            let mut updated: Vec<String> = written.iter().chain(&versioned).cloned().collect();
            if self.mapped.is_none() {
                updated.push("ingested_at".into());
            }
            rights.push((Right::Update, updated));
            rights.push((
                Right::Select,
                std::iter::once(key).chain(versioned).collect(),
            ));
        } else {
            rights.push((Right::Select, vec![key]));
        }
        let mut table = TableUse {
            rights,
            ..TableUse::owned(&self.table, "sink table", self.created_ddl(), &[])
        };
        match &self.mapped {
            Some(_) => table.create = None,
            // A table an insert-mode run created gains the upsert's columns; its rows
            // have no version, so any version replaces them.
            None if self.upsert => {
                table.added = vec![
                    ("version", "numeric"),
                    ("deleted", "boolean NOT NULL DEFAULT false"),
                ];
                table.alter_also = Some("ALTER COLUMN payload DROP NOT NULL");
            }
            None => {}
        }
        table
    }

    fn created_ddl(&self) -> String {
        let table = quote(&self.table);
        if self.upsert {
            format!(
                "CREATE TABLE IF NOT EXISTS {table} (
                    key text PRIMARY KEY,
                    payload jsonb,
                    source text,
                    ingested_at timestamptz NOT NULL DEFAULT now(),
                    version numeric,
                    deleted boolean NOT NULL DEFAULT false
                )"
            )
        } else {
            format!(
                "CREATE TABLE IF NOT EXISTS {table} (
                    key text PRIMARY KEY,
                    payload jsonb NOT NULL,
                    source text,
                    ingested_at timestamptz NOT NULL DEFAULT now()
                )"
            )
        }
    }
}

/// `sluice_dead_letters`: each letter is inserted once (`ON CONFLICT (fingerprint) DO
/// NOTHING` reads the fingerprint), its id drawn from the table's sequence. A table from
/// an earlier version gains the context columns; its letters stay.
pub fn dead_letter_table() -> TableUse {
    TableUse {
        rights: vec![
            (Right::Insert, names(DEAD_LETTER_COLUMNS)),
            (Right::Select, names(&["fingerprint"])),
        ],
        added: vec![
            ("target", "text"),
            ("source_key", "bytea"),
            ("headers", "text"),
        ],
        serial: Some("id"),
        ..TableUse::owned(
            "sluice_dead_letters",
            "dead-letter table",
            DEAD_LETTERS.into(),
            &[],
        )
    }
}

fn names(columns: &[&str]) -> Vec<String> {
    columns.iter().map(|c| c.to_string()).collect()
}

/// The columns every dead letter fills.
const DEAD_LETTER_COLUMNS: &[&str] = &[
    "fingerprint",
    "position",
    "key",
    "raw",
    "reason",
    "attempts",
    "target",
    "source_key",
    "headers",
];

const DEAD_LETTERS: &str = "CREATE TABLE IF NOT EXISTS sluice_dead_letters (
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
)";

const VERSION_KINDS: &str = "CREATE TABLE IF NOT EXISTS sluice_version_kinds (
    target text PRIMARY KEY,
    kind text NOT NULL
)";

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
    .map_err(|e| describe(&e))?;
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
    .map_err(|e| describe(&e))?;
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
    .map_err(|e| describe(&e))?;
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
            .map_err(|e| describe(&e))?;
    Ok(name.as_deref().and_then(VersionKind::from_name))
}
