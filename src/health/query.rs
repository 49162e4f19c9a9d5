//! What a probe asks each database, and how the answer becomes one number.
//!
//! PostgreSQL `replica_lag` asks the server where it runs: on a primary the worst
//! `pg_stat_replication.replay_lag` (it moves only when WAL flows: while replay is stuck
//! and writes go on, the primary interpolates a growing lag; once the standby has
//! replayed everything twice in a row it reports NULL, read as 0), on a standby
//! `now() - pg_last_xact_replay_timestamp()` unless everything received is replayed (an
//! idle primary sends nothing, and that standby is not behind). A role that may not read
//! other sessions' rows (no `pg_monitor`) would see NULLs and too little: that is a failed
//! run, not a 0. MySQL's `Seconds_Behind_Master` (`_Source`) is read on each replica;
//! NULL (replication stopped) is a failed run.
//!
//! Every run is a READ ONLY transaction, rolled back: `check`, `plan` and `run` all run
//! probes, and a probe's SQL must not change the database it watches.

use sqlx::mysql::MySqlConnection;
use sqlx::postgres::PgConnection;
use sqlx::{Connection, Executor, Row};

use super::number;
use super::settings::{Builtin, Database};
use crate::sink::postgres::sqlstate::describe;

const PG_REPLICA_LAG: &str = "SELECT CASE WHEN pg_is_in_recovery() THEN \
       CASE WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0::float8 \
       ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 END \
     ELSE (SELECT CASE WHEN bool_or(state IS NULL) THEN NULL \
       ELSE coalesce(extract(epoch FROM max(replay_lag)), 0)::float8 END FROM pg_stat_replication) END";

const PG_ACTIVE_SESSIONS: &str = "SELECT CASE WHEN bool_or(state IS NULL) THEN NULL \
     ELSE (count(*) FILTER (WHERE state = 'active'))::float8 END \
     FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()";

/// What one probe asks: a built-in, the user's SQL, or a canary's query (whose answer
/// is how long it took, in seconds).
#[derive(Debug, Clone)]
pub enum Ask {
    Builtin(Builtin),
    Sql(String),
    Canary(String),
}

/// A canary's query when none is given: as cheap as a query gets.
pub const CANARY_QUERY: &str = "SELECT 1";

/// One open connection of a probe.
pub enum Conn {
    Pg(PgConnection),
    Mysql(MySqlConnection),
}

impl Conn {
    pub async fn open(database: Database, url: &str) -> Result<Conn, String> {
        let redacted = |e: String| crate::redact::redact(&e);
        match database {
            Database::Postgres => {
                let options = crate::sink::postgres::tls::connect_options(url)
                    .map_err(redacted)?
                    .application_name("sluice health probe");
                Ok(Conn::Pg(
                    PgConnection::connect_with(&options)
                        .await
                        .map_err(|e| redacted(describe(&e)))?,
                ))
            }
            Database::Mysql => {
                let options = crate::sink::mysql::settings::connect_options(url)?;
                let mut conn = MySqlConnection::connect_with(&options)
                    .await
                    .map_err(|e| redacted(e.to_string()))?;
                // Every transaction of this session is read-only, DDL included: MySQL's
                // START TRANSACTION READ ONLY alone would let a CREATE TABLE commit it
                // implicitly and run.
                conn.execute("SET SESSION TRANSACTION READ ONLY")
                    .await
                    .map_err(|e| redacted(e.to_string()))?;
                Ok(Conn::Mysql(conn))
            }
        }
    }

    /// Runs `ask` once, in a READ ONLY transaction rolled back at the end (a probe
    /// reads; whatever its SQL says, it changes nothing): the number it gave, or why
    /// there is none.
    pub async fn read(&mut self, ask: &Ask) -> Result<f64, String> {
        match self {
            Conn::Pg(c) => {
                let text = |e: sqlx::Error| crate::redact::redact(&describe(&e));
                let mut tx = c.begin_with("BEGIN READ ONLY").await.map_err(text)?;
                let read = pg_read(&mut tx, ask).await;
                let ended = tx.rollback().await.map_err(text);
                read.and_then(|v| ended.map(|()| v))
            }
            Conn::Mysql(c) => {
                let text = |e: sqlx::Error| crate::redact::redact(&e.to_string());
                let mut tx = c
                    .begin_with("START TRANSACTION READ ONLY")
                    .await
                    .map_err(text)?;
                let read = mysql_read(&mut tx, ask).await;
                let ended = tx.rollback().await.map_err(text);
                read.and_then(|v| ended.map(|()| v))
            }
        }
    }

