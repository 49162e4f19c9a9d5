//! Control logic: deterministic state machines that take the time as an argument or from
//! an injected clock, and read none themselves (`tests/module_structure.rs` checks it), so
//! each is tested without sleeping. What waits or reads the clock is in `write/` and
//! `pipeline/`.

pub mod backoff;
pub mod balance;
pub mod cadence;
pub mod health;
pub mod item_refusals;
pub mod lease_table;
pub mod limit;
pub mod peak_usage;
pub mod quota_unit;
pub mod retry_after;
pub mod retry_budget;
pub mod sink_limit;
pub mod store_contact;
pub mod taken;
pub mod target_rate;
pub mod throttle;
pub mod unexplained;
