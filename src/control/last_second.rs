//! The records handed out over the last second, and how many more fit under a cap.
//!
//! A token bucket bounds a span T by rate·T plus its burst. At a 200 ms tick a late tick
//! followed by one on time puts six ticks into one second (12 records at 10 rec/s, a fifth
//! over the rate), and the workers of a stalled machine catch up together: 200 workers
//! sharing a pool exceeded it by 20% in a second that way. Held to the rate in every
//! second as well, each worker's share fits its leases in every second, and so the fleet
//! fits the pool.
//!
//! Pure: the time comes in as an argument.

use std::collections::VecDeque;
use std::time::Duration;

use crate::control::peak_usage::SPAN as SECOND;

#[derive(Debug, Default, Clone)]
pub struct LastSecond {
    /// (when, records), oldest first, none a second old or more.
    handed: VecDeque<(Duration, u32)>,
    total: u64,
}

impl LastSecond {
    /// Most records a second holds at `rate`: whole records (a second's rate of 7.5 holds
    /// 7: any eighth in a second would be over), never less than one tick's `quantum`, so
    /// that a rate under one record a tick still moves.
    pub fn cap(rate: f64, quantum: u32) -> u64 {
        let whole = (rate * SECOND.as_secs_f64() + 1e-9).floor();
        (whole.clamp(0.0, u64::MAX as f64) as u64).max(u64::from(quantum))
    }

    /// How many more records may be handed out at `now` under `cap`: any span of a second
    /// that ends at `now` holds no more than `cap` with them.
    pub fn room(&mut self, now: Duration, cap: u64) -> u64 {
        self.forget_before(now);
        cap.saturating_sub(self.total)
    }

    /// `n` records were handed out at `now`.
    pub fn record(&mut self, now: Duration, n: u32) {
        if n > 0 {
            self.forget_before(now);
            self.handed.push_back((now, n));
            self.total += u64::from(n);
        }
    }

    /// How long until enough hand-outs leave the second to make room for one more record
    /// under `cap`; `None` when nothing handed out is in the way.
    pub fn frees_in(&self, now: Duration, cap: u64) -> Option<Duration> {
        let mut left = self.total;
        self.handed
            .iter()
            .find(|(_, n)| {
                left -= u64::from(*n);
                left < cap
            })
            .map(|(at, _)| (*at + SECOND).saturating_sub(now))
    }

    fn forget_before(&mut self, now: Duration) {
        while let Some(&(at, n)) = self.handed.front() {
            if now.saturating_sub(at) < SECOND {
                break;
            }
            self.handed.pop_front();
            self.total -= u64::from(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ms;

    #[test]
    fn whole_records_and_never_less_than_a_tick() {
        assert_eq!(LastSecond::cap(10.0, 2), 10);
        assert_eq!(LastSecond::cap(7.5, 2), 7);
        assert_eq!(LastSecond::cap(0.5, 1), 1);
        assert_eq!(LastSecond::cap(2.0, 4), 4);
        assert_eq!(LastSecond::cap(f64::MAX, 1), u64::MAX);
        assert_eq!(LastSecond::cap(f64::NAN, 3), 3);
    }

    #[test]
    fn a_hand_out_counts_for_one_second_exactly() {
        let mut s = LastSecond::default();
        s.record(ms(0), 6);
        s.record(ms(500), 4);
        assert_eq!(s.room(ms(999), 10), 0);
        assert_eq!(s.frees_in(ms(999), 10), Some(ms(1)));
        // Under a lower cap the second makes room only once both are out of it.
        assert_eq!(s.frees_in(ms(999), 3), Some(ms(501)));
        assert_eq!(s.room(ms(1000), 10), 6);
        assert_eq!(s.room(ms(1500), 10), 10);
        assert_eq!(s.frees_in(ms(1500), 10), None);
    }

    #[test]
    fn every_second_holds_the_cap_whatever_the_hand_outs() {
        // Ticks of a 200 ms cadence, late by 0–40 ms in turn, each asking for 2 and taking
        // what fits; every span of a second holds at most 10, and the late ones cost
        // nothing over a minute once they may go when room is made.
        let mut s = LastSecond::default();
        let mut handed = Vec::new();
        for k in 1..=300u64 {
            let at = ms(200 * k + (k * 13) % 41);
            let mut want = 2;
            let mut now = at;
            while want > 0 && now < ms(200 * (k + 1)) {
                let n = s.room(now, 10).min(want);
                if n > 0 {
                    s.record(now, n as u32);
                    handed.push((now, n));
                    want -= n;
                } else {
                    now += s.frees_in(now, 10).unwrap();
                }
            }
        }
        for (i, &(from, _)) in handed.iter().enumerate() {
            let in_second: u64 = handed[i..]
                .iter()
                .take_while(|(at, _)| *at < from + SECOND)
                .map(|(_, n)| n)
                .sum();
            assert!(in_second <= 10, "{in_second} from {from:?}");
        }
        let total: u64 = handed.iter().map(|(_, n)| n).sum();
        assert!(total >= 598, "{total} of 600");
    }
}
