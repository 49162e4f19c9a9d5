//! `[rate]`: this worker's ceiling in records per second, and the tick it is spent in.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;
use crate::settings::Problems;
use crate::settings::bounds::{SHORTEST_TICK, rate_problem};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RateConfig {
    /// This worker's ceiling, records per second. With `[leases]` it caps what the leases
    /// give only when it was set (file, environment or `--rate`), not by its default.
    pub records_per_second: f64,
    /// Granularity of the cadence: up to `records_per_second × tick` per tick; at least
    /// 10ms.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub tick: Duration,
}

impl Default for RateConfig {
    fn default() -> Self {
        RateConfig {
            records_per_second: 1000.0,
            tick: Duration::from_millis(200),
        }
    }
}

impl RateConfig {
    pub(super) fn validate(&self, p: &mut Problems) {
        let rate = self.records_per_second;
        if let Some(problem) = rate_problem(rate, false) {
            p.add("rate.records_per_second", problem);
        } else if rate * self.tick.as_secs_f64() > f64::from(u32::MAX) {
            p.add(
                "rate.records_per_second",
                "× rate.tick exceeds 4,294,967,295 records per tick",
            );
        }
        if self.tick < SHORTEST_TICK {
            p.add(
                "rate.tick",
                format!(
                    "must be at least {} (each tick wakes the worker), got {}",
                    humantime::format_duration(SHORTEST_TICK),
                    humantime::format_duration(self.tick)
                ),
            );
        }
        p.at_most_a_year("rate.tick", self.tick);
    }
}
