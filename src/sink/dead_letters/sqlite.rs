//! Dead letters in a SQLite table, `sluice_dead_letters`: the SQLite sink keeps them next to
//! its rows (sharing its connection), and any other sink may keep them in a SQLite file.

use async_trait::async_trait;
use sqlx::sqlite::SqlitePool;
use sqlx::{QueryBuilder, Sqlite};

use super::DeadLetterStore;
use crate::record::DeadLetter;
use crate::sink::sqlite::{ROWS_PER_STATEMENT, classify, connect};
use crate::sink::{SinkError, WriteOutcome, dead_letter_fingerprint};

pub struct SqliteDeadLetters {
    pool: SqlitePool,
}

impl SqliteDeadLetters {
    /// A store in its own database file.
    pub async fn open(url: &str) -> Result<Self, SinkError> {
        let fail = |e: sqlx::Error| SinkError {
            url: url.to_string(),
            message: format!("dead-letter store: {e}"),
        };
        let pool = connect(url).await.map_err(fail)?;
        Self::create(pool).await.map_err(fail)
    }

    /// A store over an existing connection; creates the table if missing.
    pub async fn create(pool: SqlitePool) -> Result<Self, sqlx::Error> {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS sluice_dead_letters (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                fingerprint TEXT NOT NULL UNIQUE,
                position TEXT NOT NULL,
                key TEXT,
                raw BLOB NOT NULL,
                reason TEXT NOT NULL,
                attempts INTEGER NOT NULL,
                failed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
            )",
        )
        .execute(&pool)
        .await?;
        Ok(SqliteDeadLetters { pool })
    }

    /// Inserts the letters in one transaction; returns how many were new.
    async fn insert(&self, letters: &[DeadLetter]) -> Result<u64, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let mut inserted = 0;
        for chunk in letters.chunks(ROWS_PER_STATEMENT / 2) {
            let mut q = QueryBuilder::<Sqlite>::new(
                "INSERT INTO sluice_dead_letters (fingerprint, position, key, raw, reason, attempts) ",
            );
            q.push_values(chunk, |mut b, l| {
                b.push_bind(dead_letter_fingerprint(l))
                    .push_bind(l.origin.as_str())
                    .push_bind(l.key.as_deref())
                    .push_bind(l.raw.as_slice())
                    .push_bind(l.reason.as_str())
                    .push_bind(i64::from(l.attempts));
            });
            q.push(" ON CONFLICT(fingerprint) DO NOTHING");
            inserted += q.build().execute(&mut *tx).await?.rows_affected();
        }
        tx.commit().await?;
        Ok(inserted)
    }
}

#[async_trait]
impl DeadLetterStore for SqliteDeadLetters {
    async fn store(&self, letters: &[DeadLetter]) -> WriteOutcome {
        match self.insert(letters).await {
            Ok(inserted) => WriteOutcome::Written {
                inserted,
                duplicates: letters.len() as u64 - inserted,
            },
            Err(e) => classify(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(key: &str) -> DeadLetter {
        DeadLetter {
            origin: format!("in.ndjson:{key}"),
            key: Some(key.into()),
            raw: format!("{{\"id\":\"{key}\"}}").into_bytes(),
            reason: "HTTP 422".into(),
            attempts: 1,
        }
    }

    #[tokio::test]
    async fn stores_once_per_letter_in_its_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("dl.db").display());
        let store = SqliteDeadLetters::open(&url).await.unwrap();
        assert_eq!(
            store.store(&[letter("a"), letter("b")]).await,
            WriteOutcome::Written {
                inserted: 2,
                duplicates: 0
            }
        );
        assert_eq!(
            store.store(&[letter("b"), letter("c")]).await,
            WriteOutcome::Written {
                inserted: 1,
                duplicates: 1
            }
        );
        let rows: Vec<(String, String, i64)> =
            sqlx::query_as("SELECT key, reason, attempts FROM sluice_dead_letters ORDER BY key")
                .fetch_all(&store.pool)
                .await
                .unwrap();
        let keys: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(keys, ["a", "b", "c"]);
        assert!(rows.iter().all(|r| r.1 == "HTTP 422" && r.2 == 1));
    }
}
