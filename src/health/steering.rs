//! The probes that steer: each with a `target` has a [`ProbeTarget`] whose rate the
//! pipeline takes at every tick (the lowest wins), and a canary's limits wait for its
//! baseline, measured before the first write, to be resolved.

use super::settings::ProbeSettings;
use super::{Health, Probe};
use crate::control::health::{ProbeLimits, Why};
use crate::control::probe_target::{ProbeTarget, TargetParams};
use crate::lock::lock;

/// The gate's limits, given the baseline relative limits multiply.
pub(super) fn limits_of(p: &ProbeSettings, baseline: Option<f64>) -> ProbeLimits {
    ProbeLimits {
        max: p.max(baseline),
        resume_ratio: p.resume_ratio,
        critical: p.critical(baseline),
        stale_after: p.stale_after(),
    }
}

/// Steering under `target` for the probe `p`: paced per what one reading reaches back
/// over (a canary's window, another probe's interval).
pub(super) fn steer_under(p: &ProbeSettings, target: f64) -> ProbeTarget {
    let memory = if p.is_canary() {
        p.window()
    } else {
        p.interval()
    };
    ProbeTarget::new(
        target,
        TargetParams {
            memory,
            ..TargetParams::default()
        },
    )
}

impl Probe {
    /// What holds the writes, said for this probe.
    pub(super) fn describe(&self, why: &Why, limits: ProbeLimits) -> String {
        match why {
            Why::Unknown if self.config.is_canary() => format!(
                "{} is measuring its baseline ({:?} of {}, {})",
                self.name,
                self.config.window(),
                self.config.query.as_deref().unwrap_or("SELECT 1"),
                if lock(&self.baseline).is_some() {
                    "again: over its target at the least rate, the writes did not hold it up"
                } else {
                    "before the first write"
                }
            ),
            _ => super::describe(&self.name, self.unit, why, limits),
        }
    }
}

impl Health {
    /// `rate = "off"`: the targets are shown, but steer nothing.
    pub fn without_steering(mut self) -> Self {
        self.steering = false;
        self
    }

    /// The canary `index` measured `baseline` (seconds) with nothing written (before the
    /// first write, or with the writes held): its relative limits and target are resolved
    /// against it. Measured again, the steering starts over from it.
    pub fn set_baseline(&self, index: usize, baseline: f64) {
        let probe = &self.probes[index];
        let now = self.now();
        let before = lock(&probe.baseline).replace((now, baseline));
        lock(&probe.gate).set_limits(limits_of(&probe.config, Some(baseline)));
        let target = probe.config.target(Some(baseline));
        let mut steer = lock(&probe.steer);
        if before.is_some() || steer.as_ref().map(ProbeTarget::target) != target {
            *steer = target.map(|t| steer_under(&probe.config, t));
        }
        if let Some(steer) = steer.as_mut() {
            steer.set_floor(baseline);
        }
        let when = match before {
            None => "before the first write".to_string(),
            Some((_, was)) => format!("with the writes held (it was {:.2} ms)", was * 1000.0),
        };
        tracing::info!(
            probe = %probe.name,
            "baseline p{:.0} = {:.2} ms, of {} windows of {:?}, {when}{}",
            probe.config.quantile() * 100.0,
            baseline * 1000.0,
            super::probe::BASELINE_WINDOWS,
            probe.config.window(),
            target.map_or(String::new(), |t| format!(
                "; the rate is steered to keep it under {:.2} ms",
                t * 1000.0
            ))
        );
    }

    /// The lowest rate the probes' targets allow now, and the probe that sets it; None
    /// without targets (or with `rate = "off"`).
    pub fn steered_rate(&self) -> Option<(String, f64)> {
        if !self.steering {
            return None;
        }
        self.probes
            .iter()
            .filter_map(|p| Some((p.name.clone(), lock(&p.steer).as_ref()?.rate())))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }
}
