//! A retry budget (as in Finagle and tower): within any sliding window, retries may number
//! at most `ratio` × the first attempts made in it, plus `min_per_second` × the window.
//! While a sink is struggling, retries then add at most a fifth (by default) to the load
//! instead of multiplying it; a retry the budget cannot pay for waits, it is never dropped.

use std::collections::VecDeque;
use std::time::Duration;

/// The window is kept as this many slots; spent retries come back slot by slot.
const SLOTS: u32 = 10;

#[derive(Debug, Clone)]
pub struct RetryBudget {
    ratio: f64,
    min_per_second: f64,
    window: Duration,
    slots: VecDeque<Slot>,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    start: Duration,
    first_attempts: u64,
    retries: u64,
}

impl RetryBudget {
    pub fn new(ratio: f64, min_per_second: f64, window: Duration) -> Self {
        assert!(ratio >= 0.0 && min_per_second >= 0.0 && !window.is_zero());
        RetryBudget {
            ratio,
            min_per_second,
            window,
            slots: VecDeque::new(),
        }
    }

    /// A request sent for the first time earns the right to `ratio` retries.
    pub fn first_attempt(&mut self, now: Duration) {
        self.slot(now).first_attempts += 1;
    }

    /// Spends one retry, or says how long to wait before asking again.
    pub fn try_retry(&mut self, now: Duration) -> Result<(), Duration> {
        self.expire(now);
        if self.balance() >= 1.0 {
            self.slot(now).retries += 1;
            return Ok(());
        }
        // Nothing earned or spent left this window, yet no balance: only a zero floor and
        // ratio do that; ask again after one slot.
        let slot = self.window / SLOTS;
        let wait = self
            .slots
            .iter()
            .find(|s| s.retries > 0)
            .map_or(slot, |s| (s.start + slot + self.window).saturating_sub(now));
        Err(wait.max(Duration::from_millis(1)))
    }

    fn balance(&self) -> f64 {
        let (firsts, retries) = self
            .slots
            .iter()
            .fold((0, 0), |(f, r), s| (f + s.first_attempts, r + s.retries));
        self.min_per_second * self.window.as_secs_f64() + self.ratio * firsts as f64
            - retries as f64
    }

    fn slot(&mut self, now: Duration) -> &mut Slot {
        self.expire(now);
        let width = self.window / SLOTS;
        let start = Duration::from_nanos(
            (now.as_nanos() / width.as_nanos() * width.as_nanos()).min(u128::from(u64::MAX)) as u64,
        );
        if self.slots.back().is_none_or(|s| s.start != start) {
            self.slots.push_back(Slot {
                start,
                first_attempts: 0,
                retries: 0,
            });
        }
        self.slots.back_mut().expect("just pushed")
    }

    /// Drops slots that ended a whole window ago.
    fn expire(&mut self, now: Duration) {
        let width = self.window / SLOTS;
        while self
            .slots
            .front()
            .is_some_and(|s| s.start + width + self.window <= now)
        {
            self.slots.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::ms;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn floor_alone_allows_min_per_second_times_the_window() {
        let mut b = RetryBudget::new(0.2, 1.0, secs(10));
        let granted = (0..50).filter(|_| b.try_retry(ms(100)).is_ok()).count();
        assert_eq!(granted, 10);
        let wait = b.try_retry(ms(100)).unwrap_err();
        // Spent in the slot [0, 1 s): it leaves the window at 11 s.
        assert_eq!(wait, ms(10_900));
        assert!(b.try_retry(ms(10_999)).is_err());
        assert!(b.try_retry(ms(11_000)).is_ok());
    }

    #[test]
    fn first_attempts_earn_a_fifth_of_a_retry_each() {
        let mut b = RetryBudget::new(0.2, 0.0, secs(10));
        for i in 0..100 {
            b.first_attempt(ms(10 * i));
        }
        let granted = (0..100).filter(|_| b.try_retry(secs(1)).is_ok()).count();
        assert_eq!(granted, 20);
    }

    #[test]
    fn retries_stay_near_a_fifth_of_the_traffic_over_a_long_run() {
        // 50 first attempts and a retry wanted for every one of them, each second, 60 s.
        let mut b = RetryBudget::new(0.2, 1.0, secs(10));
        let mut granted = 0u64;
        for ms_ in (0..60_000u64).step_by(20) {
            b.first_attempt(ms(ms_));
            granted += u64::from(b.try_retry(ms(ms_)).is_ok());
        }
        let firsts = 3000.0;
        let allowed = 0.2 * firsts + 1.0 * 60.0 + 10.0 + 10.0;
        assert!(granted as f64 <= allowed, "{granted}");
        assert!(granted as f64 >= 0.2 * firsts, "{granted}");
    }

    #[test]
    fn zero_budget_asks_to_come_back_later() {
        let mut b = RetryBudget::new(0.0, 0.0, secs(10));
        assert_eq!(b.try_retry(secs(3)), Err(secs(1)));
    }
}
