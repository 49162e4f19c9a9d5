//! Capacity leases: N workers share one sink's capacity without talking to each other.
//! The capacity is cut into partitions; each worker holds some through a store (the
//! leases themselves live there, with the store's clock), and its rate is what it holds.

pub mod keeper;
pub mod postgres;

use async_trait::async_trait;
use serde::Serialize;

use crate::control::lease_table::PoolView;

#[derive(Debug, thiserror::Error)]
#[error("lease store: {0}")]
pub struct LeaseError(pub String);

/// One row of `sluice leases`.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseRow {
    pub partition: u32,
    pub holder: String,
    /// Seconds until it expires by the store's clock (negative: expired).
    pub expires_in_s: f64,
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
    /// Records that `member` is alive, holds `held` and does or does not want more;
    /// returns the pool as seen from there.
    async fn heartbeat(
        &self,
        member: &str,
        held: u32,
        wants_more: bool,
    ) -> Result<PoolView, LeaseError>;

    /// Takes one free or expired partition, chosen at random; None if none was free (or
    /// another worker won the race for it).
    async fn acquire(&self, member: &str) -> Result<Option<u32>, LeaseError>;

    /// Extends the leases `member` still holds; returns the ones it kept.
    async fn renew(&self, member: &str, partitions: &[u32]) -> Result<Vec<u32>, LeaseError>;

    async fn release(&self, member: &str, partitions: &[u32]) -> Result<(), LeaseError>;

    /// Releases everything and forgets the member.
    async fn leave(&self, member: &str) -> Result<(), LeaseError>;

    async fn leases(&self) -> Result<Vec<LeaseRow>, LeaseError>;

    async fn members(&self) -> Result<Vec<MemberRow>, LeaseError>;
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
