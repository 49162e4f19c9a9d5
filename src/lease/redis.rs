//! Leases in Redis (`store = "redis://…"`), with the PostgreSQL store's semantics:
//! exclusive partitions that expire by the store's clock, fencing by generation, fair
//! share, one stored definition every worker is checked against. Each step is a Lua
//! script ([`scripts`]), so it is atomic on the server.
//!
//! A worker keeps one connection (a Redis connection costs the server little, and
//! `maxclients` is 10,000 by default); one found broken is replaced once within the same
//! call. Refused or timed-out connections, a server loading its data, out of memory or
//! read-only (a failover) are outages; bad credentials or a missing ACL permission exit 2.
//!
//! Redis may keep nothing on disk: a restart loses every lease at once. The scripts grant
//! nothing until a ttl after that, so a fleet re-acquiring after a restart never adds its
//! old leases (still in use until their local deadlines) to new ones. A pool is only in
//! one Redis: Redis Cluster is not supported (its keys share one hash tag, but the client
//! here speaks to one server).

mod scripts;

use std::time::Duration;

use async_trait::async_trait;
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Client, ErrorKind, FromRedisValue, RedisError, ScriptInvocation,
};
use tokio::sync::Mutex;

use super::{LeaseError, LeaseRow, LeaseStore, MemberRow};
use crate::control::lease_table::{PoolDefinition, PoolView};
use scripts::SCRIPTS;

pub struct RedisLeaseStore {
    client: Client,
    conn: Mutex<Option<MultiplexedConnection>>,
    keys: [String; 3],
    ttl_ms: u64,
    timeout: Duration,
    /// The pool's definition as this worker last saw it: if the store loses the pool, the
    /// worker defines it again from this (see `scripts`).
    known: std::sync::Mutex<Option<PoolDefinition>>,
}

/// How long `sluice leases` and `plan` wait for the store.
const INSPECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `url` names a Redis lease store.
pub fn is_redis_url(url: &str) -> bool {
    url.starts_with("redis://") || url.starts_with("rediss://")
}

/// A store error: what waiting cannot fix is fatal (credentials, an ACL refusal, a
/// malformed URL); everything else — refused, reset or timed-out connections, too many
/// clients, a server loading, out of memory or read-only — is an outage.
fn err(e: RedisError) -> LeaseError {
    let message = e.to_string();
    let fatal = matches!(
        e.kind(),
        ErrorKind::AuthenticationFailed | ErrorKind::InvalidClientConfig
    ) || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"));
    LeaseError { message, fatal }
}

impl RedisLeaseStore {
    /// A worker's store; connects on its first call. Fails only on a malformed URL.
    pub fn new(url: &str, pool: &str, ttl: Duration) -> Result<Self, LeaseError> {
        let timeout = (ttl / 5).clamp(Duration::from_millis(500), Duration::from_secs(5));
        Self::open(url, pool, ttl, timeout)
    }

    /// For inspection: waits longer for answers than a worker may.
    pub fn open_existing(url: &str, pool: &str, ttl: Duration) -> Result<Self, LeaseError> {
        Self::open(url, pool, ttl, INSPECTION_TIMEOUT)
    }

    fn open(url: &str, pool: &str, ttl: Duration, timeout: Duration) -> Result<Self, LeaseError> {
        if url.starts_with("rediss://") {
            crate::tls::install_provider();
        }
        let client = Client::open(url).map_err(|e| {
            LeaseError::fatal(format!(
                "cannot connect to the lease store: {}",
                err(e).message
            ))
        })?;
        let tag = format!("sluice:lease:{{{pool}}}");
        Ok(RedisLeaseStore {
            client,
            conn: Mutex::new(None),
            keys: [
                format!("{tag}:def"),
                format!("{tag}:leases"),
                format!("{tag}:members"),
            ],
            ttl_ms: ttl.as_millis() as u64,
            timeout,
            known: std::sync::Mutex::new(None),
        })
    }

    async fn connect(&self) -> Result<MultiplexedConnection, LeaseError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let connect = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        match tokio::time::timeout(self.timeout, connect).await {
            Ok(r) => r.map_err(|e| {
                let e = err(e);
                LeaseError {
                    message: format!("cannot connect to the lease store: {}", e.message),
                    ..e
                }
            }),
            Err(_) => Err(LeaseError::busy(format!(
                "cannot connect to the lease store: no answer within {:?}",
                self.timeout
            ))),
        }
    }

    /// Runs `script` with the pool's keys and `args`. A kept connection that fails is
    /// replaced once (the server may have closed it while the worker was idle, or
    /// restarted); a fresh one that fails is an answer.
    async fn run<T: FromRedisValue>(
        &self,
        script: &redis::Script,
        args: &[String],
    ) -> Result<T, LeaseError> {
        let mut invocation: ScriptInvocation<'_> = script.prepare_invoke();
        for key in &self.keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(arg);
        }
        let mut guard = self.conn.lock().await;
        let mut reused = guard.is_some();
        loop {
            let mut conn = match guard.take() {
                Some(c) => c,
                None => self.connect().await?,
            };
            let result =
                tokio::time::timeout(self.timeout, invocation.invoke_async(&mut conn)).await;
            match result {
                Ok(Ok(v)) => {
                    *guard = Some(conn);
                    return Ok(v);
                }
                Ok(Err(e)) if reused && (e.is_io_error() || e.is_connection_dropped()) => {
                    reused = false;
                }
                Ok(Err(e)) => return Err(err(e)),
                Err(_) => {
                    return Err(LeaseError::busy(format!(
                        "no answer within {:?}",
                        self.timeout
                    )));
                }
            }
        }
    }

    fn remember(&self, d: PoolDefinition) -> PoolDefinition {
        *self.known.lock().unwrap() = Some(d);
        d
    }

    /// What this worker knew of the pool, as the scripts take it (empty: nothing).
    fn known_args(&self) -> [String; 3] {
        match *self.known.lock().unwrap() {
            Some(d) => [
                d.capacity.to_string(),
                d.partitions.to_string(),
                d.generation.to_string(),
            ],
            None => Default::default(),
        }
    }

    fn definition_args(&self, capacity: f64, partitions: u32) -> Vec<String> {
        vec![
            capacity.to_string(),
            partitions.to_string(),
            self.ttl_ms.to_string(),
        ]
    }
}

