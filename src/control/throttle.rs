//! What the worker does when the sink says "too many requests": it stops sending
//! altogether for as long as the sink asked (Retry-After, stretched by a little random
//! jitter so that many workers do not come back in the same instant) or, without such an
//! answer, for a growing backoff; and it tells which signals are news. How far the rate
//! falls is [`super::sink_limit`]'s business.
//!
//! One congestion episode is one signal, not one per response: a signal is fresh only if
//! its request was sent after the previous fresh one and at least one tick has passed
//! since — a burst of 429s answering requests that were all in flight together is one
//! signal. Likewise a backoff pause grows only for a request sent after the previous one
//! was ordered: each pause is followed by at most one round of requests (one per batch in
//! flight), which bounds what an outage costs the sink. A second throttle without
//! Retry-After with nothing written in between is an outage: a sink that takes nothing
//! (answering 503) says nothing about its capacity, and only the growing pause spares it.
//! Pure: the time comes in as an argument (time since the worker started).

pub mod settings;

use std::time::Duration;

use rand::RngExt;

use super::backoff::Backoff;

#[derive(Debug, Clone)]
pub struct ThrottleParams {
    /// At most one fresh signal per window: the cadence's tick.
    pub window: Duration,
    /// A Retry-After pause is stretched by a random share of itself, up to this.
    pub pause_jitter: f64,
    /// The pause when the sink throttles without saying for how long; its ceiling is what
    /// a worker may still be waiting when a sink that was down comes back.
    pub backoff: Backoff,
}

/// The sink throttled a write.
#[derive(Debug, Clone, Copy)]
pub struct Signal {
    pub now: Duration,
    /// When the throttled request was sent.
    pub sent_at: Duration,
    pub retry_after: Option<Duration>,
    /// `None` when the whole request was refused; the share of its records refused when
    /// the sink answered item by item (a bulk API's 200 with 429 items). Such a sink is
    /// answering: however often it refuses items, that is never an outage; and it pauses
    /// the worker in proportion to the share, not as a whole refusal would.
    pub share: Option<f64>,
}

/// What a signal changed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reaction {
    /// News (not an echo of a signal already acted on): the limit may learn from it.
    pub fresh: bool,
    /// The second throttle without Retry-After since the last write: an outage.
    pub outage: bool,
    /// No write may be sent before this instant.
    pub paused_until: Duration,
}

#[derive(Debug, Clone)]
pub struct Throttle {
    params: ThrottleParams,
    last_fresh_at: Option<Duration>,
    /// When the last backoff pause (a throttle without Retry-After) was ordered.
    last_backoff_at: Option<Duration>,
    paused_until: Duration,
    /// Throttle signals without Retry-After since the last successful write.
    streak: u32,
}

impl Throttle {
    pub fn new(params: ThrottleParams) -> Self {
        Throttle {
            params,
            last_fresh_at: None,
            last_backoff_at: None,
            paused_until: Duration::ZERO,
            streak: 0,
        }
    }

    pub fn paused_until(&self) -> Duration {
        self.paused_until
    }

    pub fn is_paused(&self, now: Duration) -> bool {
        now < self.paused_until
    }

    pub fn on_throttle(&mut self, s: Signal, rng: &mut impl rand::Rng) -> Reaction {
        let same_streak = s.retry_after.is_none() && self.streak > 0;
        let fresh = !same_streak
            && self
                .last_fresh_at
                .is_none_or(|at| s.sent_at >= at && s.now >= at + self.params.window);
        if fresh {
            self.last_fresh_at = Some(s.now);
        }
        match s.retry_after {
            Some(wait) => {
                let stretch = if self.params.pause_jitter > 0.0 {
                    rng.random_range(0.0..=self.params.pause_jitter)
                } else {
                    0.0
                };
                self.pause(s.now, s.now + wait.mul_f64(1.0 + stretch));
            }
            None if self.last_backoff_at.is_none_or(|at| s.sent_at >= at) => {
                self.streak += 1;
                self.last_backoff_at = Some(s.now);
                // Items refused while the rest was taken: a pause in proportion to them.
                let share = s.share.unwrap_or(1.0).clamp(0.0, 1.0);
                let wait = self
                    .params
                    .backoff
                    .half_jitter(self.streak, rng)
                    .mul_f64(share);
                self.pause(s.now, s.now + wait);
            }
            // An echo of a signal already acted on: its pause is in force, or was.
            None => {}
        }
        Reaction {
            fresh,
            outage: s.retry_after.is_none() && s.share.is_none() && self.streak >= 2,
            paused_until: self.paused_until,
        }
    }

    /// A write went through: the next throttle without Retry-After starts a new backoff.
    pub fn on_success(&mut self) {
        self.streak = 0;
    }

