//! First contact with a sink: until it first pushes back, the worker does not know what
//! it takes. As a TCP sender facing an unknown path, it starts at a small share of its
//! ceiling and doubles the share once per round of answered writes; and it sends each
//! tick's worth as a few parts spread across the tick. The sink's burst hides the ramp —
//! the first refusal comes once the rate has reached the ceiling — so the parts are what
//! bound the overshoot: the first refused request carries a part of a tick, not all of it
//! (at four times a 800 rec/s sink's capacity and a 200 ms tick, 160 records, not 640).
//!
//! The share grows as soon as a round is answered (the pipeline plans again then, as TCP
//! grows its window on the acknowledgement), not at the tick after: a round's writes go at
//! a tick and are answered within it, so growth at the next tick's plan came a whole tick
//! late. It grows at most once a tick, however many parts are answered within it.
//!
//! It ends at the first push-back, or `linger` after the share reached the whole ceiling
//! with none: a sink whose burst lasts longer than that is met with whole ticks.
//!
//! Pure: the time comes in as an argument.

use std::time::Duration;

/// How first contact starts and ends: `[throttle]`'s tuning, over these defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FirstContactParams {
    /// The share of the ceiling the first writes go at.
    pub from: f64,
    /// The share grows by this factor per round of answered writes.
    pub growth: f64,
    /// A tick's worth goes as this many parts, spread across the tick …
    pub parts: u32,
    /// … none smaller than this many records: a sink that counts requests takes a few
    /// small requests as badly as one large one, and learns the wrong limit from them.
    pub least_part: u64,
    /// How long the whole ceiling runs without a push-back before first contact ends.
    pub linger: Duration,
}

impl FirstContactParams {
    /// No first contact: the whole ceiling from the start, a tick's worth at once.
    pub const NONE: FirstContactParams = FirstContactParams {
        from: 1.0,
        growth: 1.0,
        parts: 1,
        least_part: 1,
        linger: Duration::ZERO,
    };
}

impl FirstContactParams {
    /// The parts a tick of `quantum` records goes as: up to `parts` and `most`, none
    /// smaller than `least_part`.
    pub fn parts_of(&self, quantum: u64, most: u32) -> u32 {
        let most = u64::from(self.parts.min(most).max(1));
        (quantum / self.least_part.max(1)).clamp(1, most) as u32
    }
}

impl Default for FirstContactParams {
    fn default() -> Self {
        FirstContactParams {
            from: 0.125,
            growth: 2.0,
            parts: 4,
            least_part: 50,
            linger: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, Clone)]
pub struct FirstContact {
    params: FirstContactParams,
    share: f64,
    /// When the current share was first planned: a write sent from then on and answered
    /// closes the round.
    round_from: Duration,
    /// The round closed: the share grows at the next plan.
    closed: bool,
    /// When the share last grew: it grows again no sooner than most of a tick later.
    grown_at: Option<Duration>,
    /// When the share reached the whole ceiling.
    whole_since: Option<Duration>,
    /// The share a push-back ended the climb at: where it resumes if that push-back is
    /// found to be no push-back at all.
    cut_at: Option<f64>,
    over: bool,
}

impl FirstContact {
    pub fn new(params: FirstContactParams) -> Self {
        let share = params.from.clamp(f64::MIN_POSITIVE, 1.0);
        FirstContact {
            params,
            share,
            round_from: Duration::ZERO,
            closed: false,
            grown_at: None,
            whole_since: None,
            cut_at: None,
            over: share >= 1.0 && params.parts <= 1,
        }
    }

    /// Already over: a limit is known, so there is nothing to meet.
    pub fn over() -> Self {
        FirstContact {
            over: true,
            ..FirstContact::new(FirstContactParams::default())
        }
    }

    pub fn is_over(&self) -> bool {
        self.over
    }

    /// Still below the whole ceiling.
    pub fn is_ramping(&self) -> bool {
        !self.over && self.share < 1.0
    }

    /// A round was answered and the share grows when planned at `now`, ticks `tick` apart:
    /// plan now. Once a tick: a tick's parts answered after a growth are not another round
    /// (a tenth of a tick's slack for answers that come a little sooner than the last).
    pub fn grows(&self, now: Duration, tick: Duration) -> bool {
        !self.over
            && self.closed
            && self.share < 1.0
            && self.grown_at.is_none_or(|at| now >= at + tick.mul_f64(0.9))
    }

    /// The share of the ceiling to run at from `now`, and the parts a tick of `quantum`
    /// records goes as; ticks are `tick` apart.
    pub fn plan(&mut self, now: Duration, tick: Duration, quantum: u64) -> (f64, u32) {
        if self.over {
            return (1.0, 1);
        }
        if self.grows(now, tick) {
            self.closed = false;
            self.share = (self.share * self.params.growth.max(1.0)).min(1.0);
            self.round_from = now;
            self.grown_at = Some(now);
            if self.share >= 1.0 {
                self.whole_since = Some(now);
            }
        }
        if self
            .whole_since
            .is_some_and(|at| now >= at + self.params.linger)
        {
            self.over = true;
            return (1.0, 1);
        }
        let quantum = (quantum as f64 * self.share).ceil() as u64;
        (self.share, self.params.parts_of(quantum, u32::MAX))
    }

    /// A write sent at `sent_at` was taken.
    pub fn answered(&mut self, sent_at: Duration) {
        if !self.over && sent_at >= self.round_from {
            self.closed = true;
        }
    }

