//! PostgreSQL: a connection pool, one statement per batch (one round trip), `ON CONFLICT
//! DO NOTHING` on the key so redelivery never duplicates a row, and errors sorted by
//! SQLSTATE so the delivery knows whether to wait, retry, split or stop.

pub(crate) mod catalog;
pub mod coerce;
pub mod layout;
pub(crate) mod nodelay;
pub mod settings;
pub mod sqlstate;
pub mod tables;
pub mod tls;
pub mod upsert;
pub mod url;

use std::time::Duration;

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions, Postgres};
use sqlx::{Executor, SqlSafeStr};

use self::layout::{Layout, MappedColumn};
use self::settings::PostgresSettings;
use self::sqlstate::{Phase, describe, judge};
use self::tables::{Target, guard_columns, inspect, stored_version_kind};
use self::upsert::UpsertLayout;
use super::dead_letters::headers_json;
use super::{Sink, SinkError, WriteOutcome, dead_letter_fingerprint};
use crate::record::{DeadLetter, Row};
use crate::sink::settings::SinkSettings;
use crate::sink::upsert::VersionKind;

/// How long a write waits for a pooled connection before it counts as an outage (and
/// is retried with backoff).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serialises the DDL of workers starting together (see [`catalog::ensure`]).
const CREATE_LOCK: &str = "sluice: create tables";

/// Bytes of COPY data sent at a time.
const COPY_CHUNK: usize = 64 * 1024;

pub struct PostgresSink {
    pool: PgPool,
    layout: Layout,
    /// Upsert mode: the guarded statement that replaces the insert.
    upsert: Option<UpsertLayout>,
    /// Upsert mode: the kind of version the table holds, once known (`sluice_version_kinds`).
    version_kind: tokio::sync::OnceCell<VersionKind>,
    /// The table this sink writes, named in its dead letters.
    table: String,
    /// Rows skipped by the table's own code were logged (once per run).
    skips_said: std::sync::atomic::AtomicBool,
    throttle_sqlstates: Vec<String>,
}

