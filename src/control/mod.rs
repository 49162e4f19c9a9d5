//! Control logic: deterministic state machines that take the time as an argument or from
//! an injected clock, and read none themselves (`tests/it/module_structure.rs` checks it), so
//! each is tested without sleeping. What waits or reads the clock is in `write/` and
//! `pipeline/`.

pub mod arrivals;
pub mod backoff;
pub mod balance;
pub mod bounded_by;
pub mod cadence;
pub mod health;
pub(crate) mod item_refusals;
pub mod last_second;
pub mod latency_window;
pub mod lease_table;
pub mod limit;
pub(crate) mod peak_usage;
pub mod probe_target;
pub(crate) mod quota_unit;
pub mod retry_after;
pub(crate) mod retry_budget;
pub mod sink_limit;
pub mod store_contact;
pub mod taken;
pub mod target_rate;
pub mod throttle;
pub(crate) mod unexplained;
