//! MySQL / MariaDB: a connection pool in strict SQL mode, a batch written as multi-row
//! `INSERT … ON DUPLICATE KEY UPDATE` statements under `max_allowed_packet` (one
//! transaction when it takes several), and errors sorted by MySQL error number so the
//! delivery knows whether to wait, retry, split or stop.

pub mod errno;
pub mod mapping;
pub mod settings;
pub mod statement;

use std::time::Duration;

use async_trait::async_trait;
use sqlx::mysql::{MySqlConnection, MySqlDatabaseError, MySqlPool, MySqlPoolOptions};
use sqlx::{Connection, Executor, SqlSafeStr};

use self::errno::{ErrorClass, classify};
use self::mapping::Mapping;
use self::statement::{DUPLICATES_VARIABLE, Oversized};
use super::dead_letters::headers_json;
use super::identifier::backtick;
use super::{Sink, SinkError, WriteOutcome, dead_letter_fingerprint};
use crate::record::{DeadLetter, Row};
use crate::sink::settings::SinkSettings;

/// How long a write waits for a pooled connection before it counts as an outage.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Room left in a packet for the statement's own framing.
const PACKET_MARGIN: usize = 4096;

/// The columns of the table sluice creates, in the order a row binds them.
const CREATED_COLUMNS: [&str; 3] = ["key", "payload", "source"];

pub struct MysqlSink {
    pool: MySqlPool,
    /// The records table, quoted.
    quoted: String,
    /// The statement's columns, quoted, the key's first.
    columns: Vec<String>,
    /// An existing table's `[sink.columns]`; `None`: the table sluice creates.
    mapping: Option<Mapping>,
    /// The table this sink writes, named in its dead letters.
    table: String,
    /// Most bytes of values one statement may carry.
    budget: usize,
    throttle_errors: Vec<u16>,
}

impl MysqlSink {
    pub async fn open(sink: &SinkSettings, opening: &super::Opening) -> Result<Self, SinkError> {
        let fail = |e: &dyn std::fmt::Display| SinkError {
            url: crate::redact::redact(&sink.url),
            message: crate::redact::redact(&e.to_string()),
            not_now: false,
        };
        let Some(own) = sink.mysql() else {
            return Err(fail(&"the settings are not of a MySQL sink"));
        };
        let options = settings::connect_options(&sink.url).map_err(|e| fail(&e))?;
        let pool = MySqlPoolOptions::new()
            .max_connections(opening.most_in_flight as u32 + 1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .after_connect(|conn, _| Box::pin(async move { start_session(conn).await }))
            .connect_lazy_with(options);
        // One connection for everything start-up does: a user allowed a single
        // connection must not be refused a second one here.
        let mut conn = pool
            .acquire()
            .await
            // Waited for only when the server answered "not now" (too many connections):
            // one that cannot be reached at all at start may not exist.
            .map_err(|e| SinkError {
                not_now: matches!(e, sqlx::Error::Database(_))
                    && matches!(
                        judge(&e, &own.throttle_errors),
                        WriteOutcome::Unavailable(_) | WriteOutcome::Throttled { .. }
                    ),
                ..fail(&reason(&e))
            })?;
        let quoted = backtick(&sink.table);
        let mapping = match &own.columns {
            None => None,
            Some(columns) => {
                let columns: Vec<(String, String)> = columns
                    .iter()
                    .map(|(c, p)| (c.clone(), p.clone()))
                    .collect();
                let key_column = sink.key_column();
                let mapping = mapping::inspect(&mut conn, &sink.table, key_column, &columns)
                    .await
                    .map_err(|e| fail(&e))?;
                Some(mapping)
            }
        };
        let columns: Vec<String> = match &mapping {
            None => CREATED_COLUMNS.iter().map(|c| backtick(c)).collect(),
            Some(m) => m.names().map(backtick).collect(),
        };
        create_tables(&mut conn, mapping.is_none().then_some(quoted.as_str()))
            .await
            .map_err(|e| fail(&reason(&e)))?;
        let packet: u64 = sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS UNSIGNED)")
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| fail(&reason(&e)))?;
        // What start-up promises: the statement every batch runs is valid for this table.
        conn.prepare(sqlx::AssertSqlSafe(statement::insert(&quoted, &columns, 1)).into_sql_str())
            .await
            .map_err(|e| {
                fail(&format!(
                    "the insert statement does not prepare: {}",
                    reason(&e)
                ))
            })?;
        drop(conn);
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