impl PostgresSink {
    /// `sink` gives the keys every kind reads (its `backend` is not read: `own` is).
    pub async fn open(
        sink: &SinkSettings,
        own: &PostgresSettings,
        opening: &super::SinkOpening,
    ) -> Result<Self, SinkError> {
        let fail = |e: &dyn std::fmt::Display| SinkError {
            url: crate::redact::redact(&sink.url),
            message: e.to_string(),
            not_now: false,
        };
        let options = tls::connect_options(&sink.url)
            .map_err(|e| fail(&e))?
            .application_name("sluice")
            // Notices are not news: "already exists, skipping" from workers racing to
            // create a table, at INFO through sqlx.
            .options([("client_min_messages", "warning")]);
        let connections = own
            .max_connections
            .unwrap_or(opening.most_in_flight as u32 + 1);
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .after_connect(|conn, _| {
                Box::pin(async move { nodelay::disable_nagle(conn).await.map(drop) })
            })
            .connect_with(options)
            .await
            // Waited for only when a server answered "not now" (closed for maintenance,
            // starting up, too many connections): one that cannot be reached at all at
            // start may not exist (a wrong host or port), so that fails at once.
            .map_err(|e| SinkError {
                not_now: matches!(e, sqlx::Error::Database(_))
                    && matches!(
                        judge(&e, Phase::Connect, &own.throttle_sqlstates),
                        WriteOutcome::Unavailable(_) | WriteOutcome::Throttled { .. }
                    ),
                ..match crate::tls::certificate_refused(&e) {
                    Some(why) => fail(&format!("TLS handshake failed: {why}")),
                    None => fail(&describe(&e)),
                }
            })?;
        let target = Target::of(sink, own);
        let upserting = target.upsert;
        let (layout, upsert) = match &target.mapped {
            None => (
                Layout::created(&sink.table),
                upserting.then(|| UpsertLayout::created(&sink.table)),
            ),
            Some(mapping) => {
                let key_column = mapping.key_column.as_str();
                let version_column = mapping.version_column.as_str();
                let deleted_column = mapping.deleted_column.as_deref();
                let guard: Vec<(String, String)> = if upserting {
                    std::iter::once(version_column)
                        .chain(deleted_column)
                        .map(|c| (c.to_string(), String::new()))
                        .collect()
                } else {
                    Vec::new()
                };
                let inspected: Vec<(String, String)> =
                    mapping.columns.iter().chain(&guard).cloned().collect();
                let table = inspect(&pool, &sink.table, key_column, &inspected)
                    .await
                    .map_err(|e| fail(&e))?;
                let columns: Vec<MappedColumn> = mapping
                    .columns
                    .iter()
                    .map(|(name, pointer)| MappedColumn {
                        kind: table.kinds[name].clone(),
                        name: name.clone(),
                        pointer: pointer.clone(),
                    })
                    .collect();
                let coerce = own.coerce.unwrap_or_default();
                let upsert = if upserting {
                    guard_columns(&table, version_column, deleted_column).map_err(|e| fail(&e))?;
                    Some(UpsertLayout::mapped(
                        &table.qualified,
                        key_column,
                        version_column,
                        deleted_column,
                        columns.clone(),
                        coerce,
                    ))
                } else {
                    None
                };
                (
                    Layout::mapped(&table.qualified, key_column, columns, coerce),
                    upsert,
                )
            }
        };
        {
            let mut conn = pool.acquire().await.map_err(|e| fail(&describe(&e)))?;
            catalog::ensure(&mut conn, &target.uses(), CREATE_LOCK)
                .await
                .map_err(|e| fail(&describe(&e)))?;
        }
        // What `check` and start-up promise: the statement every batch runs is valid.
        let statement = upsert
            .as_ref()
            .map_or(layout.statement(), UpsertLayout::statement);
        (&pool)
            .prepare(sqlx::AssertSqlSafe(statement.to_string()).into_sql_str())
            .await
            .map_err(|e| {
                fail(&format!(
                    "the write statement does not prepare: {}",
                    describe(&e)
                ))
            })?;
        let version_kind = tokio::sync::OnceCell::new();
        if upserting
            && let Some(kind) = stored_version_kind(&pool, &sink.table)
                .await
                .map_err(|e| fail(&e))?
        {
            let _ = version_kind.set(kind);
        }
        Ok(PostgresSink {
            pool,
            layout,
            upsert,
            version_kind,
            table: sink.table.clone(),
            skips_said: Default::default(),
            throttle_sqlstates: own.throttle_sqlstates.clone(),
        })
    }

    /// The kind of version the table holds: the one recorded, or else this batch's first
    /// (recorded now, so that every worker and every later run compares like with like).
    async fn version_kind(&self, rows: &[Row]) -> Result<Option<VersionKind>, sqlx::Error> {
        if let Some(kind) = self.version_kind.get() {
            return Ok(Some(*kind));
        }
        let Some(first) = rows.iter().find_map(|r| r.version.as_ref()) else {
            return Ok(None);
        };
        // Two statements: the second's snapshot sees a kind another worker claimed at the
        // same moment (the insert waits for it to commit).
        sqlx::query(
            "INSERT INTO sluice_version_kinds (target, kind) VALUES ($1, $2) \
             ON CONFLICT (target) DO NOTHING",
        )
        .bind(&self.table)
        .bind(first.kind.name())
        .execute(&self.pool)
        .await?;
        let kind = stored_version_kind(&self.pool, &self.table)
            .await
            .map_err(sqlx::Error::Protocol)?
            .unwrap_or(first.kind);
        let _ = self.version_kind.set(kind);
        Ok(Some(kind))
    }

