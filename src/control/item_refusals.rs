//! Items a bulk sink refused while taking the rest of the write (Elasticsearch's 429 items):
//! how much of a push-back they are. The reaction is in proportion to the share refused
//! of the items answered lately, not one full throttle per answer — a cut and a pause on
//! every answer that refused anything drained a sink refusing 1% of items at random to a
//! quarter of the rate, and one refusing half to 3 documents a second:
//!
//! - a share under [`NOISE`] is resent and nothing more: if the worker is over the sink's
//!   capacity at all, it is by about that share, which the resends cost anyway;
//! - above it, the worker pushes back by the share (pause and learned limit);
//! - once the rate has fallen, the share must fall with it, as it does at a sink that
//!   refuses for want of room (one that took `1 - share` of the old rate refuses what
//!   exceeds that at the new one). A share that stays nearer the old one is the sink's own
//!   (one busy node, a hot shard's queue): the rate is restored and that share no longer
//!   counts, up to [`MOST`]: a sink refusing more than half of what it is sent is backed
//!   off whatever the reason. The sink's own share is forgotten as the share answered
//!   falls.
//!
//! Pure: the time comes in as an argument (time since the worker started).

use std::collections::VecDeque;
use std::time::Duration;

/// The share of items answered over the last [`WINDOW`] that is no signal.
pub const NOISE: f64 = 0.05;
/// The most of the items a sink may refuse and still be sent as many.
pub const MOST: f64 = 0.5;
/// How far back the share refused is measured.
const WINDOW: Duration = Duration::from_secs(1);
/// Items answered after a cut that tell whether the share fell with the rate.
const JUDGED_ON: u64 = 200;
/// A cut the rate did not follow within this long is not judged (nor its answers kept).
const JUDGED_WITHIN: Duration = Duration::from_secs(10);

/// One answer: when its write was sent and answered, the items taken and refused.
#[derive(Debug, Clone, Copy)]
struct Answer {
    sent_at: Duration,
    at: Duration,
    taken: u64,
    refused: u64,
}

/// A push-back the share refused ordered: the rate before it and the share it answered.
#[derive(Debug, Clone, Copy)]
struct Cut {
    at: Duration,
    rate: f64,
    share: f64,
}

/// What a part-refused answer means.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RefusalVerdict {
    /// No signal: the refused items are resent, nothing more.
    Noise,
    /// A push-back of this share of the items, beyond the sink's own share: the share of
    /// the last second, or of this answer if more (a sink that filled up at once).
    PushBack(f64),
    /// The last push-back did not lower the share: not the rate's doing. The rate before it
    /// (records per second) is to be restored.
    Misread { rate: f64 },
}

#[derive(Debug, Clone, Default)]
pub struct ItemRefusals {
    answers: VecDeque<Answer>,
    /// The share the sink refuses whatever the rate.
    own: f64,
    cut: Option<Cut>,
}

impl ItemRefusals {
    /// The sink took `records` of a write sent at `sent_at`.
    pub fn taken(&mut self, now: Duration, sent_at: Duration, records: u64) {
        self.push(Answer {
            sent_at,
            at: now,
            taken: records,
            refused: 0,
        });
    }

    /// The sink refused `refused` of the `sent` items of a write sent at `sent_at` (what it
    /// took was reported through [`ItemRefusals::taken`] first), while the worker was
    /// planned at `rate` records per second.
    pub fn refused(
        &mut self,
        now: Duration,
        sent_at: Duration,
        refused: u64,
        sent: u64,
        rate: f64,
    ) -> RefusalVerdict {
        self.push(Answer {
            sent_at,
            at: now,
            taken: 0,
            refused,
        });
        let share = self.share(|a| a.at + WINDOW > now);
        if let Some(cut) = self.cut
            && rate <= cut.rate * (1.0 - cut.share / 2.0)
            && let Some((since, answered)) = self.judged(cut.at + WINDOW)
        {
            self.cut = None;
            // A sink that was full took (1 - share) of the old rate: at the new one it
            // refuses what exceeds that. A share nearer the old one than that is not the
            // rate's doing.
            let full = (1.0 - (1.0 - cut.share) * cut.rate / rate.max(f64::MIN_POSITIVE)).max(0.0);
            if since - self.own >= (cut.share + full) / 2.0 && since <= MOST {
                // As much as it may refuse: judged on a few hundred items, a share refused
                // at random reads a fifth low as often as not.
                self.own = since + spread(since, answered);
                return RefusalVerdict::Misread { rate: cut.rate };
            }
        }
        let excess = share - self.own;
        if excess < NOISE + spread(self.own, self.count(|a| a.at + WINDOW > now)) {
            return RefusalVerdict::Noise;
        }
        self.cut.get_or_insert(Cut {
            at: now,
            rate,
            share: excess,
        });
        let this = refused as f64 / sent.max(refused).max(1) as f64 - self.own;
        RefusalVerdict::PushBack(excess.max(this))
    }

