//! Leases in PostgreSQL. Each statement is atomic and uses the database's clock (`now()`),
//! so workers' clocks never decide who holds what.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgPool, PgPoolOptions};

use super::{LeaseError, LeaseRow, LeaseStore, MemberRow};
use crate::control::lease_table::PoolView;

pub struct PgLeaseStore {
    pool: PgPool,
    name: String,
    partitions: u32,
    ttl_s: f64,
    /// Every call gives up after this, so an unreachable store never holds a worker
    /// past its leases' local deadlines.
    timeout: Duration,
}

fn err(e: impl std::fmt::Display) -> LeaseError {
    LeaseError(e.to_string())
}

impl PgLeaseStore {
    pub async fn connect(
        url: &str,
        pool: &str,
        partitions: u32,
        ttl: Duration,
    ) -> Result<Self, LeaseError> {
        let timeout = (ttl / 5).clamp(Duration::from_millis(500), Duration::from_secs(5));
        let pg = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(timeout)
            .connect(url)
            .await
            .map_err(|e| LeaseError(format!("cannot connect to the lease store: {e}")))?;
        let store = PgLeaseStore {
            pool: pg,
            name: pool.to_string(),
            partitions,
            ttl_s: ttl.as_secs_f64(),
            timeout,
        };
        store.create_tables().await?;
        Ok(store)
    }

    async fn create_tables(&self) -> Result<(), LeaseError> {
        let mut tx = self.pool.begin().await.map_err(err)?;
        // Workers starting together must not race on CREATE TABLE.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('sluice_leases'))")
            .execute(&mut *tx)
            .await
            .map_err(err)?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS sluice_leases (
                pool text NOT NULL,
                partition integer NOT NULL,
                holder text NOT NULL,
                expires_at timestamptz NOT NULL,
                acquired_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (pool, partition)
            )",
        )
        .execute(&mut *tx)
        .await
        .map_err(err)?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS sluice_lease_members (
                pool text NOT NULL,
                member text NOT NULL,
                heartbeat_at timestamptz NOT NULL,
                held integer NOT NULL,
                wants_more boolean NOT NULL,
                PRIMARY KEY (pool, member)
            )",
        )
        .execute(&mut *tx)
        .await
        .map_err(err)?;
        tx.commit().await.map_err(err)
    }

    async fn timed<T>(
        &self,
        f: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, LeaseError> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(r) => r.map_err(err),
            Err(_) => Err(LeaseError(format!("no answer within {:?}", self.timeout))),
        }
    }
}

fn partitions_i32(p: &[u32]) -> Vec<i32> {
    p.iter().map(|&p| p as i32).collect()
}

#[async_trait]
impl LeaseStore for PgLeaseStore {
    async fn heartbeat(
        &self,
        member: &str,
        held: u32,
        wants_more: bool,
    ) -> Result<PoolView, LeaseError> {
        self.timed(async {
            sqlx::query(
                "INSERT INTO sluice_lease_members (pool, member, heartbeat_at, held, wants_more)
                 VALUES ($1, $2, now(), $3, $4)
                 ON CONFLICT (pool, member) DO UPDATE
                 SET heartbeat_at = now(), held = excluded.held, wants_more = excluded.wants_more",
            )
            .bind(&self.name)
            .bind(member)
            .bind(held as i32)
            .bind(wants_more)
            .execute(&self.pool)
            .await?;
            let others: Vec<(i32, bool)> = sqlx::query_as(
                "SELECT held, wants_more FROM sluice_lease_members
                 WHERE pool = $1 AND member <> $2 AND heartbeat_at > now() - make_interval(secs => $3)",
            )
            .bind(&self.name)
            .bind(member)
            .bind(self.ttl_s)
            .fetch_all(&self.pool)
            .await?;
            let (taken,): (i64,) =
                sqlx::query_as("SELECT count(*) FROM sluice_leases WHERE pool = $1 AND expires_at > now()")
                    .bind(&self.name)
                    .fetch_one(&self.pool)
                    .await?;
            let active = others.len() as u32 + 1;
            let share = self.partitions.div_ceil(active) as i32;
            Ok(PoolView {
                active_members: active,
                other_waiting: others.iter().any(|(h, wants)| *wants && *h < share),
                free: self.partitions.saturating_sub(taken as u32),
            })
        })
        .await
    }

