//! What the emulated database does with a request, given how many are in progress: answer
//! after the latency model's time, or — beyond a hard concurrency limit — defer it (429
//! after the unloaded latency, as Vector's harness defers) or drop it (never answer: the
//! client's timeout ends it). Shared by the HTTP emulator and by in-process models of it.

use std::time::Duration;

use clap::ValueEnum;
use rand::RngExt;

use super::latency::LatencyModel;

/// What happens to a request beyond the concurrency limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Action {
    /// Answered 429 (no Retry-After) after the unloaded latency.
    Defer,
    /// Never answered.
    Drop,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overload {
    pub latency: LatencyModel,
    /// More concurrent requests than this meet `action`.
    pub limit: Option<(u32, Action)>,
}

/// The fate of one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Answer {
    /// Taken, answered after this long.
    Take(Duration),
    /// Refused (429) after this long.
    Defer(Duration),
    /// Never answered.
    Drop,
}

impl Overload {
    /// Flat `base` up to `knee` concurrent requests, then `factor` slower for every `k` more.
    pub fn knee(base: Duration, knee: u32, factor: f64, k: f64) -> Self {
        Overload {
            latency: LatencyModel {
                base,
                knee,
                factor,
                k,
                ..LatencyModel::default()
            },
            limit: None,
        }
    }

    /// The fate of a request arriving with `concurrency` in progress (itself included).
    pub fn answer(&self, concurrency: u32, rng: &mut impl rand::Rng) -> Answer {
        let exp1 = if self.latency.jitter > 0.0 {
            -(1.0 - rng.random::<f64>()).ln()
        } else {
            0.0
        };
        match self.limit {
            Some((limit, Action::Defer)) if concurrency > limit => {
                Answer::Defer(self.latency.delay_drawn(1, exp1))
            }
            Some((limit, Action::Drop)) if concurrency > limit => Answer::Drop,
            _ => Answer::Take(self.latency.delay_drawn(concurrency, exp1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn defers_or_drops_beyond_the_limit() {
        let mut rng = StdRng::seed_from_u64(1);
        let base = Duration::from_millis(100);
        let mut o = Overload::knee(base, 3, 2.0, 1.0);
        assert_eq!(o.answer(5, &mut rng), Answer::Take(base * 4));
        o.limit = Some((5, Action::Defer));
        assert_eq!(o.answer(5, &mut rng), Answer::Take(base * 4));
        assert_eq!(o.answer(6, &mut rng), Answer::Defer(base));
        o.limit = Some((5, Action::Drop));
        assert_eq!(o.answer(6, &mut rng), Answer::Drop);
    }

    #[test]
    fn jitter_averages_its_share_of_the_base() {
        let mut rng = StdRng::seed_from_u64(2);
        let mut o = Overload::knee(Duration::from_millis(100), 100, 2.0, 1.0);
        o.latency.jitter = 0.1;
        let n = 10_000;
        let total: Duration = (0..n)
            .map(|_| match o.answer(1, &mut rng) {
                Answer::Take(d) => d,
                other => panic!("{other:?}"),
            })
            .sum();
        let mean = total.as_secs_f64() / f64::from(n);
        assert!((0.109..0.111).contains(&mean), "{mean}");
    }
}
