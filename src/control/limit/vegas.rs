//! Vegas (as in Netflix concurrency-limits): estimates the queue at the sink from how much
//! the latency exceeds the no-load latency, `queue = limit × (1 − rtt_noload / rtt)`, and
//! keeps it between alpha and beta. The no-load latency is re-probed now and then, so a
//! sink that got slower for good is not treated as congested forever. Unlike Netflix's
//! probe (which takes the next sample, queueing included, as the new no-load latency and
//! so ratchets the limit up under steady load), a probe here drains to the minimum limit
//! for one round, as BBR's ProbeRTT does, and measures a write that really ran unloaded;
//! and, as BBR, only when no round since the last probe ran at the no-load latency (on
//! Vector's flat-latency scenarios each drain cost about a round of writes in 2–5 s, for
//! nothing).
//!
//! Judged per window of one round of writes (mean latency, most in flight, any drop; the
//! no-load latency is the fastest write seen), each window weighed as its samples one by
//! one would have been. A round with drops (429s, timeouts) cuts at once, unsmoothed, by
//! the writes pushed back (at least Netflix's decrease, log10): it is no noisy estimate,
//! and smoothed per write it cut 0.2 while each good write added 1.2. After a drop at L
//! writes in flight, `+beta` is taken only while it stays below L (nearer, the gentle
//! `+log10`, as a loss ends TCP's slow start), and L is probed again only after 1, 2, 4 …
//! 16 rounds below it while probes of it keep being pushed back (as AIMD backs off its
//! probes). Against a rate limit, which shows no queue, this is what stops it: before, it
//! climbed to 60 in flight and the deferrals came in a burst. A `+beta` whose rounds after
//! it queue past beta is taken back whole, and that height is approached gently from then
//! on (see `update`). While the gate reports
//! writes stalled (a drop not yet timed out, see [`Stalled`]), a round neither raises the
//! limit past them nor counts as a probe of the level pushed back that held.

use std::time::Duration;

use super::pushed_back::PushedBack;
use super::{ConcurrencyLimit, Sample, Stalled, Window};

/// A round whose fastest write was within this share of the no-load latency confirms it:
/// the probe that would drain to the minimum is skipped (as BBR probes its minimum RTT
/// only when no sample refreshed it lately).
const FLOOR_SEEN: f64 = 0.05;

#[derive(Debug, Clone)]
pub struct VegasLimit {
    estimated: f64,
    max: usize,
    min: usize,
    smoothing: f64,
    rtt_noload: Option<Duration>,
    /// Fixed alpha/beta (tests); None = 3·log10(limit) and 6·log10(limit).
    alpha_beta: Option<(f64, f64)>,
    probe_multiplier: f64,
    probe_jitter: f64,
    probe_count: u64,
    /// While probing: the limit to return to.
    probing: Option<f64>,
    rng: u64,
    window: Window,
    /// The writes in flight when the sink last pushed back: growth at or above it is
    /// the gentle one (as a loss ends TCP's slow start), and waits before probing it.
    pushed_back: PushedBack,
    /// Since the last probe, a round ran at the no-load latency.
    floor_seen: bool,
    /// Writes stalled as the last sample came (see [`Stalled`]).
    stalled: Option<Stalled>,
    /// The limit before the last `+beta`, while the rounds after it are judged: the next
    /// one, and the one after if the next did not run at the new limit yet.
    jumped_from: Option<(f64, bool)>,
    /// A limit a `+beta` reached and found queueing past beta: no jump to it again until
    /// a round runs there within beta.
    overshot: Option<f64>,
}

/// Netflix's Log10RootFunction: an integer log10, at least 1.
fn log10(limit: f64) -> f64 {
    (limit.max(1.0).log10().floor()).max(1.0)
}

impl VegasLimit {
    /// Defaults: initial 20, max 1000, smoothing 1.0, probe every ~30 × limit samples.
    pub fn new(initial: usize, min: usize, max: usize, smoothing: f64, seed: u64) -> Self {
        let mut v = VegasLimit {
            estimated: initial.max(min).max(1).min(max) as f64,
            max,
            min: min.max(1),
            smoothing,
            rtt_noload: None,
            alpha_beta: None,
            probe_multiplier: 30.0,
            probe_jitter: 1.0,
            probe_count: 0,
            probing: None,
            rng: seed | 1,
            window: Window::default(),
            pushed_back: PushedBack::default(),
            floor_seen: false,
            stalled: None,
            jumped_from: None,
            overshot: None,
        };
        v.reset_probe_jitter();
        v
    }

    pub fn with_alpha_beta(mut self, alpha: f64, beta: f64) -> Self {
        self.alpha_beta = Some((alpha, beta));
        self
    }