    /// Whether the connection is encrypted, as the server sees it (for `sluice check`).
    pub async fn tls(&mut self) -> Result<String, String> {
        let version: Option<String> = match self {
            Conn::Pg(c) => sqlx::query_scalar(
                "SELECT CASE WHEN ssl THEN version END FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            )
            .fetch_one(c)
            .await
            .map_err(|e| describe(&e))?,
            Conn::Mysql(c) => {
                let row = sqlx::query("SHOW SESSION STATUS LIKE 'Ssl_version'")
                    .fetch_optional(c)
                    .await
                    .map_err(|e| e.to_string())?;
                row.and_then(|r| r.try_get::<String, _>(1).ok())
                    .filter(|v| !v.is_empty())
            }
        };
        Ok(version.map_or("without TLS".into(), |v| format!("over TLS ({v})")))
    }
}

/// The first row, or the reason there is none.
fn one<R>(rows: Option<R>) -> Result<R, String> {
    rows.ok_or_else(|| "the query returned no row, not a number".into())
}

async fn pg_read(c: &mut PgConnection, ask: &Ask) -> Result<f64, String> {
    let text = |e: sqlx::Error| crate::redact::redact(&describe(&e));
    match ask {
        Ask::Canary(sql) => {
            // The query's own time; `ProbeTask::canary_run` adds how long the run waited
            // after it was due. Nothing runs first to wake the backend: production's
            // queries pay that wake-up too (with an unmeasured `SELECT 1` first, the canary
            // read 0.9-1.8x its baseline at loads that broke production's 2x target).
            let started = tokio::time::Instant::now();
            sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .fetch_optional(c)
                .await
                .map_err(text)?;
            Ok(started.elapsed().as_secs_f64())
        }
        Ask::Builtin(b) => {
            let sql = match b {
                Builtin::ReplicaLag => PG_REPLICA_LAG,
                Builtin::ActiveSessions => PG_ACTIVE_SESSIONS,
                // A canary is asked as Ask::Canary.
                Builtin::Canary => CANARY_QUERY,
            };
            let row = sqlx::query(sql).fetch_one(c).await.map_err(text)?;
            number::pg(&row).map_err(|e| match b {
                Builtin::ReplicaLag => format!(
                    "{e}: on a primary the role cannot read pg_stat_replication (grant pg_monitor); on a standby no transaction has been replayed yet"
                ),
                Builtin::ActiveSessions => {
                    format!("{e}: the role cannot see other sessions (grant pg_monitor)")
                }
                Builtin::Canary => e,
            })
        }
        Ask::Sql(sql) => {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .fetch_optional(c)
                .await
                .map_err(text)?;
            number::pg(&one(row)?)
        }
    }
}

async fn mysql_read(c: &mut MySqlConnection, ask: &Ask) -> Result<f64, String> {
    let text = |e: sqlx::Error| crate::redact::redact(&e.to_string());
    match ask {
        Ask::Canary(sql) => {
            let started = tokio::time::Instant::now();
            sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .fetch_optional(c)
                .await
                .map_err(text)?;
            Ok(started.elapsed().as_secs_f64())
        }
        Ask::Builtin(Builtin::ActiveSessions) => {
            let row = sqlx::query("SHOW GLOBAL STATUS LIKE 'Threads_running'")
                .fetch_one(c)
                .await
                .map_err(text)?;
            // Not counting the probe's own thread, which runs this statement.
            Ok((number::mysql(&row, 1)? - 1.0).max(0.0))
        }
        Ask::Builtin(Builtin::Canary) => {
            let row = sqlx::query(CANARY_QUERY).fetch_one(c).await.map_err(text)?;
            number::mysql(&row, 0)
        }
        Ask::Builtin(Builtin::ReplicaLag) => {
            let rows = match sqlx::query("SHOW REPLICA STATUS").fetch_all(&mut *c).await {
                Ok(rows) => rows,
                // Before MySQL 8.0.22 / MariaDB 10.5.1.
                Err(_) => sqlx::query("SHOW SLAVE STATUS")
                    .fetch_all(&mut *c)
                    .await
                    .map_err(text)?,
            };
            let Some(row) = rows.first() else {
                return Err("not a replica (SHOW REPLICA STATUS is empty)".into());
            };
            let column = ["Seconds_Behind_Source", "Seconds_Behind_Master"]
                .into_iter()
                .find(|name| row.try_column(*name).is_ok())
                .ok_or("SHOW REPLICA STATUS has no Seconds_Behind_Master")?;
            match row.try_get::<Option<i64>, _>(column) {
                Ok(Some(n)) => Ok(n as f64),
                Ok(None) => Err(format!(
                    "{column} is NULL: replication is not running on this replica"
                )),
                Err(_) => match row.try_get::<Option<u64>, _>(column) {
                    Ok(Some(n)) => Ok(n as f64),
                    _ => Err(format!(
                        "{column} is NULL: replication is not running on this replica"
                    )),
                },
            }
        }
        Ask::Sql(sql) => {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .fetch_optional(c)
                .await
                .map_err(text)?;
            number::mysql(&one(row)?, 0)
        }
    }
}
