//! A limit a previous run learned of the same sink, as a starting point.

use std::time::Duration;

use super::{Binding, FirstContact, LimitParams, Phase, SinkLimit, Unit};

impl SinkLimit {
    /// Starts from a limit a previous run learned of the same sink (`throttle.remember`):
    /// no slow start, `beta` of it at first and all of it within `resume_within`, as after
    /// an outage, then the usual probes above it. A starting point, not a ceiling.
    pub fn remembered(params: LimitParams, unit: Unit, per_second: f64) -> Self {
        let mut limit = SinkLimit::new(params);
        limit.limits.set(unit, Some(per_second));
        limit.binding = Some(match unit {
            Unit::Records => Binding::Volume,
            other => Binding::Only(other),
        });
        limit.phase = Phase::Hold {
            quiet_since: Duration::ZERO,
        };
        limit.first = FirstContact::over();
        limit.resumed_at = Some(Duration::ZERO);
        limit
    }

    /// The limit that binds now, in its unit, per second: what a later run may start from.
    pub fn learned(&self) -> Option<(Unit, f64)> {
        let unit = self.binding()?;
        Some((unit, self.limits.get(unit)?))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{Setup, drive};
    use super::*;

    /// A worker restarted against a records sink it had learned (800 rec/s, asked four
    /// times that) starts at `beta` of the limit, is back at it within half a second, and
    /// is refused nothing, where one meeting the sink afresh is refused twice (it also
    /// spends the sink's one-second reserve, which the remembering one leaves alone).
    #[test]
    fn a_remembered_limit_starts_at_beta_and_climbs_back_at_once() {
        let mut limit = SinkLimit::remembered(LimitParams::default(), Unit::Records, 800.0);
        let shape = super::super::tests::shape();
        let first = limit.plan(Duration::from_millis(200), 3200.0, shape);
        assert!(!limit.is_slow_starting());
        // 200 ms into the half second back: 0.7 × (1 / 0.7)^0.4 of the limit held.
        assert!(first.records_per_second < 0.97 * 800.0 * 0.85, "{first:?}");
        assert!(first.records_per_second >= 0.7 * 0.97 * 800.0, "{first:?}");
        let later = limit.plan(Duration::from_millis(800), 3200.0, shape);
        assert!(
            (later.records_per_second - 0.97 * 800.0).abs() < 1.0,
            "{later:?}"
        );
        assert_eq!(limit.learned(), Some((Unit::Records, 800.0)));

        let setup = Setup {
            run_for: Duration::from_secs(10),
            ..Setup::new(Unit::Records, 800.0, 3200.0)
        };
        let afresh = drive(setup);
        let remembered = drive(Setup {
            remembered: Some((Unit::Records, 800.0)),
            ..setup
        });
        assert!(
            remembered.throttled < afresh.throttled,
            "{} refused remembering, {} afresh",
            remembered.throttled,
            afresh.throttled
        );
        assert_eq!(remembered.throttled, 0, "{remembered:?}");
        assert!(remembered.sent_per_delivered() <= 1.0, "{remembered:?}");
        let on_target = remembered.on_target(Duration::from_secs(1), setup.run_for, 800.0);
        assert!(on_target >= 0.95, "{on_target}: {remembered:?}");
    }
}
