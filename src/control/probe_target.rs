//! Steers the rate so that a probe's value stays at or under its `target`, smoothly, where
//! `max` only holds everything (and saws between full speed and nothing).
//!
//! A reading describes the probe's `memory`, not an instant: a canary's value is a
//! percentile of its last `window` of runs. So every step is paced per memory, not per
//! reading: growing by a fifth at every 200 ms reading of a 2 s window compounded to ×6
//! before the window showed the first of it (the pgbench experiment, docs/bench/auto-rate.md).
//! The rule, applied at each reading:
//! - value ≤ `setpoint × target` (room to spare) and the rate binds (the worker wrote at
//!   least `binding` of it over the last second): the rate grows by a factor of
//!   `1 + increase × room` per memory, room being how far the value is below the setpoint
//!   as a share of the way down to the probe's floor — what it reads with nothing written
//!   (a canary's baseline; 0 for other probes): doubling at the floor (as TCP's slow start
//!   finds a path's capacity), barely near the setpoint. Measured from 0, a canary reading
//!   its baseline under a "2x" target had room for ×1.375 per memory only, and at the
//!   p99 canary's wide tail ×1.2–1.3: 47 s from 1,000 to 7,000 rows/s with production's
//!   p99 well within its target (docs/bench/auto-rate.md). A growth
//!   that did not depend on the distance (+20% per memory once cut) took 33 s to climb
//!   from 1,000 to 9,000 rows/s while the canary read half the target (the experiment).
//!   Near the rate the last cut was made from (over `near_peak` of it) growth is at most
//!   `probe` per memory, as CUBIC grows slowly near the window of its last loss: that is
//!   where the value crossed the target, and a probe's memory shows an overshoot only
//!   after it (half the windows over the target in the experiment were at such peaks).
//!   Past `past_peak ×` that rate without a cut, the peak is forgotten and the growth is
//!   by room again: the crossing was one noisy reading, or the database takes more now.
//!   Remembered for good, a canary's one slow run at 1,200 rows/s in a load's first
//!   seconds held its climb to 10% per memory for the next 150 s, up to 10,000 rows/s,
//!   where production took 19,000 (docs/bench/auto-rate.md, run G);
//! - value > `target`: the rate shrinks by `decrease × excess` of itself (excess =
//!   value / target − 1, at most 1), then no further cut for one memory unless the value
//!   climbs above the one cut for: the memory still holds readings from before the cut,
//!   and cutting for each of them again would compound one excess into a collapse;
//! - in between: the rate stays (a dead band, so noise around the setpoint moves nothing);
//! - no wind-up: it grows only while it binds, and a cut starts from at most `headroom ×`
//!   the rate achieved over the last second (when anything was written); never under
//!   `least`.
//!
//! A failed or missing reading changes nothing here: the probe's gate holds the writes
//! meanwhile (`control::health`), and the rate resumes where it was.
//!
//! Over the target with the rate at `least` for `STUCK_MEMORIES` memories, the worker's
//! writes are not what holds the value up: the baseline a relative target was taken from
//! no longer describes the database without them (measured in a quiet spell, or the
//! database's own load grew). [`ProbeTarget::stuck`] says so, and the caller measures the
//! baseline again with the writes held; without that the load crawled at 10 rec/s for
//! the rest of a run whose 2 s baseline (ten runs) had read a p90 of 1.18 ms while the
//! same query's p50 in production was 1.42 ms (the pgbench experiment,
//! docs/bench/auto-rate.md).
//!
//! Oscillation bound (tested against a noisy plant whose readings are the percentile of a
//! window, as a canary's): with readings ±10% around a value that grows with the rate, once
//! settled the rate stays within −40%/+25% of the rate at which the value meets the
//! target, and fewer than 1 reading in 10 is over the target.

use std::collections::VecDeque;
use std::time::Duration;

/// The controller's constants; the defaults are the ones the experiment in
/// docs/bench/auto-rate.md ran with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TargetParams {
    /// Grow only while the value is under this share of the target.
    pub setpoint: f64,
    /// The most the rate grows per memory (at a value of 0), as a share of itself.
    pub increase: f64,
    /// Growth slows to `probe` per memory over this share of the rate last cut from.
    pub near_peak: f64,
    /// The most the rate grows per memory near (or just past) the rate last cut from.
    pub probe: f64,
    /// Past this many times the rate last cut from, that rate is forgotten.
    pub past_peak: f64,
    /// The share of the rate cut per unit of excess over the target.
    pub decrease: f64,
    /// The rate grows only while the worker wrote at least this share of it.
    pub binding: f64,
    /// A cut starts from at most this many times what the worker wrote lately.
    pub headroom: f64,
    /// How far back one reading reaches (a canary's window; another probe's interval).
    pub memory: Duration,
    /// The slowest the controller goes, records per second.
    pub least: f64,
    /// Where it starts, records per second.
    pub start: f64,
}

