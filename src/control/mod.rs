//! Control logic: deterministic state machines that take the time from an injected clock.

pub mod backoff;
pub mod balance;
pub mod cadence;
pub mod clock;
pub mod health;
pub mod item_refusals;
pub mod lease_table;
pub mod limit;
pub mod peak_usage;
pub mod quota_unit;
pub mod retry_after;
pub mod retry_budget;
pub mod sink_limit;
pub mod taken;
pub mod target_rate;
pub mod throttle;
pub mod unexplained;
