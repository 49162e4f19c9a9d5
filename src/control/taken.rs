//! What the sink took, per unit (records, requests, bytes), and what that says about its
//! capacity. A sink that pushes back continuously takes exactly its capacity between two of
//! its push-backs, whatever it held in reserve before the first; so the rate taken since an
//! earlier push-back of the same overload is the capacity sample (as BBR samples a
//! bottleneck only while it is saturated). Without one, the rate over the last second is
//! the best guess, and an overestimate while a burst allowance was being spent.
//! Pure: the time comes in as an argument.

use std::collections::VecDeque;
use std::time::Duration;

use super::sink_limit::{PerUnit, Unit};

/// How far back a rate is measured.
const WINDOW: Duration = Duration::from_secs(1);
/// An earlier push-back is a usable start of a sample within this span...
const SAMPLE_MAX: Duration = Duration::from_secs(2);
/// ... or this one, where both ends were marked by Retry-After (the reserve empty at
/// each, however far apart): a first guess just above the capacity is refused again only
/// 2.1 s after the first push-back, against a sink with a burst of 780 records a second
/// at 800, and a sample across it measures the capacity, where a cut of 5% left the guess
/// above it. (Unmarked, the longer span cost 2% of the rate against a sink deferring
/// beyond its concurrency, Vector's "defers at high rate".)
pub const MARKED_SAMPLE_MAX: Duration = Duration::from_secs(4);
/// ... once at least this long ago (shorter spans hold too few writes to even out where
/// in its reserve the sink was at each end)...
const SAMPLE_MIN: Duration = Duration::from_millis(250);
/// ... or this long, where both ends were marked by Retry-After (the reserve empty at each).
pub const MARKED_SAMPLE_MIN: Duration = Duration::from_millis(100);

/// How a push-back's rates were measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// Across a saturation: since an earlier push-back a while ago. The capacity.
    Sustained,
    /// Another push-back came just before: the last second's rate, overloaded.
    Repeated,
    /// The first in a while: the last second's rate.
    Isolated,
}

/// Where a push-back says the sink's reserve was empty.
#[derive(Debug, Clone, Copy)]
struct Mark {
    at: Duration,
    /// What the sink had taken by `at`; `None` until then, when `pending` is added to the
    /// totals of that moment.
    totals: Option<[f64; 3]>,
    pending: [f64; 3],
    /// Placed by Retry-After.
    marked: bool,
}

#[derive(Debug, Clone)]
pub struct Taken {
    totals: [f64; 3],
    /// (when, totals after that write), oldest first: the writes of the last window, and
    /// the last one before it (or the start of measuring).
    writes: VecDeque<(Duration, [f64; 3])>,
    /// Recent push-backs' marks, oldest first.
    pushbacks: VecDeque<Mark>,
    /// Measuring starts here: the start, or the end of an outage.
    since: Duration,
    /// The most records one accepted write carried.
    largest: u64,
}

impl Default for Taken {
    fn default() -> Self {
        Taken {
            totals: [0.0; 3],
            writes: VecDeque::from([(Duration::ZERO, [0.0; 3])]),
            pushbacks: VecDeque::new(),
            since: Duration::ZERO,
            largest: 0,
        }
    }
}

impl Taken {
    pub fn written(&mut self, now: Duration, records: u64, bytes: u64) {
        self.close(now);
        self.largest = self.largest.max(records);
        for (total, n) in self
            .totals
            .iter_mut()
            .zip([records as f64, 1.0, bytes as f64])
        {
            *total += n;
        }
        self.writes.push_back((now, self.totals));
        while self.writes.len() > 1 && self.writes[1].0 + WINDOW <= now {
            self.writes.pop_front();
        }
    }