impl Default for TargetParams {
    fn default() -> Self {
        TargetParams {
            setpoint: 0.8,
            increase: 1.0,
            near_peak: 0.9,
            probe: 0.1,
            past_peak: 1.2,
            decrease: 0.5,
            binding: 0.5,
            headroom: 1.5,
            memory: Duration::from_secs(2),
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
    /// The rate the last cut was made from.
    peak: Option<f64>,
    /// When the last reading came.
    last_reading: Option<Duration>,
    /// Since when every reading was over the target with the rate at `least`.
    over_at_least_since: Option<Duration>,
    /// What the value reads with nothing written: room is measured down to it.
    floor: f64,
}

/// How long the written count is looked back over for the achieved rate.
const ACHIEVED_OVER: Duration = Duration::from_secs(1);

/// Memories over the target at the least rate before the steering is stuck: long enough
/// that the last cuts have shown in the value (one memory each), short against a load.
const STUCK_MEMORIES: u32 = 5;

impl ProbeTarget {
    pub fn new(target: f64, params: TargetParams) -> Self {
        ProbeTarget {
            params,
            target,
            rate: params.start,
            written: VecDeque::new(),
            last_cut: None,
            peak: None,
            last_reading: None,
            over_at_least_since: None,
            floor: 0.0,
        }
    }

    /// The value with nothing written (a canary's baseline). Ignored when it is not well
    /// under the setpoint (an absolute target near or under the baseline): room is then
    /// measured down to 0, as for a probe without one.
    pub fn set_floor(&mut self, floor: f64) {
        self.floor = floor.max(0.0);
    }

    /// How far `value` (at most the setpoint) is under the setpoint, as a share of the way
    /// down to the floor. A target of 0 (`replica_lag` kept at none) leaves no way down: a
    /// value of 0 is then all the room there is (0 / 0 made the rate NaN, then `least`).
    fn room(&self, value: f64) -> f64 {
        let setpoint = self.params.setpoint * self.target;
        let floor = if self.floor < 0.9 * setpoint {
            self.floor
        } else {
            0.0
        };
        if setpoint <= floor {
            return 1.0;
        }
        ((setpoint - value) / (setpoint - floor)).clamp(0.0, 1.0)
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
        // The share of a memory since the last reading: growth is paced per memory.
        let since = self
            .last_reading
            .map_or(Duration::ZERO, |at| now.saturating_sub(at).min(p.memory));
        self.last_reading = Some(now);
        let achieved = self.achieved();
        let settling = |cut: &Option<(Duration, f64)>| {
            cut.is_some_and(|(at, _)| now.saturating_sub(at) < p.memory)
        };
        if value > self.target {
            let held_for_it = settling(&self.last_cut)
                && self.last_cut.is_some_and(|(_, cut_for)| value <= cut_for);
            if !held_for_it {
                // A rate far above what is written would take many cuts to matter.
                let from = match achieved {
                    Some(a) if a > 0.0 => self.rate.min(a * p.headroom),
                    _ => self.rate,
                };
                let excess = (value / self.target - 1.0).min(1.0);
                self.peak = Some(from);
                self.rate = from * (1.0 - p.decrease * excess);
                self.last_cut = Some((now, value));
            }
        } else if value <= p.setpoint * self.target {
            let binds = achieved.is_none_or(|a| a >= p.binding * self.rate);
            if binds && !settling(&self.last_cut) {
                let room = self.room(value);
                let share = since.as_secs_f64() / p.memory.as_secs_f64();
                if self.peak.is_some_and(|peak| self.rate > p.past_peak * peak) {
                    self.peak = None;
                }
                let near_peak = self
                    .peak
                    .is_some_and(|peak| self.rate >= p.near_peak * peak);
                let increase = if near_peak {
                    (p.increase * room).min(p.probe)
                } else {
                    p.increase * room
                };
                self.rate *= (1.0 + increase).powf(share);
            }
        }
        self.rate = self.rate.max(p.least);
        self.over_at_least_since = if value > self.target && self.rate <= p.least {
            self.over_at_least_since.or(Some(now))
        } else {
            None
        };
    }

    /// Over the target at the least rate for `STUCK_MEMORIES` memories: the writes are not
    /// what holds the value up.
    pub fn stuck(&self, now: Duration) -> bool {
        self.over_at_least_since
            .is_some_and(|since| now.saturating_sub(since) >= self.stuck_after())
    }

    /// How long over the target at the least rate is stuck.
    pub fn stuck_after(&self) -> Duration {
        self.params.memory * STUCK_MEMORIES
    }
}

#[cfg(test)]
#[path = "probe_target_tests.rs"]
mod tests;
