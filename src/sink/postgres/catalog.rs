//! The tables a run uses, as the catalog has them. A start looks first and creates only
//! what is missing, so a role that may write existing tables but create none can run
//! (`CREATE TABLE IF NOT EXISTS` needs CREATE on the schema even when the table is
//! there). `sluice check` asks the same catalog whether the role holds each right a run
//! will use, and names the one it lacks. Every query is unnamed (`persistent(false)`):
//! each runs once per start, and behind PgBouncer in transaction mode a named statement
//! left on a server connection fails the next client that prepares the same name.

use sqlx::postgres::PgConnection;
use sqlx::{Connection, Executor};

use crate::sink::identifier::quote;

/// A right a run uses on a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    Select,
    Insert,
    Update,
    Delete,
}

impl Right {
    pub fn name(self) -> &'static str {
        match self {
            Right::Select => "SELECT",
            Right::Insert => "INSERT",
            Right::Update => "UPDATE",
            Right::Delete => "DELETE",
        }
    }
}

/// One table a run uses, what it does with it, and how it comes to exist.
#[derive(Debug, Clone)]
pub struct TableUse {
    /// As configured (`name` or `schema.name`), resolved by the search path as the
    /// run's statements resolve it.
    pub name: String,
    /// What it is, in `check`'s words: "sink table", "dead-letter table", "lease table".
    pub what: &'static str,
    /// Each right a run uses, on the columns it uses it on (granted on those columns
    /// alone is enough, as for the statements; empty: the whole table).
    pub rights: Vec<(Right, Vec<String>)>,
    /// The statement creating it when missing; `None`: it must exist (a mapped table).
    pub create: Option<String>,
    /// Columns a table made by an earlier version lacks, with their definitions: added
    /// (by its owner) when missing.
    pub added: Vec<(&'static str, &'static str)>,
    /// What else the `ALTER TABLE` adding them changes.
    pub alter_also: Option<&'static str>,
    /// A serial column: every insert draws from its sequence (USAGE on it).
    pub serial: Option<&'static str>,
}

impl TableUse {
    /// A table sluice creates when missing, used with `rights` on all its columns.
    pub fn owned(name: &str, what: &'static str, create: String, rights: &[Right]) -> Self {
        TableUse {
            name: name.to_string(),
            what,
            rights: rights.iter().map(|r| (*r, Vec::new())).collect(),
            create: Some(create),
            added: Vec::new(),
            alter_also: None,
            serial: None,
        }
    }

    fn quoted(&self) -> String {
        quote(&self.name)
    }

    /// `ALTER TABLE … ADD COLUMN …` for the added columns in `missing`.
    fn alter(&self, missing: &[String]) -> String {
        let mut clauses: Vec<String> = self
            .added
            .iter()
            .filter(|(c, _)| missing.iter().any(|m| m == c))
            .map(|(c, definition)| format!("ADD COLUMN IF NOT EXISTS {c} {definition}"))
            .collect();
        clauses.extend(self.alter_also.map(str::to_string));
        format!("ALTER TABLE {} {}", self.quoted(), clauses.join(", "))
    }
}

/// A table as the catalog has it now.
struct Found {
    exists: bool,
    /// Added columns it does not have yet.
    missing_columns: Vec<String>,
}

async fn find(conn: &mut PgConnection, table: &TableUse) -> Result<Found, sqlx::Error> {
    let added: Vec<&str> = table.added.iter().map(|(c, _)| *c).collect();
    let (exists, present): (bool, Vec<String>) = sqlx::query_as(
        "SELECT r IS NOT NULL, coalesce((SELECT array_agg(a.attname::text) FROM pg_attribute a \
           WHERE a.attrelid = r AND a.attnum > 0 AND NOT a.attisdropped \
             AND a.attname = ANY($2)), '{}') \
         FROM to_regclass($1) AS r",
    )
    .bind(table.quoted())
    .bind(&added)
    // Unnamed: run once per start, and a lease store behind PgBouncer in transaction
    // mode must not leave named statements on the server connections.
    .persistent(false)
    .fetch_one(conn)
    .await?;
    let missing_columns = added
        .iter()
        .filter(|c| exists && !present.iter().any(|p| p == *c))
        .map(|c| c.to_string())
        .collect();
    Ok(Found {
        exists,
        missing_columns,
    })
}

