//! Records per second the sink actually took over the last moments. A throttle cuts this
//! rather than a configured rate the worker may never have reached.

use std::collections::VecDeque;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct RateMeter {
    window: Duration,
    /// (when, how many) within the window, oldest first.
    events: VecDeque<(Duration, u64)>,
    sum: u64,
}

impl RateMeter {
    pub fn new(window: Duration) -> Self {
        assert!(!window.is_zero(), "window must be positive");
        RateMeter {
            window,
            events: VecDeque::new(),
            sum: 0,
        }
    }

    pub fn record(&mut self, now: Duration, n: u64) {
        self.expire(now);
        self.events.push_back((now, n));
        self.sum += n;
    }

    /// Records per second over the last window, or since time zero if that is shorter;
    /// `None` when nothing was recorded in it.
    pub fn rate(&mut self, now: Duration) -> Option<f64> {
        self.expire(now);
        let span = self.window.min(now).as_secs_f64();
        (self.sum > 0 && span > 0.0).then(|| self.sum as f64 / span)
    }

    fn expire(&mut self, now: Duration) {
        while let Some(&(at, n)) = self.events.front() {
            if at + self.window > now {
                break;
            }
            self.events.pop_front();
            self.sum -= n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn rate_over_a_sliding_window() {
        let mut m = RateMeter::new(ms(1000));
        assert_eq!(m.rate(ms(500)), None);
        m.record(ms(200), 100);
        // Half a second into the run: 100 records in 0.5 s.
        assert_eq!(m.rate(ms(500)), Some(200.0));
        for i in 1..=10 {
            m.record(ms(200 + 100 * i), 80);
        }
        // At 1.3 s the window (0.3, 1.3] holds nine records of 80 (0.4 s … 1.2 s).
        assert_eq!(m.rate(ms(1300)), Some(720.0));
        assert_eq!(m.rate(ms(1750)), Some(400.0));
        assert_eq!(m.rate(ms(2200)), None);
    }
}