    /// The sink pushed back at `now` on a write of `records` and `bytes`, asking for
    /// `retry_after`: how its rates can be measured, and the last second's rates.
    ///
    /// A refusal says only that the sink's reserve held less than the write; how much less
    /// is what Retry-After tells: the write fits once it has passed, and taking it (the
    /// worker's resend) empties the reserve. So each push-back's mark is set there, at
    /// `now + retry_after` with the resent write counted, and a sample between two marks
    /// spans a reserve emptied at both ends: the capacity itself, not off by up to a
    /// write's worth at each end (measured against a 1,000 rec/s bucket at a 20 ms tick:
    /// 1,041 marking the refusals, which the worker then overran by 4%). What the sink had
    /// taken at the mark is read when the mark's time comes, not at the refusal: writes it
    /// took before the refused one may still be unanswered then (one such write missing
    /// from a 120 ms sample read 680 of 1,000 rec/s, and held the worker there).
    /// A [`Pushback::Sustained`] sample is [`Taken::sample`] once `now` reaches the mark.
    ///
    /// A sink that refused items of a write for want of room (`emptied`, with the write's
    /// round trip) says its reserve was empty right then, with what it took of the write
    /// already counted: a mark as exact as one Retry-After places. What it took of writes
    /// sent before, still unanswered, was taken before the mark too: the mark is read a
    /// round trip on, when those have answered and the writes sent after the refusal
    /// have not (marks 0.27-0.75 s apart read 1,070-1,315 rec/s from a 1,000 rec/s sink
    /// when read at the answer).
    pub fn pushback(
        &mut self,
        now: Duration,
        retry_after: Option<Duration>,
        emptied: Option<Duration>,
        records: u64,
        bytes: u64,
    ) -> (PerUnit<Option<f64>>, Pushback) {
        self.close(now);
        while self
            .pushbacks
            .front()
            .is_some_and(|m| m.at + MARKED_SAMPLE_MAX < now)
        {
            self.pushbacks.pop_front();
        }
        let mark = match (emptied, retry_after) {
            (Some(round_trip), _) => Mark {
                at: now + round_trip,
                totals: None,
                pending: [0.0; 3],
                marked: true,
            },
            (None, Some(wait)) => Mark {
                at: now + wait,
                totals: None,
                pending: [records as f64, 1.0, bytes as f64],
                marked: true,
            },
            (None, None) => Mark {
                at: now,
                totals: Some(self.totals),
                pending: [0.0; 3],
                marked: false,
            },
        };
        let alone = !self
            .pushbacks
            .iter()
            .any(|m| m.at + sample_span(m, &mark).1 >= mark.at);
        let kind = match (self.start_for(&mark), alone) {
            (Some(_), _) => Pushback::Sustained,
            (None, true) => Pushback::Isolated,
            (None, false) => Pushback::Repeated,
        };
        self.pushbacks.push_back(mark);
        (self.recent(now), kind)
    }

    /// The capacity measured up to the mark placed at `at` (a push-back's `now +
    /// retry_after`), from the earliest usable mark before it; `None` until `now` reaches
    /// `at`, or when the marks have gone.
    pub fn sample(&mut self, now: Duration, at: Duration) -> Option<PerUnit<Option<f64>>> {
        self.close(now);
        let end = *self.pushbacks.iter().find(|m| m.at == at)?;
        let after = end.totals?;
        let start = self.start_for(&end)?;
        Some(self.rates_between(start.totals?, after, at - start.at))
    }

    /// The earliest mark a sample ending at `end` can start from.
    fn start_for(&self, end: &Mark) -> Option<Mark> {
        self.pushbacks
            .iter()
            .find(|m| {
                let (min, max) = sample_span(m, end);
                m.at + min <= end.at && m.at + max >= end.at
            })
            .copied()
    }

    /// Marks whose time has come take the totals of that moment.
    fn close(&mut self, now: Duration) {
        for mark in &mut self.pushbacks {
            if mark.totals.is_none() && mark.at <= now {
                let mut totals = self.totals;
                for (total, n) in totals.iter_mut().zip(mark.pending) {
                    *total += n;
                }
                mark.totals = Some(totals);
            }
        }
    }

    /// The rate over the last second (or since measuring started, if shorter).
    pub fn recent(&self, now: Duration) -> PerUnit<Option<f64>> {
        let start = now.saturating_sub(WINDOW).max(self.since);
        let span = now.saturating_sub(start);
        if span < WINDOW / 10 {
            return PerUnit([None; 3]);
        }
        let before = self
            .writes
            .iter()
            .rev()
            .find(|(at, _)| *at <= start)
            .map_or(self.writes[0].1, |(_, t)| *t);
        self.rates(before, span)
    }

    /// The most records one accepted write carried.
    pub fn largest(&self) -> u64 {
        self.largest
    }

    /// Everything taken so far.
    pub fn totals(&self) -> PerUnit<f64> {
        PerUnit(self.totals)
    }

    /// The rates since `before` was read from [`Taken::totals`], `span` ago.
    pub fn since(&self, before: PerUnit<f64>, span: Duration) -> PerUnit<Option<f64>> {
        self.rates(before.0, span)
    }