    /// Upsert mode: the batch's newest version of each key, applied over older ones only.
    async fn write_upsert(&self, upsert: &UpsertLayout, rows: &[Row]) -> WriteOutcome {
        let kind = match self.version_kind(rows).await {
            Ok(kind) => kind,
            Err(e) => return self.outcome(e, Phase::Statement),
        };
        let mixed: Vec<usize> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.version.as_ref().map(|v| v.kind) != kind)
            .map(|(i, _)| i)
            .collect();
        if !mixed.is_empty() {
            let kind = kind.map_or("none", VersionKind::name);
            return WriteOutcome::Rejected {
                rows: Some(mixed),
                reason: format!(
                    "mixed versions: table {} holds {kind} versions, this record's is another kind (versions of different kinds cannot be compared)",
                    self.table
                ),
            };
        }
        let query = match upsert.upsert(rows) {
            Ok(q) => q,
            Err(refused) => return refused.outcome(),
        };
        let mut conn = match self.connection().await {
            Ok(c) => c,
            Err(outcome) => return outcome,
        };
        let (written, deleted) = match query.fetch_one(&mut *conn).await {
            Ok((written, deleted)) => (written.max(0) as u64, deleted.max(0) as u64),
            Err(e) => return self.failed(&mut conn, e),
        };
        // One version of each key reaches the guard; the rest were superseded.
        let keys = rows
            .iter()
            .map(|r| r.key.as_str())
            .collect::<std::collections::HashSet<_>>()
            .len() as u64;
        let unapplied = keys.saturating_sub(written + deleted);
        // A key not applied is stale when the table holds a version at least as new,
        // else the table's own code skipped it.
        let skipped = if unapplied == 0 {
            0
        } else {
            let not_newer = match upsert.not_newer(rows) {
                Ok(q) => q.fetch_one(&mut *conn).await,
                Err(e) => Err(e),
            };
            match not_newer {
                Ok(n) => (n.max(0) as u64).min(unapplied),
                Err(e) => return self.failed(&mut conn, e),
            }
        };
        if skipped > 0 {
            self.say_skipped(skipped);
        }
        WriteOutcome::Upserted {
            written,
            deleted,
            stale: unapplied - skipped,
            superseded: rows.len() as u64 - keys,
            skipped,
        }
    }

    /// The answer for a write that stored `inserted` rows, found `duplicates` keys there
    /// already, and had `skipped` rows dropped by the table's own code.
    fn written(&self, inserted: u64, duplicates: u64, skipped: u64) -> WriteOutcome {
        if skipped == 0 {
            return WriteOutcome::Written {
                inserted,
                duplicates,
            };
        }
        self.say_skipped(skipped);
        WriteOutcome::SkippedBySink {
            inserted,
            duplicates,
            skipped,
        }
    }

    /// Rows skipped by the table's own code are its doing, not an error: said once per
    /// run, with the table.
    fn say_skipped(&self, skipped: u64) {
        if !self
            .skips_said
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                table = %self.table,
                "the table skipped {skipped} records of a batch (a BEFORE trigger returned NULL, or a rule did instead): counted as skipped_by_sink, not as written, duplicates or stale (said once per run)"
            );
        }
    }

    /// A pooled connection; failing to get one is judged as a connect-phase error.
    async fn connection(&self) -> Result<PoolConnection<Postgres>, WriteOutcome> {
        self.pool
            .acquire()
            .await
            .map_err(|e| self.outcome(e, Phase::Connect))
    }

    /// Judges a statement's error. A connection that met an outage is not reused: after
    /// a failover it may still point at the old primary, now a read-only standby.
    fn failed(&self, conn: &mut PoolConnection<Postgres>, err: sqlx::Error) -> WriteOutcome {
        let outcome = self.outcome(err, Phase::Statement);
        if matches!(outcome, WriteOutcome::Unavailable(_)) {
            conn.close_on_drop();
        }
        outcome
    }

    /// The fast path: the whole batch in one COPY (all or nothing).
    /// The data streams in chunks: no batch-sized buffer, whatever the batch.
    async fn copy(
        conn: &mut PgConnection,
        statement: &str,
        rows: &[Row],
    ) -> Result<u64, sqlx::Error> {
        let mut copy = conn.copy_in_raw(statement).await?;
        let mut chunk = Vec::with_capacity(COPY_CHUNK + 1024);
        for row in rows {
            Layout::copy_line(row, &mut chunk);
            if chunk.len() >= COPY_CHUNK {
                copy.send(chunk.as_slice()).await?;
                chunk.clear();
            }
        }
        if !chunk.is_empty() {
            copy.send(chunk.as_slice()).await?;
        }
        copy.finish().await
    }

    async fn insert_dead_letters(
        conn: &mut PgConnection,
        table: &str,
        letters: &[DeadLetter],
    ) -> Result<(), sqlx::Error> {
        let fingerprints: Vec<String> = letters
            .iter()
            .map(|l| dead_letter_fingerprint(table, l))
            .collect();
        let positions: Vec<String> = letters.iter().map(|l| text(&l.origin)).collect();
        let keys: Vec<Option<String>> =
            letters.iter().map(|l| l.key.as_deref().map(text)).collect();
        let raws: Vec<&[u8]> = letters.iter().map(|l| l.raw.as_slice()).collect();
        let reasons: Vec<String> = letters.iter().map(|l| text(&l.reason)).collect();
        let attempts: Vec<i32> = letters
            .iter()
            .map(|l| i32::try_from(l.attempts).unwrap_or(i32::MAX))
            .collect();
        let targets: Vec<String> = vec![text(table); letters.len()];
        let source_keys: Vec<Option<&[u8]>> =
            letters.iter().map(|l| l.context.key.as_deref()).collect();
        let headers: Vec<Option<String>> =
            letters.iter().map(|l| headers_json(&l.context)).collect();
        sqlx::query(
            "INSERT INTO sluice_dead_letters \
             (fingerprint, position, key, raw, reason, attempts, target, source_key, headers) \
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[], \
               $6::int4[], $7::text[], $8::bytea[], $9::text[]) \
             ON CONFLICT (fingerprint) DO NOTHING",
        )
        .bind(fingerprints)
        .bind(positions)
        .bind(keys)
        .bind(raws)
        .bind(reasons)
        .bind(attempts)
        .bind(targets)
        .bind(source_keys)
        .bind(headers)
        .execute(conn)
        .await?;
        Ok(())
    }

    /// Sorts an error into what the delivery should do about it.
    fn outcome(&self, err: sqlx::Error, phase: Phase) -> WriteOutcome {
        judge(&err, phase, &self.throttle_sqlstates)
    }
}

