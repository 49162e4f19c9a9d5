//! MySQL / MariaDB: a connection pool in strict SQL mode, a batch written as multi-row
//! `INSERT … ON DUPLICATE KEY UPDATE` statements under `max_allowed_packet` in one
//! transaction, and errors sorted by MySQL error number so the delivery knows whether to
//! wait, retry, split or stop.

pub mod check;
pub mod column;
mod dead_letters;
pub(crate) mod errno;
pub mod mapping;
pub mod settings;
pub mod statement;
pub mod tables;

use std::time::Duration;

use async_trait::async_trait;
use sqlx::mysql::{MySqlConnection, MySqlDatabaseError, MySqlPool, MySqlPoolOptions};
use sqlx::{Connection, Executor, SqlSafeStr};

pub use self::check::check;
use self::errno::classify;
use self::mapping::MysqlMapping;
use self::settings::MysqlSettings;
use self::statement::{COLLISIONS_VARIABLE, DUPLICATES_VARIABLE, Oversized};
use self::tables::Created;
use super::identifier::backtick;
use super::{Sink, SinkError, WriteOutcome, sql_error};
use crate::record::{DeadLetter, Row};
use crate::sink::settings::SinkSettings;

/// How long a write waits for a pooled connection before it counts as an outage.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Room left in a packet for the statement's own framing.
const PACKET_MARGIN: usize = 4096;

/// The columns of the table sluice creates, in the order a row binds them.
pub const CREATED_COLUMNS: [&str; 3] = ["key", "payload", "source"];

pub struct MysqlSink {
    pool: MySqlPool,
    /// The records table, quoted.
    quoted: String,
    /// The statement's columns, quoted, the key's first.
    columns: Vec<String>,
    /// An existing table's `[sink.columns]`; `None`: the table sluice creates.
    mapping: Option<MysqlMapping>,
    /// The table this sink writes, named in its dead letters.
    table: String,
    /// Most bytes of values one statement may carry.
    budget: usize,
    throttle_errors: Vec<u16>,
}

impl MysqlSink {
    /// `sink` gives the keys every kind reads (its `backend` is not read: `own` is).
    pub async fn open(
        sink: &SinkSettings,
        own: &MysqlSettings,
        opening: &super::SinkOpening,
    ) -> Result<Self, SinkError> {
        let fail = |e: &dyn std::fmt::Display| SinkError {
            url: crate::redact::redact(&sink.url),
            message: crate::redact::redact(&e.to_string()),
            not_now: false,
        };
        let options = settings::connect_options(&sink.url).map_err(|e| fail(&e))?;
        // One connection of its own for everything start-up does, made directly: its
        // error is the server's answer ("Connection refused") at once, where the pool
        // would retry for ACQUIRE_TIMEOUT and then say only that it timed out. Closed
        // before the pool opens any, so a user allowed a single connection can run.
        let mut conn = match MySqlConnection::connect_with(&options).await {
            Ok(conn) => conn,
            // Waited for only when the server answered "not now" (too many connections):
            // one that cannot be reached at all at start may not exist.
            Err(e) => {
                return Err(SinkError {
                    not_now: matches!(e, sqlx::Error::Database(_))
                        && matches!(
                            judge(&e, &own.throttle_errors),
                            WriteOutcome::Unavailable(_) | WriteOutcome::Throttled { .. }
                        ),
                    ..fail(&connect_error(&e))
                });
            }
        };
        start_session(&mut conn)
            .await
            .map_err(|e| fail(&reason(&e)))?;
        let quoted = backtick(&sink.table);
        let mapping = mapped(&mut conn, sink).await.map_err(|e| fail(&e))?;
        if let Some(collation) = mapping.as_ref().and_then(|m| m.merging_collation.as_ref()) {
            tracing::warn!("{}", merging_key(sink, collation));
        }
        let columns = statement_columns(mapping.as_ref());
        let create_records = match &mapping {
            Some(_) => false,
            None => match tables::created(&mut conn, &sink.table)
                .await
                .map_err(|e| fail(&e))?
            {
                Created::Missing => true,
                Created::Present => false,
                Created::MergesKeys { collation, alter } => {
                    return Err(fail(&tables::merges_keys(&sink.table, &collation, &alter)));
                }
            },
        };
        tables::create_missing(&mut conn, create_records.then_some(quoted.as_str()))
            .await
            .map_err(|e| fail(&e))?;
        let packet: u64 = sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS UNSIGNED)")
            .fetch_one(&mut conn)
            .await
            .map_err(|e| fail(&reason(&e)))?;
        // What start-up promises: the statements every batch and every dead letter run
        // are valid for these tables and this user may run them (the server checks the
        // rights a statement needs when it prepares it).
        for sql in [
            statement::insert(&quoted, &columns, 1),
            dead_letters::insert(1),
        ] {
            conn.prepare(sqlx::AssertSqlSafe(sql).into_sql_str())
                .await
                .map_err(|e| {
                    fail(&format!(
                        "the insert statement does not prepare: {}",
                        reason(&e)
                    ))
                })?;
        }
        let _ = conn.close().await;
        let pool = MySqlPoolOptions::new()
            .max_connections(opening.most_in_flight as u32 + 1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .after_connect(|conn, _| Box::pin(async move { start_session(conn).await }))
            .connect_lazy_with(options);
        Ok(MysqlSink {
            pool,
            quoted,
            columns,
            mapping,
            table: sink.table.clone(),
            budget: (packet as usize)
                .saturating_sub(PACKET_MARGIN)
                .max(PACKET_MARGIN),
            throttle_errors: own.throttle_errors.clone(),
        })
    }