    fn push(&mut self, answer: Answer) {
        self.answers.push_back(answer);
        let now = answer.at;
        if self.cut.is_some_and(|c| c.at + JUDGED_WITHIN < now) {
            self.cut = None;
        }
        let keep_from = self.cut.map_or(now.saturating_sub(WINDOW), |c| {
            c.at.min(now.saturating_sub(WINDOW))
        });
        while self.answers.front().is_some_and(|a| a.at < keep_from) {
            self.answers.pop_front();
        }
        // The sink's own share is what it refuses at most lately: forgotten as that falls
        // beyond its noise, judged on the answers complete (what this one refused may be
        // reported next). Lowered to each window's share, a share refused at random ratchets
        // down to its lowest draw and the next ordinary one reads as a push-back.
        let complete = |a: &Answer| a.at < now && a.at + WINDOW > now;
        let answered = self.count(complete);
        if self.own > 0.0 && answered >= JUDGED_ON {
            let share = self.share(complete);
            self.own = self.own.min(share + spread(share, answered));
        }
    }

    /// The share refused of the items answered to writes sent after `at`, once enough of
    /// them answered. (Writes sent just after a cut still meet the reserve the overshoot
    /// emptied: a cut is judged on writes sent a [`WINDOW`] after it.)
    fn judged(&self, at: Duration) -> Option<(f64, u64)> {
        let after = |a: &Answer| a.sent_at > at;
        let answered = self.count(after);
        (answered >= JUDGED_ON).then(|| (self.share(after), answered))
    }

    fn count(&self, keep: impl Fn(&Answer) -> bool) -> u64 {
        self.answers
            .iter()
            .filter(|a| keep(a))
            .map(|a| a.taken + a.refused)
            .sum()
    }

    fn share(&self, keep: impl Fn(&Answer) -> bool) -> f64 {
        let (taken, refused) = self
            .answers
            .iter()
            .filter(|a| keep(a))
            .fold((0, 0), |(t, r), a| (t + a.taken, r + a.refused));
        if taken + refused == 0 {
            0.0
        } else {
            refused as f64 / (taken + refused) as f64
        }
    }
}

