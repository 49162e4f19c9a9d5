//! How the limit holds, probes, resumes and experiments: its tuning, from `[throttle]`.

use std::time::Duration;

use super::FirstContactParams;

#[derive(Debug, Clone, PartialEq)]
pub struct LimitParams {
    /// The share of a learned limit the worker holds.
    pub hold: f64,
    /// A resumed worker starts at this share of where it was; a cut with nothing
    /// measured takes the rate to this share.
    pub beta: f64,
    /// The record rate never drops below this share of the configured rate.
    pub min_multiplier: f64,
    /// Quiet time between probes above the limit.
    pub probe_every: Duration,
    pub probe_for: Duration,
    /// A probe sends this multiple of the learned limit.
    pub probe_gain: f64,
    /// After an outage, the rate is back where it was this long after the first success.
    pub resume_within: Duration,
    /// A second throttle this soon after one that taught a volume limit, at a record rate
    /// within that limit, contradicts volume.
    pub contradiction_within: Duration,
    /// How long an experiment runs at least.
    pub experiment_for: Duration,
    /// How a sink that has not pushed back yet is met.
    pub first_contact: FirstContactParams,
}

impl Default for LimitParams {
    fn default() -> Self {
        LimitParams {
            hold: 0.97,
            beta: 0.7,
            min_multiplier: 0.05,
            probe_every: Duration::from_secs(10),
            probe_for: Duration::from_secs(1),
            probe_gain: 1.05,
            resume_within: Duration::from_millis(500),
            contradiction_within: Duration::from_secs(3),
            experiment_for: Duration::from_secs(1),
            first_contact: FirstContactParams::default(),
        }
    }
}