    /// Writes the runs in one transaction. A record that met a stored row of another key
    /// on a unique index (a collision, counted by the statement's update) is not a
    /// duplicate: the transaction is rolled back and the record found (the batch split
    /// down to it) and refused with the server's own words, which name the index.
    async fn insert(
        &self,
        conn: &mut MySqlConnection,
        batch: &Batch<'_>,
        runs: &[std::ops::Range<usize>],
    ) -> Result<WriteOutcome, sqlx::Error> {
        let mut tx = conn
            .begin_with(sqlx::AssertSqlSafe(format!(
                "SET {DUPLICATES_VARIABLE} = 0, {COLLISIONS_VARIABLE} = 0; BEGIN"
            )))
            .await?;
        for run in runs {
            self.insert_run(&mut tx, batch, run.clone(), true).await?;
        }
        let (duplicates, collisions): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT CAST({DUPLICATES_VARIABLE} AS SIGNED), CAST({COLLISIONS_VARIABLE} AS SIGNED)"
        )))
        .fetch_one(&mut *tx)
        .await?;
        if collisions == 0 {
            tx.commit().await?;
            let (rows, duplicates) = (batch.len() as u64, duplicates.max(0) as u64);
            return Ok(WriteOutcome::Written {
                inserted: rows - duplicates.min(rows),
                duplicates,
            });
        }
        let outcome = if batch.len() > 1 {
            WriteOutcome::Rejected {
                rows: None,
                reason: format!(
                    "{collisions} record(s) collide with stored rows of other keys on a unique index"
                ),
            }
        } else {
            // Alone, without the update: the server says which index it collides on.
            match self.insert_run(&mut tx, batch, 0..1, false).await {
                Err(e) => judge(&e, &self.throttle_errors),
                Ok(()) => WriteOutcome::Transient(
                    "the record collided on a unique index with a row that is gone now".into(),
                ),
            }
        };
        tx.rollback().await?;
        Ok(outcome)
    }

    /// Inserts rows `run` of the batch; `absorbing`: with the update that absorbs a
    /// redelivered key, else as a plain insert.
    async fn insert_run(
        &self,
        conn: &mut MySqlConnection,
        batch: &Batch<'_>,
        run: std::ops::Range<usize>,
        absorbing: bool,
    ) -> Result<(), sqlx::Error> {
        let sql = if absorbing {
            statement::insert(&self.quoted, &self.columns, run.len())
        } else {
            statement::plain_insert(&self.quoted, &self.columns, run.len())
        };
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        match batch {
            Batch::Created(rows) => {
                for row in &rows[run] {
                    query = query
                        .bind(row.key.as_str())
                        .bind(row.payload.as_str())
                        .bind(row.origin.as_str());
                }
            }
            Batch::Mapped(rows) => {
                for values in &rows[run] {
                    for value in values {
                        query = query.bind(value.as_deref());
                    }
                }
            }
        }
        query.execute(conn).await.map(drop)
    }
}

