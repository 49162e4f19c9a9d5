//! Figures from the emulator's ledger, shared by the scenario bench and the integration
//! tests so both judge a run the same way: the steady part of a drain, its rate, how
//! evenly it was spread over the 200 ms windows, how much was throttled, and how soon full
//! goodput came back after an outage. Counts are per window in one [`BucketUnit`].

use std::time::Duration;

use super::capacity::BucketUnit;
use super::ledger::{SimStats, WINDOW};

impl SimStats {
    /// What each window took, in `unit`.
    pub fn counts(&self, unit: BucketUnit) -> Vec<u64> {
        self.windows.iter().map(|w| w.accepted_in(unit)).collect()
    }

    /// The drain's steady part in `unit`: from the first window that took anything to the
    /// one before the last that did (which holds only the backlog's remainder).
    pub fn steady(&self, unit: BucketUnit) -> Vec<u64> {
        let counts = self.counts(unit);
        let Some(first) = counts.iter().position(|&c| c > 0) else {
            return Vec::new();
        };
        let last = counts.iter().rposition(|&c| c > 0).unwrap();
        counts[first..last].to_vec()
    }

    /// Share of requests answered 429.
    pub fn throttled_share(&self) -> f64 {
        self.rejected as f64 / self.requests.max(1) as f64
    }

    /// Records the clients sent (throttled and refused ones included) per distinct record
    /// stored: 1.0 when nothing was sent twice.
    pub fn sent_per_delivered(&self) -> f64 {
        self.records_received as f64 / self.inserted.max(1) as f64
    }
}

/// Per second over `counts` windows.
pub fn rate(counts: &[u64]) -> f64 {
    counts.iter().sum::<u64>() as f64 / (counts.len().max(1) as f64 * WINDOW.as_secs_f64())
}

/// The second half of `counts`.
pub fn second_half(counts: &[u64]) -> &[u64] {
    &counts[counts.len() / 2..]
}

/// `counts` from `after` on: the windows that start at or after it.
pub fn after(counts: &[u64], after: Duration) -> &[u64] {
    let first = after.as_nanos().div_ceil(WINDOW.as_nanos()) as usize;
    &counts[first.min(counts.len())..]
}

/// Windows a sink taking `capacity` per second fills when fed evenly.
pub fn target(capacity: f64) -> f64 {
    capacity * WINDOW.as_secs_f64()
}

/// Share of `counts` within `tolerance` of `target`: ±1 with `Tolerance::Units(1.0)`,
/// ±10% with `Tolerance::Share(0.1)`.
pub fn on_target(counts: &[u64], target: f64, tolerance: Tolerance) -> f64 {
    if counts.is_empty() {
        return 0.0;
    }
    let band = match tolerance {
        Tolerance::Units(n) => n,
        Tolerance::Share(s) => s * target,
    };
    let near = counts
        .iter()
        .filter(|&&c| (c as f64 - target).abs() <= band)
        .count();
    near as f64 / counts.len() as f64
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tolerance {
    Units(f64),
    Share(f64),
}

/// Population standard deviation of `counts`.
pub fn sigma(counts: &[u64]) -> f64 {
    if counts.is_empty() {
        return 0.0;
    }
    let n = counts.len() as f64;
    let mean = counts.iter().sum::<u64>() as f64 / n;
    let variance = counts
        .iter()
        .map(|&c| (c as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    variance.sqrt()
}

/// From `end` (an outage's end) to the end of the first second, starting at or after it,
/// in which `counts` sum to at least `full`: sustained goodput, not one window's burst of
/// retries. None if that never came.
pub fn time_to_full(counts: &[u64], end: Duration, full: f64) -> Option<Duration> {
    let first = end.as_nanos().div_ceil(WINDOW.as_nanos()) as usize;
    let span = (Duration::from_secs(1).as_nanos() / WINDOW.as_nanos()) as usize;
    // Fewer than a second's windows left: none is whole (a short run, or the end).
    let last = counts.len().checked_sub(span)?;
    let i = (first..=last).find(|&i| counts[i..i + span].iter().sum::<u64>() as f64 >= full)?;
    Some(WINDOW * (i + span) as u32 - end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim_sink::LedgerWindow;

    use crate::testing::ms;

    #[test]
    fn steady_part_in_each_unit() {
        let w = |accepted, requests_accepted, bytes_accepted| LedgerWindow {
            accepted,
            requests: requests_accepted,
            requests_accepted,
            bytes_accepted,
            ..LedgerWindow::default()
        };
        let stats = SimStats {
            windows: vec![w(0, 0, 0), w(10, 1, 900), w(20, 2, 1800), w(3, 1, 200)],
            requests: 5,
            rejected: 1,
            records_received: 44,
            inserted: 33,
            ..SimStats::default()
        };
        assert_eq!(stats.steady(BucketUnit::Records), [10, 20]);
        assert_eq!(stats.steady(BucketUnit::Requests), [1, 2]);
        assert_eq!(stats.steady(BucketUnit::Bytes), [900, 1800]);
        assert_eq!(stats.throttled_share(), 0.2);
        assert!((stats.sent_per_delivered() - 4.0 / 3.0).abs() < 1e-9);
        assert!(SimStats::default().steady(BucketUnit::Records).is_empty());
    }

    #[test]
    fn rates_halves_and_windows_on_target() {
        assert_eq!(rate(&[160, 160, 160, 160, 160]), 800.0);
        assert_eq!(second_half(&[1, 2, 3, 4, 5]), [3, 4, 5]);
        assert_eq!(after(&[1, 2, 3, 4, 5], ms(3000)), [] as [u64; 0]);
        assert_eq!(after(&[1, 2, 3, 4, 5], ms(250)), [3, 4, 5]);
        assert_eq!(after(&[1, 2, 3, 4, 5], ms(400)), [3, 4, 5]);
        assert_eq!(target(800.0), 160.0);
        let counts = [160, 161, 150, 175, 177, 0];
        assert_eq!(on_target(&counts, 160.0, Tolerance::Units(1.0)), 2.0 / 6.0);
        assert_eq!(on_target(&counts, 160.0, Tolerance::Share(0.1)), 4.0 / 6.0);
        assert_eq!(on_target(&[], 160.0, Tolerance::Share(0.1)), 0.0);
        assert_eq!(sigma(&[160, 160, 160]), 0.0);
        assert!((sigma(&[320, 0, 161, 159]) - 113.137).abs() < 0.01);
    }

    #[test]
    fn full_goodput_is_a_whole_second_not_a_burst_of_retries() {
        // Five windows at 150 of 160 are; a lone window of 400 is not.
        let after = [0, 0, 400, 0, 0, 0, 0, 100, 150, 150, 150, 150, 150, 10];
        assert_eq!(time_to_full(&after, ms(200), 720.0), Some(ms(2400)));
        assert_eq!(time_to_full(&after, ms(500), 720.0), Some(ms(2100)));
        assert_eq!(time_to_full(&after[..12], ms(200), 720.0), None);
        // Less than a second of windows in all: none, not a panic.
        assert_eq!(time_to_full(&after[..3], Duration::ZERO, 1.0), None);
        assert_eq!(time_to_full(&[], Duration::ZERO, 0.0), None);
    }
}
