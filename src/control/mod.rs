//! Control logic: deterministic state machines that take the time from an injected clock.

pub mod backoff;
pub mod cadence;
pub mod clock;
pub mod rate_meter;
pub mod recovery;
pub mod retry_after;
pub mod retry_budget;
pub mod throttle;
