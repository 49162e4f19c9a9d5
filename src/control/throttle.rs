//! What the worker does when the sink says "too many requests": it cuts its rate by β and
//! lets it recover (CUBIC or linear), and it stops sending altogether for as long as the
//! sink asked (Retry-After, stretched by a little random jitter so that many workers do
//! not come back in the same instant) or, without such an answer, for a growing backoff.
//!
//! One congestion episode must cost one cut, not one per response: a signal lowers the rate
//! only if its request was sent after the previous cut and at least one tick has passed
//! since — a burst of 429s answering requests that were all in flight together is one
//! signal. Likewise a backoff pause grows only for a request sent after the previous one
//! was ordered: each pause is followed by at most one round of requests (one per batch in
//! flight), which bounds what an outage costs the sink. And a streak of throttles without
//! Retry-After in which nothing was written cuts once: a sink that takes nothing (an
//! outage answered 503) says nothing about its capacity, the growing pause already spares
//! it, and cutting every round would leave the worker crawling long after it came back.
//! Pure: the time comes in as an argument (time since the worker started).

use std::time::Duration;

use rand::RngExt;

use super::backoff::Backoff;
use super::recovery::Recovery;

#[derive(Debug, Clone)]
pub struct ThrottleParams {
    /// Multiplicative decrease on a throttle signal (0.7 as in CUBIC and the AWS SDKs).
    pub beta: f64,
    pub recovery: Recovery,
    /// The rate never drops below this share of the configured rate.
    pub min_multiplier: f64,
    /// At most one cut per window: the cadence's tick.
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
    /// The configured (static or leased) rate, records per second.
    pub ceiling: f64,
    /// Records per second the sink actually took lately, if known.
    pub measured: Option<f64>,
}

/// What a signal changed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reaction {
    /// The rate was cut (a fresh signal); false for an echo of a signal already acted on.
    pub cut: bool,
    /// No write may be sent before this instant.
    pub paused_until: Duration,
}

#[derive(Debug, Clone)]
pub struct Throttle {
    params: ThrottleParams,
    cut: Option<Cut>,
    last_cut_at: Option<Duration>,
    /// When the last backoff pause (a throttle without Retry-After) was ordered.
    last_backoff_at: Option<Duration>,
    paused_until: Duration,
    /// Fresh throttle signals without Retry-After since the last successful write.
    streak: u32,
}

/// The last cut: the rate it was made from (CUBIC's Wmax), and when the recovery began —
/// when sending resumed, since a paused worker learns nothing about the sink.
#[derive(Debug, Clone, Copy)]
struct Cut {
    w_max: f64,
    recovering_since: Duration,
}

impl Throttle {
    pub fn new(params: ThrottleParams) -> Self {
        Throttle {
            params,
            cut: None,
            last_cut_at: None,
            last_backoff_at: None,
            paused_until: Duration::ZERO,
            streak: 0,
        }
    }

    /// The rate allowed now, records per second: within `[min_multiplier, 1] × ceiling`.
    pub fn rate(&self, now: Duration, ceiling: f64) -> f64 {
        let Some(cut) = self.cut else {
            return ceiling;
        };
        let elapsed = now.saturating_sub(cut.recovering_since);
        self.params
            .recovery
            .rate(cut.w_max, self.params.beta, ceiling, elapsed)
            .clamp(self.params.min_multiplier * ceiling, ceiling)
    }

