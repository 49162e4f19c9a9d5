//! `[concurrency]`: how many writes may be in flight — a fixed number, or a limit that
//! adapts to the sink's latency (aimd, vegas, gradient2) — and the limit it builds. Its
//! defaults are the algorithms' own ([`AimdParams::default`]), declared once.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ConcurrencyLimit;
use super::aimd::{AimdLimit, AimdParams};
use super::fixed::FixedLimit;
use super::gradient2::Gradient2Limit;
use super::vegas::VegasLimit;
use crate::settings::bounds::{MOST_IN_FLIGHT, MOST_WINDOW};
use crate::settings::{HumanDuration, Problems};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ConcurrencyAlgorithm {
    #[default]
    Fixed,
    Aimd,
    Vegas,
    Gradient2,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ConcurrencySettings {
    /// How the batches in flight are limited: `fixed` at `max`, or adapted to the write
    /// latency (`aimd`, `vegas`, `gradient2`).
    pub algorithm: ConcurrencyAlgorithm,
    /// Most batches in flight at once (the limit itself with `fixed`).
    pub max: usize,
    /// Where an adaptive limit starts (between `min` and `max`); unset: 4, or the nearest
    /// of `min` and `max` when 4 is outside them.
    pub initial: Option<usize>,
    /// An adaptive limit's floor.
    pub min: usize,
    /// aimd: the latency the judged percentile must stay under.
    #[schemars(with = "HumanDuration")]
    #[serde(with = "humantime_serde")]
    pub target_latency: Duration,
    /// aimd: the percentile of the window judged (0.95 = p95).
    pub percentile: f64,
    /// aimd: samples per judgement (at least `2 / (1 − percentile)`: 40 at p95).
    pub window: usize,
    /// aimd: added to the limit while the latency is under target and the limit is used.
    pub increase: f64,
    /// aimd: the limit is multiplied by this when the target is missed or a write is dropped.
    pub backoff_ratio: f64,
    /// vegas, gradient2: share of a new estimate taken each time (1.0 = all).
    pub smoothing: f64,
    /// gradient2: how much slower than the long-term average is still fine.
    pub tolerance: f64,
    /// gradient2: writes allowed to queue at the sink.
    pub queue: f64,
    /// Adaptive algorithms: a write still running while the writes in flight exceed twice
    /// the limit (or twice what the sink lately answered in good time) is cut after 4
    /// typical round trips (at least 1 s), and writes sent again after no answer wait for
    /// a place under the limit; `false` leaves every write to `sink.timeout`.
    pub cut_overdue: bool,
}

impl Default for ConcurrencySettings {
    fn default() -> Self {
        let aimd = AimdParams::default();
        ConcurrencySettings {
            algorithm: ConcurrencyAlgorithm::Fixed,
            max: aimd.max,
            initial: None,
            min: aimd.min,
            target_latency: aimd.target,
            percentile: aimd.percentile,
            window: aimd.window,
            increase: aimd.increase,
            backoff_ratio: aimd.backoff_ratio,
            smoothing: 0.2,
            tolerance: 1.5,
            queue: 1.0,
            cut_overdue: true,
        }
    }
}

impl ConcurrencySettings {
    /// Whether overdue writes are cut: only a limit that adapts can act on the drop.
    pub fn cuts_overdue(&self) -> bool {
        self.cut_overdue && self.algorithm != ConcurrencyAlgorithm::Fixed
    }

    /// Where an adaptive limit starts.
    pub fn initial(&self) -> usize {
        self.initial
            .unwrap_or(AimdParams::default().initial.max(self.min).min(self.max))
    }

    pub(crate) fn validate(&self, p: &mut Problems) {
        p.count("concurrency.max", self.max as u64, 1, MOST_IN_FLIGHT);
        p.count("concurrency.min", self.min as u64, 1, MOST_IN_FLIGHT);
        if self.min > self.max {
            p.add(
                "concurrency.min",
                format!(
                    "must not exceed concurrency.max ({} > {})",
                    self.min, self.max
                ),
            );
        }
        if let Some(initial) = self.initial
            && !(self.min..=self.max).contains(&initial)
        {
            p.add(
                "concurrency.initial",
                format!(
                    "must be between concurrency.min and concurrency.max ({}..={}), got {initial}",
                    self.min, self.max
                ),
            );
        }
        p.positive_duration("concurrency.target_latency", self.target_latency);
        if !(self.percentile.is_finite() && self.percentile > 0.0 && self.percentile <= 1.0) {
            p.add(
                "concurrency.percentile",
                format!("must be in (0, 1], got {}", self.percentile),
            );
        } else if self.percentile < 1.0 && 2.0 / (1.0 - self.percentile) > MOST_WINDOW as f64 {
            // Judging a percentile p takes at least 2 / (1 − p) samples.
            p.add(
                "concurrency.percentile",
                format!(
                    "judging it would take more than {MOST_WINDOW} samples: at most {} (or 1)",
                    1.0 - 2.0 / MOST_WINDOW as f64
                ),
            );
        }
        p.count("concurrency.window", self.window as u64, 1, MOST_WINDOW);
        p.within(
            "concurrency.increase",
            self.increase,
            0.0,
            MOST_IN_FLIGHT as f64,
        );
        if !(self.backoff_ratio.is_finite() && self.backoff_ratio > 0.0 && self.backoff_ratio < 1.0)
        {
            p.add(
                "concurrency.backoff_ratio",
                format!(
                    "must be between 0 and 1 (exclusive), got {}",
                    self.backoff_ratio
                ),
            );
        }
        if !(self.smoothing.is_finite() && self.smoothing > 0.0 && self.smoothing <= 1.0) {
            p.add(
                "concurrency.smoothing",
                format!("must be in (0, 1], got {}", self.smoothing),
            );
        }
        p.within("concurrency.tolerance", self.tolerance, 1.0, 100.0);
        p.within("concurrency.queue", self.queue, 0.0, MOST_IN_FLIGHT as f64);
    }

    /// AIMD's parameters as configured.
    pub fn aimd(&self) -> AimdParams {
        AimdParams {
            initial: self.initial(),
            min: self.min,
            max: self.max,
            increase: self.increase,
            backoff_ratio: self.backoff_ratio,
            target: self.target_latency,
            percentile: self.percentile,
            window: self.window,
        }
    }

    /// The limit this configuration describes; `validate` has held `min ≤ initial ≤ max`.
    pub fn build(&self) -> Box<dyn ConcurrencyLimit> {
        let initial = self.initial();
        match self.algorithm {
            ConcurrencyAlgorithm::Fixed => Box::new(FixedLimit(self.max)),
            ConcurrencyAlgorithm::Aimd => Box::new(AimdLimit::new(self.aimd())),
            ConcurrencyAlgorithm::Vegas => Box::new(VegasLimit::new(
                initial,
                self.min,
                self.max,
                self.smoothing,
                rand::random(),
            )),
            ConcurrencyAlgorithm::Gradient2 => Box::new(Gradient2Limit::new(
                initial,
                self.min,
                self.max,
                self.smoothing,
                self.tolerance,
                self.queue,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unit tests of `aimd` start from `AimdParams::default()`: a worker configured
    /// with nothing runs on those same numbers.
    #[test]
    fn an_unset_concurrency_table_is_aimd_on_its_tested_defaults() {
        assert_eq!(ConcurrencySettings::default().aimd(), AimdParams::default());
    }
}
