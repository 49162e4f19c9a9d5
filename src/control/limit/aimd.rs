//! AIMD on a latency percentile: +`increase` while the judged latency is under target and
//! the limit is actually used; × `backoff_ratio` when the target is broken or the sink
//! pushes back. Judging a percentile of a window of samples, not each sample, keeps one
//! slow outlier from cutting the limit.
//!
//! Three things keep the limit's slots full where plain AIMD leaves them idle:
//! - The window holds at least `2 / (1 − percentile)` samples (40 at p95): the p95 of 10
//!   samples is their maximum, and one write delayed by a busy scheduler then cuts the
//!   limit. A window is judged as soon as its verdict is certain: once more samples broke
//!   the target than the percentile allows, more good ones cannot save it.
//! - The limit is fractional (as Netflix keeps it): 5 × 0.9 is 4.5, not 4, and the next
//!   increase makes it 5.5, not 5.
//! - Probing backs off. Plain AIMD steps past the knee every other window, so half its
//!   samples break the target by design. After a cut from level L, L is probed again only
//!   after 1, 2, 4 … 16 good windows below it (doubling while probes of L keep failing,
//!   like CUBIC's plateau near its last maximum); a probe that holds clears it. Samples of
//!   writes started above the current limit (before a cut) are not judged again. While
//!   the gate reports writes stalled (a drop not yet timed out, see [`Stalled`]), a good
//!   window neither raises the limit past them nor counts as a probe that held.
//!
//! Until its first cut the limit grows by `increase` per round of writes (a window of one
//! sample per slot) while no sample breaks the target, so it finds the knee in a few round
//! trips instead of 40 samples per step.

use std::time::Duration;

use super::{ConcurrencyLimit, Sample, Stalled};

/// The most good windows a failed probe level is held off for.
const MAX_HOLD: u32 = 16;

#[derive(Debug, Clone)]
pub struct AimdLimit {
    limit: f64,
    min: usize,
    max: usize,
    increase: f64,
    backoff_ratio: f64,
    target: Duration,
    percentile: f64,
    /// Samples per judgement once the limit has been cut.
    window: usize,
    rtts: Vec<Duration>,
    /// Samples in this window over the target.
    over: usize,
    max_inflight: usize,
    dropped: bool,
    /// Whether the limit was ever cut (the slow start is over).
    cut: bool,
    /// The whole level the last cut came from, while it is held off.
    failed_level: Option<usize>,
    /// Good windows to wait below `failed_level` before probing it again, and waited so far.
    hold: u32,
    held: u32,
    /// Writes stalled as the last sample came (see [`Stalled`]).
    stalled: Option<Stalled>,
}

/// What an AIMD limit starts from and how it moves; its `Default` is the shipped one
/// (`[concurrency]` without keys), which the tests below start from too.
#[derive(Debug, Clone, PartialEq)]
pub struct AimdParams {
    pub initial: usize,
    pub min: usize,
    pub max: usize,
    /// Added while under target and used.
    pub increase: f64,
    /// Multiplied by on a miss or a drop.
    pub backoff_ratio: f64,
    /// The latency the judged percentile must stay under.
    pub target: Duration,
    /// The percentile of the window judged (0.95 = p95).
    pub percentile: f64,
    /// Samples per judgement (raised to at least `2 / (1 − percentile)`).
    pub window: usize,
}

impl Default for AimdParams {
    fn default() -> Self {
        AimdParams {
            initial: 4,
            min: 1,
            max: 4,
            increase: 1.0,
            backoff_ratio: 0.9,
            target: Duration::from_millis(200),
            percentile: 0.95,
            window: 10,
        }
    }
}

impl AimdLimit {
    /// Netflix concurrency-limits' defaults are initial 20, min 20, max 200, ratio 0.9.
    pub fn new(params: AimdParams) -> Self {
        let AimdParams {
            initial,
            min,
            max,
            increase,
            backoff_ratio,
            target,
            percentile,
            window,
        } = params;
        let meaningful = if percentile < 1.0 {
            (2.0 / (1.0 - percentile) - 1e-9).ceil() as usize
        } else {
            1
        };
        let window = window.max(meaningful).max(1);
        AimdLimit {
            limit: initial.max(min).min(max) as f64,
            min,
            max,
            increase,
            backoff_ratio,
            target,
            percentile,
            window,
            rtts: Vec::with_capacity(window),
            over: 0,
            max_inflight: 0,
            dropped: false,
            cut: false,
            failed_level: None,
            hold: 0,
            held: 0,
            stalled: None,
        }
    }