/// Creates the tables of `tables` that are missing and adds the columns they lack —
/// nothing else: with everything there, no DDL runs and no lock is taken. The DDL runs
/// in one transaction under the advisory lock `lock` (workers starting together would
/// otherwise race on the type catalogue) after looking again under it.
pub async fn ensure(
    conn: &mut PgConnection,
    tables: &[TableUse],
    lock: &str,
) -> Result<(), sqlx::Error> {
    let mut complete = true;
    for table in tables {
        let found = find(conn, table).await?;
        complete &= (found.exists || table.create.is_none()) && found.missing_columns.is_empty();
    }
    if complete {
        return Ok(());
    }
    let mut tx = conn.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(lock)
        .persistent(false)
        .execute(&mut *tx)
        .await?;
    for table in tables {
        let found = find(&mut tx, table).await?;
        match &table.create {
            Some(create) if !found.exists => {
                tx.execute(sqlx::AssertSqlSafe(create.clone())).await?;
            }
            _ if !found.missing_columns.is_empty() => {
                tx.execute(sqlx::AssertSqlSafe(table.alter(&found.missing_columns)))
                    .await?;
            }
            _ => {}
        }
    }
    tx.commit().await
}

/// What `check` found of one table.
#[derive(Debug)]
pub struct JudgedTable {
    /// `Ok` with what a run will do there, or `Err` naming the right the role lacks.
    pub verdict: Result<String, String>,
    /// A run would change it: create the table or add columns to it.
    pub changes: bool,
}

type Verdict = Result<String, String>;

/// Judges each of `tables` for the connected role, reading the catalog only (the caller
/// holds a READ ONLY transaction): a missing table needs CREATE on its schema (or, when
/// sluice may not create it, fails), a present one each right a run uses, USAGE on its
/// serial sequence, and ownership when columns must be added to it.
pub async fn judge(
    conn: &mut PgConnection,
    tables: &[TableUse],
) -> Result<Vec<JudgedTable>, String> {
    let text = |e: sqlx::Error| super::sqlstate::describe(&e);
    let (role,): (String,) = sqlx::query_as("SELECT current_user::text")
        .persistent(false)
        .fetch_one(&mut *conn)
        .await
        .map_err(text)?;
    let mut verdicts = Vec::with_capacity(tables.len());
    for table in tables {
        let found = find(conn, table).await.map_err(text)?;
        let verdict = if !found.exists {
            missing(conn, table, &role).await.map_err(text)?
        } else {
            present(conn, table, &found, &role).await.map_err(text)?
        };
        verdicts.push(JudgedTable {
            verdict,
            changes: !found.exists || !found.missing_columns.is_empty(),
        });
    }
    Ok(verdicts)
}

