//! Aperture (Finagle's): a worker sends to a subset of the endpoints, sized by its load.
//! The requests in flight across the balancer are smoothed over `window` (an exponential
//! moving average, so a burst does not open the subset and a lull does not shut it); when
//! the smoothed load per endpoint of the subset reaches `high` the subset widens by one,
//! when it falls to `low` it narrows by one, always within `[min, max]`. Fewer endpoints
//! per worker means fewer connections, each of them busier, and no cold start on hosts the
//! worker does not need.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// How the subset is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The first endpoints of an order of this worker's own (a seeded shuffle): workers
    /// pick independently, so some endpoints may serve more workers than others.
    #[default]
    Random,
    /// An arc of the ring by the worker's index and the number of workers (`ring`).
    Deterministic,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    pub min: usize,
    /// None: every endpoint if the load asks for it.
    pub max: Option<usize>,
    /// Requests in flight per endpoint of the subset under which it narrows.
    pub low: f64,
    /// … and at or over which it widens.
    pub high: f64,
    pub window: Duration,
}

impl Default for Settings {
    /// Finagle's defaults.
    fn default() -> Self {
        Settings {
            min: 1,
            max: None,
            low: 0.5,
            high: 2.0,
            window: Duration::from_secs(5),
        }
    }
}

/// The subset's size as the load moves it.
#[derive(Debug, Clone)]
pub struct LoadBand {
    settings: Settings,
    size: usize,
    /// Smoothed requests in flight across the balancer.
    load: f64,
    stamp: Instant,
}

impl LoadBand {
    pub fn new(settings: Settings, now: Instant) -> Self {
        LoadBand {
            settings,
            size: settings.min.max(1),
            load: 0.0,
            stamp: now,
        }
    }

    /// The subset's size over `endpoints` endpoints: at least one, at most all of them.
    pub fn size(&self, endpoints: usize) -> usize {
        self.size.min(endpoints).max(1)
    }

    pub fn smoothed_load(&self) -> f64 {
        self.load
    }

    /// The requests in flight across the balancer are now `in_flight`, over `endpoints`
    /// endpoints: fold that into the smoothed load and widen or narrow by one.
    pub fn update(&mut self, in_flight: usize, endpoints: usize, now: Instant) {
        let elapsed = now.saturating_duration_since(self.stamp).as_secs_f64();
        let window = self.settings.window.as_secs_f64().max(1e-9);
        let keep = (-elapsed / window).exp();
        self.load = in_flight as f64 * (1.0 - keep) + self.load * keep;
        self.stamp = self.stamp.max(now);
        let ceiling = self
            .settings
            .max
            .unwrap_or(usize::MAX)
            .min(endpoints)
            .max(self.settings.min.max(1));
        // Endpoints may have gone since the last update: count from what exists now.
        self.size = self.size.min(ceiling);
        let per_endpoint = self.load / self.size as f64;
        if per_endpoint >= self.settings.high && self.size < ceiling {
            self.size += 1;
        } else if per_endpoint <= self.settings.low && self.size > self.settings.min.max(1) {
            self.size -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::ms;

    fn band(min: usize, max: Option<usize>) -> (LoadBand, Instant) {
        let now = Instant::now();
        let settings = Settings {
            min,
            max,
            ..Settings::default()
        };
        (LoadBand::new(settings, now), now)
    }

    /// Holds `in_flight` for `secs` seconds, updating every 10 ms.
    fn hold(b: &mut LoadBand, now: &mut Instant, in_flight: usize, endpoints: usize, secs: u64) {
        for _ in 0..secs * 100 {
            *now += ms(10);
            b.update(in_flight, endpoints, *now);
        }
    }

    #[test]
    fn widens_under_load_and_narrows_when_it_falls_within_bounds() {
        let (mut b, mut now) = band(2, Some(8));
        assert_eq!(b.size(30), 2);
        // 13 in flight: widens until 13 / size < 2, i.e. 7 endpoints.
        hold(&mut b, &mut now, 13, 30, 30);
        assert_eq!(b.size(30), 7);
        // 40 in flight would want 21: capped at max.
        hold(&mut b, &mut now, 40, 30, 30);
        assert_eq!(b.size(30), 8);
        // Idle: narrows to min, never below.
        hold(&mut b, &mut now, 0, 30, 60);
        assert_eq!(b.size(30), 2);
    }

    #[test]
    fn a_burst_shorter_than_the_window_barely_moves_it() {
        let (mut b, mut now) = band(1, None);
        hold(&mut b, &mut now, 1, 30, 10);
        assert_eq!(b.size(30), 1);
        // 30 in flight for 100 ms: the smoothed load rises by about 2 % of the jump.
        for _ in 0..10 {
            now += ms(10);
            b.update(30, 30, now);
        }
        assert!(b.smoothed_load() < 2.0, "{}", b.smoothed_load());
        assert!(b.size(30) <= 2, "{}", b.size(30));
    }

    #[test]
    fn never_wider_than_the_endpoints_there_are() {
        let (mut b, mut now) = band(1, None);
        hold(&mut b, &mut now, 100, 5, 30);
        assert_eq!(b.size(5), 5);
        // Two endpoints went: the next update counts from three.
        b.update(100, 3, now + ms(10));
        assert_eq!(b.size(3), 3);
        let (b, _) = band(4, None);
        assert_eq!(b.size(2), 2, "min above the endpoints there are");
    }
}
