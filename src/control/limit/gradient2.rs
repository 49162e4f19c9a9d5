//! Gradient2 (as in Netflix concurrency-limits): compares a long-window average latency
//! with the latest one; `gradient = clamp(tolerance × long / short, 0.5, 1)` scales the
//! limit, plus a small queue allowance, smoothed. Tolerates a steady slower sink without
//! collapsing, and recovers the long average after a spell of overload.
//!
//! Judged per window of one round of writes (their mean latency, as Netflix's
//! `WindowedLimit` feeds it), each window weighed as its samples one by one would have
//! been. Two departures from Netflix's, both measured on Vector's shallow knee (75.3
//! requests/s before, of ~100): the queue allowance is added only while latency is within
//! a tenth of the tolerance's margin over the long average (see [`GROWTH_BAND`]), and the
//! limit starts by one per round until latency first leaves that band (the start's last
//! step undone if the round after that is past the band too).
//!
//! A round with drops (429s, timeouts) cuts once, unsmoothed, by the writes pushed back
//! (at most by half, the gradient's floor), and the level pushed back is probed again
//! only after 1, 2, 4 … 16 rounds below it while its probes keep failing, as
//! Vegas and AIMD back off theirs. A hard limit shows no latency gradient at all: before,
//! each round at 6 against a sink deferring above 5 cut to 4 (6 × 0.5 smoothed) and the
//! allowance climbed back to 6 within four rounds, a deferral (and the worker's pause)
//! every 0.4 s. While the gate reports writes stalled (a drop not yet timed out, see
//! [`Stalled`]), a round neither raises the limit past them nor counts as a probe that
//! held.

use std::time::Duration;

use super::pushed_back::PushedBack;
use super::{ConcurrencyLimit, Sample, Stalled, Window};

/// An exponential average with a plain-average warm-up, as Netflix's ExpAvgMeasurement.
#[derive(Debug, Clone)]
struct ExpAverage {
    window: usize,
    warmup: usize,
    count: usize,
    sum: f64,
    value: f64,
}

impl ExpAverage {
    fn add(&mut self, sample: f64) -> f64 {
        if self.count < self.warmup {
            self.count += 1;
            self.sum += sample;
            self.value = self.sum / self.count as f64;
        } else {
            let f = 2.0 / (self.window as f64 + 1.0);
            self.value = self.value * (1.0 - f) + sample * f;
        }
        self.value
    }
}

/// The share of the tolerance's margin over the long average within which the limit
/// still grows (1.05 × at a tolerance of 1.5).
const GROWTH_BAND: f64 = 0.1;

#[derive(Debug, Clone)]
pub struct Gradient2Limit {
    estimated: f64,
    min: usize,
    max: usize,
    smoothing: f64,
    tolerance: f64,
    queue: f64,
    long_rtt: ExpAverage,
    window: Window,
    /// Until latency first leaves the growth band: +1 per round, unsmoothed.
    slow_start: bool,
    /// The level the sink last pushed back at, and the wait before probing it again.
    pushed_back: PushedBack,
    /// Writes stalled as the last sample came (see [`Stalled`]).
    stalled: Option<Stalled>,
    /// The limit before the last round raised it, until the next round is judged.
    raised_from: Option<f64>,
    /// The limit before the start's last step, until the round after the start is judged.
    exit_from: Option<f64>,
}

impl Gradient2Limit {
    /// Defaults: initial 20, min 20, max 200, smoothing 0.2, tolerance 1.5, queue 4,
    /// long window 600 samples.
    pub fn new(
        initial: usize,
        min: usize,
        max: usize,
        smoothing: f64,
        tolerance: f64,
        queue: f64,
    ) -> Self {
        Gradient2Limit {
            estimated: initial.max(min).min(max) as f64,
            min,
            max,
            smoothing,
            tolerance,
            queue,
            long_rtt: ExpAverage {
                window: 600,
                warmup: 10,
                count: 0,
                sum: 0.0,
                value: 0.0,
            },
            window: Window::default(),
            slow_start: true,
            pushed_back: PushedBack::default(),
            stalled: None,
            raised_from: None,
            exit_from: None,
        }
    }