/// PostgreSQL text cannot hold NUL; a dead letter must be storable whatever it carries.
fn text(s: &str) -> String {
    s.replace('\0', "\u{FFFD}")
}

/// SQLSTATE 23505: a key (or another unique column) is already there.
fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}

#[async_trait]
impl Sink for PostgresSink {
    async fn ping(&self) -> Result<(), String> {
        super::ping_pool(&self.pool).await
    }

    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        if let Some(upsert) = &self.upsert {
            return self.write_upsert(upsert, rows).await;
        }
        let mut conn = match self.connection().await {
            Ok(c) => c,
            Err(outcome) => return outcome,
        };
        let sent = rows.len() as u64;
        if let Some(copy) = self.layout.copy() {
            match Self::copy(&mut conn, copy, rows).await {
                // COPY stops at a duplicate, so a row it did not count was skipped.
                Ok(inserted) => return self.written(inserted, 0, sent.saturating_sub(inserted)),
                // A redelivered key: the insert below absorbs it.
                Err(e) if is_unique_violation(&e) => {}
                Err(e) => return self.failed(&mut conn, e),
            }
        }
        let query = match self.layout.insert(rows) {
            Ok(q) => q,
            Err(refused) => return refused.outcome(),
        };
        let inserted = match query.execute(&mut *conn).await {
            Ok(done) => done.rows_affected(),
            Err(e) => return self.failed(&mut conn, e),
        };
        if inserted == sent {
            return self.written(inserted, 0, 0);
        }
        // Rows not inserted are duplicates when their key is there now, else skipped.
        let absent = match self.layout.absent(rows) {
            Ok(q) => q.fetch_one(&mut *conn).await,
            Err(e) => Err(e),
        };
        match absent {
            Ok(absent) => {
                let skipped = (absent.max(0) as u64).min(sent - inserted);
                self.written(inserted, sent - inserted - skipped, skipped)
            }
            Err(e) => self.failed(&mut conn, e),
        }
    }

    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        let mut conn = match self.connection().await {
            Ok(c) => c,
            Err(outcome) => return outcome,
        };
        match Self::insert_dead_letters(&mut conn, &self.table, letters).await {
            Ok(()) => WriteOutcome::Written {
                inserted: letters.len() as u64,
                duplicates: 0,
            },
            Err(e) => self.failed(&mut conn, e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_letter_text_never_holds_nul() {
        assert_eq!(text("a\0b"), "a\u{FFFD}b");
    }
}
