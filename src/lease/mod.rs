//! Capacity leases: N workers share one sink's capacity without talking to each other.
//! The capacity is cut into partitions; each worker holds some through a store (the
//! leases themselves live there, with the store's clock), and its rate is what it holds.

pub mod keeper;
pub mod postgres;
pub mod redis;

use async_trait::async_trait;
use serde::Serialize;

use crate::control::lease_table::{PoolDefinition, PoolView};

#[derive(Debug, thiserror::Error)]
#[error("lease store: {message}")]
pub struct LeaseError {
    pub message: String,
    /// Waiting cannot fix it (bad credentials, a missing database or privilege): the
    /// worker exits 2 instead of retrying. A store that is busy, full ("too many
    /// clients"), restarting or unreachable is an outage, never fatal.
    pub fatal: bool,
}

impl LeaseError {
    /// An outage: retried with the outage backoff.
    pub fn busy(message: impl Into<String>) -> Self {
        LeaseError {
            message: message.into(),
            fatal: false,
        }
    }

    pub fn fatal(message: impl Into<String>) -> Self {
        LeaseError {
            message: message.into(),
            fatal: true,
        }
    }
}

/// One row of `sluice leases`.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseRow {
    pub partition: u32,
    pub holder: String,
    /// Seconds until it expires by the store's clock (negative: expired).
    pub expires_in_s: f64,
}

/// A worker's `[leases]` settings differ from the pool's definition in the store: it must
/// not start, or the workers would share capacities that add up to more than the sink's.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "leases.{key} = {configured}, but the lease store defines pool {pool:?} with {key} = {stored} \
     (generation {generation}); set leases.{key} = {stored}, or change the pool for every worker \
     with `sluice leases resize`"
)]
pub struct DefinitionMismatch {
    pub pool: String,
    pub key: &'static str,
    pub configured: String,
    pub stored: String,
    pub generation: u32,
}

/// Whether a worker configured with `capacity` in `partitions` leases may join `stored`.
pub fn check_definition(
    pool: &str,
    capacity: f64,
    partitions: u32,
    stored: &PoolDefinition,
) -> Result<(), DefinitionMismatch> {
    let mismatch = |key, configured: String, value: String| DefinitionMismatch {
        pool: pool.to_string(),
        key,
        configured,
        stored: value,
        generation: stored.generation,
    };
    if capacity != stored.capacity {
        return Err(mismatch(
            "capacity",
            capacity.to_string(),
            stored.capacity.to_string(),
        ));
    }
    if partitions != stored.partitions {
        return Err(mismatch(
            "partitions",
            partitions.to_string(),
            stored.partitions.to_string(),
        ));
    }
    Ok(())
}

#[derive(Debug, Clone, Serialize)]
pub struct MemberRow {
    pub member: String,
    pub held: u32,
    pub wants_more: bool,
    pub last_seen_s: f64,
}

/// Where leases live. Every decision about time (expiry) is the store's, not the worker's.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// The pool's definition; stores `capacity` in `partitions` as its first generation if
    /// the pool has none yet.
    async fn define(&self, capacity: f64, partitions: u32) -> Result<PoolDefinition, LeaseError>;

    /// The pool's definition, if it has one (reads only).
    async fn definition(&self) -> Result<Option<PoolDefinition>, LeaseError>;

    /// Changes the pool's definition and starts a new generation: renewals of older leases
    /// are refused, and no new lease is granted while an older one is unexpired.
    async fn resize(&self, capacity: f64, partitions: u32) -> Result<PoolDefinition, LeaseError>;

    /// Records that `member` is alive, holds `held` and does or does not want more;
    /// returns the pool as seen from there.
    async fn heartbeat(
        &self,
        member: &str,
        held: u32,
        wants_more: bool,
    ) -> Result<PoolView, LeaseError>;

    /// Takes one free or expired partition of `generation`, chosen at random; None if none
    /// was free, another worker won the race for it, `generation` is not the pool's, or a
    /// lease of another generation is still unexpired.
    async fn acquire(&self, member: &str, generation: u32) -> Result<Option<u32>, LeaseError>;

    /// Extends the leases `member` still holds in the pool's current generation; returns
    /// the ones it kept.
    async fn renew(&self, member: &str, partitions: &[u32]) -> Result<Vec<u32>, LeaseError>;

    async fn release(&self, member: &str, partitions: &[u32]) -> Result<(), LeaseError>;

    /// Releases everything and forgets the member.
    async fn leave(&self, member: &str) -> Result<(), LeaseError>;

    async fn leases(&self) -> Result<Vec<LeaseRow>, LeaseError>;

    async fn members(&self) -> Result<Vec<MemberRow>, LeaseError>;

    /// The worker is done talking to the store until its next contact: a store may
    /// close its connection, so that a fleet holds connections only while it talks.
    async fn rest(&self) {}
}

/// A name for this worker in the pool: host, process and a random suffix.
pub fn member_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    let suffix: u32 = rand::random();
    format!("{host}-{}-{suffix:08x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diverging_definition_names_the_key_and_the_stored_value() {
        let stored = PoolDefinition {
            capacity: 300.0,
            partitions: 3,
            generation: 4,
        };
        assert_eq!(check_definition("p", 300.0, 3, &stored), Ok(()));
        let e = check_definition("p", 300.0, 6, &stored).unwrap_err();
        assert_eq!((e.key, e.stored.as_str()), ("partitions", "3"));
        let text = e.to_string();
        assert!(text.contains("leases.partitions = 6"), "{text}");
        assert!(text.contains("partitions = 3"), "{text}");
        assert!(text.contains("sluice leases resize"), "{text}");
        let e = check_definition("p", 600.0, 6, &stored).unwrap_err();
        assert_eq!((e.key, e.stored.as_str()), ("capacity", "300"));
    }
}
