//! Leases in PostgreSQL. Each statement is atomic and uses the database's clock (`now()`),
//! so workers' clocks never decide who holds what. The pool's definition (capacity,
//! partitions, generation) is a row of `sluice_lease_pools`; every lease carries the
//! generation it was granted under.
//!
//! A worker holds one connection at most, and only while it talks to the store: the
//! keeper closes it after each contact ([`LeaseStore::rest`]), so a fleet far larger
//! than the server's `max_connections` shares one store. A refused connection ("too
//! many clients", a restart) is an outage, reported as such; bad credentials, a missing
//! database or privilege are not ([`LeaseError::fatal`]).

mod statements;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::{Mutex, MutexGuard};

use super::{LeaseError, LeaseRow, LeaseStore, MemberRow};
use crate::control::lease_table::{PoolDefinition, PoolView};
use crate::sink::WriteOutcome;
use crate::sink::postgres::catalog::{self, Right, TableUse};
use crate::sink::postgres::sqlstate::{Phase, describe, judge};

/// What every statement needs to know of the pool.
pub struct Pool {
    name: String,
    ttl_s: f64,
}

pub struct PgLeaseStore {
    options: PgConnectOptions,
    /// The worker's one connection to the store, open between a first call and
    /// [`LeaseStore::rest`].
    conn: Mutex<Option<PgConnection>>,
    pool: Pool,
    /// Every call gives up after this, so an unreachable store never holds a worker
    /// past its leases' local deadlines.
    timeout: Duration,
    /// Whether the tables are there (created by this worker, or found).
    tables: AtomicBool,
    /// Inspection: creates nothing; a pool whose tables do not exist reads as empty.
    read_only: bool,
}

/// How long `sluice leases` and `plan` wait for the store.
const INSPECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// A store error, judged as the sink judges one at connect: waiting cannot fix bad
/// credentials (28000, 28P01), a missing database (3D000), schema, table or privilege
/// (42501), a refused certificate or a malformed URL; everything else — refused or
/// timed-out connections, "too many clients" (53300), a server starting or shutting down
/// (57P03, 57P01) — is an outage.
fn err(e: sqlx::Error) -> LeaseError {
    let message = describe(&e);
    match judge(&e, Phase::Connect, &[]) {
        WriteOutcome::Fatal(_) => LeaseError::fatal(message),
        _ => LeaseError::busy(message),
    }
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
    /// A worker's store. Connects on the first call (the tables are created then), so a
    /// store that is busy at start is an outage like any other; fails only on a bad URL.
    pub fn new(url: &str, pool: &str, ttl: Duration) -> Result<Self, LeaseError> {
        let timeout = (ttl / 5).clamp(Duration::from_millis(500), Duration::from_secs(5));
        Self::open(url, pool, ttl, timeout, false)
    }

    /// A worker's store, connected and with its tables.
    pub async fn connect(url: &str, pool: &str, ttl: Duration) -> Result<Self, LeaseError> {
        let store = Self::new(url, pool, ttl)?;
        drop(store.connection().await?);
        Ok(store)
    }

    /// For inspection (`sluice leases`, `plan`): creates nothing, and waits longer for
    /// answers than a worker, which must not outlive its leases' deadlines, may.
    pub async fn open_existing(url: &str, pool: &str, ttl: Duration) -> Result<Self, LeaseError> {
        let store = Self::open(url, pool, ttl, INSPECTION_TIMEOUT, true)?;
        let mut conn = store.connection().await?;
        let present = store
            .settle(&mut conn, async |c: &mut PgConnection| {
                let (present,): (bool,) = sqlx::query_as(
                    "SELECT to_regclass('sluice_leases') IS NOT NULL \
                     AND to_regclass('sluice_lease_members') IS NOT NULL \
                     AND to_regclass('sluice_lease_pools') IS NOT NULL",
                )
                .persistent(false)
                .fetch_one(c)
                .await?;
                Ok(present)
            })
            .await?;
        store.tables.store(present, Relaxed);
        drop(conn);
        Ok(store)
    }

    fn open(
        url: &str,
        pool: &str,
        ttl: Duration,
        timeout: Duration,
        read_only: bool,
    ) -> Result<Self, LeaseError> {
        let options = connect_options(url)
            .map_err(|e| LeaseError::fatal(format!("cannot connect to the lease store: {e}")))?;
        Ok(PgLeaseStore {
            options,
            conn: Mutex::new(None),
            pool: Pool {
                name: pool.to_string(),
                ttl_s: ttl.as_secs_f64(),
            },
            timeout,
            tables: AtomicBool::new(false),
            read_only,
        })
    }

    /// The connection, opened if it is not, and the lease tables, created if this worker
    /// has not seen them yet.
    async fn connection(&self) -> Result<MutexGuard<'_, Option<PgConnection>>, LeaseError> {
        let mut guard = self.conn.lock().await;
        if guard.is_none() {
            let connect = PgConnection::connect_with(&self.options);
            let conn = match tokio::time::timeout(self.timeout, connect).await {
                Ok(r) => r.map_err(|e| {
                    let e = err(e);
                    LeaseError {
                        message: format!("cannot connect to the lease store: {}", e.message),
                        ..e
                    }
                })?,
                Err(_) => {
                    return Err(LeaseError::busy(format!(
                        "cannot connect to the lease store: no answer within {:?}",
                        self.timeout
                    )));
                }
            };
            *guard = Some(conn);
        }
        if !self.read_only && !self.tables.load(Relaxed) {
            // Workers starting together must not race on CREATE TABLE.
            self.settle(&mut guard, async |c: &mut PgConnection| {
                catalog::ensure(c, &tables(), "sluice_leases").await
            })
            .await?;
            self.tables.store(true, Relaxed);
        }
        Ok(guard)
    }

    /// Runs `f` on the open connection within the timeout; after any failure the
    /// connection is dropped (its state is unknown), and the next call opens another.
    async fn settle<T>(
        &self,
        guard: &mut Option<PgConnection>,
        f: impl AsyncFnOnce(&mut PgConnection) -> Result<T, sqlx::Error>,
    ) -> Result<T, LeaseError> {
        let conn = guard.as_mut().expect("connection() opened it");
        let result = match tokio::time::timeout(self.timeout, f(conn)).await {
            Ok(r) => r.map_err(err),
            Err(_) => Err(LeaseError::busy(format!(
                "no answer within {:?}",
                self.timeout
            ))),
        };
        if result.is_err() {
            *guard = None;
        }
        result
    }

    /// `f` in a transaction on the store's connection, opened if needed.
    async fn call<T>(
        &self,
        f: impl AsyncFnOnce(&mut PgConnection, &Pool) -> Result<T, sqlx::Error>,
    ) -> Result<T, LeaseError> {
        let mut guard = self.connection().await?;
        self.settle(&mut guard, async |c: &mut PgConnection| {
            let mut tx = c.begin().await?;
            let result = f(&mut tx, &self.pool).await?;
            tx.commit().await?;
            Ok(result)
        })
        .await
    }

    fn has_tables(&self) -> bool {
        !self.read_only || self.tables.load(Relaxed)
    }
}

