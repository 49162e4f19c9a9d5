//! The cadence: a token bucket (governor's GCRA) that hands out at most `rate × tick`
//! records per tick, so a drain at 100 rec/s with a 200 ms tick moves 20 records every
//! 200 ms instead of 100 in one burst each second. A tick's worth may be handed out in
//! parts spread across the tick (a sink met for the first time: `sink_limit::first_contact`).

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::StateInformationMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use crate::control::last_second::LastSecond;
use crate::settings::LONGEST;
use crate::settings::bounds::{LEAST_RATE, MOST_RATE};

type Bucket<C> = RateLimiter<NotKeyed, InMemoryState, C, StateInformationMiddleware>;

/// Records-per-tick allowance. Unused allowance is kept only up to one tick's worth
/// (the bucket's burst), so an idle spell never turns into a burst. The time comes from
/// `clock`: the worker's runs on tokio's (`pipeline::clock::TokioClock`), the tests' on a
/// fake one.
pub struct Cadence<C: Clock<Instant = Nanos> + Clone> {
    /// None at rate 0: a worker that holds no capacity hands out nothing.
    bucket: Option<Bucket<C>>,
    clock: C,
    rate: f64,
    tick: Duration,
    quantum: u32,
    /// A tick's worth is handed out in this many parts, as the bucket refills.
    parts: u32,
    /// Most records handed out at once: a part of the quantum.
    part: u32,
    /// Where every second must hold no more than the rate (workers sharing a pool).
    last_second: Option<LastSecond>,
}

impl<C: Clock<Instant = Nanos> + Clone> Cadence<C> {
    /// A cadence that starts empty: the first allowance comes one tick from now, unless
    /// [`Cadence::fill`] grants it at once.
    pub fn new(rate: f64, tick: Duration, clock: C) -> Self {
        let rate = runnable(rate);
        // As long as any setting may be: a tick's tokens then fit governor's nanoseconds.
        let tick = tick.min(LONGEST);
        let (bucket, quantum, part) = Self::bucket(rate, tick, 1, 0, &clock);
        Cadence {
            bucket,
            clock,
            rate,
            tick,
            quantum,
            parts: 1,
            part,
            last_second: None,
        }
    }

    /// Holds every span of a second to the rate as well: what workers sharing a pool add
    /// up to must fit the pool in every second, where the bucket alone lets a late tick
    /// and the next put a tick's worth more into one.
    pub fn hold_each_second(&mut self) {
        self.last_second.get_or_insert_with(LastSecond::default);
    }

    /// The bucket holds one token more than a tick hands out: timer lateness then carries
    /// over to the next tick instead of being lost, while the pipeline still asks for at
    /// most `quantum` per tick, so no window exceeds it. In `parts`, it holds a part's
    /// worth (and the token): the rest of the tick's worth accrues across the tick. `rate`
    /// is [`runnable`]. It holds `held` tokens, at most a part's worth. Returns the bucket,
    /// the quantum and the part.
    fn bucket(
        rate: f64,
        tick: Duration,
        parts: u32,
        held: u32,
        clock: &C,
    ) -> (Option<Bucket<C>>, u32, u32) {
        if rate == 0.0 {
            return (None, 0, 0);
        }
        let per_tick = rate * tick.as_secs_f64();
        let quantum = (per_tick - 1e-9).ceil().clamp(1.0, f64::from(u32::MAX - 1)) as u32;
        let part = quantum.div_ceil(parts.max(1));
        // Within the bounds the period is 1 ns to 1,000 s: representable, never zero.
        let period = Duration::try_from_secs_f64(1.0 / rate)
            .unwrap_or(Duration::MAX)
            .max(Duration::from_nanos(1));
        let burst = NonZeroU32::new(part + 1).unwrap_or(NonZeroU32::MAX);
        let quota = Quota::with_period(period)
            .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
            .allow_burst(burst);
        let bucket = RateLimiter::direct_with_clock(quota, clock.clone())
            .with_middleware::<StateInformationMiddleware>();
        if let Some(spent) = NonZeroU32::new(burst.get() - held.min(part)) {
            let _ = bucket.check_n(spent);
        }
        (Some(bucket), quantum, part)
    }