/// How far a share refused at random strays over `items` answered: three standard
/// deviations of their binomial count, so that a sink refusing a share of its own is not
/// read as one refusing more for want of room whenever a second's draw runs high.
fn spread(share: f64, items: u64) -> f64 {
    3.0 * (share * (1.0 - share) / items.max(1) as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::ms;

    /// Answers of `items` each every 20 ms from `from` for `span`, refusing `share` of
    /// them, at `rate`; the verdicts of the refusals.
    fn run(
        r: &mut ItemRefusals,
        from: u64,
        span: u64,
        items: u64,
        share: f64,
        rate: &dyn Fn(&[RefusalVerdict]) -> f64,
    ) -> Vec<RefusalVerdict> {
        let mut verdicts = Vec::new();
        for at in (from..from + span).step_by(20) {
            let refused = (items as f64 * share).round() as u64;
            let (now, sent) = (ms(at + 10), ms(at));
            r.taken(now, sent, items - refused);
            if refused > 0 {
                verdicts.push(r.refused(now, sent, refused, items, rate(&verdicts)));
            }
        }
        verdicts
    }

    #[test]
    fn a_few_refused_are_no_signal() {
        let mut r = ItemRefusals::default();
        let v = run(&mut r, 0, 5000, 200, 0.02, &|_| 5000.0);
        assert!(v.iter().all(|v| *v == RefusalVerdict::Noise), "{v:?}");
    }

    #[test]
    fn a_share_that_falls_with_the_rate_is_the_rates_doing() {
        // A sink at capacity: 40% refused at 5,000/s; none once the rate is cut.
        let mut r = ItemRefusals::default();
        let v = run(&mut r, 0, 100, 200, 0.4, &|_| 5000.0);
        assert!(
            matches!(v[0], RefusalVerdict::PushBack(s) if (s - 0.4).abs() < 0.01),
            "{v:?}"
        );
        let v = run(&mut r, 100, 2000, 200, 0.0, &|_| 3000.0);
        assert!(v.is_empty());
        // Later, over it again: a push-back (once the share of the last second tells),
        // not the sink's own share.
        let v = run(&mut r, 2100, 500, 200, 0.3, &|_| 3000.0);
        assert!(
            v.iter().any(|v| matches!(v, RefusalVerdict::PushBack(_))),
            "{v:?}"
        );
        assert!(
            !v.iter()
                .any(|v| matches!(v, RefusalVerdict::Misread { .. })),
            "{v:?}"
        );
    }

    #[test]
    fn a_share_that_stays_when_the_rate_falls_is_the_sinks_own() {
        let mut r = ItemRefusals::default();
        // 20% refused whatever the rate: pushed back once, then the rate is restored.
        let cut = |v: &[RefusalVerdict]| {
            if v.iter().any(|v| matches!(v, RefusalVerdict::PushBack(_))) {
                3500.0
            } else {
                5000.0
            }
        };
        let v = run(&mut r, 0, 2000, 200, 0.2, &cut);
        assert!(matches!(v[0], RefusalVerdict::PushBack(_)), "{v:?}");
        let misread = v
            .iter()
            .position(|v| matches!(v, RefusalVerdict::Misread { .. }));
        let at = misread.expect("the share did not fall: a misreading");
        assert_eq!(v[at], RefusalVerdict::Misread { rate: 5000.0 });
        assert!(
            v[at + 1..].iter().all(|v| *v == RefusalVerdict::Noise),
            "{:?}",
            &v[at + 1..]
        );
        // It stops refusing: the sink's own share is forgotten, so a share refused later
        // for room is a push-back again.
        run(&mut r, 2000, 2000, 200, 0.0, &|_| 5000.0);
        let v = run(&mut r, 4000, 1000, 200, 0.2, &|_| 5000.0);
        assert!(
            v.iter().any(|v| matches!(v, RefusalVerdict::PushBack(_))),
            "{v:?}"
        );
    }

    /// 20% refused at random to a worker in its slow start (625/s doubling every 200 ms to
    /// 5,000/s, answers every 20 ms): one push-back, read on a few dozen items, and its
    /// misreading; then the rate is left alone. The sink's own share is not taken from a
    /// few hundred items' low draw, nor ratcheted down to a second's lowest, against which an
    /// ordinary second is a push-back (the bulk test's 20% case was cut every 1.6 s so).
    #[test]
    fn a_share_refused_at_random_is_misread_once() {
        use rand::rngs::StdRng;
        use rand::{RngExt, SeedableRng};
        for seed in 0..20 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut r = ItemRefusals::default();
            let mut verdicts = Vec::new();
            let (mut rate, mut cut_at) = (625.0_f64, None);
            for at in (0..30_000).step_by(20) {
                let items = (rate / 50.0).ceil() as u64;
                let refused = (0..items).filter(|_| rng.random_bool(0.2)).count() as u64;
                let (now, sent) = (ms(at + 10), ms(at));
                r.taken(now, sent, items - refused);
                let v = r.refused(now, sent, refused, items, rate);
                // The worker cuts once for the writes sent before a cut's answers come.
                match v {
                    RefusalVerdict::PushBack(share)
                        if cut_at.is_none_or(|cut| at >= cut + 1000) =>
                    {
                        rate *= 1.0 - share;
                        cut_at = Some(at);
                    }
                    RefusalVerdict::Misread { rate: before } => {
                        rate = before;
                        cut_at = None;
                    }
                    _ if cut_at.is_none() && at % 200 == 0 => rate = (rate * 2.0).min(5000.0),
                    _ => {}
                }
                verdicts.push(v);
            }
            let misread = verdicts
                .iter()
                .position(|v| matches!(v, RefusalVerdict::Misread { .. }))
                .expect("never misread");
            let again = verdicts[misread + 1..]
                .iter()
                .position(|v| !matches!(v, RefusalVerdict::Noise));
            assert_eq!(
                again.map(|i| (misread + 1 + i) * 20),
                None,
                "seed {seed}: misread at {} ms",
                misread * 20
            );
            assert!(
                misread * 20 < 10_000,
                "seed {seed}: misread at {} ms",
                misread * 20
            );
        }
    }

    /// 4x a full sink's capacity: 75% refused; at half the rate it still refuses half,
    /// as a full sink does, and that is no misreading.
    #[test]
    fn a_full_sink_refusing_less_as_the_rate_falls_is_no_misreading() {
        let mut r = ItemRefusals::default();
        let v = run(&mut r, 0, 100, 200, 0.75, &|_| 4000.0);
        assert!(matches!(v[0], RefusalVerdict::PushBack(_)), "{v:?}");
        let v = run(&mut r, 100, 1000, 200, 0.45, &|_| 2000.0);
        assert!(
            !v.iter()
                .any(|v| matches!(v, RefusalVerdict::Misread { .. })),
            "{v:?}"
        );
    }

    #[test]
    fn a_sink_refusing_most_items_is_always_backed_off() {
        let mut r = ItemRefusals::default();
        let v = run(&mut r, 0, 3000, 200, 0.8, &|_| 1000.0);
        assert!(
            v.iter()
                .all(|v| matches!(v, RefusalVerdict::PushBack(s) if *s > 0.7)),
            "{v:?}"
        );
    }
}