    /// A jitter in [0.5, 1) from a xorshift: deterministic for a seed.
    fn reset_probe_jitter(&mut self) {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.probe_jitter = 0.5 + (self.rng >> 11) as f64 / (1u64 << 53) as f64 * 0.5;
    }

    fn update(
        &mut self,
        rtt: Duration,
        inflight: usize,
        min_inflight: usize,
        drops: usize,
        smoothing: f64,
    ) {
        let dropped = drops > 0;
        let limit = self.estimated;
        let noload = self.rtt_noload.expect("set before updating").as_secs_f64();
        let queue = (limit * (1.0 - noload / rtt.as_secs_f64().max(1e-9))).ceil();
        let (alpha, beta) = self
            .alpha_beta
            .unwrap_or((3.0 * log10(limit), 6.0 * log10(limit)));
        let threshold = log10(limit);
        let jumped_from = self.jumped_from.take();
        if let Some((before, true)) = jumped_from
            && inflight < limit as usize
        {
            // Most of this round started before the jump: the next one judges it too.
            self.jumped_from = Some((before, false));
        }
        if dropped {
            self.jumped_from = None;
            // A push-back is no estimate to smooth: cut at once.
            self.pushed_back.pushed_back(inflight);
            // By the writes pushed back in the round (what the sink would not take), at
            // least Netflix's log10: after an overshoot to 37 against a rate limit, one a
            // round is 28 rounds back to 9 (52.8 requests/s there, against 57.0).
            let cut = log10(limit).max(drops as f64);
            self.estimated = (limit - cut).clamp(self.min as f64, self.max as f64);
            return;
        }
        // A `+beta` whose next round (or the one after, if the next mostly started before
        // it) queues past beta overshot: taken back whole, where `−log10` a round stopped as
        // soon as the queue was within beta, at the top of the range. (On Vector's shallow
        // knee a jump from 12 went to 18; Vegas came back to 15 only, 162 ms a write, 92.6
        // requests/s where 12 make 99.)
        if let Some((before, _)) = jumped_from
            && queue > beta
        {
            self.jumped_from = None;
            self.overshot = Some(limit);
            self.estimated = before.min(limit);
            return;
        }
        if self
            .overshot
            .is_some_and(|at| inflight as f64 >= at.floor())
            && queue <= beta
        {
            self.overshot = None;
        }
        // + beta only while it stays below the level that was pushed back (or overshot).
        let aggressive = self
            .pushed_back
            .level()
            .is_none_or(|at| limit + beta < at as f64)
            && self.overshot.is_none_or(|at| limit + beta < at);
        if self.stalled.is_none() {
            self.pushed_back.ran(inflight);
        }
        let jumps = queue <= threshold && aggressive;
        let new = if ((inflight * 2) as f64) < limit {
            return; // the limit is not what holds us back
        } else if jumps {
            limit + beta
        } else if queue < alpha || queue <= threshold {
            // (no queue but near a level that was pushed back: the gentle increase too)
            // Near a height that overshot, only a round all of whose writes started at the
            // limit: one mixing writes started below it shows less queue than there is (on
            // the shallow knee, after each drain, 12 climbed to 14 in flight that way).
            if self.overshot.is_some() && min_inflight < limit as usize {
                return;
            }
            limit + log10(limit)
        } else if queue > beta {
            limit - log10(limit)
        } else {
            return;
        };
        let new = new.clamp(self.min as f64, self.max as f64);
        let new = (1.0 - smoothing) * limit + smoothing * new;
        let new = Stalled::cap(self.stalled, limit, new);
        if !self.pushed_back.allows(limit, new) {
            return;
        }
        if jumps && new > limit {
            self.jumped_from = Some((limit, true));
        }
        self.estimated = new;
    }
}

impl ConcurrencyLimit for VegasLimit {
    fn limit(&self) -> usize {
        match self.probing {
            Some(_) => self.min,
            None => self.estimated as usize,
        }
    }

    fn stalled(&mut self, stalled: Option<Stalled>) {
        self.stalled = stalled;
    }