    /// The share of the configured rate allowed now, in `[min_multiplier, 1]`.
    pub fn multiplier(&self, now: Duration, ceiling: f64) -> f64 {
        self.rate(now, ceiling) / ceiling
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
                .last_cut_at
                .is_none_or(|at| s.sent_at >= at && s.now >= at + self.params.window);
        if fresh {
            // The rate in force, or what the sink really took if that was less (the AWS
            // SDKs cut the measured rate): cutting a rate the worker never reached would
            // leave it above the sink's capacity for several more cuts.
            let current = self.rate(s.now, s.ceiling);
            let w_max = s
                .measured
                .filter(|m| *m > 0.0)
                .map_or(current, |m| m.min(current));
            self.cut = Some(Cut {
                w_max,
                recovering_since: s.now,
            });
            self.last_cut_at = Some(s.now);
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
                let wait = self.params.backoff.half_jitter(self.streak, rng);
                self.pause(s.now, s.now + wait);
            }
            // An echo of a signal already acted on: its pause is in force, or was.
            None => {}
        }
        Reaction {
            cut: fresh,
            paused_until: self.paused_until,
        }
    }

    /// A write went through: the next throttle without Retry-After starts a new backoff.
    pub fn on_success(&mut self) {
        self.streak = 0;
    }

    /// Holds every write until `until`; the recovery starts over from there.
    fn pause(&mut self, now: Duration, until: Duration) {
        if until <= now || until <= self.paused_until {
            return;
        }
        self.paused_until = until;
        if let Some(cut) = &mut self.cut {
            cut.recovering_since = cut.recovering_since.max(until);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const TICK: Duration = Duration::from_millis(200);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn params(recovery: Recovery) -> ThrottleParams {
        ThrottleParams {
            beta: 0.7,
            recovery,
            min_multiplier: 0.05,
            window: TICK,
            pause_jitter: 0.2,
            backoff: Backoff::new(ms(100), Duration::from_secs(30), 2.0),
        }
    }

    fn cubic() -> Throttle {
        Throttle::new(params(Recovery::Cubic { scale: 0.4 }))
    }

    fn signal(now: Duration, sent_at: Duration) -> Signal {
        Signal {
            now,
            sent_at,
            retry_after: None,
            ceiling: 1000.0,
            measured: None,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn untouched_runs_at_the_ceiling() {
        let t = cubic();
        assert_eq!(t.multiplier(ms(5000), 1000.0), 1.0);
        assert!(!t.is_paused(Duration::ZERO));
    }

    #[test]
    fn one_storm_in_a_tick_cuts_once() {
        let mut t = cubic();
        let mut rng = StdRng::seed_from_u64(1);
        // 50 responses to requests that were all in flight together, arriving over 150 ms.
        let mut cuts = 0;
        for i in 0..50 {
            let r = t.on_throttle(signal(ms(1000 + 3 * i), ms(990)), &mut rng);
            cuts += u32::from(r.cut);
        }
        assert_eq!(cuts, 1);
        assert!(close(t.rate(t.paused_until(), 1000.0), 700.0));
    }

    #[test]
    fn fresh_requests_throttled_within_the_same_tick_still_cut_once() {
        let mut t = cubic();
        let mut rng = StdRng::seed_from_u64(2);
        assert!(t.on_throttle(signal(ms(1000), ms(990)), &mut rng).cut);
        // Sent after the cut, but answered inside the same tick window.
        assert!(!t.on_throttle(signal(ms(1100), ms(1050)), &mut rng).cut);
        assert!(!t.on_throttle(signal(ms(1199), ms(1150)), &mut rng).cut);
        assert!(close(t.rate(t.paused_until(), 1000.0), 700.0));
    }

    #[test]
    fn a_late_echo_of_an_old_request_does_not_cut_again() {
        let mut t = cubic();
        let mut rng = StdRng::seed_from_u64(3);
        assert!(t.on_throttle(signal(ms(1000), ms(990)), &mut rng).cut);
        // Answered two ticks later, but sent before the first cut: old news.
        assert!(!t.on_throttle(signal(ms(1400), ms(980)), &mut rng).cut);
    }

    #[test]
    fn multiplier_trajectory_under_a_burst_of_429s_then_silence() {
        let mut t = cubic();
        let mut rng = StdRng::seed_from_u64(4);
        // A 429 "retry now" every 50 ms for one second, each for a request sent 10 ms
        // earlier: all fresh, but at most one cut per 200 ms tick → cuts at 0, 200, …, 800.
        let mut cuts = Vec::new();
        for i in 0..20u64 {
            let now = ms(50 * i);
            let s = Signal {
                retry_after: Some(Duration::ZERO),
                ..signal(now, now.saturating_sub(ms(10)))
            };
            if t.on_throttle(s, &mut rng).cut {
                cuts.push(now);
            }
        }
        assert_eq!(cuts, vec![ms(0), ms(200), ms(400), ms(600), ms(800)]);
        // Each cut takes 0.7 of the rate reached 200 ms into the previous recovery:
        // Wmax = 1000, 719.38, 519.08, 375.81, 273.07 → 191.15 rec/s after the fifth.
        // Then silence: the cubic from Wmax = 273.07 (K = 5.894 s) back to the ceiling.
        let expected = [
            (0.0, 0.191149),
            (1.0, 0.226170),
            (2.0, 0.249444),
            (5.0, 0.272784),
            (10.0, 0.300751),
            (15.0, 0.575048),
            (18.0, 0.982665),
            (20.0, 1.0),
        ];
        for (after, m) in expected {
            let got = t.multiplier(ms(800) + Duration::from_secs_f64(after), 1000.0);
            assert!((got - m).abs() < 1e-6, "{after} s after: {got} vs {m}");
        }
        let mut last = 0.0;
        for step in 0..=250u64 {
            let m = t.multiplier(ms(800 + 100 * step), 1000.0);
            assert!(m >= last && m <= 1.0, "monotone recovery, step {step}: {m}");
            last = m;
        }
    }

    #[test]
    fn exact_cubic_values_after_one_cut() {
        let mut t = cubic();
        let mut rng = StdRng::seed_from_u64(5);
        let r = t.on_throttle(
            Signal {
                retry_after: Some(Duration::ZERO),
                ..signal(ms(0), ms(0))
            },
            &mut rng,
        );
        assert!(r.cut);
        let k = (1000.0f64 * 0.3 / 0.4).cbrt();
        for s in [0.0, 1.0, 2.5, 5.0, k, 10.0] {
            let expected = (0.4 * (s - k).powi(3) + 1000.0).min(1000.0);
            let got = t.rate(Duration::from_secs_f64(s), 1000.0);
            assert!(close(got, expected), "t={s}: {got} vs {expected}");
        }
    }

    #[test]
    fn linear_recovery_and_the_floor() {
        let mut t = Throttle::new(params(Recovery::Linear { step: 0.01 }));
        let mut rng = StdRng::seed_from_u64(6);
        for i in 0..30u64 {
            let now = ms(200 * i);
            let s = Signal {
                retry_after: Some(Duration::ZERO),
                ..signal(now, now)
            };
            t.on_throttle(s, &mut rng);
        }
        // 0.7³⁰ would be 2e-5 (and the 2 rec/s regained per tick do not offset the cuts):
        // held at the floor.
        assert!(close(t.multiplier(ms(5800), 1000.0), 0.05));
        // Linear: 1% of the ceiling per second from β · Wmax, Wmax being the floor rate.
        assert!(close(t.rate(ms(5800 + 2000), 1000.0), 0.7 * 50.0 + 20.0));
        assert!(t.multiplier(ms(5800 + 96_000), 1000.0) < 1.0);
        assert_eq!(t.multiplier(ms(5800 + 97_000), 1000.0), 1.0);
    }

    #[test]
    fn never_above_the_configured_rate_even_when_it_changes() {
        let mut t = cubic();
        let mut rng = StdRng::seed_from_u64(7);
        t.on_throttle(
            Signal {
                retry_after: Some(Duration::ZERO),
                ..signal(ms(0), ms(0))
            },
            &mut rng,
        );
        // A lease lost: the ceiling drops below the recovering rate.
        assert_eq!(t.rate(ms(8000), 300.0), 300.0);
        // A lease gained: the recovery continues in records per second, not as a share.
        assert!(t.rate(ms(1000), 4000.0) < 1000.0);
    }

    #[test]
    fn measured_goodput_lowers_the_rate_that_is_cut() {
        let mut t = cubic();
        let mut rng = StdRng::seed_from_u64(8);
        let s = Signal {
            measured: Some(400.0),
            retry_after: Some(Duration::ZERO),
            ..signal(ms(0), ms(0))
        };
        t.on_throttle(s, &mut rng);
        assert!(close(t.rate(ms(0), 1000.0), 280.0));
        // Nothing measured yet (zero): the rate in force is cut.
        let mut t = cubic();
        let s = Signal {
            measured: Some(0.0),
            retry_after: Some(Duration::ZERO),
            ..signal(ms(0), ms(0))
        };
        t.on_throttle(s, &mut rng);
        assert!(close(t.rate(ms(0), 1000.0), 700.0));
    }

    #[test]
    fn retry_after_pauses_with_jitter_and_workers_do_not_return_together() {
        let mut deadlines = Vec::new();
        for seed in 0..20 {
            let mut t = cubic();
            let mut rng = StdRng::seed_from_u64(seed);
            let s = Signal {
                retry_after: Some(Duration::from_secs(2)),
                ..signal(ms(1000), ms(990))
            };
            let r = t.on_throttle(s, &mut rng);
            assert!(r.paused_until >= ms(3000) && r.paused_until <= ms(3400));
            assert!(t.is_paused(ms(2999)) && !t.is_paused(r.paused_until));
            // The rate recovers only from the moment sending resumes.
            assert!(close(t.rate(r.paused_until, 1000.0), 700.0));
            deadlines.push(r.paused_until);
        }
        deadlines.sort();
        deadlines.dedup();
        assert!(deadlines.len() >= 15, "spread: {deadlines:?}");
    }

    #[test]
    fn a_longer_retry_after_extends_the_pause_a_shorter_one_does_not_shorten_it() {
        let mut t = cubic();
        let mut rng = StdRng::seed_from_u64(9);
        let at = |now, wait| Signal {
            retry_after: Some(Duration::from_secs(wait)),
            ..signal(ms(now), ms(now))
        };
        let first = t.on_throttle(at(0, 5), &mut rng).paused_until;
        assert_eq!(t.on_throttle(at(100, 1), &mut rng).paused_until, first);
        assert!(t.on_throttle(at(200, 10), &mut rng).paused_until >= ms(10_200));
    }

    #[test]
    fn without_retry_after_the_pause_backs_off_until_a_write_succeeds() {
        let mut t = cubic();
        let mut rng = StdRng::seed_from_u64(10);
        let b = Backoff::new(ms(100), Duration::from_secs(30), 2.0);
        let mut now = ms(0);
        for attempt in 1..=8 {
            // The requests sent when the last pause ended are throttled again, within the
            // same tick for the first rounds: the pause grows all the same.
            let r = t.on_throttle(signal(now + ms(5), now), &mut rng);
            let pause = r.paused_until - (now + ms(5));
            assert!(
                pause >= b.ceiling(attempt) / 2 && pause <= b.ceiling(attempt),
                "attempt {attempt}: {pause:?}"
            );
            // Echoes from the same round neither cut nor extend the pause.
            let echo = t.on_throttle(signal(now + ms(6), now), &mut rng);
            assert!(!echo.cut);
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
    }

    #[test]
    fn an_outage_costs_one_round_of_requests_per_pause() {
        // Four batches in flight against a sink answering 503 for ten seconds: after each
        // pause all four try once, and only the first answer orders the next pause.
        let mut t = cubic();
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
    fn an_outage_without_retry_after_cuts_once_and_the_rate_returns_after_it() {
        let mut t = cubic();
        let mut rng = StdRng::seed_from_u64(13);
        let mut now = ms(1000);
        let mut cuts = 0;
        while now < Duration::from_secs(31) {
            cuts += u32::from(t.on_throttle(signal(now + ms(2), now), &mut rng).cut);
            now = t.paused_until();
        }
        assert_eq!(cuts, 1, "one streak, one cut");
        // Back: the recovery started from 700 when the last pause ended.
        t.on_success();
        assert!(close(t.rate(now, 1000.0), 700.0));
        // A throttle after a success is news again.
        let later = now + Duration::from_secs(1);
        assert!(t.on_throttle(signal(later, later), &mut rng).cut);
    }

    #[test]
    fn throttles_with_retry_after_cut_once_per_tick_whatever_the_streak() {
        let mut t = cubic();
        let mut rng = StdRng::seed_from_u64(14);
        assert!(t.on_throttle(signal(ms(0), ms(0)), &mut rng).cut);
        // Nothing written since; a tick later the sink answers with a Retry-After.
        let s = Signal {
            retry_after: Some(ms(50)),
            ..signal(ms(300), ms(250))
        };
        assert!(
            t.on_throttle(s, &mut rng).cut,
            "the sink said how long: news"
        );
    }
}
