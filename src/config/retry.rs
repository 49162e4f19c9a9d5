//! `[retry]`: how a failed write is tried again — the backoff between attempts, how many
//! attempts before a record is dead-lettered, and the budget that caps retries.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;
use crate::control::retry_budget::RetryBudget;
use crate::settings::Problems;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySettings {
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde")]
    /// The first retry's backoff (full jitter: a random wait up to it).
    pub min_delay: Duration,
    #[schemars(with = "schema::HumanDuration")]
    #[serde(with = "humantime_serde")]
    /// The longest backoff between retries.
    pub max_delay: Duration,
    /// Each retry's backoff is the previous one's times this, up to `max_delay`.
    pub factor: f64,
    /// Attempts at a record before it is dead-lettered with the last error.
    pub max_attempts: u32,
    /// Retries may number at most this share of the first attempts in `budget_window`…
    #[serde(default = "default_budget_ratio")]
    pub budget_ratio: f64,
    /// …plus this many per second, so a quiet worker can still retry.
    #[serde(default = "default_budget_min_per_second")]
    pub budget_min_per_second: f64,
    #[schemars(with = "schema::HumanDuration")]
    #[serde(default = "default_budget_window", with = "humantime_serde")]
    pub budget_window: Duration,
}

fn default_budget_ratio() -> f64 {
    0.2
}

fn default_budget_min_per_second() -> f64 {
    1.0
}

fn default_budget_window() -> Duration {
    Duration::from_secs(10)
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            min_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(30),
            factor: 2.0,
            max_attempts: 8,
            budget_ratio: default_budget_ratio(),
            budget_min_per_second: default_budget_min_per_second(),
            budget_window: default_budget_window(),
        }
    }
}

impl RetrySettings {
    /// The budget that caps retries.
    pub fn budget(&self) -> RetryBudget {
        RetryBudget::new(
            self.budget_ratio,
            self.budget_min_per_second,
            self.budget_window,
        )
    }

    pub(super) fn validate(&self, p: &mut Problems) {
        let r = self;
        p.positive_duration("retry.min_delay", r.min_delay);
        p.at_most_a_year("retry.max_delay", r.max_delay);
        if r.max_delay < r.min_delay {
            p.add(
                "retry.max_delay",
                "must not be shorter than retry.min_delay",
            );
        }
        if !(r.factor.is_finite() && r.factor >= 1.0) {
            p.add(
                "retry.factor",
                format!("must be a number of at least 1.0, got {}", r.factor),
            );
        }
        if r.max_attempts == 0 {
            p.add("retry.max_attempts", "must be at least 1");
        }
        if !(r.budget_ratio.is_finite() && r.budget_ratio >= 0.0) {
            p.add("retry.budget_ratio", "must be a number ≥ 0");
        }
        p.positive_duration("retry.budget_window", r.budget_window);
        if !(r.budget_min_per_second.is_finite() && r.budget_min_per_second >= 0.0) {
            p.add("retry.budget_min_per_second", "must be a number ≥ 0");
        } else if r.budget_min_per_second * r.budget_window.as_secs_f64() < 1.0 {
            p.add(
                "retry.budget_min_per_second",
                "× retry.budget_window must allow at least one retry, or an idle worker could never retry",
            );
        }
    }
}