/// The existing table `[sink.columns]` maps, inspected; `None`: the table sluice creates.
async fn mapped(
    conn: &mut MySqlConnection,
    sink: &SinkSettings,
) -> Result<Option<MysqlMapping>, String> {
    let Some(columns) = sink.columns() else {
        return Ok(None);
    };
    let columns: Vec<(String, String)> = columns
        .iter()
        .map(|(c, p)| (c.clone(), p.clone()))
        .collect();
    mapping::inspect(conn, &sink.table, sink.key_column(), &columns)
        .await
        .map(Some)
}

/// The insert statement's columns, quoted, the key's first.
fn statement_columns(mapping: Option<&MysqlMapping>) -> Vec<String> {
    match mapping {
        None => CREATED_COLUMNS.iter().map(|c| backtick(c)).collect(),
        Some(m) => m.names().map(backtick).collect(),
    }
}

/// What a mapped key column whose collation merges keys means, for the log and `check`.
/// Warned, not refused: the table is the user's, its collation may be meant (ids that are
/// case-insensitive by design), and no record is lost — one whose key the index holds
/// equal to a stored one of other bytes collides and is dead-lettered.
fn merging_key(sink: &SinkSettings, collation: &str) -> String {
    format!(
        "column {} of {} compares keys by {collation}, which holds keys that differ in case, accents or trailing spaces equal: a record whose key equals a stored one only so is dead-lettered (MySQL error 1062), not merged into it; a binary collation (utf8mb4_nopad_bin) keeps such keys apart",
        sink.key_column(),
        sink.table
    )
}

/// A batch's values as its statements bind them.
enum Batch<'a> {
    /// Key, payload, source of each row.
    Created(&'a [Row]),
    /// Each row's values in the order of `MysqlMapping::names`.
    Mapped(Vec<Vec<Option<String>>>),
}

impl Batch<'_> {
    fn len(&self) -> usize {
        match self {
            Batch::Created(rows) => rows.len(),
            Batch::Mapped(rows) => rows.len(),
        }
    }

    /// Each row's bytes of values, and how many values a row has.
    fn sizes(&self) -> (Vec<usize>, usize) {
        match self {
            Batch::Created(rows) => (
                rows.iter()
                    .map(|r| r.key.len() + r.payload.len() + r.origin.len())
                    .collect(),
                CREATED_COLUMNS.len(),
            ),
            Batch::Mapped(rows) => (
                rows.iter()
                    .map(|values| values.iter().flatten().map(String::len).sum())
                    .collect(),
                rows.first().map_or(1, Vec::len),
            ),
        }
    }
}

/// Each row's values for an existing table, or the rows that can never go in: those
/// refused for the same reason as the first.
fn mapped_values(
    mapping: &MysqlMapping,
    rows: &[Row],
) -> Result<Vec<Vec<Option<String>>>, WriteOutcome> {
    let mut values = Vec::with_capacity(rows.len());
    let mut refused: Option<(Vec<usize>, String)> = None;
    for (i, row) in rows.iter().enumerate() {
        match mapping.values(row) {
            Ok(v) => values.push(v),
            Err(why) => match &mut refused {
                Some((rows, reason)) if *reason == why => rows.push(i),
                Some(_) => {}
                None => refused = Some((vec![i], why)),
            },
        }
    }
    match refused {
        None => Ok(values),
        Some((rows, reason)) => Err(WriteOutcome::Rejected {
            rows: Some(rows),
            reason,
        }),
    }
}

