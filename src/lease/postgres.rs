//! Leases in PostgreSQL. Each statement is atomic and uses the database's clock (`now()`),
//! so workers' clocks never decide who holds what. The pool's definition (capacity,
//! partitions, generation) is a row of `sluice_lease_pools`; every lease carries the
//! generation it was granted under.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgPool, PgPoolOptions};

use super::{LeaseError, LeaseRow, LeaseStore, MemberRow};
use crate::control::lease_table::{PoolDefinition, PoolView};
use crate::sink::postgres::catalog::{self, Right, TableUse};
use crate::sink::postgres::sqlstate::describe;

pub struct PgLeaseStore {
    pool: PgPool,
    name: String,
    ttl_s: f64,
    /// Every call gives up after this, so an unreachable store never holds a worker
    /// past its leases' local deadlines.
    timeout: Duration,
    /// False when opened read-only on a store whose tables do not exist yet: the pool
    /// reads as empty.
    tables: bool,
}

/// How long `sluice leases` and `plan` wait for the store.
const INSPECTION_TIMEOUT: Duration = Duration::from_secs(5);

fn err(e: sqlx::Error) -> LeaseError {
    LeaseError(describe(&e))
}

/// The lease store's tables, the statements creating them, and the rights a worker uses
/// on each (`sluice check` asks for them).
pub fn tables() -> Vec<TableUse> {
    use Right::{Delete, Insert, Select, Update};
    let leases = TableUse {
        // Leases taken before pools had definitions belong to their first generation.
        added: vec![("generation", "integer NOT NULL DEFAULT 1")],
        ..TableUse::owned(
            "sluice_leases",
            "lease table",
            "CREATE TABLE IF NOT EXISTS sluice_leases (
                pool text NOT NULL,
                partition integer NOT NULL,
                holder text NOT NULL,
                expires_at timestamptz NOT NULL,
                acquired_at timestamptz NOT NULL DEFAULT now(),
                generation integer NOT NULL DEFAULT 1,
                PRIMARY KEY (pool, partition)
            )"
            .into(),
            &[Select, Insert, Update, Delete],
        )
    };
    let pools = TableUse::owned(
        "sluice_lease_pools",
        "lease table",
        "CREATE TABLE IF NOT EXISTS sluice_lease_pools (
            pool text PRIMARY KEY,
            capacity float8 NOT NULL,
            partitions integer NOT NULL,
            generation integer NOT NULL DEFAULT 1,
            changed_at timestamptz NOT NULL DEFAULT now()
        )"
        .into(),
        &[Select, Insert, Update],
    );
    let members = TableUse::owned(
        "sluice_lease_members",
        "lease table",
        "CREATE TABLE IF NOT EXISTS sluice_lease_members (
            pool text NOT NULL,
            member text NOT NULL,
            heartbeat_at timestamptz NOT NULL,
            held integer NOT NULL,
            wants_more boolean NOT NULL,
            PRIMARY KEY (pool, member)
        )"
        .into(),
        &[Select, Insert, Update, Delete],
    );
    vec![leases, pools, members]
}

impl PgLeaseStore {
    pub async fn connect(url: &str, pool: &str, ttl: Duration) -> Result<Self, LeaseError> {
        let timeout = (ttl / 5).clamp(Duration::from_millis(500), Duration::from_secs(5));
        let store = Self::open(url, pool, ttl, timeout).await?;
        store.create_tables().await?;
        Ok(store)
    }

    /// For inspection (`sluice leases`, `plan`): creates nothing, and waits longer for
    /// answers than a worker, which must not outlive its leases' deadlines, may.
    pub async fn open_existing(url: &str, pool: &str, ttl: Duration) -> Result<Self, LeaseError> {
        let mut store = Self::open(url, pool, ttl, INSPECTION_TIMEOUT).await?;
        let (present,): (bool,) = store
            .timed(
                sqlx::query_as(
                    "SELECT to_regclass('sluice_leases') IS NOT NULL \
                     AND to_regclass('sluice_lease_members') IS NOT NULL \
                     AND to_regclass('sluice_lease_pools') IS NOT NULL",
                )
                .fetch_one(&store.pool),
            )
            .await?;
        store.tables = present;
        Ok(store)
    }

