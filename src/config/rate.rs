//! `[rate]`: this worker's ceiling in records per second (or none: `"auto"`, `"off"`), and
//! the tick it is spent in.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;
use crate::settings::Problems;
use crate::settings::bounds::{MOST_RATE, SHORTEST_TICK, rate_problem};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RateSettings {
    /// This worker's ceiling, records per second; `"auto"`: none, the rate is what the
    /// sink's push-back, the write latency and the health probes' `target`s allow (for a
    /// database serving others: with a canary probe); `"off"`: none at all, for a database
    /// with nothing else on it. With `[leases]` a number caps what the leases give only
    /// when it was set (file, environment or `--rate`), not by its default.
    pub records_per_second: RecordsPerSecond,
    /// Granularity of the cadence: up to `records_per_second × tick` per tick; at least
    /// 10ms.
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub tick: Duration,
}

/// A fixed ceiling, or none of ours.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum RecordsPerSecond {
    Fixed(f64),
    Unbounded(Unbounded),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Unbounded {
    /// Steered by the sink's push-back, the adaptive concurrency and the probes' targets.
    Auto,
    /// No ceiling at all.
    Off,
}

/// What the file, a variable or `--rate` gave, before it is told apart.
#[derive(Deserialize)]
#[serde(untagged)]
enum RateText {
    Number(f64),
    Text(String),
}

/// Read by hand, so that a word other than "auto" or "off" is refused with what is
/// taken (an untagged enum says only that nothing matched).
impl<'de> Deserialize<'de> for RecordsPerSecond {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match RateText::deserialize(d)? {
            RateText::Number(n) => Ok(RecordsPerSecond::Fixed(n)),
            RateText::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

impl std::str::FromStr for RecordsPerSecond {
    type Err = String;

    /// `--rate`: a number, `auto` or `off`.
    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "auto" => Ok(RecordsPerSecond::Unbounded(Unbounded::Auto)),
            "off" => Ok(RecordsPerSecond::Unbounded(Unbounded::Off)),
            other => other.parse().map(RecordsPerSecond::Fixed).map_err(|_| {
                format!("must be a number of records per second, \"auto\" or \"off\", got {text:?}")
            }),
        }
    }
}

impl From<f64> for RecordsPerSecond {
    fn from(rate: f64) -> Self {
        RecordsPerSecond::Fixed(rate)
    }
}

impl RecordsPerSecond {
    /// The fixed ceiling, if there is one.
    pub fn fixed(self) -> Option<f64> {
        match self {
            RecordsPerSecond::Fixed(rate) => Some(rate),
            RecordsPerSecond::Unbounded(_) => None,
        }
    }

    /// What the cadence runs at: the ceiling, or with none the fastest rate it takes
    /// (what bounds the worker then is the sink, the concurrency limit and the probes).
    pub fn cadence_rate(self) -> f64 {
        self.fixed().unwrap_or(MOST_RATE)
    }

    pub fn is_auto(self) -> bool {
        self == RecordsPerSecond::Unbounded(Unbounded::Auto)
    }
}

impl std::fmt::Display for RecordsPerSecond {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordsPerSecond::Fixed(rate) => write!(f, "{rate}"),
            RecordsPerSecond::Unbounded(Unbounded::Auto) => f.write_str("auto"),
            RecordsPerSecond::Unbounded(Unbounded::Off) => f.write_str("off"),
        }
    }
}

impl Default for RateSettings {
    fn default() -> Self {
        RateSettings {
            records_per_second: RecordsPerSecond::Fixed(1000.0),
            tick: Duration::from_millis(200),
        }
    }
}

impl RateSettings {
    pub(super) fn validate(&self, p: &mut Problems) {
        if let Some(rate) = self.records_per_second.fixed() {
            if let Some(problem) = rate_problem(rate, false) {
                p.add("rate.records_per_second", problem);
            } else if rate * self.tick.as_secs_f64() > f64::from(u32::MAX) {
                p.add(
                    "rate.records_per_second",
                    "× rate.tick exceeds 4,294,967,295 records per tick",
                );
            }
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