    /// Grants a tick's worth (in parts, a part), but no more than `most`, at once, as if a
    /// tick had just accrued: a run's first tick need not wait a tick for its first write
    /// (told 400 rec/s, a drain of 5,000 records took 13.4 s where 12.5 s is the rate's
    /// own). Windows of a tick's length hold what they hold at the steady cadence. `most`
    /// is what the batch slots carry at once: a tick's worth beyond it accrues as it is
    /// taken, so the ticks after do not find it all accrued and send it in one instant.
    pub fn fill(&mut self, most: u32) {
        (self.bucket, _, _) = Self::bucket(self.rate, self.tick, self.parts, most, &self.clock);
    }

    /// Starts the bucket again holding only what `accrued` at the rate would, at most a
    /// part's worth: what the sink had room for before a refused write went again was
    /// spent by it, so records granted earlier must not follow it at once.
    pub fn restart(&mut self, accrued: Duration) {
        let held = (self.rate * accrued.as_secs_f64())
            .floor()
            .min(f64::from(u32::MAX)) as u32;
        (self.bucket, _, _) = Self::bucket(self.rate, self.tick, self.parts, held, &self.clock);
    }

    /// Most records one tick may hand out at the current rate.
    pub fn quantum(&self) -> u32 {
        self.quantum
    }

