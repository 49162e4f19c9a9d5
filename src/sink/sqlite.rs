//! SQLite: the embedded default. One connection (SQLite has one writer anyway), WAL, one
//! transaction per batch, `ON CONFLICT(key) DO NOTHING` so redelivery never duplicates.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, QueryBuilder, Sqlite};

use super::dead_letters::DeadLetterStore;
use super::dead_letters::sqlite::SqliteDeadLetters;
use super::identifier::quote;
use super::{Sink, SinkError, WriteOutcome};
use crate::record::{DeadLetter, Row};
use crate::sink::settings::SinkSettings;

/// SQLite allows 32,766 bound parameters per statement; three per row.
pub(crate) const ROWS_PER_STATEMENT: usize = 10_000;

pub struct SqliteSink {
    pool: SqlitePool,
    insert_head: String,
    dead_letters: SqliteDeadLetters,
}

/// One connection (SQLite has one writer), WAL, the file created if missing — readable
/// by its owner only (0600): it holds raw records and dead letters. SQLite gives its
/// `-wal` and `-shm` files the database file's mode.
pub(crate) async fn connect(url: &str) -> Result<SqlitePool, sqlx::Error> {
    let options = SqliteConnectOptions::from_str(url)?;
    super::private_file::create(options.get_filename())?;
    let options = options
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(10));
    SqlitePoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(60))
        .connect_with(options)
        .await
}

impl SqliteSink {
    pub async fn open(config: &SinkSettings) -> Result<Self, SinkError> {
        let fail = |e: &dyn std::fmt::Display| SinkError {
            url: config.url.clone(),
            message: e.to_string(),
            not_now: false,
        };
        let pool = connect(&config.url).await.map_err(|e| fail(&e))?;
        let table = quote(&config.table);
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {table} (
                key TEXT PRIMARY KEY,
                payload TEXT NOT NULL,
                source TEXT,
                ingested_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
            )"
        );
        sqlx::query(AssertSqlSafe(ddl))
            .execute(&pool)
            .await
            .map_err(|e| fail(&e))?;
        let dead_letters = SqliteDeadLetters::create(pool.clone(), &config.table)
            .await
            .map_err(|e| fail(&e))?;
        Ok(SqliteSink {
            pool,
            insert_head: format!("INSERT INTO {table} (key, payload, source) "),
            dead_letters,
        })
    }

    async fn insert(&self, rows: &[Row]) -> Result<u64, sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        let inserted = self.insert_on(&mut conn, rows).await;
        if inserted.is_err() {
            discard_after_failure(&mut conn);
        }
        inserted
    }

    async fn insert_on(
        &self,
        conn: &mut sqlx::SqliteConnection,
        rows: &[Row],
    ) -> Result<u64, sqlx::Error> {
        let mut tx = sqlx::Connection::begin(conn).await?;
        let mut inserted = 0;
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            let mut q = QueryBuilder::<Sqlite>::new(self.insert_head.as_str());
            q.push_values(chunk, |mut b, row| {
                b.push_bind(row.key.as_str())
                    .push_bind(row.payload.as_str())
                    .push_bind(row.origin.as_str());
            });
            q.push(" ON CONFLICT(key) DO NOTHING");
            inserted += q.build().execute(&mut *tx).await?.rows_affected();
        }
        tx.commit().await?;
        Ok(inserted)
    }
}

/// Closes a connection on which a write failed instead of handing it back to the pool.
/// SQLite rolls a transaction back by itself on some errors (a full disk); sqlx then still
/// counts it open, its next `BEGIN` becomes a savepoint and its next "commit" can report
/// success while nothing is committed: rows and dead letters counted, the file empty.
/// A fresh connection starts clean.
pub(crate) fn discard_after_failure(conn: &mut PoolConnection<Sqlite>) {
    conn.close_on_drop();
}

/// Sorts SQLite's result codes into what the pipeline should do about them.
pub(crate) fn classify(err: sqlx::Error) -> WriteOutcome {
    match &err {
        sqlx::Error::Database(db) => {
            // Extended result codes; the primary code is the low byte.
            let code = db.code().and_then(|c| c.parse::<i32>().ok()).unwrap_or(0);
            match code & 0xff {
                5 | 6 => WriteOutcome::Transient(err.to_string()), // BUSY, LOCKED
                10 | 13 | 14 | 8 => WriteOutcome::Unavailable(err.to_string()), // IOERR, FULL, CANTOPEN, READONLY
                18 | 19 | 20 | 25 => WriteOutcome::Rejected {
                    rows: None,
                    reason: format!("sqlite: {}", db.message()),
                }, // TOOBIG, CONSTRAINT, MISMATCH, RANGE
                _ => WriteOutcome::Fatal(err.to_string()),
            }
        }
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => {
            WriteOutcome::Unavailable(err.to_string())
        }
        _ => WriteOutcome::Fatal(err.to_string()),
    }
}

#[async_trait]
impl Sink for SqliteSink {
    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        match self.insert(rows).await {
            Ok(inserted) => WriteOutcome::Written {
                inserted,
                duplicates: rows.len() as u64 - inserted,
            },
            Err(e) => classify(e),
        }
    }

    async fn ping(&self) -> Result<(), String> {
        super::ping_pool(&self.pool).await
    }

    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        self.dead_letters.store(letters).await
    }
}