    /// The sink pushed back: from here on its learned limit governs, in whole ticks.
    /// (Parts kept until the next push-back, which closes the sample the limit is
    /// learned from, cost more than they saved: 1.044 records sent per delivered against
    /// 1.033 in the bench's model.)
    /// Returns, if first contact was on past its first round, what the round before the
    /// last growth sent as a share of the current rate: the sink took it whole, where the
    /// last second's rate, most of it climbing, understates what it takes.
    pub fn pushed_back(&mut self) -> Option<f64> {
        if self.is_ramping() {
            self.cut_at = Some(self.share);
        }
        let before = (!self.over && self.share > self.params.from)
            .then(|| 1.0 / self.params.growth.max(1.0));
        self.over = true;
        before
    }

    /// The push-back that ended the climb was misread (a sink refusing a share of items
    /// whatever the rate): the climb goes on from where it was. False when it had ended
    /// otherwise.
    pub fn resume(&mut self) -> bool {
        let Some(share) = self.cut_at.take() else {
            return false;
        };
        self.share = share;
        self.closed = false;
        self.over = false;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ms;

    const TICK: Duration = Duration::from_millis(200);

    #[test]
    fn doubles_once_per_answered_round_then_ends_after_lingering_at_the_ceiling() {
        let mut contact = FirstContact::new(FirstContactParams::default());
        let mut shares = Vec::new();
        for i in 1..=20u64 {
            let now = ms(200 * i);
            let (share, _) = contact.plan(now, TICK, 640);
            shares.push(share);
            // Every part of the tick is answered: one round, one growth.
            contact.answered(now);
            contact.answered(now + ms(50));
        }
        assert_eq!(shares[..6], [0.125, 0.25, 0.5, 1.0, 1.0, 1.0], "{shares:?}");
        // The whole ceiling from 0.8 s, 2 s of it: over at 2.8 s (the 14th tick).
        assert!(contact.is_over());
        assert_eq!(contact.plan(ms(4200), TICK, 640), (1.0, 1));
    }

    #[test]
    fn an_answer_to_a_write_sent_before_the_share_grew_closes_no_round() {
        let mut contact = FirstContact::new(FirstContactParams::default());
        contact.plan(ms(200), TICK, 640);
        contact.answered(ms(200));
        assert_eq!(contact.plan(ms(400), TICK, 640).0, 0.25);
        // A slow answer to the write of 200 ms: sent before this share was planned.
        contact.answered(ms(300));
        assert_eq!(contact.plan(ms(600), TICK, 640).0, 0.25);
        // Nothing answered: no growth.
        assert_eq!(contact.plan(ms(800), TICK, 640).0, 0.25);
        contact.answered(ms(700));
        assert_eq!(contact.plan(ms(1000), TICK, 640).0, 0.5);
    }

    #[test]
    fn grows_on_the_answer_once_a_tick() {
        let mut contact = FirstContact::new(FirstContactParams::default());
        assert_eq!(contact.plan(ms(0), TICK, 640).0, 0.125);
        assert!(!contact.grows(ms(5), TICK), "nothing answered yet");
        contact.answered(ms(0));
        // Answered 7 ms in: the share grows then, not at the next tick.
        assert!(contact.grows(ms(7), TICK));
        assert_eq!(contact.plan(ms(7), TICK, 640).0, 0.25);
        // A part of the same tick sent after the growth and answered: not another round
        // within the tick.
        contact.answered(ms(50));
        assert!(!contact.grows(ms(57), TICK));
        assert_eq!(contact.plan(ms(57), TICK, 640).0, 0.25);
        // The next tick's plan grows it (an answer 6 ms sooner than the last is in time).
        assert!(contact.grows(ms(201), TICK));
        assert_eq!(contact.plan(ms(201), TICK, 640).0, 0.5);
    }

    #[test]
    fn parts_are_never_smaller_than_the_least_part() {
        let mut contact = FirstContact::new(FirstContactParams {
            from: 1.0,
            ..FirstContactParams::default()
        });
        assert_eq!(contact.plan(ms(200), TICK, 640), (1.0, 4));
        assert_eq!(contact.plan(ms(400), TICK, 160), (1.0, 3));
        assert_eq!(contact.plan(ms(600), TICK, 80), (1.0, 1));
        assert_eq!(contact.plan(ms(800), TICK, 20), (1.0, 1));
    }

    #[test]
    fn a_misread_push_back_resumes_the_climb_where_it_was() {
        let mut contact = FirstContact::new(FirstContactParams::default());
        contact.plan(ms(200), TICK, 640);
        contact.answered(ms(200));
        assert_eq!(contact.plan(ms(400), TICK, 640).0, 0.25);
        // The round at an eighth, half this one, was taken whole.
        assert_eq!(contact.pushed_back(), Some(0.5));
        assert_eq!(contact.plan(ms(600), TICK, 640).0, 1.0);
        assert!(contact.resume());
        assert_eq!(contact.plan(ms(800), TICK, 640).0, 0.25);
        contact.answered(ms(800));
        assert_eq!(contact.plan(ms(1000), TICK, 640).0, 0.5);
        // Once only, and never after the climb ended at the ceiling.
        assert_eq!(contact.pushed_back(), Some(0.5));
        assert!(contact.resume());
        assert!(!contact.resume());
    }

    #[test]
    fn a_push_back_ends_it_at_once() {
        let mut contact = FirstContact::new(FirstContactParams::default());
        assert_eq!(contact.plan(ms(200), TICK, 640), (0.125, 1));
        // No round before the first: nothing known taken.
        assert_eq!(contact.pushed_back(), None);
        assert!(contact.is_over());
        assert_eq!(contact.plan(ms(400), TICK, 640), (1.0, 1));
    }
}