    /// Most records handed out at once: the quantum, or a part of it.
    pub fn part(&self) -> u32 {
        self.part
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// Takes up to `want` tokens that are available now; returns how many were taken.
    pub fn take(&mut self, want: u32) -> u32 {
        let held = self.last_second.is_some().then(|| {
            let now = Duration::from(self.clock.now());
            (now, LastSecond::cap(self.rate, self.quantum))
        });
        let want = match (&mut self.last_second, held) {
            (Some(second), Some((now, cap))) => {
                want.min(second.room(now, cap).min(u64::from(u32::MAX)) as u32)
            }
            _ => want,
        };
        if want == 0 {
            return 0;
        }
        let Some(bucket) = &self.bucket else {
            return 0;
        };
        let Ok(first) = bucket.check() else {
            return 0;
        };
        let extra = (want - 1).min(first.remaining_burst_capacity());
        let taken = match NonZeroU32::new(extra) {
            None => 1,
            Some(n) => match bucket.check_n(n) {
                Ok(Ok(_)) => 1 + extra,
                _ => 1,
            },
        };
        if let (Some(second), Some((now, _))) = (&mut self.last_second, held) {
            second.record(now, taken);
        }
        taken
    }

    /// While the last second holds all the rate allows: how long until it makes room.
    pub fn second_full_for(&mut self) -> Option<Duration> {
        let now = Duration::from(self.clock.now());
        let cap = LastSecond::cap(self.rate, self.quantum);
        let second = self.last_second.as_mut()?;
        if second.room(now, cap) > 0 {
            return None;
        }
        second.frees_in(now, cap)
    }

    /// Changes the rate. The new bucket starts empty at this instant: called right after a
    /// tick's `take`, the next tick gets exactly one new quantum, never a burst; called
    /// within a tick, what is left of it accrues at the new rate.
    pub fn set_rate(&mut self, rate: f64) {
        self.set_rate_in_parts(rate, 1);
    }

    /// As [`Cadence::set_rate`], each tick's worth handed out in `parts` as it accrues.
    pub fn set_rate_in_parts(&mut self, rate: f64, parts: u32) {
        let rate = runnable(rate);
        let parts = parts.max(1);
        if rate == self.rate && parts == self.parts {
            return;
        }
        let (bucket, quantum, part) = Self::bucket(rate, self.tick, parts, 0, &self.clock);
        self.bucket = bucket;
        self.quantum = quantum;
        self.part = part;
        self.parts = parts;
        self.rate = rate;
    }
}

/// The rate the bucket runs at for any `rate` it is given, so no value reaches a panic:
/// NaN, zero and negative hand out nothing; a positive rate is held within
/// `[LEAST_RATE, MOST_RATE]` (the bounds every setting is checked against, so only a
/// computed rate — a throttle's cut, a share of a pool — is ever moved, by a hair).
fn runnable(rate: f64) -> f64 {
    if rate.is_nan() || rate <= 0.0 {
        0.0
    } else {
        rate.clamp(LEAST_RATE, MOST_RATE)
    }
}

/// What of a tick's `quantum` goes as fresh records once the resends it owes (`owed`,
/// at most the quantum) are paid from it. Under a quarter of the quantum left, nothing: the
/// rest would go as a request of a few records of its own (1 beside a refused 57 at 4×
/// a gateway taking 4 requests/s), which a sink counting requests refuses as readily as a
/// full one; the resends take the tick.
pub fn fresh_after_resends(quantum: u64, owed: u64) -> u64 {
    match quantum.saturating_sub(owed) {
        rest if owed > 0 && rest * 4 < quantum => 0,
        rest => rest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    fn drain_windows(
        c: &mut Cadence<FakeRelativeClock>,
        clock: &FakeRelativeClock,
        windows: usize,
    ) -> Vec<u32> {
        (0..windows)
            .map(|_| {
                clock.advance(c.tick());
                c.take(c.quantum())
            })
            .collect()
    }

    #[test]
    fn exactly_one_quantum_per_tick_for_five_seconds() {
        let clock = FakeRelativeClock::default();
        let mut c = Cadence::new(100.0, Duration::from_millis(200), clock.clone());
        assert_eq!(c.quantum(), 20);
        assert_eq!(c.take(u32::MAX), 0, "starts empty");
        clock.advance(Duration::from_millis(199));
        assert_eq!(c.take(u32::MAX), 19, "tokens accrue continuously");
        let mut c = Cadence::new(100.0, Duration::from_millis(200), clock.clone());
        assert_eq!(drain_windows(&mut c, &clock, 25), vec![20; 25]);
    }

    #[test]
    fn filled_the_first_ticks_worth_goes_at_once_and_the_next_a_tick_later() {
        let clock = FakeRelativeClock::default();
        let mut c = Cadence::new(100.0, Duration::from_millis(200), clock.clone());
        c.fill(u32::MAX);
        assert_eq!(c.take(u32::MAX), 20);
        assert_eq!(c.take(u32::MAX), 0, "a tick's worth, no more");
        assert_eq!(drain_windows(&mut c, &clock, 5), vec![20; 5]);
        let mut c = Cadence::new(100.0, Duration::from_millis(200), clock.clone());
        c.fill(5);
        assert_eq!(c.take(u32::MAX), 5, "no more than the slots carry at once");
    }

    #[test]
    fn restarted_it_holds_only_what_accrued_since() {
        let clock = FakeRelativeClock::default();
        let mut c = Cadence::new(100.0, Duration::from_millis(200), clock.clone());
        clock.advance(Duration::from_millis(200));
        // A refused write went again 50 ms ago: the tick's worth accrued before it is void.
        c.restart(Duration::from_millis(50));
        assert_eq!(c.take(u32::MAX), 5);
        clock.advance(Duration::from_millis(150));
        assert_eq!(c.take(u32::MAX), 15);
        // Never more than a tick's worth, however long ago.
        clock.advance(Duration::from_millis(200));
        c.restart(Duration::from_secs(60));
        assert_eq!(c.take(u32::MAX), 20);
    }

    #[test]
    fn idle_time_never_becomes_a_burst() {
        let clock = FakeRelativeClock::default();
        let mut c = Cadence::new(100.0, Duration::from_millis(200), clock.clone());
        clock.advance(Duration::from_secs(10));
        assert_eq!(c.take(c.quantum()), 20);
        assert_eq!(c.take(u32::MAX), 1, "one token of slack, no more");
        clock.advance(Duration::from_millis(200));
        assert_eq!(c.take(c.quantum()), 20);
    }

    #[test]
    fn partial_takes_leave_the_rest() {
        let clock = FakeRelativeClock::default();
        let mut c = Cadence::new(100.0, Duration::from_millis(200), clock.clone());
        clock.advance(Duration::from_millis(200));
        assert_eq!(c.take(5), 5);
        assert_eq!(c.take(100), 15);
        assert_eq!(c.take(1), 0);
    }

    #[test]
    fn rate_change_applies_at_next_tick_without_burst() {
        let clock = FakeRelativeClock::default();
        let mut c = Cadence::new(100.0, Duration::from_millis(200), clock.clone());
        assert_eq!(drain_windows(&mut c, &clock, 5), vec![20; 5]);
        c.set_rate(400.0);
        assert_eq!(drain_windows(&mut c, &clock, 5), vec![80; 5]);
        c.set_rate(50.0);
        assert_eq!(drain_windows(&mut c, &clock, 5), vec![10; 5]);
        c.set_rate(0.0);
        assert_eq!(c.quantum(), 0);
        assert_eq!(drain_windows(&mut c, &clock, 5), vec![0; 5]);
        c.set_rate(100.0);
        assert_eq!(drain_windows(&mut c, &clock, 5), vec![20; 5]);
    }

    #[test]
    fn in_parts_a_ticks_worth_accrues_across_the_tick() {
        let clock = FakeRelativeClock::default();
        let mut c = Cadence::new(100.0, Duration::from_millis(200), clock.clone());
        c.set_rate_in_parts(800.0, 4);
        assert_eq!((c.quantum(), c.part()), (160, 40));
        clock.advance(Duration::from_millis(200));
        // However long since: a part and the token of slack at once, no more.
        assert_eq!(c.take(160), 41);
        assert_eq!(c.take(160), 0);
        clock.advance(Duration::from_millis(50));
        assert_eq!(c.take(160), 40);
        // Three parts over the rest of the tick, then one tick's worth in all.
        let mut taken = 81;
        for _ in 0..3 {
            clock.advance(Duration::from_millis(50));
            taken += c.take(160);
        }
        assert_eq!(taken, 201);
        c.set_rate(800.0);
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            (c.part(), c.take(u32::MAX)),
            (160, 161),
            "whole ticks again"
        );
    }

    #[test]
    fn late_ticks_lose_no_tokens() {
        // Timers fire a little late but on a fixed schedule (tokio's `interval`):
        // tick k at k × 200 ms + 0..3 ms. Every tick still gets exactly one quantum.
        let clock = FakeRelativeClock::default();
        let mut c = Cadence::new(100.0, Duration::from_millis(200), clock.clone());
        let mut now = Duration::ZERO;
        for k in 1..=50u64 {
            let at = Duration::from_millis(200 * k + (k * 7) % 4);
            clock.advance(at - now);
            now = at;
            assert_eq!(c.take(c.quantum()), 20, "tick {k}");
        }
    }

    /// Ticks at 200 ms of a 10 rec/s cadence, the first late by `late`; what each takes
    /// (waiting, within its tick, for the second to make room where it is held), and when.
    fn late_then_on_time(held: bool, late: Duration) -> Vec<(Duration, u32)> {
        let clock = FakeRelativeClock::default();
        let mut c = Cadence::new(10.0, Duration::from_millis(200), clock.clone());
        if held {
            c.hold_each_second();
        }
        let mut now = Duration::ZERO;
        let mut taken = Vec::new();
        for k in 1..=20u64 {
            let at = Duration::from_millis(200 * k) + if k == 1 { late } else { Duration::ZERO };
            clock.advance(at - now);
            now = at;
            let mut want = c.quantum();
            while want > 0 {
                let n = c.take(want);
                if n > 0 {
                    taken.push((now, n));
                    want -= n;
                    continue;
                }
                let Some(wait) = c.second_full_for() else {
                    break;
                };
                clock.advance(wait);
                now += wait;
            }
        }
        taken
    }

    fn busiest_second(taken: &[(Duration, u32)]) -> u32 {
        (0..taken.len())
            .map(|i| {
                taken[i..]
                    .iter()
                    .take_while(|(at, _)| *at < taken[i].0 + Duration::from_secs(1))
                    .map(|(_, n)| n)
                    .sum()
            })
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn held_each_second_a_late_tick_and_the_next_on_time_stay_within_the_rate() {
        let late = Duration::from_millis(30);
        let free = late_then_on_time(false, late);
        assert_eq!(busiest_second(&free), 12, "six ticks in a second: {free:?}");
        let held = late_then_on_time(true, late);
        assert_eq!(busiest_second(&held), 10, "{held:?}");
        // The sixth tick goes when the late one's second is over, 30 ms after it was due;
        // nothing is lost.
        assert_eq!(held[5], (Duration::from_millis(1230), 2), "{held:?}");
        let sum = |t: &[(Duration, u32)]| t.iter().map(|(_, n)| n).sum::<u32>();
        assert_eq!(sum(&held), sum(&free));
    }

    #[test]
    fn held_each_second_a_lower_rate_waits_for_the_second_to_make_room() {
        let clock = FakeRelativeClock::default();
        let mut c = Cadence::new(100.0, Duration::from_millis(200), clock.clone());
        c.hold_each_second();
        assert_eq!(drain_windows(&mut c, &clock, 5), vec![20; 5]);
        // A lease given back: 20 rec/s from here, and the last second held 100.
        c.set_rate(20.0);
        clock.advance(Duration::from_millis(200));
        assert_eq!(c.take(c.quantum()), 0);
        assert_eq!(c.second_full_for(), Some(Duration::from_millis(800)));
        clock.advance(Duration::from_millis(800));
        assert_eq!(drain_windows(&mut c, &clock, 10), vec![4; 10]);
    }

    #[test]
    fn fractional_quanta_keep_the_average_rate() {
        let clock = FakeRelativeClock::default();
        let mut c = Cadence::new(7.0, Duration::from_millis(200), clock.clone());
        assert_eq!(c.quantum(), 2);
        let per_tick = drain_windows(&mut c, &clock, 50);
        assert!(per_tick.iter().all(|&n| n <= 2));
        // 70 due by the last tick; nanosecond rounding may leave the 70th a hair short.
        let sum: u32 = per_tick.iter().sum();
        assert!((69..=70).contains(&sum), "7 rec/s over 10 s: {per_tick:?}");
    }

    #[test]
    fn slow_rates_hand_out_single_records() {
        let clock = FakeRelativeClock::default();
        let mut c = Cadence::new(2.0, Duration::from_millis(200), clock.clone());
        let got: u32 = drain_windows(&mut c, &clock, 25).iter().sum();
        assert_eq!(got, 10, "2 rec/s over 5 s");
    }

    #[test]
    fn no_rate_and_no_tick_reaches_a_panic() {
        let hostile = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            -1.0,
            f64::MIN_POSITIVE,
            5e-324,
            1e-300,
            1e-20,
            1e20,
            f64::MAX,
        ];
        let ticks = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_millis(200),
            Duration::from_secs(u64::MAX / 4),
        ];
        let clock = FakeRelativeClock::default();
        for tick in ticks {
            for rate in hostile {
                let mut c = Cadence::new(rate, tick, clock.clone());
                clock.advance(Duration::from_secs(1));
                c.take(u32::MAX);
                c.set_rate(100.0);
                c.set_rate(rate);
                let r = c.rate();
                assert!(
                    r == 0.0 || (LEAST_RATE..=MOST_RATE).contains(&r),
                    "{rate}: {r}"
                );
            }
        }
        let slow = Cadence::new(1e-20, Duration::from_millis(200), clock.clone());
        assert_eq!(slow.rate(), LEAST_RATE, "as slow as any setting may ask");
        assert_eq!(Cadence::new(f64::NAN, Duration::ZERO, clock).quantum(), 0);
    }

    #[test]
    fn resends_leave_a_tick_no_sliver_of_fresh_records() {
        assert_eq!(
            fresh_after_resends(58, 0),
            58,
            "nothing owed: the whole tick"
        );
        assert_eq!(
            fresh_after_resends(58, 57),
            0,
            "1 left: the resends take the tick"
        );
        assert_eq!(fresh_after_resends(80, 61), 0, "19 of 80: under a quarter");
        assert_eq!(fresh_after_resends(80, 60), 20, "a quarter: sent");
        assert_eq!(fresh_after_resends(80, 80), 0);
        assert_eq!(fresh_after_resends(3, 1), 2);
    }
}