#[async_trait]
impl LeaseStore for PgLeaseStore {
    async fn heartbeat(
        &self,
        member: &str,
        held: u32,
        wants_more: bool,
    ) -> Result<PoolView, LeaseError> {
        self.call(async |c, p| statements::heartbeat(c, p, member, held, wants_more).await)
            .await
    }

    async fn define(&self, capacity: f64, partitions: u32) -> Result<PoolDefinition, LeaseError> {
        self.call(async |c, p| statements::define(c, p, capacity, partitions).await)
            .await
    }

    async fn definition(&self) -> Result<Option<PoolDefinition>, LeaseError> {
        if !self.has_tables() {
            return Ok(None);
        }
        self.call(async |c, p| statements::stored_definition(c, p).await)
            .await
    }

    async fn resize(&self, capacity: f64, partitions: u32) -> Result<PoolDefinition, LeaseError> {
        self.call(async |c, p| statements::resize(c, p, capacity, partitions).await)
            .await
    }

    async fn acquire(&self, member: &str, generation: u32) -> Result<Option<u32>, LeaseError> {
        self.call(async |c, p| statements::acquire(c, p, member, generation).await)
            .await
    }

    async fn renew(&self, member: &str, partitions: &[u32]) -> Result<Vec<u32>, LeaseError> {
        self.call(async |c, p| statements::renew(c, p, member, partitions).await)
            .await
    }

    async fn release(&self, member: &str, partitions: &[u32]) -> Result<(), LeaseError> {
        self.call(async |c, p| statements::release(c, p, member, partitions).await)
            .await
    }

    async fn leave(&self, member: &str) -> Result<(), LeaseError> {
        self.call(async |c, p| statements::leave(c, p, member).await)
            .await
    }

    async fn leases(&self) -> Result<Vec<LeaseRow>, LeaseError> {
        if !self.has_tables() {
            return Ok(Vec::new());
        }
        self.call(async |c, p| statements::leases(c, p).await).await
    }

    async fn members(&self) -> Result<Vec<MemberRow>, LeaseError> {
        if !self.has_tables() {
            return Ok(Vec::new());
        }
        self.call(async |c, p| statements::members(c, p).await)
            .await
    }

    async fn rest(&self) {
        if let Some(conn) = self.conn.lock().await.take() {
            let _ = tokio::time::timeout(self.timeout, conn.close()).await;
        }
    }
}

/// How the lease store is connected to, by a worker and by `sluice check`: nothing is
/// prepared for later (see `statements`) and nothing set for the session — PgBouncer in
/// transaction mode refuses a client that asks for `extra_float_digits` at start-up
/// ("unsupported startup parameter"), and the lease statements read no float as text.
pub fn connect_options(url: &str) -> Result<PgConnectOptions, String> {
    Ok(crate::sink::postgres::tls::connect_options(url)?
        .statement_cache_capacity(0)
        .extra_float_digits(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_store_is_an_outage_and_only_what_waiting_cannot_fix_is_fatal() {
        for busy in [
            sqlx::Error::PoolTimedOut,
            sqlx::Error::Io(std::io::ErrorKind::ConnectionRefused.into()),
            sqlx::Error::Io(std::io::ErrorKind::TimedOut.into()),
            sqlx::Error::Protocol("connection reset".into()),
        ] {
            assert!(!err(busy).fatal);
        }
        assert!(err(sqlx::Error::Configuration("bad sslmode".into())).fatal);
        use crate::sink::postgres::sqlstate::classify;
        use crate::sink::sql_error::ErrorClass;
        // What the store meets at connect and in its statements, by SQLSTATE.
        for (code, fatal) in [
            ("53300", false), // too_many_connections
            ("57P03", false), // cannot_connect_now: starting up
            ("57P01", false), // admin_shutdown: a restart
            ("08006", false), // connection_failure
            ("40001", false), // serialization_failure
            ("28P01", true),  // invalid_password
            ("28000", true),  // invalid_authorization_specification
            ("3D000", true),  // invalid_catalog_name: no such database
            ("42501", true),  // insufficient_privilege
        ] {
            let class = classify(code, None, Phase::Connect, &[]);
            assert_eq!(class == ErrorClass::Fatal, fatal, "{code}: {class:?}");
        }
    }
}