    /// Writes the runs (in one transaction when there are several) and returns how many
    /// rows were duplicates.
    async fn insert(
        &self,
        conn: &mut MySqlConnection,
        batch: &Batch<'_>,
        runs: &[std::ops::Range<usize>],
    ) -> Result<u64, sqlx::Error> {
        conn.execute(sqlx::AssertSqlSafe(format!(
            "SET {DUPLICATES_VARIABLE} = 0"
        )))
        .await?;
        if let [run] = runs {
            self.insert_run(&mut *conn, batch, run.clone()).await?;
        } else {
            let mut tx = conn.begin().await?;
            for run in runs {
                self.insert_run(&mut tx, batch, run.clone()).await?;
            }
            tx.commit().await?;
        }
        let duplicates: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT CAST({DUPLICATES_VARIABLE} AS SIGNED)"
        )))
        .fetch_one(&mut *conn)
        .await?;
        Ok(duplicates.max(0) as u64)
    }

    async fn insert_run(
        &self,
        conn: &mut MySqlConnection,
        batch: &Batch<'_>,
        run: std::ops::Range<usize>,
    ) -> Result<(), sqlx::Error> {
        let sql = statement::insert(&self.quoted, &self.columns, run.len());
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

    async fn insert_dead_letters(
        &self,
        conn: &mut MySqlConnection,
        letters: &[DeadLetter],
    ) -> Result<(), sqlx::Error> {
        let mut sql = String::from(
            "INSERT INTO sluice_dead_letters \
             (fingerprint, position, `key`, raw, reason, attempts, target, source_key, headers) VALUES ",
        );
        for i in 0..letters.len() {
            sql.push_str(if i == 0 {
                "(?,?,?,?,?,?,?,?,?)"
            } else {
                ",(?,?,?,?,?,?,?,?,?)"
            });
        }
        sql.push_str(" ON DUPLICATE KEY UPDATE fingerprint = fingerprint");
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for letter in letters {
            query = query
                .bind(dead_letter_fingerprint(&self.table, letter))
                .bind(letter.origin.as_str())
                .bind(letter.key.as_deref())
                .bind(letter.raw.as_slice())
                .bind(letter.reason.as_str())
                .bind(i32::try_from(letter.attempts).unwrap_or(i32::MAX))
                .bind(self.table.as_str())
                .bind(letter.context.key.as_deref())
                .bind(headers_json(&letter.context));
        }
        query.execute(conn).await.map(drop)
    }
}

/// A batch's values as its statements bind them.
enum Batch<'a> {
    /// Key, payload, source of each row.
    Created(&'a [Row]),
    /// Each row's values in the order of `Mapping::names`.
    Mapped(Vec<Vec<Option<String>>>),
}

impl Batch<'_> {
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
    mapping: &Mapping,
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
    let why = reason(err);
    match err {
        sqlx::Error::Database(db) => {
            let number = db
                .try_downcast_ref::<MySqlDatabaseError>()
                .map_or(0, |e| e.number());
            match classify(number, throttle_errors) {
                ErrorClass::Throttle => WriteOutcome::Throttled {
                    retry_after: None,
                    unit: None,
                    reason: why,
                },
                ErrorClass::Unavailable => WriteOutcome::Unavailable(why),
                ErrorClass::Transient => WriteOutcome::Transient(why),
                ErrorClass::Data => WriteOutcome::Rejected {
                    rows: None,
                    reason: why,
                },
                ErrorClass::Fatal => WriteOutcome::Fatal(why),
                ErrorClass::Unexplained => WriteOutcome::Unexplained(why),
            }
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => WriteOutcome::Unavailable(why),
        _ => WriteOutcome::Fatal(why),
    }
}

/// Creates the records table (when sluice owns its shape; `quoted`) and the dead-letter
/// table when missing. A key longer than 255 characters is refused by the server (error
/// 1406) and dead-lettered.
async fn create_tables(
    conn: &mut MySqlConnection,
    quoted: Option<&str>,
) -> Result<(), sqlx::Error> {
    if let Some(quoted) = quoted {
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {quoted} (
            `key` VARCHAR(255) NOT NULL PRIMARY KEY,
            `payload` JSON NOT NULL,
            `source` TEXT,
            `ingested_at` TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
        ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4"
        );
        conn.execute(sqlx::AssertSqlSafe(ddl)).await?;
    }
    conn.execute(
        "CREATE TABLE IF NOT EXISTS sluice_dead_letters (
            id BIGINT AUTO_INCREMENT PRIMARY KEY,
            fingerprint CHAR(32) NOT NULL UNIQUE,
            position TEXT NOT NULL,
            `key` MEDIUMTEXT,
            raw LONGBLOB NOT NULL,
            reason TEXT NOT NULL,
            attempts INT NOT NULL,
            failed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
            target TEXT,
            source_key BLOB,
            headers MEDIUMTEXT
        ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4",
    )
    .await?;
    Ok(())
}

/// Readiness and `sluice check`: whether the server answers and the tables exist.
pub async fn check(url: &str, tables: &[&str]) -> Result<String, String> {
    let options = settings::connect_options(url)?;
    let mut conn = MySqlConnection::connect_with(&options)
        .await
        .map_err(|e| format!("cannot connect: {}", reason(&e)))?;
    let mut missing = Vec::new();
    for table in tables {
        let (schema, name) = identifier_of(table);
        let present: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.tables \
             WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?",
        )
        .bind(schema)
        .bind(name)
        .fetch_one(&mut conn)
        .await
        .map_err(|e| reason(&e))?;
        if present == 0 {
            missing.push(*table);
        }
    }
    Ok(if missing.is_empty() {
        "answers; tables present".into()
    } else {
        format!("answers; will create {}", missing.join(", "))
    })
}

#[async_trait]
impl Sink for MysqlSink {
    async fn probe(&self) -> Result<(), String> {
        super::probe_pool(&self.pool).await
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
            Ok(duplicates) => WriteOutcome::Written {
                inserted: rows.len() as u64 - duplicates.min(rows.len() as u64),
                duplicates,
            },
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
        match self.insert_dead_letters(&mut conn, letters).await {
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
