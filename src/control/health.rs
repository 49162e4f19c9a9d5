//! Whether a database-health probe lets new writes go: held while its value is above
//! `max` and until it falls back under `max × resume_ratio` (so a value hovering at the
//! limit does not flap the worker on and off), stopped for good once it is above
//! `critical`. A probe that cannot run, has not answered yet, or whose last answer is
//! older than it should be counts as over `max`: the database's health is unknown, and
//! unknown is not healthy. Pure: the time comes in as an argument.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeLimits {
    pub max: f64,
    pub resume_ratio: f64,
    pub critical: Option<f64>,
    /// A reading older than this no longer says anything: the probe is stuck.
    pub stale_after: Duration,
}

/// What one run of the probe gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    Value(f64),
    /// It could not run (no connection, an error, no number, too slow); why.
    Failed(String),
}

/// Why a probe holds the writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Why {
    /// Its value is above `max`, or has not fallen under the resume threshold yet.
    Over(f64),
    Failed(String),
    /// No reading yet.
    Unknown,
    /// The last reading is older than `stale_after`.
    Stale(Duration),
}

#[derive(Debug, Clone, PartialEq)]
pub enum ProbeState {
    Clear,
    Held(Why),
    /// Above `critical`: the worker stops. Latched: a later low value does not undo it.
    Critical(f64),
}

#[derive(Debug, Clone)]
pub struct ProbeGate {
    limits: ProbeLimits,
    held: bool,
    last: Option<(Duration, Reading)>,
    critical: Option<f64>,
}

impl ProbeGate {
    pub fn new(limits: ProbeLimits) -> Self {
        ProbeGate {
            limits,
            held: false,
            last: None,
            critical: None,
        }
    }

    pub fn limits(&self) -> ProbeLimits {
        self.limits
    }

    /// New limits (a canary's, once its baseline is measured), judged from the next reading.
    pub fn set_limits(&mut self, limits: ProbeLimits) {
        self.limits = limits;
    }

    /// Nothing read yet, as before the first run: held, for a value that is being measured
    /// again (a canary's baseline).
    pub fn forget(&mut self) {
        self.last = None;
        self.held = false;
    }

    /// The last value read, if the last run gave one.
    pub fn value(&self) -> Option<f64> {
        match &self.last {
            Some((_, Reading::Value(v))) => Some(*v),
            _ => None,
        }
    }

    pub fn observe(&mut self, now: Duration, reading: Reading) {
        match &reading {
            Reading::Value(v) => {
                let v = *v;
                if self.limits.critical.is_some_and(|c| v > c) {
                    self.critical.get_or_insert(v);
                }
                if v > self.limits.max {
                    self.held = true;
                } else if v <= self.limits.max * self.limits.resume_ratio {
                    self.held = false;
                }
            }
            Reading::Failed(_) => self.held = true,
        }
        self.last = Some((now, reading));
    }

    pub fn state(&self, now: Duration) -> ProbeState {
        if let Some(v) = self.critical {
            return ProbeState::Critical(v);
        }
        let Some((at, reading)) = &self.last else {
            return ProbeState::Held(Why::Unknown);
        };
        let age = now.saturating_sub(*at);
        if age > self.limits.stale_after {
            return ProbeState::Held(Why::Stale(age));
        }
        match reading {
            Reading::Failed(why) => ProbeState::Held(Why::Failed(why.clone())),
            Reading::Value(v) if self.held => ProbeState::Held(Why::Over(*v)),
            Reading::Value(_) => ProbeState::Clear,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: f64) -> Duration {
        Duration::from_secs_f64(n)
    }

    fn gate(critical: Option<f64>) -> ProbeGate {
        ProbeGate::new(ProbeLimits {
            max: 2.0,
            resume_ratio: 0.5,
            critical,
            stale_after: s(3.0),
        })
    }

    #[test]
    fn held_until_the_first_reading_which_is_judged_against_max() {
        let mut g = gate(None);
        assert_eq!(g.state(s(0.0)), ProbeState::Held(Why::Unknown));
        g.observe(s(1.0), Reading::Value(1.9));
        assert_eq!(g.state(s(1.0)), ProbeState::Clear);
        let mut g = gate(None);
        g.observe(s(1.0), Reading::Value(2.1));
        assert_eq!(g.state(s(1.0)), ProbeState::Held(Why::Over(2.1)));
    }

    #[test]
    fn above_max_holds_and_only_under_max_times_resume_ratio_releases() {
        let mut g = gate(None);
        g.observe(s(0.0), Reading::Value(0.0));
        assert_eq!(g.state(s(0.0)), ProbeState::Clear);
        g.observe(s(1.0), Reading::Value(2.0));
        assert_eq!(g.state(s(1.0)), ProbeState::Clear, "at max is not above it");
        g.observe(s(2.0), Reading::Value(2.5));
        assert_eq!(g.state(s(2.0)), ProbeState::Held(Why::Over(2.5)));
        for (t, v) in [(3.0, 1.9), (4.0, 1.5), (5.0, 1.01)] {
            g.observe(s(t), Reading::Value(v));
            assert_eq!(g.state(s(t)), ProbeState::Held(Why::Over(v)), "at {v}");
        }
        g.observe(s(6.0), Reading::Value(1.0));
        assert_eq!(g.state(s(6.0)), ProbeState::Clear);
        g.observe(s(7.0), Reading::Value(1.9));
        assert_eq!(g.state(s(7.0)), ProbeState::Clear, "under max: stays clear");
    }

    #[test]
    fn a_probe_that_cannot_run_holds_and_must_come_back_under_the_resume_threshold() {
        let mut g = gate(None);
        g.observe(s(0.0), Reading::Value(0.1));
        g.observe(s(1.0), Reading::Failed("connection refused".into()));
        assert_eq!(
            g.state(s(1.0)),
            ProbeState::Held(Why::Failed("connection refused".into()))
        );
        g.observe(s(2.0), Reading::Value(1.5));
        assert_eq!(g.state(s(2.0)), ProbeState::Held(Why::Over(1.5)));
        g.observe(s(3.0), Reading::Value(0.2));
        assert_eq!(g.state(s(3.0)), ProbeState::Clear);
    }

    #[test]
    fn a_reading_older_than_stale_after_holds() {
        let mut g = gate(None);
        g.observe(s(10.0), Reading::Value(0.1));
        assert_eq!(g.state(s(13.0)), ProbeState::Clear);
        assert_eq!(g.state(s(13.5)), ProbeState::Held(Why::Stale(s(3.5))));
        g.observe(s(14.0), Reading::Value(0.1));
        assert_eq!(g.state(s(14.0)), ProbeState::Clear);
    }

    #[test]
    fn critical_latches_with_the_value_that_crossed_it() {
        let mut g = gate(Some(10.0));
        g.observe(s(0.0), Reading::Value(9.0));
        assert_eq!(g.state(s(0.0)), ProbeState::Held(Why::Over(9.0)));
        g.observe(s(1.0), Reading::Value(10.5));
        assert_eq!(g.state(s(1.0)), ProbeState::Critical(10.5));
        g.observe(s(2.0), Reading::Value(0.0));
        g.observe(s(3.0), Reading::Value(11.0));
        assert_eq!(g.state(s(3.0)), ProbeState::Critical(10.5));
        // A failure is never critical: it is unknown, not known to be bad.
        let mut g = gate(Some(10.0));
        g.observe(s(0.0), Reading::Failed("timeout".into()));
        assert!(matches!(g.state(s(0.0)), ProbeState::Held(_)));
    }
}
