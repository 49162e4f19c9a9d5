//! How the rate climbs back after a throttle cut it. CUBIC (as the AWS SDKs' adaptive retry
//! mode uses it) returns quickly to just under the rate that was throttled, lingers there,
//! then probes beyond it; linear climbs at a steady pace, for sinks that punish probing.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Recovery {
    /// `rate(t) = scale · (t − K)³ + Wmax`, `K = ∛(Wmax · (1 − β) / scale)`, t in seconds,
    /// rates in records per second. At t = 0 this is β · Wmax; at t = K it is Wmax again.
    Cubic { scale: f64 },
    /// `rate(t) = β · Wmax + step · ceiling · t`: `step` is the share of the configured
    /// rate regained per second.
    Linear { step: f64 },
}

impl Recovery {
    /// The rate `elapsed` after a cut from `w_max` to `beta × w_max`; unclamped.
    pub fn rate(&self, w_max: f64, beta: f64, ceiling: f64, elapsed: Duration) -> f64 {
        let t = elapsed.as_secs_f64();
        match *self {
            Recovery::Cubic { scale } => {
                let k = (w_max * (1.0 - beta) / scale).cbrt();
                scale * (t - k).powi(3) + w_max
            }
            Recovery::Linear { step } => beta * w_max + step * ceiling * t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn cubic_starts_at_beta_wmax_and_is_back_at_wmax_after_k() {
        let c = Recovery::Cubic { scale: 0.4 };
        // Wmax 1000 rec/s: K = ∛(1000 · 0.3 / 0.4) = ∛750 ≈ 9.086 s.
        let k = 750f64.cbrt();
        assert!((c.rate(1000.0, 0.7, 2000.0, secs(0.0)) - 700.0).abs() < 1e-9);
        assert!((c.rate(1000.0, 0.7, 2000.0, secs(k)) - 1000.0).abs() < 1e-9);
        // Concave below Wmax, convex above it: half-way it has regained most of the cut.
        let half = c.rate(1000.0, 0.7, 2000.0, secs(k / 2.0));
        assert!((half - (1000.0 - 300.0 / 8.0)).abs() < 1e-6, "{half}");
        let after = c.rate(1000.0, 0.7, 2000.0, secs(k + 5.0));
        assert!((after - (1000.0 + 0.4 * 125.0)).abs() < 1e-6, "{after}");
    }

    #[test]
    fn linear_climbs_a_share_of_the_ceiling_per_second() {
        let l = Recovery::Linear { step: 0.05 };
        assert_eq!(l.rate(1000.0, 0.7, 2000.0, secs(0.0)), 700.0);
        assert!((l.rate(1000.0, 0.7, 2000.0, secs(3.0)) - 1000.0).abs() < 1e-9);
    }
}