    /// A round with `drops` of its writes pushed back, at most `inflight` in flight.
    fn pushed_back(&mut self, inflight: usize, drops: usize) {
        self.pushed_back.pushed_back(inflight);
        self.slow_start = false;
        self.raised_from = None;
        let cut = (drops as f64).min(self.estimated / 2.0);
        self.estimated = (self.estimated - cut)
            .max(self.min as f64)
            .min(self.max as f64);
    }

    /// Sets the limit to `new` unless that would probe a level pushed back at before its
    /// hold is over.
    fn grow_to(&mut self, new: f64) {
        let new = Stalled::cap(self.stalled, self.estimated, new);
        if !self.pushed_back.allows(self.estimated, new) {
            return;
        }
        let before = self.estimated;
        self.estimated = new.max(self.min as f64).min(self.max as f64);
        if self.estimated > before {
            self.raised_from = Some(before);
        }
    }
}

impl ConcurrencyLimit for Gradient2Limit {
    fn limit(&self) -> usize {
        self.estimated as usize
    }

    fn stalled(&mut self, stalled: Option<Stalled>) {
        self.stalled = stalled;
    }

    fn on_sample(&mut self, s: Sample) {
        if s.inflight > self.limit().max(1) {
            return; // started under a higher limit, before a cut: already judged
        }
        let Some(s) = self.window.add(s, self.estimated as usize) else {
            return;
        };
        let short = s.rtt.max(Duration::from_nanos(1)).as_secs_f64();
        // The first window has nothing to be compared with but itself: its fastest write
        // is the best guess of the sink's latency (a limit started high past the knee
        // then sees its first round as slow, as each write judged alone did).
        let long = if self.long_rtt.count == 0 {
            let fastest = s.min_rtt.max(Duration::from_nanos(1)).as_secs_f64();
            self.long_rtt.add(fastest)
        } else {
            self.long_rtt.add(short)
        };
        // After a long overload the average lags far behind: let it catch up.
        if long / short > 2.0 {
            self.long_rtt.value *= 0.95;
        }
        if s.dropped {
            self.pushed_back(s.inflight, s.drops);
            return;
        }
        if self.stalled.is_none() {
            self.pushed_back.ran(s.inflight);
        }
        if (s.inflight as f64) < self.estimated / 2.0 {
            return;
        }
        let gradient = (self.tolerance * long / short).clamp(0.5, 1.0);
        // Netflix's adds the queue allowance right up to the tolerance, so it settles where
        // latency is `tolerance` × the long average (and the average then drifts up after
        // it): on a shallow knee that is 15 in flight at 160 ms where 10 take 100 ms. Here
        // it grows only within a tenth of the tolerance's margin, holds between that and
        // the tolerance, and cuts past it.
        let grows = short <= long * (1.0 + (self.tolerance - 1.0) * GROWTH_BAND);
        let queue = if grows { self.queue } else { 0.0 };
        let raised_from = self.raised_from.take();
        if let Some(before) = self.exit_from.take()
            && !grows
        {
            // The round after the start ended, all of it at the limit, is past the band
            // too: the start's last step bought latency, not writes. (Held instead, as
            // within the tolerance, the start settled at 13 on Vector's shallow knee, where
            // 12 take 121 ms and 13 take 134: the round that ends the start lags, mixing
            // writes started under the limit before.) A single round past the band, as a
            // jittery sink shows now and then, undoes nothing.
            self.estimated = self.estimated.min(before);
        }
        if self.slow_start {
            if grows {
                // One more write per round, as AIMD starts: the smoothed queue allowance
                // took 5 rounds at a limit of 1 to reach 2.
                self.grow_to(self.estimated + self.queue.max(1.0));
                return;
            }
            self.slow_start = false; // latency past the growth band
            self.exit_from = raised_from;
        }
        let new = self.estimated * gradient + queue;
        let smoothing = s.weight(self.smoothing);
        let new = self.estimated * (1.0 - smoothing) + new * smoothing;
        if new > self.estimated {
            self.grow_to(new);
        } else {
            self.estimated = new.max(self.min as f64).min(self.max as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ms: u64, inflight: usize) -> Sample {
        Sample {
            rtt: Duration::from_millis(ms),
            inflight,
            dropped: false,
        }
    }

    /// One round of writes at the limit, all at `ms`.
    fn round(l: &mut Gradient2Limit, ms: u64) {
        let n = l.limit();
        for _ in 0..n {
            l.on_sample(sample(ms, n));
        }
    }

    #[test]
    fn starts_by_one_per_round_then_grows_by_the_smoothed_queue_allowance() {
        let mut l = Gradient2Limit::new(20, 1, 200, 0.2, 1.5, 1.0);
        for _ in 0..19 {
            l.on_sample(sample(100, 20));
        }
        assert_eq!(l.limit(), 20, "nothing judged before a round");
        l.on_sample(sample(100, 20));
        assert_eq!(l.limit(), 21, "slow start: + 1");
        round(&mut l, 100);
        assert_eq!(l.limit(), 22);
        round(&mut l, 130);
        assert_eq!(
            l.limit(),
            22,
            "latency past the growth band ends the start: held"
        );
        for _ in 0..10 {
            round(&mut l, 100);
        }
        assert!(l.limit() > 25, "{}", l.limit());
    }

    /// Between 1.05 × and 1.5 × the long average the limit holds: Netflix's kept adding
    /// its queue allowance there and settled at 1.5 ×. (Once the start is over: rounds
    /// past the band right after it undo its last step, see below.)
    #[test]
    fn holds_while_latency_is_within_the_tolerance_but_past_the_growth_band() {
        let mut l = Gradient2Limit::new(10, 1, 200, 0.2, 1.5, 1.0);
        for _ in 0..3 {
            round(&mut l, 100);
        }
        l.slow_start = false;
        let settled = l.estimated;
        for _ in 0..3 {
            round(&mut l, 125);
            assert_eq!(l.estimated, settled);
        }
    }

    #[test]
    fn shrinks_when_latency_doubles_past_the_tolerance() {
        let mut l = Gradient2Limit::new(50, 1, 200, 0.2, 1.5, 1.0);
        for _ in 0..3 {
            round(&mut l, 100);
        }
        let before = l.limit();
        round(&mut l, 400);
        assert!(
            l.limit() < before * 3 / 4,
            "{} !< {before} × 3/4",
            l.limit()
        );
    }

    /// Started at 32 past a knee of 2: the first round is judged against its fastest
    /// writes, not against itself (which read as no queue and grew).
    #[test]
    fn a_first_round_far_past_the_knee_is_cut() {
        let mut l = Gradient2Limit::new(32, 1, 64, 0.2, 1.5, 1.0);
        for i in 0..32 {
            l.on_sample(sample(if i < 2 { 100 } else { 2_000 }, 32));
        }
        assert!(l.limit() <= 17, "{}", l.limit());
    }

    /// One round of `n` writes at 100 ms, `n` in flight, the first `drops` pushed back.
    fn pushed(l: &mut Gradient2Limit, n: usize, drops: usize) {
        for i in 0..n {
            l.on_sample(Sample {
                dropped: i < drops,
                ..sample(100, n)
            });
        }
    }

    /// A round with drops cuts once, unsmoothed, by what was pushed back, at most by half.
    #[test]
    fn a_round_with_drops_cuts_by_the_writes_pushed_back() {
        let mut l = Gradient2Limit::new(6, 1, 64, 0.2, 1.5, 1.0);
        pushed(&mut l, 6, 1);
        assert_eq!(l.limit(), 5, "6 − 1, not 6 × 0.5 smoothed (4)");
        let mut l = Gradient2Limit::new(20, 1, 64, 0.2, 1.5, 1.0);
        pushed(&mut l, 20, 15);
        assert_eq!(l.limit(), 10, "at most halved");
    }

    /// After a push-back at 6 in flight, 6 is probed again after 1 round below it, then 2,
    /// then 4; a probe that holds lets the limit grow on.
    #[test]
    fn a_level_that_was_pushed_back_is_probed_ever_more_rarely() {
        let mut l = Gradient2Limit::new(6, 1, 64, 0.2, 1.5, 1.0);
        pushed(&mut l, 6, 1);
        let mut rounds_below = Vec::new();
        for _ in 0..3 {
            let mut below = 0;
            while l.limit() < 6 {
                let n = l.limit();
                pushed(&mut l, n, 0);
                below += 1;
                assert!(below < 50, "6 is probed again");
            }
            rounds_below.push(below);
            pushed(&mut l, 6, 1);
            assert_eq!(l.limit(), 5);
        }
        // The allowance alone climbs from 5 to 6 in two rounds; then 1, 2, 4 held (the
        // fraction left by the cut shortens the climb by a round now and then).
        assert_eq!(rounds_below, vec![3, 3, 6]);
        while l.limit() < 6 {
            let n = l.limit();
            pushed(&mut l, n, 0);
        }
        for _ in 0..3 {
            let n = l.limit();
            pushed(&mut l, n, 0);
        }
        assert!(l.limit() >= 7, "the probe held: {}", l.limit());
    }

    /// A probe of 6 whose drop is still unanswered: its round is answered in good time,
    /// but it is no probe that held, and the limit does not grow past 6.
    #[test]
    fn a_round_with_a_stalled_write_neither_grows_past_it_nor_forgets_the_level() {
        let mut l = Gradient2Limit::new(6, 1, 64, 0.2, 1.5, 1.0);
        pushed(&mut l, 6, 1);
        while l.limit() < 6 {
            let n = l.limit();
            pushed(&mut l, n, 0);
        }
        l.stalled(Some(Stalled { level: 6, count: 1 }));
        for _ in 0..5 {
            pushed(&mut l, 6, 0);
        }
        assert_eq!(l.limit(), 6, "held while the write is stalled");
        assert_eq!(l.pushed_back.level(), Some(6), "not forgotten");
        l.stalled(None);
        for _ in 0..3 {
            pushed(&mut l, 6, 0);
        }
        assert!(l.limit() >= 7, "answered: the probe held ({})", l.limit());
    }

    /// The start ends at a round past the growth band; if the round after it, all at the
    /// limit, is past the band too, the start's last step is undone. A single round past
    /// the band (jitter) undoes nothing.
    #[test]
    fn the_last_step_of_the_start_is_undone_when_two_rounds_show_it_bought_latency() {
        let start = || {
            let mut l = Gradient2Limit::new(1, 1, 64, 0.2, 1.5, 1.0);
            while l.limit() < 13 {
                round(&mut l, 100);
            }
            round(&mut l, 110);
            assert!(
                !l.slow_start,
                "past 1.05 × the long average: the start is over"
            );
            assert_eq!(l.limit(), 13, "held");
            l
        };
        let mut knee = start();
        round(&mut knee, 134);
        assert_eq!(knee.limit(), 12, "13 take 134 ms: back to 12");
        let mut jittery = start();
        round(&mut jittery, 100);
        assert!(jittery.limit() >= 13, "{}", jittery.limit());
    }

    #[test]
    fn ignores_samples_while_app_limited() {
        let mut l = Gradient2Limit::new(40, 1, 200, 0.2, 1.5, 4.0);
        for _ in 0..40 {
            l.on_sample(sample(100, 5));
        }
        assert_eq!(l.limit(), 40);
    }
}
