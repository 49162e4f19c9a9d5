//! Steers the rate so that a probe's value stays at or under its `target`, smoothly, where
//! `max` only holds everything (and saws between full speed and nothing).
//!
//! The rule, applied once per reading:
//! - value ≤ `setpoint × target` (room to spare) and the rate binds (the worker wrote at
//!   least `binding` of it over the last second): the rate grows by
//!   `increase × (1 − value / (setpoint × target))` of itself: fast far from the target,
//!   slower near it;
//! - value > `target`: the rate shrinks by `decrease × excess` of itself (excess =
//!   value / target − 1, at most 1), then no further cut for `settle` unless the value
//!   climbs above the one cut for: a probe's window still holds readings from before the
//!   cut, and cutting for each of them again would compound one excess into a collapse;
//! - in between: the rate stays (a dead band, so noise around the setpoint moves nothing);
//! - no wind-up: it grows only while it binds, and a cut starts from at most `headroom ×`
//!   the rate achieved over the last second (when anything was written); never under
//!   `least`.
//!
//! A failed or missing reading changes nothing here: the probe's gate holds the writes
//! meanwhile (`control::health`), and the rate resumes where it was.
//!
//! Oscillation bound (tested against a noisy plant): with readings ±10% around a value that
//! grows with the rate, once settled the rate stays within −40%/+25% of the rate at which
//! the value meets the target, and fewer than 1 reading in 10 is over the target.

use std::collections::VecDeque;
use std::time::Duration;

/// The controller's constants; the defaults are the ones the experiment in
/// docs/bench/auto-rate.md ran with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TargetParams {
    /// Grow only while the value is under this share of the target.
    pub setpoint: f64,
    /// The most the rate grows per reading (at a value of 0).
    pub increase: f64,
    /// The share of the rate cut per unit of excess over the target.
    pub decrease: f64,
    /// The rate grows only while the worker wrote at least this share of it.
    pub binding: f64,
    /// A cut starts from at most this many times what the worker wrote lately.
    pub headroom: f64,
    /// After a cut, no other cut for this long unless the value climbs higher.
    pub settle: Duration,
    /// The slowest the controller goes, records per second.
    pub least: f64,
    /// Where it starts, records per second.
    pub start: f64,
}

impl Default for TargetParams {
    fn default() -> Self {
        TargetParams {
            setpoint: 0.8,
            increase: 0.2,
            decrease: 0.5,
            binding: 0.5,
            headroom: 1.5,
            settle: Duration::from_secs(1),
            least: 10.0,
            start: 1000.0,
        }
    }
}

/// One probe's steering; time and the worker's written count come in as arguments.
#[derive(Debug, Clone)]
pub struct ProbeTarget {
    params: TargetParams,
    target: f64,
    rate: f64,
    /// (when, records written by then), the last second or so.
    written: VecDeque<(Duration, u64)>,
    /// When the last cut was, and the value it was for.
    last_cut: Option<(Duration, f64)>,
}

/// How long the written count is looked back over for the achieved rate.
const ACHIEVED_OVER: Duration = Duration::from_secs(1);

impl ProbeTarget {
    pub fn new(target: f64, params: TargetParams) -> Self {
        ProbeTarget {
            params,
            target,
            rate: params.start,
            written: VecDeque::new(),
            last_cut: None,
        }
    }

    pub fn target(&self) -> f64 {
        self.target
    }

    /// The rate it allows now, records per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Records per second written over the last second, once a second of counts is known.
    fn achieved(&self) -> Option<f64> {
        let (first, last) = (self.written.front()?, self.written.back()?);
        let span = last.0.saturating_sub(first.0);
        (span >= ACHIEVED_OVER / 2)
            .then(|| last.1.saturating_sub(first.1) as f64 / span.as_secs_f64())
    }

    /// A reading of `value` at `now`, when the worker had written `written` records.
    pub fn observe(&mut self, now: Duration, value: f64, written: u64) {
        self.written.push_back((now, written));
        while self
            .written
            .get(1)
            .is_some_and(|(at, _)| now.saturating_sub(*at) >= ACHIEVED_OVER)
        {
            self.written.pop_front();
        }
        let p = self.params;
        let achieved = self.achieved();
        if value > self.target {
            let settling = self
                .last_cut
                .is_some_and(|(at, cut_for)| now.saturating_sub(at) < p.settle && value <= cut_for);
            if !settling {
                // A rate far above what is written would take many cuts to matter.
                let from = match achieved {
                    Some(a) if a > 0.0 => self.rate.min(a * p.headroom),
                    _ => self.rate,
                };
                let excess = (value / self.target - 1.0).min(1.0);
                self.rate = from * (1.0 - p.decrease * excess);
                self.last_cut = Some((now, value));
            }
        } else if value <= p.setpoint * self.target {
            let settling = self
                .last_cut
                .is_some_and(|(at, _)| now.saturating_sub(at) < p.settle);
            let binds = achieved.is_none_or(|a| a >= p.binding * self.rate);
            if binds && !settling {
                let room = 1.0 - value / (p.setpoint * self.target);
                self.rate *= 1.0 + p.increase * room;
            }
        }
        self.rate = self.rate.max(p.least);
    }
}

#[cfg(test)]
#[path = "probe_target_tests.rs"]
mod tests;
