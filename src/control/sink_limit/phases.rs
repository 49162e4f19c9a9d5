//! How the sink limit's phases end: an experiment that showed requests or not, a probe
//! the sink took, a quiet spell that starts the next probe.

use std::time::Duration;

use super::{Binding, PerUnit, Phase, SinkLimit, Unit};

impl SinkLimit {
    /// Ends phases whose time is up.
    pub(super) fn advance(&mut self, now: Duration) {
        self.settle(now, false);
        match self.phase {
            Phase::Experiment {
                until,
                requests_per_second,
                shows,
                took_requests,
                started: (at, before),
                ..
            } if now >= until => {
                let taken = self.taken.since(before, now.saturating_sub(at));
                if taken.get(Unit::Records).is_none_or(|r| r < shows) {
                    // Not throttled, but the sink took no more records than before: no
                    // evidence against volume.
                    self.end_experiment(now);
                    return;
                }
                // More records taken, in fewer requests, without throttles: requests. The
                // requests the sink took across the push-back that began it were measured
                // with its reserve empty at both ends: its capacity, as a volume limit is.
                self.limits = PerUnit::default();
                self.limits.set(
                    Unit::Requests,
                    Some(took_requests.max(requests_per_second / self.params.hold)),
                );
                self.binding = Some(Binding::Only(Unit::Requests));
                self.volume_learned = None;
                self.phase = Phase::Hold { quiet_since: now };
            }
            Phase::Probe { until } if now >= until => {
                // The sink took the probe: what it took is the new limit.
                let factor = self.params.probe_gain;
                for unit in Unit::ALL {
                    let binding = match self.binding {
                        Some(Binding::Volume) => unit != Unit::Requests,
                        Some(Binding::Only(u)) => u == unit,
                        None => false,
                    };
                    if binding && let Some(limit) = self.limits.get(unit) {
                        self.limits.set(unit, Some(limit * factor));
                    }
                }
                self.phase = Phase::Hold { quiet_since: now };
            }
            Phase::Hold { quiet_since }
                if !self.in_outage
                    && self
                        .resumed_at
                        .is_none_or(|at| now >= at + self.params.resume_within)
                    && now >= quiet_since + self.params.probe_every =>
            {
                self.phase = Phase::Probe {
                    until: now + self.params.probe_for,
                };
            }
            _ => {}
        }
        if self
            .resumed_at
            .is_some_and(|at| now >= at + self.params.resume_within)
        {
            self.resumed_at = None;
        }
    }
}
