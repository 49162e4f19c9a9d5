//! When a canary's runs are due: at random, as production's clients arrive (a Poisson
//! process whose mean gap is the probe's interval), each run's latency counted from when it
//! was due, not from when it could start.
//!
//! A probe on a fixed clock that waits for its answer before asking again records one slow
//! run for a stall during which production's clients, who arrive regardless, recorded every
//! query they sent (coordinated omission); and it never queues behind itself, where
//! production's clients do whenever two queries arrive close together. With a load stepped
//! beside a pgbench production, a canary timed so read over 2x its baseline in 1 of the 16
//! steps where production's p99 broke 2x its own in over a tenth of seconds; arriving at
//! random and timed from when due, in 11 of 15, and under 2x wherever production held
//! (docs/bench/auto-rate.md). Pure: the time and the random draws come in as arguments.

use std::time::Duration;

/// The longest gap, in mean gaps: an exponential gap is unbounded, and a window must not
/// go empty waiting for one draw from its tail (the chance of a gap this long is e^-10).
const LONGEST_GAP: f64 = 10.0;

#[derive(Debug, Clone)]
pub struct Arrivals {
    mean: Duration,
    /// A run this late is not made up for: the runs a stall longer than this missed are
    /// not sent in a burst once it ends (the schedule starts again from now).
    longest_lag: Duration,
    due: Option<Duration>,
}

impl Arrivals {
    pub fn new(mean: Duration, longest_lag: Duration) -> Self {
        Arrivals {
            mean,
            longest_lag,
            due: None,
        }
    }

    /// When the next run is due, given the time now and a uniform draw in [0, 1): the one
    /// before's due time plus an exponential gap, which may already be past (the run before
    /// took longer than the gap: this one queued behind it and is due at once).
    pub fn next(&mut self, now: Duration, uniform: f64) -> Duration {
        let gap = self
            .mean
            .mul_f64((-(1.0 - uniform.clamp(0.0, 1.0 - f64::EPSILON)).ln()).min(LONGEST_GAP));
        let due = match self.due {
            Some(before) if now.saturating_sub(before + gap) <= self.longest_lag => before + gap,
            _ => now + gap,
        };
        self.due = Some(due);
        due
    }

    /// After a failed run: the next is due a gap from now, not queued behind the failure.
    pub fn restart(&mut self) {
        self.due = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn gaps_are_exponential_with_the_interval_as_their_mean() {
        let mut a = Arrivals::new(50 * MS, Duration::from_secs(5));
        let n = 10_000;
        let mut now = Duration::ZERO;
        let mut gaps = Vec::new();
        for i in 0..n {
            // Evenly spread draws: the gaps are the exponential's quantiles.
            let due = a.next(now, (i as f64 + 0.5) / n as f64);
            gaps.push((due - now).as_secs_f64());
            now = due;
        }
        let mean = gaps.iter().sum::<f64>() / n as f64;
        assert!((mean - 0.050).abs() < 0.0005, "mean gap {mean}");
        gaps.sort_by(f64::total_cmp);
        // The median is ln 2 of the mean; one gap in ten is under 5.3 ms (two runs due that
        // close queue whenever the first is slow) ...
        assert!(
            (gaps[n / 2] - 0.050 * 2f64.ln()).abs() < 0.0002,
            "{}",
            gaps[n / 2]
        );
        assert!(gaps[n / 10] < 0.0055, "{}", gaps[n / 10]);
        // ... and none beyond ten.
        assert!(gaps[n - 1] <= 0.5 + 1e-9, "{}", gaps[n - 1]);
    }

    #[test]
    fn a_run_due_while_the_one_before_runs_queues_behind_it() {
        let mut a = Arrivals::new(50 * MS, Duration::from_secs(5));
        let first = a.next(Duration::ZERO, 0.5);
        assert_eq!(first, (50 * MS).mul_f64(2f64.ln()));
        // The first run took 300 ms: the next was due during it, and is due at once
        // (in the past), its latency counted from then.
        let answered = first + 300 * MS;
        let second = a.next(answered, 0.5);
        assert_eq!(second, first + (50 * MS).mul_f64(2f64.ln()));
        assert!(second < answered);
        // Drawn from the schedule, not from the late answer.
        let third = a.next(answered, 0.5);
        assert_eq!(third, second + (50 * MS).mul_f64(2f64.ln()));
    }

    #[test]
    fn a_stall_longer_than_the_lag_bound_is_not_made_up_in_a_burst() {
        let mut a = Arrivals::new(50 * MS, Duration::from_secs(5));
        let first = a.next(Duration::ZERO, 0.5);
        // Answered 8 s later: the 160 runs due meanwhile are not sent back to back.
        let answered = first + Duration::from_secs(8);
        let next = a.next(answered, 0.5);
        assert_eq!(next, answered + (50 * MS).mul_f64(2f64.ln()));
        // A failure restarts the schedule from now.
        a.restart();
        let after = a.next(next + Duration::from_secs(1), 0.0);
        assert_eq!(after, next + Duration::from_secs(1));
    }
}
