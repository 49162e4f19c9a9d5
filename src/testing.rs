//! Helpers the unit tests share (compiled for tests only).

use std::time::Duration;

/// `n` milliseconds: the unit the control tests' clocks step in.
pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