    fn on_sample(&mut self, s: Sample) {
        if let Some(saved) = self.probing {
            // Only a write started while drained tells the unloaded latency.
            if s.inflight <= self.min {
                self.rtt_noload = Some(s.rtt);
                self.estimated = saved;
                self.probing = None;
                self.window.clear();
            }
            return;
        }
        if s.inflight > self.limit().max(1) {
            return; // started under a higher limit, before a cut: already judged
        }
        self.probe_count += 1;
        if self.probe_jitter * self.probe_multiplier * self.estimated <= self.probe_count as f64 {
            self.reset_probe_jitter();
            self.probe_count = 0;
            // Draining to the minimum for a round costs a round's writes (5% of a 100 ms
            // sink's rate, probing every 2–5 s); a sink whose writes still run at the
            // no-load latency has just shown it.
            if !std::mem::take(&mut self.floor_seen) {
                self.probing = Some(self.estimated);
                return;
            }
        }
        let Some(w) = self.window.add(s, self.estimated as usize) else {
            return;
        };
        if self.rtt_noload.is_some_and(|noload| {
            w.min_rtt.as_secs_f64() <= noload.as_secs_f64() * (1.0 + FLOOR_SEEN)
        }) {
            self.floor_seen = true;
        }
        let noload = self
            .rtt_noload
            .map_or(w.min_rtt, |noload| noload.min(w.min_rtt));
        self.rtt_noload = Some(noload);
        self.update(
            w.rtt,
            w.inflight,
            w.min_inflight,
            w.drops,
            w.weight(self.smoothing),
        );
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

    /// One round of `n` writes; the first `drops` of them pushed back.
    fn round(l: &mut VegasLimit, n: usize, rtt: u64, inflight: usize, drops: usize) {
        for i in 0..n {
            l.on_sample(Sample {
                dropped: i < drops,
                ..sample(rtt, inflight)
            });
        }
    }

    /// VegasLimitTest.create(): alpha 3, beta 6, smoothing 1.0, initial 10, max 20; the
    /// no-load latency 10 ms already known.
    fn netflix() -> VegasLimit {
        let mut l = VegasLimit::new(10, 1, 20, 1.0, 42).with_alpha_beta(3.0, 6.0);
        l.rtt_noload = Some(ms(10));
        l
    }

    #[test]
    fn netflix_vectors_judged_per_round() {
        let mut l = netflix();
        round(&mut l, 9, 10, 10, 0);
        assert_eq!(l.limit(), 10, "nothing judged before a round of 10");
        round(&mut l, 1, 10, 10, 0);
        assert_eq!(l.limit(), 16, "increase: no queue, limit + beta");

        let mut l = netflix();
        round(&mut l, 10, 50, 10, 0);
        assert_eq!(l.limit(), 9, "decrease: queue 8 > beta");

        let mut l = netflix();
        round(&mut l, 10, 14, 10, 0);
        assert_eq!(l.limit(), 10, "no change: queue 3 within [alpha, beta]");
    }

    #[test]
    fn the_mean_of_a_round_is_judged_and_the_fastest_write_is_the_no_load_latency() {
        let mut l = VegasLimit::new(10, 1, 20, 1.0, 42).with_alpha_beta(3.0, 6.0);
        // One write at 10 ms, nine at 54.4: mean 50, queue 8 over a no-load of 10.
        l.on_sample(sample(10, 10));
        for _ in 0..9 {
            l.on_sample(Sample {
                rtt: Duration::from_micros(54_444),
                inflight: 10,
                dropped: false,
            });
        }
        assert_eq!(l.rtt_noload, Some(ms(10)));
        assert_eq!(l.limit(), 9);
    }

    /// Drops are not smoothed: a round with drops cuts once, by the writes pushed back,
    /// at least by log10.
    #[test]
    fn a_round_with_drops_cuts_once_unsmoothed_by_what_was_pushed_back() {
        let mut l = VegasLimit::new(100, 1, 200, 0.5, 7);
        l.rtt_noload = Some(ms(10));
        round(&mut l, 100, 10, 100, 1);
        // 100 − log10(100) = 98, not halfway there (99).
        assert_eq!(l.limit(), 98);
        round(&mut l, 98, 10, 98, 30);
        assert_eq!(l.limit(), 68, "30 pushed back: 98 − 30, once");
    }

    /// After a drop at 10 in flight, 10 is probed again after 1 round below it, then 2;
    /// growth toward it is the gentle one (+1), not + beta.
    #[test]
    fn a_level_that_was_pushed_back_is_probed_gently_and_ever_more_rarely() {
        let mut l = netflix();
        round(&mut l, 10, 10, 10, 1);
        assert_eq!(l.limit(), 9, "cut: 10 − 1");
        round(&mut l, 9, 10, 9, 0);
        assert_eq!(l.limit(), 9, "held off one round");
        round(&mut l, 9, 10, 9, 0);
        assert_eq!(l.limit(), 10, "probes 10 with + 1, not + 6");
        round(&mut l, 10, 10, 10, 1);
        assert_eq!(l.limit(), 9);
        for _ in 0..2 {
            round(&mut l, 9, 10, 9, 0);
            assert_eq!(l.limit(), 9, "held off two rounds now");
        }
        round(&mut l, 9, 10, 9, 0);
        assert_eq!(l.limit(), 10);
        round(&mut l, 10, 10, 10, 0);
        assert_eq!(l.limit(), 11, "the probe held: + 1");
        round(&mut l, 11, 10, 11, 0);
        assert_eq!(l.limit(), 17, "and + beta again after it");
    }

    /// A probe of 10 whose drop is still unanswered: its round reads as no queue, but
    /// it is no probe that held, and the limit does not grow past 10.
    #[test]
    fn a_round_with_a_stalled_write_neither_grows_past_it_nor_forgets_the_level() {
        let mut l = netflix();
        round(&mut l, 10, 10, 10, 1);
        round(&mut l, 9, 10, 9, 0);
        round(&mut l, 9, 10, 9, 0);
        assert_eq!(l.limit(), 10, "probes 10");
        l.stalled(Some(Stalled {
            level: 10,
            count: 1,
        }));
        for _ in 0..3 {
            round(&mut l, 10, 10, 10, 0);
        }
        assert_eq!(l.limit(), 10, "held while the write is stalled");
        assert_eq!(l.pushed_back.level(), Some(10), "not forgotten");
        l.stalled(None);
        round(&mut l, 10, 10, 10, 0);
        assert_eq!(l.limit(), 11, "answered: the probe held");
    }

    /// A `+beta` whose rounds after it queue past beta is taken back whole, not a log10 a
    /// round; the limit then grows to that height only gently, and only on rounds that all
    /// ran at the limit (a round mixing writes started below it shows less queue).
    #[test]
    fn a_jump_that_overshot_is_taken_back_and_approached_gently() {
        let mut l = netflix();
        round(&mut l, 10, 10, 10, 0);
        assert_eq!(l.limit(), 16, "no queue: + beta");
        round(&mut l, 16, 13, 15, 0);
        assert_eq!(
            l.limit(),
            16,
            "queue 4, most of the round started before the jump"
        );
        round(&mut l, 16, 40, 16, 0);
        assert_eq!(l.limit(), 10, "queue 12 > beta: back to 10, not 15");
        round(&mut l, 10, 10, 10, 0);
        assert_eq!(l.limit(), 11, "no queue, but 16 overshot: + 1, not + 6");
        l.on_sample(sample(10, 10));
        for _ in 0..10 {
            l.on_sample(sample(10, 11));
        }
        assert_eq!(
            l.limit(),
            11,
            "a round partly started below 11 does not grow it"
        );
        round(&mut l, 11, 10, 11, 0);
        assert_eq!(l.limit(), 12, "a round all at 11 does");
    }

    #[test]
    fn writes_started_above_a_cut_limit_are_not_judged_again() {
        let mut l = netflix();
        round(&mut l, 10, 10, 10, 1);
        assert_eq!(l.limit(), 9);
        round(&mut l, 9, 10, 10, 9);
        assert_eq!(
            l.limit(),
            9,
            "the rest of the failed round does not cut again"
        );
    }

    #[test]
    fn probes_the_unloaded_latency_by_draining_to_the_minimum() {
        let mut l = netflix();
        // Enough samples to trigger a probe (jitter × 30 × limit ≤ 300).
        let mut probed = false;
        for _ in 0..400 {
            l.on_sample(sample(14, 10));
            if l.limit() == 1 {
                probed = true;
                break;
            }
        }
        assert!(probed, "a probe drains to the minimum");
        l.on_sample(sample(30, 10));
        assert_eq!(l.limit(), 1, "a loaded write does not end the probe");
        l.on_sample(sample(12, 1));
        assert_eq!(l.limit(), 10, "back to the limit it had");
        assert_eq!(l.rtt_noload, Some(ms(12)));
    }

    /// Rounds running at the no-load latency confirm it: no drain to the minimum.
    #[test]
    fn a_sink_still_running_at_its_no_load_latency_is_not_drained() {
        let mut l = netflix();
        for _ in 0..1_000 {
            l.on_sample(sample(10, l.limit()));
            assert!(l.limit() > 1, "drained although every write ran unloaded");
        }
        // Once no round runs near it any more, the next probe drains.
        let mut probed = false;
        for _ in 0..2_000 {
            l.on_sample(sample(30, l.limit()));
            if l.limit() == 1 {
                probed = true;
                break;
            }
        }
        assert!(probed, "a sink that got slower is probed");
    }

    #[test]
    fn does_not_grow_while_app_limited() {
        let mut l = netflix();
        round(&mut l, 10, 10, 4, 0);
        assert_eq!(l.limit(), 10);
    }
}
