//! Control logic: deterministic state machines that take the time from an injected clock.

pub mod backoff;
pub mod balance;
pub mod cadence;
pub mod clock;
pub mod lease_table;
pub mod limit;
pub mod peak_usage;
pub mod rate_meter;
pub mod recovery;
pub mod retry_after;
pub mod retry_budget;
pub mod target_rate;
pub mod throttle;
pub mod unexplained;
