//! The bounds configuration values are held to, wherever they are checked: past them a
//! wait, a buffer or a count would outgrow what the worker can hold.

use std::time::Duration;

/// The slowest rate (and smallest lease capacity) taken: one record in about 17 minutes.
/// Slower, the wait for one record outgrows any clock.
pub const LEAST_RATE: f64 = 0.001;
/// The fastest rate taken: a billion records per second, far beyond any sink, and short
/// of where a tick's allowance or a token's period stop being representable.
pub const MOST_RATE: f64 = 1e9;
/// The shortest tick: each tick wakes the pipeline, so a shorter one only spends a core on
/// waking (1 ns kept an idle daemon at 72% of one) without smoothing the writes further.
pub const SHORTEST_TICK: Duration = Duration::from_millis(10);
/// The most records in one batch.
pub const MOST_BATCH: u64 = 1_000_000;
/// The longest record a source holds in memory: 1 GiB.
pub const MOST_RECORD_BYTES: u64 = 1 << 30;
/// The most batches in flight at once.
pub const MOST_IN_FLIGHT: u64 = 10_000;
/// The most latency samples an adaptive limit judges at once.
pub const MOST_WINDOW: u64 = 100_000;

/// Why `rate` (records per second) is not one a worker can run at, if it is not: a finite
/// number in `[LEAST_RATE, MOST_RATE]`, or 0 where `zero` allows it (an operator's 0 holds
/// every write). The configuration and the operator controls take the same rates.
pub fn rate_problem(rate: f64, zero: bool) -> Option<String> {
    let runnable = rate.is_finite() && (LEAST_RATE..=MOST_RATE).contains(&rate);
    if runnable || (zero && rate == 0.0) {
        return None;
    }
    let least = if zero { "0 or " } else { "" };
    Some(format!(
        "must be a number of records per second, {least}from {LEAST_RATE} to {MOST_RATE:e}, got {rate}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_outside_the_bounds_are_named() {
        for bad in [
            f64::NAN,
            f64::INFINITY,
            -1.0,
            1e-20,
            1e-300,
            2e9,
            f64::MIN_POSITIVE,
        ] {
            assert!(rate_problem(bad, true).is_some(), "{bad}");
        }
        assert!(rate_problem(0.0, false).is_some());
        for good in [LEAST_RATE, 1.0, 5000.0, MOST_RATE] {
            assert_eq!(rate_problem(good, false), None, "{good}");
        }
        assert_eq!(
            rate_problem(0.0, true),
            None,
            "an operator's 0 holds the writes"
        );
    }
}