    /// Samples in the window being filled.
    fn window_len(&self) -> usize {
        if self.cut {
            self.window
        } else {
            (self.limit as usize).max(1)
        }
    }

    /// How many samples over the target break the window's percentile.
    fn breaking(&self) -> usize {
        if !self.cut {
            return 1;
        }
        let rank = ((self.percentile * self.window as f64).ceil() as usize).clamp(1, self.window);
        self.window - rank + 1
    }

    fn judge(&mut self, broken: bool) {
        let level = self.limit();
        if broken {
            self.limit = (self.limit * self.backoff_ratio).max(self.min as f64);
            self.cut = true;
            if self.failed_level == Some(level) {
                self.hold = (self.hold * 2).clamp(1, MAX_HOLD);
            } else {
                self.failed_level = Some(level);
                self.hold = 1;
            }
            self.held = 0;
        } else if self.max_inflight * 2 + 1 >= level {
            if self.stalled.is_none() && self.failed_level.is_some_and(|failed| level >= failed) {
                // The probe held: the sink takes this level now.
                self.failed_level = None;
            }
            let next = Stalled::cap(self.stalled, self.limit, self.limit + self.increase);
            match self.failed_level {
                Some(failed) if next as usize >= failed && self.held < self.hold => {
                    self.held += 1;
                }
                _ => self.limit = next,
            }
        }
        self.limit = self.limit.max(self.min as f64).min(self.max as f64);
        self.rtts.clear();
        self.over = 0;
        self.max_inflight = 0;
        self.dropped = false;
    }
}

impl ConcurrencyLimit for AimdLimit {
    fn limit(&self) -> usize {
        self.limit as usize
    }

    fn stalled(&mut self, stalled: Option<Stalled>) {
        self.stalled = stalled;
    }