    async fn acquire(&self, member: &str) -> Result<Option<u32>, LeaseError> {
        self.timed(async {
            let row: Option<(i32,)> = sqlx::query_as(
                "WITH candidate AS (
                    SELECT p FROM generate_series(0, $2 - 1) AS p
                    WHERE NOT EXISTS (
                        SELECT 1 FROM sluice_leases l
                        WHERE l.pool = $1 AND l.partition = p AND l.expires_at > now())
                    ORDER BY random() LIMIT 1)
                 INSERT INTO sluice_leases (pool, partition, holder, expires_at)
                 SELECT $1, p, $3, now() + make_interval(secs => $4) FROM candidate
                 ON CONFLICT (pool, partition) DO UPDATE
                 SET holder = excluded.holder, expires_at = excluded.expires_at, acquired_at = now()
                 WHERE sluice_leases.expires_at <= now()
                 RETURNING partition",
            )
            .bind(&self.name)
            .bind(self.partitions as i32)
            .bind(member)
            .bind(self.ttl_s)
            .fetch_optional(&self.pool)
            .await?;
            Ok(row.map(|(p,)| p as u32))
        })
        .await
    }

    async fn renew(&self, member: &str, partitions: &[u32]) -> Result<Vec<u32>, LeaseError> {
        self.timed(async {
            // Holding it still is the proof that nobody else took it, even if it expired.
            let rows: Vec<(i32,)> = sqlx::query_as(
                "UPDATE sluice_leases SET expires_at = now() + make_interval(secs => $4)
                 WHERE pool = $1 AND holder = $2 AND partition = ANY($3)
                 RETURNING partition",
            )
            .bind(&self.name)
            .bind(member)
            .bind(partitions_i32(partitions))
            .bind(self.ttl_s)
            .fetch_all(&self.pool)
            .await?;
            Ok(rows.into_iter().map(|(p,)| p as u32).collect())
        })
        .await
    }

    async fn release(&self, member: &str, partitions: &[u32]) -> Result<(), LeaseError> {
        self.timed(async {
            sqlx::query(
                "DELETE FROM sluice_leases WHERE pool = $1 AND holder = $2 AND partition = ANY($3)",
            )
            .bind(&self.name)
            .bind(member)
            .bind(partitions_i32(partitions))
            .execute(&self.pool)
            .await?;
            Ok(())
        })
        .await
    }

    async fn leave(&self, member: &str) -> Result<(), LeaseError> {
        self.timed(async {
            sqlx::query("DELETE FROM sluice_leases WHERE pool = $1 AND holder = $2")
                .bind(&self.name)
                .bind(member)
                .execute(&self.pool)
                .await?;
            sqlx::query("DELETE FROM sluice_lease_members WHERE pool = $1 AND member = $2")
                .bind(&self.name)
                .bind(member)
                .execute(&self.pool)
                .await?;
            Ok(())
        })
        .await
    }

    async fn leases(&self) -> Result<Vec<LeaseRow>, LeaseError> {
        self.timed(async {
            let rows: Vec<(i32, String, f64)> = sqlx::query_as(
                "SELECT partition, holder, extract(epoch FROM expires_at - now())::float8
                 FROM sluice_leases WHERE pool = $1 ORDER BY partition",
            )
            .bind(&self.name)
            .fetch_all(&self.pool)
            .await?;
            Ok(rows
                .into_iter()
                .map(|(p, holder, s)| LeaseRow {
                    partition: p as u32,
                    holder,
                    expires_in_s: (s * 10.0).round() / 10.0,
                })
                .collect())
        })
        .await
    }

    async fn members(&self) -> Result<Vec<MemberRow>, LeaseError> {
        self.timed(async {
            let rows: Vec<(String, i32, bool, f64)> = sqlx::query_as(
                "SELECT member, held, wants_more, extract(epoch FROM now() - heartbeat_at)::float8
                 FROM sluice_lease_members WHERE pool = $1 ORDER BY member",
            )
            .bind(&self.name)
            .fetch_all(&self.pool)
            .await?;
            Ok(rows
                .into_iter()
                .map(|(member, held, wants_more, s)| MemberRow {
                    member,
                    held: held as u32,
                    wants_more,
                    last_seen_s: (s * 10.0).round() / 10.0,
                })
                .collect())
        })
        .await
    }
}
