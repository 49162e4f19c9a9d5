//! Dead letters in a SQLite table, `sluice_dead_letters`: the SQLite sink keeps them next to
//! its rows (sharing its connection), and any other sink may keep them in a SQLite file.

use async_trait::async_trait;
use sqlx::sqlite::SqlitePool;
use sqlx::{AssertSqlSafe, QueryBuilder, Sqlite};

use super::{DeadLetterStore, headers_json};
use crate::record::DeadLetter;
use crate::sink::sqlite::{ROWS_PER_STATEMENT, classify, connect, discard_after_failure};
use crate::sink::{SinkError, WriteOutcome, dead_letter_fingerprint};

pub struct SqliteDeadLetters {
    pool: SqlitePool,
    target: String,
}

/// Columns added since the table was first shipped: an older table gets them on opening.
const ADDED_COLUMNS: [(&str, &str); 3] = [
    ("target", "TEXT"),
    ("source_key", "BLOB"),
    ("headers", "TEXT"),
];

impl SqliteDeadLetters {
    /// A store in its own database file, for letters bound for `target`.
    pub async fn open(url: &str, target: &str) -> Result<Self, SinkError> {
        let fail = |e: sqlx::Error| SinkError {
            url: url.to_string(),
            message: format!("dead-letter store: {e}"),
            not_now: false,
        };
        let pool = connect(url).await.map_err(fail)?;
        Self::create(pool, target).await.map_err(fail)
    }

    /// A store over an existing connection; creates the table if missing, adds the columns
    /// an older one lacks.
    pub async fn create(pool: SqlitePool, target: &str) -> Result<Self, sqlx::Error> {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS sluice_dead_letters (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                fingerprint TEXT NOT NULL UNIQUE,
                position TEXT NOT NULL,
                key TEXT,
                raw BLOB NOT NULL,
                reason TEXT NOT NULL,
                attempts INTEGER NOT NULL,
                failed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
                target TEXT,
                source_key BLOB,
                headers TEXT
            )",
        )
        .execute(&pool)
        .await?;
        let present: Vec<String> =
            sqlx::query_scalar("SELECT name FROM pragma_table_info('sluice_dead_letters')")
                .fetch_all(&pool)
                .await?;
        for (column, kind) in ADDED_COLUMNS {
            if !present.iter().any(|p| p == column) {
                let ddl = format!("ALTER TABLE sluice_dead_letters ADD COLUMN {column} {kind}");
                sqlx::query(AssertSqlSafe(ddl)).execute(&pool).await?;
            }
        }
        Ok(SqliteDeadLetters {
            pool,
            target: target.to_string(),
        })
    }

    /// Inserts the letters in one transaction; returns how many were new.
    async fn insert(&self, letters: &[DeadLetter]) -> Result<u64, sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        let inserted = self.insert_on(&mut conn, letters).await;
        if inserted.is_err() {
            discard_after_failure(&mut conn);
        }
        inserted
    }

    async fn insert_on(
        &self,
        conn: &mut sqlx::SqliteConnection,
        letters: &[DeadLetter],
    ) -> Result<u64, sqlx::Error> {
        let mut tx = sqlx::Connection::begin(conn).await?;
        let mut inserted = 0;
        for chunk in letters.chunks(ROWS_PER_STATEMENT / 3) {
            let mut q = QueryBuilder::<Sqlite>::new(
                "INSERT INTO sluice_dead_letters \
                 (fingerprint, position, key, raw, reason, attempts, target, source_key, headers) ",
            );
            q.push_values(chunk, |mut b, l| {
                b.push_bind(dead_letter_fingerprint(&self.target, l))
                    .push_bind(l.origin.as_str())
                    .push_bind(l.key.as_deref())
                    .push_bind(l.raw.as_slice())
                    .push_bind(l.reason.as_str())
                    .push_bind(i64::from(l.attempts))
                    .push_bind(self.target.as_str())
                    .push_bind(l.context.key.as_deref())
                    .push_bind(headers_json(&l.context));
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
            context: Default::default(),
        }
    }

    #[tokio::test]
    async fn stores_once_per_letter_in_its_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("dl.db").display());
        let store = SqliteDeadLetters::open(&url, "records").await.unwrap();
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

#[cfg(test)]
mod migration_tests {
    use super::*;
    use crate::record::SourceContext;

    #[tokio::test]
    async fn an_older_table_gains_the_context_columns_and_keeps_its_letters() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("dl.db").display());
        let pool = connect(&url).await.unwrap();
        sqlx::query(
            "CREATE TABLE sluice_dead_letters (
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
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO sluice_dead_letters (fingerprint, position, raw, reason, attempts) \
             VALUES ('old', 'in:1', x'7b', 'malformed JSON', 1)",
        )
        .execute(&pool)
        .await
        .unwrap();
        let store = SqliteDeadLetters::create(pool.clone(), "orders")
            .await
            .unwrap();
        let letter = DeadLetter {
            origin: "orders/0/7".into(),
            key: None,
            raw: Vec::new(),
            reason: "tombstone".into(),
            attempts: 1,
            context: Box::new(SourceContext {
                key: Some(b"order-7".to_vec()),
                headers: vec![("trace".into(), Some(b"t"[..].into()))],
                tombstone: true,
            }),
        };
        assert!(matches!(
            store.store(&[letter]).await,
            WriteOutcome::Written { inserted: 1, .. }
        ));
        // Opening again finds the columns there.
        SqliteDeadLetters::create(pool.clone(), "orders")
            .await
            .unwrap();
        type Stored = (String, Option<String>, Option<Vec<u8>>, Option<String>);
        let rows: Vec<Stored> = sqlx::query_as(
            "SELECT position, target, source_key, headers FROM sluice_dead_letters ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(rows[0], ("in:1".into(), None, None, None));
        assert_eq!(rows[1].1.as_deref(), Some("orders"));
        assert_eq!(rows[1].2.as_deref(), Some(&b"order-7"[..]));
        assert_eq!(
            rows[1].3.as_deref(),
            Some(r#"[{"name":"trace","value":"t"}]"#)
        );
    }
}