    async fn open(
        url: &str,
        pool: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Self, LeaseError> {
        let options = crate::sink::postgres::tls::connect_options(url)
            .map_err(|e| LeaseError(format!("cannot connect to the lease store: {e}")))?
            // "already exists, skipping" from workers racing to create a table is no news.
            .options([("client_min_messages", "warning")]);
        let connect = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(timeout)
            .connect_with(options);
        let pg = match tokio::time::timeout(timeout, connect).await {
            Ok(r) => r.map_err(|e| {
                LeaseError(format!(
                    "cannot connect to the lease store: {}",
                    describe(&e)
                ))
            })?,
            Err(_) => {
                return Err(LeaseError(format!(
                    "cannot connect to the lease store: no answer within {timeout:?}"
                )));
            }
        };
        Ok(PgLeaseStore {
            pool: pg,
            name: pool.to_string(),
            ttl_s: ttl.as_secs_f64(),
            timeout,
            tables: true,
        })
    }

    /// Creates the lease tables that are missing (only those: a role with the rights of
    /// [`tables`] on tables made beforehand runs without CREATE on the schema).
    async fn create_tables(&self) -> Result<(), LeaseError> {
        // Workers starting together must not race on CREATE TABLE.
        catalog::ensure(&self.pool, &tables(), "sluice_leases")
            .await
            .map_err(err)
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

type DefinitionRow = (f64, i32, i32);

fn definition((capacity, partitions, generation): DefinitionRow) -> PoolDefinition {
    PoolDefinition {
        capacity,
        partitions: partitions as u32,
        generation: generation as u32,
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
            let row: DefinitionRow = sqlx::query_as(
                "SELECT capacity, partitions, generation FROM sluice_lease_pools WHERE pool = $1",
            )
            .bind(&self.name)
            .fetch_one(&self.pool)
            .await?;
            let definition = definition(row);
            // Leases of an older generation block new ones until they are gone.
            let (taken, older): (i64, i64) = sqlx::query_as(
                "SELECT count(*) FILTER (WHERE generation = $2), count(*) FILTER (WHERE generation <> $2)
                 FROM sluice_leases WHERE pool = $1 AND expires_at > now()",
            )
            .bind(&self.name)
            .bind(definition.generation as i32)
            .fetch_one(&self.pool)
            .await?;
            let active = others.len() as u32 + 1;
            let share = definition.partitions.div_ceil(active) as i32;
            Ok(PoolView {
                active_members: active,
                other_waiting: others.iter().any(|(h, wants)| *wants && *h < share),
                free: if older > 0 {
                    0
                } else {
                    definition.partitions.saturating_sub(taken as u32)
                },
                definition,
            })
        })
        .await
    }

    async fn define(&self, capacity: f64, partitions: u32) -> Result<PoolDefinition, LeaseError> {
        self.timed(async {
            sqlx::query(
                "INSERT INTO sluice_lease_pools (pool, capacity, partitions) VALUES ($1, $2, $3)
                 ON CONFLICT (pool) DO NOTHING",
            )
            .bind(&self.name)
            .bind(capacity)
            .bind(partitions as i32)
            .execute(&self.pool)
            .await?;
            let row: DefinitionRow = sqlx::query_as(
                "SELECT capacity, partitions, generation FROM sluice_lease_pools WHERE pool = $1",
            )
            .bind(&self.name)
            .fetch_one(&self.pool)
            .await?;
            Ok(definition(row))
        })
        .await
    }

    async fn definition(&self) -> Result<Option<PoolDefinition>, LeaseError> {
        if !self.tables {
            return Ok(None);
        }
        self.timed(async {
            let row: Option<DefinitionRow> = sqlx::query_as(
                "SELECT capacity, partitions, generation FROM sluice_lease_pools WHERE pool = $1",
            )
            .bind(&self.name)
            .fetch_optional(&self.pool)
            .await?;
            Ok(row.map(definition))
        })
        .await
    }

    async fn resize(&self, capacity: f64, partitions: u32) -> Result<PoolDefinition, LeaseError> {
        self.timed(async {
            // Waits for acquisitions in progress (they hold the row FOR SHARE): a lease of
            // the old generation is either committed before the change or never granted.
            let row: DefinitionRow = sqlx::query_as(
                "INSERT INTO sluice_lease_pools (pool, capacity, partitions) VALUES ($1, $2, $3)
                 ON CONFLICT (pool) DO UPDATE
                 SET capacity = excluded.capacity, partitions = excluded.partitions,
                     generation = sluice_lease_pools.generation + 1, changed_at = now()
                 RETURNING capacity, partitions, generation",
            )
            .bind(&self.name)
            .bind(capacity)
            .bind(partitions as i32)
            .fetch_one(&self.pool)
            .await?;
            Ok(definition(row))
        })
        .await
    }

    async fn acquire(&self, member: &str, generation: u32) -> Result<Option<u32>, LeaseError> {
        self.timed(async {
            // Only under the pool's current generation, and only once no lease of another
            // generation is unexpired: old and new leases never add up.
            let row: Option<(i32,)> = sqlx::query_as(
                "WITH def AS (
                    SELECT partitions, generation FROM sluice_lease_pools
                    WHERE pool = $1 AND generation = $4
                    FOR SHARE),
                 candidate AS (
                    SELECT p FROM def, generate_series(0, def.partitions - 1) AS p
                    WHERE NOT EXISTS (
                        SELECT 1 FROM sluice_leases l
                        WHERE l.pool = $1 AND l.expires_at > now()
                          AND (l.partition = p OR l.generation <> def.generation))
                    ORDER BY random() LIMIT 1)
                 INSERT INTO sluice_leases (pool, partition, holder, expires_at, generation)
                 SELECT $1, p, $2, now() + make_interval(secs => $3), $4 FROM candidate
                 ON CONFLICT (pool, partition) DO UPDATE
                 SET holder = excluded.holder, expires_at = excluded.expires_at, acquired_at = now(),
                     generation = excluded.generation
                 WHERE sluice_leases.expires_at <= now()
                 RETURNING partition",
            )
            .bind(&self.name)
            .bind(member)
            .bind(self.ttl_s)
            .bind(generation as i32)
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
                   AND generation = (SELECT generation FROM sluice_lease_pools WHERE pool = $1)
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
        if !self.tables {
            return Ok(Vec::new());
        }
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
        if !self.tables {
            return Ok(Vec::new());
        }
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