async fn missing(
    conn: &mut PgConnection,
    table: &TableUse,
    role: &str,
) -> Result<Verdict, sqlx::Error> {
    if table.create.is_none() {
        return Ok(Err(format!(
            "{} does not exist; with [sink.columns] sluice writes into an existing table (run refuses to start): create it first",
            table.name
        )));
    }
    let (schema, may_create): (Option<String>, Option<bool>) =
        match table.name.split_once('.') {
            Some((schema, _)) => {
                sqlx::query_as(
                    "SELECT n.nspname::text, has_schema_privilege(n.oid, 'CREATE') \
                 FROM (SELECT $1::text AS name) s \
                 LEFT JOIN pg_namespace n ON n.nspname = s.name",
                )
                .bind(schema)
                .persistent(false)
                .fetch_one(&mut *conn)
                .await?
            }
            None => sqlx::query_as(
                "SELECT current_schema()::text, has_schema_privilege(current_schema(), 'CREATE')",
            )
            .persistent(false)
            .fetch_one(&mut *conn)
            .await?,
        };
    Ok(match (schema, may_create) {
        (Some(schema), Some(true)) => Ok(format!(
            "missing: run creates {} (role {role} may CREATE in schema {schema})",
            table.name
        )),
        (Some(schema), _) => Err(format!(
            "missing, and role {role} may not create it: CREATE on schema {schema} is not granted (create the table, or GRANT CREATE ON SCHEMA {schema} TO {role})"
        )),
        (None, _) => Err(format!(
            "missing, and there is no schema to create it in ({})",
            match table.name.split_once('.') {
                Some((schema, _)) => format!("schema {schema} does not exist"),
                None => "no schema of the search_path exists".into(),
            }
        )),
    })
}

async fn present(
    conn: &mut PgConnection,
    table: &TableUse,
    found: &Found,
    role: &str,
) -> Result<Verdict, sqlx::Error> {
    let quoted = table.quoted();
    let mut lacking = Vec::new();
    // The grant that would give what is missing on the table itself.
    let mut grant = Vec::new();
    for (right, columns) in &table.rights {
        // Granted on the table, or on every column the run uses (that exists: a column
        // added at start belongs to the owner adding it).
        let (granted,): (bool,) = sqlx::query_as(
            "SELECT has_table_privilege(r, $2) OR coalesce(cardinality($3::text[]) > 0 AND \
               (SELECT bool_and(has_column_privilege(r, a.attname, $2)) FROM pg_attribute a \
                WHERE a.attrelid = r AND a.attname = ANY($3) AND a.attnum > 0 \
                  AND NOT a.attisdropped), false) \
             FROM to_regclass($1) AS r",
        )
        .bind(&quoted)
        .bind(right.name())
        .bind(columns)
        .persistent(false)
        .fetch_one(&mut *conn)
        .await?;
        if !granted {
            lacking.push(right.name().to_string());
            grant.push(right.name());
        }
    }
    if let Some(column) = table.serial {
        let (sequence, usable): (Option<String>, Option<bool>) = sqlx::query_as(
            "SELECT s, has_sequence_privilege(s, 'USAGE') FROM pg_get_serial_sequence($1, $2) AS s",
        )
        .bind(&quoted)
        .bind(column)
        .persistent(false)
        .fetch_one(&mut *conn)
        .await?;
        if let (Some(sequence), Some(false)) = (sequence, usable) {
            lacking.push(format!("USAGE on sequence {sequence}"));
        }
    }
    if !found.missing_columns.is_empty() {
        let (owner, owns): (String, bool) = sqlx::query_as(
            "SELECT c.relowner::regrole::text, pg_has_role(c.relowner, 'USAGE') \
             FROM pg_class c WHERE c.oid = to_regclass($1)",
        )
        .bind(&quoted)
        .persistent(false)
        .fetch_one(&mut *conn)
        .await?;
        if !owns {
            lacking.push(format!(
                "ownership (run adds column {} to it; its owner is {owner})",
                found.missing_columns.join(", ")
            ));
        }
    }
    let uses: Vec<&str> = table.rights.iter().map(|(r, _)| r.name()).collect();
    let uses = uses.join(", ");
    Ok(if lacking.is_empty() {
        let adds = if found.missing_columns.is_empty() {
            String::new()
        } else {
            format!("; run adds column {}", found.missing_columns.join(", "))
        };
        Ok(format!("present; role {role} may {uses}{adds}"))
    } else {
        let hint = if grant.is_empty() {
            String::new()
        } else {
            format!("; GRANT {} ON {} TO {role}", grant.join(", "), table.name)
        };
        Err(format!(
            "present, but role {role} lacks {} (a run uses {uses}{hint})",
            lacking.join(", ")
        ))
    })
}
