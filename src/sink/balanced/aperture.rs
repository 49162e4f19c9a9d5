//! `[sink.balance.aperture]`: the subset's bounds and load band, and in deterministic mode
//! where this worker stands among its peers — from the config, `SLUICE_WORKER_INDEX` and
//! `SLUICE_WORKER_COUNT`, or a StatefulSet pod's hostname (`sluice-3` is worker 3).

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::control::balance::aperture::{Mode, Settings};
use crate::control::balance::ring::Coordinate;
use crate::settings::{ConfigError, HumanDuration, Problems};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ApertureSettings {
    /// How the subset is chosen.
    #[schemars(with = "super::schema::ApertureMode")]
    pub mode: Mode,
    /// Fewest endpoints in the subset.
    pub min: usize,
    /// Most endpoints in the subset; absent: all of them if the load asks for it.
    pub max: Option<usize>,
    /// Requests in flight per endpoint of the subset at or under which it narrows.
    pub low_load: f64,
    /// … and at or over which it widens.
    pub high_load: f64,
    /// How long the load is smoothed over before the subset follows it.
    #[schemars(with = "HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// Deterministic mode: this worker's index, 0-based (else `SLUICE_WORKER_INDEX`, else
    /// the ordinal ending the hostname).
    pub worker_index: Option<u32>,
    /// Deterministic mode: how many workers share the endpoints (else
    /// `SLUICE_WORKER_COUNT`).
    pub worker_count: Option<u32>,
}

impl Default for ApertureSettings {
    fn default() -> Self {
        let s = Settings::default();
        ApertureSettings {
            mode: Mode::default(),
            min: s.min,
            max: s.max,
            low_load: s.low,
            high_load: s.high,
            window: s.window,
            worker_index: None,
            worker_count: None,
        }
    }
}

pub const INDEX_VAR: &str = "SLUICE_WORKER_INDEX";
pub const COUNT_VAR: &str = "SLUICE_WORKER_COUNT";

impl ApertureSettings {
    pub fn settings(&self) -> Settings {
        Settings {
            min: self.min,
            max: self.max,
            low: self.low_load,
            high: self.high_load,
            window: self.window,
        }
    }

    pub fn validate(&self, env: &dyn Fn(&str) -> Option<String>, p: &mut Problems) {
        if self.min == 0 {
            p.add("sink.balance.aperture.min", "must be at least 1");
        }
        if let Some(max) = self.max
            && max < self.min
        {
            p.add(
                "sink.balance.aperture.min",
                format!("{} exceeds sink.balance.aperture.max ({max})", self.min),
            );
        }
        if !(self.low_load.is_finite() && self.low_load >= 0.0) {
            p.add("sink.balance.aperture.low_load", "must be a number ≥ 0");
        }
        if !(self.high_load.is_finite() && self.high_load > self.low_load) {
            p.add(
                "sink.balance.aperture.high_load",
                format!(
                    "must be a number above sink.balance.aperture.low_load ({})",
                    self.low_load
                ),
            );
        }
        p.positive_duration("sink.balance.aperture.window", self.window);
        p.check(self.coordinate(env).map(|_| ()));
    }

    /// This worker's place on the ring in deterministic mode; None in random mode.
    pub fn coordinate(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Coordinate>, ConfigError> {
        if self.mode != Mode::Deterministic {
            return Ok(None);
        }
        let number = |var: &'static str| -> Result<Option<u32>, ConfigError> {
            env(var)
                .map(|v| {
                    v.trim().parse::<u32>().map_err(|_| {
                        ConfigError::invalid(var, format!("{v:?} is not a worker number"))
                    })
                })
                .transpose()
        };
        let ordinal = || {
            env("HOSTNAME").and_then(|h| {
                let (_, n) = h.trim().rsplit_once('-')?;
                n.parse::<u32>().ok()
            })
        };
        let index = match self.worker_index {
            Some(i) => Some(i),
            None => number(INDEX_VAR)?.or_else(ordinal),
        };
        let count = match self.worker_count {
            Some(n) => Some(n),
            None => number(COUNT_VAR)?,
        };
        let index = index.ok_or_else(|| {
            ConfigError::invalid(
                "sink.balance.aperture.worker_index",
                format!(
                    "mode = \"deterministic\" needs this worker's index: set it, {INDEX_VAR}, or run as a StatefulSet pod (hostname ending in -N)"
                ),
            )
        })?;
        let count = count.ok_or_else(|| {
            ConfigError::invalid(
                "sink.balance.aperture.worker_count",
                format!(
                    "mode = \"deterministic\" needs the number of workers: set it or {COUNT_VAR}"
                ),
            )
        })?;
        if count == 0 {
            return Err(ConfigError::invalid(
                "sink.balance.aperture.worker_count",
                "must be at least 1",
            ));
        }
        if index >= count {
            return Err(ConfigError::invalid(
                "sink.balance.aperture.worker_index",
                format!("{index} is not below the worker count ({count}); indexes count from 0"),
            ));
        }
        Ok(Some(Coordinate { index, count }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::only_key;

    fn deterministic() -> ApertureSettings {
        ApertureSettings {
            mode: Mode::Deterministic,
            ..ApertureSettings::default()
        }
    }

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_coordinate_comes_from_config_then_variables_then_the_hostname() {
        let c = ApertureSettings {
            worker_index: Some(2),
            worker_count: Some(6),
            ..deterministic()
        };
        let none = env(&[]);
        assert_eq!(
            c.coordinate(&none).unwrap(),
            Some(Coordinate { index: 2, count: 6 })
        );
        let vars = env(&[(INDEX_VAR, "4"), (COUNT_VAR, "5"), ("HOSTNAME", "sluice-1")]);
        assert_eq!(
            deterministic().coordinate(&vars).unwrap(),
            Some(Coordinate { index: 4, count: 5 })
        );
        let pod = env(&[(COUNT_VAR, "5"), ("HOSTNAME", "ingest-sluice-3")]);
        assert_eq!(
            deterministic().coordinate(&pod).unwrap(),
            Some(Coordinate { index: 3, count: 5 })
        );
        assert_eq!(ApertureSettings::default().coordinate(&none).unwrap(), None);
    }

    #[test]
    fn each_problem_names_its_key() {
        let none = env(&[]);
        let check = |c: ApertureSettings| only_key(|p| c.validate(&env(&[]), p));
        assert_eq!(
            check(ApertureSettings {
                min: 5,
                max: Some(3),
                ..ApertureSettings::default()
            }),
            "sink.balance.aperture.min"
        );
        assert_eq!(
            check(ApertureSettings {
                worker_index: Some(6),
                worker_count: Some(6),
                ..deterministic()
            }),
            "sink.balance.aperture.worker_index"
        );
        assert_eq!(
            check(ApertureSettings {
                worker_index: Some(0),
                ..deterministic()
            }),
            "sink.balance.aperture.worker_count"
        );
        assert_eq!(
            check(ApertureSettings {
                low_load: 3.0,
                ..ApertureSettings::default()
            }),
            "sink.balance.aperture.high_load"
        );
        let bad = env(&[(INDEX_VAR, "first"), (COUNT_VAR, "2")]);
        let err = deterministic().coordinate(&bad).unwrap_err().to_string();
        assert!(err.contains(INDEX_VAR), "{err}");
        assert!(
            deterministic().coordinate(&none).is_err(),
            "no index anywhere"
        );
    }
}