    /// An outage ended: what came before it says nothing about the rate now.
    pub fn restart(&mut self, now: Duration) {
        self.since = now;
        self.pushbacks.clear();
        self.writes.clear();
        self.writes.push_back((now, self.totals));
    }

    fn rates(&self, before: [f64; 3], span: Duration) -> PerUnit<Option<f64>> {
        self.rates_between(before, self.totals, span)
    }

    fn rates_between(
        &self,
        before: [f64; 3],
        after: [f64; 3],
        span: Duration,
    ) -> PerUnit<Option<f64>> {
        let secs = span.as_secs_f64();
        let mut out = PerUnit([None; 3]);
        for unit in Unit::ALL {
            let i = unit as usize;
            let n = after[i] - before[i];
            out.0[i] = (secs > 0.0 && n > 0.0).then(|| n / secs);
        }
        out
    }
}

/// The shortest and longest a sample from `start` to `end` may span.
fn sample_span(start: &Mark, end: &Mark) -> (Duration, Duration) {
    if start.marked && end.marked {
        (MARKED_SAMPLE_MIN, MARKED_SAMPLE_MAX)
    } else {
        (SAMPLE_MIN, SAMPLE_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::ms;

    #[test]
    fn the_rate_over_the_last_second() {
        let mut t = Taken::default();
        assert_eq!(
            t.recent(ms(50)).get(Unit::Records),
            None,
            "too soon to tell"
        );
        for i in 1..=20 {
            t.written(ms(100 * i), 10, 1000);
        }
        // (1.0, 2.0]: ten writes of 10 records.
        let r = t.recent(ms(2000));
        assert_eq!(r.get(Unit::Records), Some(100.0));
        assert_eq!(r.get(Unit::Requests), Some(10.0));
        assert_eq!(r.get(Unit::Bytes), Some(10_000.0));
        // Half a second in: five writes in 0.5 s.
        let mut t = Taken::default();
        for i in 1..=5 {
            t.written(ms(100 * i), 10, 0);
        }
        assert_eq!(t.recent(ms(500)).get(Unit::Records), Some(100.0));
        assert_eq!(t.recent(ms(500)).get(Unit::Bytes), None);
    }

    #[test]
    fn a_burst_spent_before_the_first_pushback_is_not_capacity() {
        // A sink holding 100 records in reserve and refilling 100/s: the worker sends 400/s
        // in writes of 40 every 100 ms, and from the first push-back on it takes one write
        // in four.
        let mut t = Taken::default();
        let mut now = Duration::ZERO;
        for _ in 0..3 {
            now += ms(100);
            t.written(now, 40, 0);
        }
        now += ms(100);
        let (first, kind) = t.pushback(now, None, None, 40, 0);
        assert_eq!(first.get(Unit::Records), Some(300.0), "the burst included");
        assert_eq!(kind, Pushback::Isolated);
        for k in 1..=20 {
            now += ms(100);
            if k % 4 == 0 {
                t.written(now, 40, 0);
            } else {
                let (_, kind) = t.pushback(now, None, None, 40, 0);
                let expected = if k >= 3 {
                    Pushback::Sustained
                } else {
                    Pushback::Repeated
                };
                assert_eq!(kind, expected, "k = {k}");
                if k >= 12 {
                    let s = t.sample(now, now).unwrap().get(Unit::Records).unwrap();
                    assert!((75.0..=135.0).contains(&s), "k = {k}: {s}");
                }
            }
        }
    }

    /// Samples between push-backs against a bucket of 100 records refilling 100/s, the
    /// worker offering 2 to 10 records every 50 ms (120/s on average) and resending a refused write when
    /// Retry-After says it fits; the samples, with and without Retry-After's mark.
    fn samples(marked: bool) -> Vec<f64> {
        let mut t = Taken::default();
        let (mut tokens, mut last) = (100.0f64, Duration::ZERO);
        let mut now = Duration::ZERO;
        let mut out = Vec::new();
        let mut seed = 7u64;
        for _ in 0..400 {
            // 2 to 10 records, 120/s on average, in an order without a period.
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let n = 2 + (seed >> 33) % 9;
            now += ms(50);
            tokens = (tokens + 100.0 * (now - last).as_secs_f64()).min(100.0);
            last = now;
            if tokens >= n as f64 {
                tokens -= n as f64;
                t.written(now, n, 0);
                continue;
            }
            let wait = Duration::from_secs_f64((n as f64 - tokens) / 100.0);
            let (_, kind) = t.pushback(now, marked.then_some(wait), None, n, 0);
            let mark = if marked { now + wait } else { now };
            // The resend, once it fits.
            now += wait;
            tokens = 0.0;
            last = now;
            t.written(now, n, 0);
            if kind == Pushback::Sustained {
                out.push(t.sample(now, mark).unwrap().get(Unit::Records).unwrap());
            }
        }
        out
    }

    /// A write the sink took just before refusing the next, answered only after the
    /// refusal (two in flight), belongs to the sample all the same.
    #[test]
    fn a_write_answered_after_the_refusal_counts_at_the_mark() {
        let mut t = Taken::default();
        // Refused at 1.0 s: the reserve is empty once 20 ms have passed and the 20 records
        // are resent.
        t.written(ms(990), 20, 0);
        t.pushback(ms(1000), Some(ms(20)), None, 20, 0);
        t.written(ms(1020), 20, 0);
        // Then 20 records every 200 ms, and a refusal at 1.6 s just after a write the sink
        // took at 1.59 s, answered at 1.605 s.
        for i in 1..=2 {
            t.written(ms(1020 + 200 * i), 20, 0);
        }
        let (_, kind) = t.pushback(ms(1600), Some(ms(20)), None, 20, 0);
        assert_eq!(kind, Pushback::Sustained);
        assert_eq!(t.sample(ms(1605), ms(1620)), None, "not yet");
        t.written(ms(1605), 20, 0);
        t.written(ms(1621), 20, 0);
        let sample = t.sample(ms(1621), ms(1620)).unwrap();
        // 20 + 20 + 20 (the one answered late) + 20 (the resend) over 0.6 s; read at the
        // refusal, 60 over 0.6 s.
        assert!((sample.get(Unit::Records).unwrap() - 80.0 / 0.6).abs() < 1e-6);
    }

    /// A sink taking 1,000 records/s answers a write it took in part before one it took
    /// whole, sent together: the mark is read a round trip after the refusal, so the
    /// write answered late is counted before it, and the sample is the capacity.
    #[test]
    fn items_refused_for_room_mark_the_reserve_empty_a_round_trip_on() {
        let mut t = Taken::default();
        // Sent at 0: A (100 records, all taken, answered at 12 ms) and B (all refused for
        // room, answered at 10 ms).
        let (_, kind) = t.pushback(ms(10), None, Some(ms(10)), 100, 0);
        assert_eq!(kind, Pushback::Isolated);
        t.written(ms(12), 100, 0);
        // From 20 ms, 20 records every 20 ms, each answered 5 ms on; at 310 ms a write of
        // which the sink took 5 and refused the rest.
        for i in 0..15 {
            t.written(ms(25 + 20 * i), 20, 0);
        }
        t.written(ms(310), 5, 0);
        let (_, kind) = t.pushback(ms(310), None, Some(ms(10)), 15, 0);
        assert_eq!(
            kind,
            Pushback::Sustained,
            "both marks exact: 100 ms apart suffice"
        );
        assert_eq!(t.sample(ms(315), ms(320)), None, "not before the mark");
        let sample = t
            .sample(ms(320), ms(320))
            .unwrap()
            .get(Unit::Records)
            .unwrap();
        // 305 records over 0.3 s; read at the refusal, A would count too: 1,350.
        assert!((sample - 305.0 / 0.3).abs() < 1e-6, "{sample}");
    }

    #[test]
    fn retry_after_marks_where_the_reserve_was_empty() {
        let worst = |s: &[f64]| s.iter().map(|r| (r - 100.0).abs()).fold(0.0, f64::max);
        let marked = samples(true);
        let unmarked = samples(false);
        assert!(marked.len() >= 10 && unmarked.len() >= 10);
        assert!(worst(&marked) < 1.0, "{marked:?}");
        assert!(worst(&unmarked) > 10.0, "{unmarked:?}");
    }

    #[test]
    fn after_an_outage_the_rate_starts_over() {
        let mut t = Taken::default();
        for i in 1..=10 {
            t.written(ms(100 * i), 10, 0);
        }
        t.restart(ms(30_000));
        assert_eq!(t.recent(ms(30_050)).get(Unit::Records), None);
        t.written(ms(30_100), 10, 0);
        t.written(ms(30_200), 10, 0);
        assert_eq!(t.recent(ms(30_200)).get(Unit::Records), Some(100.0));
    }
}
