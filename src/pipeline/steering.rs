//! How the loop is steered between ticks: the rate and batch size the sink's push-back,
//! the operator and the capacity allow, the batch slots the concurrency limit opens, and
//! how much the source may prefetch for them.

use std::sync::atomic::Ordering::Relaxed;

use super::Pipeline;
use crate::control::bounded_by::{CEILING, SINK_PUSH_BACK, SLOW_START};
use crate::settings::bounds::MOST_RATE;
use crate::source::SourceError;

impl Pipeline {
    /// Right after a tick's take, the rate and batch size for the ticks to come: the
    /// target (static, leased, or the source's share of a capacity), capped by the
    /// worker's own ceiling, the operator's controls and the probes' targets, then scaled
    /// by what the sink's push-back allows. The one place the cadence's rate is set; the
    /// next tick gets exactly one new quantum at it (planned mid-tick, on an answer that
    /// grew slow start's share, the rest of the tick accrues at the new rate), and what set
    /// it is noted (for "bounded by").
    pub(super) async fn replan(&mut self, banked: &mut u64) -> Result<(), SourceError> {
        let (quantum, before) = (self.cadence.quantum(), self.batch);
        if let Some((capacity, reserved)) = self.options.capacity_by_share
            && let Some(share) = self.source.capacity_share()
        {
            // Nothing assigned: keep pulling at a trickle, since pulling is what joins
            // the group (and a worker with no partitions pulls nothing).
            let rate = capacity * share + reserved;
            self.target_rate
                .set(if share == 0.0 { rate.max(1.0) } else { rate });
        }
        let controls = self.health.controls().get();
        self.max_batch = controls.batch.unwrap_or(self.options.max_batch);
        let target = self.target_rate.get();
        let steered = self.health.steered_rate();
        let (ceiling, by) = [
            (self.options.rate_ceiling, CEILING),
            (controls.rate, "operator"),
            (steered.as_ref().map(|(_, rate)| *rate), {
                steered.as_ref().map_or("", |(name, _)| name.as_str())
            }),
        ]
        .into_iter()
        .filter_map(|(rate, by)| Some((rate?, by)))
        .fold((target, self.target_by), |(low, low_by), (rate, by)| {
            if rate < low {
                (rate, by)
            } else {
                (low, low_by)
            }
        });
        self.pressure.set_ceiling(ceiling);
        let plan = self.pressure.plan(
            self.cadence.tick(),
            self.max_batch,
            self.options.max_batch_bytes,
        );
        self.rate_by = if plan.records_per_second < ceiling * 0.99 {
            if self.pressure.is_slow_starting() {
                SLOW_START
            } else {
                SINK_PUSH_BACK
            }
            .to_string()
        } else if ceiling >= MOST_RATE {
            // No ceiling at all: whatever binds is not a rate.
            String::new()
        } else {
            by.to_string()
        };
        self.cadence
            .set_rate_in_parts(plan.records_per_second, plan.parts);
        self.batch = plan.batch.max(1);
        // Unused grants never add up to more than a batch (or a tick's worth).
        *banked = (*banked).min(self.batch.max(self.cadence.quantum() as usize) as u64);
        self.stats.rate_limit.set(self.cadence.rate());
        if self.cadence.quantum() != quantum || self.batch != before {
            self.source.set_prefetch(self.prefetch()).await?;
        }
        Ok(())
    }

    /// Batches allowed in flight now: the concurrency limit, never above the configured max.
    pub(super) fn max_in_flight(&self) -> usize {
        let limit = self.gate.limit().min(self.options.max_in_flight);
        self.stats.concurrency_limit.store(limit as u64, Relaxed);
        limit
    }

    /// Records the pipeline may hold at once: a batch per slot plus the one being pulled.
    pub(super) fn prefetch(&self) -> usize {
        let batch = (self.cadence.quantum() as usize)
            .max(self.batch)
            .min(self.max_batch)
            .max(1);
        batch * (self.options.max_in_flight + 1)
    }
}
