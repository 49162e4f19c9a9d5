//! What bounded the rate, and for how long: each tick's time goes to the one thing that
//! held the worker back then (the configured ceiling, a probe's target, the sink's
//! push-back, the write latency, an empty source, a hold), so that a run held by a
//! forgotten ceiling says so. Pure: the durations come in as arguments.

use std::time::Duration;

use serde::Serialize;

/// The configured ceiling's name, as the summary shows it.
pub const CEILING: &str = "rate.records_per_second";
/// The sink's push-back (a learned limit, Retry-After, a pause).
pub const SINK_PUSH_BACK: &str = "sink push-back";
/// A sink not yet heard from, met at a share of the rate (`throttle.slow_start`).
pub const SLOW_START: &str = "slow start";
/// Every batch slot was busy: the write latency (or the concurrency limit) bound it.
pub const WRITE_LATENCY: &str = "write latency";
/// Nothing more to read for now.
pub const SOURCE: &str = "source";

/// One bound's share of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bound {
    pub by: String,
    pub seconds: f64,
    /// Of all the time accounted, 0 to 1.
    pub share: f64,
}

#[derive(Debug, Clone, Default)]
pub struct BoundedBy {
    spent: Vec<(String, Duration)>,
}

impl BoundedBy {
    pub fn add(&mut self, by: &str, spent: Duration) {
        match self.spent.iter_mut().find(|(name, _)| name == by) {
            Some((_, total)) => *total += spent,
            None => self.spent.push((by.to_string(), spent)),
        }
    }

    /// Each bound with its share, the largest first.
    pub fn bounds(&self) -> Vec<Bound> {
        let all: f64 = self.spent.iter().map(|(_, d)| d.as_secs_f64()).sum();
        let mut bounds: Vec<Bound> = self
            .spent
            .iter()
            .filter(|(_, d)| !d.is_zero())
            .map(|(by, d)| Bound {
                by: by.clone(),
                seconds: (d.as_secs_f64() * 1000.0).round() / 1000.0,
                share: d.as_secs_f64() / all,
            })
            .collect();
        bounds.sort_by(|a, b| b.share.total_cmp(&a.share).then(a.by.cmp(&b.by)));
        bounds
    }
}

/// "rate.records_per_second 62%, canary 30%, sink push-back 8%".
pub fn describe(bounds: &[Bound]) -> String {
    bounds
        .iter()
        .map(|b| format!("{} {:.0}%", b.by, b.share * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the configured ceiling bounded (nearly) the whole run: 90% of its time or more
/// (the last tick, which finds the source empty, is the source's). Slow start's climb to
/// a ceiling that then bound the rest counts as the ceiling's: without a push-back it
/// ends there.
pub fn ceiling_all_along(bounds: &[Bound]) -> bool {
    let share = |by: &str| {
        bounds
            .iter()
            .filter(|b| b.by == by)
            .map(|b| b.share)
            .sum::<f64>()
    };
    share(CEILING) > 0.0 && share(CEILING) + share(SLOW_START) >= 0.9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_of_the_time_largest_first() {
        let ms = Duration::from_millis;
        let mut b = BoundedBy::default();
        assert!(b.bounds().is_empty());
        b.add(CEILING, ms(400));
        b.add("sink push-back", ms(80));
        b.add("canary", ms(300));
        b.add(CEILING, ms(220));
        b.add("write latency", ms(0));
        let bounds = b.bounds();
        assert_eq!(
            describe(&bounds),
            "rate.records_per_second 62%, canary 30%, sink push-back 8%"
        );
        assert_eq!(bounds[0].seconds, 0.62);
        assert!(!ceiling_all_along(&bounds));
        let mut all = BoundedBy::default();
        all.add(CEILING, ms(9_000));
        all.add("source", ms(1_000));
        assert!(ceiling_all_along(&all.bounds()));
        all.add("source", ms(100));
        assert!(!ceiling_all_along(&all.bounds()));
        let mut climbed = BoundedBy::default();
        climbed.add(SLOW_START, ms(800));
        climbed.add(CEILING, ms(3_600));
        climbed.add("source", ms(200));
        assert!(ceiling_all_along(&climbed.bounds()));
    }
}
