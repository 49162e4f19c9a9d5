//! `[leases]`: one sink's capacity shared among workers — by leases in a PostgreSQL store,
//! or by a Kafka group's assignment.

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;
use crate::settings::Problems;
use crate::settings::bounds::{MOST_RATE, rate_problem};
use crate::source::settings::SourceKind;

/// The most leases a pool is cut into. A worker's acquire looks at every partition (a
/// Lua loop in a Redis shared with others, `generate_series` in PostgreSQL), so a typo of
/// a few more zeros would stall the store for everyone; 100,000 leaves a lease per worker
/// for any fleet many times over.
pub const MAX_PARTITIONS: u32 = 100_000;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LeasesSettings {
    /// Where leases live: a `postgres://` or `redis://` (`rediss://`) URL; or `"kafka"`:
    /// the capacity follows the consumer group's assignment (capacity × assigned / topic
    /// partitions), no store.
    #[serde(default)]
    pub store: String,
    /// A file holding `store` (a URL with a password stays out of the config and `ps`).
    pub store_file: Option<PathBuf>,
    /// The shared capacity's name; workers with the same pool share it. Required with a
    /// lease store: workers that all left it out would share one unnamed pool.
    #[serde(default)]
    pub pool: String,
    /// Records per second the sink takes in total.
    pub capacity: f64,
    /// The capacity is cut into this many equal leases (at most 100,000).
    #[serde(default)]
    pub partitions: u32,
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde", default = "default_lease_ttl")]
    pub ttl: Duration,
    /// Records per second this worker may use without a lease.
    #[serde(default)]
    pub reserved: f64,
    /// Leases are given back after this long without demand.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde", default = "default_idle_grace")]
    pub idle_grace: Duration,
}

impl LeasesSettings {
    /// The capacity is divided by the Kafka group's assignment, not by leases in a store.
    pub fn by_assignment(&self) -> bool {
        self.store == "kafka"
    }

    pub(super) fn validate(&self, source: SourceKind, p: &mut Problems) {
        if let Some(problem) = rate_problem(self.capacity, false) {
            p.add("leases.capacity", problem);
        }
        p.within("leases.reserved", self.reserved, 0.0, MOST_RATE);
        p.at_most_a_year("leases.idle_grace", self.idle_grace);
        if self.by_assignment() {
            if source != SourceKind::Kafka {
                p.add(
                    "leases.store",
                    "\"kafka\" divides the capacity by a Kafka group's assignment: it needs kind = \"kafka\" in [source]",
                );
            }
            return;
        }
        // Every worker naming the same pool shares it: an empty name would be one pool
        // for every worker that forgot to name theirs.
        if self.pool.trim().is_empty() {
            p.add(
                "leases.pool",
                "required with a lease store: the shared capacity's name (workers with the same pool share it)",
            );
        }
        if crate::lease::redis::is_redis_url(&self.store) {
            if let Err(e) = redis::Client::open(self.store.as_str()) {
                p.add("leases.store", format!("not a Redis URL: {e}"));
            }
        } else if !(self.store.starts_with("postgres://")
            || self.store.starts_with("postgresql://"))
        {
            p.add(
                "leases.store",
                "must be a postgres:// or redis:// (rediss://) URL, or \"kafka\"",
            );
        } else {
            p.check(crate::sink::postgres::tls::validate_url(
                &self.store,
                "leases.store",
            ));
        }
        p.count(
            "leases.partitions",
            u64::from(self.partitions),
            1,
            u64::from(MAX_PARTITIONS),
        );
        if self.ttl < Duration::from_secs(1) {
            p.add("leases.ttl", "must be at least 1s");
        }
        p.at_most_a_year("leases.ttl", self.ttl);
    }
}

fn default_lease_ttl() -> Duration {
    Duration::from_secs(15)
}

fn default_idle_grace() -> Duration {
    Duration::from_secs(5)
}