fn definition(
    (capacity, partitions, generation): (String, u32, u32),
) -> Result<PoolDefinition, LeaseError> {
    let capacity = capacity.parse().map_err(|_| {
        LeaseError::fatal(format!("the stored capacity {capacity:?} is not a number"))
    })?;
    Ok(PoolDefinition {
        capacity,
        partitions,
        generation,
    })
}

fn partitions(p: &[u32]) -> impl Iterator<Item = String> + '_ {
    p.iter().map(u32::to_string)
}

#[async_trait]
impl LeaseStore for RedisLeaseStore {
    async fn define(&self, capacity: f64, partitions: u32) -> Result<PoolDefinition, LeaseError> {
        let row = self
            .run(&SCRIPTS.define, &self.definition_args(capacity, partitions))
            .await?;
        Ok(self.remember(definition(row)?))
    }

    async fn definition(&self) -> Result<Option<PoolDefinition>, LeaseError> {
        let row: Option<(String, u32, u32)> = self.run(&SCRIPTS.definition, &[]).await?;
        row.map(definition).transpose()
    }

    async fn resize(&self, capacity: f64, partitions: u32) -> Result<PoolDefinition, LeaseError> {
        let row = self
            .run(&SCRIPTS.resize, &self.definition_args(capacity, partitions))
            .await?;
        Ok(self.remember(definition(row)?))
    }

    async fn heartbeat(
        &self,
        member: &str,
        held: u32,
        wants_more: bool,
    ) -> Result<PoolView, LeaseError> {
        let mut args = vec![
            member.to_string(),
            held.to_string(),
            u8::from(wants_more).to_string(),
            self.ttl_ms.to_string(),
        ];
        args.extend(self.known_args());
        let row: Option<(String, u32, u32, u32, u8, u32, u64)> =
            self.run(&SCRIPTS.heartbeat, &args).await?;
        let (capacity, partitions, generation, active, waiting, free, quiet) = row.ok_or_else(|| {
            LeaseError::busy(
                "the lease store holds no definition of the pool (lost, and this worker knew none)",
            )
        })?;
        let definition = self.remember(definition((capacity, partitions, generation))?);
        Ok(PoolView {
            active_members: active,
            other_waiting: waiting == 1,
            free,
            definition,
            grants_in: (quiet > 0).then(|| Duration::from_millis(quiet)),
        })
    }

    async fn acquire(&self, member: &str, generation: u32) -> Result<Option<u32>, LeaseError> {
        let pick: u32 = rand::random();
        let args = [
            member.to_string(),
            generation.to_string(),
            self.ttl_ms.to_string(),
            pick.to_string(),
        ];
        self.run(&SCRIPTS.acquire, &args).await
    }

    async fn renew(&self, member: &str, held: &[u32]) -> Result<Vec<u32>, LeaseError> {
        let mut args = vec![member.to_string(), self.ttl_ms.to_string()];
        args.extend(self.known_args());
        args.extend(partitions(held));
        self.run(&SCRIPTS.renew, &args).await
    }

    async fn release(&self, member: &str, held: &[u32]) -> Result<(), LeaseError> {
        let mut args = vec![member.to_string()];
        args.extend(partitions(held));
        self.run::<()>(&SCRIPTS.release, &args).await
    }

    async fn leave(&self, member: &str) -> Result<(), LeaseError> {
        self.run::<()>(&SCRIPTS.leave, &[member.to_string()]).await
    }

    async fn leases(&self) -> Result<Vec<LeaseRow>, LeaseError> {
        let rows: Vec<(u32, String, i64)> = self.run(&SCRIPTS.leases, &[]).await?;
        let mut rows: Vec<LeaseRow> = rows
            .into_iter()
            .map(|(partition, holder, ms)| LeaseRow {
                partition,
                holder,
                expires_in_s: (ms as f64 / 100.0).round() / 10.0,
            })
            .collect();
        rows.sort_by_key(|r| r.partition);
        Ok(rows)
    }

    async fn members(&self) -> Result<Vec<MemberRow>, LeaseError> {
        let rows: Vec<(String, u32, u8, i64)> = self.run(&SCRIPTS.members, &[]).await?;
        let mut rows: Vec<MemberRow> = rows
            .into_iter()
            .map(|(member, held, wants, ms)| MemberRow {
                member,
                held,
                wants_more: wants == 1,
                last_seen_s: (ms as f64 / 100.0).round() / 10.0,
            })
            .collect();
        rows.sort_by(|a, b| a.member.cmp(&b.member));
        Ok(rows)
    }
}