    /// Holds every write until `until`.
    fn pause(&mut self, now: Duration, until: Duration) {
        if until > now && until > self.paused_until {
            self.paused_until = until;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const TICK: Duration = Duration::from_millis(200);

    use crate::testing::ms;

    fn throttle() -> Throttle {
        Throttle::new(ThrottleParams {
            window: TICK,
            pause_jitter: 0.2,
            backoff: Backoff::new(ms(100), Duration::from_secs(30), 2.0),
        })
    }

    fn signal(now: Duration, sent_at: Duration) -> Signal {
        Signal {
            now,
            sent_at,
            retry_after: None,
            share: None,
        }
    }

    fn after(now: Duration, sent_at: Duration, wait: Duration) -> Signal {
        Signal {
            retry_after: Some(wait),
            ..signal(now, sent_at)
        }
    }

    #[test]
    fn one_storm_in_a_tick_is_one_signal() {
        let mut t = throttle();
        let mut rng = StdRng::seed_from_u64(1);
        // 50 responses to requests that were all in flight together, arriving over 150 ms.
        let fresh = (0..50)
            .filter(|i| {
                t.on_throttle(after(ms(1000 + 3 * i), ms(990), Duration::ZERO), &mut rng)
                    .fresh
            })
            .count();
        assert_eq!(fresh, 1);
    }

    #[test]
    fn fresh_requests_throttled_within_the_same_tick_are_one_signal() {
        let mut t = throttle();
        let mut rng = StdRng::seed_from_u64(2);
        let z = Duration::ZERO;
        assert!(t.on_throttle(after(ms(1000), ms(990), z), &mut rng).fresh);
        assert!(!t.on_throttle(after(ms(1100), ms(1050), z), &mut rng).fresh);
        assert!(!t.on_throttle(after(ms(1199), ms(1150), z), &mut rng).fresh);
        // A late echo of a request sent before the first signal: old news.
        assert!(!t.on_throttle(after(ms(1400), ms(980), z), &mut rng).fresh);
        assert!(t.on_throttle(after(ms(1400), ms(1300), z), &mut rng).fresh);
    }

    #[test]
    fn retry_after_pauses_with_jitter_and_workers_do_not_return_together() {
        let mut deadlines = Vec::new();
        for seed in 0..20 {
            let mut t = throttle();
            let mut rng = StdRng::seed_from_u64(seed);
            let r = t.on_throttle(after(ms(1000), ms(990), Duration::from_secs(2)), &mut rng);
            assert!(r.paused_until >= ms(3000) && r.paused_until <= ms(3400));
            assert!(t.is_paused(ms(2999)) && !t.is_paused(r.paused_until));
            assert!(!r.outage);
            deadlines.push(r.paused_until);
        }
        deadlines.sort();
        deadlines.dedup();
        assert!(deadlines.len() >= 15, "spread: {deadlines:?}");
    }

    #[test]
    fn a_longer_retry_after_extends_the_pause_a_shorter_one_does_not_shorten_it() {
        let mut t = throttle();
        let mut rng = StdRng::seed_from_u64(9);
        let at = |now, wait| after(ms(now), ms(now), Duration::from_secs(wait));
        let first = t.on_throttle(at(0, 5), &mut rng).paused_until;
        assert_eq!(t.on_throttle(at(100, 1), &mut rng).paused_until, first);
        assert!(t.on_throttle(at(200, 10), &mut rng).paused_until >= ms(10_200));
    }

    #[test]
    fn without_retry_after_the_pause_backs_off_until_a_write_succeeds() {
        let mut t = throttle();
        let mut rng = StdRng::seed_from_u64(10);
        let b = Backoff::new(ms(100), Duration::from_secs(30), 2.0);
        let mut now = ms(0);
        for attempt in 1..=8 {
            let r = t.on_throttle(signal(now + ms(5), now), &mut rng);
            let pause = r.paused_until - (now + ms(5));
            assert!(
                pause >= b.ceiling(attempt) / 2 && pause <= b.ceiling(attempt),
                "attempt {attempt}: {pause:?}"
            );
            assert_eq!(r.fresh, attempt == 1, "one streak, one fresh signal");
            assert_eq!(r.outage, attempt >= 2, "the second in a row is an outage");
            // Echoes from the same round neither signal nor extend the pause.
            let echo = t.on_throttle(signal(now + ms(6), now), &mut rng);
            assert!(!echo.fresh);
            assert_eq!(echo.paused_until, r.paused_until);
            now = r.paused_until;
        }
        t.on_success();
        let r = t.on_throttle(signal(now + ms(5), now), &mut rng);
        assert_eq!(
            r.paused_until,
            now + ms(105),
            "a new episode starts from min_delay"
        );
        assert!(
            r.fresh && !r.outage,
            "a throttle after a success is news again"
        );
    }

    #[test]
    fn an_outage_costs_one_round_of_requests_per_pause() {
        // Four batches in flight against a sink answering 503 for ten seconds: after each
        // pause all four try once, and only the first answer orders the next pause.
        let mut t = throttle();
        let mut rng = StdRng::seed_from_u64(12);
        let mut now = ms(0);
        let mut requests = 0;
        while now < Duration::from_secs(10) {
            let sent = now;
            requests += 4;
            for i in 0..4 {
                t.on_throttle(signal(sent + ms(2 + i), sent), &mut rng);
            }
            now = t.paused_until();
        }
        // Lower bounds of the pauses: 0.1, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4 s — at most
        // eight rounds start within ten seconds.
        assert!(requests <= 4 * 8, "{requests} requests");
    }

    #[test]
    fn items_refused_pause_in_proportion_to_their_share() {
        let mut rng = StdRng::seed_from_u64(8);
        for share in [0.01, 0.2, 1.0] {
            let mut t = throttle();
            let r = t.on_throttle(
                Signal {
                    share: Some(share),
                    ..signal(ms(1000), ms(990))
                },
                &mut rng,
            );
            let pause = (r.paused_until.saturating_sub(ms(1000))).as_secs_f64();
            // The whole-refusal pause of a first throttle is 100 ms here.
            assert!(
                (pause - 0.1 * share).abs() < 1e-6,
                "share {share}: paused {pause}"
            );
        }
    }

    #[test]
    fn items_refused_by_a_sink_that_answers_are_never_an_outage() {
        let mut rng = StdRng::seed_from_u64(7);
        // Items refused whole, again and again, by a sink that answers: no outage.
        let mut part = throttle();
        for at in [1000, 1300, 1600] {
            let r = part.on_throttle(
                Signal {
                    share: Some(1.0),
                    ..signal(ms(at), ms(at - 10))
                },
                &mut rng,
            );
            assert!(!r.outage, "at {at}");
        }
    }
}
