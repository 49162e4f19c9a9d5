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

use sqlx::mysql::{MySqlConnection, MySqlRow};
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{Connection, Row};

use super::settings::{Builtin, Database};

const PG_REPLICA_LAG: &str = "SELECT CASE WHEN pg_is_in_recovery() THEN \
       CASE WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0::float8 \
       ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 END \
     ELSE (SELECT CASE WHEN bool_or(state IS NULL) THEN NULL \
       ELSE coalesce(extract(epoch FROM max(replay_lag)), 0)::float8 END FROM pg_stat_replication) END";

const PG_ACTIVE_SESSIONS: &str = "SELECT CASE WHEN bool_or(state IS NULL) THEN NULL \
     ELSE (count(*) FILTER (WHERE state = 'active'))::float8 END \
     FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()";

/// What one probe asks: a built-in, or the user's SQL.
#[derive(Debug, Clone)]
pub enum Ask {
    Builtin(Builtin),
    Sql(String),
}

/// One open connection of a probe.
pub enum Conn {
    Pg(PgConnection),
    Mysql(MySqlConnection),
}

impl Conn {
    pub async fn open(database: Database, url: &str) -> Result<Conn, String> {
        let redacted = |e: sqlx::Error| crate::redact::redact(&e.to_string());
        match database {
            Database::Postgres => {
                let options = crate::sink::postgres::tls::connect_options(url)
                    .map_err(redacted)?
                    .application_name("sluice health probe");
                Ok(Conn::Pg(
                    PgConnection::connect_with(&options)
                        .await
                        .map_err(redacted)?,
                ))
            }
            Database::Mysql => {
                let options = crate::sink::mysql::settings::connect_options(url)?;
                Ok(Conn::Mysql(
                    MySqlConnection::connect_with(&options)
                        .await
                        .map_err(redacted)?,
                ))
            }
        }
    }

    /// Runs `ask` once; the number it gave, or why there is none.
    pub async fn read(&mut self, ask: &Ask) -> Result<f64, String> {
        let text = |e: sqlx::Error| crate::redact::redact(&e.to_string());
        match (self, ask) {
            (Conn::Pg(c), Ask::Builtin(b)) => {
                let sql = match b {
                    Builtin::ReplicaLag => PG_REPLICA_LAG,
                    Builtin::ActiveSessions => PG_ACTIVE_SESSIONS,
                };
                let row = sqlx::query(sql).fetch_one(c).await.map_err(text)?;
                pg_number(&row).map_err(|e| match b {
                    Builtin::ReplicaLag => format!(
                        "{e}: on a primary the role cannot read pg_stat_replication (grant pg_monitor); on a standby no transaction has been replayed yet"
                    ),
                    Builtin::ActiveSessions => {
                        format!("{e}: the role cannot see other sessions (grant pg_monitor)")
                    }
                })
            }
            (Conn::Pg(c), Ask::Sql(sql)) => {
                let row = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                    .fetch_one(c)
                    .await
                    .map_err(text)?;
                pg_number(&row)
            }
            (Conn::Mysql(c), Ask::Builtin(Builtin::ActiveSessions)) => {
                let row = sqlx::query("SHOW GLOBAL STATUS LIKE 'Threads_running'")
                    .fetch_one(c)
                    .await
                    .map_err(text)?;
                // Not counting the probe's own thread, which runs this statement.
                Ok((mysql_number(&row, 1)? - 1.0).max(0.0))
            }
            (Conn::Mysql(c), Ask::Builtin(Builtin::ReplicaLag)) => {
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
            (Conn::Mysql(c), Ask::Sql(sql)) => {
                let row = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                    .fetch_one(c)
                    .await
                    .map_err(text)?;
                mysql_number(&row, 0)
            }
        }
    }
}

const NOT_A_NUMBER: &str = "the query's first column is not a number (cast it to float8 or bigint; an interval counts in seconds)";

fn pg_number(row: &PgRow) -> Result<f64, String> {
    use sqlx::postgres::types::PgInterval;
    let value = if let Ok(v) = row.try_get::<Option<f64>, _>(0) {
        v
    } else if let Ok(v) = row.try_get::<Option<i64>, _>(0) {
        v.map(|n| n as f64)
    } else if let Ok(v) = row.try_get::<Option<i32>, _>(0) {
        v.map(f64::from)
    } else if let Ok(v) = row.try_get::<Option<i16>, _>(0) {
        v.map(f64::from)
    } else if let Ok(v) = row.try_get::<Option<f32>, _>(0) {
        v.map(f64::from)
    } else if let Ok(v) = row.try_get::<Option<PgInterval>, _>(0) {
        v.map(|i| {
            (f64::from(i.months) * 30.0 + f64::from(i.days)) * 86_400.0
                + i.microseconds as f64 / 1e6
        })
    } else {
        return Err(NOT_A_NUMBER.into());
    };
    value.ok_or_else(|| "the query returned NULL".into())
}

fn mysql_number(row: &MySqlRow, column: usize) -> Result<f64, String> {
    let value = if let Ok(v) = row.try_get::<Option<f64>, _>(column) {
        v
    } else if let Ok(v) = row.try_get::<Option<i64>, _>(column) {
        v.map(|n| n as f64)
    } else if let Ok(v) = row.try_get::<Option<u64>, _>(column) {
        v.map(|n| n as f64)
    } else if let Ok(v) = row.try_get::<Option<String>, _>(column) {
        match v {
            Some(s) => Some(
                s.trim()
                    .parse::<f64>()
                    .map_err(|_| NOT_A_NUMBER.to_string())?,
            ),
            None => None,
        }
    } else {
        return Err(NOT_A_NUMBER.into());
    };
    value.ok_or_else(|| "the query returned NULL".into())
}
