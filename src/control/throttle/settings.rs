//! `[throttle]`: how the worker learns what the sink takes, holds under it, probes above
//! it, and pauses when the sink says so. It builds the pause ([`ThrottleParams`]) and the
//! learned limit ([`LimitParams`]); the limit's defaults are `LimitParams::default`, the
//! one its unit tests run on.

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ThrottleParams;
use crate::control::backoff::Backoff;
use crate::control::sink_limit::{FirstContactParams, LimitParams};
use crate::settings::{HumanDuration, Problems};

/// A Retry-After pause is stretched by up to this share of itself unless told.
const DEFAULT_PAUSE_JITTER: f64 = 0.2;
/// The longest pause on a throttle that does not say how long, unless told.
const DEFAULT_MAX_PAUSE: Duration = Duration::from_millis(500);

/// How the worker learns what the sink takes and holds under it (see `control::sink_limit`),
/// and how it pauses when the sink says so.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ThrottleSettings {
    /// The share of a learned limit the worker holds.
    pub hold: f64,
    /// After an outage the worker resumes at this share of its rate (and climbs back
    /// within half a second); a throttle with nothing measured cuts the rate to this share.
    pub beta: f64,
    /// The rate never drops below this share of the configured rate.
    pub min_multiplier: f64,
    /// Quiet time between probes above a learned limit.
    #[schemars(with = "HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub probe_every: Duration,
    /// A probe sends this multiple of the learned limit, for one second.
    pub probe_gain: f64,
    /// A Retry-After pause is stretched by a random share of itself, up to this.
    pub pause_jitter: f64,
    /// The longest pause on a throttle that does not say how long (503 without
    /// Retry-After): how late the worker may notice that a sink which was down is back.
    #[schemars(with = "HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub max_pause: Duration,
    /// Until the sink first pushes back, start at an eighth of the rate, double it per
    /// round of answered writes, and send each tick's worth in up to four parts spread
    /// across the tick, so that a sink of unknown capacity is not overrun by a whole tick.
    /// `false`: the whole rate, a tick's worth at once, from the first tick.
    pub slow_start: bool,
    /// A file where the worker keeps the limit it learned of the sink, to start the next
    /// run against the same sink (kind, URL, table; learned within a day) from `beta` of
    /// it, without slow start: a worker restarted after a kill does not meet an overloaded
    /// sink as a stranger. One file per worker. Unset: beside a file source's checkpoint
    /// (`<checkpoint>.limit`), nowhere for the other sources; `""`: nowhere.
    pub remember: Option<PathBuf>,
}

impl Default for ThrottleSettings {
    fn default() -> Self {
        let limit = LimitParams::default();
        ThrottleSettings {
            hold: limit.hold,
            beta: limit.beta,
            min_multiplier: limit.min_multiplier,
            probe_every: limit.probe_every,
            probe_gain: limit.probe_gain,
            pause_jitter: DEFAULT_PAUSE_JITTER,
            max_pause: DEFAULT_MAX_PAUSE,
            slow_start: limit.first_contact != FirstContactParams::NONE,
            remember: None,
        }
    }
}

impl ThrottleSettings {
    /// The learned limit's tuning: these keys over `LimitParams`' defaults for the rest.
    pub fn limit_params(&self) -> LimitParams {
        LimitParams {
            hold: self.hold,
            beta: self.beta,
            min_multiplier: self.min_multiplier,
            probe_every: self.probe_every,
            probe_gain: self.probe_gain,
            first_contact: if self.slow_start {
                FirstContactParams::default()
            } else {
                FirstContactParams::NONE
            },
            ..LimitParams::default()
        }
    }

    /// The pause: at most one fresh signal per `window` (the tick), and `backoff` when the
    /// sink does not say how long.
    pub fn throttle_params(&self, window: Duration, backoff: Backoff) -> ThrottleParams {
        ThrottleParams {
            window,
            pause_jitter: self.pause_jitter,
            backoff,
        }
    }

    pub(crate) fn validate(&self, p: &mut Problems) {
        let t = self;
        let open_unit = |x: f64| x.is_finite() && x > 0.0 && x < 1.0;
        if !open_unit(t.beta) {
            p.add(
                "throttle.beta",
                format!("must be between 0 and 1 (exclusive), got {}", t.beta),
            );
        }
        if !(t.min_multiplier.is_finite() && t.min_multiplier > 0.0 && t.min_multiplier <= 1.0) {
            p.add(
                "throttle.min_multiplier",
                format!("must be in (0, 1], got {}", t.min_multiplier),
            );
        }
        if !(t.hold.is_finite() && t.hold > 0.0 && t.hold <= 1.0) {
            p.add(
                "throttle.hold",
                format!("must be in (0, 1], got {}", t.hold),
            );
        }
        p.within("throttle.probe_gain", t.probe_gain, 1.0, 1000.0);
        p.positive_duration("throttle.probe_every", t.probe_every);
        p.within("throttle.pause_jitter", t.pause_jitter, 0.0, 1000.0);
        p.positive_duration("throttle.max_pause", t.max_pause);
        if let Some(path) = t.remember.as_ref().filter(|p| !p.as_os_str().is_empty()) {
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            if path.is_dir() {
                p.add("throttle.remember", "must name a file".to_string());
            } else if dir.is_some_and(|d| !d.is_dir()) {
                p.add(
                    "throttle.remember",
                    format!("the directory of {} does not exist", path.display()),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sink limit's unit tests run on `LimitParams::default()`: an unset `[throttle]`
    /// is those same numbers.
    #[test]
    fn an_unset_throttle_table_is_the_limit_its_tests_run_on() {
        assert_eq!(
            ThrottleSettings::default().limit_params(),
            LimitParams::default()
        );
    }
}
