//! Records per second the sink actually took over the last moments, per second of sending:
//! time the worker spent paused is left out, or a cut right after a pause would take the
//! pause for a slow sink. A throttle cuts this rather than a configured rate the worker
//! may never have reached.

use std::collections::VecDeque;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct RateMeter {
    window: Duration,
    /// (when, how many) within the window, oldest first.
    events: VecDeque<(Duration, u64)>,
    sum: u64,
    /// Spans when nothing was sent, `[from, to)`, merged, oldest first.
    idle: VecDeque<(Duration, Duration)>,
}

impl RateMeter {
    pub fn new(window: Duration) -> Self {
        assert!(!window.is_zero(), "window must be positive");
        RateMeter {
            window,
            events: VecDeque::new(),
            sum: 0,
            idle: VecDeque::new(),
        }
    }

    /// Nothing could be sent in `[from, to)`; `to` may lie ahead.
    pub fn idle(&mut self, from: Duration, to: Duration) {
        if to <= from {
            return;
        }
        match self.idle.back_mut() {
            Some(last) if from <= last.1 => {
                last.0 = last.0.min(from);
                last.1 = last.1.max(to);
            }
            _ => self.idle.push_back((from, to)),
        }
    }

    pub fn record(&mut self, now: Duration, n: u64) {
        self.expire(now);
        self.events.push_back((now, n));
        self.sum += n;
    }

    /// Records per second of sending over the last window (or since time zero, if that is
    /// shorter); `None` when nothing was recorded, or when the worker sent for less than a
    /// tenth of the window — too little to tell.
    pub fn rate(&mut self, now: Duration) -> Option<f64> {
        self.expire(now);
        let start = now.saturating_sub(self.window);
        let idle: Duration = self
            .idle
            .iter()
            .map(|&(from, to)| to.min(now).saturating_sub(from.max(start)))
            .sum();
        let sending = self.window.min(now).saturating_sub(idle);
        (self.sum > 0 && sending >= self.window / 10)
            .then(|| self.sum as f64 / sending.as_secs_f64())
    }

    fn expire(&mut self, now: Duration) {
        while let Some(&(at, n)) = self.events.front() {
            if at + self.window > now {
                break;
            }
            self.events.pop_front();
            self.sum -= n;
        }
        while self
            .idle
            .front()
            .is_some_and(|&(_, to)| to + self.window <= now)
        {
            self.idle.pop_front();
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

    #[test]
    fn paused_time_is_not_sending_time() {
        let mut m = RateMeter::new(ms(1000));
        m.record(ms(1100), 160);
        m.record(ms(1300), 160);
        m.idle(ms(1400), ms(1700));
        m.idle(ms(1600), ms(1900));
        m.record(ms(2000), 160);
        // Window (1.0, 2.0]: 480 records, 0.5 s of it paused (1.4–1.9 s, merged).
        assert_eq!(m.rate(ms(2000)), Some(960.0));
        // A pause that has not ended counts up to now. Window (1.2, 2.2]: 320 records,
        // paused 1.4–1.9 and 2.0–2.2: 0.3 s of sending.
        m.idle(ms(2000), ms(5000));
        assert_eq!(m.rate(ms(2200)), Some(320.0 / 0.3));
        // Paused nearly all the window: too little sending to tell.
        assert_eq!(m.rate(ms(2950)), None);
    }
}