    fn on_sample(&mut self, s: Sample) {
        if s.inflight > self.limit().max(1) {
            return; // started under a higher limit, before a cut: already judged
        }
        self.rtts.push(s.rtt);
        self.over += usize::from(s.rtt > self.target);
        self.max_inflight = self.max_inflight.max(s.inflight);
        self.dropped |= s.dropped;
        if self.dropped || self.over >= self.breaking() {
            self.judge(true);
        } else if self.rtts.len() >= self.window_len() {
            self.judge(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::ms;

    fn sample(rtt: u64, inflight: usize) -> Sample {
        Sample {
            rtt: ms(rtt),
            inflight,
            dropped: false,
        }
    }

    /// The shipped parameters but for where the limit starts, its ceiling of 100 and the
    /// target.
    fn limit(initial: usize, target: Duration) -> AimdLimit {
        AimdLimit::new(AimdParams {
            initial,
            max: 100,
            target,
            ..AimdParams::default()
        })
    }

    /// Netflix's AIMDLimit judges each sample against a 5 s timeout: window 1, p100.
    fn netflix(initial: usize, min: usize, max: usize) -> AimdLimit {
        AimdLimit::new(AimdParams {
            initial,
            min,
            max,
            target: Duration::from_secs(5),
            percentile: 1.0,
            window: 1,
            ..AimdParams::default()
        })
    }

    #[test]
    fn netflix_vectors() {
        let mut l = netflix(20, 1, 200);
        l.on_sample(sample(1, 10));
        assert_eq!(l.limit(), 20, "one sample of a round of 20: not judged yet");
        for _ in 0..19 {
            l.on_sample(sample(1, 10));
        }
        assert_eq!(l.limit(), 21, "increase after a round of good samples");

        let mut l = netflix(30, 1, 200);
        l.on_sample(Sample {
            rtt: ms(1),
            inflight: 1,
            dropped: true,
        });
        assert_eq!(l.limit(), 27, "decrease on drop");

        let mut l = netflix(21, 0, 21);
        for _ in 0..21 {
            l.on_sample(sample(1, 10));
        }
        assert_eq!(l.limit(), 21, "success at the max stays there");
    }

    #[test]
    fn does_not_grow_an_unused_limit() {
        let mut l = netflix(20, 1, 200);
        for _ in 0..100 {
            l.on_sample(sample(1, 3));
        }
        assert_eq!(l.limit(), 20);
    }

    /// After a cut, a p95 is judged over at least 40 samples; one slow write in them does
    /// not count, three do, and they are acted on at once.
    #[test]
    fn judges_the_percentile_of_forty_samples_and_cuts_once_it_is_certain() {
        let mut l = limit(10, ms(150));
        l.on_sample(sample(900, 10));
        assert_eq!(l.limit(), 9, "slow start ends at the first slow write: 9.0");
        for i in 0..40 {
            l.on_sample(sample(if i == 7 { 900 } else { 100 }, 9));
            if i < 39 {
                assert_eq!(l.limit(), 9, "nothing judged before 40 samples");
            }
        }
        assert_eq!(
            l.limit(),
            9,
            "a good window, but 10 failed last: held off one window"
        );
        for _ in 0..40 {
            l.on_sample(sample(100, 9));
        }
        assert_eq!(l.limit(), 10, "10.0 probed again");
        l.on_sample(sample(900, 10));
        l.on_sample(sample(900, 10));
        assert_eq!(l.limit(), 10, "two slow of 40 still meet the p95");
        l.on_sample(sample(900, 10));
        assert_eq!(l.limit(), 9, "the third breaks it: cut at once, 10 × 0.9");
    }

    #[test]
    fn the_cut_keeps_its_fraction() {
        let mut l = limit(5, ms(150));
        l.on_sample(sample(900, 5));
        assert_eq!(l.limit(), 4, "4.5");
        for _ in 0..80 {
            l.on_sample(sample(100, 4));
        }
        assert_eq!(
            l.limit(),
            5,
            "5.5 after one held window and one increase, not 5.0"
        );
        assert!((l.limit - 5.5).abs() < 1e-9, "{}", l.limit);
    }

    #[test]
    fn samples_started_above_a_cut_limit_are_not_judged_again() {
        let mut l = limit(10, ms(150));
        l.on_sample(sample(900, 10));
        assert_eq!(l.limit(), 9);
        for _ in 0..9 {
            l.on_sample(sample(900, 10));
        }
        assert_eq!(
            l.limit(),
            9,
            "the other writes of the failed round do not cut again"
        );
    }

    /// A probe of 6 whose drop is still unanswered: the other writes come back in good
    /// time, but the window is no probe that held, and the limit does not grow past 6.
    #[test]
    fn a_window_with_a_stalled_write_neither_grows_past_it_nor_clears_the_failed_level() {
        let mut l = limit(6, ms(150));
        l.on_sample(Sample {
            dropped: true,
            ..sample(100, 6)
        });
        assert_eq!(l.limit(), 5, "5.4");
        for _ in 0..80 {
            l.on_sample(sample(100, 5));
        }
        assert_eq!(l.limit(), 6, "6.4 after one held window: probes 6");
        l.stalled(Some(Stalled { level: 6, count: 1 }));
        for _ in 0..80 {
            l.on_sample(sample(100, 6));
        }
        assert_eq!(l.limit(), 6, "held at 6.4 while the write is stalled");
        assert_eq!(l.failed_level, Some(6), "not forgotten");
        l.stalled(None);
        l.on_sample(Sample {
            dropped: true,
            ..sample(1000, 6)
        });
        assert_eq!(l.hold, 2, "the same level failed again: the wait doubles");
    }

    /// Each failed probe of the same level doubles the good windows waited before the
    /// next, up to 16; a probe that holds lets the limit climb on.
    #[test]
    fn probes_of_a_failing_level_back_off_and_a_faster_sink_is_found() {
        let mut l = limit(8, ms(60));
        // A sink that takes 8 at 50 ms and 9 at 70 ms.
        let rtt = |inflight: usize| if inflight > 8 { 70 } else { 50 };
        let mut probes = 0;
        let mut windows_at_8 = Vec::new();
        let mut run = 0;
        for _ in 0..40_000 {
            let inflight = l.limit();
            let before = l.limit();
            l.on_sample(sample(rtt(inflight), inflight));
            if before == 8 && l.limit() == 9 {
                probes += 1;
                windows_at_8.push(run);
                run = 0;
            } else if before == 8 {
                run += 1;
            }
        }
        let waits: Vec<usize> = windows_at_8.iter().map(|n| n / 40).collect();
        assert_eq!(&waits[1..7], &[1, 2, 4, 8, 16, 16], "{waits:?}");
        assert!(probes < 70, "{probes} probes in 40,000 samples");
        // The sink gets faster: 9 is taken at 50 ms, and then more.
        let rtt = |inflight: usize| if inflight > 12 { 70 } else { 50 };
        let mut samples = 0;
        while l.limit() < 12 {
            let inflight = l.limit();
            l.on_sample(sample(rtt(inflight), inflight));
            samples += 1;
        }
        assert!(
            samples <= 17 * 40 + 3 * 40,
            "found 12 after {samples} samples"
        );
    }
}