/// `schema.table` or `table` as (schema, table).
fn identifier_of(table: &str) -> (Option<&str>, &str) {
    match table.split_once('.') {
        Some((schema, name)) => (Some(schema), name),
        None => (None, table),
    }
}

/// Strict SQL mode on every connection, so that bad data is an error and not a warning.
async fn start_session(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    conn.execute(sqlx::AssertSqlSafe(format!(
        "SET SESSION sql_mode = '{}'",
        settings::SESSION_SQL_MODE
    )))
    .await
    .map(drop)
}

/// An error as the log and dead letters give it: with its MySQL error number.
fn reason(err: &sqlx::Error) -> String {
    match err {
        sqlx::Error::Database(db) => match db.try_downcast_ref::<MySqlDatabaseError>() {
            Some(my) => format!("MySQL error {}: {}", my.number(), my.message()),
            None => db.message().to_string(),
        },
        _ => err.to_string(),
    }
}

/// Sorts an error into what the delivery should do about it: by its error number, or,
/// without one, by whether the connection itself failed.
fn judge(err: &sqlx::Error, throttle_errors: &[u16]) -> WriteOutcome {
    sql_error::judge(err, |db| {
        match db.try_downcast_ref::<MySqlDatabaseError>() {
            Some(my) => (
                classify(my.number(), throttle_errors),
                format!("MySQL error {}: {}", my.number(), my.message()),
            ),
            None => (classify(0, throttle_errors), db.message().to_string()),
        }
    })
}

/// Why a connection could not be made, as `run` and `check` say it: the server's own
/// words (`Connection refused`, `Access denied … (using password: YES)`), or what the
/// TLS handshake refused.
fn connect_error(err: &sqlx::Error) -> String {
    match crate::tls::certificate_refused(err) {
        Some(why) => format!("TLS handshake failed: {why}"),
        None => reason(err),
    }
}

#[async_trait]
impl Sink for MysqlSink {
    async fn ping(&self) -> Result<(), String> {
        super::ping_pool(&self.pool).await
    }

    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        let batch = match &self.mapping {
            None => Batch::Created(rows),
            Some(m) => match mapped_values(m, rows) {
                Ok(values) => Batch::Mapped(values),
                Err(refused) => return refused,
            },
        };
        let (sizes, params) = batch.sizes();
        let runs = match statement::chunks(sizes.into_iter(), params, self.budget) {
            Ok(runs) => runs,
            Err(Oversized(i)) => {
                return WriteOutcome::Rejected {
                    rows: Some(vec![i]),
                    reason: format!(
                        "the record is larger than the server's max_allowed_packet ({} bytes with framing)",
                        self.budget
                    ),
                };
            }
        };
        let mut conn = match self.pool.acquire().await {
            Ok(c) => c,
            Err(e) => return judge(&e, &self.throttle_errors),
        };
        match self.insert(&mut conn, &batch, &runs).await {
            Ok(outcome) => outcome,
            Err(e) => {
                // Its duplicate counter and transaction state are unknown now; and after
                // an outage it may point at a server that is no longer the primary.
                conn.close_on_drop();
                judge(&e, &self.throttle_errors)
            }
        }
    }

    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        let mut conn = match self.pool.acquire().await {
            Ok(c) => c,
            Err(e) => return judge(&e, &self.throttle_errors),
        };
        match dead_letters::store(&mut conn, &self.table, letters, self.budget).await {
            Ok(()) => WriteOutcome::Written {
                inserted: letters.len() as u64,
                duplicates: 0,
            },
            Err(e) => {
                conn.close_on_drop();
                judge(&e, &self.throttle_errors)
            }
        }
    }
}
